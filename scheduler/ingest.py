"""The commands topic, consumed in bulk on the worker's active partitions.

Faust hands an agent one message at a time, at a cost of its own (measured here: an agent that only counts
reaches ~6.5k events/s, one that writes a table ~2k/s). Commands come in bursts of thousands, so this
consumer takes them a fetch at a time: each command goes through the worker's handler; its schedule write
is held and put in RocksDB with the others as one write batch per partition (every YIELD_EVERY commands,
before the event loop turns, so other tasks read what was applied); once the fetch is applied its writes
go to the changelog as whole batches, and once the broker has them the partition's next offset is stored,
in the fire-progress table (changelogged like the schedules). The next fetch is applied meanwhile. A crash
re-applies at most the fetches whose offsets were not stored yet (at-least-once, as Faust's commits were;
a replayed INSERT is a no-op, a replayed RUN fires again).

It follows Faust's assignment: the partitions whose schedules this worker holds (after recovery), handed
back before a rebalance moves them (the fetch being applied is written and its offsets sent first).
A partition with no stored offset starts where the app's consumer group left it (a worker upgraded from
the per-message agent), else at the beginning.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from scheduler.codec import decode_json, encode_json

log = logging.getLogger(__name__)

MAX_RECORDS = 4000  # per fetch: one changelog flush and one stored offset per partition for as many
YIELD_EVERY = 100  # commands handled between two turns of the event loop (~10 ms)
FREEZE_AFTER = 5000  # commands applied since the last freeze_long_lived that call it while a flow goes on


def freeze_long_lived() -> None:
    """Put what lives now in the collector's permanent generation, never scanned again: the compiled
    schedules and heap entries are hundreds of thousands of objects, and every full collection walked them
    (110-120 ms at 100,000 schedules, every ~20 s, a burst of fires late behind it). Objects still free as
    usual when unreferenced; the young generations are collected first, so only a cycle that was already
    garbage in the oldest generation would stay for good."""
    gc.collect(1)
    gc.freeze()


def offset_key(partition: int) -> bytes:
    """The fire-progress table's key for a partition's next commands offset."""
    return f"{partition}:commands".encode()


class _Event:
    """What the handler reads of a Faust event: its message (topic, partition, offset, key, value)."""

    __slots__ = ("message",)

    def __init__(self, message: Any) -> None:
        self.message = message


class CommandIngest:
    def __init__(self, worker: Any, max_records: int = MAX_RECORDS) -> None:
        self.worker = worker
        self.topic = worker.settings.commands_topic
        self.max_records = max_records
        self._consumer: AIOKafkaConsumer | None = None
        self._active: set[int] = set()
        self._wanted: set[int] | None = None  # an assignment the run loop has not taken yet
        self._generation = 0  # bumped by every assignment change: a fetch from before one is dropped
        self._next: dict[int, int] = {}  # partition -> the offset of the next command to apply
        self._lock = asyncio.Lock()  # a fetch is applied whole, or the assignment changes: not both
        self._wake = asyncio.Event()
        self._stopped = False
        self._flushing: asyncio.Future[None] | None = None  # the last fetch's changelog writes, then offsets
        self.unfrozen = 0  # commands applied since the last freeze_long_lived

    async def _started(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            settings = self.worker.settings
            await self.worker.topics.ensure(self.topic)
            if settings.broker_profile == "tansu":
                from scheduler.config import TANSU_FETCH_MAX_WAIT_MS

                wait = {"fetch_max_wait_ms": TANSU_FETCH_MAX_WAIT_MS}
            else:
                wait = {}
            consumer = AIOKafkaConsumer(
                bootstrap_servers=settings.bootstrap_servers,
                group_id=settings.app_id,  # never joined: only read, for where the group's agent left off
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                **wait,
            )
            await consumer.start()
            self._consumer = consumer
        return self._consumer

    def stored_offset(self, partition: int) -> int | None:
        raw = self.worker.progress_db(partition).get(offset_key(partition))
        return None if raw is None else int(decode_json(raw)["offset"])

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
        tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        if not tps:
            consumer.unsubscribe()
            return
        consumer.assign(tps)
        for tp in tps:
            offset = self.stored_offset(tp.partition)
            if offset is None:
                offset = await consumer.committed(tp)
            if offset is None:
                await consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, offset)
            self._next[tp.partition] = offset or 0
        self._active = set(partitions)

    async def revoke(self, partitions: set[int]) -> None:
        """Stop consuming these partitions; returns once the fetch being applied is written and its
        offsets are sent."""
        async with self._lock:
            await self._flushed()
            self._generation += 1
            if self._wanted is not None:
                self._wanted -= partitions
            self._active -= partitions
            for p in partitions:
                self._next.pop(p, None)
            if self._consumer is not None:
                remaining = [TopicPartition(self.topic, p) for p in sorted(self._active)]
                if remaining:
                    self._consumer.assign(remaining)
                    for tp in remaining:
                        self._consumer.seek(tp, self._next[tp.partition])
                else:
                    self._consumer.unsubscribe()

    async def run(self) -> None:
        while not self._stopped:
            if self._wanted is not None:
                try:
                    async with self._lock:
                        if self._wanted is not None:
                            await self._take_assignment(self._wanted)
                            self._wanted = None
                except Exception:  # the broker cannot be reached (yet): the partitions wait, the worker lives
                    log.warning("could not take the commands partitions; retrying in 1 s", exc_info=True)
                    await asyncio.sleep(1)
                continue
            if not self._active or self._consumer is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            generation = self._generation
            try:
                fetched = await self._consumer.getmany(timeout_ms=200, max_records=self.max_records)
            except Exception:  # the broker went away, an assignment changed under the fetch: retry
                log.warning("commands fetch failed; retrying", exc_info=True)
                await asyncio.sleep(0.5)
                continue
            if fetched:
                async with self._lock:
                    if generation == self._generation:  # else fetched before a revoke or a new seek
                        await self._apply(fetched)
            self.settle(quiet=not fetched)

    def settle(self, quiet: bool) -> bool:
        """Freeze what the applied commands built (see freeze_long_lived) once the topic is quiet, or every
        FREEZE_AFTER commands while a flow goes on. True if it froze."""
        if self.unfrozen == 0 or (not quiet and self.unfrozen < FREEZE_AFTER):
            return False
        self.unfrozen = 0
        freeze_long_lived()
        return True

    async def _apply(self, fetched: dict[TopicPartition, list[Any]]) -> None:
        done: list[int] = []
        handled = 0
        for tp, records in fetched.items():
            p = tp.partition
            if p not in self._active:  # revoked while fetched
                continue
            for record in records:
                await self.handle(record)
                self._next[p] = record.offset + 1
                handled += 1
                self.unfrozen += 1
                if handled % YIELD_EVERY == 0:  # the timers, the producer and the fetcher run meanwhile
                    self.worker.write_local()
                    await asyncio.sleep(0)
            done.append(p)
        self.worker.write_local()
        if not done:
            return
        # The next fetch is applied while this one's writes go out; one flush at a time, so each stored
        # offset follows the writes before it.
        writes, offsets = self.worker.take_writes(), {p: self._next[p] for p in done}
        await self._flushed()
        self._flushing = asyncio.ensure_future(self._flush(writes, offsets))

    async def _flush(self, writes: list[tuple[bytes, bytes | None, int]], offsets: dict[int, int]) -> None:
        while True:  # the offsets must not pass writes the changelog lacks: retry (the broker is away)
            try:
                await self.worker.write_changelog(writes)
                break
            except Exception:
                log.warning("schedule changelog write failed; retrying in 1 s", exc_info=True)
                await asyncio.sleep(1)
        for p, offset in offsets.items():
            self.worker.save_progress_record(p, offset_key(p), encode_json({"offset": offset}))

    async def _flushed(self) -> None:
        flushing, self._flushing = self._flushing, None
        if flushing is not None:
            await flushing

    async def handle(self, record: Any) -> None:
        event = _Event(record)
        try:
            await self.worker.handle_command(event)
        except Exception as exc:  # never die on input
            log.exception("unexpected error handling a command")
            self.worker.counts.command("unknown", "dead_lettered")
            await self.worker.dead_letter(event, f"internal error: {type(exc).__name__}: {exc}")

    async def stop(self) -> None:
        self._stopped = True
        self._wanted = None
        self._wake.set()
        async with self._lock:
            if self._flushing is not None:  # with the broker away this would retry for ever
                await asyncio.wait([self._flushing], timeout=10)
                self._flushing.cancel()
            consumer, self._consumer = self._consumer, None
            if consumer is not None:
                await consumer.stop()
