"""HTTP for the pending jobs: GET /jobs, every program's job queue (each worker's partitions, fanned out
and merged in queue order, in pages), with the recent outcomes of each queue."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from scheduler.domain.jobs import Job, ProgramQueue, priority_order
from scheduler.domain.model import ScheduleKey
from scheduler.domain.tenancy import job_filter_tenants, program_tenant, schedule_id_tenant
from scheduler.http import auth
from scheduler.http import run_responses as out
from scheduler.http.api import state_from_json
from scheduler.http.calls import Call, cursor_text, deny_tenants
from scheduler.http.cluster import Cluster, Unavailable
from scheduler.wire.codec import decode_json, encode_json
from scheduler.wire.messages import CancelJobs, encode_job_queue_message

if TYPE_CHECKING:
    from faust.web import Request, Response

    from scheduler.worker.ports import WebPort


class Handlers(Protocol):
    """What these handlers use of the HTTP handlers (scheduler.http.web)."""

    worker: WebPort
    cluster: Cluster

    async def forwarded(self, call: Call, key: bytes) -> Response | None: ...

    async def fetch(self, key: ScheduleKey, request: Request) -> dict[str, Any] | None: ...

    def page_query(
        self, call: Call, default: int, check: Callable[[bytes], Any] = ...
    ) -> tuple[int, bytes | None] | Response: ...


async def list_jobs(h: Handlers, call: Call) -> Response:
    """Pending jobs of every program in pages (by queue, then queue order: highest priority first,
    oldest trigger first; `next` is the cursor of the page after), filtered by schedule, program,
    state or job id; and, on the first page, the recent outcomes (SKIP, DISCARD, CANCELLED: a bounded
    list per program)."""
    request = call.request
    want = {k: request.query.get(k) or None for k in ("schedule", "program", "state", "jobId")}
    if denied := deny_tenants(
        call.view, request, *job_filter_tenants(want["schedule"], want["program"], want["jobId"])
    ):
        return denied
    paging = h.page_query(call, 1000, job_cursor)
    if not isinstance(paging, tuple):
        return paging
    limit, raw_after = paging
    after = None if raw_after is None else job_cursor(raw_after)

    def keep(item: dict[str, Any]) -> bool:
        return (
            (want["schedule"] is None or item.get("schedule") == want["schedule"])
            and (want["program"] is None or item.get("program") == want["program"])
            and (want["jobId"] is None or item.get("jobId") == want["jobId"])
            and (want["state"] is None or item.get("state", item.get("outcome")) == want["state"])
        )

    who = auth.principal_of(request)
    jobs: list[dict[str, Any]] = []
    recent: list[dict[str, Any]] = []
    for partition in sorted(h.worker.active_partitions()):
        for _, queue in h.worker.jobs.local_queues(partition):
            for job in queue.jobs:
                item = {"queue": queue.program, **job_json(job)}
                visible = who.sees(schedule_id_tenant(job.schedule)) and keep(item)
                if visible and (after is None or job_order(item) > after):
                    jobs.append(item)
            for outcome in queue.outcomes if after is None else ():
                schedule = outcome.get("schedule")
                tenant = schedule_id_tenant(schedule) if schedule else program_tenant(queue.program)
                item = {"program": queue.program, **outcome}
                if who.sees(tenant) and keep(item):
                    recent.append(item)
    jobs = heapq.nsmallest(limit + 1, jobs, key=job_order)
    if request.query.get("local"):  # (a fan-out: limit + 1, so the asking worker sees there are more)
        return call.answer(out.Jobs, {"jobs": jobs, "recent": recent})
    query = {k: v for k, v in want.items() if v}
    query |= {k: v for k in ("limit", "cursor") if (v := request.query.get(k))}
    try:
        bodies = await h.cluster.fan_out_bodies(request, "/jobs", query, {"jobs": jobs, "recent": recent})
    except Unavailable as exc:
        return call.unavailable(str(exc))
    merged = heapq.nsmallest(limit + 1, (j for b in bodies for j in b["jobs"]), key=job_order)
    page, more = merged[:limit], len(merged) > limit
    outcomes = sorted((o for b in bodies for o in b["recent"]), key=lambda o: o.get("at", 0))
    return call.answer(
        out.Jobs,
        {
            "jobs": page,
            "recent": outcomes,
            "next": cursor_text(encode_json(list(job_order(page[-1])))) if more else None,
        },
    )


async def cancel_job(h: Handlers, call: Call) -> Response:
    """DELETE /jobs/{id}: a pending job cancelled by a user (its outcome CANCELLED, "cancelled by <who>",
    in its queue's recent outcomes), on its job queue like a schedule's delete cancels its jobs. Answered
    by the worker that owns the queue; 404 when the job is not pending there (launched: stop its run;
    ended; or never made). A job that launches before the cancel reaches its queue is not cancelled."""
    job_id = call.params["id"]
    schedule_id, at, _ = job_id.partition("@")
    tenant, slash, name = schedule_id.partition("/")
    if not (at and slash and tenant and name):
        return call.error(404, error="not found", jobId=job_id, reason="not a job id (tenant/name@...)")
    if denied := deny_tenants(call.view, call.request, tenant):
        return denied
    try:
        current = await h.fetch(ScheduleKey(tenant, name), call.request)
    except Unavailable as exc:
        return call.unavailable(str(exc))
    if current is None or current.get("program") is None:
        return call.error(404, error="not found", jobId=job_id, reason=NOT_PENDING)
    queue_key = state_from_json(current).schedule.queue_key
    if (forwarded := await h.forwarded(call, queue_key.encode())) is not None:
        return forwarded
    raw = h.worker.job_queue.get(queue_key.encode())
    queue = None if raw is None else ProgramQueue.from_json(decode_json(raw))
    job = next((j for j in queue.jobs if job_id in (j.job_id, *j.merged)), None) if queue else None
    if job is None:
        return call.error(404, error="not found", jobId=job_id, reason=NOT_PENDING)
    who = auth.principal_of(call.request).name
    cancelled = CancelJobs(job.schedule, None, f"cancelled by {who}", job.job_id)
    await h.worker.publish(
        h.worker.settings.jobs_topic, queue_key.encode(), encode_job_queue_message(cancelled)
    )
    return call.answer(
        out.JobCancelAccepted, {"jobId": job.job_id, "queue": queue_key, "action": "CANCEL"}, 202
    )


#: why a job id is not cancelled
NOT_PENDING = "not a pending job: launched (stop its run), ended, or never made"


def job_order(item: dict[str, Any]) -> tuple[str, int, int, str]:
    """A job's place in GET /jobs: its queue (its program's, or its concurrency group's), then the order
    the queue checks its jobs in (by_priority), then its id."""
    return (item["queue"], *priority_order(item["priority"], item["triggeredAt"]), item["jobId"])


def job_cursor(raw: bytes) -> tuple[str, int, int, str]:
    """The job order a /jobs cursor holds (ValueError for anything else)."""
    value = decode_json(raw)
    if not (
        isinstance(value, list)
        and len(value) == 4
        and isinstance(value[0], str)
        and isinstance(value[3], str)
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value[1:3])
    ):
        raise ValueError("not a job cursor")
    return (value[0], value[1], value[2], value[3])


def job_json(job: Job) -> dict[str, Any]:
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
        "attempt": job.attempt,
        "runId": job.run_id,
        "priority": job.priority,
        "deadlineAt": job.deadline_at,
    }
