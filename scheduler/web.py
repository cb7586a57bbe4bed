"""HTTP API on Faust's web server.

Writes become commands on the commands topic (202 with the key). A query about one schedule is answered
by the worker that owns its partition (other workers forward it there); list queries fan out to every
worker. While partitions are moving, a query that cannot be answered right gets 503 with Retry-After.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote, urlencode

import aiohttp
from aiohttp import web as aioweb
from faust.web import Request, Response, View
from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from scheduler import auth
from scheduler import responses as out
from scheduler.api import (
    BackfillIn,
    EventIn,
    RunIn,
    ScheduleBody,
    ScheduleIn,
    TaskDefinitionIn,
    schedule_json,
    state_from_json,
    validation_errors,
)
from scheduler.codec import (
    command_from_task_definition_record,
    decode_json,
    encode,
    key_bytes,
    notification_to_avro,
    task_definition_from_schedule,
)
from scheduler.commands import CommandRejected, manual_fires_yielding, validate_command
from scheduler.events import InvalidEvent, Notification, event_key
from scheduler.events import parse as parse_event
from scheduler.jobs import Job
from scheduler.launcher import stop_request
from scheduler.messages import IndexEntry
from scheduler.model import (
    Action,
    InvalidSchedule,
    ProgramId,
    ScheduleCommand,
    ScheduleKey,
    ScheduleState,
    TimeUnit,
)
from scheduler.programs import ProgramSpec
from scheduler.runs import RunStatus
from scheduler.tenancy import (
    event_key_tenant,
    event_tenant,
    job_filter_tenants,
    program_tenant,
    schedule_id_tenant,
    schedule_tenants,
)
from scheduler.triggers.progress import describe

if TYPE_CHECKING:
    from scheduler.ports import WebPort

ROUTED_HEADER = "X-Scheduler-Routed"
MAX_LIST = 10_000
MAX_NEXT = 1_000


class _Unavailable(Exception):
    pass


def register_views(worker: WebPort) -> None:
    app = worker.faust_app
    http = _Http(worker)
    # every route, Faust's own included, goes through auth (raises AuthConfigError: the worker won't start)
    middlewares = cast(Any, app.web).web_app.middlewares
    middlewares.append(auth.middleware(auth.load_tokens(worker.settings)))
    middlewares.append(_json_errors)

    @app.page("/schedules")
    class Schedules(View):
        async def post(self, request: Request) -> Response:
            body, error = await http.parse(self, request, ScheduleIn)
            if error is not None:
                return error
            assert isinstance(body, ScheduleIn)
            cmd = ScheduleCommand(body.key(), Action.INSERT, body.to_schedule(body.key()))
            return await http.submit(self, request, cmd)

        async def get(self, request: Request) -> Response:
            return await http.list_schedules(self, request)

    @app.page("/schedules/{tenant}/{name}")
    class OneSchedule(View):
        async def get(self, request: Request, tenant: str, name: str) -> Response:
            if denied := _deny_tenants(self, request, tenant):
                return denied
            return await http.one(self, request, ScheduleKey(tenant, name))

        async def put(self, request: Request, tenant: str, name: str) -> Response:
            if denied := _deny_tenants(self, request, tenant):
                return denied
            body, error = await http.parse(self, request, ScheduleBody)
            if error is not None:
                return error
            assert isinstance(body, ScheduleBody)
            key = ScheduleKey(tenant, name)
            return await http.submit(
                self, request, ScheduleCommand(key, Action.UPDATE, body.to_schedule(key))
            )

        async def delete(self, request: Request, tenant: str, name: str) -> Response:
            return await http.submit(self, request, ScheduleCommand(ScheduleKey(tenant, name), Action.DELETE))

    @app.page("/schedules/{tenant}/{name}/enable")
    class Enable(View):
        async def post(self, request: Request, tenant: str, name: str) -> Response:
            return await http.submit(self, request, ScheduleCommand(ScheduleKey(tenant, name), Action.ENABLE))

    @app.page("/schedules/{tenant}/{name}/disable")
    class Disable(View):
        async def post(self, request: Request, tenant: str, name: str) -> Response:
            return await http.submit(
                self, request, ScheduleCommand(ScheduleKey(tenant, name), Action.DISABLE)
            )

    @app.page("/schedules/{tenant}/{name}/run")
    class RunNow(View):
        """Fire once now (or at `at`), whatever the triggers say: a job for a program schedule."""

        async def post(self, request: Request, tenant: str, name: str) -> Response:
            if denied := _deny_tenants(self, request, tenant):
                return denied
            body, error = await http.parse(self, request, RunIn, empty_ok=True)
            if error is not None:
                return error
            at = body.at if body is not None and body.at is not None else worker.clock()
            cmd = ScheduleCommand(ScheduleKey(tenant, name), Action.RUN, fire_range=(at, at))
            return await http.submit(self, request, cmd)

    @app.page("/schedules/{tenant}/{name}/backfill")
    class Backfill(View):
        """Fire every due instant of the schedule's time triggers in [from, to] (epoch ms)."""

        async def post(self, request: Request, tenant: str, name: str) -> Response:
            if denied := _deny_tenants(self, request, tenant):
                return denied
            body, error = await http.parse(self, request, BackfillIn)
            if error is not None:
                return error
            assert isinstance(body, BackfillIn)
            cmd = ScheduleCommand(
                ScheduleKey(tenant, name), Action.BACKFILL, fire_range=(body.from_ms, body.to_ms)
            )
            return await http.submit(self, request, cmd)

    @app.page("/schedules/{tenant}/{name}/next")
    class NextFires(View):
        async def get(self, request: Request, tenant: str, name: str) -> Response:
            if denied := _deny_tenants(self, request, tenant):
                return denied
            return await http.next_fires(self, request, ScheduleKey(tenant, name))

    @app.page("/schedulers")
    class LightSchedulers(View):
        """light-scheduler's two endpoints, with its TaskDefinition JSON."""

        async def post(self, request: Request) -> Response:
            body, error = await http.parse(self, request, TaskDefinitionIn)
            if error is not None:
                return error
            assert isinstance(body, TaskDefinitionIn)
            try:
                cmd = command_from_task_definition_record(body.to_record())
            except InvalidSchedule as exc:
                return _field_error(self, exc.field, exc.message)
            response = await http.submit(self, request, cmd, status=200)
            return response

        async def get(self, request: Request) -> Response:
            return await http.list_task_definitions(self, request)

    @app.page("/schedules/{tenant}/{name}/trigger")
    class TriggerProgressView(View):
        async def get(self, request: Request, tenant: str, name: str) -> Response:
            if denied := _deny_tenants(self, request, tenant):
                return denied
            return await http.trigger_progress(self, request, ScheduleKey(tenant, name))

    @app.page("/events")
    class Events(View):
        async def post(self, request: Request) -> Response:
            return await http.publish_event(self, request)

    @app.page("/triggers")
    class TriggerIndex(View):
        """Which schedules' triggers an event key reaches (the reverse trigger index)."""

        async def get(self, request: Request) -> Response:
            return await http.index_entry(self, request)

    @app.page("/jobs")
    class Jobs(View):
        async def get(self, request: Request) -> Response:
            return await http.list_jobs(self, request)

    @app.page("/programs")
    class Programs(View):
        async def get(self, request: Request) -> Response:
            await worker.registry.start()
            who = auth.principal_of(request)
            return answer(
                self,
                out.Programs,
                {
                    pid: spec.model_dump()
                    for pid, spec in sorted(worker.registry.all().items())
                    if who.sees(program_tenant(pid))
                },
            )

    @app.page("/programs/{namespace}/{application}/{type}/{name}")
    class OneProgram(View):
        async def put(
            self, request: Request, namespace: str, application: str, type: str, name: str
        ) -> Response:
            if denied := _deny_tenants(self, request, namespace):
                return denied
            return await http.register_program(self, request, f"{namespace}/{application}/{type}/{name}")

        async def get(
            self, request: Request, namespace: str, application: str, type: str, name: str
        ) -> Response:
            if denied := _deny_tenants(self, request, namespace):
                return denied
            await worker.registry.start()
            spec = worker.registry.get(f"{namespace}/{application}/{type}/{name}")
            if spec is None:
                return answer(self, out.Error, {"error": "not found"}, status=404)
            return answer(self, ProgramSpec, spec.model_dump())

    @app.page("/programs/{namespace}/{application}/{type}/{name}/status")
    class ProgramStatusView(View):
        async def get(
            self, request: Request, namespace: str, application: str, type: str, name: str
        ) -> Response:
            if denied := _deny_tenants(self, request, namespace):
                return denied
            return await http.program_runs(
                self, request, f"{namespace}/{application}/{type}/{name}", "status"
            )

    @app.page("/programs/{namespace}/{application}/{type}/{name}/runs")
    class ProgramRuns(View):
        async def get(
            self, request: Request, namespace: str, application: str, type: str, name: str
        ) -> Response:
            if denied := _deny_tenants(self, request, namespace):
                return denied
            return await http.program_runs(self, request, f"{namespace}/{application}/{type}/{name}", "runs")

    # Run ids contain '/' (they are job ids): the stop route must be matched before the one-run route.
    @app.page("/programs/{namespace}/{application}/{type}/{name}/runs/{run_id:.+}/stop")
    class StopRun(View):
        async def post(
            self, request: Request, namespace: str, application: str, type: str, name: str, run_id: str
        ) -> Response:
            if denied := _deny_tenants(self, request, namespace):
                return denied
            return await http.stop_run(self, request, f"{namespace}/{application}/{type}/{name}", run_id)

    @app.page("/programs/{namespace}/{application}/{type}/{name}/runs/{run_id:.+}")
    class OneRun(View):
        async def get(
            self, request: Request, namespace: str, application: str, type: str, name: str, run_id: str
        ) -> Response:
            if denied := _deny_tenants(self, request, namespace):
                return denied
            return await http.program_runs(
                self, request, f"{namespace}/{application}/{type}/{name}", "run", run_id
            )

    @app.page("/health")
    class Health(View):
        async def get(self, request: Request) -> Response:
            return answer(
                self,
                out.Health,
                {
                    "status": "ok",
                    "partitions": sorted(worker.active_partitions()),
                    # ready: not rebalancing nor recovering, so queries are answered (not 503)
                    "ready": not worker.faust_app.rebalancing
                    and not getattr(worker.faust_app, "in_recovery", False),
                    "fires": worker.punctuator.stats.fires,
                    "catchUpFires": worker.punctuator.stats.catch_up_fires,
                    "commandsApplied": worker.commands_applied,
                    "deadLetters": worker.dead_letters,
                    **worker.stats,
                },
            )

    from scheduler import admin_ui, metrics, openapi

    metrics.register_routes(worker)
    admin_ui.register_routes(worker)
    openapi.register_routes(worker)


