"""The worker's ports: what each service, view and collector the worker wires may use of it.

`app.Worker` is the composition root: it builds the Faust app, its tables, the producer and the services,
and hands each service itself — typed as the narrow port below that names what the service uses, and
nothing else. A service never imports `scheduler.worker.app` (the import graph has no cycle through it), and a
unit test hands a service a small fake that has just these members.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import asyncio

    from faust.types import EventT

    from scheduler.domain.jobs import ProgramQueue
    from scheduler.domain.model import ScheduleCommand, ScheduleState
    from scheduler.domain.triggers.progress import TriggerProgress
    from scheduler.kafka.config import Settings
    from scheduler.worker.calendars import CalendarRegistry
    from scheduler.worker.counters import WorkerCounts
    from scheduler.worker.liveness import Liveness
    from scheduler.worker.programs import ProgramRegistry

#: a Faust table of bytes to bytes (scheduler.kafka.tables.raw_table): get, [], del, items
Table = Any


class Outbox(Protocol):
    """What every agent uses: the settings, the clock, counters, and sending to the worker's topics."""

    settings: Settings
    clock: Callable[[], int]

    @property
    def counts(self) -> WorkerCounts: ...

    def partition_of(self, key: bytes) -> int: ...

    async def send_keyed(
        self, topic: str, key: bytes, value: bytes, partition: int | None | str = "auto"
    ) -> None: ...

    async def dead_letter(self, event: EventT, reason: str) -> None: ...


class RoutingPort(Outbox, Protocol):
    """The event routing: the trigger index it keeps and reads, the recent events it keeps and replays."""

    trigger_index: Table
    recent_events: Table

    def stored_items(self, table: Table, partition: int) -> Iterator[tuple[bytes, bytes]]:
        """The entries of one partition of a table, as committed."""
        ...


class Arming(Protocol):
    def arm(self, partition: int, key: bytes, path: str, due: int) -> None: ...


class TriggerPort(Outbox, Protocol):
    """The trigger agent: the schedules (read), the trigger progress, the elapsed triggers' timers."""

    trigger_progress: Table

    @property
    def punctuator(self) -> Arming: ...

    def schedule_bytes(self, partition: int, key: bytes) -> bytes | None: ...

    def generation(self) -> int:
        """The consumer group generation of the worker's assignment (what a trigger progress is written in)."""
        ...


class JobQueuePort(Outbox, Protocol):
    """The job queue agent: the job queues and run records it owns, the job and run counters."""

    job_queue: Table
    run_records: Table


class MetricsPort(Protocol):
    """The /metrics collector: counters, and the tables whose sizes it counts."""

    faust_app: Any
    settings: Settings

    @property
    def counts(self) -> WorkerCounts: ...

    schedules: Table
    progress: Table
    trigger_index: Table
    trigger_progress: Table
    job_queue: Table
    run_records: Table
    recent_events: Table
    schedule_history: Table

    def active_partitions(self) -> set[int]: ...

    liveness: Liveness  # the loops' watchdog
    assigned: bool  # a first assignment was taken up


class ProgressReader(Protocol):
    def load_progress(self, key: bytes, state: ScheduleState) -> TriggerProgress: ...


class QueueReader(Protocol):
    def local_queues(self, partition: int) -> list[tuple[bytes, ProgramQueue]]: ...


class AppliedReader(Protocol):
    """The commands ingest, as read-your-writes asks it (scheduler.http.applied)."""

    def applied_offset(self, partition: int) -> int | None: ...

    async def wait_applied(self, partition: int, offset: int, timeout_s: float) -> bool: ...


class WebPort(Outbox, MetricsPort, Protocol):
    """The HTTP views: local reads of every table, commands out, the program and calendar registries,
    the commands ingest's applied offsets, and what /health tells."""

    registry: ProgramRegistry
    calendars: CalendarRegistry

    @property
    def ingest(self) -> AppliedReader: ...

    @property
    def triggers(self) -> ProgressReader: ...

    @property
    def jobs(self) -> QueueReader: ...

    def tenant_full(self, partition: int, tenant: str) -> bool: ...

    async def tombstone(self, topic: str, key: bytes) -> None: ...

    def local_state(self, key: bytes) -> ScheduleState | None: ...

    def local_states(self, partition: int) -> Iterator[tuple[bytes, ScheduleState]]: ...

    def states_from(
        self, partition: int, prefixes: list[bytes], after: bytes | None
    ) -> Iterator[tuple[bytes, ScheduleState]]: ...

    def schedule_count(self, partition: int, tenants: Iterable[str] | None) -> int: ...

    def changelog_distribution(self) -> dict[Any, dict[str, list[int]]]: ...

    async def send_command(
        self,
        cmd: ScheduleCommand,
        value: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future[object]: ...
