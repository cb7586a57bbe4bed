"""Trigger kinds: one class per kind, registered once.

A kind owns everything about itself: its record (a frozen dataclass), its validation, its HTTP body model
and JSON form, its Avro mapping, the event keys it listens to, the tenants it touches, how an event or a
due instant advances its progress, when it is satisfied, and its description in words (the one the CLI,
the admin page and `jobs why` show). Nothing else in the package names a kind, but for the elapsed kind's
timers (the punctuator arms them) and the time kinds' evaluators.

A new kind is a class here (it registers itself by subclassing `Trigger`), its record in `avro/` and its
name in the trigger unions of `avro/Schedule.avsc` and `avro/CompositeTrigger.avsc` (appended: a union
branch is stored by its index).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from scheduler.domain.basics import (
    MAX_INSTANT_MS,
    MAX_SPAN_MS,
    InvalidSchedule,
    ProgramId,
    ProgramOutcome,
    TimeUnit,
    dataset_tenant,
    validate_dataset,
)
from scheduler.domain.events import (
    DataEvent,
    ProgramStatusEvent,
    SensorEvent,
    dataset_key,
    program_key,
    sensor_key,
)
from scheduler.domain.triggers.base import TimeTrigger

MAX_FREQUENCY_TIME = 1_000_000_000
MAX_CRON_LEN = 256  # parsing cost grows with the expression; real ones are far shorter
MAX_TIMEZONE_LEN = 64  # the longest IANA zone name has 32 characters
MAX_ELAPSED_MS = MAX_SPAN_MS
MAX_AMOUNT = 2**62  # partitions, bytes, runs a trigger may wait for
MAX_RUNS = 1_000  # runs a repeated program trigger may wait for (its progress holds their ids)
LONG_MAX = 2**63 - 1  # Avro long: what validation accepts must encode

Event = DataEvent | ProgramStatusEvent | SensorEvent

#: JSON "type" -> kind; Avro record name -> kind. Filled by the subclasses as they are defined.
TRIGGER_KINDS: dict[str, type[Trigger]] = {}
AVRO_KINDS: dict[str, type[Trigger]] = {}


@dataclass
class LeafProgress:
    """What one leaf has seen since the schedule's last job (stored as JSON: add fields with defaults)."""

    partitions: int = 0
    bytes: int = 0
    fired: bool = False
    since: int | None = None  # elapsed trigger after an event: when its last event arrived
    runs: list[str] = field(default_factory=list)  # runs counted by a repeated trigger (their ids)


@dataclass(frozen=True, slots=True)
class Reached:
    """What reached a leaf: an event, or (event None) its time trigger's due instant `due`."""

    event: Event | None
    now: int
    due: int | None
    since_job: int  # the schedule's last job, or its activation if none yet


