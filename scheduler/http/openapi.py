"""The OpenAPI 3.1 document of the HTTP API (GET /openapi.json).

Request bodies come from the pydantic models that validate them (scheduler.http.api, scheduler.worker.programs), so
the document cannot disagree with the validation; responses are written here, after what scheduler.http.web
answers. It is built once when the worker starts; tests check that it names every route and no other.
"""

from __future__ import annotations

import json
import re
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from faust.web import Request, Response, View
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from scheduler.domain.calendars import CalendarIn
from scheduler.domain.events import EventType
from scheduler.domain.model import (
    MAX_CATCH_UP_WINDOW_MS,
    MAX_NAME_LEN,
    MAX_TENANT_LEN,
    TOPIC_PATTERN,
    TimeUnit,
)
from scheduler.domain.notifications import RuleIn
from scheduler.domain.runs import RunStatus
from scheduler.domain.triggers.kinds import TRIGGER_KINDS
from scheduler.http import responses
from scheduler.http.api import (
    BackfillIn,
    BackfillsIn,
    EventIn,
    PauseIn,
    RunIn,
    ScheduleBody,
    ScheduleIn,
    TaskDefinitionIn,
)
from scheduler.http.applied import WAIT_MAX_MS
from scheduler.http.auth import READ, WRITE
from scheduler.http.batch import MAX_BATCH, BatchIn
from scheduler.http.messages import ID_PATTERN, MAX_HTTP_ID, MAX_STATS_MINUTES, MessageIn
from scheduler.worker.programs import ProgramSpec

if TYPE_CHECKING:
    from scheduler.worker.ports import WebPort

PATH = "/openapi.json"
_REF = "#/components/schemas/{model}"
_BODY_MODELS: tuple[type[BaseModel], ...] = (
    ScheduleIn,
    ScheduleBody,
    RunIn,
    PauseIn,
    BackfillIn,
    BackfillsIn,
    TaskDefinitionIn,
    EventIn,
    MessageIn,
    ProgramSpec,
    CalendarIn,
    RuleIn,
    BatchIn,
)


# no '/', control characters (C0, C1) nor line or paragraph separators (model._check_identifier)
_KEY_PART = r"^[^/\x00-\x1f\x7f-\x9f\u2028\u2029]+$"
_TOPIC = {"pattern": f"^{TOPIC_PATTERN}$"}
_TENANT_RULES = {"minLength": 1, "maxLength": MAX_TENANT_LEN, "pattern": _KEY_PART}
_NAME_RULES = {"minLength": 1, "maxLength": MAX_NAME_LEN, "pattern": _KEY_PART}
#: what Schedule.validate checks beyond the models' own constraints, so the document says it too
_SCHEDULE_RULES: dict[str, dict[str, Any]] = {
    "topic": {"pattern": f"^({TOPIC_PATTERN})?$", "description": "required without a program"},
    "catchUpWindowMs": {"maximum": MAX_CATCH_UP_WINDOW_MS},
}
_BODY_RULES: dict[str, dict[str, dict[str, Any]]] = {
    "ScheduleBody": _SCHEDULE_RULES,
    "ScheduleIn": {**_SCHEDULE_RULES, "tenant": _TENANT_RULES, "name": _NAME_RULES},
    "TaskDefinitionIn": {"host": _TENANT_RULES, "name": _NAME_RULES, "topic": _TOPIC},
    "EventIn": {"eventType": {"enum": [t.value for t in EventType]}},
}
#: request examples: the first session (README and docs/content/getting-started.md)
EXAMPLES: dict[str, dict[str, Any]] = {
    "ScheduleIn": {
        "tenant": "acme",
        "name": "heartbeat",
        "trigger": {"type": "cron", "expression": "*/5 * * * * *", "timezone": "Europe/Paris"},
        "topic": "acme-fires",
        "data": {"job": "ping"},
        "enabled": True,
    },
    "ScheduleBody": {
        "trigger": {"type": "frequency", "timeUnit": "SECONDS", "time": 10},
        "topic": "acme-fires",
    },
    "TaskDefinitionIn": {
        "host": "acme",
        "name": "every-minute",
        "action": "INSERT",
        "frequency": {"timeUnit": "MINUTES", "time": 1},
        "topic": "acme-fires",
    },
    "EventIn": {
        "eventType": "partition",
        "payload": {"datasetId": "acme.clicks", "partitionKeys": '["2026-11-22"]', "bytes": "1048576"},
    },
    "ProgramSpec": {"kind": "pyspark", "target": "scheduler.examples.pipelines:transform"},
    "CalendarIn": {
        "timezone": "Europe/Paris",
        "dates": ["2026-12-25", "2027-01-01"],
        "ranges": [{"from": "2026-08-01", "to": "2026-08-15"}],
        "weekdays": ["SAT", "SUN"],
    },
    "BatchIn": {
        "schedules": [
            {
                "tenant": "acme",
                "name": "hourly-sync",
                "topic": "acme-fires",
                "trigger": {"type": "cron", "expression": "0 * * * *"},
            },
            {
                "tenant": "acme",
                "name": "nightly-export",
                "topic": "acme-fires",
                "trigger": {"type": "cron", "expression": "0 3 * * *", "timezone": "Europe/Paris"},
            },
        ],
        "atomic": False,
    },  # fmt: skip
    "RuleIn": {
        "on": ["RETRIES_EXHAUSTED", "DEADLINE_MISSED"],
        "webhook": {"url": "https://hooks.slack.com/services/T000/B000/XXXX", "format": "slack"},
    },
    "MessageIn": {
        "id": "order-1234-expiry",
        "topic": "acme-orders",
        "deliverAt": 1_795_307_000_000,
        "key": "order-1234",
        "value": '{"action": "expire"}',
        "headers": {"source": "checkout"},
    },
    "RunIn": {"at": 1_795_307_000_000},
    "PauseIn": {"note": "warehouse migration, back after it", "until": 1_795_310_000_000},
    "BackfillIn": {"from": 1_795_300_000_000, "to": 1_795_307_000_000},
    "BackfillsIn": {
        "from": 1_795_300_000_000,
        "to": 1_795_307_000_000,
        "reprocess": "failed",
        "maxConcurrent": 2,
        "order": "newest",
    },
}


