"""HTTP reads of schedules: one schedule, its next fires, its trigger progress and history (each answered
by the worker that owns its key), the reverse trigger index, and the lists (GET /schedules, light-
scheduler's GET /schedulers) fanned out to every worker and merged in key order."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Protocol

from scheduler.domain.model import CompositeTrigger, ScheduleKey, ScheduleState, TimeUnit
from scheduler.domain.tenancy import event_key_tenant
from scheduler.domain.triggers.instants import spec_texts
from scheduler.domain.triggers.progress import describe
from scheduler.http import auth
from scheduler.http import responses as out
from scheduler.http.api import schedule_body_json, state_from_json
from scheduler.http.calls import MAX_LIST, NEXT_CURSOR_HEADER, Call, cursor_text, deny_tenants
from scheduler.http.cluster import Cluster, Unavailable
from scheduler.http.filters import NO_FILTERS, BadFilter, Filters, parse_filters
from scheduler.wire.codec import decode_schedule, key_bytes, tenant_prefix
from scheduler.wire.light import task_definition_from_schedule
from scheduler.wire.messages import IndexEntry, decode_history

if TYPE_CHECKING:
    from faust.web import Request, Response

    from scheduler.worker.ports import WebPort

#: GET …/next answers at most this many instants
MAX_NEXT = 1_000


class Handlers(Protocol):
    """What these handlers use of the HTTP handlers (scheduler.http.web)."""

    worker: WebPort
    cluster: Cluster

    async def forwarded(self, call: Call, key: bytes) -> Response | None: ...

    def page_query(
        self, call: Call, default: int, check: Callable[[bytes], Any] = ...
    ) -> tuple[int, bytes | None] | Response: ...

    def local_json(self, state: ScheduleState) -> dict[str, Any]: ...

    def next_fire(self, state: ScheduleState) -> int | None: ...

    def upcoming_of(self, state: ScheduleState, n: int) -> tuple[list[int], list[tuple[int, str]]]: ...

    async def fetch(self, key: ScheduleKey, request: Request) -> dict[str, Any] | None: ...


async def get_schedule(h: Handlers, call: Call) -> Response:
    key = call.key
    if (forwarded := await h.forwarded(call, key_bytes(key))) is not None:
        return forwarded
    kb = key_bytes(key)
    state = h.worker.local_state(kb)
    if state is None:
        full = h.worker.tenant_full(h.worker.partition_of(kb), key.tenant)
        return call.error(404, error="not found", key=key.id, tenantFull=full)
    response = call.answer(out.Schedule, h.local_json(state))
    response.headers["ETag"] = f'"{state.version}"'  # for If-Match on a write
    return response


async def next_fires(h: Handlers, call: Call) -> Response:
    try:
        n = int(call.request.query.get("n", "10"))
        if not 1 <= n <= MAX_NEXT:
            raise ValueError
    except ValueError:
        return call.field_error("n", f"must be an integer between 1 and {MAX_NEXT}")
    kb = key_bytes(call.key)
    if (forwarded := await h.forwarded(call, kb)) is not None:
        return forwarded  # (its owner knows how far an AND/OR got since its last job)
    state = h.worker.local_state(kb)
    if state is None:
        return call.error(404, error="not found", key=call.key.id)
    fires, skipped = h.upcoming_of(state, n)
    return call.answer(
        out.NextFires,
        {
            "key": call.key.id,
            "enabled": state.schedule.enabled,
            "next": fires,
            "excluded": [{"at": at, "calendar": c} for at, c in skipped[:MAX_NEXT]],
            **(spec_texts(state, fires) if isinstance(state.schedule.trigger, CompositeTrigger) else {}),
        },
    )


async def trigger_progress(h: Handlers, call: Call) -> Response:
    kb = key_bytes(call.key)
    if (forwarded := await h.forwarded(call, kb)) is not None:
        return forwarded
    state = h.worker.local_state(kb)
    if state is None:
        return call.error(404, error="not found", key=call.key.id)
    progress = h.worker.triggers.load_progress(kb, state)
    return call.answer(
        out.TriggerProgress,
        {
            "key": call.key.id,
            "version": state.version,
            "enabled": state.schedule.enabled,
            "jobsCreated": progress.seq,
            "trigger": describe(state.schedule.trigger, progress),
        },
    )


async def history(h: Handlers, call: Call) -> Response:
    """Every applied command of the schedule (the newest MAX_HISTORY): its version, who, when, what changed."""
    kb = key_bytes(call.key)
    if (forwarded := await h.forwarded(call, kb)) is not None:
        return forwarded
    entries = decode_history(h.worker.schedule_history.get(kb))
    if not entries:
        return call.error(404, error="not found", key=call.key.id)
    versions: list[dict[str, Any]] = []
    last: dict[str, Any] | None = None
    for e in entries:
        body = None
        if e.schedule is not None:
            body = schedule_body_json(decode_schedule(e.schedule))
        if body is None:
            changed = [] if e.action in ("RUN", "BACKFILL") else ["deleted"]
        elif last is None:
            changed = sorted(body)
        else:
            changed = sorted(k for k in body.keys() | last.keys() if body.get(k) != last.get(k))
        if body is not None:
            last = body
        elif e.action == "DELETE":
            last = None
        versions.append(
            {"version": e.version, "at": e.at, "by": e.by, "action": e.action, "changed": changed,
             "schedule": body, "fires": e.fires, "note": e.note, "until": e.until}
        )  # fmt: skip
    return call.answer(out.ScheduleHistory, {"key": call.key.id, "versions": versions[::-1]})


async def index_entry(h: Handlers, call: Call) -> Response:
    """Which schedules' triggers an event key reaches (the reverse trigger index)."""
    event_key_ = call.request.query.get("eventKey") or ""
    if not event_key_:
        return call.field_error("eventKey", "required, e.g. partition:<namespace>.<dataset>")
    if denied := deny_tenants(call.view, call.request, event_key_tenant(event_key_)):
        return denied
    kb = event_key_.encode()
    if (forwarded := await h.forwarded(call, kb)) is not None:
        return forwarded
    entry = IndexEntry.decode(h.worker.trigger_index.get(kb))
    triggers = sorted(entry.triggers.values(), key=lambda t: (t.schedule, t.path))
    return call.answer(out.IndexEntry, {"eventKey": event_key_, "triggers": [t.to_json() for t in triggers]})


