"""Run constraints: conditions a triggered job must meet before it launches. Pure.

Each constraint looks at the job, the clock and the run state of the job's program (kept on the same
partition as the job, from program-status events, so the check is exact) and says met, wait until T, or
skip. A new constraint kind is one class here (its check, validation, its HTTP body model and its fields as
the Avro record and the HTTP JSON carry them), and its Avro record in avro/ (with its name appended to the
constraints union of Schedule.avsc).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, ClassVar, Literal
from zoneinfo import ZoneInfo

from pydantic import Field

from scheduler.domain.basics import GROUP_PATTERN, MAX_SPAN_MS, InvalidSchedule, TimeUnit, plural
from scheduler.domain.runs import LIVE, TERMINAL
from scheduler.domain.triggers.kinds import In


class UnmetAction(StrEnum):
    WAIT = "WAIT"  # keep the job pending and check again
    SKIP = "SKIP"  # drop the job


class TimeoutAction(StrEnum):
    DISCARD = "DISCARD"
    FORCE_START = "FORCE_START"


#: statuses of a run that has not ended (seed 004); a launched job counts as PENDING until the launcher reports
ACTIVE_STATUSES = frozenset(s.value for s in LIVE)
TERMINAL_STATUSES = frozenset(s.value for s in TERMINAL)
MAX_RECENT_STARTS = 1_000
MAX_CONSTRAINT_VALUE = MAX_SPAN_MS
MAX_RUNS_AT_ONCE = 100_000  # concurrency and rate limits
#: every constraint kind by its Avro record's full name (filled as the classes are defined)
CONSTRAINT_KINDS: dict[str, type[Constraint]] = {}
#: and by its JSON `type`
CONSTRAINT_TAGS: dict[str, type[Constraint]] = {}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


@dataclass(frozen=True, slots=True)
class RunState:
    """What the constraint checker knows about one program's runs."""

    active: dict[str, str] = field(default_factory=dict)  # run id -> status, runs not yet ended
    last_start: int | None = None
    last_end: int | None = None
    recent_starts: tuple[int, ...] = ()  # newest last, at most MAX_RECENT_STARTS
    group_active: int = 0  # slots the runs not yet ended of every program of the job's group hold
    slots: dict[str, int] = field(default_factory=dict)  # run id -> its slots, where not 1 (`active`'s)
    weighted: bool = False  # a run of the queue (the group's) holds more than 1 slot


@dataclass(frozen=True, slots=True)
class Verdict:
    met: bool
    skip: bool = False
    until: int | None = None  # when waiting: the instant worth checking again (None: on the next run change)
    reason: str = ""


MET = Verdict(True)