def register_routes(worker: WebPort) -> None:
    """Add GET /openapi.json (public: see auth.PUBLIC_PATHS) to the worker's web app."""
    document = json.dumps(build_spec(), separators=(",", ":")).encode()

    @worker.faust_app.page(PATH)
    class OpenApi(View):
        async def get(self, request: Request) -> Response:
            return self.bytes(document, content_type="application/json")


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": _REF.format(model=name)}


_STR: dict[str, Any] = {"type": "string"}


# --- parameters --------------------------------------------------------------------------------


def _path(name: str, description: str, example: str, **schema: Any) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string", "minLength": 1, **schema},
        "example": example,
    }


_MESSAGE_ID = {
    "name": "id", "in": "path", "required": True, "description": "the message id (its record's key)",
    "schema": {"type": "string", "minLength": 1, "maxLength": MAX_HTTP_ID, "pattern": ID_PATTERN},
    "example": "order-1234-expiry",
}  # fmt: skip


def _query(name: str, description: str, required: bool = False, **schema: Any) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "description": description,
        "schema": {"type": "string", **schema},
    }


_SCHEDULE_KEY = [
    _path("tenant", "the schedule's tenant", "acme", **_TENANT_RULES),
    _path("name", "the schedule's name", "heartbeat", **_NAME_RULES),
]
_CALENDAR_KEY = [
    _path("tenant", "the calendar's tenant", "acme", **_TENANT_RULES),
    _path("name", "the calendar's name", "holidays", maxLength=128, pattern="^[A-Za-z0-9._-]+$"),
]
_RULE_KEY = [
    _path("tenant", "the rule's tenant", "acme", **_TENANT_RULES),
    _path("name", "the rule's name", "ops-slack", maxLength=128, pattern="^[A-Za-z0-9._-]+$"),
]
_PROGRAM_ID = [
    _path(part, f"program id part ({part})", example, maxLength=128, pattern=_KEY_PART)
    for part, example in zip(
        ("namespace", "application", "type", "name"),
        ("acme", "pipelines", "spark", "clicks-etl"),
        strict=True,
    )
]
#: the conditions of a schedule write (scheduler.http.web.Handlers.conditions)
_WRITE_CONDITIONS = [
    {
        "name": "X-Request-Deadline",
        "in": "header",
        "required": False,
        "description": "epoch ms (the client's clock) after which the write must not be applied: its "
        "command is then not produced (408), or refused where it is applied",
        "schema": {"type": "integer"},
    },
    {
        "name": "X-Request-Timeout-Ms",
        "in": "header",
        "required": False,
        "description": "the same, counted from when the worker took the request (default: the worker's "
        "SCHEDULER_REQUEST_TIMEOUT_MS)",
        "schema": {"type": "integer", "minimum": 1, "maximum": 3_600_000},
    },
    {
        "name": "If-Match",
        "in": "header",
        "required": False,
        "description": 'the schedule version the write is meant for, as its ETag gives it ("3"); '
        "another version: 412",
        "schema": {"type": "string"},
    },
]
_RUN_ID = _path("run_id", "the run id (= its job id; may contain '/')", "acme/clicks-etl@v1.1")
_DRY_RUN = _query(
    "dryRun",
    "true: validate the write as it would be and answer what it would do (200: the trigger in words and "
    "its next fire times, or how many fires a run or backfill would make), producing nothing",
    type="string",
    enum=["true", "false"],
)
_WAIT = [
    _query(
        "wait",
        "applied: answer once the worker that owns the key has applied the write (200 with the schedule's "
        "version), not once it is on the commands topic (202); 504 if not applied within waitMs",
        type="string",
        enum=["applied"],
    ),
    _query(
        "waitMs",
        "wait=applied: at most this long (default 10,000)",
        type="integer",
        minimum=0,
        maximum=WAIT_MAX_MS,
    ),
]
_LOCAL = _query("local", "internal: answer from this worker only (how workers fan a list out)")


