"""The time kinds: cron, frequency and once (their evaluators: cron.py, frequency.py, instants.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from scheduler.domain.basics import (
    MAX_INSTANT_MS,
    InvalidSchedule,
    TimeUnit,
)
from scheduler.domain.triggers.base import TimeTrigger
from scheduler.domain.triggers.kinds.trigger import (
    MAX_CRON_LEN,
    MAX_FREQUENCY_TIME,
    MAX_TIMEZONE_LEN,
    In,
    LeafProgress,
    Reached,
    Trigger,
    _iso,
)


class CronTriggerIn(In):
    type: Literal["cron"]
    expression: str
    timezone: str = "UTC"


@dataclass(frozen=True, slots=True)
class CronTrigger(Trigger):
    """5 fields (minute first) or 6 fields (second first, as in Quartz and Spring)."""

    expression: str
    timezone: str = "UTC"

    tags = ("cron",)
    avro_name = "scheduler.CronTrigger"
    body = CronTriggerIn

    def to_json(self) -> dict[str, Any]:
        return {"type": "cron", "expression": self.expression, "timezone": self.timezone}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CronTrigger:
        return cls(d["expression"], d.get("timezone") or "UTC")

    def to_avro(self) -> dict[str, Any]:
        return {"expression": self.expression, "timezone": self.timezone}

    @classmethod
    def from_avro(cls, rec: dict[str, Any]) -> CronTrigger:
        return cls(rec["expression"], rec["timezone"])

    def describe(self) -> str:
        return f"cron {self.expression}" + (f" ({self.timezone})" if self.timezone != "UTC" else "")

    def validate(self, field: str) -> None:
        from scheduler.domain.triggers.cron import validate_cron

        expression, timezone = self.expression, self.timezone
        if len(expression) > MAX_CRON_LEN or not (expression.isascii() and expression.isprintable()):
            raise InvalidSchedule(
                f"{field}.expression", f"must be at most {MAX_CRON_LEN} printable ASCII characters"
            )
        if len(timezone) > MAX_TIMEZONE_LEN or not (timezone.isascii() and timezone.isprintable()):
            raise InvalidSchedule(f"{field}.timezone", f"unknown time zone {timezone[:MAX_TIMEZONE_LEN]!r}")
        try:
            validate_cron(expression, timezone)
        except InvalidSchedule as exc:
            raise InvalidSchedule(exc.field.replace("trigger", field, 1), exc.message) from None

    def evaluator(self) -> TimeTrigger:
        from scheduler.domain.triggers.cron import cron_evaluator, unparsable

        try:
            return cron_evaluator(self.expression, self.timezone)
        except ValueError as exc:
            # stored before the dialect refused it (croniter took `1-L`): it never fires, the worker lives
            return unparsable(self.expression, self.timezone, str(exc))

    def record(self, lp: LeafProgress, reached: Reached) -> bool:
        if reached.event is not None:
            return False
        lp.fired = True
        return True

    def progress_json(self, lp: LeafProgress, last_job_at: int | None) -> dict[str, Any]:
        return {"type": "time", "fired": lp.fired, "text": self.progress_text(lp)}

    def progress_text(self, lp: LeafProgress) -> str:
        return f"{self.describe()}: {'came due' if lp.fired else 'not due yet'}"


class FrequencyTriggerIn(In):
    type: Literal["frequency"]
    timeUnit: TimeUnit
    time: int = Field(ge=1, le=MAX_FREQUENCY_TIME)
    start: int | None = Field(None, ge=0, le=MAX_INSTANT_MS, description="epoch milliseconds (1970 to 2200)")


_UNIT_WORDS = {"MILLISECONDS": "ms", "SECONDS": "s", "MINUTES": "min", "HOURS": "h", "DAYS": "d"}


@dataclass(frozen=True, slots=True)
class FrequencyTrigger(Trigger):
    """Every `time` x `unit`, from `start_ms` (or the next whole unit after the schedule became active)."""

    unit: TimeUnit
    time: int
    start_ms: int | None = None

    tags = ("frequency",)
    avro_name = "scheduler.FrequencyTrigger"
    body = FrequencyTriggerIn

    def to_json(self) -> dict[str, Any]:
        return {"type": "frequency", "timeUnit": self.unit.value, "time": self.time, "start": self.start_ms}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FrequencyTrigger:
        return cls(TimeUnit(d["timeUnit"]), d["time"], d.get("start"))

    def to_avro(self) -> dict[str, Any]:
        return {"frequency": {"timeUnit": self.unit.value, "time": self.time}, "start": self.start_ms}

    @classmethod
    def from_avro(cls, rec: dict[str, Any]) -> FrequencyTrigger:
        freq = rec["frequency"]
        return cls(TimeUnit(freq["timeUnit"]), freq["time"], rec["start"])

    def describe(self) -> str:
        start = "" if self.start_ms is None else f" from {_iso(self.start_ms)}"
        return f"every {self.time} {_UNIT_WORDS[self.unit.value]}{start}"

    def validate(self, field: str) -> None:
        if not 1 <= self.time <= MAX_FREQUENCY_TIME:
            raise InvalidSchedule(f"{field}.time", f"must be between 1 and {MAX_FREQUENCY_TIME}")
        if self.start_ms is not None and not 0 <= self.start_ms <= MAX_INSTANT_MS:
            raise InvalidSchedule(f"{field}.start", "must be epoch milliseconds between 1970 and 2200")

    def evaluator(self) -> TimeTrigger:
        from scheduler.domain.triggers.frequency import FrequencyEvaluator

        return FrequencyEvaluator(self.unit, self.time, self.start_ms)

    record = CronTrigger.record
    progress_json = CronTrigger.progress_json
    progress_text = CronTrigger.progress_text


class OnceTriggerIn(In):
    type: Literal["once"]
    at: int = Field(ge=0, le=MAX_INSTANT_MS, description="epoch milliseconds (1970 to 2200)")


@dataclass(frozen=True, slots=True)
class OnceTrigger(Trigger):
    """One instant: a one-shot schedule (it is finished once that instant passed)."""

    at_ms: int

    tags = ("once",)
    avro_name = "scheduler.OnceTrigger"
    body = OnceTriggerIn

    def to_json(self) -> dict[str, Any]:
        return {"type": "once", "at": self.at_ms}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> OnceTrigger:
        return cls(d["at"])

    def to_avro(self) -> dict[str, Any]:
        return {"at": self.at_ms}

    @classmethod
    def from_avro(cls, rec: dict[str, Any]) -> OnceTrigger:
        return cls(rec["at"])

    def describe(self) -> str:
        return f"once at {_iso(self.at_ms)}"

    def validate(self, field: str) -> None:
        if not 0 <= self.at_ms <= MAX_INSTANT_MS:
            raise InvalidSchedule(f"{field}.at", "must be epoch milliseconds between 1970 and 2200")

    def evaluator(self) -> TimeTrigger:
        from scheduler.domain.triggers.shaping import Once

        return Once(self.at_ms)

    record = CronTrigger.record
    progress_json = CronTrigger.progress_json
    progress_text = CronTrigger.progress_text
