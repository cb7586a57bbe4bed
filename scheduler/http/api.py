"""HTTP/CLI edge models (pydantic v2): request bodies in, JSON out. Field names are the Avro names."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import (
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from scheduler.domain.basics import MAX_INSTANT_MS
from scheduler.domain.constraints import (
    CONSTRAINT_KINDS,
    CONSTRAINT_TAGS,
    MAX_CONSTRAINT_VALUE,
    Constraint,
    PendingTimeout,
    TimeoutAction,
    UnmetAction,
)
from scheduler.domain.labels import MAX_DESCRIPTION, MAX_LABELS
from scheduler.domain.model import (
    MAX_CONSTRAINTS,
    MAX_FIRES,
    MAX_FREQUENCY_TIME,
    MAX_PAUSE_NOTE,
    MAX_PAUSE_ON_FAILURE,
    MAX_PRIORITY,
    MAX_TRIGGER_LEAVES,
    CatchUpPolicy,
    OutputFormat,
    OverlapPolicy,
    Paused,
    ProgramId,
    Schedule,
    ScheduleKey,
    ScheduleState,
    TimeUnit,
    Trigger,
    default_unmet,
)
from scheduler.domain.runs import MAX_ATTEMPTS, MAX_RETRY_DELAY_MS, MAX_TIME_LIMIT_MS, RetryPolicy
from scheduler.domain.triggers.kinds import LONG_MAX as _LONG_MAX
from scheduler.domain.triggers.kinds import TRIGGER_KINDS, ProgramField, trigger_from_json
from scheduler.domain.triggers.kinds import In as _In


class CompositeTriggerIn(_In):
    type: Literal["and", "or"]
    triggers: list[TriggerIn] = Field(min_length=1, max_length=MAX_TRIGGER_LEAVES)


#: a trigger body: the body model of each kind (scheduler.domain.triggers.kinds), AND/OR nesting them
if TYPE_CHECKING:
    TriggerIn = Any
else:
    _KIND_BODIES = tuple(k.body for k in dict.fromkeys(TRIGGER_KINDS.values()) if k.body is not None)
    TriggerIn = Annotated[Union[(*_KIND_BODIES, CompositeTriggerIn)], Field(discriminator="type")]  # noqa: UP007
CompositeTriggerIn.model_rebuild()


#: a constraint body: the body model of each kind (scheduler.domain.constraints)
if TYPE_CHECKING:
    ConstraintIn = Any
else:
    _CONSTRAINT_BODIES = tuple(k.body for k in CONSTRAINT_KINDS.values())
    ConstraintIn = Annotated[Union[_CONSTRAINT_BODIES], Field(discriminator="type")]  # noqa: UP007


class TimeoutIn(_In):
    timeoutMs: int = Field(ge=1, le=MAX_CONSTRAINT_VALUE)
    action: TimeoutAction = TimeoutAction.DISCARD


class RetryIn(_In):
    """Retries of a schedule's FAILED runs, with exponential backoff (STOPPED and KILLED never retried)."""

    maxAttempts: int = Field(ge=1, le=MAX_ATTEMPTS, description="runs of a job in all, the first included")
    initialDelayMs: int = Field(10_000, ge=0, le=MAX_RETRY_DELAY_MS, description="backoff before the 2nd")
    multiplier: float = Field(
        2.0, ge=1.0, le=100.0, description="each further backoff is this many times longer"
    )
    maxDelayMs: int = Field(600_000, ge=0, le=MAX_RETRY_DELAY_MS, description="the longest backoff")


def _trigger(t: Any) -> Trigger:
    return trigger_from_json(t.model_dump())


def _constraint(c: Any, trigger: Trigger) -> Constraint:
    fields = c.model_dump(exclude={"type"})
    if fields.get("onUnmet", UnmetAction.WAIT) is None:  # (a time window that does not say)
        fields["onUnmet"] = default_unmet(trigger)
    return CONSTRAINT_TAGS[c.type].from_fields(fields)


