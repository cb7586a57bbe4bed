"""The schedule writes of the HTTP API (POST, PUT and DELETE of a schedule, enable, disable, run, backfill,
light-scheduler's POST /schedulers): each becomes a command on the commands topic, answered 202 with where it
is once the broker has it (or, with `?wait=applied`, once its owner applied it). Before it is produced: the
request's options (its deadline and If-Match, `?dryRun`, `?wait`), the tenants, the command's validation,
and the key's state at its owner (a conflict, a missing schedule, the tenant's quota, the version asked
for). POST /schedules:batch (batch.py) submits each of its items here with its request's options.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from scheduler.domain.calendars import calendar_key
from scheduler.domain.commands import CommandRejected, manual_fires_yielding, validate_command
from scheduler.domain.model import (
    Action,
    InvalidSchedule,
    PauseRequest,
    ScheduleCommand,
    ScheduleKey,
    ScheduleState,
)
from scheduler.domain.tenancy import schedule_tenants
from scheduler.domain.triggers.instants import upcoming
from scheduler.http import auth
from scheduler.http import responses as out
from scheduler.http.api import (
    BackfillIn,
    PauseIn,
    RunIn,
    ScheduleBody,
    ScheduleIn,
    TaskDefinitionIn,
    state_from_json,
)
from scheduler.http.applied import WAIT_MAX_MS, AppliedWaits, wait_ms
from scheduler.http.calls import Call, deny_tenants
from scheduler.http.cluster import Unavailable
from scheduler.wire.codec import key_bytes
from scheduler.wire.command_headers import command_headers
from scheduler.wire.light import command_from_task_definition_record

if TYPE_CHECKING:
    from collections.abc import Callable

    from faust.web import Request, Response

    from scheduler.worker.ports import WebPort

#: next fire times (or backfill instants) a dry run shows
MAX_PREVIEW = 10
#: a write's own timeout (ms), counted from when the worker took it: its command is not produced after it
TIMEOUT_HEADER = "X-Request-Timeout-Ms"
#: a write's deadline (epoch ms, by the client's clock): its command is not produced after it
DEADLINE_HEADER = "X-Request-Deadline"
MAX_REQUEST_TIMEOUT_MS = 3_600_000


class Handlers(Protocol):
    """What the writes use of the HTTP handlers (scheduler.http.web)."""

    worker: WebPort
    applied: AppliedWaits

    async def forwarded(self, call: Call, key: bytes) -> Response | None: ...

    async def fetch(self, key: ScheduleKey, request: Request) -> dict[str, Any] | None: ...

    async def fetch_full(self, key: ScheduleKey, request: Request) -> tuple[dict[str, Any] | None, bool]: ...

    def excluded(self, state: ScheduleState) -> Callable[[int], str | None] | None: ...


async def create_schedule(h: Handlers, call: Call) -> Response:
    body: ScheduleIn = call.body
    return await submit(h, call, ScheduleCommand(body.key(), Action.INSERT, body.to_schedule(body.key())))


async def update_schedule(h: Handlers, call: Call) -> Response:
    body: ScheduleBody = call.body
    return await submit(h, call, ScheduleCommand(call.key, Action.UPDATE, body.to_schedule(call.key)))


async def delete_schedule(h: Handlers, call: Call) -> Response:
    return await submit(h, call, ScheduleCommand(call.key, Action.DELETE))


async def enable(h: Handlers, call: Call) -> Response:
    return await submit(h, call, ScheduleCommand(call.key, Action.ENABLE))


async def disable(h: Handlers, call: Call) -> Response:
    """Pause: with a note, and an instant it resumes at by itself (PauseIn), both optional."""
    body: PauseIn | None = call.body
    pause = None if body is None else PauseRequest(body.note, body.until)
    if pause is not None and pause.until_ms is not None and pause.until_ms <= h.worker.clock():
        return call.field_error("until", "must be in the future (epoch milliseconds)")
    return await submit(h, call, ScheduleCommand(call.key, Action.DISABLE, pause=pause))


async def run_now(h: Handlers, call: Call) -> Response:
    """Fire once now (or at `at`), whatever the triggers say: a job for a program schedule."""
    body: RunIn | None = call.body
    at = body.at if body is not None and body.at is not None else h.worker.clock()
    arguments = dict(body.arguments) if body is not None else {}
    cmd = ScheduleCommand(call.key, Action.RUN, fire_range=(at, at), arguments=arguments)
    return await submit(h, call, cmd)


async def backfill(h: Handlers, call: Call) -> Response:
    """Fire every due instant of the schedule's time triggers in [from, to] (epoch ms)."""
    body: BackfillIn = call.body
    return await submit(
        h, call, ScheduleCommand(call.key, Action.BACKFILL, fire_range=(body.from_ms, body.to_ms))
    )


