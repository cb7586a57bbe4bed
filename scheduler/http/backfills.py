"""HTTP for backfill objects (scheduler.domain.backfills): start one, list a schedule's, read one's progress,
cancel it. A backfill lives in its schedule's job queue: reads and cancels are answered by the worker that
owns that queue; a start is chosen here (the instants in the range, less what ran already) and sent there."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

from scheduler.domain import backfills
from scheduler.domain.commands import CommandRejected, manual_fires_yielding
from scheduler.domain.jobs import ProgramQueue
from scheduler.domain.model import Action, ScheduleCommand, ScheduleKey, ScheduleState
from scheduler.http import auth
from scheduler.http import run_responses as out
from scheduler.http.api import BackfillsIn, state_from_json
from scheduler.http.calls import Call
from scheduler.http.cluster import Cluster, Unavailable
from scheduler.wire.codec import decode_json
from scheduler.wire.messages import CancelBackfill, StartBackfill, encode_job_queue_message
from scheduler.worker.trigger_agent import new_job

if TYPE_CHECKING:
    from faust.web import Request, Response

    from scheduler.worker.ports import WebPort

#: the instants a start's answer lists
MAX_LISTED = 100


class Handlers(Protocol):
    """What these handlers use of the HTTP handlers (scheduler.http.web)."""

    worker: WebPort
    cluster: Cluster

    async def forwarded(self, call: Call, key: bytes) -> Response | None: ...

    async def fetch(self, key: ScheduleKey, request: Request) -> dict[str, Any] | None: ...

    def excluded(self, state: ScheduleState) -> Callable[[int], str | None] | None: ...


async def _program_schedule(h: Handlers, call: Call) -> tuple[Response | None, ScheduleState | None]:
    """The schedule of the path, which must launch a program (a plain one's backfill fires at once: POST
    …/backfill)."""
    try:
        current = await h.fetch(call.key, call.request)
    except Unavailable as exc:
        return call.unavailable(str(exc)), None
    if current is None:
        return call.error(404, error="not found", key=call.key.id), None
    state = state_from_json(current)
    if state.schedule.program is None:
        reason = "backfill objects launch a program's jobs; a plain schedule's backfill fires at once (POST …/backfill)"
        return call.field_error("program", reason), None
    return None, state


async def start_backfill(h: Handlers, call: Call) -> Response:
    body: BackfillsIn = call.body
    refused, state = await _program_schedule(h, call)
    if refused is not None or state is None:
        assert refused is not None
        return refused
    s = state.schedule
    assert s.program is not None
    cmd = ScheduleCommand(call.key, Action.BACKFILL, fire_range=(body.from_ms, body.to_ms))
    try:
        instants = await manual_fires_yielding(state, cmd)
    except CommandRejected as exc:
        return call.field_error("to", str(exc))
    excluded = h.excluded(state)
    instants = [d for d in instants if excluded is None or excluded(d) is None]
    runs: list[dict[str, Any]] = []
    if body.reprocess != "all":
        try:
            runs = await _program_runs(h, s.program.id, call.request)
        except Unavailable as exc:
            return call.unavailable(str(exc))
    chosen, left_out = backfills.choose(instants, runs, s.key.id, body.reprocess)
    ordered = sorted(chosen, reverse=body.order == "newest")
    answer = {
        "id": None,
        "key": s.key.id,
        "dryRun": body.dryRun,
        "instants": len(ordered),
        "leftOut": left_out,
        "first": min(ordered, default=None),
        "last": max(ordered, default=None),
        "next": ordered[:MAX_LISTED],
    }
    if body.dryRun or call.request.query.get("dryRun") == "true":  # (as every write takes ?dryRun=true)
        return call.answer(out.BackfillStarted, {**answer, "dryRun": True})
    if not ordered:
        return call.field_error("from", "no instant to backfill in the range (reprocess left out every one)")
    now = h.worker.clock()
    backfill_id = f"bf-{secrets.token_hex(4)}"
    backfill = backfills.new_backfill(
        backfill_id,
        new_job(state, "", {}, now, []),
        ordered,
        span=(body.from_ms, body.to_ms),
        reprocess=body.reprocess,
        order=body.order,
        max_concurrent=body.maxConcurrent,
        overlap=None if body.overlap is None else body.overlap.value,
        by=auth.principal_of(call.request).name,
        now=now,
    )
    message = encode_job_queue_message(StartBackfill(backfill))
    await h.worker.publish(h.worker.settings.jobs_topic, s.queue_key.encode(), message)
    return call.answer(out.BackfillStarted, {**answer, "id": backfill_id}, 202)


async def _program_runs(h: Handlers, program: str, request: Request) -> list[dict[str, Any]]:
    """The program's run records, from the worker that owns them (what is known of past runs)."""
    owner = h.cluster.owner(program.encode())
    if owner is None:
        raw = h.worker.run_records.get(program.encode())
        return list(decode_json(raw)) if raw is not None else []
    status, body = await h.cluster.get(f"{owner}/programs/{quote(program)}/runs", request)
    if status == 404:
        return []
    if status != 200 or not isinstance(body, dict):
        raise Unavailable(f"the owner of program {program} answered {status}")
    return list(body.get("runs") or [])


