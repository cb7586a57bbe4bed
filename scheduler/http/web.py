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
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

from aiohttp import web as aioweb
from faust.web import Request, Response, View
from pydantic import BaseModel

from scheduler.domain.calendars import CalendarIn, calendar_key
from scheduler.domain.commands import CommandRejected, manual_fires_yielding, validate_command
from scheduler.domain.events import InvalidEvent, Notification, event_key
from scheduler.domain.events import parse as parse_event
from scheduler.domain.model import (
    Action,
    CompositeTrigger,
    InvalidSchedule,
    PauseRequest,
    ScheduleCommand,
    ScheduleKey,
    ScheduleState,
)
from scheduler.domain.notifications import RuleIn
from scheduler.domain.tenancy import (
    event_tenant,
    schedule_tenants,
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
    state_from_json,
)
from scheduler.http.applied import WAIT_MAX_MS, AppliedWaits, wait_ms
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
    command_from_task_definition_record,
    encode,
    key_bytes,
    key_from_bytes,
    notification_to_avro,
)
from scheduler.wire.command_headers import command_headers

if TYPE_CHECKING:
    from scheduler.worker.ports import WebPort

__all__ = ["ROUTED_HEADER", "ROUTES", "answer", "register_views"]

#: next fire times (or backfill instants) a dry run shows
MAX_PREVIEW = 10
#: a write's own timeout (ms), counted from when the worker took it: its command is not produced after it
TIMEOUT_HEADER = "X-Request-Timeout-Ms"
#: a write's deadline (epoch ms, by the client's clock): its command is not produced after it
DEADLINE_HEADER = "X-Request-Deadline"
MAX_REQUEST_TIMEOUT_MS = 3_600_000


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

    # --- writes -------------------------------------------------------------------------------

    async def create_schedule(self, call: Call) -> Response:
        body: ScheduleIn = call.body
        return await self.submit(
            call, ScheduleCommand(body.key(), Action.INSERT, body.to_schedule(body.key()))
        )

    async def update_schedule(self, call: Call) -> Response:
        body: ScheduleBody = call.body
        return await self.submit(call, ScheduleCommand(call.key, Action.UPDATE, body.to_schedule(call.key)))

    async def delete_schedule(self, call: Call) -> Response:
        return await self.submit(call, ScheduleCommand(call.key, Action.DELETE))

    async def enable(self, call: Call) -> Response:
        return await self.submit(call, ScheduleCommand(call.key, Action.ENABLE))

    async def disable(self, call: Call) -> Response:
        """Pause: with a note, and an instant it resumes at by itself (PauseIn), both optional."""
        body: PauseIn | None = call.body
        pause = None if body is None else PauseRequest(body.note, body.until)
        if pause is not None and pause.until_ms is not None and pause.until_ms <= self.worker.clock():
            return call.field_error("until", "must be in the future (epoch milliseconds)")
        return await self.submit(call, ScheduleCommand(call.key, Action.DISABLE, pause=pause))

    async def run_now(self, call: Call) -> Response:
        """Fire once now (or at `at`), whatever the triggers say: a job for a program schedule."""
        body: RunIn | None = call.body
        at = body.at if body is not None and body.at is not None else self.worker.clock()
        arguments = dict(body.arguments) if body is not None else {}
        cmd = ScheduleCommand(call.key, Action.RUN, fire_range=(at, at), arguments=arguments)
        return await self.submit(call, cmd)

    async def backfill(self, call: Call) -> Response:
        """Fire every due instant of the schedule's time triggers in [from, to] (epoch ms)."""
        body: BackfillIn = call.body
        return await self.submit(
            call, ScheduleCommand(call.key, Action.BACKFILL, fire_range=(body.from_ms, body.to_ms))
        )

    async def create_task_definition(self, call: Call) -> Response:
        """light-scheduler's POST /schedulers, with its TaskDefinition JSON."""
        body: TaskDefinitionIn = call.body
        try:
            cmd = command_from_task_definition_record(body.to_record())
        except InvalidSchedule as exc:
            return call.field_error(exc.field, exc.message)
        return await self.submit(call, cmd, status=200)

    def conditions(self, call: Call) -> tuple[int, int | None] | Response:
        """A write's deadline and the version it is meant for (If-Match: "N"), or a 400. The deadline is
        the earliest of X-Request-Deadline (epoch ms, by the client's clock: it holds even when the worker
        was paused before it read the request) and X-Request-Timeout-Ms (default: the worker's
        SCHEDULER_REQUEST_TIMEOUT_MS) after the worker took the request."""
        headers = call.request.headers
        timeout = self.worker.settings.request_timeout_ms
        raw = headers.get(TIMEOUT_HEADER)
        if raw is not None:
            try:
                timeout = int(raw)
                if not 1 <= timeout <= MAX_REQUEST_TIMEOUT_MS:
                    raise ValueError
            except ValueError:
                return call.field_error(
                    TIMEOUT_HEADER, f"must be an integer of ms, 1 to {MAX_REQUEST_TIMEOUT_MS}"
                )
        deadline = call.received_at + timeout
        raw = headers.get(DEADLINE_HEADER)
        if raw is not None:
            try:
                deadline = min(deadline, int(raw))
            except ValueError:
                return call.field_error(DEADLINE_HEADER, "must be an integer: epoch milliseconds")
        if_version = None
        match = headers.get("If-Match")
        if match is not None and match.strip() != "*":
            tag = match.strip().removeprefix("W/").strip('"')
            if not tag.isdigit():
                return call.field_error("If-Match", 'must be a schedule version as its ETag gives it: "3"')
            if_version = int(tag)
        return deadline, if_version

    async def submit(
        self, call: Call, cmd: ScheduleCommand, status: int = 202, dry_run: bool | None = None
    ) -> Response:
        """Check tenants, validate, check the key against the owner's table, and produce the command, with
        the write's deadline and the version it is meant for (wire.command_headers)."""
        conditions = self.conditions(call)
        if not isinstance(conditions, tuple):
            return conditions  # a 400
        deadline, if_version = conditions
        previewing = call.request.query.get("dryRun", "false") if dry_run is None else str(dry_run).lower()
        if previewing not in ("true", "false"):
            return call.field_error("dryRun", "must be true or false")
        wait = call.request.query.get("wait")
        if wait not in (None, "applied"):
            return call.field_error("wait", "must be applied (answer once the owner has applied the write)")
        try:
            wait_for = wait_ms(call.request.query.get("waitMs")) if wait else None
        except ValueError:
            return call.field_error("waitMs", f"must be an integer of ms, 0 to {WAIT_MAX_MS}")
        by = auth.principal_of(call.request).name  # who sent it: the schedule's history shows it
        headers = command_headers(deadline_ms=deadline, if_version=if_version, by=by)
        schedule = cmd.schedule
        tenants = schedule_tenants(schedule) if schedule is not None else set()
        if denied := deny_tenants(call.view, call.request, cmd.key.tenant, *tenants):
            return denied
        if schedule is not None and schedule.program is not None:
            program = schedule.program.id
            if not schedule.topic:
                cmd = replace(cmd, schedule=replace(schedule, topic=self.worker.settings.launch_topic))
            await self.worker.registry.start()
            spec = await self.worker.registry.lookup(program)
            if spec is None:
                return call.field_error("program", f"unknown program {program} (register it first)")
            if spec.kind == "sensor":
                return call.field_error(
                    "program",
                    f"{program} is a sensor: the workers evaluate it; a schedule fires on it with "
                    f'{{"trigger": {{"type": "sensor", "sensor": "{program}"}}}}',
                )
        if schedule is not None and schedule.exclude_calendars:
            await self.worker.calendars.start()
            for i, name in enumerate(schedule.exclude_calendars):
                if await self.worker.calendars.lookup(calendar_key(cmd.key.tenant, name)) is None:
                    return call.field_error(
                        f"excludeCalendars.{i}",
                        f"unknown calendar {name} of {cmd.key.tenant} (create it first)",
                    )
        try:
            validate_command(cmd)
        except (InvalidSchedule, CommandRejected) as exc:
            field_name = exc.field if isinstance(exc, InvalidSchedule) else "body"
            message = exc.message if isinstance(exc, InvalidSchedule) else str(exc)
            return call.field_error(field_name, message)
        try:
            current, tenant_full = await self.fetch_full(cmd.key, call.request)
        except Unavailable as exc:
            return call.unavailable(str(exc))
        if cmd.action is Action.INSERT and current is None and tenant_full:
            limit = self.worker.settings.max_schedules_per_tenant
            reason = f"tenant {cmd.key.tenant!r} holds its maximum of {limit} schedules"
            return call.error(409, error="limit", reason=reason)
        if (
            if_version is not None
            and (found := None if current is None else current.get("version")) != if_version
        ):
            reason = f"the schedule is at version {found}, not {if_version} (If-Match)"
            return call.error(412, error="precondition failed", reason=reason, version=found)
        if cmd.action in (Action.RUN, Action.BACKFILL) and current is not None:
            try:
                state = state_from_json(current)
                instants = await manual_fires_yielding(state, cmd)
                excluded = self.excluded(state) if cmd.action is Action.BACKFILL else None
                kept = [d for d in instants if excluded is None or excluded(d) is None]
                fires = len(kept)
            except CommandRejected as exc:
                return call.field_error("to" if cmd.action is Action.BACKFILL else "body", str(exc))
            if previewing == "true":  # what it would fire, nothing produced
                preview = {"key": cmd.key.id, "action": cmd.action.value, "dryRun": True, "fires": fires,
                           "next": kept[:MAX_PREVIEW], "first": kept[0] if kept else None,
                           "last": kept[-1] if kept else None}  # fmt: skip
                return call.answer(out.DryRun, preview, 200)
            if (late := self._past(call, deadline)) is not None:
                return late
            accepted = {"key": cmd.key.id, "action": cmd.action.value, "fires": fires}
            return await self._produce(call, cmd, headers, accepted, status, wait_for)
        if cmd.action is Action.INSERT and current is not None and cmd.schedule is not None:
            if replace(state_from_json(current).schedule, enabled=cmd.schedule.enabled) != cmd.schedule:
                reason = f"schedule {cmd.key.id!r} already exists (use PUT)"
                return call.error(409, error="conflict", reason=reason)
        elif cmd.action is not Action.INSERT and current is None:
            return call.error(404, error="not found", key=cmd.key.id)
        if previewing == "true":
            return call.answer(out.DryRun, self._preview(cmd, current), 200)
        if (late := self._past(call, deadline)) is not None:
            return late
        accepted = {"key": cmd.key.id, "action": cmd.action.value}
        return await self._produce(call, cmd, headers, accepted, status, wait_for)

    async def _produce(
        self,
        call: Call,
        cmd: ScheduleCommand,
        headers: list[tuple[str, bytes]],
        accepted: dict[str, Any],
        status: int,
        wait_for: int | None,
    ) -> Response:
        """Produce the command and answer once the broker has it (`accepted`, with where it is), or with
        wait_for (ms) once its owner has applied it (200 with the schedule's version; 504 if not yet)."""
        meta: Any = await self.worker.submit_command(cmd, headers)
        accepted = {**accepted, "partition": meta.partition, "offset": meta.offset}
        if wait_for is None:
            return call.answer(out.Accepted, accepted, status)
        kb = key_bytes(cmd.key)
        if not await self.applied.anywhere(cmd.key, kb, meta.offset, wait_for, call.request):
            reason = (
                f"accepted at offset {meta.offset} of partition {meta.partition}, not applied within "
                f"{wait_for} ms; it will be (GET /schedules/{cmd.key.id}/applied?offset={meta.offset})"
            )
            return call.error(504, error="not applied yet", reason=reason, key=cmd.key.id)
        try:
            current = await self.fetch(cmd.key, call.request)
        except Unavailable:  # (moving again: the version is not known here)
            current = None
        version = None if current is None else current.get("version")
        return call.answer(out.Accepted, {**accepted, "applied": True, "version": version}, 200)

    async def applied_up_to(self, call: Call) -> Response:
        """Whether the key's owner has applied its partition's commands up to `offset` (waiting up to
        `waitMs` for it): what a 202's `offset` is for."""
        query = call.request.query
        try:
            offset = int(query.get("offset", ""))
            if offset < 0:
                raise ValueError
        except ValueError:
            return call.field_error(
                "offset", "must be a command's offset (an integer >= 0), as a 202 gives it"
            )
        try:
            timeout = wait_ms(query.get("waitMs", "0"))
        except ValueError:
            return call.field_error("waitMs", f"must be an integer of ms, 0 to {WAIT_MAX_MS}")
        kb = key_bytes(call.key)
        if (forwarded := await self.forwarded(call, kb)) is not None:
            return forwarded
        applied = await self.applied.here(self.worker.partition_of(kb), offset, timeout)
        if applied is None:
            return call.unavailable("the key's partition is moving to another worker")
        return call.answer(out.Applied, {"key": call.key.id, "offset": offset, "applied": applied})

    def _preview(self, cmd: ScheduleCommand, current: dict[str, Any] | None) -> dict[str, Any]:
        """What a valid write would leave (dryRun=true): the trigger in words and its next fire times, as
        from now (an UPDATE restarts its timing now; an ENABLE resumes from now)."""
        now = self.worker.clock()
        preview: dict[str, Any] = {"key": cmd.key.id, "action": cmd.action.value, "dryRun": True}
        if cmd.schedule is not None:
            state: ScheduleState | None = ScheduleState(
                cmd.schedule, created_at=now, updated_at=now, active_since=now
            )
        elif current is not None and cmd.action is not Action.DELETE:
            state = replace(state_from_json(current), active_since=now)
        else:
            state = None
        if state is not None:
            preview["triggerText"] = state.schedule.trigger.describe()
            preview["enabled"] = {Action.ENABLE: True, Action.DISABLE: False}.get(
                cmd.action, state.schedule.enabled
            )
            preview["next"] = upcoming(state, now, MAX_PREVIEW, excluded=self.excluded(state))[0]
        return preview

    def _past(self, call: Call, deadline: int) -> Response | None:
        """A 408 when the write's deadline passed before its command could be produced (this worker was
        paused, or its owner slow to answer): its client has given up, so nothing is produced."""
        now = self.worker.clock()
        if now <= deadline:
            return None
        reason = f"the write's deadline passed {now - deadline} ms ago: nothing was produced"
        return call.error(408, error="deadline passed", reason=reason)

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
    Route("POST", "/schedules", H.create_schedule, body=ScheduleIn),
    Route("POST", "/schedules:batch", batch.create_batch, body=BatchIn),
    Route("GET", "/schedules", reads.list_schedules),
    Route("GET", _SCHEDULE, reads.get_schedule, guard="tenant"),
    Route("PUT", _SCHEDULE, H.update_schedule, guard="tenant", body=ScheduleBody),
    Route("DELETE", _SCHEDULE, H.delete_schedule),
    Route("POST", f"{_SCHEDULE}/enable", H.enable),
    Route("POST", f"{_SCHEDULE}/disable", H.disable, body=PauseIn, empty_body_ok=True),
    Route("POST", f"{_SCHEDULE}/run", H.run_now, guard="tenant", body=RunIn, empty_body_ok=True),
    Route("POST", f"{_SCHEDULE}/backfill", H.backfill, guard="tenant", body=BackfillIn),
    Route("POST", f"{_SCHEDULE}/backfills", backfills.start_backfill, guard="tenant", body=BackfillsIn),
    Route("GET", f"{_SCHEDULE}/backfills", backfills.list_backfills, guard="tenant"),
    Route("GET", f"{_SCHEDULE}/backfills/{{id}}", backfills.get_backfill, guard="tenant"),
    Route("DELETE", f"{_SCHEDULE}/backfills/{{id}}", backfills.cancel_backfill, guard="tenant"),
    Route("GET", f"{_SCHEDULE}/next", reads.next_fires, guard="tenant"),
    Route("GET", f"{_SCHEDULE}/applied", H.applied_up_to, guard="tenant"),
    Route("POST", "/schedulers", H.create_task_definition, body=TaskDefinitionIn),
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
