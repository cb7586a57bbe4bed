"""Run leases in a job queue: when a launched run is lost (no launcher took it in time, or its holder stopped
renewing it). Pure."""

from __future__ import annotations

from scheduler.domain.jobs import ProgramQueue
from scheduler.domain.runs import RunStatus


def lost_runs(
    queue: ProgramQueue, renewed: dict[str, int], default_renewal: int, now: int, pending_timeout_ms: int
) -> list[tuple[str, str]]:
    """The queue's runs that are lost by `now`, each with why: a PENDING run no launcher
    took within `pending_timeout_ms` of its launch, a held run whose holder's last renewal (`renewed`, else
    `default_renewal`: when this worker took the partition over) is older than its lease."""
    return [
        (run_id, why)
        for run_id, (due, why) in _deadlines(queue, renewed, default_renewal, pending_timeout_ms).items()
        if due <= now
    ]


def next_lease_check(
    queue: ProgramQueue, renewed: dict[str, int], default_renewal: int, pending_timeout_ms: int
) -> int | None:
    """When the first of the queue's runs would be lost (None: none can be)."""
    dues = [due for due, _ in _deadlines(queue, renewed, default_renewal, pending_timeout_ms).values()]
    return min(dues) if dues else None


def _deadlines(
    queue: ProgramQueue, renewed: dict[str, int], default_renewal: int, pending_timeout_ms: int
) -> dict[str, tuple[int, str]]:
    out: dict[str, tuple[int, str]] = {}
    for run_id, status in queue.active.items():
        if run_id in queue.run_program:
            continue  # another program's run, in a group queue: its own program's queue watches it
        lease = queue.leases.get(run_id)
        if lease is not None:
            holder = queue.holders.get(run_id, "")
            last = max(renewed.get(run_id, default_renewal), queue.since.get(run_id, 0))
            out[run_id] = (
                last + lease,
                f"lease expired: launcher {holder} renewed it last {lease / 1000:g} s before (lost or cut off)",
            )
        elif status == RunStatus.PENDING and run_id not in queue.holders:
            out[run_id] = (
                queue.since.get(run_id, default_renewal) + pending_timeout_ms,
                f"no launcher took it within {pending_timeout_ms / 1000:g} s of its launch",
            )
    return out
