"""The commands topic (and, with transactions, the hops between the agents: hops.py), consumed in bulk on
the worker's active partitions.

Faust hands an agent one message at a time, at a cost of its own (measured here: an agent that only counts
reaches ~6.5k events/s, one that writes a table ~2k/s). Commands come in bursts of thousands, so this
consumer takes them a fetch at a time: each command goes through the worker's handler; its schedule write
is held and put in RocksDB with the others as one write batch per partition (every YIELD_EVERY commands,
before the event loop turns, so other tasks read what was applied); once the fetch is applied its writes
go to the changelog as whole batches, and once the broker has them the partition's next offset is stored,
in the fire-progress table (changelogged like the schedules). Each partition flushes on its own, in order:
a changelog partition whose leader is away retries (and its commands partition pauses after one more
fetch) while the other partitions go on (flushes.py). The next fetch is applied meanwhile. A crash
re-applies at most the fetches whose offsets were not stored yet (at-least-once, as Faust's commits were;
a replayed INSERT is a no-op, a replayed RUN fires again).

It follows Faust's assignment: the partitions whose schedules this worker holds (after recovery), handed
back before a rebalance moves them (the fetch being applied is written and its offsets sent first).
A partition with no stored offset starts where the app's consumer group left it (a worker upgraded from
the per-message agent), else at the beginning. The consumer itself has no group: aiokafka's group
coordination, run for a consumer with a group id even when its partitions are assigned by hand, ends for
good on an AssertionError when the assignment changes while it looks its coordinator up (aio-libs/aiokafka
#796; on a 3-node cluster at the first rebalance), and every fetch after it failed. The group's offsets
are looked up once per assignment, with an admin request.

The watchdog (liveness.py) looks at it as the loop "commands": records behind the end of its partitions
and none applied for a while, it replaces the consumer (`heal`), as the run loop does at once for a
consumer whose fetcher or coordination task has ended.

With transactions a fetch's records of one partition, whatever they made (schedule writes, staged table
writes, what they sent, dead letters) and the position after them commit together in the partition's
transaction (Worker.stage_commit); the hop topics' records are handled by their agents' handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from scheduler.kafka.broker import metadata_answers
from scheduler.kafka.consumers import consumer_broken, consumer_options, getmany_or_wake, started
from scheduler.kafka.transactions import PartitionGone, owned_by
from scheduler.wire.codec import decode_json
from scheduler.worker.collector import freeze_long_lived
from scheduler.worker.failpoints import failpoint, make_deaf
from scheduler.worker.flushes import ChangelogFlushes, offset_key
from scheduler.worker.hops import Handler, safely
from scheduler.worker.liveness import Work, fetched_to
from scheduler.worker.ports import Firing

log = logging.getLogger(__name__)

#: how long a revocation waits for the revoked partitions' flushes before it drops them (their offsets
#: then stay unstored: the next owner applies those commands again)
REVOKE_WAIT_S = 10.0
#: records a fetch at most: one changelog flush and one stored offset per partition for as many, and one
#: commit (a unit of work is cut sooner for fires: _fires_wait). 4,000 until 2026-12-06: a bulk load's
#: worker then waited for a commit ~a fifth of the time; 300,000 delayed records went live in 8.5-10.6 s
#: instead of 12.2-12.5 (`python -m tests.bench.delayed --n 300000 --window 10 --only ours`)
MAX_RECORDS = 16000
TAKE_TIMEOUT_S = 30.0  # taking an assignment (a consumer started, the group's offsets asked) fails past it
#: a fetch (200 ms of waiting asked) ends by this much: aiokafka's getmany on a consumer left without a
#: subscription (every partition revoked while it was out) waits for the next assignment, which only this
#: loop makes
FETCH_BOUND_S = 5.0
FETCH_WAIT_MS = 200  # a fetch's wait for records, without transactions (held writes go out at each turn)
#: with transactions: a record ends it at once, and so does a wake (an assignment to take, a stop)
IDLE_FETCH_WAIT_MS = 1000
YIELD_EVERY = 100  # commands handled between two turns of the event loop (~10 ms)
#: the longest a fetch's commands wait for the punctuator between two YIELD_EVERY steps (fires go first,
#: but commands keep going when the punctuator never rests)
YIELD_TO_FIRES_S = 0.1
FREEZE_AFTER = 5000  # commands applied since the last freeze_long_lived that call it while a flow goes on


class _Event:
    """What the handler reads of a Faust event: its message (topic, partition, offset, key, value)."""

    __slots__ = ("message",)

    def __init__(self, message: Any) -> None:
        self.message = message


class CommandIngest:
    def __init__(
        self,
        worker: Any,
        max_records: int = MAX_RECORDS,
        hops: Mapping[str, Handler] | None = None,
        firing: Firing | None = None,
    ) -> None:
        """`hops`: with transactions, the hop topics this consumer reads too, each with its handler.
        `firing`: the punctuator, which the commands give way to (_yield_to_fires)."""
        self.worker = worker
        self.firing = firing
        self.topic = worker.settings.commands_topic
        self.max_records = max_records
        self._handlers: dict[str, Handler] = {self.topic: self.handle, **(hops or {})}
        self._consumer: AIOKafkaConsumer | None = None
        self._active: set[int] = set()
        self._wanted: set[int] | None = None  # an assignment the run loop has not taken yet
        self._generation = 0  # bumped by every assignment change: a fetch from before one is dropped
        self._next: dict[TopicPartition, int] = {}  # the offset of the next record to apply
        self._lock = asyncio.Lock()  # a fetch is applied whole, or the assignment changes: not both
        self._wake = asyncio.Event()
        self._stopped = False
        # without transactions: each fetch's changelog writes and stored offsets, after it
        self.flushes = ChangelogFlushes(worker, self.topic, lambda: self._consumer, self._wake)
        self.unfrozen = 0  # commands applied since the last freeze_long_lived
        self.progressed = 0  # fetches applied and assignments taken: what the watchdog sees move
        self.replaced = 0  # consumers replaced (broken, or stalled)
        # the offset after the last command applied and readable, per partition (read-your-writes)
        self._applied: dict[int, int] = {}
        self._applied_changed = asyncio.Event()
        self._task: asyncio.Task[Any] | None = None  # the run loop's

    name = "commands"  # (liveness.Watched)

    async def _started(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            settings = self.worker.settings
            await self.worker.topics.ensure(*self._handlers)
            consumer = AIOKafkaConsumer(
                bootstrap_servers=settings.bootstrap_servers,
                group_id=None,  # (see the module's doc: the group's offsets are looked up apart)
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                **consumer_options(settings.broker_profile),
            )
            await started(consumer)
            deaf = failpoint("commands-deaf")
            if deaf == "always" or (deaf == "once" and self.replaced == 0):
                make_deaf(consumer)
            self._consumer = consumer
        return self._consumer

    def stored_offset(self, partition: int, topic: str | None = None) -> int | None:
        """The partition's next offset of the commands topic (None) or of a hop topic, as committed."""
        key = offset_key(partition, None if topic in (None, self.topic) else topic)
        raw = self.worker.progress_db(partition).get(key)
        return None if raw is None else int(decode_json(raw)["offset"])

    def _tps(self, partitions: set[int]) -> list[TopicPartition]:
        return [TopicPartition(t, p) for p in sorted(partitions) for t in self._handlers]

    async def assign(self, partitions: set[int]) -> None:
        """Consume these partitions (the worker's active ones) from where their last fetch ended. The run
        loop takes them over, and retries while the broker cannot be reached."""
        async with self._lock:
            self._wanted = set(partitions)
            self._active = set()
            self._generation += 1
        self._wake.set()

    async def _take_assignment(self, partitions: set[int]) -> None:
        consumer = await self._started()
        tps = self._tps(partitions)
        if not tps:
            consumer.unsubscribe()
            return
        consumer.assign(tps)
        unstored = [tp for tp in tps if self.stored_offset(tp.partition, tp.topic) is None]
        left = await self._group_offsets(unstored) if unstored else {}
        for tp in tps:
            offset = self.stored_offset(tp.partition, tp.topic)
            if offset is None:
                offset = left.get(tp)  # where the app's consumer group left it, else its beginning
            if offset is None:  # (the consumer resets it to the beginning: auto_offset_reset)
                self._next.pop(tp, None)
            else:
                consumer.seek(tp, offset)
                self._next[tp] = offset
        self._active = set(partitions)
        # what the restored tables hold: up to the stored offset (or the group's), else nothing
        self._applied = {p: self._next.get(TopicPartition(self.topic, p), 0) for p in partitions}
        self.progressed += 1

    async def _group_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Where the app's consumer group left these partitions (its per-message agent, before an
        upgrade), in one request."""
        admin = AIOKafkaAdminClient(bootstrap_servers=self.worker.settings.bootstrap_servers)
        await admin.start()
        try:
            found = await admin.list_consumer_group_offsets(self.worker.settings.app_id, partitions=tps)
        finally:
            await admin.close()
        return {tp: meta.offset for tp, meta in found.items() if meta.offset >= 0}

    async def revoke(self, partitions: set[int], timeout_s: float = REVOKE_WAIT_S) -> bool:
        """Stop consuming these partitions; returns once the fetch being applied is written and its
        offsets are sent. False if that fetch did not end within timeout_s (its sends stuck on a partition
        without a leader): the partitions are dropped as they are (see drop), and with transactions the
        caller gives their transactions up uncommitted: a fetch is never committed half applied."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._lock.acquire()
        except TimeoutError:
            log.warning("commands partitions %s revoked in a stuck fetch: dropped", sorted(partitions))
            for p in partitions:
                self.drop(p)
            if self._wanted is not None:
                self._wanted -= partitions
            return False
        try:
            await self._revoke(partitions)
        finally:
            self._lock.release()
        return True

    async def _revoke(self, partitions: set[int]) -> None:
        await self.flushes.flushed(partitions, REVOKE_WAIT_S)
        self._generation += 1
        if self._wanted is not None:
            self._wanted -= partitions
        self._active -= partitions
        self.flushes.paused -= partitions
        for p in partitions:
            self._applied.pop(p, None)
        for tp in self._tps(partitions):
            self._next.pop(tp, None)
        if self._consumer is not None:
            remaining = self._tps(self._active)
            if remaining:
                self._consumer.assign(remaining)
                for tp in remaining:
                    if tp in self._next:  # (else it starts at the beginning again, as at the assignment)
                        self._consumer.seek(tp, self._next[tp])
            else:
                self._consumer.unsubscribe()

    async def run(self) -> None:
        """The loop: takes assignments, fetches and applies, until stop(). A turn that fails (a Kafka
        client's own task cancelled under it included) is logged and the next one goes on: the loop never
        ends quietly (the watchdog would see a stall it cannot heal)."""
        self._task = asyncio.current_task()
        while not self._stopped:
            try:
                await self._turn()
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if self._stopped or (task is not None and task.cancelling()):
                    raise  # (the loop itself is cancelled)
                log.warning("a commands turn was cancelled under it: going on", exc_info=True)
                await asyncio.sleep(0.5)
            except Exception:
                log.exception("a commands turn failed: going on")
                await asyncio.sleep(0.5)

    async def _turn(self) -> None:
        if self._wanted is not None:
            try:
                async with self._lock:
                    if self._wanted is not None:
                        async with asyncio.timeout(TAKE_TIMEOUT_S):  # (an admin request may hang)
                            await self._take_assignment(self._wanted)
                        self._wanted = None
            except Exception:  # the broker cannot be reached (yet): the partitions wait, the worker lives
                log.warning("could not take the commands partitions; retrying in 1 s", exc_info=True)
                await asyncio.sleep(1)
            return
        if not self._active or self._consumer is None:
            self._wake.clear()
            await self._wake.wait()
            return
        generation = self._generation
        try:
            async with asyncio.timeout(FETCH_BOUND_S):
                fetched = await self._fetch(self._consumer)
        except TimeoutError:  # (see FETCH_BOUND_S: an assignment may wait for this loop)
            log.info("a commands fetch did not end within %s s: the loop goes on", FETCH_BOUND_S)
            fetched = {}
        except Exception:  # the broker went away, an assignment changed under the fetch: retry
            log.warning("commands fetch failed; retrying", exc_info=True)
            fetched = {}
            await asyncio.sleep(0.5)
        if fetched:
            async with self._lock:
                if generation == self._generation:
                    await self._applied_safely(fetched)
                    self.progressed += 1
                else:  # fetched before a revoke or a new seek: not applied, so fetched again
                    self._refetch(fetched)
        elif self._consumer is not None and consumer_broken(self._consumer):
            await self._replace_consumer("one of its background tasks ended")
        if not fetched and self.worker.txns is None and self.worker.writes_held():
            async with self._lock:  # (a trigger agent's count of a limited schedule's fires: out now)
                await self._applied_safely({})
        self.settle(quiet=not fetched)

    async def _fetch(self, consumer: AIOKafkaConsumer) -> dict[TopicPartition, list[Any]]:
        """A fetch's records: see IDLE_FETCH_WAIT_MS."""
        if self.worker.txns is None:
            return await consumer.getmany(timeout_ms=FETCH_WAIT_MS, max_records=self.max_records)
        self._wake.clear()  # (what set it before is seen: this turn checked the assignment wanted)
        return await getmany_or_wake(consumer, self._wake, IDLE_FETCH_WAIT_MS, self.max_records)

    def _refetch(self, fetched: dict[TopicPartition, list[Any]]) -> None:
        """The consumer's position passed the records of a fetch that is not applied (it was in flight
        while the assignment changed): the partitions still consumed go back to the first record not
        applied. Without it a partition kept through a revocation skipped the commands that arrived
        during the fetch: acknowledged, never applied."""
        consumer = self._consumer
        if consumer is None:
            return
        assigned = consumer.assignment()
        for tp in fetched:
            if tp.partition in self._active and tp in assigned:
                consumer.seek(tp, self._next.get(tp, 0))  # (none applied yet: from its beginning)

    # --- what the watchdog and read-your-writes see (liveness.Watched) ---------------------------

    async def work(self) -> Work:
        """Records behind the end of the consumed partitions (their last stable offset: what the consumer
        can read), counting from where the consumer is; an assignment not taken yet is work too."""
        consumer = self._consumer
        if self._wanted is not None:
            return Work(1, self.progressed, "commands assignment not taken")
        if consumer is None or not self._active:
            return Work(0, self.progressed, "commands behind the end of the topic")
        tps = sorted(consumer.assignment())
        ends = await consumer.end_offsets(tps) if tps else {}
        behind = 0
        for tp, end in ends.items():
            at = fetched_to(consumer, tp)
            behind += max(0, end - (at if at is not None else self._next.get(tp, 0)))
        return Work(behind, self.progressed, "records behind the end of the commands partitions")

    def where(self) -> str:
        """Where the run loop waits now: its chain of awaits, outermost first (a stalled loop's log)."""
        task = self._task
        if task is None or task.done():
            return f"the run loop is not running ({task!r})"
        lines: list[str] = []
        awaited: Any = task.get_coro()
        while awaited is not None and len(lines) < 40:
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
            if frame is not None:
                lines.append(f"  {frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}")
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
        return "\n".join(lines) or f"  {awaited!r}"

    async def heal(self) -> bool:
        """Replace the consumer (stalled with records waiting: whatever the cause, a new one reads on), and
        start the run loop again if it ended (it never should: see run)."""
        task = self._task
        if task is not None and task.done() and not self._stopped:
            log.error("the commands loop had ended (%r): started again", task)
            self._task = asyncio.ensure_future(self.run())
            return True
        if self._consumer is None or self._stopped:
            return False
        await self._replace_consumer("it made no progress with records waiting")
        return True

    async def cluster_answers(self) -> bool:
        """Whether the cluster answers a metadata request (liveness: a worker leaves only then)."""
        consumer = self._consumer
        if consumer is None:  # (not started: before the first take-up) a client of its own asks
            return await metadata_answers(self.worker.settings.bootstrap_servers)
        try:
            async with asyncio.timeout(5):
                await consumer.topics()
        except Exception:
            return False
        return True

    def applied_offset(self, partition: int) -> int | None:
        """The offset after the last command of the partition applied here (its effect readable), None if
        this worker does not consume the partition."""
        if partition not in self._active:
            return None
        return self._applied.get(partition, 0)

    async def wait_applied(self, partition: int, offset: int, timeout_s: float) -> bool:
        """Until the command at `offset` of the partition is applied here (True), or timeout_s passed
        or the partition is not consumed here (False)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            at = self.applied_offset(partition)
            if at is None:
                return False
            if at > offset:
                return True
            left = deadline - loop.time()
            if left <= 0:
                return False
            self._applied_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._applied_changed.wait(), min(left, 0.5))

    def _note_applied(self, fetched: dict[TopicPartition, list[Any]]) -> None:
        """Without transactions: what a fetch applied is readable once written to the local store."""
        for tp in fetched:
            if tp.topic == self.topic and tp.partition in self._active and tp in self._next:
                self._applied[tp.partition] = self._next[tp]
        self._applied_changed.set()

    async def _replace_consumer(self, why: str) -> None:
        """A new consumer for one that can no longer work, at the same positions: the partitions it held,
        each from the offset after the last record applied (else from its stored offset)."""
        async with self._lock:
            if self._consumer is None or self._stopped:  # (stop() closes it)
                return
            old, self._consumer = self._consumer, None
            log.warning("replacing the commands consumer: %s", why)
            self.replaced += 1
            self._generation += 1  # (a fetch of the old one is never applied)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(old.stop(), 10)
            try:
                consumer = await self._started()
            except Exception:  # the broker cannot be reached: the run loop takes the partitions again
                log.warning("could not start a new commands consumer; retrying", exc_info=True)
                if self._wanted is None:
                    self._wanted = set(self._active)
                self._wake.set()
                return
            tps = self._tps(self._active)
            if tps:
                consumer.assign(tps)
            for tp in tps:
                offset = self._next.get(tp, self.stored_offset(tp.partition, tp.topic))
                if offset is not None:
                    consumer.seek(tp, offset)
            for p in self.flushes.paused:
                consumer.pause(TopicPartition(self.topic, p))
        self._wake.set()  # (a run loop that found no consumer meanwhile waits for one)

    async def _applied_safely(self, fetched: dict[TopicPartition, list[Any]]) -> None:
        """Apply a fetch; the consumer never dies of it. With transactions, the partitions a failure left
        half applied are given up (nothing of them commits; their next owner applies them again)."""
        try:
            await self._apply(fetched)
        except Exception as exc:
            log.exception("applying a fetch failed")
            txns = self.worker.txns
            if txns is not None:
                for p in sorted({tp.partition for tp in fetched} & self._active):
                    await txns.fail(p, exc)

    def settle(self, quiet: bool) -> bool:
        """Freeze what the applied commands built (see freeze_long_lived) once the topic is quiet, or every
        FREEZE_AFTER commands while a flow goes on. True if it froze."""
        if self.unfrozen == 0 or (not quiet and self.unfrozen < FREEZE_AFTER):
            return False
        self.unfrozen = 0
        freeze_long_lived()
        self.worker.counts.commands_frozen = self.worker.counts.commands_applied
        return True

    def drop(self, partition: int) -> None:
        """Forget a partition at once, without writing what was applied of it (its transaction was given
        up: see Worker._partition_failed); it is fetched again from its stored offset once reassigned."""
        if partition not in self._active:
            return
        # Only this partition stops: the others keep their positions (a fetch in hand may be half applied;
        # its records of this partition are skipped, _apply_in_transactions checks _active per record).
        self._active.discard(partition)
        self._applied.pop(partition, None)
        for tp in self._tps({partition}):
            self._next.pop(tp, None)
            if self._consumer is not None:
                self._consumer.pause(tp)  # (the next assign() resets it)

    async def _apply(self, fetched: dict[TopicPartition, list[Any]]) -> None:
        if self.worker.txns is not None:
            await self._apply_in_transactions(fetched)
            return
        if not await self.worker.may_work():
            return  # frozen past the session, and a rebalance followed: the fetch is dropped (freeze.py)
        done: list[int] = []
        handled = 0
        for tp, records in fetched.items():
            p = tp.partition
            if p not in self._active:  # revoked while fetched
                continue
            for record in records:
                await self.handle(record)
                self._next[tp] = record.offset + 1
                handled += 1
                self.unfrozen += 1
                if handled % YIELD_EVERY == 0:  # the timers, the producer and the fetcher run meanwhile
                    self.worker.write_local()
                    await asyncio.sleep(0)
                    await self._yield_to_fires()
            done.append(p)
        self.worker.write_local()
        self._note_applied(fetched)  # (readable now: a read answers from the local store)
        # The next fetch is applied while this one's writes go out (flushes.py).
        offsets = {p: self._next[TopicPartition(self.topic, p)] for p in done}
        self.flushes.start(self.worker.take_writes(), offsets, self._active)

    async def _apply_in_transactions(self, fetched: dict[TopicPartition, list[Any]]) -> None:
        """With transactions: a fetch of a partition's topic, what its records made (schedule writes, staged
        table writes, what they sent, dead letters) and its next offset commit together in the partition's
        transaction (Worker.stage_commit). The punctuator at work, or a commit that would carry fires already
        sent, cuts the fetch's unit of work (_fires_wait): what was applied so far is staged, the commands
        wait for the punctuator, the commit goes through, the rest of the fetch follows in a unit of its
        own; fires stay on time during a bulk load instead of waiting for a whole fetch (up to MAX_RECORDS)."""
        left = [[tp, records, 0] for tp, records in fetched.items() if records]  # (where each goes on)
        while left:
            async with self.worker.txns.work():
                await self._apply_some(left)
            if left:
                await self._yield_to_fires()

    async def _apply_some(self, left: list[list[Any]]) -> None:
        """Apply the records left, partition after partition, until done or _fires_wait (see above)."""
        handled = 0
        while left:
            tp, records, start = left[0]
            p = tp.partition
            handle = self._handlers[tp.topic]
            commands = tp.topic == self.topic
            applied_up_to: int | None = None  # the offset after the last record applied
            i = start
            with owned_by(p):
                while i < len(records) and p in self._active:  # (not: revoked, or given up, meanwhile)
                    record = records[i]
                    try:
                        await handle(record if commands else _Event(record))
                    except PartitionGone:  # (its transaction was given up: the worker dropped it)
                        self.drop(p)
                        break
                    applied_up_to = self._next[tp] = record.offset + 1
                    i += 1
                    handled += 1
                    self.unfrozen += commands
                    if handled % YIELD_EVERY == 0:  # the timers and the fetcher run meanwhile
                        await asyncio.sleep(0)
                        if self._fires_wait():
                            break
                if p in self._active and applied_up_to is not None:
                    await self.worker.stage_commit(p, applied_up_to, None if commands else tp.topic)
                    if commands:  # readable once committed (a read answers from what committed)
                        with contextlib.suppress(PartitionGone):
                            self.worker.txns.after_commit(
                                p, functools.partial(self._committed, p, applied_up_to)
                            )
            if i < len(records) and p in self._active:
                left[0][2] = i
                return  # cut: the partition's records go on from here, in the next unit
            left.pop(0)

    async def _yield_to_fires(self) -> None:
        """While the punctuator stages or fires, wait for it (up to YIELD_TO_FIRES_S: commands are never
        starved by a punctuator that is always busy): firing keeps its time while a bulk load is applied."""
        if self.firing is not None and not self.firing.idle.is_set():
            self.worker.counts.commands_yielded += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.firing.idle.wait(), YIELD_TO_FIRES_S)

    def _fires_wait(self) -> bool:
        """The unit of work in progress should end: the punctuator is busy, or a commit waits for the unit
        and fires sent are in it (a commit of index writes alone, the punctuator staging ahead, can wait)."""
        firing = self.firing
        if firing is None:
            return False
        if not firing.idle.is_set():
            return True
        return self.worker.txns.commit_waiting and firing.sent_uncommitted()

    def _committed(self, partition: int, offset: int) -> None:
        if partition in self._active and offset > self._applied.get(partition, -1):
            self._applied[partition] = offset
            self._applied_changed.set()

    async def handle(self, record: Any) -> None:
        await safely(self.worker, _Event(record), "a command", self._handle_command)

    async def _handle_command(self, event: _Event) -> None:
        try:
            await self.worker.handle_command(event)
        except PartitionGone:
            raise
        except Exception:
            self.worker.counts.command("unknown", "dead_lettered")
            raise

    async def stop(self) -> None:
        self._stopped = True
        self._wanted = None
        self._wake.set()
        async with self._lock:
            await self.flushes.flushed(None, 10)  # with the broker away this would retry for ever
            consumer, self._consumer = self._consumer, None
            if consumer is not None:
                await consumer.stop()
