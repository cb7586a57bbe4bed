"""Run caps: at most N runs active at once in the whole deployment, and at most M of each tenant's (Dagster's
`max_concurrent_runs`, Airflow's `parallelism`). Pure.

A job queue's concurrency limit is exact because one partition counts the runs it limits; a cap spans every
job queue, so it is one more queue: the **cap queue**, the job-queue table's key CAPS_KEY (one partition),
grants run slots by messages on the jobs topic. A job whose constraints are met asks it for a slot (PENDING_CAP,
holding its program's or group's concurrency slot meanwhile) instead of launching; the cap queue grants the
asks that fit, highest priority first, then oldest (a tenant at its cap holds back only its own jobs), and
keeps the rest waiting; the job launches when its grant reaches its queue, and its run gives the slot back
when it ends (and a job cancelled while it asks, at once). With transactions the ask, the grant and the
release are each in their sender's transaction, so the count stays exact across crashes and rebalances.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from scheduler.domain.basics import plural
from scheduler.domain.tenancy import schedule_id_tenant

#: the cap queue's key in the job-queue table and on the jobs topic
CAPS_KEY = "caps:"
#: what a job waiting for a slot is blocked by, and its state
RUN_CAP = "RunCap"
PENDING_CAP = "PENDING_CAP"
ANY_TENANT = "*"


class InvalidCaps(ValueError):
    """A run caps setting that does not parse."""


@dataclass(frozen=True, slots=True)
class RunCaps:
    """The caps: `total` runs in the deployment (None: no cap), and each tenant's (`*`: every other's)."""

    total: int | None = None
    tenants: dict[str, int] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return self.total is not None or bool(self.tenants)

    def of(self, tenant: str) -> int | None:
        return self.tenants.get(tenant, self.tenants.get(ANY_TENANT))

    @classmethod
    def parse(cls, total: int, tenants: str) -> RunCaps:
        """SCHEDULER_MAX_ACTIVE_RUNS (0: none) and SCHEDULER_TENANT_MAX_ACTIVE_RUNS: `20` (each tenant), or
        `acme=200,beta=5,*=20` (those tenants', and every other's; without `*` the others have none)."""
        caps: dict[str, int] = {}
        for part in (p.strip() for p in tenants.split(",") if p.strip()):
            tenant, eq, value = part.rpartition("=")
            name = tenant.strip() if eq else ANY_TENANT
            try:
                n = int(value)
            except ValueError:
                raise InvalidCaps(
                    f"{part!r}: a run cap is a whole number (tenant=N, or N for every tenant)"
                ) from None
            if n < 1 or not name:
                raise InvalidCaps(f"{part!r}: a run cap is at least 1, of a named tenant or of *")
            caps[name] = n
        return cls(total if total > 0 else None, caps)


@dataclass
class CapQueue:
    held: dict[str, str] = field(default_factory=dict)  # run id -> the job queue it launched from
    waiting: list[dict[str, Any]] = field(default_factory=list)  # asks: {"runId", "queue", "priority", "at"}

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CapQueue:
        return cls(dict(d.get("held") or {}), list(d.get("waiting") or []))

    def tenant_held(self, tenant: str) -> int:
        return sum(schedule_id_tenant(r) == tenant for r in self.held)


@dataclass(frozen=True, slots=True)
class Grant:
    run_id: str
    queue: str


def ask(cq: CapQueue, run_id: str, queue: str, priority: int, at: int) -> None:
    """A job asks a slot for its run (a repeat, or an ask for a run that holds one, changes nothing)."""
    if run_id not in cq.held and all(a["runId"] != run_id for a in cq.waiting):
        cq.waiting.append({"runId": run_id, "queue": queue, "priority": priority, "at": at})


def release(cq: CapQueue, run_id: str) -> None:
    """A run ended (or its job was cancelled while it asked): its slot, or its ask, goes."""
    cq.held.pop(run_id, None)
    cq.waiting = [a for a in cq.waiting if a["runId"] != run_id]


def grant(cq: CapQueue, caps: RunCaps) -> list[Grant]:
    """The asks that fit now, highest priority first, then oldest; a tenant at its cap holds back only
    its own asks, the deployment at its cap every ask."""
    grants: list[Grant] = []
    keep: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    for a in sorted(cq.waiting, key=lambda a: (-a["priority"], a["at"])):
        tenant = schedule_id_tenant(a["runId"])
        if tenant not in counts:
            counts[tenant] = cq.tenant_held(tenant)
        cap = caps.of(tenant)
        if (caps.total is not None and len(cq.held) >= caps.total) or (
            cap is not None and counts[tenant] >= cap
        ):
            keep.append(a)
            continue
        cq.held[a["runId"]] = a["queue"]
        counts[tenant] += 1
        grants.append(Grant(a["runId"], a["queue"]))
    cq.waiting = keep
    return grants


def why_waiting(cq: CapQueue, caps: RunCaps, run_id: str) -> str:
    """What holds an ask back: its tenant's cap or the deployment's, and how many asks come before it."""
    tenant = schedule_id_tenant(run_id)
    cap = caps.of(tenant)
    mine = next((a for a in cq.waiting if a["runId"] == run_id), None)
    if mine is None:
        return ""
    order = (-mine["priority"], mine["at"])
    ahead = sum((-a["priority"], a["at"]) < order for a in cq.waiting)
    held = cq.tenant_held(tenant)
    if cap is not None and held >= cap:
        why = f"tenant {tenant} has {plural(held, 'run')} active, at most {cap} (SCHEDULER_TENANT_MAX_ACTIVE_RUNS)"
    else:
        why = f"{plural(len(cq.held), 'run')} active in the deployment, at most {caps.total} (SCHEDULER_MAX_ACTIVE_RUNS)"
    return f"{why}; {plural(ahead, 'job')} asked before it" if ahead else why