class ScheduleBody(_In):
    """Body of PUT /schedules/{tenant}/{name}: the key comes from the path."""

    trigger: TriggerIn
    topic: str = ""  # required, except for a schedule with a program: its launch topic by default
    data: dict[str, str] = Field(default_factory=dict)
    enabled: bool = False
    catchUp: CatchUpPolicy = CatchUpPolicy.COALESCE
    catchUpWindowMs: int = Field(3_600_000, ge=0, le=_LONG_MAX)
    program: ProgramField | None = None
    constraints: list[ConstraintIn] = Field(default_factory=list, max_length=MAX_CONSTRAINTS)
    timeout: TimeoutIn | None = None
    retry: RetryIn | None = None
    timeLimitMs: int | None = Field(
        None,
        ge=1_000,
        le=MAX_TIME_LIMIT_MS,
        description="a run still going this long after it started is stopped and ends KILLED",
    )
    notBefore: int | None = Field(None, ge=0, le=_LONG_MAX, description="epoch ms: no fire nor job before")
    notAfter: int | None = Field(
        None, ge=0, le=_LONG_MAX, description="epoch ms: no fire nor job after; the schedule is finished then"
    )
    spreadMs: int | None = Field(
        None,
        ge=0,
        le=_LONG_MAX,
        description="time instants move by a stable offset in [0, spreadMs) from the key",
    )
    jitterMs: int | None = Field(
        None,
        ge=0,
        le=_LONG_MAX,
        description="each time instant moves by [0, jitterMs], from the key and the instant",
    )
    completeWithinMs: int | None = Field(
        None,
        ge=0,
        le=_LONG_MAX,
        description="SLA: each job's run completes within this of its trigger, or an alert",
    )
    fireAtLeastEveryMs: int | None = Field(
        None, ge=0, le=_LONG_MAX, description="SLA: a job at least once per this, or an alert"
    )
    excludeCalendars: list[str] = Field(
        default_factory=list,
        max_length=16,
        description="names of the tenant's calendars: an instant whose local date one holds does not fire",
    )
    priority: int = Field(
        0,
        ge=-MAX_PRIORITY,
        le=MAX_PRIORITY,
        description="its jobs' order in their job queue (a program's or a pool's): higher launches first",
    )
    output: OutputFormat = Field(
        OutputFormat.FIRED_TASK,
        description="what a fire sends to topic (no program): FIRED_TASK, or light-scheduler's TaskDefinition "
        "with start = the fire time (TASK_DEFINITION)",
    )
    description: str | None = Field(None, max_length=MAX_DESCRIPTION, description="for people")
    pauseOnFailure: int | None = Field(
        None,
        ge=1,
        le=MAX_PAUSE_ON_FAILURE,
        description="paused (a DISABLE with a note) after this many of its jobs in a row ended FAILED",
    )
    maxFires: int | None = Field(
        None,
        ge=1,
        le=MAX_FIRES,
        description="limited actions: finished after this many fires (a program's: jobs its triggers made); "
        "RUN and BACKFILL do not count",
    )
    overlap: OverlapPolicy | None = Field(
        None,
        description="what a job does while a run of the schedule's earlier jobs is active: ALLOW_ALL "
        "(the default), SKIP, BUFFER_ONE, BUFFER_ALL (at most 1,000 wait), CANCEL_OTHER (the run is stopped: "
        "STOPPED), TERMINATE_OTHER (killed: KILLED); a schedule with a program only",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description=f"for people and to select by (GET /schedules?label=team=data): at most {MAX_LABELS}, "
        "keys and non-empty values 1-63 of [A-Za-z0-9._-], beginning and ending with a letter or digit",
    )

    def to_schedule(self, key: ScheduleKey) -> Schedule:
        trigger = _trigger(self.trigger)
        return Schedule(
            key=key,
            trigger=trigger,
            topic=self.topic,
            data=dict(self.data),
            enabled=self.enabled,
            catch_up=self.catchUp,
            catch_up_window_ms=self.catchUpWindowMs,
            program=None if self.program is None else ProgramId.parse(self.program),
            constraints=tuple(_constraint(c, trigger) for c in self.constraints),
            timeout=None
            if self.timeout is None
            else PendingTimeout(self.timeout.timeoutMs, self.timeout.action),
            retry=None if self.retry is None else RetryPolicy.from_json(self.retry.model_dump()),
            time_limit_ms=self.timeLimitMs,
            output=self.output,
            not_before=self.notBefore,
            not_after=self.notAfter,
            spread_ms=self.spreadMs,
            jitter_ms=self.jitterMs,
            priority=self.priority,
            complete_within_ms=self.completeWithinMs,
            fire_at_least_every_ms=self.fireAtLeastEveryMs,
            exclude_calendars=tuple(self.excludeCalendars),
            description=self.description,
            labels=dict(self.labels),
            pause_on_failure=self.pauseOnFailure,
            max_fires=self.maxFires,
            overlap=self.overlap,
        )


