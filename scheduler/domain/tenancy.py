"""Which tenants a request touches: the line a tenant-bound token may not cross.

A tenant is light-scheduler's `host` and CDAP's namespace. A schedule belongs to the tenant of its key,
and it also touches the namespaces of what it refers to: the program it launches, the datasets and
programs its triggers watch. A token may create or change a schedule only if it holds every one of
them, so no tenant can launch another's program or react to another's data. Events belong to the
namespace of their dataset or program; a program's runs to the program's namespace.
"""

from __future__ import annotations

from scheduler.domain.basics import dataset_tenant as dataset_tenant
from scheduler.domain.events import DataEvent, ProgramStatusEvent, SensorEvent
from scheduler.domain.model import Schedule, trigger_leaves


def program_tenant(program_id: str) -> str:
    """'namespace/application/type/name' -> namespace."""
    return program_id.split("/", 1)[0]


def schedule_tenants(schedule: Schedule) -> set[str]:
    """The schedule's tenant and every namespace it refers to."""
    out = {schedule.key.tenant}
    if schedule.program is not None:
        out.add(schedule.program.namespace)
    for _, leaf in trigger_leaves(schedule.trigger):
        out |= leaf.tenants()
    return out


def event_tenant(event: DataEvent | ProgramStatusEvent | SensorEvent) -> str:
    if isinstance(event, DataEvent):
        return dataset_tenant(event.dataset)
    if isinstance(event, SensorEvent):
        return event.sensor.namespace
    return event.program.namespace


def event_key_tenant(event_key: str) -> str:
    """'partition:<ns>.<dataset>' or 'program:<ns>/<app>/<type>/<name>' -> ns ('' if neither)."""
    kind, _, rest = event_key.partition(":")
    if kind == "partition":
        return dataset_tenant(rest)
    if kind in ("program", "sensor"):
        return program_tenant(rest)
    return ""


def schedule_id_tenant(schedule_id: str) -> str:
    """'tenant/name' -> tenant."""
    return schedule_id.split("/", 1)[0]


def job_filter_tenants(schedule: str | None, program: str | None, job_id: str | None) -> set[str]:
    """The tenants a job list asks about when filtered by schedule (tenant/name), program or job id (which
    starts with its schedule's id): a filter naming another tenant's is refused, not answered empty."""
    out = {schedule_id_tenant(v) for v in (schedule, job_id) if v is not None}
    if program is not None:
        out.add(program_tenant(program))
    return out


def partition_share(limit: int, partitions: int) -> int:
    """How many of one tenant's schedules one partition may hold, for `limit` in all.

    A tenant's schedules are spread over the partitions by the hash of their key and no worker sees
    them all, so each partition enforces its share, with 10 % slack for the uneven spread: a tenant
    can hold `limit` schedules (a little more when spread evenly) but never more than 1.1 x limit + P.
    With one partition the limit is exact.
    """
    if partitions == 1:
        return limit
    return -(-limit * 11 // (10 * partitions))  # ceil(1.1 * limit / partitions), in integers


__all__ = [
    "dataset_tenant",
    "event_key_tenant",
    "event_tenant",
    "job_filter_tenants",
    "partition_share",
    "program_tenant",
    "schedule_id_tenant",
    "schedule_tenants",
]