class Constraint(ABC):
    on_unmet: UnmetAction
    #: its name in JSON ("type") and in metrics labels: concurrency, delay, timeWindow, lastRun, rate
    kind: ClassVar[str] = ""
    #: its HTTP body model
    body: ClassVar[type[In]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.kind:
            CONSTRAINT_KINDS[f"scheduler.{cls.__name__}"] = cls
            CONSTRAINT_TAGS[cls.kind] = cls

    @property
    def name(self) -> str:
        return type(self).__name__

    @abstractmethod
    def check(self, triggered_at: int, now: int, runs: RunState) -> Verdict: ...

    @abstractmethod
    def fields(self) -> dict[str, Any]:
        """Its fields as its Avro record and its HTTP JSON name them (camelCase, enums as strings)."""

    @classmethod
    @abstractmethod
    def from_fields(cls, d: dict[str, Any]) -> Constraint: ...

    def to_avro(self) -> tuple[str, dict[str, Any]]:
        """The Avro union branch: (record full name, record)."""
        return f"scheduler.{type(self).__name__}", self.fields()

    @staticmethod
    def from_avro(value: tuple[str, dict[str, Any]] | list[Any]) -> Constraint:
        name, record = value
        kind = CONSTRAINT_KINDS.get(name)
        if kind is None:
            raise ValueError(f"unknown constraint {name!r}")
        return kind.from_fields(record)

    def to_json(self) -> dict[str, Any]:
        """The HTTP form: {"type": kind, ...fields}."""
        return {"type": self.kind, **self.fields()}

    def validate(self) -> None:
        for name in ("max_runs", "delay_ms", "min_ms"):
            value = getattr(self, name, None)
            low = 1 if name == "max_runs" else 0
            if value is not None and not low <= value <= MAX_CONSTRAINT_VALUE:
                raise InvalidSchedule(
                    f"constraints.{self.kind}.{_camel(name)}",
                    f"must be between {low} and {MAX_CONSTRAINT_VALUE}",
                )

    def _unmet(self, reason: str, until: int | None) -> Verdict:
        return Verdict(False, self.on_unmet is UnmetAction.SKIP, until, reason)


# --- the HTTP body of each kind (validated by pydantic; the records validate again) -------------


class ConcurrencyIn(In):
    type: Literal["concurrency"]
    maxRuns: int = Field(ge=1, le=MAX_RUNS_AT_ONCE)
    onUnmet: UnmetAction = UnmetAction.WAIT
    group: str | None = Field(None, pattern=f"^{GROUP_PATTERN}$")
    slots: int = Field(
        1, ge=1, le=MAX_RUNS_AT_ONCE, description="of maxRuns each run of this schedule holds (weighted runs)"
    )


class DelayIn(In):
    type: Literal["delay"]
    delayMs: int = Field(ge=0, le=MAX_CONSTRAINT_VALUE)


class TimeWindowIn(In):
    type: Literal["timeWindow"]
    start: str = Field(pattern=r"^([01][0-9]|2[0-3]):[0-5][0-9]$")
    end: str = Field(pattern=r"^([01][0-9]|2[0-3]):[0-5][0-9]$")
    timezone: str = "UTC"
    #: default (None): SKIP for a schedule triggered by another program's status, WAIT otherwise
    onUnmet: UnmetAction | None = None


class LastRunIn(In):
    type: Literal["lastRun"]
    minMs: int = Field(ge=0, le=MAX_CONSTRAINT_VALUE)
    onUnmet: UnmetAction = UnmetAction.WAIT


class RateIn(In):
    type: Literal["rate"]
    maxRuns: int = Field(ge=1, le=MAX_RUNS_AT_ONCE)
    unit: TimeUnit
    onUnmet: UnmetAction = UnmetAction.WAIT


@dataclass(frozen=True, slots=True)
class ConcurrencyConstraint(Constraint):
    """At most `max_runs` runs of the program at once (PENDING and STARTING runs count), or with a group,
    of all programs whose schedules name that group. Weighted: each run of this schedule holds `slots` of
    them (Airflow's pool_slots; a heavy job takes 2 of the warehouse's 4), and a job launches only when
    its slots are free — exact, as the group's one queue (one partition's) counts them."""

    max_runs: int
    on_unmet: UnmetAction = UnmetAction.WAIT
    group: str | None = None
    slots: int = 1
    kind: ClassVar[str] = "concurrency"
    body: ClassVar[type[In]] = ConcurrencyIn

    def fields(self) -> dict[str, Any]:
        return {
            "maxRuns": self.max_runs,
            "onUnmet": self.on_unmet.value,
            "group": self.group,
            "slots": self.slots,
        }

    @classmethod
    def from_fields(cls, d: dict[str, Any]) -> ConcurrencyConstraint:
        return cls(d["maxRuns"], UnmetAction(d["onUnmet"]), d.get("group"), d.get("slots") or 1)

    def validate(self) -> None:
        Constraint.validate(self)  # (slotted dataclasses: no zero-argument super)
        if not 1 <= self.slots <= self.max_runs:
            raise InvalidSchedule(
                "constraints.concurrency.slots", f"must be between 1 and maxRuns ({self.max_runs})"
            )

    def check(self, triggered_at: int, now: int, runs: RunState) -> Verdict:
        if self.group is not None:
            taken = runs.group_active
        else:
            taken = sum(runs.slots.get(r, 1) for r in runs.active)
        if taken + self.slots <= self.max_runs:
            return MET
        where = f" in group {self.group}" if self.group is not None else ""
        if self.slots == 1 and not runs.weighted:
            return self._unmet(f"{plural(taken, 'run')} active{where}, at most {self.max_runs}", None)
        return self._unmet(
            f"{plural(taken, 'slot')} of {self.max_runs} held by active runs{where}; "
            f"this job needs {plural(self.slots, 'slot')}",
            None,
        )


@dataclass(frozen=True, slots=True)
class DelayConstraint(Constraint):
    """Launch no sooner than `delay_ms` after the trigger fired."""

    delay_ms: int
    on_unmet: UnmetAction = UnmetAction.WAIT
    kind: ClassVar[str] = "delay"
    body: ClassVar[type[In]] = DelayIn

    def fields(self) -> dict[str, Any]:
        return {"delayMs": self.delay_ms}

    @classmethod
    def from_fields(cls, d: dict[str, Any]) -> DelayConstraint:
        return cls(d["delayMs"])

    def check(self, triggered_at: int, now: int, runs: RunState) -> Verdict:
        due = triggered_at + self.delay_ms
        return MET if now >= due else self._unmet(f"delayed until {due}", due)


@dataclass(frozen=True, slots=True)
class TimeWindowConstraint(Constraint):
    """Launch only between `start` and `end` (HH:mm, minute granularity) in `timezone`; may cross midnight."""

    start: str
    end: str
    timezone: str = "UTC"
    on_unmet: UnmetAction = UnmetAction.WAIT
    kind: ClassVar[str] = "timeWindow"
    body: ClassVar[type[In]] = TimeWindowIn

    def fields(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "end": self.end,
            "timezone": self.timezone,
            "onUnmet": self.on_unmet.value,
        }

    @classmethod
    def from_fields(cls, d: dict[str, Any]) -> TimeWindowConstraint:
        return cls(d["start"], d["end"], d["timezone"], UnmetAction(d["onUnmet"]))

    def validate(self) -> None:
        for name, value in (("start", self.start), ("end", self.end)):
            _minute_of_day(value, f"constraints.timeWindow.{name}")
        try:
            ZoneInfo(self.timezone)
        except Exception:
            raise InvalidSchedule(
                "constraints.timeWindow.timezone", f"unknown time zone {self.timezone!r}"
            ) from None

    def _inside(self, minute: int) -> bool:
        start, end = _minute_of_day(self.start), _minute_of_day(self.end)
        if start == end:
            return True
        if start < end:
            return start <= minute < end
        return minute >= start or minute < end  # across midnight

    def check(self, triggered_at: int, now: int, runs: RunState) -> Verdict:
        zone = ZoneInfo(self.timezone)
        local = datetime.fromtimestamp(now / 1000, zone)
        if self._inside(local.hour * 60 + local.minute):
            return MET
        return self._unmet(f"outside {self.start}-{self.end} {self.timezone}", self._opens_after(now, zone))

    def _opens_after(self, now: int, zone: ZoneInfo) -> int:
        """The first instant after `now` inside the window: its start, or around a DST change the first
        minute of it that exists (a start in a spring-forward gap) or occurs again (fall-back)."""
        start = _minute_of_day(self.start)
        today = datetime.fromtimestamp(now / 1000, zone).replace(tzinfo=None).date()
        for days in range(3):
            wall = datetime.combine(today + timedelta(days=days), datetime.min.time()) + timedelta(
                minutes=start
            )
            first, second = sorted(int(wall.replace(tzinfo=zone, fold=f).timestamp() * 1000) for f in (0, 1))
            t = first
            while t <= second:  # one instant, or the hour around a DST change
                if t > now and self._inside_at(t, zone):
                    return t
                t += 60_000
            if second > now and self._inside_at(second, zone):
                return second
        return now + 86_400_000  # unreachable for a valid window; check again in a day

    def _inside_at(self, instant: int, zone: ZoneInfo) -> bool:
        local = datetime.fromtimestamp(instant / 1000, zone)
        return self._inside(local.hour * 60 + local.minute)


@dataclass(frozen=True, slots=True)
class LastRunConstraint(Constraint):
    """At least `min_ms` since the program's last run started."""

    min_ms: int
    on_unmet: UnmetAction = UnmetAction.WAIT
    kind: ClassVar[str] = "lastRun"
    body: ClassVar[type[In]] = LastRunIn

    def fields(self) -> dict[str, Any]:
        return {"minMs": self.min_ms, "onUnmet": self.on_unmet.value}

    @classmethod
    def from_fields(cls, d: dict[str, Any]) -> LastRunConstraint:
        return cls(d["minMs"], UnmetAction(d["onUnmet"]))

    def check(self, triggered_at: int, now: int, runs: RunState) -> Verdict:
        if runs.last_start is None or now >= runs.last_start + self.min_ms:
            return MET
        until = runs.last_start + self.min_ms
        return self._unmet(f"last run started at {runs.last_start}, next allowed at {until}", until)


@dataclass(frozen=True, slots=True)
class RateConstraint(Constraint):
    """At most `max_runs` run starts of the program per `unit`, over a sliding window."""

    max_runs: int
    unit: TimeUnit
    on_unmet: UnmetAction = UnmetAction.WAIT
    kind: ClassVar[str] = "rate"
    body: ClassVar[type[In]] = RateIn

    def fields(self) -> dict[str, Any]:
        return {"maxRuns": self.max_runs, "unit": self.unit.value, "onUnmet": self.on_unmet.value}

    @classmethod
    def from_fields(cls, d: dict[str, Any]) -> RateConstraint:
        return cls(d["maxRuns"], TimeUnit(d["unit"]), UnmetAction(d["onUnmet"]))

    def check(self, triggered_at: int, now: int, runs: RunState) -> Verdict:
        window = self.unit.ms
        recent = [t for t in runs.recent_starts if t > now - window]
        if len(recent) < self.max_runs:
            return MET
        until = recent[-self.max_runs] + window
        return self._unmet(
            f"{plural(len(recent), 'run')} in the last {self.unit.value.lower()}, at most {self.max_runs}",
            until,
        )


@dataclass(frozen=True, slots=True)
class PendingTimeout:
    """A job still pending `timeout_ms` after it was triggered is discarded or started anyway."""

    timeout_ms: int
    action: TimeoutAction = TimeoutAction.DISCARD

    def to_json(self) -> dict[str, Any]:
        """Its Avro record, which is its HTTP JSON too."""
        return {"timeoutMs": self.timeout_ms, "action": self.action.value}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PendingTimeout:
        return cls(d["timeoutMs"], TimeoutAction(d["action"]))


_HH_MM = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])", re.ASCII)