async def _queue(h: Handlers, call: Call) -> tuple[Response | None, ProgramQueue | None, str]:
    """The job queue of the path's schedule, where its backfills are (or the answer of its owner)."""
    refused, state = await _program_schedule(h, call)
    if refused is not None or state is None:
        assert refused is not None
        return refused, None, ""
    queue_key = state.schedule.queue_key
    if (forwarded := await h.forwarded(call, queue_key.encode())) is not None:
        return forwarded, None, queue_key
    raw = h.worker.job_queue.get(queue_key.encode())
    return (
        None,
        ProgramQueue(queue_key) if raw is None else ProgramQueue.from_json(decode_json(raw)),
        queue_key,
    )


async def list_backfills(h: Handlers, call: Call) -> Response:
    answered, queue, _ = await _queue(h, call)
    if answered is not None or queue is None:
        assert answered is not None
        return answered
    mine = [b for b in queue.backfills.values() if b["schedule"] == call.key.id]
    shown = [backfills.progress(b, queue) for b in sorted(mine, key=lambda b: -b["createdAt"])]
    return call.answer(out.Backfills, {"backfills": shown})


async def get_backfill(h: Handlers, call: Call) -> Response:
    answered, queue, _ = await _queue(h, call)
    if answered is not None or queue is None:
        assert answered is not None
        return answered
    bf = queue.backfills.get(call.params["id"])
    if bf is None or bf["schedule"] != call.key.id:
        return call.error(404, error="not found", id=call.params["id"])
    return call.answer(out.Backfill, backfills.progress(bf, queue))


async def cancel_backfill(h: Handlers, call: Call) -> Response:
    """DELETE: no more of its instants launch; its waiting jobs are cancelled, its runs go on. 409 if it
    ended already."""
    answered, queue, queue_key = await _queue(h, call)
    if answered is not None or queue is None:
        assert answered is not None
        return answered
    backfill_id = call.params["id"]
    bf = queue.backfills.get(backfill_id)
    if bf is None or bf["schedule"] != call.key.id:
        return call.error(404, error="not found", id=backfill_id)
    if bf["status"] != "RUNNING":
        return call.error(409, error="conflict", reason=f"backfill {backfill_id} is {bf['status']} already")
    reason = f"backfill {backfill_id} cancelled by {auth.principal_of(call.request).name}"
    message = encode_job_queue_message(CancelBackfill(backfill_id, reason))
    await h.worker.publish(h.worker.settings.jobs_topic, queue_key.encode(), message)
    return call.answer(out.Backfill, {**backfills.progress(bf, queue), "cancelReason": reason}, 202)