async def create_task_definition(h: Handlers, call: Call) -> Response:
    """light-scheduler's POST /schedulers, with its TaskDefinition JSON."""
    body: TaskDefinitionIn = call.body
    try:
        cmd = command_from_task_definition_record(body.to_record())
    except InvalidSchedule as exc:
        return call.field_error(exc.field, exc.message)
    return await submit(h, call, cmd, status=200)


@dataclass(frozen=True)
class WriteOptions:
    """What a write request asks of each command it makes, read from its headers and query once (a
    batch's items share them): its deadline, the version it is meant for, whether it is a dry run, how long
    to wait for its owner to apply it, and the command's headers (wire.command_headers)."""

    deadline: int
    if_version: int | None
    dry_run: bool
    wait_for: int | None
    headers: list[tuple[str, bytes]]


def options(h: Handlers, call: Call, dry_run: bool | None = None) -> WriteOptions | Response:
    """The request's WriteOptions, or the 400 naming what is wrong. The deadline is the earliest of
    X-Request-Deadline (epoch ms, by the client's clock: it holds even when the worker was paused before
    it read the request) and X-Request-Timeout-Ms (default: the worker's SCHEDULER_REQUEST_TIMEOUT_MS)
    after the worker took the request; the version is If-Match's ("N"); `dry_run` overrides ?dryRun."""
    headers, query = call.request.headers, call.request.query
    timeout = h.worker.settings.request_timeout_ms
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
    previewing = query.get("dryRun", "false") if dry_run is None else str(dry_run).lower()
    if previewing not in ("true", "false"):
        return call.field_error("dryRun", "must be true or false")
    wait = query.get("wait")
    if wait not in (None, "applied"):
        return call.field_error("wait", "must be applied (answer once the owner has applied the write)")
    try:
        wait_for = wait_ms(query.get("waitMs")) if wait else None
    except ValueError:
        return call.field_error("waitMs", f"must be an integer of ms, 0 to {WAIT_MAX_MS}")
    by = auth.principal_of(call.request).name  # who sent it: the schedule's history shows it
    command = command_headers(deadline_ms=deadline, if_version=if_version, by=by)
    return WriteOptions(deadline, if_version, previewing == "true", wait_for, command)


async def submit(
    h: Handlers,
    call: Call,
    cmd: ScheduleCommand,
    status: int = 202,
    dry_run: bool | None = None,
    opts: WriteOptions | None = None,
) -> Response:
    """Check tenants, validate, check the key against the owner's table, and produce the command, with
    the request's options (`opts`, read from the request unless given)."""
    if opts is None:
        read = options(h, call, dry_run)
        if not isinstance(read, WriteOptions):
            return read  # a 400
        opts = read
    deadline, if_version, wait_for, headers = opts.deadline, opts.if_version, opts.wait_for, opts.headers
    schedule = cmd.schedule
    tenants = schedule_tenants(schedule) if schedule is not None else set()
    if denied := deny_tenants(call.view, call.request, cmd.key.tenant, *tenants):
        return denied
    if schedule is not None and schedule.program is not None:
        program = schedule.program.id
        if not schedule.topic:
            cmd = replace(cmd, schedule=replace(schedule, topic=h.worker.settings.launch_topic))
        await h.worker.registry.start()
        spec = await h.worker.registry.lookup(program)
        if spec is None:
            return call.field_error("program", f"unknown program {program} (register it first)")
        if spec.kind == "sensor":
            return call.field_error(
                "program",
                f"{program} is a sensor: the workers evaluate it; a schedule fires on it with "
                f'{{"trigger": {{"type": "sensor", "sensor": "{program}"}}}}',
            )
    if schedule is not None and schedule.exclude_calendars:
        await h.worker.calendars.start()
        for i, name in enumerate(schedule.exclude_calendars):
            if await h.worker.calendars.lookup(calendar_key(cmd.key.tenant, name)) is None:
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
        current, tenant_full = await h.fetch_full(cmd.key, call.request)
    except Unavailable as exc:
        return call.unavailable(str(exc))
    if cmd.action is Action.INSERT and current is None and tenant_full:
        limit = h.worker.settings.max_schedules_per_tenant
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
            excluded = h.excluded(state) if cmd.action is Action.BACKFILL else None
            kept = [d for d in instants if excluded is None or excluded(d) is None]
            fires = len(kept)
        except CommandRejected as exc:
            return call.field_error("to" if cmd.action is Action.BACKFILL else "body", str(exc))
        if opts.dry_run:  # what it would fire, nothing produced
            preview = {"key": cmd.key.id, "action": cmd.action.value, "dryRun": True, "fires": fires,
                       "next": kept[:MAX_PREVIEW], "first": kept[0] if kept else None,
                       "last": kept[-1] if kept else None}  # fmt: skip
            return call.answer(out.DryRun, preview, 200)
        if (late := _past(h, call, deadline)) is not None:
            return late
        accepted = {"key": cmd.key.id, "action": cmd.action.value, "fires": fires}
        return await _produce(h, call, cmd, headers, accepted, status, wait_for)
    if cmd.action is Action.INSERT and current is not None and cmd.schedule is not None:
        if replace(state_from_json(current).schedule, enabled=cmd.schedule.enabled) != cmd.schedule:
            reason = f"schedule {cmd.key.id!r} already exists (use PUT)"
            return call.error(409, error="conflict", reason=reason)
    elif cmd.action is not Action.INSERT and current is None:
        return call.error(404, error="not found", key=cmd.key.id)
    if opts.dry_run:
        return call.answer(out.DryRun, _preview(h, cmd, current), 200)
    if (late := _past(h, call, deadline)) is not None:
        return late
    accepted = {"key": cmd.key.id, "action": cmd.action.value}
    return await _produce(h, call, cmd, headers, accepted, status, wait_for)