class In(BaseModel):
    """An HTTP body model: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _program(value: str) -> str:
    try:
        ProgramId.parse(value)
    except InvalidSchedule as exc:
        raise ValueError(exc.message) from None
    return value


ProgramField = Annotated[str, AfterValidator(_program)]


class Trigger(ABC):
    """A node of a schedule's trigger tree. Leaves are the kinds below; `CompositeTrigger` is AND/OR."""

    __slots__ = ()

    #: the JSON `type` values of the kind (HTTP bodies and answers)
    tags: ClassVar[tuple[str, ...]]
    #: its Avro record (in avro/, and a branch of the trigger unions)
    avro_name: ClassVar[str]
    #: its HTTP body model (None: built by the HTTP layer, as AND/OR's is)
    body: ClassVar[type[In] | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "avro_name" in cls.__dict__:  # (dataclass(slots=True) defines the class twice: the last stays)
            for tag in cls.tags:
                TRIGGER_KINDS[tag] = cls
            AVRO_KINDS[cls.avro_name] = cls

    # --- its forms -------------------------------------------------------------------------------

    @abstractmethod
    def to_json(self) -> dict[str, Any]:
        """Its HTTP form, `type` first."""

    @classmethod
    @abstractmethod
    def from_json(cls, d: dict[str, Any]) -> Trigger:
        """From its HTTP form (a validated body's fields, or an answer of another worker)."""

    @abstractmethod
    def to_avro(self) -> dict[str, Any]:
        """Its Avro record's fields."""

    @classmethod
    @abstractmethod
    def from_avro(cls, rec: dict[str, Any]) -> Trigger: ...

    @abstractmethod
    def describe(self) -> str:
        """In words, for people."""

    @abstractmethod
    def validate(self, field: str) -> None:
        """Raise InvalidSchedule naming the field (`field` is its own path, e.g. "trigger.triggers.0")."""

    # --- what it listens to ----------------------------------------------------------------------

    def event_keys(self) -> tuple[str, ...]:
        """The event keys (`partition:<dataset>`, `program:<id>`) whose events reach it."""
        return ()

    def tenants(self) -> set[str]:
        """The namespaces it refers to (a tenant-bound token must hold each)."""
        return set()

    def watched_program(self) -> ProgramId | None:
        """The program whose runs fire it (a schedule's own program never triggers it)."""
        return None

    def evaluator(self) -> TimeTrigger | None:
        """Its due instants, for a time trigger."""
        return None

    # --- progress --------------------------------------------------------------------------------

    def record(self, lp: LeafProgress, reached: Reached) -> bool:
        """Advance `lp` by what reached it; True if that counted toward the trigger."""
        return False

    def satisfied(self, lp: LeafProgress) -> bool:
        return lp.fired

    def progress_json(self, lp: LeafProgress, last_job_at: int | None) -> dict[str, Any]:
        """Its progress for people: `type`, what it has and needs, and `text` (the same in words)."""
        return {"type": self.tags[0], "fired": lp.fired, "text": self.progress_text(lp)}

    def progress_text(self, lp: LeafProgress) -> str:
        return f"{self.describe()}: {'yes' if lp.fired else 'not yet'}"


def trigger_from_json(d: dict[str, Any]) -> Trigger:
    kind = TRIGGER_KINDS.get(d.get("type", ""))
    if kind is None:
        raise InvalidSchedule("trigger.type", f"unknown trigger type {str(d.get('type'))[:64]!r}")
    return kind.from_json(d)


def trigger_to_avro(t: Trigger) -> tuple[str, dict[str, Any]]:
    return t.avro_name, t.to_avro()


def trigger_from_avro(value: tuple[str, dict[str, Any]]) -> Trigger:
    name, rec = value
    # (the reader unrolls AND/OR nesting into CompositeTrigger2, 3, ...: see codec._composite_levels)
    kind = AVRO_KINDS.get(name) or AVRO_KINDS[name.rstrip("0123456789")]
    return kind.from_avro(rec)


def program_to_avro(p: ProgramId) -> dict[str, Any]:
    return {"namespace": p.namespace, "application": p.application, "type": p.type, "name": p.name}


def program_from_avro(rec: dict[str, Any]) -> ProgramId:
    return ProgramId(rec["namespace"], rec["application"], rec["type"], rec["name"])


def _span(ms: int) -> str:
    """950 -> '950 ms', 90000 -> '1 min 30 s', 7200000 -> '2 h', 3 days -> '3 d'."""
    if ms < 1000:
        return f"{ms} ms"
    s = ms // 1000
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "min", 60), ("min", 60, "s", 1)):
        if s >= size:
            rest = (s % size) // sub_size
            return f"{s // size} {unit} {rest} {sub}" if rest else f"{s // size} {unit}"
    return f"{s} s"


def _iso(ms: int) -> str:
    """Epoch ms -> '2026-11-24T22:40:00Z' (UTC, to the second); one no date can hold, as it is (a
    definition stored before instants were bounded must still be shown, not answered with a 500)."""
    try:
        return datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError, OSError):
        return f"epoch ms {ms}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


# --- time kinds ----------------------------------------------------------------------------------


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