class ScheduleIn(ScheduleBody):
    """Body of POST /schedules."""

    tenant: str
    name: str

    def key(self) -> ScheduleKey:
        return ScheduleKey(self.tenant, self.name)


class TaskFrequencyIn(_In):
    timeUnit: TimeUnit
    time: int = Field(ge=1, le=MAX_FREQUENCY_TIME)


class TaskDefinitionIn(_In):
    """light-scheduler's TaskDefinition as JSON (POST /schedulers)."""

    host: str
    name: str
    action: Literal["INSERT", "UPDATE", "DELETE"]
    frequency: TaskFrequencyIn | None = None
    topic: str
    start: int | None = Field(None, ge=0, le=_LONG_MAX)
    data: dict[str, str] | None = None

    def to_record(self) -> dict[str, Any]:
        rec = self.model_dump()
        if self.frequency is not None:
            rec["frequency"] = {"timeUnit": self.frequency.timeUnit.value, "time": self.frequency.time}
        return rec


def validation_errors(exc: ValidationError) -> list[dict[str, str]]:
    return [{"field": _field_name(err["loc"]), "message": err["msg"]} for err in exc.errors()]


def _field_name(loc: tuple[int | str, ...]) -> str:
    """Dotted field name without the union tags pydantic inserts ("trigger.cron.expression")."""
    parts = [
        str(p) for i, p in enumerate(loc) if not (i > 0 and _is_tag_position(loc, i) and p in _UNION_TAGS)
    ]
    return ".".join(parts) or "body"


def _is_tag_position(loc: tuple[int | str, ...], i: int) -> bool:
    """A union's tag follows its field: trigger.<tag>, triggers.<n>.<tag>, constraints.<n>.<tag>."""
    prev = loc[i - 1]
    return prev == "trigger" or (
        isinstance(prev, int) and i > 1 and loc[i - 2] in ("triggers", "constraints")
    )


#: the tags of the trigger and constraint unions (the body models' `type`)
_UNION_TAGS = frozenset(TRIGGER_KINDS) | frozenset(CONSTRAINT_TAGS)


def trigger_json(t: Trigger) -> dict[str, Any]:
    return t.to_json()


def constraint_json(c: Constraint) -> dict[str, Any]:
    return c.to_json()


def schedule_json(state: ScheduleState, next_fire_at: int | None, finished: bool = False) -> dict[str, Any]:
    s = state.schedule
    return {
        "key": s.key.id,
        "tenant": s.key.tenant,
        "name": s.key.name,
        "trigger": trigger_json(s.trigger),
        "triggerText": s.trigger.describe(),
        "topic": s.topic,
        "data": s.data,
        "enabled": s.enabled,
        "catchUp": s.catch_up.value,
        "catchUpWindowMs": s.catch_up_window_ms,
        "createdAt": state.created_at,
        "updatedAt": state.updated_at,
        "activeSince": state.active_since,
        "version": state.version,
        "program": None if s.program is None else s.program.id,
        "constraints": [constraint_json(c) for c in s.constraints],
        "timeout": None if s.timeout is None else s.timeout.to_json(),
        "retry": None if s.retry is None else s.retry.to_json(),
        **s.plain_fields(),
        "finished": finished,
        "fires": state.fires,
        "firesLeft": state.fires_left,
        "nextFireAt": next_fire_at,
        "paused": None if state.paused is None else paused_json(state.paused),
    }