async def list_schedules(h: Handlers, call: Call) -> Response:
    """A page of the schedules, filtered (filters.py: by labels, enabled, paused, finished, trigger kind,
    program, topic, next fire before/after; `total` is then null: counting would read every schedule)."""
    request = call.request
    tenant = request.query.get("tenant") or None
    if tenant is not None and (denied := deny_tenants(call.view, request, tenant)):
        return denied
    try:
        filters = parse_filters(request.query, h.next_fire, h.worker.clock)
    except BadFilter as exc:
        return call.field_error(exc.field, exc.message)
    paging = h.page_query(call, 1000)
    if not isinstance(paging, tuple):
        return paging
    try:
        schedules, total, after = await _schedule_page(h, request, tenant, *paging, filters)
    except Unavailable as exc:
        return call.unavailable(str(exc))
    return call.answer(
        out.ScheduleList,
        {"schedules": schedules, "total": total, "next": None if after is None else cursor_text(after)},
    )


async def _schedule_page(
    h: Handlers,
    request: Request,
    tenant: str | None,
    limit: int,
    cursor: bytes | None,
    filters: Filters = NO_FILTERS,
) -> tuple[list[dict[str, Any]], int | None, bytes | None]:
    """A page of the schedules (of `tenant`) the request's token may see, from every worker: at most
    `limit`, in key order, after the key `cursor`; how many there are in all; the cursor of the next
    page (None: this is the last). Each worker reads a RocksDB seek and `limit` + 1 entries per owned
    partition (merged in key order): the cost is the page's, not the table's."""
    who = auth.principal_of(request)
    tenants = [tenant] if tenant is not None else None if who.all_tenants else sorted(who.tenants or ())
    prefixes = [b""] if tenants is None else sorted(tenant_prefix(t) for t in tenants)
    active = sorted(h.worker.active_partitions())
    merged = heapq.merge(*(h.worker.states_from(p, prefixes, cursor) for p in active), key=itemgetter(0))
    states = (s for _, s in merged) if filters.match is None else (s for _, s in merged if filters.match(s))
    local = {
        "schedules": [h.local_json(state) for state in itertools.islice(states, limit + 1)],
        "total": None
        if filters.match is not None
        else sum(h.worker.schedule_count(p, tenants) for p in active),
    }
    query = {"limit": str(limit), **filters.query}
    if tenant is not None:
        query["tenant"] = tenant
    if cursor is not None:
        query["cursor"] = cursor_text(cursor)
    bodies = await h.cluster.fan_out_bodies(request, "/schedules", query, local)
    found = heapq.merge(*(b["schedules"] for b in bodies), key=_schedule_order)
    page = list(itertools.islice(found, limit + 1))
    more = len(page) > limit or any(b.get("next") for b in bodies[1:])  # (a worker's page is cut too)
    after = _schedule_order(page[limit - 1]) if more and len(page) >= limit else None
    total = None if filters.match is not None else sum(b.get("total") or 0 for b in bodies)
    return page[:limit], total, after


async def list_task_definitions(h: Handlers, call: Call) -> Response:
    """light-scheduler's GET /schedulers: the schedules a TaskDefinition can express."""
    request = call.request
    host, name, unit = (request.query.get(k) or None for k in ("host", "name", "unit"))
    if unit is not None and unit not in TimeUnit.__members__:
        return call.field_error("unit", f"must be one of {', '.join(TimeUnit.__members__)}")
    if host is not None and (denied := deny_tenants(call.view, request, host)):
        return denied
    paging = h.page_query(call, MAX_LIST)
    if not isinstance(paging, tuple):
        return paging
    try:
        if host and name:
            one = await h.fetch(ScheduleKey(host, name), request)
            schedules, after = [one] if one else [], None
        else:
            schedules, _, after = await _schedule_page(h, request, host, *paging)
    except Unavailable as exc:
        return call.unavailable(str(exc))
    definitions = []
    for s in schedules:
        td = task_definition_from_schedule(state_from_json(s).schedule)
        if td is None or (name and s["name"] != name):
            continue
        if unit and td["frequency"]["timeUnit"] != unit:
            continue
        definitions.append(td)
    answer = call.answer(out.TaskDefinitions, definitions)
    if after is not None:  # (light-scheduler's answer is a bare list: the next page's cursor is a header)
        answer.headers[NEXT_CURSOR_HEADER] = cursor_text(after)
    return answer


def _schedule_order(schedule: dict[str, Any]) -> bytes:
    """Where a schedule's JSON comes in a list: its key's bytes (RocksDB's order: within a tenant, shorter
    names first, then by bytes)."""
    return key_bytes(ScheduleKey(schedule["tenant"], schedule["name"]))
