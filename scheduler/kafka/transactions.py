"""Kafka transactions per partition: Kafka Streams' exactly-once (EOS v1) for what the worker produces itself.

Each partition of the schedules this worker owns has its own transactional producer, with the
transactional id `{app}-p{partition}`. Starting one fences every earlier producer of that id: a worker that
owned the partition before and was paused (a long GC, SIGSTOP, a frozen VM) or cut off from the network can
no longer commit anything for it, and whatever it had open is aborted. Everything a partition's work
produces (the punctuator's fires and their watermark; a fetch of commands, its schedule writes, its dead
letters and its stored offset) goes into that partition's open transaction, and becomes visible to a
read_committed reader, and to a table restored from its changelog, only once the transaction commits.

Work and commits take turns: work runs inside `work()` (many at once), a commit waits until no work is
in progress and new work waits for the commit, so a transaction always ends between two units of work —
a tick's fires are never committed without the watermark that covers them. Before a partition commits,
`before_commit(partition)` adds what covers its work (the watermarks); after, the callbacks registered with
`after_commit` run (local RocksDB writes, persisted offsets): the local stores only ever hold committed
state.

A partition's open transaction may be held (`hold`): records sent ahead of their instant (an instant's fires,
delayed messages' deliveries) must not be seen before it, so the partition does not commit before then — a
read_committed reader sees them at the instant's commit, without the produce's round trips after it. A hold
lasts at most HOLD_MAX_S on the monotonic clock, whatever the wall clock does.

A partition whose transaction fails (fenced by a new owner, a commit the broker refused, or a record of it
the broker did not acknowledge: aiokafka would commit the others without it) is given up at once: its
producer is closed and `on_failed` tells the worker to drop what it held for the partition and rejoin the
group, so it is handed out again — to this worker or another — from its committed state. A
producer is only ever (re)started after an assignment, never to retry: a zombie that retried would fence
the partition's rightful owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TypeVar

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    InvalidProducerEpoch,
    ProducerFenced,
    TransactionalIdAuthorizationFailed,
)

from scheduler.kafka.producer import BatchedProducer, MissingTopic

log = logging.getLogger(__name__)

#: errors that say another producer of the same transactional id took over
FENCED_ERRORS = (ProducerFenced, InvalidProducerEpoch, TransactionalIdAuthorizationFailed)
#: how long starting a partition's producer (which fences the previous owner) may take before it is retried
START_TIMEOUT_S = 30.0
#: how long a commit may take before the partition is given up (its transaction then aborts)
COMMIT_TIMEOUT_S = 60.0
#: how long a revocation waits for the work in progress to end and its partitions to commit; past it they
#: are given up uncommitted (their next owner aborts what they held, and redoes it from the committed state)
REVOKE_TIMEOUT_S = 10.0
#: the longest a partition's commit may be held back for records sent ahead of their instant (hold)
HOLD_MAX_S = 0.2

T = TypeVar("T")
BeforeCommit = Callable[[int], Awaitable[None]]
#: ms from a held transaction's release (hold) to its commit answered: how late what was sent ahead is seen
Released = Callable[[int], None]
OnFailed = Callable[[int, BaseException, bool], Awaitable[None]]


#: the schedule partition whose work the current task is doing (None: none; what it produces is not
#: transactional: the Faust agents' hops)
OWNER: ContextVar[int | None] = ContextVar("scheduler_owner", default=None)


@contextlib.contextmanager
def owned_by(partition: int | None) -> Iterator[None]:
    """What is produced inside belongs to `partition`'s transaction."""
    token = OWNER.set(partition)
    try:
        yield
    finally:
        OWNER.reset(token)


def transactional_id(app_id: str, partition: int) -> str:
    return f"{app_id}-p{partition}"


