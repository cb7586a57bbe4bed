"""POST /schedules:batch — many schedules in one request, each judged and answered on its own, as a POST
/schedules of it would be (validated, tenants checked, the owner's table consulted, produced; `?wait=applied`
and `?dryRun=true` as there), up to MAX_BATCH. With `atomic: true` every item is judged first (a dry run)
and none is produced unless all would be. The answer is 200 with one result per item, in order: its
status and what a single POST would have answered."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from scheduler.domain.model import Action, ScheduleCommand
from scheduler.http import responses as out
from scheduler.http import writes
from scheduler.http.api import ScheduleIn, validation_errors
from scheduler.http.calls import Call

if TYPE_CHECKING:
    from faust.web import Response

MAX_BATCH = 1_000
IN_FLIGHT = 500  # items judged and produced at once (the producer batches what they send)


class BatchIn(BaseModel):
    """Body of POST /schedules:batch."""

    model_config = ConfigDict(extra="forbid")

    schedules: list[dict[str, Any]] = Field(
        min_length=1, max_length=MAX_BATCH, description="POST /schedules bodies, each judged on its own"
    )
    atomic: bool = Field(False, description="produce none unless every item would be accepted")


@dataclasses.dataclass(frozen=True)
class _Judged:
    """An item's answer as a POST /schedules of it alone would give it, kept as its fields: the batch's
    answer validates and writes them once, with the rest (not one response built and read back each)."""

    status: int
    fields: dict[str, Any]
    headers: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class _ItemCall(Call):
    """The batch's call, as each item's submit sees it: its answers are _Judged."""

    def answer(self, model: type[BaseModel], body: Any, status: int = 200) -> Any:
        return _Judged(status, dict(body))

    def error(self, status: int, **fields: Any) -> Any:
        return _Judged(status, fields)

    def field_error(self, name: str, message: str) -> Any:
        return _Judged(400, {"error": "invalid request", "fields": [{"field": name, "message": message}]})


def _result(index: int, response: Response | _Judged) -> dict[str, Any]:
    if isinstance(response, _Judged):
        return {"index": index, "status": response.status, **response.fields}
    raw: Any = response  # (an answer made outside the call: a 403 of deny_tenants)
    return {"index": index, "status": raw.status, **json.loads(raw.body or b"{}")}


async def create_batch(h: writes.Handlers, call: Call) -> Response:
    body: BatchIn = call.body
    results: list[dict[str, Any] | None] = [None] * len(body.schedules)
    commands: dict[int, ScheduleCommand] = {}
    seen: dict[str, int] = {}
    for i, raw in enumerate(body.schedules):
        try:
            item = ScheduleIn.model_validate(raw)
        except ValidationError as exc:
            results[i] = {
                "index": i,
                "status": 400,
                "error": "invalid request",
                "fields": validation_errors(exc),
            }
            continue
        key = item.key()
        if key.id in seen:
            results[i] = {"index": i, "status": 400, "error": "invalid request", "fields": [
                {"field": "name", "message": f"{key.id} is also item {seen[key.id]} of this batch"}]}  # fmt: skip
            continue
        seen[key.id] = i
        commands[i] = ScheduleCommand(key, Action.INSERT, item.to_schedule(key))
    gate = asyncio.Semaphore(IN_FLIGHT)
    each = _ItemCall(**{f.name: getattr(call, f.name) for f in dataclasses.fields(call)})

    async def judge(i: int, cmd: ScheduleCommand, opts: writes.WriteOptions | Any) -> None:
        if not isinstance(opts, writes.WriteOptions):  # (the request's options are wrong: each item says so)
            results[i] = _result(i, opts)
            return
        async with gate:
            results[i] = _result(i, await writes.submit(h, each, cmd, opts=opts))

    produce = True
    if body.atomic:
        opts = writes.options(h, each, dry_run=True)
        await asyncio.gather(*(judge(i, cmd, opts) for i, cmd in commands.items()))
        produce = all(r is not None and r["status"] < 300 for r in results)
    if produce:
        opts = writes.options(h, each)  # (read once: every item shares them)
        await asyncio.gather(*(judge(i, cmd, opts) for i, cmd in commands.items()))
    done = [r for r in results if r is not None]
    failed = sum(1 for r in done if r["status"] >= 300)
    answer = {"total": len(done), "accepted": len(done) - failed if produce else 0, "failed": failed,
              "produced": produce and failed < len(done), "results": done}  # fmt: skip
    return call.answer(out.BatchAnswer, answer, 200)