def _minute_of_day(value: str, field_name: str = "time") -> int:
    match = _HH_MM.fullmatch(value)
    if match is None:
        raise InvalidSchedule(field_name, f"{value!r} is not HH:mm")
    return int(match[1]) * 60 + int(match[2])


# --- the decision for one job ------------------------------------------------------------------------


class Outcome(StrEnum):
    LAUNCH = "LAUNCH"
    WAIT = "WAIT"
    SKIP = "SKIP"
    DISCARD = "DISCARD"  # pending timeout reached


@dataclass(frozen=True, slots=True)
class Decision:
    outcome: Outcome
    until: int | None = None
    blocked_by: str = ""  # the constraint that holds the job back
    reason: str = ""
    forced: bool = False


def decide(
    constraints: tuple[Constraint, ...],
    timeout: PendingTimeout | None,
    triggered_at: int,
    now: int,
    runs: RunState,
) -> Decision:
    """Launch, wait (until when, held by which constraint), skip or discard one pending job."""
    if timeout is not None and now >= triggered_at + timeout.timeout_ms:
        if timeout.action is TimeoutAction.FORCE_START:
            return Decision(Outcome.LAUNCH, forced=True, reason="pending timeout: forced start")
        return Decision(Outcome.DISCARD, reason=f"pending for {timeout.timeout_ms} ms: discarded")
    waiting: list[tuple[Constraint, Verdict]] = []
    for c in constraints:
        v = c.check(triggered_at, now, runs)
        if v.met:
            continue
        if v.skip:
            return Decision(Outcome.SKIP, blocked_by=c.name, reason=v.reason)
        waiting.append((c, v))
    if not waiting:
        return Decision(Outcome.LAUNCH)
    # Check again when the first time-bound blocker may clear; a run change wakes the job anyway.
    untils = [v.until for _, v in waiting if v.until is not None]
    until = min(untils) if untils else None
    if timeout is not None:
        deadline = triggered_at + timeout.timeout_ms
        until = deadline if until is None else min(until, deadline)
    first, verdict = waiting[0]
    return Decision(Outcome.WAIT, until=until, blocked_by=first.name, reason=verdict.reason)
