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

    from scheduler.domain.delayed import DelayedMessage
    from scheduler.domain.jobs import ProgramQueue
    from scheduler.domain.model import ScheduleCommand, ScheduleKey, ScheduleState
    from scheduler.domain.sensors import SensorState
    from scheduler.domain.triggers.progress import TriggerProgress
    from scheduler.kafka.config import Settings
    from scheduler.kafka.due_index import DueIndex
    from scheduler.kafka.producer import TopicCreator
    from scheduler.kafka.transactions import Transactions
    from scheduler.worker.calendars import CalendarRegistry
    from scheduler.worker.counters import WorkerCounts
    from scheduler.worker.following import Following
    from scheduler.worker.freeze import FreezeGuard
    from scheduler.worker.journal import Journal
    from scheduler.worker.liveness import Liveness
    from scheduler.worker.notifier import Notifications
    from scheduler.worker.programs import ProgramRegistry
    from scheduler.worker.punctuator import Punctuator

#: a Faust table of bytes to bytes (scheduler.kafka.tables.raw_table): get, [], del, items
Table = Any


class CommandSender(Protocol):
    async def send_command(
        self,
        cmd: ScheduleCommand,
        value: bytes | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future[object]:
        """Produce a command to the commands partition of its key."""
        ...


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

    def upsert(self, partition: int, key: bytes, state: ScheduleState) -> None:
        """The schedule's state changed (a limited schedule made its maxFires): its dues follow."""
        ...


class TriggerPort(Outbox, Protocol):
    """The trigger agent: the schedules (read), the trigger progress, the elapsed triggers' timers."""

    trigger_progress: Table

    @property
    def punctuator(self) -> Arming: ...

    def schedule_bytes(self, partition: int, key: bytes) -> bytes | None: ...

    def write_schedule(self, partition: int, key: bytes, value: bytes | None) -> None:
        """A schedule state written with the work at hand (a limited schedule's count of fires)."""
        ...

    async def send_fire(self, topic: str, key: bytes, value: bytes) -> asyncio.Future[object]: ...

    def generation(self) -> int:
        """The consumer group generation of the worker's assignment (what a trigger progress is written in)."""
        ...


class JobQueuePort(Outbox, CommandSender, Protocol):
    """The job queue agent: the job queues and run records it owns, the job and run counters."""

    job_queue: Table
    run_records: Table


class Owned(Protocol):
    @property
    def partitions(self) -> set[int]:
        """The partitions taken up here."""
        ...


class Moving(Owned, Protocol):
    moved: list[Callable[[], None]]  # each called once a partition was taken up or given up


class Producing(Protocol):
    async def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future[object]:
        """A record: in the transaction of the partition whose work this is, else outside any."""
        ...

    async def produce_many(
        self, topic: str, records: list[tuple[bytes, bytes, list[tuple[str, bytes]]]]
    ) -> list[asyncio.Future[object]]:
        """Keyed (key, value, headers) records as `produce` sends each, in whole batches."""
        ...


class DelayedPort(Outbox, Producing, Protocol):
    """Delayed messages (scheduler.worker.delayed): their table, the partitions taken up, producing in the
    partition's transaction (or outside any, then waiting for the freeze guard's word)."""

    delayed: Table
    txns: Transactions | None
    topics: TopicCreator

    @property
    def punctuator(self) -> Moving: ...

    async def may_work(self) -> bool: ...


class SensorsPort(Outbox, Protocol):
    """Polling sensors (scheduler.worker.sensors): the program registry, the partitions taken up,
    producing in their transactions (or, without them, after the freeze guard's word)."""

    registry: ProgramRegistry
    following: Following  # (the consumer of the topics followed whole: the sensors' states among them)
    txns: Transactions | None

    @property
    def punctuator(self) -> Owned: ...

    async def may_work(self) -> bool: ...


class RetentionPort(Outbox, CommandSender, Protocol):
    """Finished schedules past their retention (scheduler.worker.retention): the partitions taken up, their
    schedules in key order, DELETE commands out."""

    @property
    def punctuator(self) -> Owned: ...

    def states_from(
        self, partition: int, prefixes: list[bytes], after: bytes | None
    ) -> Iterator[tuple[bytes, ScheduleState]]: ...


class SensorReader(Protocol):
    def state(self, sensor: str) -> SensorState | None:
        """A sensor's state: its owner's latest, else what the sensors topic says."""
        ...


class DelayedReader(Protocol):
    def pending(self, partition: int, id: bytes) -> DelayedMessage | None: ...

    def pending_from(
        self, partition: int, after: bytes | None = None
    ) -> Iterator[tuple[bytes, DelayedMessage]]:
        """The partition's pending messages in due order, after a list's cursor."""
        ...


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

    @property
    def assigned(self) -> bool:
        """A first assignment was taken up."""
        ...


class ProgressReader(Protocol):
    def load_progress(self, key: bytes, state: ScheduleState) -> TriggerProgress: ...


class QueueReader(Protocol):
    def local_queues(self, partition: int) -> list[tuple[bytes, ProgramQueue]]: ...


class AppliedReader(Protocol):
    """The commands ingest, as read-your-writes asks it (scheduler.http.applied)."""

    def applied_offset(self, partition: int) -> int | None: ...

    async def wait_applied(self, partition: int, offset: int, timeout_s: float) -> bool: ...


class WebPort(Outbox, MetricsPort, Producing, Protocol):
    """The HTTP views: local reads of every table, commands out, the program and calendar registries,
    the commands ingest's applied offsets, and what /health tells."""

    registry: ProgramRegistry
    calendars: CalendarRegistry
    notifications: Notifications

    @property
    def sensors(self) -> SensorReader: ...

    @property
    def ingest(self) -> AppliedReader: ...

    @property
    def triggers(self) -> ProgressReader: ...

    @property
    def jobs(self) -> QueueReader: ...

    @property
    def delayed_messages(self) -> DelayedReader: ...

    def tenant_full(self, partition: int, tenant: str) -> bool: ...

    async def publish(
        self, topic: str, key: bytes, value: bytes | None, partition: int | None | str = "auto"
    ) -> None:
        """A record an HTTP write answers for (None: a tombstone), returning once the broker has it."""
        ...

    def submit_command(
        self, cmd: ScheduleCommand, headers: list[tuple[str, bytes]] | None = None
    ) -> asyncio.Future[object]:
        """An HTTP write's command, batched with the others of the same turn; the future resolves to its
        RecordMetadata once the broker has it."""
        ...

    def local_state(self, key: bytes) -> ScheduleState | None: ...

    def local_states(self, partition: int) -> Iterator[tuple[bytes, ScheduleState]]: ...

    def states_from(
        self, partition: int, prefixes: list[bytes], after: bytes | None
    ) -> Iterator[tuple[bytes, ScheduleState]]: ...

    def schedule_count(self, partition: int, tenants: Iterable[str] | None) -> int: ...

    def changelog_distribution(self) -> dict[Any, dict[str, list[int]]]: ...


class QueueChecker(Protocol):
    """The job queue's timer of pending jobs, per partition owned."""

    def assign(self, partition: int, queues: list[tuple[bytes, ProgramQueue]]) -> None: ...

    def revoke(self, partition: int) -> None: ...

    async def run(self) -> None:
        """Launches the pending jobs whose constraints came true, while the worker runs."""
        ...


class Jobs(QueueReader, Protocol):
    """The job queue agent, as the owner of partitions and the command path use it."""

    @property
    def checker(self) -> QueueChecker: ...

    async def cancel_jobs(
        self, queue_key: str, schedule: ScheduleKey, below_version: int | None, reason: str
    ) -> None: ...


class ElapsedArming(Protocol):
    """The trigger agent, arming a schedule's elapsed triggers."""

    def arm_elapsed(self, partition: int, key: bytes, state: ScheduleState) -> None: ...


class CommandsTaking(Protocol):
    """The commands ingest, as partitions are taken up and given back."""

    async def assign(self, partitions: set[int]) -> None: ...

    async def revoke(self, partitions: set[int]) -> bool:
        """Its last fetch's writes and offsets sent; False if that did not end in time."""
        ...


class Firing(Protocol):
    """The punctuator, as bulk work (a fetch of commands) gives way to it."""

    #: set while no timer stages, fires or loads
    idle: asyncio.Event

    def sent_uncommitted(self) -> bool:
        """Transactional: fires were sent that their partition's transaction has not committed yet."""
        ...


class ScheduleFollower(Protocol):
    """The event routing: its trigger index follows each schedule's change."""

    async def schedule_changed(
        self, key: bytes, old: ScheduleState | None, new: ScheduleState | None, since: int = 0
    ) -> None: ...


class OwnerPort(Protocol):
    """Taking partitions up and giving them back (scheduler.worker.ownership): the app and its tables, the
    services a partition is handed to, and what the worker holds for a partition's open transaction."""

    faust_app: Any
    settings: Settings
    schedules: Table
    progress: Table
    txns: Transactions | None
    freeze: FreezeGuard | None  # (without transactions)
    freezes: FreezeGuard
    punctuator: Punctuator
    due_index: DueIndex

    @property
    def jobs(self) -> Jobs: ...

    @property
    def triggers(self) -> ElapsedArming: ...

    @property
    def ingest(self) -> CommandsTaking: ...

    @property
    def counts(self) -> WorkerCounts: ...

    def local_states(self, partition: int) -> Iterator[tuple[bytes, ScheduleState]]: ...

    def drop_held(self, partition: int) -> None:
        """Transactions: forget the writes held for the partition's open transaction (given up)."""
        ...

    def forget_tenant_counts(self) -> None: ...

    async def await_progress_sent(self, timeout_s: float = 5.0) -> None: ...

    def unit_of_work(self) -> Any:
        """A unit of work no commit splits (see kafka.transactions)."""
        ...

    def start_firing(self) -> None:
        """A partition is taken up: the punctuator fires from now on (already started: nothing)."""
        ...

    async def read_calendars(self) -> None:
        """Before a take-up: the calendars are read (once), so a catch-up or a fire skips their days."""
        ...


class ScheduleWrites(Protocol):
    """The schedules table as the command path writes it (scheduler.worker.schedule_store): a write held
    and read back at once, the held writes put in RocksDB."""

    def read(self, partition: int, key: bytes) -> bytes | None: ...

    def write(self, partition: int, key: bytes, value: bytes | None) -> None: ...

    def write_local(self) -> None: ...


class CommandPort(Outbox, CommandSender, Producing, Protocol):
    """The command path (scheduler.worker.command_handler): a schedule's stored state and its writes, the
    registries a command's program and calendars are checked against, and the services a command's effect
    reaches (the punctuator's heap, the routing's index, the trigger progress, the pending jobs)."""

    schedules: Table
    trigger_progress: Table
    schedule_history: Table
    txns: Transactions | None
    registry: ProgramRegistry
    calendars: CalendarRegistry
    topics: TopicCreator
    journal: Journal | None
    punctuator: Punctuator

    @property
    def routing(self) -> ScheduleFollower: ...

    @property
    def triggers(self) -> ElapsedArming: ...

    @property
    def jobs(self) -> Jobs: ...

    @property
    def store(self) -> ScheduleWrites: ...

    async def send_fire(self, topic: str, key: bytes, value: bytes) -> asyncio.Future[object]: ...


class Loop(Protocol):
    """A loop the worker runs while it runs (started by services.Timers)."""

    async def run(self) -> None: ...


class Started(Protocol):
    """A follower or poller started with the worker's services (and stopped by Worker.stop)."""

    async def start(self) -> None: ...


class DelayedLoop(Loop, Protocol):
    def stop(self) -> None:
        """Its timer stops (what it holds is the next owner's, from the topic)."""
        ...


class ServicesPort(Protocol):
    """What the worker's services start with the app and stop with it (scheduler.worker.services)."""

    faust_app: Any
    settings: Settings
    txns: Transactions | None
    punctuator: Punctuator
    registry: ProgramRegistry
    calendars: CalendarRegistry
    notifications: Notifications
    liveness: Liveness

    @property
    def jobs(self) -> Jobs: ...

    @property
    def delayed_messages(self) -> DelayedLoop: ...

    @property
    def sensors(self) -> Started: ...

    @property
    def retention(self) -> Started: ...

    @property
    def ingest(self) -> Loop: ...

    async def ensure_own_topics(self) -> None: ...

    async def stop(self) -> None: ...