def _PAGE(default: int) -> list[dict[str, Any]]:  # noqa: N802 (reads as the constants beside it)
    """A list's paging parameters: `limit` (`default` when absent) and `cursor`."""
    return [
        _query(
            "limit", f"at most this many (default {default:,})", type="integer", minimum=1, maximum=10_000
        ),
        _query("cursor", "the `next` of the previous page: the page after it (keys in order, none repeated)"),
    ]


# --- operations --------------------------------------------------------------------------------


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _text(content_type: str, description: str, *more: str) -> dict[str, Any]:
    return {"description": description, "content": {t: {"schema": _STR} for t in (content_type, *more)}}


_ERRORS: dict[int, dict[str, Any]] = {
    400: _json(_ref("ValidationError"), "invalid request: each field and what is wrong with it"),
    401: {
        **_json(_ref("Error"), "no or an unknown bearer token"),
        "headers": {"WWW-Authenticate": {"schema": _STR}},
    },
    403: _json(_ref("Error"), "the token lacks the scope, or may not access this tenant"),
    404: _json(_ref("Error"), "not found"),
    409: _json(_ref("Error"), "conflict"),
    412: _json(_ref("Error"), "If-Match named another version of the schedule than it is at"),
    413: _json(_ref("Error"), "the request body is larger than the server reads (1 MiB)"),
    408: _json(_ref("Error"), "the write's deadline passed before its command could be produced"),
    504: _json(_ref("Error"), "wait=applied: accepted, but not applied within waitMs (it will be)"),
    503: {
        **_json(_ref("Error"), "partitions are moving between workers; retry after Retry-After seconds"),
        "headers": {"Retry-After": {"schema": {"type": "integer"}, "required": True}},
    },
}


_BACKFILL_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "the backfill's id (bf-…)",
    "schema": {"type": "string", "minLength": 1},
}


def _op(
    summary: str,
    ok: dict[int, dict[str, Any]],
    errors: tuple[int, ...] = (),
    params: list[dict[str, Any]] | None = None,
    body: str | None = None,
    scope: str | None = READ,
    body_required: bool = True,
) -> dict[str, Any]:
    """One operation; `body` names a request model; `scope` None = public (no token)."""
    op: dict[str, Any] = {"summary": summary, "operationId": "", "parameters": params or []}
    if body is not None:
        media = {"schema": _ref(body), "example": EXAMPLES[body]}
        op["requestBody"] = {"required": body_required, "content": {"application/json": media}}
    statuses = set(errors) | ({401, 403} if scope is not None else set())
    op["responses"] = {**{str(k): v for k, v in ok.items()}, **{str(s): _ERRORS[s] for s in sorted(statuses)}}
    op["security"] = [] if scope is None else [{"bearer": [scope]}]
    return op


