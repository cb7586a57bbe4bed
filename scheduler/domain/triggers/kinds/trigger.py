"""Trigger kinds' common ground: the `Trigger` interface, the registry the kinds fill as they are defined,
their progress records, their HTTP body base, the Avro and JSON dispatch, and the words they share."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, ConfigDict

from scheduler.domain.basics import (
    MAX_SPAN_MS,
    InvalidSchedule,
    ProgramId,
)
from scheduler.domain.events import (
    DataEvent,
    ProgramStatusEvent,
    SensorEvent,
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
