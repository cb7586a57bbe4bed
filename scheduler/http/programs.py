"""HTTP for programs and their runs: register a program (on the compacted programs topic every worker
follows), read the registry, a program's status and run records (from the worker that owns its
partition), and a user's stop, suspend or resume of a run (a request on the launcher control topic)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

from pydantic_core import PydanticSerializationError

from scheduler.domain.model import InvalidSchedule, ProgramId
from scheduler.domain.runs import RunStatus
from scheduler.domain.sensors import state_json
from scheduler.domain.tenancy import program_tenant
from scheduler.http import auth
from scheduler.http import run_responses as out
from scheduler.http.calls import MAX_LIST, NEXT_CURSOR_HEADER, Call, cursor_text, parse_body
from scheduler.http.cluster import Cluster, Unavailable
from scheduler.launcher.control import RUN_ACTION_NEEDS, RunAction, control_request
from scheduler.wire.codec import decode_json
from scheduler.wire.messages import RunStatusChanged, encode_job_queue_message
from scheduler.worker.programs import ProgramSpec
from scheduler.worker.sensors import interval_ms

if TYPE_CHECKING:
    from faust.web import Response

    from scheduler.worker.ports import WebPort


class Handlers(Protocol):
    """What these handlers use of the HTTP handlers (scheduler.http.web)."""

    worker: WebPort
    cluster: Cluster

    async def forwarded(self, call: Call, key: bytes) -> Response | None: ...

    def page_query(
        self, call: Call, default: int, check: Callable[[bytes], Any] = ...
    ) -> tuple[int, bytes | None] | Response: ...


async def register_program(h: Handlers, call: Call) -> Response:
    program_id = call.program
    try:
        ProgramId.parse(program_id)
    except InvalidSchedule as exc:
        return call.field_error("program", exc.message)
    body, error = await parse_body(call.view, call.request, ProgramSpec)
    if error is not None:
        return error
    assert isinstance(body, ProgramSpec)
    for field_name, message in body.problems(program_id):
        return call.field_error(field_name, message)
    try:
        value = body.model_dump_json().encode()
    except PydanticSerializationError:  # a lone surrogate (JSON's \udXXX escapes) has no UTF-8
        return call.field_error("body", "not valid Unicode (a lone surrogate)")
    await h.worker.publish(h.worker.settings.programs_topic, program_id.encode(), value, partition=None)
    return call.answer(out.ProgramAccepted, {"program": program_id}, 202)


async def stop_run(h: Handlers, call: Call) -> Response:
    return await _control_run(h, call, "stop")


async def suspend_run(h: Handlers, call: Call) -> Response:
    return await _control_run(h, call, "suspend")


async def resume_run(h: Handlers, call: Call) -> Response:
    return await _control_run(h, call, "resume")


async def the_run(h: Handlers, call: Call) -> dict[str, Any] | Response:
    """The record of the call's run (`run_id` of its program), here or from the worker that owns it; else
    the answer to give (404: no such run; 503: its owner cannot say)."""
    program_id, run_id = call.program, call.params["run_id"]
    try:
        owner = h.cluster.owner(program_id.encode())
        if owner is None:
            raw = h.worker.run_records.get(program_id.encode())
            run = next((r for r in (decode_json(raw) if raw else []) if r["run_id"] == run_id), None)
        else:
            status, run = await h.cluster.get(
                f"{owner}/programs/{quote(program_id)}/runs/{quote(run_id, safe='')}", call.request
            )
            if status not in (200, 404):
                raise Unavailable(f"owner answered {status}")
            run = run if status == 200 else None
    except Unavailable as exc:
        return call.unavailable(str(exc))
    if not isinstance(run, dict):
        return call.error(404, error="not found", runId=run_id)
    return run


async def _control_run(h: Handlers, call: Call, action: RunAction) -> Response:
    """A user's stop, suspend or resume of a run: a request on the launcher control topic, for the
    launcher that holds the run (a stop of a run not started yet is applied by its job queue too)."""
    program_id, run_id = call.program, call.params["run_id"]
    run = await the_run(h, call)
    if not isinstance(run, dict):
        return run
    state = RunStatus(run["status"])
    if state.terminal:
        return call.error(409, error="conflict", reason=f"run already {run['status']}")
    needed = RUN_ACTION_NEEDS.get(action)
    if needed is not None and state is not needed:
        return call.error(
            409, error="conflict", reason=f"run is {state.value}: only a {needed.value} run can {action}"
        )
    if action == "stop" and state in (RunStatus.PENDING, RunStatus.PREPARING):
        # not started: its program's job queue ends it at once (a launcher that takes it later, or
        # holds the claim, sees it ended and does not run it)
        cancelled = RunStatusChanged(
            run_id,
            RunStatus.STOPPED.value,
            h.worker.clock(),
            program_id,
            {"error": "stopped before it started"},
        )
        message = encode_job_queue_message(cancelled)
        await h.worker.publish(h.worker.settings.jobs_topic, program_id.encode(), message)
    control = control_request(action, run_id, program_id)
    await h.worker.publish(h.worker.settings.launcher_control_topic, run_id.encode(), control, partition=None)
    return call.answer(out.RunActionAccepted, {"runId": run_id, "action": action}, 202)


async def _runs(h: Handlers, call: Call) -> tuple[Response | None, list[dict[str, Any]]]:
    """A program's run records, from the worker that owns its partition (or that worker's answer)."""
    kb = call.program.encode()
    if (forwarded := await h.forwarded(call, kb)) is not None:
        return forwarded, []
    raw = h.worker.run_records.get(kb)
    return None, decode_json(raw) if raw is not None else []


async def one_run(h: Handlers, call: Call) -> Response:
    forwarded, runs = await _runs(h, call)
    if forwarded is not None:
        return forwarded
    run_id = call.params["run_id"]
    run = next((r for r in runs if r["run_id"] == run_id), None)
    if run is None:
        return call.error(404, error="not found", runId=run_id)
    return call.answer(out.Run, run)


async def program_runs(h: Handlers, call: Call) -> Response:
    forwarded, runs = await _runs(h, call)
    if forwarded is not None:
        return forwarded
    status = call.request.query.get("status")
    listed = [r for r in runs if status is None or r["status"] == status]
    return call.answer(out.Runs, {"program": call.program, "runs": listed})


async def program_status(h: Handlers, call: Call) -> Response:
    forwarded, runs = await _runs(h, call)
    if forwarded is not None:
        return forwarded
    if not runs:
        await h.worker.registry.start()
        if await h.worker.registry.lookup(call.program) is None:
            return call.error(404, error="not found", program=call.program)
    active = [r for r in runs if not RunStatus(r["status"]).terminal]
    latest = runs[-1] if runs else None
    if active:
        status = RunStatus(active[-1]["status"]).program_status
    else:
        status = latest["status"] if latest else "NEVER_RUN"
    return call.answer(
        out.ProgramStatus,
        {
            "program": call.program,
            "status": status,
            "activeRuns": [{"runId": r["run_id"], "status": r["status"]} for r in active],
            "lastRun": latest,
        },
    )


async def list_programs(h: Handlers, call: Call) -> Response:
    """The registered programs by id, in pages of `limit` (default and most: 10,000); the answer stays
    a map (as before pages), the next page's cursor in the X-Next-Cursor header."""
    paging = h.page_query(call, MAX_LIST, lambda raw: raw.decode())
    if not isinstance(paging, tuple):
        return paging
    limit, after = paging
    await h.worker.registry.start()
    who = auth.principal_of(call.request)
    start = "" if after is None else after.decode()
    visible = (
        (pid, spec)
        for pid, spec in sorted(h.worker.registry.all().items())
        if pid > start and who.sees(program_tenant(pid))
    )
    page = list(itertools.islice(visible, limit + 1))
    answer = call.answer(out.Programs, {pid: spec.model_dump() for pid, spec in page[:limit]})
    if len(page) > limit:
        answer.headers[NEXT_CURSOR_HEADER] = cursor_text(page[limit - 1][0].encode())
    return answer


