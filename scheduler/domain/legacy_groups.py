"""Group queues keyed by the group alone, as before tenant scoping: each tenant's share handed to its own
group queue (`group:<tenant>/<group>`), once. Pure."""

from __future__ import annotations

from collections import Counter

from scheduler.domain.constraints import MAX_RECENT_STARTS
from scheduler.domain.jobs import (
    MAX_LAUNCHED_REMEMBERED,
    MAX_OUTCOMES_REMEMBERED,
    ProgramQueue,
    add_job,
)
from scheduler.domain.model import GROUP_QUEUE_PREFIX, group_queue_key
from scheduler.domain.tenancy import schedule_id_tenant


def legacy_group(queue_key: str) -> str | None:
    """The group of a job queue keyed `group:<group>`, shared by every tenant (written before group names
    were resolved within a tenant); None for any other queue."""
    group = queue_key.removeprefix(GROUP_QUEUE_PREFIX)
    return group if group != queue_key and "/" not in group else None


def split_legacy_group(queue: ProgramQueue) -> dict[str, ProgramQueue]:
    """A shared group queue's share for each tenant that used it, keyed by that tenant's group queue.

    Jobs, launched job ids and outcomes go to their schedule's tenant; an active run to the tenant of its
    run id (= its job id) or, when that tenant never used the group (a run started elsewhere), to every
    tenant, as do the start times: which tenant's run started when is not recorded, and counting too many
    only holds a job back, where too few would break a limit.
    """
    group = legacy_group(queue.program)
    assert group is not None
    tenants = {schedule_id_tenant(j.schedule) for j in queue.jobs}
    tenants |= {schedule_id_tenant(j) for j in queue.launched}
    tenants |= {schedule_id_tenant(o["schedule"]) for o in queue.outcomes if o.get("schedule")}
    out: dict[str, ProgramQueue] = {}
    for tenant in sorted(tenants):
        mine = {
            r for r in queue.active if schedule_id_tenant(r) == tenant or schedule_id_tenant(r) not in tenants
        }
        share = ProgramQueue(
            group_queue_key(tenant, group),
            jobs=[j for j in queue.jobs if schedule_id_tenant(j.schedule) == tenant],
            active={r: status for r, status in queue.active.items() if r in mine},
            run_program={r: p for r, p in queue.run_program.items() if r in mine},
            last_start=queue.last_start,
            last_end=queue.last_end,
            recent_starts=list(queue.recent_starts),
            launched=[j for j in queue.launched if schedule_id_tenant(j) == tenant],
            outcomes=[o for o in queue.outcomes if schedule_id_tenant(o.get("schedule") or "") == tenant],
        )
        out[share.program] = share
    return out


def adopt(queue: ProgramQueue, share: ProgramQueue) -> None:
    """Merge a share of a shared group queue into its tenant's queue. A share handed over twice (a worker
    that died between handing it over and deleting the old queue) adds no job, start or outcome twice."""
    launched = set(queue.launched)
    queue.launched.extend(j for j in share.launched if j not in launched)
    del queue.launched[:-MAX_LAUNCHED_REMEMBERED]
    for job in share.jobs:
        add_job(queue, job)
    for run_id, status in share.active.items():
        queue.active.setdefault(run_id, status)
        if run_id in share.run_program:
            queue.run_program.setdefault(run_id, share.run_program[run_id])
        if run_id in share.run_slots:
            queue.run_slots.setdefault(run_id, share.run_slots[run_id])
    queue.last_start = _latest(queue.last_start, share.last_start)
    queue.last_end = _latest(queue.last_end, share.last_end)
    starts = Counter(queue.recent_starts) | Counter(share.recent_starts)  # the same start once, not twice
    queue.recent_starts = sorted(starts.elements())[-MAX_RECENT_STARTS:]
    seen = {(o["jobId"], o["outcome"], o["at"]) for o in queue.outcomes}
    queue.outcomes.extend(o for o in share.outcomes if (o["jobId"], o["outcome"], o["at"]) not in seen)
    queue.outcomes.sort(key=lambda o: o["at"])
    del queue.outcomes[:-MAX_OUTCOMES_REMEMBERED]


def _latest(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)