# --- data kinds ----------------------------------------------------------------------------------


class PartitionTriggerIn(In):
    type: Literal["partition"]
    dataset: str
    minPartitions: int = Field(1, ge=1, le=MAX_AMOUNT)


def _validate_amount(amount: int, field: str) -> None:
    if not 1 <= amount < MAX_AMOUNT:
        raise InvalidSchedule(field, "must be at least 1")


@dataclass(frozen=True, slots=True)
class PartitionTrigger(Trigger):
    """At least `min_partitions` new partitions of `dataset` ('<namespace>.<dataset>')."""

    dataset: str
    min_partitions: int = 1

    tags = ("partition",)
    avro_name = "scheduler.PartitionTrigger"
    body = PartitionTriggerIn

    def to_json(self) -> dict[str, Any]:
        return {"type": "partition", "dataset": self.dataset, "minPartitions": self.min_partitions}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PartitionTrigger:
        return cls(d["dataset"], d.get("minPartitions", 1))

    def to_avro(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "minPartitions": self.min_partitions}

    @classmethod
    def from_avro(cls, rec: dict[str, Any]) -> PartitionTrigger:
        return cls(rec["dataset"], rec["minPartitions"])

    def describe(self) -> str:
        return f"{_plural(self.min_partitions, 'new partition')} of {self.dataset}"

    def validate(self, field: str) -> None:
        validate_dataset(self.dataset, f"{field}.dataset")
        _validate_amount(self.min_partitions, f"{field}.minPartitions")

    def event_keys(self) -> tuple[str, ...]:
        return (dataset_key(self.dataset),)

    def tenants(self) -> set[str]:
        return {dataset_tenant(self.dataset)}

    def record(self, lp: LeafProgress, reached: Reached) -> bool:
        if not (isinstance(reached.event, DataEvent) and reached.event.partitions):
            return False
        lp.partitions += reached.event.partitions
        return True

    def satisfied(self, lp: LeafProgress) -> bool:
        return lp.partitions >= self.min_partitions

    def progress_json(self, lp: LeafProgress, last_job_at: int | None) -> dict[str, Any]:
        return {
            "type": "partition",
            "dataset": self.dataset,
            "partitions": lp.partitions,
            "needs": self.min_partitions,
            "text": self.progress_text(lp),
        }

    def progress_text(self, lp: LeafProgress) -> str:
        return f"{lp.partitions} of {self.min_partitions} new partitions of {self.dataset}"


class DataSizeTriggerIn(In):
    type: Literal["dataSize"]
    dataset: str
    minBytes: int = Field(ge=1, le=MAX_AMOUNT)


@dataclass(frozen=True, slots=True)
class DataSizeTrigger(Trigger):
    """At least `min_bytes` of new data in `dataset` (partition and data events both count)."""

    dataset: str
    min_bytes: int

    tags = ("dataSize",)
    avro_name = "scheduler.DataSizeTrigger"
    body = DataSizeTriggerIn

    def to_json(self) -> dict[str, Any]:
        return {"type": "dataSize", "dataset": self.dataset, "minBytes": self.min_bytes}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> DataSizeTrigger:
        return cls(d["dataset"], d["minBytes"])

    def to_avro(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "minBytes": self.min_bytes}

    @classmethod
    def from_avro(cls, rec: dict[str, Any]) -> DataSizeTrigger:
        return cls(rec["dataset"], rec["minBytes"])

    def describe(self) -> str:
        return f"{self.min_bytes} new bytes of {self.dataset}"

    def validate(self, field: str) -> None:
        validate_dataset(self.dataset, f"{field}.dataset")
        _validate_amount(self.min_bytes, f"{field}.minBytes")

    event_keys = PartitionTrigger.event_keys
    tenants = PartitionTrigger.tenants

    def record(self, lp: LeafProgress, reached: Reached) -> bool:
        if not (isinstance(reached.event, DataEvent) and reached.event.bytes):
            return False
        lp.bytes += reached.event.bytes
        return True

    def satisfied(self, lp: LeafProgress) -> bool:
        return lp.bytes >= self.min_bytes

    def progress_json(self, lp: LeafProgress, last_job_at: int | None) -> dict[str, Any]:
        return {
            "type": "dataSize",
            "dataset": self.dataset,
            "bytes": lp.bytes,
            "needs": self.min_bytes,
            "text": self.progress_text(lp),
        }

    def progress_text(self, lp: LeafProgress) -> str:
        return f"{lp.bytes} of {self.min_bytes} new bytes of {self.dataset}"