async def sensor_status(h: Handlers, call: Call) -> Response:
    """A polling sensor's state: its cursor, its last evaluation, when the next is due (every worker
    follows the sensors topic: answered here)."""
    await h.worker.registry.start()
    spec = await h.worker.registry.lookup(call.program)
    if spec is None or spec.kind != "sensor":
        return call.error(
            404, error="not found", reason=f"{call.program} is not a sensor", program=call.program
        )
    state = h.worker.sensors.state(call.program)
    return call.answer(out.SensorStatus, state_json(call.program, interval_ms(spec), state))


async def list_sensors(h: Handlers, call: Call) -> Response:
    """Every sensor the caller's token may see, with its state (`?namespace=` narrows)."""
    await h.worker.registry.start()
    who = auth.principal_of(call.request)
    namespace = call.request.query.get("namespace")
    listed = [
        state_json(pid, interval_ms(spec), h.worker.sensors.state(pid))
        for pid, spec in sorted(h.worker.registry.all().items())
        if spec.kind == "sensor"
        and who.sees(program_tenant(pid))
        and (namespace is None or program_tenant(pid) == namespace)
    ]
    return call.answer(out.SensorList, {"sensors": listed})


async def get_program(h: Handlers, call: Call) -> Response:
    await h.worker.registry.start()
    spec = await h.worker.registry.lookup(call.program)
    if spec is None:
        return call.error(404, error="not found")
    return call.answer(ProgramSpec, spec.model_dump())
