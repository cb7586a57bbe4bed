"""HTTP API on Faust's web server: a table of routes and one flat handler each.

Every route goes through the same steps: the tenant guard (the path's tenant or namespace must be one the
request's token holds), the body parsed by its model (scheduler.http.api), then the handler. Writes become
commands on the commands topic (202 with the key). A query about one key is answered by the worker that
owns its partition, list queries fan out to every worker (scheduler.http.cluster); while partitions move, a
query that cannot be answered right gets 503 with Retry-After. Every answer goes through its response
model (scheduler.http.responses), which the OpenAPI document is generated from.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

from aiohttp import web as aioweb
from faust.web import Request, Response, View
from pydantic import BaseModel

from scheduler.domain.calendars import CalendarIn
from scheduler.domain.events import InvalidEvent, Notification, event_key
from scheduler.domain.events import parse as parse_event
from scheduler.domain.model import (
    CompositeTrigger,
    ScheduleKey,
    ScheduleState,
)
from scheduler.domain.notifications import RuleIn
from scheduler.domain.tenancy import (
    event_tenant,
)
from scheduler.domain.triggers.instants import upcoming
from scheduler.http import (
    auth,
    backfills,
    batch,
    calendars,
    jobs,
    messages,
    notifications,
    programs,
    reads,
    run_logs,
    status,
    writes,
)
from scheduler.http import responses as out
from scheduler.http.api import (
    BackfillIn,
    BackfillsIn,
    EventIn,
    PauseIn,
    RunIn,
    ScheduleBody,
    ScheduleIn,
    TaskDefinitionIn,
    schedule_json,
)
from scheduler.http.applied import AppliedWaits
from scheduler.http.batch import BatchIn
from scheduler.http.calls import (
    MAX_LIST,
    Call,
    answer,
    deny_tenants,
    parse_body,
)
from scheduler.http.cluster import ROUTED_HEADER, Cluster, Unavailable
from scheduler.wire.codec import (
    encode,
    key_bytes,
    key_from_bytes,
    notification_to_avro,
)

if TYPE_CHECKING:
    from scheduler.worker.ports import WebPort

__all__ = ["ROUTED_HEADER", "ROUTES", "answer", "register_views"]

# --- the shared steps --------------------------------------------------------------------------------


Handler = Callable[["Handlers", Call], Awaitable[Response]]


@dataclass(frozen=True)
class Route:
    """One method of one path: its handler, the path parameter its tenant guard checks (the tenant or the
    program's namespace; None: the handler checks what the request touches), and its body's model."""

    method: str
    path: str
    handler: Handler
    guard: str | None = None
    body: type[BaseModel] | None = None
    empty_body_ok: bool = False


@aioweb.middleware
async def _json_errors(
    request: aioweb.Request, handler: Callable[[aioweb.Request], Awaitable[aioweb.StreamResponse]]
) -> aioweb.StreamResponse:
    """aiohttp's own 4xx (no route matches the path, a method the route lacks) answer JSON like ours."""
    try:
        return await handler(request)
    except aioweb.HTTPException as exc:
        if exc.status < 400 or exc.content_type == "application/json":
            raise
        body = {"error": (exc.reason or "error").lower(), "path": request.path}
        headers = {k: v for k, v in exc.headers.items() if k.lower() == "allow"}
        return aioweb.json_response(body, status=exc.status, headers=headers)


def _view_method(handlers: Handlers, route: Route) -> Callable[..., Awaitable[Response]]:
    async def method(view: View, request: Request, **params: str) -> Response:
        received_at = handlers.worker.clock()
        if route.guard is not None and (denied := deny_tenants(view, request, params[route.guard])):
            return denied
        body = None
        if route.body is not None:
            body, error = await parse_body(view, request, route.body, route.empty_body_ok)
            if error is not None:
                return error
        return await route.handler(handlers, Call(view, request, params, body, received_at))

    return method


def register_views(worker: WebPort) -> None:
    """Add every route of ROUTES (and /metrics, /ui, /openapi.json) to the worker's web app."""
    app = worker.faust_app
    # every route, Faust's own included, goes through auth (raises AuthConfigError: the worker won't start)
    middlewares = cast(Any, app.web).web_app.middlewares
    middlewares.append(auth.middleware(auth.load_tokens(worker.settings)))
    middlewares.append(_json_errors)
    handlers = Handlers(worker)
    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:  # in order: a path registered first is matched first
        paths.setdefault(route.path, {})[route.method.lower()] = _view_method(handlers, route)
    for i, (path, methods) in enumerate(paths.items()):
        app.page(path)(type(f"Route{i}", (View,), methods))

    from scheduler.http import admin_ui, openapi
    from scheduler.worker import metrics

    metrics.register_routes(worker)
    admin_ui.register_routes(worker)
    openapi.register_routes(worker)


# --- the handlers ------------------------------------------------------------------------------------


class Handlers:
    def __init__(self, worker: WebPort) -> None:
        self.worker = worker
        self.cluster = Cluster(worker)
        self.applied = AppliedWaits(worker, self.cluster)

    async def publish_event(self, call: Call) -> Response:
        body: EventIn = call.body
        ts = body.timestamp if body.timestamp is not None else self.worker.clock()
        notification = Notification(ts, body.eventType, dict(body.payload))
        try:
            parsed = parse_event(notification)
        except InvalidEvent as exc:
            return call.field_error("eventType" if "event type" in str(exc) else "payload", str(exc))
        if denied := deny_tenants(call.view, call.request, event_tenant(parsed)):
            return denied
        key = event_key(parsed)
        value = encode("Notification", notification_to_avro(notification))
        await self.worker.publish(self.worker.settings.events_topic, key.encode(), value)
        return call.answer(out.EventAccepted, {"eventKey": key, "timestamp": ts}, 202)

    # --- one-key queries: answered by the key's owner -----------------------------------------

    async def forwarded(self, call: Call, key: bytes) -> Response | None:
        """The owner's answer if another worker owns `key` (None: this one does)."""
        try:
            forwarded = await self.cluster.forward(call.request, key)
        except Unavailable as exc:
            return call.unavailable(str(exc))
        if forwarded is None:
            return None
        status, body = forwarded
        response = call.view.json(body, status=status)
        if status == 200 and isinstance(body, dict) and isinstance(body.get("version"), int):
            response.headers["ETag"] = f'"{body["version"]}"'  # (a schedule: its owner's ETag)
        return response

    def upcoming_of(self, state: ScheduleState, n: int) -> tuple[list[int], list[tuple[int, str]]]:
        """Its next `n` fire instants here (its owner), with the trigger progress of an AND/OR."""
        composite = isinstance(state.schedule.trigger, CompositeTrigger)
        progress = (
            self.worker.triggers.load_progress(key_bytes(state.schedule.key), state) if composite else None
        )
        return upcoming(state, self.worker.clock(), n, excluded=self.excluded(state), progress=progress)

    def excluded(self, state: ScheduleState) -> Callable[[int], str | None] | None:
        """instant -> the calendar of the schedule's that holds its day (None when it excludes none)."""
        s = state.schedule
        if not s.exclude_calendars:
            return None
        calendars = self.worker.calendars
        return lambda instant: calendars.excluding(s.key.tenant, s.exclude_calendars, instant)

    # --- calendars ---------------------------------------------------------------------------------

    # --- reading schedules wherever they are --------------------------------------------------

    def next_fire(self, state: ScheduleState) -> int | None:
        if not state.schedule.enabled:
            return None
        nxt = self.upcoming_of(state, 1)[0]
        return nxt[0] if nxt else None

    def local_json(self, state: ScheduleState) -> dict[str, Any]:
        return schedule_json(state, self.next_fire(state), state.finished(self.worker.clock()))

    async def fetch(self, key: ScheduleKey, request: Request) -> dict[str, Any] | None:
        """The schedule as its owner sees it, or None."""
        return (await self.fetch_full(key, request))[0]

    async def fetch_full(self, key: ScheduleKey, request: Request) -> tuple[dict[str, Any] | None, bool]:
        """The schedule as its owner sees it (or None), and whether its tenant's share there is full."""
        kb = key_bytes(key)
        owner = self.cluster.owner(kb)
        if owner is None:
            state = self.worker.local_state(kb)
            if state is None:
                return None, self.worker.tenant_full(self.worker.partition_of(kb), key.tenant)
            return self.local_json(state), False
        status, body = await self.cluster.get(
            f"{owner}/schedules/{quote(key.tenant, safe='')}/{quote(key.name, safe='')}", request
        )
        if status == 404:
            return None, bool(body.get("tenantFull")) if isinstance(body, dict) else False
        if status != 200:
            raise Unavailable(f"owner answered {status}")
        return dict(body), False

    # --- list queries: fanned out to every worker ---------------------------------------------

    def page_query(
        self, call: Call, default: int, check: Callable[[bytes], Any] = key_from_bytes
    ) -> tuple[int, bytes | None] | Response:
        """`limit` and `cursor` of a list query, or the 400 naming the bad one (`check` raises on bytes
        that are not a cursor of this list)."""
        request = call.request
        try:
            limit = int(request.query.get("limit", str(default)))
            if not 1 <= limit <= MAX_LIST:
                raise ValueError
        except ValueError:
            return call.field_error("limit", f"must be an integer between 1 and {MAX_LIST}")
        raw = request.query.get("cursor") or None
        if raw is None:
            return limit, None
        try:
            cursor = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
            check(cursor)
        except Exception:  # not what a `next` held
            return call.field_error(
                "cursor", "not a cursor this API gave (use the `next` of the previous page)"
            )
        return limit, cursor


H = Handlers
_PROGRAM = "/programs/{namespace}/{application}/{type}/{name}"
_SCHEDULE = "/schedules/{tenant}/{name}"
#: a run id holds '/' (it is a job id); [\s\S], not '.': a line break in a path is the handler's 404, not none
_RUN = _PROGRAM + r"/runs/{run_id:[\s\S]+}"
_CALENDAR = "/calendars/{tenant}/{name}"
_RULE = "/notifications/{tenant}/{name}"

#: every route, in the order aiohttp matches them
ROUTES: list[Route] = [
    Route("POST", "/schedules", writes.create_schedule, body=ScheduleIn),
    Route("POST", "/schedules:batch", batch.create_batch, body=BatchIn),
    Route("GET", "/schedules", reads.list_schedules),
    Route("GET", _SCHEDULE, reads.get_schedule, guard="tenant"),
    Route("PUT", _SCHEDULE, writes.update_schedule, guard="tenant", body=ScheduleBody),
    Route("DELETE", _SCHEDULE, writes.delete_schedule),
    Route("POST", f"{_SCHEDULE}/enable", writes.enable),
    Route("POST", f"{_SCHEDULE}/disable", writes.disable, body=PauseIn, empty_body_ok=True),
    Route("POST", f"{_SCHEDULE}/run", writes.run_now, guard="tenant", body=RunIn, empty_body_ok=True),
    Route("POST", f"{_SCHEDULE}/backfill", writes.backfill, guard="tenant", body=BackfillIn),
    Route("POST", f"{_SCHEDULE}/backfills", backfills.start_backfill, guard="tenant", body=BackfillsIn),
    Route("GET", f"{_SCHEDULE}/backfills", backfills.list_backfills, guard="tenant"),
    Route("GET", f"{_SCHEDULE}/backfills/{{id}}", backfills.get_backfill, guard="tenant"),
    Route("DELETE", f"{_SCHEDULE}/backfills/{{id}}", backfills.cancel_backfill, guard="tenant"),
    Route("GET", f"{_SCHEDULE}/next", reads.next_fires, guard="tenant"),
    Route("GET", f"{_SCHEDULE}/applied", writes.applied_up_to, guard="tenant"),
    Route("POST", "/schedulers", writes.create_task_definition, body=TaskDefinitionIn),
    Route("GET", "/schedulers", reads.list_task_definitions),
    Route("GET", f"{_SCHEDULE}/trigger", reads.trigger_progress, guard="tenant"),
    Route("GET", f"{_SCHEDULE}/history", reads.history, guard="tenant"),
    Route("POST", "/events", H.publish_event, body=EventIn),
    Route("POST", "/messages", messages.post_message, body=messages.MessageIn),
    Route("GET", "/messages", messages.list_messages),
    Route(
        "GET", r"/messages/{id:[\s\S]+}", messages.get_message
    ),  # (an id may hold '{', '/', a line break: 400)
    Route("DELETE", r"/messages/{id:[\s\S]+}", messages.delete_message),
    Route("GET", "/triggers", reads.index_entry),
    Route("GET", "/jobs", jobs.list_jobs),
    Route("DELETE", r"/jobs/{id:[\s\S]+}", jobs.cancel_job),  # (a job id holds '/')
    Route("GET", "/programs", programs.list_programs),
    Route("GET", "/sensors", programs.list_sensors),
    Route("GET", "/calendars", calendars.list_calendars),
    Route("PUT", _CALENDAR, calendars.put_calendar, guard="tenant", body=CalendarIn),
    Route("GET", _CALENDAR, calendars.get_calendar, guard="tenant"),
    Route("DELETE", _CALENDAR, calendars.delete_calendar, guard="tenant"),
    Route("GET", "/notifications", notifications.list_rules),
    Route("PUT", _RULE, notifications.put_rule, guard="tenant", body=RuleIn),
    Route("GET", _RULE, notifications.get_rule, guard="tenant"),
    Route("DELETE", _RULE, notifications.delete_rule, guard="tenant"),
    Route("GET", _RULE + "/deliveries", notifications.rule_deliveries, guard="tenant"),
    Route("PUT", _PROGRAM, programs.register_program, guard="namespace"),
    Route("GET", _PROGRAM, programs.get_program, guard="namespace"),
    Route("GET", f"{_PROGRAM}/status", programs.program_status, guard="namespace"),
    Route("GET", f"{_PROGRAM}/runs", programs.program_runs, guard="namespace"),
    Route("GET", f"{_PROGRAM}/sensor", programs.sensor_status, guard="namespace"),
    # Run ids contain '/' (they are job ids): the stop route must be matched before the one-run route.
    Route("POST", f"{_RUN}/stop", programs.stop_run, guard="namespace"),
    Route("POST", f"{_RUN}/suspend", programs.suspend_run, guard="namespace"),
    Route("POST", f"{_RUN}/resume", programs.resume_run, guard="namespace"),
    Route("GET", f"{_RUN}/logs", run_logs.run_logs, guard="namespace"),
    Route("GET", _RUN, programs.one_run, guard="namespace"),
    Route("GET", "/stats/fires", status.fire_stats),
    Route("GET", "/stats/messages", messages.message_stats),
    Route("GET", "/health", status.health),
]