def paused_json(p: Paused) -> dict[str, Any]:
    return {"at": p.at_ms, "note": p.note, "by": p.by, "until": p.until_ms}


def schedule_body_json(s: Schedule) -> dict[str, Any]:
    """A definition as PUT /schedules/{tenant}/{name} takes it (what a history version shows, and a
    rollback sends back)."""
    full = schedule_json(ScheduleState(s, 0, 0, 0), None)
    return {k: full[k] for k in ScheduleBody.model_fields if k in full}


def state_from_json(d: dict[str, Any]) -> ScheduleState:
    """Inverse of schedule_json (how one worker reads what another answered)."""
    body = ScheduleIn.model_validate({k: d[k] for k in ScheduleIn.model_fields})
    p = d.get("paused")
    return ScheduleState(
        body.to_schedule(body.key()),
        d["createdAt"],
        d["updatedAt"],
        d["activeSince"],
        d["version"],
        None if p is None else Paused(p["at"], p["note"], p["by"], p["until"]),
        d.get("fires") or 0,
    )


_FIRE_MIN, _FIRE_MAX = 946_684_800_000, 7_258_118_400_000  # 2000-01-01 .. 2200-01-01, epoch ms


class RunIn(_In):
    """Body of POST /schedules/{tenant}/{name}/run (optional): fire at `at` (default: now), with runtime
    `arguments` over the schedule's data (a program's job arguments, a FiredTask's data)."""

    at: int | None = Field(None, ge=_FIRE_MIN, le=_FIRE_MAX, description="epoch milliseconds")
    arguments: dict[str, str] = Field(
        default_factory=dict, description="runtime arguments, over the schedule's data (limits as data's)"
    )


class PauseIn(_In):
    """Body of POST /schedules/{tenant}/{name}/disable (optional): why it is paused, and when it resumes by
    itself (epoch ms, in the future)."""

    note: str | None = Field(None, max_length=MAX_PAUSE_NOTE, description="for people: why it is paused")
    until: int | None = Field(
        None, ge=0, le=MAX_INSTANT_MS, description="epoch milliseconds: it is enabled again then, by itself"
    )


class BackfillIn(_In):
    """Body of POST /schedules/{tenant}/{name}/backfill: every due instant in [from, to] (epoch ms)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    from_ms: int = Field(alias="from", ge=_FIRE_MIN, le=_FIRE_MAX, description="epoch milliseconds")
    to_ms: int = Field(alias="to", ge=_FIRE_MIN, le=_FIRE_MAX, description="epoch milliseconds, included")

    @field_validator("to_ms")
    @classmethod
    def _ordered(cls, to_ms: int, info: ValidationInfo) -> int:
        if "from_ms" in info.data and to_ms < info.data["from_ms"]:
            raise ValueError("must not be before 'from'")
        return to_ms


class BackfillsIn(BackfillIn):
    """Body of POST /schedules/{tenant}/{name}/backfills: a backfill object (scheduler.domain.backfills) of the
    instants in [from, to]."""

    reprocess: Literal["none", "failed", "all"] = Field(
        "none",
        description="none: only instants with no known run of the schedule; failed: those and those whose "
        "last run did not complete; all: every instant",
    )
    maxConcurrent: int = Field(1, ge=1, le=100, description="its jobs waiting or running at once, at most")
    order: Literal["oldest", "newest"] = Field("oldest", description="which instants launch first")
    overlap: OverlapPolicy | None = Field(
        None, description="the overlap policy of its jobs (default: the schedule's)"
    )
    dryRun: bool = Field(False, description="answer what it would launch; start nothing")


class EventIn(_In):
    """Body of POST /events: a notification (timestamp defaults to now)."""

    eventType: str
    payload: dict[str, str] = Field(default_factory=dict)
    timestamp: int | None = Field(None, ge=0, le=_LONG_MAX)
