"""Domain records: schedules, their triggers, commands and fired tasks.

One frozen dataclass per concept. The Avro wire form lives in `scheduler.codec`, the HTTP form in
`scheduler.api`; both convert to and from these records. Times are integer epoch milliseconds (UTC).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

# defined in basics (which the triggers and constraints import), and imported from here as ever
from scheduler.basics import InvalidSchedule as InvalidSchedule
from scheduler.basics import TimeUnit as TimeUnit

if TYPE_CHECKING:
    from scheduler.constraints import Constraint, PendingTimeout
    from scheduler.triggers.base import TimeTrigger


class Action(StrEnum):
    INSERT = "INSERT"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    ENABLE = "ENABLE"
    DISABLE = "DISABLE"
    RUN = "RUN"  # fire once now (or at a given instant), whatever the triggers say
    BACKFILL = "BACKFILL"  # fire every due instant of the time triggers in a range


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
MAX_CRON_LEN = 256  # parsing cost grows with the expression; real ones are far shorter
MAX_TIMEZONE_LEN = 64  # the longest IANA zone name has 32 characters
_LONG_MAX = 2**63 - 1  # Avro long: what validation accepts must encode
#: the patterns validation applies, defined once (the HTTP models and the OpenAPI document use them too)
TOPIC_PATTERN = r"[A-Za-z0-9._-]{1,249}"
GROUP_PATTERN = r"[A-Za-z0-9._-]{1,128}"
_TOPIC_RE = re.compile(TOPIC_PATTERN, re.ASCII)
_GROUP_RE = re.compile(GROUP_PATTERN, re.ASCII)
# namespace.name; the name may hold dots but not start with one, nor hold ".." (datasets are paths too)
DATASET_RE = re.compile(r"[A-Za-z0-9_-]{1,128}\.(?!.*\.\.)[A-Za-z0-9_-][A-Za-z0-9_.-]{0,255}", re.ASCII)
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
    if not _clean_text(value):
        raise InvalidSchedule(
            field_name, "must not contain control characters, line separators or surrogates"
        )


def _clean_text(value: str) -> bool:
    """No C0/C1 control characters, line or paragraph separators, nor lone surrogates (which cannot be
    encoded as UTF-8: they arrive through JSON's \\udXXX escapes). Other Unicode is welcome."""
    return (value.isascii() and value.isprintable()) or not any(
        unicodedata.category(c) in _UNCLEAN_CATEGORIES for c in value
    )


_UNCLEAN_CATEGORIES = frozenset({"Cc", "Cs", "Zl", "Zp"})


def validate_dataset(dataset: str, field_name: str = "dataset") -> None:
    if not DATASET_RE.fullmatch(dataset):
        raise InvalidSchedule(field_name, f"dataset id {dataset!r} is not '<namespace>.<dataset>'")


def _utf8_len(value: str, field_name: str) -> int:
    try:
        return len(value.encode())
    except UnicodeEncodeError:
        raise InvalidSchedule(field_name, "not valid Unicode (a lone surrogate)") from None


@dataclass(frozen=True, slots=True)
class CronTrigger:
    """5 fields (minute first) or 6 fields (second first, as in Quartz and Spring)."""

    expression: str
    timezone: str = "UTC"

    def evaluator(self) -> TimeTrigger:
        from scheduler.triggers.cron import cron_evaluator, unparsable

        try:
            return cron_evaluator(self.expression, self.timezone)
        except ValueError as exc:
            # stored before the dialect refused it (croniter took `1-L`): it never fires, the worker lives
            return unparsable(self.expression, self.timezone, str(exc))


@dataclass(frozen=True, slots=True)
class FrequencyTrigger:
    """Every `time` x `unit`, from `start_ms` (or the next whole unit after the schedule became active)."""

    unit: TimeUnit
    time: int
    start_ms: int | None = None

    def evaluator(self) -> TimeTrigger:
        from scheduler.triggers.frequency import FrequencyEvaluator

        return FrequencyEvaluator(self.unit, self.time, self.start_ms)


@dataclass(frozen=True, slots=True)
class ProgramId:
    """A program the scheduler launches (CDAP's namespace/application/type/name)."""

    namespace: str
    application: str
    type: str
    name: str

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.application}/{self.type}/{self.name}"

    @classmethod
    def parse(cls, program_id: str) -> ProgramId:
        parts = program_id.split("/")
        if len(parts) != 4 or not all(parts) or any(len(p) > 128 or not _clean_text(p) for p in parts):
            raise InvalidSchedule(
                "program", f"program id {program_id!r} is not 'namespace/application/type/name'"
            )
        return cls(*parts)