def answer(view: View, model: type[BaseModel], body: Any, status: int = 200) -> Response:
    """`body` through its response model (scheduler.responses): validated, then dumped with the keys it
    was given. The OpenAPI document's response schemas are these models'."""
    typed = model.model_validate(body)
    return view.json(typed.model_dump(mode="json", exclude_unset=True), status=status)


def _deny_tenants(view: View, request: Request, *tenants: str) -> Response | None:
    """403 unless the request's token holds every one of `tenants`."""
    who = auth.principal_of(request)
    for tenant in sorted(set(tenants)):
        if not who.sees(tenant):
            return answer(
                view,
                out.Error,
                {"error": "forbidden", "reason": f"this token may not access tenant {tenant!r}"},
                status=403,
            )
    return None


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


def _field_error(view: View, field: str, message: str, status: int = 400) -> Response:
    return answer(
        view,
        out.ValidationError,
        {"error": "invalid request", "fields": [{"field": field, "message": message}]},
        status=status,
    )


def _unavailable(view: View, why: str) -> Response:
    response = answer(view, out.Error, {"error": "unavailable", "reason": why}, status=503)
    response.headers["Retry-After"] = "2"
    return response


class _Http:
    def __init__(self, worker: WebPort) -> None:
        self.worker = worker

    # --- input --------------------------------------------------------------------------------

    async def parse(
        self, view: View, request: Request, model: type[BaseModel], empty_ok: bool = False
    ) -> tuple[Any, Response | None]:
        if empty_ok and not await cast(Any, request).read():
            return None, None
        try:
            raw = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError, RecursionError):  # 10k-deep JSON
            return None, _field_error(view, "body", "not valid JSON")
        try:
            return model.model_validate(raw), None
        except ValidationError as exc:
            errors = {"error": "invalid request", "fields": validation_errors(exc)}
            return None, answer(view, out.ValidationError, errors, status=400)

    async def submit(self, view: View, request: Request, cmd: ScheduleCommand, status: int = 202) -> Response:
        """Check tenants, validate, check the key against the owner's table, and produce the command."""
        schedule = cmd.schedule
        tenants = schedule_tenants(schedule) if schedule is not None else set()
        if denied := _deny_tenants(view, request, cmd.key.tenant, *tenants):
            return denied
        if schedule is not None and schedule.program is not None:
            program = schedule.program.id
            if not schedule.topic:
                cmd = replace(cmd, schedule=replace(schedule, topic=self.worker.settings.launch_topic))
            await self.worker.registry.start()
            if self.worker.registry.get(program) is None:
                return _field_error(view, "program", f"unknown program {program} (register it first)")
        try:
            validate_command(cmd)
        except (InvalidSchedule, CommandRejected) as exc:
            field = exc.field if isinstance(exc, InvalidSchedule) else "body"
            message = exc.message if isinstance(exc, InvalidSchedule) else str(exc)
            return _field_error(view, field, message)
        try:
            current, tenant_full = await self.fetch_full(cmd.key, request)
        except _Unavailable as exc:
            return _unavailable(view, str(exc))
        if cmd.action is Action.INSERT and current is None and tenant_full:
            limit = self.worker.settings.max_schedules_per_tenant
            return answer(
                view,
                out.Error,
                {
                    "error": "limit",
                    "reason": f"tenant {cmd.key.tenant!r} holds its maximum of {limit} schedules",
                },
                status=409,
            )
        if cmd.action in (Action.RUN, Action.BACKFILL) and current is not None:
            try:
                fires = len(await manual_fires_yielding(state_from_json(current), cmd))
            except CommandRejected as exc:
                return _field_error(view, "to" if cmd.action is Action.BACKFILL else "body", str(exc))
            await self.worker.send_command(cmd)
            accepted = {"key": cmd.key.id, "action": cmd.action.value, "fires": fires}
            return answer(view, out.Accepted, accepted, status=status)
        if cmd.action is Action.INSERT and current is not None and cmd.schedule is not None:
            if replace(state_from_json(current).schedule, enabled=cmd.schedule.enabled) != cmd.schedule:
                return answer(
                    view,
                    out.Error,
                    {"error": "conflict", "reason": f"schedule {cmd.key.id!r} already exists (use PUT)"},
                    status=409,
                )
        elif cmd.action is not Action.INSERT and current is None:
            return answer(view, out.Error, {"error": "not found", "key": cmd.key.id}, status=404)
        await self.worker.send_command(cmd)
        return answer(view, out.Accepted, {"key": cmd.key.id, "action": cmd.action.value}, status=status)

    # --- queries ------------------------------------------------------------------------------

    def _next_fire(self, state: ScheduleState) -> int | None:
        if not state.schedule.enabled:
            return None
        nxt = next_time_fires(state, self.worker.clock(), 1)
        return nxt[0] if nxt else None

    def _local_json(self, state: ScheduleState) -> dict[str, Any]:
        return schedule_json(state, self._next_fire(state))

    def owner(self, key: ScheduleKey) -> str | None:
        """Base URL of the worker owning `key`, None if that is this worker."""
        return self.owner_of(self.worker.partition_of(key_bytes(key)))

    def owner_of(self, partition: int) -> str | None:
        """Base URL of the worker owning `partition`, None if that is this worker."""
        app = self.worker.faust_app
        if app.rebalancing or getattr(app, "in_recovery", False):
            raise _Unavailable("partitions are moving between workers (rebalancing)")
        if partition in self.worker.active_partitions():
            return None
        topic = self.worker.schedules.changelog_topic.get_topic_name()
        for host, topics in self.worker.changelog_distribution().items():
            if partition in topics.get(topic, ()):
                if _same_url(host, self.worker.settings.web_url):
                    break
                return str(host).rstrip("/")
        raise _Unavailable(f"partition {partition} has no owner right now (rebalancing)")

    async def fetch(self, key: ScheduleKey, request: Request) -> dict[str, Any] | None:
        """The schedule as its owner sees it, or None."""
        return (await self.fetch_full(key, request))[0]

    async def fetch_full(self, key: ScheduleKey, request: Request) -> tuple[dict[str, Any] | None, bool]:
        """The schedule as its owner sees it (or None), and whether its tenant's share there is full."""
        owner = self.owner(key)
        if owner is None:
            kb = key_bytes(key)
            state = self.worker.local_state(kb)
            if state is None:
                return None, self.worker.tenant_full(self.worker.partition_of(kb), key.tenant)
            return self._local_json(state), False
        status, body = await self._get(
            f"{owner}/schedules/{quote(key.tenant, safe='')}/{quote(key.name, safe='')}", request
        )
        if status == 404:
            return None, bool(body.get("tenantFull")) if isinstance(body, dict) else False
        if status != 200:
            raise _Unavailable(f"owner answered {status}")
        return dict(body), False

    async def _get(self, url: str, request: Request | None = None) -> tuple[int, Any]:
        headers = {ROUTED_HEADER: "1"}
        if request is not None and "Authorization" in request.headers:
            headers["Authorization"] = request.headers["Authorization"]  # the owner checks it too
        try:
            async with self.worker.faust_app.http_client.get(
                url, headers=headers, timeout=aiohttp.ClientTimeout(total=10)
            ) as response:
                return response.status, await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, json.JSONDecodeError) as exc:
            raise _Unavailable(f"owner {url} did not answer: {exc}") from None

    async def one(self, view: View, request: Request, key: ScheduleKey) -> Response:
        routed = await self._routed(view, request, key)
        if routed is not None:
            return routed
        kb = key_bytes(key)
        state = self.worker.local_state(kb)
        if state is None:
            full = self.worker.tenant_full(self.worker.partition_of(kb), key.tenant)
            return answer(
                view, out.Error, {"error": "not found", "key": key.id, "tenantFull": full}, status=404
            )
        return answer(view, out.Schedule, self._local_json(state))

    async def next_fires(self, view: View, request: Request, key: ScheduleKey) -> Response:
        try:
            n = int(request.query.get("n", "10"))
            if not 1 <= n <= MAX_NEXT:
                raise ValueError
        except ValueError:
            return _field_error(view, "n", f"must be an integer between 1 and {MAX_NEXT}")
        try:
            current = await self.fetch(key, request)
        except _Unavailable as exc:
            return _unavailable(view, str(exc))
        if current is None:
            return answer(view, out.Error, {"error": "not found", "key": key.id}, status=404)
        state = state_from_json(current)
        fires = next_time_fires(state, self.worker.clock(), n)
        return answer(view, out.NextFires, {"key": key.id, "enabled": state.schedule.enabled, "next": fires})

    async def _all_schedules(self, request: Request, tenant: str | None) -> list[dict[str, Any]]:
        """Every schedule (of `tenant`) the request's token may see, from every worker."""
        who = auth.principal_of(request)
        local = [
            self._local_json(state)
            for partition in sorted(self.worker.active_partitions())
            for _, state in self.worker.local_states(partition)
            if (tenant is None or state.schedule.key.tenant == tenant) and who.sees(state.schedule.key.tenant)
        ]
        query = {"tenant": tenant} if tenant else {}
        results = await self._fan_out(request, "/schedules", query, local, "schedules")
        results.sort(key=lambda s: s["key"])
        return results

    async def _fan_out(
        self, request: Request, path: str, query: dict[str, str], local: list[Any], field: str
    ) -> list[Any]:
        """`local` plus what every other worker answers for `path?local=1`; 503 unless all partitions answered."""
        app = self.worker.faust_app
        if app.rebalancing or getattr(app, "in_recovery", False):
            raise _Unavailable("partitions are moving between workers (rebalancing)")
        if request.query.get("local"):
            return local
        topic = self.worker.schedules.changelog_topic.get_topic_name()
        covered = set(self.worker.active_partitions())
        results = list(local)
        for host, topics in self.worker.changelog_distribution().items():
            partitions = set(topics.get(topic, ()))
            if not partitions or _same_url(host, self.worker.settings.web_url):
                continue
            status, body = await self._get(
                f"{str(host).rstrip('/')}{path}?{urlencode({'local': '1', **query})}", request
            )
            if status != 200:
                raise _Unavailable(f"worker {host} answered {status}")
            results.extend(body[field])
            covered |= partitions
        if covered != set(range(self.worker.settings.partitions)):
            raise _Unavailable("not every partition has an owner right now (rebalancing)")
        return results

    async def list_schedules(self, view: View, request: Request) -> Response:
        tenant = request.query.get("tenant") or None
        if tenant is not None and (denied := _deny_tenants(view, request, tenant)):
            return denied
        try:
            limit = int(request.query.get("limit", "1000"))
            if not 1 <= limit <= MAX_LIST:
                raise ValueError
        except ValueError:
            return _field_error(view, "limit", f"must be an integer between 1 and {MAX_LIST}")
        try:
            schedules = await self._all_schedules(request, tenant)
        except _Unavailable as exc:
            return _unavailable(view, str(exc))
        if request.query.get("local"):
            return answer(view, out.ScheduleList, {"schedules": schedules})
        return answer(view, out.ScheduleList, {"schedules": schedules[:limit], "total": len(schedules)})

    async def _routed(self, view: View, request: Request, key: ScheduleKey | bytes) -> Response | None:
        """Forward to the owner of `key` (a schedule, or raw key bytes); None if this worker owns it."""
        try:
            kb = key if isinstance(key, bytes) else key_bytes(key)
            owner = self.owner_of(self.worker.partition_of(kb))
            if owner is None:
                return None
            if request.headers.get(ROUTED_HEADER):
                raise _Unavailable("forwarded to a worker that does not own the key")
            status, body = await self._get(owner + cast(Any, request).path_qs, request)
            if status == 503:  # the owner is moving partitions too: say when to retry, as it did
                raise _Unavailable(str(body.get("reason") if isinstance(body, dict) else "owner unavailable"))
            return view.json(body, status=status)
        except _Unavailable as exc:
            return _unavailable(view, str(exc))

    async def trigger_progress(self, view: View, request: Request, key: ScheduleKey) -> Response:
        routed = await self._routed(view, request, key)
        if routed is not None:
            return routed
        kb = key_bytes(key)
        state = self.worker.local_state(kb)
        if state is None:
            return answer(view, out.Error, {"error": "not found", "key": key.id}, status=404)
        progress = self.worker.triggers.load_progress(kb, state)
        return answer(
            view,
            out.TriggerProgress,
            {
                "key": key.id,
                "version": state.version,
                "enabled": state.schedule.enabled,
                "jobsCreated": progress.seq,
                "trigger": describe(state.schedule.trigger, progress),
            },
        )

    async def index_entry(self, view: View, request: Request) -> Response:
        event_key = request.query.get("eventKey") or ""
        if not event_key:
            return _field_error(view, "eventKey", "required, e.g. partition:<namespace>.<dataset>")
        if denied := _deny_tenants(view, request, event_key_tenant(event_key)):
            return denied
        kb = event_key.encode()
        routed = await self._routed(view, request, kb)
        if routed is not None:
            return routed
        entry = IndexEntry.decode(self.worker.trigger_index.get(kb))
        triggers = sorted(entry.triggers.values(), key=lambda t: (t.schedule, t.path))
        entry_json = {"eventKey": event_key, "triggers": [t.to_json() for t in triggers]}
        return answer(view, out.IndexEntry, entry_json)

    async def publish_event(self, view: View, request: Request) -> Response:
        body, error = await self.parse(view, request, EventIn)
        if error is not None:
            return error
        assert isinstance(body, EventIn)
        ts = body.timestamp if body.timestamp is not None else self.worker.clock()
        notification = Notification(ts, body.eventType, dict(body.payload))
        try:
            parsed = parse_event(notification)
        except InvalidEvent as exc:
            return _field_error(view, "eventType" if "event type" in str(exc) else "payload", str(exc))
        if denied := _deny_tenants(view, request, event_tenant(parsed)):
            return denied
        key = event_key(parsed)
        await self.worker.send_keyed(
            self.worker.settings.events_topic,
            key.encode(),
            encode("Notification", notification_to_avro(notification)),
        )
        return answer(view, out.EventAccepted, {"eventKey": key, "timestamp": ts}, status=202)

    async def list_jobs(self, view: View, request: Request) -> Response:
        """Pending jobs (and recent outcomes) of every program, filtered by schedule, program or state."""
        want = {k: request.query.get(k) or None for k in ("schedule", "program", "state", "jobId")}
        if denied := _deny_tenants(
            view, request, *job_filter_tenants(want["schedule"], want["program"], want["jobId"])
        ):
            return denied
        who = auth.principal_of(request)
        local: list[dict[str, Any]] = []
        for partition in sorted(self.worker.active_partitions()):
            for _, queue in self.worker.jobs.local_queues(partition):
                for job in queue.jobs:
                    if who.sees(schedule_id_tenant(job.schedule)):
                        local.append({"kind": "job", **_job_json(job)})
                for outcome in queue.outcomes:
                    schedule = outcome.get("schedule")
                    tenant = schedule_id_tenant(schedule) if schedule else program_tenant(queue.program)
                    if who.sees(tenant):
                        local.append({"kind": "outcome", "program": queue.program, **outcome})
        query = {k: v for k, v in want.items() if v}
        try:
            items = await self._fan_out(request, "/jobs", query, local, "items")
        except _Unavailable as exc:
            return _unavailable(view, str(exc))
        if request.query.get("local"):
            return answer(view, out.Jobs, {"items": items})

        def keep(item: dict[str, Any]) -> bool:
            return (
                (want["schedule"] is None or item.get("schedule") == want["schedule"])
                and (want["program"] is None or item.get("program") == want["program"])
                and (want["jobId"] is None or item.get("jobId") == want["jobId"])
                and (want["state"] is None or item.get("state", item.get("outcome")) == want["state"])
            )

        items = [i for i in items if keep(i)]
        return answer(
            view,
            out.Jobs,
            {
                "jobs": [{k: v for k, v in i.items() if k != "kind"} for i in items if i["kind"] == "job"],
                "recent": [
                    {k: v for k, v in i.items() if k != "kind"} for i in items if i["kind"] == "outcome"
                ],
            },
        )

    async def register_program(self, view: View, request: Request, program_id: str) -> Response:
        try:
            ProgramId.parse(program_id)
        except InvalidSchedule as exc:
            return _field_error(view, "program", exc.message)
        body, error = await self.parse(view, request, ProgramSpec)
        if error is not None:
            return error
        assert isinstance(body, ProgramSpec)
        for field_name, message in body.problems():
            return _field_error(view, field_name, message)
        try:
            value = body.model_dump_json().encode()
        except PydanticSerializationError:  # a lone surrogate (JSON's \udXXX escapes) has no UTF-8
            return _field_error(view, "body", "not valid Unicode (a lone surrogate)")
        await self.worker.send_keyed(
            self.worker.settings.programs_topic, program_id.encode(), value, partition=None
        )
        return answer(view, out.ProgramAccepted, {"program": program_id}, status=202)

    async def program_runs(
        self, view: View, request: Request, program_id: str, what: str, run_id: str | None = None
    ) -> Response:
        """Run records of a program, from the worker that owns its partition."""
        kb = program_id.encode()
        routed = await self._routed(view, request, kb)
        if routed is not None:
            return routed
        raw = self.worker.run_records.get(kb)
        runs = decode_json(raw) if raw is not None else []
        if what == "run":
            run = next((r for r in runs if r["run_id"] == run_id), None)
            if run is None:
                return answer(view, out.Error, {"error": "not found", "runId": run_id}, status=404)
            return answer(view, out.Run, run)
        if what == "runs":
            status = request.query.get("status")
            listed = [r for r in runs if status is None or r["status"] == status]
            return answer(view, out.Runs, {"program": program_id, "runs": listed})
        active = [r for r in runs if not RunStatus(r["status"]).terminal]
        latest = runs[-1] if runs else None
        return answer(
            view,
            out.ProgramStatus,
            {
                "program": program_id,
                "status": "RUNNING" if active else (latest["status"] if latest else "NEVER_RUN"),
                "activeRuns": [{"runId": r["run_id"], "status": r["status"]} for r in active],
                "lastRun": latest,
            },
        )

    async def stop_run(self, view: View, request: Request, program_id: str, run_id: str) -> Response:
        try:
            owner = self.owner_of(self.worker.partition_of(program_id.encode()))
            if owner is None:
                raw = self.worker.run_records.get(program_id.encode())
                run = next((r for r in (decode_json(raw) if raw else []) if r["run_id"] == run_id), None)
                status = 200 if run is not None else 404
            else:
                status, run = await self._get(
                    f"{owner}/programs/{quote(program_id)}/runs/{quote(run_id, safe='')}", request
                )
                if status not in (200, 404):
                    raise _Unavailable(f"owner answered {status}")
        except _Unavailable as exc:
            return _unavailable(view, str(exc))
        if status == 404 or run is None:
            return answer(view, out.Error, {"error": "not found", "runId": run_id}, status=404)
        if RunStatus(run["status"]).terminal:
            conflict = {"error": "conflict", "reason": f"run already {run['status']}"}
            return answer(view, out.Error, conflict, status=409)
        await self.worker.send_keyed(
            self.worker.settings.launcher_control_topic,
            run_id.encode(),
            stop_request(run_id, program_id),
            partition=None,
        )
        return answer(view, out.StopAccepted, {"runId": run_id, "action": "stop"}, status=202)

    async def list_task_definitions(self, view: View, request: Request) -> Response:
        host, name, unit = (request.query.get(k) or None for k in ("host", "name", "unit"))
        if unit is not None and unit not in TimeUnit.__members__:
            return _field_error(view, "unit", f"must be one of {', '.join(TimeUnit.__members__)}")
        if host is not None and (denied := _deny_tenants(view, request, host)):
            return denied
        try:
            if host and name:
                one = await self.fetch(ScheduleKey(host, name), request)
                schedules = [one] if one else []
            else:
                schedules = await self._all_schedules(request, host)
        except _Unavailable as exc:
            return _unavailable(view, str(exc))
        definitions = []
        for s in schedules:
            td = task_definition_from_schedule(state_from_json(s).schedule)
            if td is None or (name and s["name"] != name):
                continue
            if unit and td["frequency"]["timeUnit"] != unit:
                continue
            definitions.append(td)
        return answer(view, out.TaskDefinitions, definitions)


def next_time_fires(state: ScheduleState, now: int, n: int) -> list[int]:
    """The next `n` instants any time trigger of the schedule comes due (none for event-only triggers)."""
    leaves = [t for _, t in state.time_leaves()]
    after = max(now, state.active_since) - 1
    cursors = [t.next_due(after) for t in leaves]
    dues: list[int] = []
    while len(dues) < n:
        live = [(due, i) for i, due in enumerate(cursors) if due is not None]
        if not live:
            break
        due, i = min(live)
        if not dues or due != dues[-1]:
            dues.append(due)
        cursors[i] = leaves[i].next_due(due)
    return dues


def _job_json(job: Job) -> dict[str, Any]:
    return {
        "jobId": job.job_id,
        "schedule": job.schedule,
        "program": job.program,
        "state": job.state,
        "triggeredAt": job.triggered_at,
        "arguments": job.arguments,
        "events": len(job.events),
        # why it has not launched: the constraint holding it, and until when (None: until a run changes)
        "blockedBy": job.blocked_by,
        "reason": job.reason,
        "checkAt": job.check_at,
    }


def _same_url(a: Any, b: str) -> bool:
    return str(a).rstrip("/") == b.rstrip("/")


__all__ = ["register_views"]