def _paths() -> dict[str, dict[str, dict[str, Any]]]:
    accepted = {202: _json(_ref("Accepted"), "the command is on the commands topic")}
    schedule_write = (400, 404, 503)
    return {
        "/schedules:batch": {
            "post": _op(
                f"Create up to {MAX_BATCH:,} schedules: each item judged and answered on its own as a POST "
                "/schedules of it would be (dryRun and wait=applied apply to each); atomic: none unless all",
                {200: _json(_ref("BatchAnswer"), "one result per item, in order")},
                (400, 503),
                body="BatchIn",
                scope=WRITE,
            )
        },
        "/schedules": {
            "post": _op(
                "Create a schedule (INSERT); the same definition again is a no-op",
                accepted,
                (400, 409, 503),
                body="ScheduleIn",
                scope=WRITE,
            ),
            "get": _op(
                "List schedules, from every worker; filtered (every filter must hold; another parameter is a 400)",
                {200: _json(_ref("ScheduleList"), "a page of the schedules, in key order")},
                (400, 503),
                [
                    _query("tenant", "only this tenant's"),
                    _query("label", "a label selector: team=data,tier!=bronze,critical,!deprecated"),
                    _query(
                        "enabled", "only the enabled (true) or disabled (false) ones", enum=["true", "false"]
                    ),
                    _query(
                        "paused",
                        "only those paused by a DISABLE (true), or not (false)",
                        enum=["true", "false"],
                    ),
                    _query("trigger", "only those whose trigger is of this kind", enum=sorted(TRIGGER_KINDS)),
                    _query(
                        "program", "only those that launch this program (namespace/application/type/name)"
                    ),
                    _query("topic", "only those that fire to (or launch on) this topic"),
                    _query(
                        "finished",
                        "only the finished ones (notAfter passed, maxFires made, a one-shot fired: true), or not",
                        enum=["true", "false"],
                    ),
                    _query(
                        "nextBefore",
                        "epoch ms: only those whose next fire is at or before it",
                        type="integer",
                    ),
                    _query(
                        "nextAfter", "epoch ms: only those whose next fire is at or after it", type="integer"
                    ),
                    *_PAGE(1000),
                    _LOCAL,
                ],
            ),
        },
        "/schedules/{tenant}/{name}": {
            "get": _op(
                "One schedule, from the worker that owns it",
                {200: _json(_ref("Schedule"), "the schedule")},
                (404, 503),
                _SCHEDULE_KEY,
            ),
            "put": _op(
                "Replace a schedule's definition (UPDATE)",
                accepted,
                schedule_write,
                _SCHEDULE_KEY,
                body="ScheduleBody",
                scope=WRITE,
            ),
            "delete": _op("Delete a schedule", accepted, schedule_write, _SCHEDULE_KEY, scope=WRITE),
        },
        "/schedules/{tenant}/{name}/enable": {
            "post": _op("Enable a schedule", accepted, schedule_write, _SCHEDULE_KEY, scope=WRITE)
        },
        "/schedules/{tenant}/{name}/disable": {
            "post": _op(
                "Disable (pause) a schedule: with a note, and an instant it resumes at by itself",
                accepted,
                schedule_write,
                _SCHEDULE_KEY,
                body="PauseIn",
                scope=WRITE,
                body_required=False,
            )
        },
        "/schedules/{tenant}/{name}/run": {
            "post": _op(
                "Fire once now, or at `at`, whatever the triggers say (a job for a program schedule)",
                accepted,
                schedule_write,
                _SCHEDULE_KEY,
                body="RunIn",
                scope=WRITE,
                body_required=False,
            )
        },
        "/schedules/{tenant}/{name}/backfill": {
            "post": _op(
                "Fire every due instant of the schedule's time triggers in [from, to]",
                accepted,
                schedule_write,
                _SCHEDULE_KEY,
                body="BackfillIn",
                scope=WRITE,
            )
        },
        "/schedules/{tenant}/{name}/backfills": {
            "post": _op(
                "Start a backfill object: the instants of [from, to] (less those that ran, by `reprocess`), "
                "launched at most maxConcurrent at a time, oldest or newest first; a dry run lists them",
                {
                    200: _json(_ref("BackfillStarted"), "a dry run: what it would launch"),
                    202: _json(
                        _ref("BackfillStarted"), "its id: the backfill is on its schedule's job queue"
                    ),
                },
                schedule_write,
                _SCHEDULE_KEY,
                body="BackfillsIn",
                scope=WRITE,
            ),
            "get": _op(
                "The schedule's backfills, newest first, with their progress",
                {200: _json(_ref("Backfills"), "its backfills")},
                (400, 404, 503),
                _SCHEDULE_KEY,
            ),
        },
        "/schedules/{tenant}/{name}/backfills/{id}": {
            "get": _op(
                "One backfill's status and progress",
                {200: _json(_ref("Backfill"), "the backfill")},
                (400, 404, 503),
                [*_SCHEDULE_KEY, _BACKFILL_ID],
            ),
            "delete": _op(
                "Cancel a running backfill: no more of its instants launch, its waiting jobs are cancelled, "
                "its runs go on",
                {202: _json(_ref("Backfill"), "the cancel is on its job queue")},
                (400, 404, 409, 503),
                [*_SCHEDULE_KEY, _BACKFILL_ID],
                scope=WRITE,
            ),
        },
        "/schedules/{tenant}/{name}/next": {
            "get": _op(
                "The next n fire times (also while disabled)",
                {200: _json(_ref("NextFires"), "the next fire times")},
                (400, 404, 503),
                [*_SCHEDULE_KEY, _query("n", "how many", type="integer", minimum=1, maximum=1_000)],
            )
        },
        "/schedules/{tenant}/{name}/applied": {
            "get": _op(
                "Whether the key's owner has applied its commands up to a write's offset (read your writes)",
                {200: _json(_ref("Applied"), "applied or not (after waiting up to waitMs)")},
                (400, 503),
                [
                    *_SCHEDULE_KEY,
                    _query(
                        "offset",
                        "a write's offset, as its 202 gives it",
                        type="integer",
                        minimum=0,
                        required=True,
                    ),
                    _query(
                        "waitMs",
                        "wait up to this long for it (default 0)",
                        type="integer",
                        minimum=0,
                        maximum=WAIT_MAX_MS,
                    ),
                ],
            )
        },
        "/schedules/{tenant}/{name}/trigger": {
            "get": _op(
                "Progress toward the schedule's trigger",
                {200: _json(_ref("TriggerProgress"), "the trigger tree with its progress")},
                (404, 503),
                _SCHEDULE_KEY,
            )
        },
        "/schedules/{tenant}/{name}/history": {
            "get": _op(
                "The schedule's history: every applied command, who sent it and when, what it changed",
                {200: _json(_ref("ScheduleHistory"), "the versions, newest first")},
                (404, 503),
                _SCHEDULE_KEY,
            )
        },
        "/schedulers": {
            "post": _op(
                "light-scheduler's TaskDefinition (INSERT, UPDATE, DELETE)",
                {200: _json(_ref("Accepted"), "the command is on the commands topic")},
                (400, 404, 409, 503),
                body="TaskDefinitionIn",
                scope=WRITE,
            ),
            "get": _op(
                "light-scheduler's view: TaskDefinitions of the frequency schedules",
                {
                    200: _json(
                        _ref("TaskDefinitions"),
                        "a page of TaskDefinitions; the next page's cursor in the X-Next-Cursor header",
                    )
                },
                (400, 503),
                [
                    _query("host", "the tenant"),
                    _query("name", "the schedule's name"),
                    _query("unit", "the frequency's time unit", enum=[u.value for u in TimeUnit]),
                    *_PAGE(10_000),
                ],
            ),
        },
        "/events": {
            "post": _op(
                "Publish an event (a Notification) to the events topic",
                {202: _json(_ref("EventAccepted"), "the event is on the events topic")},
                (400,),
                body="EventIn",
                scope=WRITE,
            )
        },
        "/messages": {
            "post": _op(
                "Deliver a record to a topic at an instant (a delayed message; the same id replaces it)",
                {202: _json(_ref("MessageAccepted"), "the record is on the delayed topic")},
                (400, 403),
                body="MessageIn",
                scope=WRITE,
            ),
            "get": _op(
                "The delayed messages pending, due first (from every worker), in pages",
                {200: _json(_ref("DelayedMessages"), "a page of pending messages and `next`")},
                (400, 403, 503),
                [
                    _query("dueBefore", "epoch ms: only those due at or before it", type="integer"),
                    _query("topic", "only those delivered to this topic"),
                    *_PAGE(100),
                    _LOCAL,
                ],
            ),
        },
        "/messages/{id}": {
            "get": _op(
                "A delayed message still pending",
                {200: _json(_ref("DelayedMessage"), "the message, pending")},
                (400, 403, 404, 503),
                [_MESSAGE_ID],
            ),
            "delete": _op(
                "Cancel a delayed message (a tombstone of its id on the delayed topic)",
                {202: _json(_ref("MessageAccepted"), "the tombstone is on the delayed topic")},
                (400, 403),
                [_MESSAGE_ID],
                scope=WRITE,
            ),
        },
        "/triggers": {
            "get": _op(
                "The reverse trigger index: which schedules' triggers an event key reaches",
                {200: _json(_ref("IndexEntry"), "the index entry")},
                (400, 503),
                [_query("eventKey", "e.g. partition:<namespace>.<dataset>", required=True, minLength=1)],
            )
        },
        "/jobs": {
            "get": _op(
                "Pending jobs and why they wait, in pages (by queue, then queue order); recent outcomes "
                "(from every worker)",
                {200: _json(_ref("Jobs"), "a page of jobs, the recent outcomes (first page), `next`")},
                (400, 503),
                [
                    _query("schedule", "tenant/name"),
                    _query("program", "namespace/application/type/name"),
                    _query("state", "a job state or an outcome (SKIP, DISCARD, CANCELLED)"),
                    _query("jobId", "one job"),
                    *_PAGE(1000),
                    _LOCAL,
                ],
            )
        },
        "/jobs/{id}": {
            "delete": _op(
                "Cancel a pending job (its outcome CANCELLED, in the recent outcomes); a launched one is a run: "
                "stop it",
                {202: _json(_ref("JobCancelAccepted"), "the cancel is on its job queue")},
                (403, 404, 503),
                [
                    {
                        "name": "id",
                        "in": "path",
                        "required": True,
                        "description": "the job id (tenant/name@…)",
                        "schema": {"type": "string", "minLength": 1},
                        "example": "acme/etl@1795307000000",
                    }
                ],
                scope=WRITE,
            )
        },
        "/sensors": {
            "get": _op(
                "Polling sensors (programs of kind sensor) and their state",
                {200: _json(_ref("SensorList"), "every sensor the token may see")},
                (),
                [_query("namespace", "only the sensors of this namespace")],
            )
        },
        "/programs/{namespace}/{application}/{type}/{name}/sensor": {
            "get": _op(
                "A polling sensor's state: its cursor, its last evaluation, when the next is due",
                {200: _json(_ref("SensorStatus"), "the sensor")},
                (404,),
                [*_PROGRAM_ID],
            )
        },
        "/programs": {
            "get": _op(
                "Registered programs, by id",
                {
                    200: _json(
                        _ref("Programs"),
                        "program id -> definition, a page; the next page's cursor in the X-Next-Cursor header",
                    )
                },
                (400,),
                _PAGE(10_000),
            )
        },
        "/calendars": {
            "get": _op(
                "Exclusion calendars (of the caller's tenants)",
                {200: _json(_ref("Calendars"), "the calendars")},
                (),
                [_query("tenant", "only this tenant's")],
            )
        },
        "/calendars/{tenant}/{name}": {
            "put": _op(
                "Create or replace an exclusion calendar (every schedule that excludes it follows at once)",
                {202: _json(_ref("CalendarAccepted"), "the calendar is on the calendars topic")},
                (400,),
                _CALENDAR_KEY,
                body="CalendarIn",
                scope=WRITE,
            ),
            "get": _op(
                "An exclusion calendar",
                {200: _json(_ref("CalendarOut"), "the calendar")},
                (404,),
                _CALENDAR_KEY,
            ),
            "delete": _op(
                "Delete an exclusion calendar (schedules that exclude it then exclude nothing by it)",
                {202: _json(_ref("CalendarAccepted"), "the deletion is on the calendars topic")},
                (404,),
                _CALENDAR_KEY,
                scope=WRITE,
            ),
        },
        "/notifications": {
            "get": _op(
                "Notification rules (of the caller's tenants)",
                {200: _json(_ref("Rules"), "the rules")},
                (),
                [_query("tenant", "only this tenant's")],
            )
        },
        "/notifications/{tenant}/{name}": {
            "put": _op(
                "Create or replace a notification rule: events of the tenant's schedules to a webhook",
                {202: _json(_ref("RuleAccepted"), "the rule is on the rules topic")},
                (400,),
                _RULE_KEY,
                body="RuleIn",
                scope=WRITE,
            ),
            "get": _op("A notification rule", {200: _json(_ref("RuleOut"), "the rule")}, (404,), _RULE_KEY),
            "delete": _op(
                "Delete a notification rule",
                {202: _json(_ref("RuleAccepted"), "the deletion is on the rules topic")},
                (404,),
                _RULE_KEY,
                scope=WRITE,
            ),
        },
        "/notifications/{tenant}/{name}/deliveries": {
            "get": _op(
                "A notification rule's last deliveries, newest first: each event's calls and how they went",
                {200: _json(_ref("Deliveries"), "the deliveries")},
                (404,),
                _RULE_KEY,
            )
        },
        "/programs/{namespace}/{application}/{type}/{name}": {
            "put": _op(
                "Register (or replace) a program",
                {202: _json(_ref("ProgramAccepted"), "the definition is on the programs topic")},
                (400,),
                _PROGRAM_ID,
                body="ProgramSpec",
                scope=WRITE,
            ),
            "get": _op(
                "A program's definition",
                {200: _json(_ref("ProgramSpec"), "the definition")},
                (404,),
                _PROGRAM_ID,
            ),
        },
        "/programs/{namespace}/{application}/{type}/{name}/status": {
            "get": _op(
                "A program's status (seed 004's user-facing one): its newest active run's, or its last run's end",
                {200: _json(_ref("ProgramStatus"), "the status")},
                (404, 503),
                _PROGRAM_ID,
            )
        },
        "/programs/{namespace}/{application}/{type}/{name}/runs": {
            "get": _op(
                "A program's run records (the last 100)",
                {200: _json(_ref("Runs"), "the runs, oldest first")},
                (503,),
                [
                    *_PROGRAM_ID,
                    _query("status", "only runs in this state", enum=[s.value for s in RunStatus]),
                ],
            )
        },
        "/programs/{namespace}/{application}/{type}/{name}/runs/{run_id}/logs": {
            "get": _op(
                "A run's output (stdout and stderr, secrets masked), from the launcher that ran it",
                {200: _json(_ref("RunLogs"), "what is kept of its output from `offset` on")},
                (400, 404, 503),
                [
                    *_PROGRAM_ID,
                    _RUN_ID,
                    _query(
                        "offset", "from this byte of all it printed (0; a page's `next`)", pattern=r"^\d+$"
                    ),
                    _query("limit", "at most this many bytes (1,048,576)", pattern=r"^\d+$"),
                    _query(
                        "follow",
                        "true: answer once there is output past `offset`, the run ended, or 20 s passed",
                        enum=["true", "false"],
                    ),
                ],
            )
        },
        "/programs/{namespace}/{application}/{type}/{name}/runs/{run_id}": {
            "get": _op(
                "One run record",
                {200: _json(_ref("Run"), "the run")},
                (404, 503),
                [*_PROGRAM_ID, _RUN_ID],
            )
        },
        **{
            f"/programs/{{namespace}}/{{application}}/{{type}}/{{name}}/runs/{{run_id}}/{action}": {
                "post": _op(
                    summary,
                    {202: _json(_ref("RunActionAccepted"), "the request is on its way to the launcher")},
                    (404, 409, 503),
                    [*_PROGRAM_ID, _RUN_ID],
                    scope=WRITE,
                )
            }
            for action, summary in (
                ("stop", "Stop a run (STOPPING, then STOPPED; a run not started yet: STOPPED at once)"),
                ("suspend", "Suspend a RUNNING run (SUSPENDING, then SUSPENDED: its processes are paused)"),
                ("resume", "Resume a SUSPENDED run (RESUMING, then RUNNING)"),
            )
        },
        "/metrics": {
            "get": _op(
                "Prometheus metrics of this worker (needs a token for every tenant)",
                {
                    200: {
                        "description": "the Prometheus text format, or OpenMetrics if the Accept header asks",
                        "content": {
                            "text/plain": {"schema": _STR},
                            "application/openmetrics-text": {"schema": _STR},
                        },
                    }
                },
            )
        },
        "/ui": {"get": _op("The admin page", {200: _text("text/html", "the page")}, scope=None)},
        "/ui/{asset}": {
            "get": _op(
                "The admin page's files",
                {200: _text("text/html", "the file", "text/javascript", "text/css")},
                (404,),
                [_path("asset", "a file name", "admin.js", pattern=r"^[^/]*$")],
                scope=None,
            )
        },
        "/stats/fires": {
            "get": _op(
                "Fires and their lateness per minute over the last hour, from every worker (a token for "
                "every tenant)",
                {200: _json(_ref("FireStats"), "per minute: fires, lateness p50 and p99, per bucket")},
                (400, 503),
                [
                    _query(
                        "minutes", "how many minutes back (default 60)", type="integer", minimum=1, maximum=60
                    ),
                    _LOCAL,
                ],
            )
        },
        "/stats/messages": {
            "get": _op(
                "Delayed messages pending, from every worker: by target topic and by due minute (a token "
                "for every tenant)",
                {200: _json(_ref("MessageStats"), "counts by topic, the earliest due minutes, the rest")},
                (400, 403, 503),
                [
                    _query(
                        "limit",
                        "how many due minutes (default 60)",
                        type="integer",
                        minimum=1,
                        maximum=MAX_STATS_MINUTES,
                    ),
                    _LOCAL,
                ],
            )
        },
        "/health": {
            "get": _op(
                "Liveness and readiness: partitions owned, counters",
                {200: _json(_ref("Health"), "the worker's state")},
                scope=None,
            )
        },
        PATH: {
            "get": _op(
                "This document",
                {200: _json({"type": "object"}, "the OpenAPI 3.1 document")},
                scope=None,
            )
        },
    }