class ProgramOutcome(StrEnum):
    """What a program-status trigger waits for; FINISHED is any end (COMPLETED, FAILED or KILLED)."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    FINISHED = "FINISHED"

    def matches(self, status: str) -> bool:
        return _OUTCOME_STATUSES[self].__contains__(status)


_OUTCOME_STATUSES = {
    ProgramOutcome.SUCCEEDED: frozenset({"COMPLETED"}),
    ProgramOutcome.FAILED: frozenset({"FAILED"}),
    ProgramOutcome.KILLED: frozenset({"KILLED"}),
    ProgramOutcome.FINISHED: frozenset({"COMPLETED", "FAILED", "KILLED"}),
}


@dataclass(frozen=True, slots=True)
class PartitionTrigger:
    """At least `min_partitions` new partitions of `dataset` ('<namespace>.<dataset>')."""

    dataset: str
    min_partitions: int = 1


@dataclass(frozen=True, slots=True)
class DataSizeTrigger:
    """At least `min_bytes` of new data in `dataset` (partition and data events both count)."""

    dataset: str
    min_bytes: int


@dataclass(frozen=True, slots=True)
class ProgramStatusTrigger:
    """Another program reached one of `on` (SUCCEEDED / FAILED / KILLED / FINISHED)."""

    program: ProgramId
    on: tuple[ProgramOutcome, ...] = (ProgramOutcome.SUCCEEDED,)


@dataclass(frozen=True, slots=True)
class ElapsedTrigger:
    """`ms` has passed: since the schedule's last job ("at least every T"), or, with a dataset or a program,
    since the last event of it without another one (a quiet period: "T since the last event")."""

    ms: int
    dataset: str | None = None
    program: ProgramId | None = None


@dataclass(frozen=True, slots=True)
class CompositeTrigger:
    """AND: every child must have fired since the last job; OR: any child."""

    op: str  # "AND" | "OR"
    triggers: tuple[Trigger, ...]


Trigger = (
    CronTrigger
    | FrequencyTrigger
    | PartitionTrigger
    | DataSizeTrigger
    | ProgramStatusTrigger
    | ElapsedTrigger
    | CompositeTrigger
)
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
            raise InvalidSchedule("topic", "must be 1-249 characters of [A-Za-z0-9._-]")
        if len(self.data) > MAX_DATA_ENTRIES:
            raise InvalidSchedule("data", f"more than {MAX_DATA_ENTRIES} entries")
        if self.data and (
            sum(_utf8_len(k, "data") + _utf8_len(v, "data") for k, v in self.data.items()) > MAX_DATA_BYTES
        ):
            raise InvalidSchedule("data", f"larger than {MAX_DATA_BYTES} bytes")
        if not 0 <= self.catch_up_window_ms <= MAX_CATCH_UP_WINDOW_MS:
            raise InvalidSchedule("catchUpWindowMs", f"must be between 0 and {MAX_CATCH_UP_WINDOW_MS}")
        _check_tree_shape(self.trigger)
        _validate_trigger(self.trigger, "trigger", 1)
        if self.program is None:
            if self.constraints or self.timeout is not None:
                raise InvalidSchedule("program", "constraints and timeout need a program to launch")
            if not isinstance(self.trigger, CronTrigger | FrequencyTrigger):
                raise InvalidSchedule("program", "an event or composite trigger needs a program to launch")
        else:
            ProgramId.parse(self.program.id)
            for _, leaf in trigger_leaves(self.trigger):
                if isinstance(leaf, ProgramStatusTrigger) and leaf.program == self.program:
                    raise InvalidSchedule("trigger.program", "a program never triggers itself")
        if self.constraints:
            self._validate_constraints()
        if self.timeout is not None and not 0 < self.timeout.timeout_ms <= MAX_CATCH_UP_WINDOW_MS:
            raise InvalidSchedule("timeout.timeoutMs", f"must be between 1 and {MAX_CATCH_UP_WINDOW_MS}")

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


def _validate_trigger(trigger: Trigger, field_name: str, depth: int) -> None:
    if depth > MAX_TRIGGER_DEPTH:
        raise InvalidSchedule(field_name, f"triggers nested deeper than {MAX_TRIGGER_DEPTH}")
    if isinstance(trigger, FrequencyTrigger):
        if not 1 <= trigger.time <= MAX_FREQUENCY_TIME:
            raise InvalidSchedule(f"{field_name}.time", f"must be between 1 and {MAX_FREQUENCY_TIME}")
        if trigger.start_ms is not None and not 0 <= trigger.start_ms <= _LONG_MAX:
            raise InvalidSchedule(f"{field_name}.start", "must be epoch milliseconds, not negative")
    elif isinstance(trigger, CronTrigger):
        from scheduler.triggers.cron import validate_cron

        expression, timezone = trigger.expression, trigger.timezone
        if len(expression) > MAX_CRON_LEN or not (expression.isascii() and expression.isprintable()):
            raise InvalidSchedule(
                f"{field_name}.expression", f"must be at most {MAX_CRON_LEN} printable ASCII characters"
            )
        if len(timezone) > MAX_TIMEZONE_LEN or not (timezone.isascii() and timezone.isprintable()):
            raise InvalidSchedule(
                f"{field_name}.timezone", f"unknown time zone {timezone[:MAX_TIMEZONE_LEN]!r}"
            )
        try:
            validate_cron(trigger.expression, trigger.timezone)
        except InvalidSchedule as exc:
            raise InvalidSchedule(exc.field.replace("trigger", field_name, 1), exc.message) from None
    elif isinstance(trigger, PartitionTrigger | DataSizeTrigger):
        validate_dataset(trigger.dataset, f"{field_name}.dataset")
        partitions = isinstance(trigger, PartitionTrigger)
        amount = trigger.min_partitions if isinstance(trigger, PartitionTrigger) else trigger.min_bytes
        if not 1 <= amount < 2**62:
            name = "minPartitions" if partitions else "minBytes"
            raise InvalidSchedule(f"{field_name}.{name}", "must be at least 1")
    elif isinstance(trigger, ElapsedTrigger):
        if not 1_000 <= trigger.ms <= MAX_CATCH_UP_WINDOW_MS:
            raise InvalidSchedule(f"{field_name}.ms", f"must be between 1000 and {MAX_CATCH_UP_WINDOW_MS}")
        if trigger.dataset is not None and trigger.program is not None:
            raise InvalidSchedule(field_name, "wait after a dataset or a program, not both")
        if trigger.dataset is not None:
            validate_dataset(trigger.dataset, f"{field_name}.dataset")
    elif isinstance(trigger, ProgramStatusTrigger):
        try:
            ProgramId.parse(trigger.program.id)
        except InvalidSchedule as exc:
            raise InvalidSchedule(f"{field_name}.program", exc.message) from None
        if not trigger.on:
            raise InvalidSchedule(f"{field_name}.on", "name at least one outcome")
    else:
        if trigger.op not in ("AND", "OR"):
            raise InvalidSchedule(f"{field_name}.op", "must be AND or OR")
        if not trigger.triggers:
            raise InvalidSchedule(f"{field_name}.triggers", "a composite trigger needs at least one trigger")
        for i, child in enumerate(trigger.triggers):
            _validate_trigger(child, f"{field_name}.triggers.{i}", depth + 1)


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """What the schedules table holds for one schedule."""

    schedule: Schedule
    created_at: int
    updated_at: int
    active_since: int  # fires due before this instant are never owed
    version: int = 1

    def evaluator(self) -> TimeTrigger:
        """The evaluator of a top-level time trigger."""
        trigger = self.schedule.trigger
        assert isinstance(trigger, CronTrigger | FrequencyTrigger)
        return trigger.evaluator().anchored(self.active_since)

    def time_leaves(self) -> list[tuple[str, TimeTrigger]]:
        """Every time trigger of the schedule (top level or inside AND/OR) with its path."""
        return [
            (path, leaf.evaluator().anchored(self.active_since))
            for path, leaf in trigger_leaves(self.schedule.trigger)
            if isinstance(leaf, CronTrigger | FrequencyTrigger)
        ]


@dataclass(frozen=True, slots=True)
class ScheduleCommand:
    key: ScheduleKey
    action: Action
    schedule: Schedule | None = None
    fire_range: tuple[int, int] | None = None  # RUN / BACKFILL: epoch ms, both ends included


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
