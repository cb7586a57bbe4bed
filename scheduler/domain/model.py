"""Domain records: schedules, their triggers, commands and fired tasks.

One frozen dataclass per concept. The Avro wire form lives in `scheduler.wire.codec`, the HTTP form in
`scheduler.http.api`; both convert to and from these records. Times are integer epoch milliseconds (UTC).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

# defined in basics and in the trigger kinds (which the records import), and imported from here as ever
from scheduler.domain.basics import DATASET_RE as DATASET_RE
from scheduler.domain.basics import GROUP_PATTERN as GROUP_PATTERN
from scheduler.domain.basics import MAX_INSTANT_MS as MAX_INSTANT_MS
from scheduler.domain.basics import MAX_SPAN_MS, clean_text
from scheduler.domain.basics import CatchUpPolicy as CatchUpPolicy
from scheduler.domain.basics import InvalidSchedule as InvalidSchedule
from scheduler.domain.basics import OutputFormat as OutputFormat
from scheduler.domain.basics import ProgramId as ProgramId
from scheduler.domain.basics import ProgramOutcome as ProgramOutcome
from scheduler.domain.basics import TimeUnit as TimeUnit
from scheduler.domain.basics import validate_dataset as validate_dataset
from scheduler.domain.constraints import UnmetAction
from scheduler.domain.labels import validate_description, validate_labels
from scheduler.domain.overlap import OverlapPolicy as OverlapPolicy
from scheduler.domain.runs import MAX_TIME_LIMIT_MS, InvalidRunPolicy, RetryPolicy
from scheduler.domain.triggers.kinds import MAX_CRON_LEN as MAX_CRON_LEN
from scheduler.domain.triggers.kinds import MAX_FREQUENCY_TIME as MAX_FREQUENCY_TIME
from scheduler.domain.triggers.kinds import MAX_TIMEZONE_LEN as MAX_TIMEZONE_LEN
from scheduler.domain.triggers.kinds import (
    CompositeTrigger,
    CronTrigger,
    DataSizeTrigger,
    ElapsedTrigger,
    FrequencyTrigger,
    OnceTrigger,
    PartitionTrigger,
    ProgramStatusTrigger,
    Trigger,
)

if TYPE_CHECKING:
    from scheduler.domain.constraints import Constraint, PendingTimeout
    from scheduler.domain.triggers.base import TimeTrigger

__all__ = [
    "CompositeTrigger",
    "CronTrigger",
    "DataSizeTrigger",
    "ElapsedTrigger",
    "FrequencyTrigger",
    "OnceTrigger",
    "PartitionTrigger",
    "ProgramStatusTrigger",
    "Trigger",
]


class Action(StrEnum):
    INSERT = "INSERT"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    ENABLE = "ENABLE"
    DISABLE = "DISABLE"
    RUN = "RUN"  # fire once now (or at a given instant), whatever the triggers say
    BACKFILL = "BACKFILL"  # fire every due instant of the time triggers in a range


# Limits enforced on every schedule, from any source (topic, light-scheduler topic, HTTP).
MAX_TENANT_LEN = 128
MAX_NAME_LEN = 256
MAX_DATA_ENTRIES = 256
MAX_DATA_BYTES = 64 * 1024
MAX_CATCH_UP_WINDOW_MS = MAX_SPAN_MS
MAX_PRIORITY = 1_000
MAX_CALENDARS = 16  # calendars one schedule may exclude
#: the patterns validation applies, defined once (the HTTP models and the OpenAPI document use them too)
#: a topic name Kafka accepts: 1-249 of its legal characters, and neither "." nor ".." (a broker refuses both;
#: a record for one waits for metadata that never comes). Spelt without a look-ahead, which pydantic's regex
#: engine lacks: one character but a dot, two but two dots, or three to 249.
_T, _TD = "[A-Za-z0-9_-]", "[A-Za-z0-9._-]"
TOPIC_PATTERN = rf"(?:{_T}|{_T}{_TD}|\.{_T}|{_TD}{{3,249}})"
TOPIC_RULE = "must be 1-249 characters of [A-Za-z0-9._-], not . or .."
_TOPIC_RE = re.compile(TOPIC_PATTERN, re.ASCII)
_GROUP_RE = re.compile(GROUP_PATTERN, re.ASCII)
#: job queues of concurrency groups: `group:<tenant>/<group>`, two parts where a program id has four
GROUP_QUEUE_PREFIX = "group:"


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
    if not clean_text(value):
        raise InvalidSchedule(
            field_name, "must not contain control characters, line separators or surrogates"
        )


def _utf8_len(value: str, field_name: str) -> int:
    try:
        return len(value.encode())
    except UnicodeEncodeError:
        raise InvalidSchedule(field_name, "not valid Unicode (a lone surrogate)") from None


MAX_TRIGGER_DEPTH = 8
MAX_TRIGGER_LEAVES = 64
MAX_CONSTRAINTS = 16


def trigger_leaves(trigger: Trigger, path: str = "0") -> list[tuple[str, Trigger]]:
    """The non-composite triggers of a tree with their paths ("0", "0.1", "0.1.0", ...)."""
    if isinstance(trigger, CompositeTrigger):
        out: list[tuple[str, Trigger]] = []
        for i, child in enumerate(trigger.triggers):
            out.extend(trigger_leaves(child, f"{path}.{i}"))
        return out
    return [(path, trigger)]


def default_unmet(trigger: Trigger) -> UnmetAction:
    """What a time window constraint that does not say does when its job comes outside the window: seed
    002's scenario 5 — a schedule triggered by another program's status does not run (SKIP); one triggered
    by time or data waits for the window (WAIT: seed 003's maintenance workflow that runs 10pm-6am)."""
    watches_a_program = any(leaf.watched_program() is not None for _, leaf in trigger_leaves(trigger))
    return UnmetAction.SKIP if watches_a_program else UnmetAction.WAIT


def group_queue_key(tenant: str, group: str) -> str:
    """The job queue of a concurrency group. A group name is resolved within the schedule's tenant: two
    tenants' groups of the same name are two groups, and neither sees the other's runs."""
    return f"{GROUP_QUEUE_PREFIX}{tenant}/{group}"


@dataclass(frozen=True, slots=True)
class Schedule:
    key: ScheduleKey
    trigger: Trigger
    topic: str
    data: dict[str, str] = field(default_factory=dict)
    enabled: bool = False
    catch_up: CatchUpPolicy = CatchUpPolicy.COALESCE
    catch_up_window_ms: int = 3_600_000
    program: ProgramId | None = None  # launched on each fire (via the job queue) instead of a plain fire
    constraints: tuple[Constraint, ...] = ()
    timeout: PendingTimeout | None = None
    retry: RetryPolicy | None = None  # FAILED runs of its jobs run again
    time_limit_ms: int | None = None  # a run still going this long after it started is stopped (KILLED)
    output: OutputFormat = OutputFormat.FIRED_TASK  # what a fire sends to `topic` (no program)
    not_before: int | None = None  # no fire and no job before this instant
    not_after: int | None = None  # nor after this one: the schedule is finished then
    spread_ms: int | None = None  # its time instants move by a stable offset in [0, spread_ms)
    jitter_ms: int | None = None  # each instant moves by [0, jitter_ms], derived from key and instant
    priority: int = 0  # its jobs' order in their job queue (a program's or a pool's): higher first
    complete_within_ms: int | None = None  # SLA: each job's run completes within this of its trigger
    fire_at_least_every_ms: int | None = None  # SLA: a job at least once per this
    exclude_calendars: tuple[str, ...] = ()  # its tenant's calendars: their days' instants do not fire
    description: str | None = None  # for people
    labels: dict[str, str] = field(default_factory=dict)  # for people, and to select schedules by
    pause_on_failure: int | None = None  # paused (a DISABLE) after this many jobs in a row FAILED
    max_fires: int | None = None  # finished after this many fires (jobs of a program) its triggers made
    overlap: OverlapPolicy | None = None  # what a job does while the schedule's runs are active (ALLOW_ALL)

    def plain_fields(self) -> dict[str, Any]:
        """The fields whose HTTP JSON and Avro forms are the same (scalars and lists of strings)."""
        return {
            "timeLimitMs": self.time_limit_ms,
            "output": self.output.value,
            "notBefore": self.not_before,
            "notAfter": self.not_after,
            "spreadMs": self.spread_ms,
            "jitterMs": self.jitter_ms,
            "priority": self.priority,
            "completeWithinMs": self.complete_within_ms,
            "fireAtLeastEveryMs": self.fire_at_least_every_ms,
            "excludeCalendars": list(self.exclude_calendars),
            "description": self.description,
            "labels": dict(self.labels),
            "pauseOnFailure": self.pause_on_failure,
            "maxFires": self.max_fires,
            "overlap": None if self.overlap is None else self.overlap.value,
        }

    def within_bounds(self, now: int) -> bool:
        """Whether `now` is inside [notBefore, notAfter] (an event then counts toward its trigger)."""
        return (self.not_before is None or now >= self.not_before) and (
            self.not_after is None or now <= self.not_after
        )

    def shaped(self, evaluator: TimeTrigger) -> TimeTrigger:
        """A time trigger's evaluator as this schedule's bounds, spread and jitter move it."""
        if self.not_before is None and self.not_after is None and not self.spread_ms and not self.jitter_ms:
            return evaluator
        from scheduler.domain.triggers.shaping import Shaped, spread_offset

        return Shaped(
            evaluator,
            self.key.id,
            spread_offset(self.key.id, self.spread_ms or 0),
            self.jitter_ms or 0,
            self.not_before,
            self.not_after,
        )

    @property
    def group(self) -> str | None:
        """The concurrency group the schedule's program runs in, if any."""
        for c in self.constraints:
            group = getattr(c, "group", None)
            if group is not None:
                return str(group)
        return None

    @property
    def queue_key(self) -> str:
        """The job queue its jobs wait in: its program's, or its concurrency group's in its tenant."""
        assert self.program is not None
        return group_queue_key(self.key.tenant, self.group) if self.group is not None else self.program.id

    def validate(self) -> None:
        """Raise InvalidSchedule naming the first field that is wrong."""
        self.key.validate()
        self.validate_definition()

    def validate_definition(self) -> None:
        """validate() but for the key (for a caller that validated it already)."""
        if not _TOPIC_RE.fullmatch(self.topic):
            raise InvalidSchedule("topic", TOPIC_RULE)
        validate_string_map(self.data, "data")
        validate_description(self.description)
        validate_labels(self.labels)
        if not 0 <= self.catch_up_window_ms <= MAX_CATCH_UP_WINDOW_MS:
            raise InvalidSchedule("catchUpWindowMs", f"must be between 0 and {MAX_CATCH_UP_WINDOW_MS}")
        _check_tree_shape(self.trigger)
        self.trigger.validate("trigger")
        if self.program is None:
            if self.constraints or self.timeout is not None:
                raise InvalidSchedule("program", "constraints and timeout need a program to launch")
            if self.retry is not None or self.time_limit_ms is not None:
                raise InvalidSchedule("program", "retry and timeLimitMs need a program to launch")
            if self.priority:
                raise InvalidSchedule("priority", "orders the jobs of a program: this schedule has none")
            for name, value in (
                ("completeWithinMs", self.complete_within_ms),
                ("fireAtLeastEveryMs", self.fire_at_least_every_ms),
                ("pauseOnFailure", self.pause_on_failure),
            ):
                if value is not None:
                    raise InvalidSchedule(name, "an SLA on the runs of a program: this schedule has none")
            if self.overlap is not None:
                raise InvalidSchedule(
                    "overlap", "governs the runs of a program: a plain fire is a message and never overlaps"
                )
            _check_plain_trigger(self.trigger)
        elif self.output is not OutputFormat.FIRED_TASK:
            raise InvalidSchedule(
                "output", "a schedule with a program sends LaunchRequests (output FIRED_TASK)"
            )
        else:
            ProgramId.parse(self.program.id)
            for _, leaf in trigger_leaves(self.trigger):
                if leaf.watched_program() == self.program:
                    raise InvalidSchedule("trigger.program", "a program never triggers itself")
        if self.max_fires is not None and not 1 <= self.max_fires <= MAX_FIRES:
            raise InvalidSchedule("maxFires", f"must be between 1 and {MAX_FIRES}")
        if self.pause_on_failure is not None and not 1 <= self.pause_on_failure <= MAX_PAUSE_ON_FAILURE:
            raise InvalidSchedule("pauseOnFailure", f"must be between 1 and {MAX_PAUSE_ON_FAILURE}")
        if self.constraints:
            self._validate_constraints()
        if self.timeout is not None and not 0 < self.timeout.timeout_ms <= MAX_CATCH_UP_WINDOW_MS:
            raise InvalidSchedule("timeout.timeoutMs", f"must be between 1 and {MAX_CATCH_UP_WINDOW_MS}")
        if self.retry is not None:
            try:
                self.retry.validate()
            except InvalidRunPolicy as exc:
                raise InvalidSchedule(exc.field, exc.message) from None
        if self.time_limit_ms is not None and not 1_000 <= self.time_limit_ms <= MAX_TIME_LIMIT_MS:
            raise InvalidSchedule("timeLimitMs", f"must be between 1000 and {MAX_TIME_LIMIT_MS}")
        self._validate_shaping()
        for name, value in (
            ("completeWithinMs", self.complete_within_ms),
            ("fireAtLeastEveryMs", self.fire_at_least_every_ms),
        ):
            if value is not None and not 1_000 <= value <= MAX_CATCH_UP_WINDOW_MS:
                raise InvalidSchedule(name, f"must be between 1000 and {MAX_CATCH_UP_WINDOW_MS}")
        if self.exclude_calendars:
            from scheduler.domain.calendars import CALENDAR_NAME_RE

            if len(self.exclude_calendars) > MAX_CALENDARS:
                raise InvalidSchedule("excludeCalendars", f"more than {MAX_CALENDARS} calendars")
            for i, name in enumerate(self.exclude_calendars):
                if not CALENDAR_NAME_RE.fullmatch(name):
                    raise InvalidSchedule(
                        f"excludeCalendars.{i}", "must be 1-128 characters of [A-Za-z0-9._-]"
                    )
            if not any(leaf.evaluator() is not None for _, leaf in trigger_leaves(self.trigger)):
                raise InvalidSchedule(
                    "excludeCalendars", "excludes instants of time triggers: this schedule has none"
                )
        if not -MAX_PRIORITY <= self.priority <= MAX_PRIORITY:
            raise InvalidSchedule("priority", f"must be between -{MAX_PRIORITY} and {MAX_PRIORITY}")

    def _validate_shaping(self) -> None:
        from scheduler.domain.triggers.shaping import MAX_JITTER_MS, MAX_SPREAD_MS

        for name, value in (("notBefore", self.not_before), ("notAfter", self.not_after)):
            if value is not None and not 0 <= value <= MAX_INSTANT_MS:
                raise InvalidSchedule(name, "must be epoch milliseconds between 1970 and 2200")
        if self.not_before is not None and self.not_after is not None and self.not_after < self.not_before:
            raise InvalidSchedule("notAfter", "must not be before notBefore")
        for name, value, most in (
            ("spreadMs", self.spread_ms, MAX_SPREAD_MS),
            ("jitterMs", self.jitter_ms, MAX_JITTER_MS),
        ):
            if value is None:
                continue
            if not 0 <= value <= most:
                raise InvalidSchedule(name, f"must be between 0 and {most}")
            if value and not any(leaf.evaluator() is not None for _, leaf in trigger_leaves(self.trigger)):
                raise InvalidSchedule(name, "moves the instants of time triggers: this schedule has none")

    def _validate_constraints(self) -> None:
        if len(self.constraints) > MAX_CONSTRAINTS:
            raise InvalidSchedule("constraints", f"more than {MAX_CONSTRAINTS} constraints")
        for c in self.constraints:
            c.validate()
        groups = {g for c in self.constraints if (g := getattr(c, "group", None)) is not None}
        if len(groups) > 1:
            raise InvalidSchedule("constraints", "a schedule can be in one concurrency group only")
        if groups and not _GROUP_RE.fullmatch(groups.pop()):
            raise InvalidSchedule(
                "constraints.concurrency.group", "must be 1-128 characters of [A-Za-z0-9._-]"
            )


def validate_string_map(values: dict[str, str], field_name: str) -> None:
    """A schedule's data or a RUN's arguments: at most MAX_DATA_ENTRIES entries and MAX_DATA_BYTES."""
    if len(values) > MAX_DATA_ENTRIES:
        raise InvalidSchedule(field_name, f"more than {MAX_DATA_ENTRIES} entries")
    if values and (
        sum(_utf8_len(k, field_name) + _utf8_len(v, field_name) for k, v in values.items()) > MAX_DATA_BYTES
    ):
        raise InvalidSchedule(field_name, f"larger than {MAX_DATA_BYTES} bytes")


def _check_plain_trigger(trigger: Trigger) -> None:
    """A schedule without a program fires on time only: one time trigger, or an OR of them (several specs,
    their union: triggers.union)."""
    if isinstance(trigger, CronTrigger | FrequencyTrigger | OnceTrigger):
        return
    if isinstance(trigger, CompositeTrigger) and trigger.op == "OR":
        stack: list[tuple[Trigger, str]] = [(trigger, "trigger")]
        while stack:
            node, where = stack.pop()
            if isinstance(node, CompositeTrigger) and node.op == "OR":
                stack.extend((c, f"{where}.triggers.{i}") for i, c in enumerate(node.triggers))
            elif not isinstance(node, CronTrigger | FrequencyTrigger | OnceTrigger):
                raise InvalidSchedule(
                    where, "a schedule without a program fires on time: an OR of cron, frequency and once"
                )
        return
    raise InvalidSchedule(
        "program",
        "an event trigger or an AND needs a program to launch (without one: time triggers, or their OR)",
    )


def _check_tree_shape(trigger: Trigger) -> None:
    """Depth and size of an AND/OR tree, without recursion and before any leaf is validated: a hostile
    tree may be thousands deep or wide (each cron leaf costs a parse and a next-fire computation)."""
    stack = [(trigger, 1, "trigger")]
    leaves = 0
    while stack:
        node, depth, path = stack.pop()
        if depth > MAX_TRIGGER_DEPTH:
            raise InvalidSchedule(path, f"triggers nested deeper than {MAX_TRIGGER_DEPTH}")
        if isinstance(node, CompositeTrigger) and node.triggers:
            if len(node.triggers) > MAX_TRIGGER_LEAVES:
                raise InvalidSchedule("trigger", f"more than {MAX_TRIGGER_LEAVES} triggers")
            stack.extend((c, depth + 1, f"{path}.triggers.{i}") for i, c in enumerate(node.triggers))
        else:  # an empty AND/OR counts too (it is refused later), so the walk stays short
            leaves += 1
            if leaves > MAX_TRIGGER_LEAVES:
                raise InvalidSchedule("trigger", f"more than {MAX_TRIGGER_LEAVES} triggers")


#: maxFires: at most this many (a limited schedule's fires go through its trigger agent, which counts them)
MAX_FIRES = 1_000_000
#: pauseOnFailure: at most this many failed jobs in a row
MAX_PAUSE_ON_FAILURE = 1_000
#: the longest note a pause keeps (characters)
MAX_PAUSE_NOTE = 1_000


@dataclass(frozen=True, slots=True)
class PauseRequest:
    """What a DISABLE may say: why (a note for people), and until when (it resumes by itself then). An
    ENABLE carrying one is the resume of the pause ending at `until_ms` (a no-op once that pause changed)."""

    note: str | None = None
    until_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Paused:
    """A disabled schedule's pause: since when, why, by whom (the DISABLE's `scheduler-by`), until when."""

    at_ms: int
    note: str | None = None
    by: str | None = None
    until_ms: int | None = None


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """What the schedules table holds for one schedule."""

    schedule: Schedule
    created_at: int
    updated_at: int
    active_since: int  # fires due before this instant are never owed
    version: int = 1
    paused: Paused | None = None  # (a DISABLE's; None while enabled)
    fires: int = 0  # what its triggers made toward maxFires (counted only with it; kept but by DELETE)

    @property
    def exhausted(self) -> bool:
        """It made its `maxFires` fires: finished, fires and launches no more (RUN and BACKFILL still do)."""
        limit = self.schedule.max_fires
        return limit is not None and self.fires >= limit

    @property
    def fires_left(self) -> int | None:
        limit = self.schedule.max_fires
        return None if limit is None else max(0, limit - self.fires)

    @property
    def firing(self) -> bool:
        """Enabled and not exhausted: its triggers may still fire."""
        return self.schedule.enabled and not self.exhausted

    def evaluator(self) -> TimeTrigger:
        """The evaluator of a top-level time trigger, or of a plain schedule's union of time specs (as the
        schedule's bounds, spread and jitter move it)."""
        [(path, evaluator)] = self.time_leaves()
        assert path == "0"
        return evaluator

    def time_leaves(self) -> list[tuple[str, TimeTrigger]]:
        """Every time trigger of the schedule (top level or inside AND/OR) with its path; a plain schedule's
        OR of time triggers is one trigger, their union, at "0" (see triggers.union)."""
        shaped = self.schedule.shaped
        leaves = self._anchored_leaves()
        if self.schedule.program is None and isinstance(self.schedule.trigger, CompositeTrigger):
            from scheduler.domain.triggers.union import Union

            return [("0", shaped(Union(tuple(leaves))))]
        return [(path, shaped(evaluator)) for path, evaluator in leaves]

    def spec_leaves(self) -> list[tuple[str, TimeTrigger]]:
        """Each time trigger of the schedule by its own path (a union's specs one by one), as shaped: which
        of them an instant comes from."""
        shaped = self.schedule.shaped
        return [(path, shaped(evaluator)) for path, evaluator in self._anchored_leaves()]

    def _anchored_leaves(self) -> list[tuple[str, TimeTrigger]]:
        """The evaluator of each time trigger of the tree, by path, for a schedule active since active_since."""
        return [
            (path, evaluator.anchored(self.active_since))
            for path, leaf in trigger_leaves(self.schedule.trigger)
            if (evaluator := leaf.evaluator()) is not None
        ]

    def finished(self, now: int) -> bool:
        """Past its end: `notAfter` passed, `maxFires` made, or its triggers are time triggers none of which
        comes due again (a one-shot schedule whose instant passed). Kept and shown; deleted past the retention
        of finished schedules (domain/retention.py) unless it only made its maxFires."""
        s = self.schedule
        if (s.not_after is not None and now > s.not_after) or self.exhausted:
            return True
        leaves = trigger_leaves(s.trigger)
        if any(leaf.evaluator() is None for _, leaf in leaves):
            return False  # an event may still come
        after = max(now, self.active_since) - 1
        return all(t.next_due(after) is None for _, t in self.time_leaves())


@dataclass(frozen=True, slots=True)
class ScheduleCommand:
    key: ScheduleKey
    action: Action
    schedule: Schedule | None = None
    fire_range: tuple[int, int] | None = None  # RUN / BACKFILL: epoch ms, both ends included
    arguments: dict[str, str] = field(default_factory=dict)  # RUN / BACKFILL: runtime arguments
    pause: PauseRequest | None = None  # DISABLE: why, until when; ENABLE: the resume of that pause


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