# --- program kinds -------------------------------------------------------------------------------


def _validate_program(program: ProgramId, field: str) -> None:
    try:
        ProgramId.parse(program.id)
    except InvalidSchedule as exc:
        raise InvalidSchedule(f"{field}.program", exc.message) from None


class ProgramStatusTriggerIn(In):
    type: Literal["programStatus"]
    program: ProgramField
    on: list[ProgramOutcome] = Field(
        default_factory=lambda: [ProgramOutcome.SUCCEEDED], min_length=1, max_length=len(ProgramOutcome)
    )


@dataclass(frozen=True, slots=True)
class ProgramStatusTrigger(Trigger):
    """Another program reached one of `on` (SUCCEEDED / FAILED / KILLED / FINISHED)."""

    program: ProgramId
    on: tuple[ProgramOutcome, ...] = (ProgramOutcome.SUCCEEDED,)

    tags = ("programStatus",)
    avro_name = "scheduler.ProgramStatusTrigger"
    body = ProgramStatusTriggerIn

    def to_json(self) -> dict[str, Any]:
        return {"type": "programStatus", "program": self.program.id, "on": [o.value for o in self.on]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProgramStatusTrigger:
        return cls(
            ProgramId.parse(d["program"]), tuple(ProgramOutcome(o) for o in d.get("on") or ["SUCCEEDED"])
        )

    def to_avro(self) -> dict[str, Any]:
        return {"program": program_to_avro(self.program), "on": [o.value for o in self.on]}

    @classmethod
    def from_avro(cls, rec: dict[str, Any]) -> ProgramStatusTrigger:
        return cls(program_from_avro(rec["program"]), tuple(ProgramOutcome(o) for o in rec["on"]))

    def describe(self) -> str:
        return f"{self.program.id} {' or '.join(o.value for o in self.on)}"

    def validate(self, field: str) -> None:
        _validate_program(self.program, field)
        if not self.on:
            raise InvalidSchedule(f"{field}.on", "name at least one outcome")

    def event_keys(self) -> tuple[str, ...]:
        return (program_key(self.program),)

    def tenants(self) -> set[str]:
        return {self.program.namespace}

    def watched_program(self) -> ProgramId:
        return self.program

    def record(self, lp: LeafProgress, reached: Reached) -> bool:
        event = reached.event
        if not (isinstance(event, ProgramStatusEvent) and any(o.matches(event.status) for o in self.on)):
            return False
        lp.fired = True
        return True

    def progress_json(self, lp: LeafProgress, last_job_at: int | None) -> dict[str, Any]:
        return {
            "type": "programStatus",
            "program": self.program.id,
            "on": [o.value for o in self.on],
            "fired": lp.fired,
            "text": self.progress_text(lp),
        }

    def progress_text(self, lp: LeafProgress) -> str:
        outcomes = "/".join(o.value for o in self.on)
        return f"{self.program.id} reaching {outcomes}: {'seen' if lp.fired else 'not seen yet'}"


class ProgramRunsTriggerIn(In):
    type: Literal["programRuns"]
    program: ProgramField
    runs: int = Field(ge=1, le=MAX_RUNS)
    on: list[ProgramOutcome] = Field(
        default_factory=lambda: [ProgramOutcome.SUCCEEDED], min_length=1, max_length=len(ProgramOutcome)
    )


@dataclass(frozen=True, slots=True)
class ProgramRunsTrigger(Trigger):
    """A repeated trigger: another program's runs reached one of `on` `runs` times since the schedule's
    last job ("program P succeeded N times"). Each run counts once, however often it is reported."""

    program: ProgramId
    runs: int
    on: tuple[ProgramOutcome, ...] = (ProgramOutcome.SUCCEEDED,)

    tags = ("programRuns",)
    avro_name = "scheduler.ProgramRunsTrigger"
    body = ProgramRunsTriggerIn

    def to_json(self) -> dict[str, Any]:
        outcomes = [o.value for o in self.on]
        return {"type": "programRuns", "program": self.program.id, "runs": self.runs, "on": outcomes}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProgramRunsTrigger:
        outcomes = tuple(ProgramOutcome(o) for o in d.get("on") or ["SUCCEEDED"])
        return cls(ProgramId.parse(d["program"]), d["runs"], outcomes)

    def to_avro(self) -> dict[str, Any]:
        return {"program": program_to_avro(self.program), "runs": self.runs, "on": [o.value for o in self.on]}

    @classmethod
    def from_avro(cls, rec: dict[str, Any]) -> ProgramRunsTrigger:
        return cls(
            program_from_avro(rec["program"]), rec["runs"], tuple(ProgramOutcome(o) for o in rec["on"])
        )

    def describe(self) -> str:
        return f"{self.program.id} {' or '.join(o.value for o in self.on)} {_plural(self.runs, 'time')}"

    def validate(self, field: str) -> None:
        _validate_program(self.program, field)
        if not 1 <= self.runs <= MAX_RUNS:
            raise InvalidSchedule(f"{field}.runs", f"must be between 1 and {MAX_RUNS}")
        if not self.on:
            raise InvalidSchedule(f"{field}.on", "name at least one outcome")

    event_keys = ProgramStatusTrigger.event_keys
    tenants = ProgramStatusTrigger.tenants
    watched_program = ProgramStatusTrigger.watched_program

    def record(self, lp: LeafProgress, reached: Reached) -> bool:
        event = reached.event
        if not (isinstance(event, ProgramStatusEvent) and any(o.matches(event.status) for o in self.on)):
            return False
        if event.run_id in lp.runs:  # a run reported twice (a launcher's restart) counts once
            return False
        lp.runs.append(event.run_id)
        return True

    def satisfied(self, lp: LeafProgress) -> bool:
        return len(lp.runs) >= self.runs

    def progress_json(self, lp: LeafProgress, last_job_at: int | None) -> dict[str, Any]:
        return {
            "type": "programRuns",
            "program": self.program.id,
            "on": [o.value for o in self.on],
            "runs": len(lp.runs),
            "needs": self.runs,
            "text": self.progress_text(lp),
        }

    def progress_text(self, lp: LeafProgress) -> str:
        outcomes = " or ".join(o.value for o in self.on)
        return f"{len(lp.runs)} of {self.runs} runs of {self.program.id} {outcomes}"


class ProgramStartedTriggerIn(In):
    type: Literal["programStarted"]
    program: ProgramField


#: the run status that means a run started: the launcher reports it once a run's program is running
STARTED_STATUS = "RUNNING"


@dataclass(frozen=True, slots=True)
class ProgramStartedTrigger(Trigger):
    """A lifecycle trigger: a run of another program started (its status reached RUNNING)."""

    program: ProgramId

    tags = ("programStarted",)
    avro_name = "scheduler.ProgramStartedTrigger"
    body = ProgramStartedTriggerIn

    def to_json(self) -> dict[str, Any]:
        return {"type": "programStarted", "program": self.program.id}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProgramStartedTrigger:
        return cls(ProgramId.parse(d["program"]))

    def to_avro(self) -> dict[str, Any]:
        return {"program": program_to_avro(self.program)}

    @classmethod
    def from_avro(cls, rec: dict[str, Any]) -> ProgramStartedTrigger:
        return cls(program_from_avro(rec["program"]))

    def describe(self) -> str:
        return f"{self.program.id} started"

    def validate(self, field: str) -> None:
        _validate_program(self.program, field)

    event_keys = ProgramStatusTrigger.event_keys
    tenants = ProgramStatusTrigger.tenants
    watched_program = ProgramStatusTrigger.watched_program

    def record(self, lp: LeafProgress, reached: Reached) -> bool:
        event = reached.event
        if not (isinstance(event, ProgramStatusEvent) and event.status == STARTED_STATUS):
            return False
        lp.fired = True
        return True

    def progress_json(self, lp: LeafProgress, last_job_at: int | None) -> dict[str, Any]:
        return {
            "type": "programStarted",
            "program": self.program.id,
            "fired": lp.fired,
            "text": self.progress_text(lp),
        }

    def progress_text(self, lp: LeafProgress) -> str:
        return f"{self.program.id} starting a run: {'seen' if lp.fired else 'not seen yet'}"


# --- the elapsed kind ----------------------------------------------------------------------------


class ElapsedTriggerIn(In):
    """ms since the last job ("at least every"), or since the last event of a dataset or program."""

    type: Literal["elapsed"]
    ms: int = Field(ge=1_000, le=MAX_ELAPSED_MS)
    dataset: str | None = None
    program: ProgramField | None = None


@dataclass(frozen=True, slots=True)
class ElapsedTrigger(Trigger):
    """`ms` has passed: since the schedule's last job ("at least every T"), or, with a dataset or a program,
    since the last event of it without another one (a quiet period: "T since the last event")."""

    ms: int
    dataset: str | None = None
    program: ProgramId | None = None

    tags = ("elapsed",)
    avro_name = "scheduler.ElapsedTrigger"
    body = ElapsedTriggerIn

    def to_json(self) -> dict[str, Any]:
        program = None if self.program is None else self.program.id
        return {"type": "elapsed", "ms": self.ms, "dataset": self.dataset, "program": program}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ElapsedTrigger:
        program = d.get("program")
        return cls(d["ms"], d.get("dataset"), None if program is None else ProgramId.parse(program))

    def to_avro(self) -> dict[str, Any]:
        program = None if self.program is None else program_to_avro(self.program)
        return {"ms": self.ms, "dataset": self.dataset, "program": program}

    @classmethod
    def from_avro(cls, rec: dict[str, Any]) -> ElapsedTrigger:
        program = None if rec["program"] is None else program_from_avro(rec["program"])
        return cls(rec["ms"], rec["dataset"], program)

    def describe(self) -> str:
        of = self.dataset or (self.program.id if self.program is not None else None)
        return f"{_span(self.ms)} since the last event of {of}" if of else f"at least every {_span(self.ms)}"

    def validate(self, field: str) -> None:
        if not 1_000 <= self.ms <= MAX_ELAPSED_MS:
            raise InvalidSchedule(f"{field}.ms", f"must be between 1000 and {MAX_ELAPSED_MS}")
        if self.dataset is not None and self.program is not None:
            raise InvalidSchedule(field, "wait after a dataset or a program, not both")
        if self.dataset is not None:
            validate_dataset(self.dataset, f"{field}.dataset")

    def event_keys(self) -> tuple[str, ...]:
        if self.dataset is not None:
            return (dataset_key(self.dataset),)
        if self.program is not None:
            return (program_key(self.program),)
        return ()

    def tenants(self) -> set[str]:
        if self.dataset is not None:
            return {dataset_tenant(self.dataset)}
        return set() if self.program is None else {self.program.namespace}

    def due(self, lp: LeafProgress | None, since_job: int) -> int | None:
        """When it comes due: `ms` after the last job (or activation), or after its last event."""
        if self.dataset is None and self.program is None:
            return since_job + self.ms
        return None if lp is None or lp.since is None else lp.since + self.ms

    def record(self, lp: LeafProgress, reached: Reached) -> bool:
        if reached.event is not None:
            lp.since, lp.fired = reached.now, False
            return False
        # Only the due instant armed last counts: an event since then moved it.
        counted = reached.due is not None and reached.due == self.due(lp, reached.since_job)
        lp.fired = lp.fired or counted
        return counted

    def progress_json(self, lp: LeafProgress, last_job_at: int | None) -> dict[str, Any]:
        return {
            "type": "elapsed",
            "ms": self.ms,
            "fired": lp.fired,
            "since": lp.since,
            "lastJobAt": last_job_at,
            "text": self.progress_text(lp),
        }

    def progress_text(self, lp: LeafProgress) -> str:
        if lp.fired:
            return f"{_span(self.ms)} elapsed: yes"
        if lp.since is not None:
            return f"{_span(self.ms)} of quiet after the last event at {_iso(lp.since)}: not yet"
        return f"{self.describe()}: not yet"


class SensorTriggerIn(In):
    """Each time the polling sensor (a program of kind sensor, evaluated by the workers) says so."""

    type: Literal["sensor"]
    sensor: ProgramField


@dataclass(frozen=True, slots=True)
class SensorTrigger(Trigger):
    """Each time the sensor `sensor` says so: a program of kind `sensor`, a check of the user's that the
    worker owning it runs every interval with the cursor it returned last (worker/sensors.py)."""

    sensor: ProgramId

    tags = ("sensor",)
    avro_name = "scheduler.SensorTrigger"
    body = SensorTriggerIn

    def to_json(self) -> dict[str, Any]:
        return {"type": "sensor", "sensor": self.sensor.id}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SensorTrigger:
        return cls(ProgramId.parse(d["sensor"]))

    def to_avro(self) -> dict[str, Any]:
        return {"sensor": program_to_avro(self.sensor)}

    @classmethod
    def from_avro(cls, rec: dict[str, Any]) -> SensorTrigger:
        return cls(program_from_avro(rec["sensor"]))

    def describe(self) -> str:
        return f"when sensor {self.sensor.id} says so"

    def validate(self, field: str) -> None:
        _validate_program(self.sensor, f"{field}.sensor")

    def event_keys(self) -> tuple[str, ...]:
        return (sensor_key(self.sensor),)

    def tenants(self) -> set[str]:
        return {self.sensor.namespace}

    def record(self, lp: LeafProgress, reached: Reached) -> bool:
        if not (isinstance(reached.event, SensorEvent) and reached.event.sensor == self.sensor):
            return False
        lp.fired = True
        return True

    def progress_text(self, lp: LeafProgress) -> str:
        return f"sensor {self.sensor.id} said so: {'yes' if lp.fired else 'not yet'}"


# --- AND / OR ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CompositeTrigger(Trigger):
    """AND: every child must have fired since the last job; OR: any child."""

    op: str  # "AND" | "OR"
    triggers: tuple[Trigger, ...]

    tags = ("and", "or")
    avro_name = "scheduler.CompositeTrigger"

    def to_json(self) -> dict[str, Any]:
        return {"type": self.op.lower(), "triggers": [c.to_json() for c in self.triggers]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CompositeTrigger:
        return cls(d["type"].upper(), tuple(trigger_from_json(c) for c in d["triggers"]))

    def to_avro(self) -> dict[str, Any]:
        return {"op": self.op, "triggers": [trigger_to_avro(c) for c in self.triggers]}

    @classmethod
    def from_avro(cls, rec: dict[str, Any]) -> CompositeTrigger:
        return cls(rec["op"], tuple(trigger_from_avro(c) for c in rec["triggers"]))

    def describe(self) -> str:
        return "(" + f" {self.op} ".join(c.describe() for c in self.triggers) + ")"

    def validate(self, field: str) -> None:
        if self.op not in ("AND", "OR"):
            raise InvalidSchedule(f"{field}.op", "must be AND or OR")
        if not self.triggers:
            raise InvalidSchedule(f"{field}.triggers", "a composite trigger needs at least one trigger")
        for i, child in enumerate(self.triggers):
            child.validate(f"{field}.triggers.{i}")