async def begin(producer: AIOKafkaProducer) -> None:
    """Begin a transaction without a turn of the event loop once the producer id is known (Transactions starts
    each producer so). aiokafka's begin_transaction awaits a shielded task even when it has nothing to wait
    for: in that turn the producers of the partitions that began before sent their AddPartitionsToTxn for the
    records they had, and a tick's watermark, sent right after its fires, took a request of its own (measured
    at 1,000 schedules: 1.8 AddPartitionsToTxn per commit with the turn, 1.0 without). A producer whose id is
    not known yet begins the documented way."""
    txn_manager = getattr(producer, "_txn_manager", None)
    if txn_manager is not None and txn_manager.has_pid():
        txn_manager.begin_transaction()
    else:
        await producer.begin_transaction()


def fenced(exc: BaseException) -> bool:
    """Whether a failure says another producer of the transactional id took over."""
    text = str(exc)
    # aiokafka's transaction manager, once fenced, is in its fatal state: what follows fails on that
    return isinstance(exc, FENCED_ERRORS) or "fenced" in text.lower() or "FATAL_ERROR" in text


@dataclass
class _Txn:
    producer: BatchedProducer
    open: bool = False
    beginning: asyncio.Lock = field(default_factory=asyncio.Lock)
    after: list[Callable[[], None]] = field(default_factory=list)
    serial: int = 0  # the open transaction's (each begin takes the next of _SERIALS)
    release: float = 0.0  # (monotonic s) the open transaction commits at or after this (hold)


_SERIALS = itertools.count(1)


class _Failed(Exception):
    """A transaction's producer failed (raised inside this module only)."""

    def __init__(self, txn: _Txn, cause: Exception) -> None:
        super().__init__(repr(cause))
        self.txn, self.cause = txn, cause


class Undelivered(Exception):
    """A record of the transaction was not acknowledged by the broker: the transaction must not commit."""


class PartitionGone(Exception):
    """The partition's transaction was given up (fenced, failed, or the partition revoked): nothing sent
    for it now can commit."""


