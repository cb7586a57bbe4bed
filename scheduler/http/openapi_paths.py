"""The OpenAPI document's paths: every operation of the HTTP API, its parameters, words and answers, as
scheduler.http.web routes them (scheduler.http.openapi puts them in the document)."""

from __future__ import annotations

from typing import Any

from scheduler.domain.model import (
    TimeUnit,
)
from scheduler.domain.runs import RunStatus
from scheduler.domain.triggers.kinds import TRIGGER_KINDS
from scheduler.http.applied import WAIT_MAX_MS
from scheduler.http.auth import WRITE
from scheduler.http.batch import MAX_BATCH
from scheduler.http.messages import MAX_STATS_MINUTES
from scheduler.http.openapi_parts import (
    _BACKFILL_ID,
    _CALENDAR_KEY,
    _LOCAL,
    _MESSAGE_ID,
    _PAGE,
    _PROGRAM_ID,
    _RULE_KEY,
    _RUN_ID,
    _SCHEDULE_KEY,
    _STR,
    PATH,
    _json,
    _op,
    _path,
    _query,
    _ref,
    _text,
)


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
