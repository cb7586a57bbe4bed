"""The OpenAPI document's building blocks: its examples, the rules of keys and topics, the path and
query parameters, and the answers every operation shares (scheduler.http.openapi builds the document)."""

from __future__ import annotations

from typing import Any

from scheduler.domain.events import EventType
from scheduler.domain.model import (
    MAX_CATCH_UP_WINDOW_MS,
    MAX_NAME_LEN,
    MAX_TENANT_LEN,
    TOPIC_PATTERN,
)
from scheduler.http.applied import WAIT_MAX_MS
from scheduler.http.auth import READ
from scheduler.http.messages import ID_PATTERN, MAX_HTTP_ID

PATH = "/openapi.json"
_REF = "#/components/schemas/{model}"


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
#: the conditions of a schedule write (scheduler.http.writes.options)
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