class Transactions:
    def __init__(
        self,
        bootstrap_servers: str,
        app_id: str,
        *,
        interval_s: float = 0.0,
        before_commit: BeforeCommit | None = None,
        on_failed: OnFailed | None = None,
        missing_topic: MissingTopic | None = None,
        released: Released | None = None,
    ) -> None:
        """`interval_s`: the least time between two commits (0: as soon as there is something to commit
        and the previous commit ended). `missing_topic`: the producers' (BatchedProducer). `released`: told,
        after each held transaction's commit, how long after its release it landed."""
        self.released = released
        self._missing_topic = missing_topic
        self._bootstrap = bootstrap_servers
        self._app_id = app_id
        self.interval_s = interval_s
        self.before_commit = before_commit
        self.on_failed = on_failed
        self._txns: dict[int, _Txn] = {}
        self._starting: dict[int, asyncio.Future[None]] = {}
        self._dirty: set[int] = set()
        self._work = 0  # units of work in progress
        self._idle = asyncio.Event()
        self._idle.set()
        self._committing = False
        self._commit_done = asyncio.Event()
        self._commit_done.set()
        self._wake = asyncio.Event()
        self._stopping: set[asyncio.Future[None]] = set()
        self.commits = 0
        self.failures = 0

    # --- ownership -------------------------------------------------------------------------------

    @property
    def partitions(self) -> set[int]:
        return set(self._txns)

    def current(self, partition: int) -> object | None:
        """The partition's transaction state here (None: not owned): a new one after each assignment, so
        what was read of the partition before can be told apart from what is read after."""
        return self._txns.get(partition)

    def open_serial(self, partition: int) -> int | None:
        """A number that tells the partition's open transaction from every other one (None: none is open)."""
        txn = self._txns.get(partition)
        return txn.serial if txn is not None and txn.open else None

    def owns(self, partition: int) -> bool:
        return partition in self._txns

    async def assign(self, partitions: Iterable[int], current: Callable[[], bool] | None = None) -> None:
        """Start the producers of these partitions (those not started yet): each fences the partition's
        previous owner and aborts what it left open. Returns once all have started (or failed: logged; the
        partition is then not owned and its work fails until the next assignment).

        `current`: asked once each producer has started, before it is used; False (the assignment may be
        another worker's by now: this one stood still while the producer started) stops it unused: it
        commits nothing, and the partition is not owned."""
        waits = [self._start(p, current) for p in partitions]
        if waits:
            await asyncio.gather(*waits)

    def _start(self, partition: int, current: Callable[[], bool] | None = None) -> asyncio.Future[None]:
        if partition in self._txns:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        starting = self._starting.get(partition)
        if starting is None:
            starting = self._starting[partition] = asyncio.ensure_future(self._started(partition, current))
            starting.add_done_callback(lambda _: self._starting.pop(partition, None))
        return asyncio.shield(starting)

    async def _started(self, partition: int, current: Callable[[], bool] | None) -> None:
        tid = transactional_id(self._app_id, partition)
        while True:
            if current is not None and not current():  # (revoked since: starting it would fence its owner)
                log.info("transactional producer %s not started: its assignment was revoked", tid)
                return
            producer = BatchedProducer(
                self._bootstrap, linger_ms=0, transactional_id=tid, missing_topic=self._missing_topic
            )
            try:
                await asyncio.wait_for(producer.start(), START_TIMEOUT_S)
            except asyncio.CancelledError:  # revoked while starting
                await producer.stop(1.0)
                raise
            except Exception as exc:
                log.warning("transactional producer %s did not start (%r); retrying in 1 s", tid, exc)
                await producer.stop(1.0)
                await asyncio.sleep(1)
                continue
            if current is not None and not current():
                log.warning(
                    "transactional producer %s started after this worker stood still past its session: "
                    "stopped unused (its assignment may be another worker's now)",
                    tid,
                )
                await producer.stop(1.0)
                return
            self._txns[partition] = _Txn(producer)
            return

    def partition_count(self, topic: str) -> int | None:
        """The topic's partition count from any of the producers' metadata (None while none knows it)."""
        for txn in self._txns.values():
            count = txn.producer.partition_count(topic)
            if count is not None:
                return count
        return None

    async def revoke(
        self, partitions: Iterable[int], *, commit: bool = True, timeout_s: float = REVOKE_TIMEOUT_S
    ) -> None:
        """Commit what these partitions hold, then stop their producers (a clean handover: the next owner
        starts from what was committed, with nothing left open). From then on, work for them fails with
        PartitionGone: nothing can begin a new transaction for them while they are stopped.

        A revocation runs in a rebalance callback, which must not outlast the group's patience: when the
        work in progress does not end, or the commit does not complete, within `timeout_s` (a send stuck on
        a partition without a leader), or with `commit=False` (the caller could not finish its unit of work),
        the partitions are given up uncommitted instead. That is safe: the next owner's producer fences
        these and aborts what they held, and its work starts again from the committed state."""
        partitions = [p for p in partitions if p in self._txns or p in self._starting]
        if not partitions:
            return
        for p in partitions:
            starting = self._starting.get(p)
            if starting is not None:
                starting.cancel()
        committed = not commit
        if commit:
            try:
                async with asyncio.timeout(timeout_s):
                    async with self._exclusive():
                        todo = sorted(set(partitions) & self._dirty)
                        if todo:
                            await asyncio.gather(*(self._commit_one(p) for p in todo))
                committed = True
            except TimeoutError:
                pass
        gone = [txn for p in partitions if (txn := self._txns.pop(p, None)) is not None]
        self._dirty -= set(partitions)
        if not committed:
            log.warning(
                "partitions %s revoked before their work could commit: given up uncommitted (the next owner"
                " aborts what they held and redoes it)",
                sorted(partitions),
            )
            for txn in gone:
                self._stop_later(txn)
            return
        await asyncio.gather(*(txn.producer.stop(5.0) for txn in gone))

    def _stop_later(self, txn: _Txn) -> None:
        """Stop a producer given up, without waiting: what it held is aborted (by the broker, or by the
        next owner fencing it)."""
        stopping = asyncio.ensure_future(txn.producer.stop(5.0))
        self._stopping.add(stopping)
        stopping.add_done_callback(self._stopping.discard)

    async def stop(self) -> None:
        await self.revoke(set(self._txns) | set(self._starting))

    # --- producing ---------------------------------------------------------------------------------

    async def _open(self, partition: int) -> _Txn:
        txn = self._txns.get(partition)
        if txn is None:
            starting = self._starting.get(partition)
            if starting is None:
                raise PartitionGone(f"partition {partition} is not owned here (no transaction)")
            try:
                await asyncio.shield(starting)
            except asyncio.CancelledError:
                if not starting.cancelled():
                    raise
                raise PartitionGone(f"partition {partition} was revoked while its producer started") from None
            txn = self._txns.get(partition)
            if txn is None:
                raise PartitionGone(f"partition {partition} is not owned here (no transaction)")
        if not txn.open:
            async with txn.beginning:  # (two senders must not both begin it)
                if not txn.open:
                    try:
                        txn.producer.failure = None  # (every record of the last one was delivered)
                        await begin(txn.producer.kafka_producer)
                        txn.serial = next(_SERIALS)
                    except Exception as exc:
                        if self._txns.get(partition) is not txn:  # revoked meanwhile: its producer stopped
                            raise PartitionGone(f"partition {partition} was revoked") from exc
                        raise _Failed(txn, exc) from exc
                    txn.open = True
        self._dirty.add(partition)
        return txn

    async def send(
        self,
        partition: int,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        topic_partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future[object]:
        """A record in the open transaction of `partition` (the schedule partition whose work it is)."""
        return await self._in_transaction(
            partition,
            lambda p: p.send(topic, key, value, partition=topic_partition, headers=headers),  # type: ignore[arg-type]
        )

    async def send_batch(
        self, partition: int, topic: str, records: list[tuple[bytes, bytes | None, int]]
    ) -> list[asyncio.Future[object]]:
        return await self._in_transaction(partition, lambda p: p.send_batch(topic, records))  # type: ignore[arg-type]

    async def _in_transaction(self, partition: int, send: Callable[[BatchedProducer], Awaitable[T]]) -> T:
        """`send` on the partition's producer, in its open transaction. A send that fails gives the partition
        up (see fail) and raises PartitionGone, as does one for a partition not owned here."""
        try:
            txn = await self._open(partition)
        except _Failed as failed:
            await self.fail(partition, failed.cause, failed.txn)
            raise PartitionGone(f"partition {partition}: {failed.cause!r}") from failed.cause
        try:
            return await send(txn.producer)
        except Exception as exc:
            # (a failure of a producer already revoked, or replaced by a new assignment, gives up nothing)
            await self.fail(partition, exc, txn)
            raise PartitionGone(f"partition {partition}: {exc!r}") from exc

    def after_commit(self, partition: int, callback: Callable[[], None]) -> None:
        """Run `callback` once the partition's open transaction has committed (dropped if it fails)."""
        txn = self._txns.get(partition)
        if txn is None:
            raise PartitionGone(f"partition {partition} is not owned here (no transaction)")
        txn.after.append(callback)

    def hold(self, partition: int, until: float) -> None:
        """The partition's open transaction holds records not to be seen before `until` (time.monotonic()):
        it commits at or after then (at most HOLD_MAX_S from now); nothing when no transaction is open."""
        txn = self._txns.get(partition)
        if txn is not None and txn.open:
            txn.release = max(txn.release, min(until, time.monotonic() + HOLD_MAX_S))

    def _held(self, partition: int, now: float) -> bool:
        txn = self._txns.get(partition)
        return txn is not None and txn.release > now

    def _next_release(self) -> float | None:
        """When the first held partition with work may commit (monotonic s); None when none is held."""
        releases = [
            txn.release for p in self._dirty if (txn := self._txns.get(p)) is not None and txn.release
        ]
        return min(releases) if releases else None

    def dirty(self, partition: int) -> None:
        """The partition has work to commit (the committer commits it soon)."""
        if partition in self._txns:
            self._dirty.add(partition)
            self._wake.set()

    @contextlib.asynccontextmanager
    async def work(self) -> AsyncIterator[None]:
        """A unit of work (a tick's fires, a fetch of commands): never split by a commit."""
        while self._committing:
            await self._commit_done.wait()
        self._work += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._work -= 1
            if self._work == 0:
                self._idle.set()
            if self._dirty:
                self._wake.set()

    @property
    def commit_waiting(self) -> bool:
        """A commit waits for the units of work in progress to end: a long unit (a fetch of commands) should
        end early, so the fires committed with it (a tick's, already sent) are not held back by it."""
        return self._committing and not self._idle.is_set()

    # --- committing -----------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _exclusive(self) -> AsyncIterator[None]:
        """No unit of work runs inside (the one in progress ends first; new ones wait)."""
        while self._committing:
            await self._commit_done.wait()
        self._committing = True
        self._commit_done.clear()
        try:
            await self._idle.wait()
            yield
        finally:
            self._committing = False
            self._commit_done.set()

    async def commit(self, partitions: Iterable[int] | None = None) -> None:
        """Commit the open transactions of these partitions (None: every one with work), between two units
        of work. A partition whose commit fails is given up (on_failed)."""
        async with self._exclusive():
            now = time.monotonic()
            todo = sorted(
                p
                for p in (self._dirty if partitions is None else set(partitions) & self._dirty)
                if not self._held(p, now)  # (the committer comes back at its release)
            )
            self._dirty -= set(todo)
            if todo:
                await asyncio.gather(*(self._commit_one(p) for p in todo))

    async def _commit_one(self, partition: int) -> None:
        txn = self._txns.get(partition)
        if txn is None:
            return
        try:
            if self.before_commit is not None:
                await self.before_commit(partition)
            release = txn.release
            if txn.open:
                if (wait_s := release - time.monotonic()) > 0:  # (a revocation: never before it)
                    await asyncio.sleep(wait_s)
                async with asyncio.timeout(COMMIT_TIMEOUT_S):
                    # aiokafka commits what was delivered even when some records were not (a batch that
                    # found no leader before it expired, during a broker's loss): a fire lost, its
                    # watermark committed. Such a transaction is given up instead, redone by the next owner.
                    await txn.producer.delivered()
                    if txn.producer.failure is not None:
                        raise Undelivered(repr(txn.producer.failure)) from txn.producer.failure
                    await txn.producer.kafka_producer.commit_transaction()
                txn.open, txn.release = False, 0.0
                self.commits += 1
                if release and self.released is not None:
                    self.released(round((time.monotonic() - release) * 1000))
        except Exception as exc:
            await self.fail(partition, exc, txn)
            return
        self._dirty.discard(partition)  # (by before_commit's own records: no work runs during a commit)
        after, txn.after = txn.after, []
        for callback in after:
            try:
                callback()
            except Exception:
                log.exception("after the commit of partition %d", partition)

    async def fail(self, partition: int, exc: BaseException, txn: _Txn | None = None) -> None:
        """Give the partition up: what its open transaction held never commits (see the module doc).
        `txn`: the transaction that failed; nothing is given up when the partition no longer has it (it was
        revoked, and maybe assigned again with a new producer, meanwhile)."""
        if txn is not None and self._txns.get(partition) is not txn:
            return
        txn = self._txns.pop(partition, None)
        self._dirty.discard(partition)
        if txn is None:
            return
        self.failures += 1
        # (a send that fails because a record of the transaction was refused as fenced says so only there)
        record_failure = txn.producer.failure
        was_fenced = fenced(exc) or (record_failure is not None and fenced(record_failure))
        if was_fenced:
            log.warning("partition %d: fenced, another worker owns it now (%r)", partition, exc)
        else:
            log.warning(
                "partition %d: its transaction failed (%r); given up until reassigned", partition, exc
            )
        self._stop_later(txn)
        if self.on_failed is not None:
            await self.on_failed(partition, exc, was_fenced)

    async def run(self) -> None:
        """The committer: commits whatever has work, as soon as the previous commit ended (at most every
        interval_s)."""
        while True:
            release = self._next_release()
            if release is None:
                await self._wake.wait()
            else:  # (a held partition: back at its release, or at new work)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), max(0.0, release - time.monotonic()))
            self._wake.clear()
            now = time.monotonic()
            if not any(not self._held(p, now) for p in self._dirty):
                continue
            try:
                await self.commit()
            except Exception:
                log.exception("committing transactions failed")
            if self.interval_s:
                await asyncio.sleep(self.interval_s)