async def _produce(
    h: Handlers,
    call: Call,
    cmd: ScheduleCommand,
    headers: list[tuple[str, bytes]],
    accepted: dict[str, Any],
    status: int,
    wait_for: int | None,
) -> Response:
    """Produce the command and answer once the broker has it (`accepted`, with where it is), or with
    wait_for (ms) once its owner has applied it (200 with the schedule's version; 504 if not yet)."""
    meta: Any = await h.worker.submit_command(cmd, headers)
    accepted = {**accepted, "partition": meta.partition, "offset": meta.offset}
    if wait_for is None:
        return call.answer(out.Accepted, accepted, status)
    kb = key_bytes(cmd.key)
    if not await h.applied.anywhere(cmd.key, kb, meta.offset, wait_for, call.request):
        reason = (
            f"accepted at offset {meta.offset} of partition {meta.partition}, not applied within "
            f"{wait_for} ms; it will be (GET /schedules/{cmd.key.id}/applied?offset={meta.offset})"
        )
        return call.error(504, error="not applied yet", reason=reason, key=cmd.key.id)
    try:
        current = await h.fetch(cmd.key, call.request)
    except Unavailable:  # (moving again: the version is not known here)
        current = None
    version = None if current is None else current.get("version")
    return call.answer(out.Accepted, {**accepted, "applied": True, "version": version}, 200)


async def applied_up_to(h: Handlers, call: Call) -> Response:
    """Whether the key's owner has applied its partition's commands up to `offset` (waiting up to
    `waitMs` for it): what a 202's `offset` is for."""
    query = call.request.query
    try:
        offset = int(query.get("offset", ""))
        if offset < 0:
            raise ValueError
    except ValueError:
        return call.field_error("offset", "must be a command's offset (an integer >= 0), as a 202 gives it")
    try:
        timeout = wait_ms(query.get("waitMs", "0"))
    except ValueError:
        return call.field_error("waitMs", f"must be an integer of ms, 0 to {WAIT_MAX_MS}")
    kb = key_bytes(call.key)
    if (forwarded := await h.forwarded(call, kb)) is not None:
        return forwarded
    applied = await h.applied.here(h.worker.partition_of(kb), offset, timeout)
    if applied is None:
        return call.unavailable("the key's partition is moving to another worker")
    return call.answer(out.Applied, {"key": call.key.id, "offset": offset, "applied": applied})


def _preview(h: Handlers, cmd: ScheduleCommand, current: dict[str, Any] | None) -> dict[str, Any]:
    """What a valid write would leave (dryRun=true): the trigger in words and its next fire times, as
    from now (an UPDATE restarts its timing now; an ENABLE resumes from now)."""
    now = h.worker.clock()
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
        preview["next"] = upcoming(state, now, MAX_PREVIEW, excluded=h.excluded(state))[0]
    return preview


def _past(h: Handlers, call: Call, deadline: int) -> Response | None:
    """A 408 when the write's deadline passed before its command could be produced (this worker was
    paused, or its owner slow to answer): its client has given up, so nothing is produced."""
    now = h.worker.clock()
    if now <= deadline:
        return None
    reason = f"the write's deadline passed {now - deadline} ms ago: nothing was produced"
    return call.error(408, error="deadline passed", reason=reason)