def build_spec() -> dict[str, Any]:
    """The OpenAPI 3.1 document of every route scheduler.http.web registers (HEAD, which Faust adds to every
    route and answers as GET, is left implicit)."""
    _, defs = models_json_schema(
        [(m, "validation") for m in _BODY_MODELS] + [(m, "serialization") for m in responses.MODELS],
        ref_template=_REF,
    )
    schemas = defs["$defs"]
    for model, rules in _BODY_RULES.items():
        for field_name, extra in rules.items():
            schemas[model]["properties"][field_name].update(extra)
    paths = _paths()
    for path, ops in paths.items():
        for method, op in ops.items():
            op["operationId"] = _operation_id(method, path)
            if "requestBody" in op:
                op["responses"]["413"] = _ERRORS[413]
            if path.startswith(("/schedules", "/schedulers")) and method != "get":  # a write: its conditions
                op["parameters"] = [*op["parameters"], *_WRITE_CONDITIONS]
                op["responses"].update({str(s): _ERRORS[s] for s in (408, 412)})
            if path.startswith("/schedules") and method != "get":  # and a dry run, and wait=applied
                op["parameters"] = [*op["parameters"], _DRY_RUN, *_WAIT]
                if path == "/schedules:batch":  # (each item's answer is one of these, in its result)
                    continue
                op["responses"]["200"] = _json(
                    {"anyOf": [_ref("DryRun"), _ref("Accepted")]},
                    "dryRun=true: what the write would do; wait=applied: the write, applied",
                )
                op["responses"]["504"] = _ERRORS[504]
    one = paths["/schedules/{tenant}/{name}"]["get"]["responses"]["200"]
    one["headers"] = {"ETag": {"description": 'the schedule\'s version ("3"), for If-Match', "schema": _STR}}
    _link(paths, "post", "/schedules", {"tenant": "$request.body#/tenant", "name": "$request.body#/name"})
    program = "/programs/{namespace}/{application}/{type}/{name}"
    _link(
        paths, "put", program, {p: f"$request.path.{p}" for p in ("namespace", "application", "type", "name")}
    )
    try:
        app_version = version("kafka-job-scheduler")
    except PackageNotFoundError:
        app_version = "0"
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Kafka-native job scheduler",
            "version": app_version,
            "description": (
                "Writes are asynchronous: 202 means the command is on the commands topic. Any worker "
                "answers any query; while partitions move between workers a query answers 503 with "
                "Retry-After. Bearer tokens carry scopes sched:r (GET) and sched:w (other methods) and "
                "the tenants they may access; /health, /ui and /openapi.json are public."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": (
                        "Scopes (listed as roles in each operation's security requirement): sched:r "
                        "reads, sched:w writes. A token is bound to tenants, or to every tenant ('*')."
                    ),
                }
            },
        },
        "security": [{"bearer": []}],
    }


def _link(paths: dict[str, Any], method: str, path: str, parameters: dict[str, str]) -> None:
    """OpenAPI links from a write's 202 to the operations on what it created (stateful testing follows
    them): every operation under `path` that takes exactly these parameters."""
    prefix = "/schedules/{tenant}/{name}" if path == "/schedules" else path
    links = {
        op["operationId"]: {"operationId": op["operationId"], "parameters": parameters}
        for target, ops in paths.items()
        if target.startswith(prefix) and target.count("{") == len(parameters)
        for op in ops.values()
    }
    op = paths[path][method]
    op["responses"]["202"] = {**op["responses"]["202"], "links": links}


def _operation_id(method: str, path: str) -> str:
    """getSchedulesTenantName, postProgramsNamespaceApplicationTypeNameRunsRunIdStop, getOpenapiJson."""
    return method + "".join(w[:1].upper() + w[1:] for w in re.split(r"[^A-Za-z0-9]+", path) if w)


__all__ = ["build_spec", "register_routes"]
