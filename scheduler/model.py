"""Domain records: schedules, their triggers, commands and fired tasks.

One frozen dataclass per concept. The Avro wire form lives in `scheduler.codec`, the HTTP form in
`scheduler.api`; both convert to and from these records. Times are integer epoch milliseconds (UTC).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scheduler.triggers.base import TimeTrigger


class TimeUnit(StrEnum):
    MILLISECONDS = "MILLISECONDS"
    SECONDS = "SECONDS"
    MINUTES = "MINUTES"
    HOURS = "HOURS"
    DAYS = "DAYS"

    @property
    def ms(self) -> int:
        return _UNIT_MS[self]


_UNIT_MS = {
    TimeUnit.MILLISECONDS: 1,
    TimeUnit.SECONDS: 1_000,
    TimeUnit.MINUTES: 60_000,
    TimeUnit.HOURS: 3_600_000,
    TimeUnit.DAYS: 86_400_000,
}


class Action(StrEnum):
    INSERT = "INSERT"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    ENABLE = "ENABLE"
    DISABLE = "DISABLE"


class CatchUpPolicy(StrEnum):
    COALESCE = "COALESCE"
    EACH = "EACH"
    SKIP = "SKIP"


# Limits enforced on every schedule, from any source (topic, light-scheduler topic, HTTP).
MAX_TENANT_LEN = 128
MAX_NAME_LEN = 256
MAX_DATA_ENTRIES = 256
MAX_DATA_BYTES = 64 * 1024
MAX_CATCH_UP_WINDOW_MS = 7 * 86_400_000
MAX_FREQUENCY_TIME = 1_000_000_000
_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


class InvalidSchedule(ValueError):
    """A schedule or command that must not be applied; `field` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class ScheduleKey:
    """Tenant (light-scheduler's host, CDAP's namespace) + name; unique across the scheduler."""

    tenant: str
    name: str

    @property
    def id(self) -> str:
        return f"{self.tenant}/{self.name}"

    @classmethod
    def parse(cls, schedule_id: str) -> ScheduleKey:
        tenant, sep, name = schedule_id.partition("/")
        if not sep:
            raise InvalidSchedule("key", f"schedule id {schedule_id!r} is not 'tenant/name'")
        return cls(tenant, name)

    def validate(self) -> None:
        _check_identifier("tenant", self.tenant, MAX_TENANT_LEN)
        _check_identifier("name", self.name, MAX_NAME_LEN)


def _check_identifier(field_name: str, value: str, max_len: int) -> None:
    if not value:
        raise InvalidSchedule(field_name, "must not be empty")
    if len(value) > max_len:
        raise InvalidSchedule(field_name, f"longer than {max_len} characters")
    if "/" in value:
        raise InvalidSchedule(field_name, "must not contain '/'")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InvalidSchedule(field_name, "must not contain control characters")


@dataclass(frozen=True, slots=True)
class CronTrigger:
    """5 fields (minute first) or 6 fields (second first, as in Quartz and Spring)."""

    expression: str
    timezone: str = "UTC"

    def evaluator(self) -> TimeTrigger:
        from scheduler.triggers.cron import cron_evaluator

        return cron_evaluator(self.expression, self.timezone)


@dataclass(frozen=True, slots=True)
class FrequencyTrigger:
    """Every `time` x `unit`, from `start_ms` (or the next whole unit after the schedule became active)."""

    unit: TimeUnit
    time: int
    start_ms: int | None = None

    def evaluator(self) -> TimeTrigger:
        from scheduler.triggers.frequency import FrequencyEvaluator

        return FrequencyEvaluator(self.unit, self.time, self.start_ms)


Trigger = CronTrigger | FrequencyTrigger


@dataclass(frozen=True, slots=True)
class Schedule:
    key: ScheduleKey
    trigger: Trigger
    topic: str
    data: dict[str, str] = field(default_factory=dict)
    enabled: bool = False
    catch_up: CatchUpPolicy = CatchUpPolicy.COALESCE
    catch_up_window_ms: int = 3_600_000

    def validate(self) -> None:
        """Raise InvalidSchedule naming the first field that is wrong."""
        self.key.validate()
        if not _TOPIC_RE.match(self.topic):
            raise InvalidSchedule("topic", "must be 1-249 characters of [A-Za-z0-9._-]")
        if len(self.data) > MAX_DATA_ENTRIES:
            raise InvalidSchedule("data", f"more than {MAX_DATA_ENTRIES} entries")
        size = sum(len(k.encode()) + len(v.encode()) for k, v in self.data.items())
        if size > MAX_DATA_BYTES:
            raise InvalidSchedule("data", f"larger than {MAX_DATA_BYTES} bytes")
        if not 0 <= self.catch_up_window_ms <= MAX_CATCH_UP_WINDOW_MS:
            raise InvalidSchedule("catchUpWindowMs", f"must be between 0 and {MAX_CATCH_UP_WINDOW_MS}")
        trigger = self.trigger
        if isinstance(trigger, FrequencyTrigger):
            if not 1 <= trigger.time <= MAX_FREQUENCY_TIME:
                raise InvalidSchedule("trigger.time", f"must be between 1 and {MAX_FREQUENCY_TIME}")
            if trigger.start_ms is not None and trigger.start_ms < 0:
                raise InvalidSchedule("trigger.start", "must not be negative")
        else:
            from scheduler.triggers.cron import validate_cron

            validate_cron(trigger.expression, trigger.timezone)


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """What the schedules table holds for one schedule."""

    schedule: Schedule
    created_at: int
    updated_at: int
    active_since: int  # fires due before this instant are never owed
    version: int = 1

    def evaluator(self) -> TimeTrigger:
        return self.schedule.trigger.evaluator().anchored(self.active_since)


@dataclass(frozen=True, slots=True)
class ScheduleCommand:
    key: ScheduleKey
    action: Action
    schedule: Schedule | None = None


@dataclass(frozen=True, slots=True)
class FiredTask:
    key: ScheduleKey
    job_id: str
    due_at: int
    fired_at: int
    data: dict[str, str]
    missed: int = 0
    catch_up: bool = False


def job_id(key: ScheduleKey, due_at: int) -> str:
    """Deterministic: a replayed fire of the same schedule instant carries the same job id."""
    return f"{key.id}@{due_at}"
