"""What the HTTP handlers answer: one pydantic model per response body.

A handler's JSON goes through its model (`answer` in scheduler.http.web: validated, then dumped with the keys
it was given), and the OpenAPI document's response schemas are generated from these same models
(scheduler.http.openapi), so the document cannot drift from the answers. A model allows fields it does not
name: answers may grow fields without breaking a client (the document says so too).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

from scheduler.domain.basics import CatchUpPolicy, OutputFormat, TimeUnit
from scheduler.domain.overlap import OverlapPolicy

Ms = Annotated[int, Field(description="epoch milliseconds, UTC")]


class Answer(BaseModel):
    model_config = ConfigDict(extra="allow")


class Error(Answer):
    error: str
    reason: str | None = Field(None, description="why (401, 403, 409, 503)")
    key: str | None = Field(None, description="the schedule (404)")
    runId: str | None = Field(None, description="the run (404)")


class FieldError(Answer):
    field: str
    message: str


class ValidationError(Answer):
    error: Literal["invalid request"]
    fields: list[FieldError] = Field(min_length=1)


class Accepted(Answer):
    key: str = Field(description="tenant/name")
    action: str
    fires: int | None = Field(None, description="run, backfill: how many fires the command will produce")
    partition: int | None = Field(None, description="the command's partition of the commands topic")
    offset: int | None = Field(
        None, description="the command's offset there: GET .../applied?offset= tells when it is applied"
    )
    applied: bool | None = Field(None, description="wait=applied: the owner has applied it")
    version: int | None = Field(
        None, description="wait=applied: the schedule's version after it (none: deleted)"
    )


class Applied(Answer):
    key: str = Field(description="tenant/name")
    offset: int
    applied: bool = Field(description="the owner has applied the key's partition's commands up to offset")


class DryRun(Answer):
    """What a write would do (`?dryRun=true`): validated as the write itself, nothing produced."""

    key: str = Field(description="tenant/name")
    action: str
    dryRun: bool = True
    triggerText: str | None = Field(None, description="the trigger in words, as the write would leave it")
    enabled: bool | None = None
    fires: int | None = Field(None, description="run, backfill: how many fires the command would produce")
    first: Ms | None = Field(None, description="run, backfill: the first instant it would fire")
    last: Ms | None = Field(None, description="run, backfill: the last instant it would fire")
    next: list[Ms] = Field(
        default_factory=list,
        description="the next fire times from now (a schedule's time triggers), or the first instants a "
        "backfill would fire; at most 10",
    )


class FireMinute(Answer):
    at: Ms = Field(description="the minute's start")
    fires: int = Field(description="scheduled fires in that minute (catch-up fires are not counted)")
    p50Ms: int | None = Field(description="lateness p50: the upper bound of its bucket, ms")
    p99Ms: int | None = Field(description="lateness p99: the upper bound of its bucket, ms")
    counts: list[int] = Field(description="fires per lateness bucket (bucketsMs, then over the last)")


class FireStats(Answer):
    bucketsMs: list[int] = Field(description="the lateness buckets' upper bounds, ms")
    minutes: list[FireMinute] = Field(description="the minutes with fires, oldest first")


class MessagesMinute(Answer):
    at: Ms = Field(description="the due minute's start")
    count: int = Field(description="delayed messages pending, due in that minute")


class MessageStats(Answer):
    byTopic: dict[str, int] = Field(description="delayed messages pending, by target topic")
    byMinute: list[MessagesMinute] = Field(
        description="the earliest due minutes with messages pending, at most `limit`"
    )
    beyond: int = Field(description="messages pending in the due minutes not listed (after the last one)")
    pending: int = Field(description="delayed messages pending in all")
    counting: list[int] = Field(
        description="partitions still being counted after a worker took them up: the counts leave out "
        "some of their messages until this is empty"
    )


class Trigger(Answer):
    type: str


class Constraint(Answer):
    type: str


class Timeout(Answer):
    timeoutMs: int
    action: str


class Retry(Answer):
    maxAttempts: int
    initialDelayMs: int
    multiplier: float
    maxDelayMs: int


class Paused(Answer):
    at: Ms = Field(description="when it was disabled")
    note: str | None = Field(None, description="why (the DISABLE's note)")
    by: str | None = Field(None, description="who disabled it (as the history's `by`)")
    until: Ms | None = Field(None, description="it is enabled again then, by itself")


class Schedule(Answer):
    key: str
    tenant: str
    name: str
    trigger: Trigger
    triggerText: str = Field(description="the trigger in words (as the CLI and the admin page show it)")
    topic: str
    data: dict[str, str]
    enabled: bool
    catchUp: CatchUpPolicy
    catchUpWindowMs: int
    createdAt: Ms
    updatedAt: Ms
    activeSince: Ms
    version: int
    program: str | None
    constraints: list[Constraint]
    timeout: Timeout | None
    retry: Retry | None = None
    timeLimitMs: int | None = None
    output: OutputFormat = OutputFormat.FIRED_TASK
    notBefore: Ms | None = None
    notAfter: Ms | None = None
    spreadMs: int | None = None
    jitterMs: int | None = None
    priority: int = 0
    completeWithinMs: int | None = None
    fireAtLeastEveryMs: int | None = None
    excludeCalendars: list[str] = Field(default_factory=list)
    description: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    pauseOnFailure: int | None = None
    maxFires: int | None = None
    overlap: OverlapPolicy | None = Field(None, description="its overlap policy (null: ALLOW_ALL)")
    finished: bool = Field(
        False,
        description="past its end (notAfter passed, maxFires made, or a one-shot whose instant passed): kept, "
        "fires no more",
    )
    fires: int = Field(
        0, description="fires (a program's: jobs) its triggers made toward maxFires (0 without)"
    )
    firesLeft: int | None = Field(None, description="maxFires less fires; null without maxFires")
    nextFireAt: Ms | None = Field(description="null when disabled or event-triggered only")
    paused: Paused | None = Field(None, description="why, by whom and until when it was disabled")


class ScheduleList(Answer):
    schedules: list[Schedule]
    total: int | None = Field(
        None,
        description="how many match in all (exact: the tenant quota's counts of each partition); null when "
        "filtered by more than the tenant (counting would read every schedule)",
    )
    next: str | None = Field(
        None, description="the cursor of the next page (`?cursor=`); null on the last page"
    )


class NextFires(Answer):
    key: str
    enabled: bool
    next: list[Ms]
    excluded: list[dict[str, Any]] = Field(
        default_factory=list,
        description="instants among them that calendars the schedule excludes hold: {at, calendar}; not fired",
    )
    specs: list[list[str]] | None = Field(
        None,
        description="an AND/OR trigger's: per instant of `next`, the paths of its time triggers due then "
        '("0.1": trigger.triggers[1]); null for a single trigger',
    )
    specTexts: dict[str, str] | None = Field(
        None, description="an AND/OR trigger's: each time trigger's path -> the trigger in words"
    )


class TaskFrequency(Answer):
    timeUnit: TimeUnit
    time: int


class TaskDefinition(Answer):
    host: str
    name: str
    action: str
    frequency: TaskFrequency
    topic: str
    start: Ms | None = None
    data: dict[str, str] | None = None


class TaskDefinitions(RootModel[list[TaskDefinition]]):
    pass


class TriggerProgress(Answer):
    key: str
    version: int
    enabled: bool
    jobsCreated: int
    trigger: dict[str, Any] = Field(
        description="the trigger tree: each node `path`, `satisfied`, its kind's counts and `text`"
    )


class CalendarAccepted(Answer):
    calendar: str = Field(description="tenant/name")
    action: str = Field(description="PUT or DELETE")


class CalendarOut(Answer):
    tenant: str
    name: str
    timezone: str
    dates: list[str] = Field(description="YYYY-MM-DD")
    ranges: list[dict[str, str]] = Field(description="{from, to}: YYYY-MM-DD, both included")
    weekdays: list[str] = Field(description="MON … SUN")
    description: str = ""


class Calendars(Answer):
    calendars: list[CalendarOut]


class BatchResult(Answer):
    index: int = Field(description="the item's place in the request's schedules")
    status: int = Field(description="what a POST /schedules of the item alone would have answered")


class BatchAnswer(Answer):
    total: int
    accepted: int = Field(description="items produced (202, or 200 once applied with ?wait=applied)")
    failed: int = Field(description="items refused (each result says why, as a single POST would)")
    produced: bool = Field(description="false: nothing was produced (atomic, and an item was refused)")
    results: list[BatchResult] = Field(
        description="one per item, in order, each with the fields of its answer"
    )


class RuleAccepted(Answer):
    rule: str = Field(description="tenant/name")
    action: str = Field(description="PUT or DELETE")


class RuleOut(Answer):
    tenant: str
    name: str
    on: list[str] = Field(
        description="RUN_SUCCEEDED, RUN_FAILED, RETRIES_EXHAUSTED, DEADLINE_MISSED, NOT_FIRED"
    )
    schedules: list[str] = Field(description="only these schedules' events (names); empty: every one's")
    webhook: dict[str, Any] = Field(description="url, format, secretRef, routingKey, headers")
    maxAttempts: int
    enabled: bool
    description: str = ""
    since: Ms = Field(description="its PUT: events before it are not its to send")


class Rules(Answer):
    rules: list[RuleOut]


class DeliveryOut(Answer):
    id: str = Field(description="the X-Scheduler-Delivery header of each of its calls")
    rule: str
    event: dict[str, Any] = Field(
        description="kind, tenant, schedule, at, program, runId, jobId, attempt, error"
    )
    url: str
    attempts: int = Field(description="calls made")
    outcome: Literal["PENDING", "RETRYING", "DELIVERED", "FAILED", "DROPPED"]
    status: int | None = Field(None, description="the last call's HTTP status (null: no answer)")
    error: str = ""
    at: Ms = Field(description="the last call's instant")
    nextAt: Ms | None = Field(None, description="RETRYING: when it is called again")
    calls: list[dict[str, Any]] = Field(description="the last 10 calls: {at, status, error, ms}")


class Deliveries(Answer):
    rule: str
    deliveries: list[DeliveryOut] = Field(description="the last 100, newest first")


class HistoryVersion(Answer):
    version: int = Field(description="the version the command made (RUN, BACKFILL: the one it fired)")
    at: Ms = Field(description="when the command was produced (its record's time)")
    by: str = Field(
        description="who sent it: the token's name over HTTP, a producer's `scheduler-by` header, else `topic`"
    )
    action: str
    changed: list[str] = Field(description="the fields this version changed (all of them for the first)")
    schedule: dict[str, Any] | None = Field(
        None, description="the definition it left, as PUT takes it (null: deleted, or unchanged)"
    )
    fires: int | None = None
    note: str | None = Field(None, description="disable: its note")
    until: Ms | None = Field(
        None, description="disable: when it resumes by itself; enable: the pause it ended"
    )


class ScheduleHistory(Answer):
    key: str
    versions: list[HistoryVersion]


class EventAccepted(Answer):
    eventKey: str
    timestamp: Ms


class MessageAccepted(Answer):
    id: str
    deliverAt: Ms | None = Field(description="when it is delivered; null: the record cancels it")


class DelayedMessage(Answer):
    id: str
    topic: str
    deliverAt: Ms
    key: str | None = Field(description="the delivered record's key; null: the id")
    valueBase64: str | None
    headers: dict[str, str] = Field(description="the caller's headers, delivered with the record")
    receivedAt: Ms
    status: Literal["pending"]


class DelayedMessages(Answer):
    messages: list[DelayedMessage] = Field(description="due first (ties: by id)")
    next: str | None = Field(
        None, description="the cursor of the next page (`?cursor=`); null on the last page"
    )


class IndexedTrigger(Answer):
    schedule: str
    path: str


class IndexEntry(Answer):
    eventKey: str
    triggers: list[IndexedTrigger]


class StalledLoop(Answer):
    loop: str = Field(
        description="commands (the ingest), punctuator (the fire timers), programs, calendars, notifier, launches, group"
    )
    since: int = Field(description="stalled since (epoch ms)")
    reason: str


class Health(Answer):
    status: str
    partitions: list[int]
    ready: bool = Field(
        description="in the group, not rebalancing nor recovering (queries are answered), no loop stalled"
    )
    notReady: str | None = Field(None, description="why it is not ready, in words")
    stalled: list[StalledLoop] = Field(
        default_factory=list, description="the loops with work waiting and none done for a while"
    )


#: every response model, under the name the OpenAPI document gives its schema
MODELS: tuple[type[BaseModel], ...] = (
    Error,
    ValidationError,
    Accepted,
    Applied,
    DryRun,
    FireStats,
    MessageStats,
    Schedule,
    ScheduleList,
    NextFires,
    TaskDefinition,
    TaskDefinitions,
    TriggerProgress,
    EventAccepted,
    MessageAccepted,
    DelayedMessage,
    DelayedMessages,
    IndexEntry,
    StalledLoop,
    Health,
    ScheduleHistory,
    HistoryVersion,
    CalendarAccepted,
    CalendarOut,
    Calendars,
    BatchAnswer,
    RuleAccepted,
    RuleOut,
    Rules,
    Deliveries,
)
