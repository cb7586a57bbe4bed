"""Without transactions, what a fetch of commands wrote goes out after it (worker.ingest): the schedule
writes to the changelog as whole batches, then the partition's next commands offset, stored in the
fire-progress table. Per partition one flush follows the other, so a stored offset never passes writes the
changelog lacks; partitions do not wait for each other. A changelog partition whose leader is away retries
(every second), and its commands partition pauses once a whole fetch more is behind it: it is fetched again
when its flushes catch up, while the other partitions go on."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from scheduler.wire.codec import encode_json

log = logging.getLogger(__name__)


def offset_key(partition: int, topic: str | None = None) -> bytes:
    """The fire-progress table's key for a partition's next commands offset (topic None), or its next
    offset of a hop topic."""
    return (f"{partition}:commands" if topic is None else f"{partition}:topic:{topic}").encode()


def offset_record(partition: int, offset: int, topic: str | None = None) -> tuple[bytes, bytes]:
    """The fire-progress record that stores a partition's next offset of the commands (or a hop) topic."""
    return offset_key(partition, topic), encode_json({"offset": offset})


class ChangelogFlushes:
    def __init__(
        self,
        worker: Any,
        topic: str,
        consumer: Callable[[], AIOKafkaConsumer | None],
        wake: asyncio.Event,
    ) -> None:
        """`topic`: the commands topic; `consumer`: the ingest's consumer now (a partition is paused and
        resumed on it); `wake`: set when a partition resumes (the ingest's loop may wait for one)."""
        self.worker = worker
        self.topic = topic
        self._consumer = consumer
        self._wake = wake
        # partition -> its last flush (changelog writes, then the stored offset); each waits for the one before
        self._flushing: dict[int, asyncio.Future[None]] = {}
        self.paused: set[int] = set()  # partitions not fetched while two flushes of theirs are pending

    def start(
        self, writes: list[tuple[bytes, bytes | None, int]], offsets: dict[int, int], active: set[int]
    ) -> None:
        """A fetch is applied: its writes (changelog records, each with its partition) and the partitions'
        next offsets go out, each partition's after its previous flush; the next fetch is applied meanwhile."""
        by_partition: dict[int, list[tuple[bytes, bytes | None, int]]] = {}
        for write in writes:
            by_partition.setdefault(write[2], []).append(write)
        for p in set(by_partition) | set(offsets):
            previous = self._flushing.get(p)
            flush = asyncio.ensure_future(self._flush(p, by_partition.get(p, []), offsets.get(p), previous))
            self._flushing[p] = flush
            flush.add_done_callback(functools.partial(self._done, p))
            if previous is not None and not previous.done() and p in active:
                self._pause(p)  # its changelog is behind by a whole fetch: fetch no more until it catches up

    async def _flush(
        self,
        partition: int,
        writes: list[tuple[bytes, bytes | None, int]],
        offset: int | None,
        previous: asyncio.Future[None] | None,
    ) -> None:
        if previous is not None:
            await previous  # (a revocation that drops this flush cancels the ones before it too)
        while writes:  # the offset must not pass writes the changelog lacks: retry (its leader is away)
            try:
                await self.worker.write_changelog(writes)
                break
            except Exception as exc:
                log.warning(
                    "schedule changelog write of partition %d failed (%r); retrying in 1 s", partition, exc
                )
                await asyncio.sleep(1)
        if offset is not None:
            self.worker.save_progress_record(partition, *offset_record(partition, offset))

    def _done(self, partition: int, flush: asyncio.Future[None]) -> None:
        if not flush.cancelled() and flush.exception() is not None:  # (retrieved: never unlogged)
            log.error(
                "schedule changelog flush of partition %d failed", partition, exc_info=flush.exception()
            )
        if self._flushing.get(partition) is flush:
            del self._flushing[partition]
            self._resume(partition)

    def _pause(self, partition: int) -> None:
        consumer = self._consumer()
        if partition not in self.paused and consumer is not None:
            self.paused.add(partition)
            consumer.pause(TopicPartition(self.topic, partition))

    def _resume(self, partition: int) -> None:
        if partition in self.paused:
            self.paused.discard(partition)
            tp = TopicPartition(self.topic, partition)
            consumer = self._consumer()
            if consumer is not None and tp in consumer.assignment():
                consumer.resume(tp)
            self._wake.set()

    async def flushed(self, partitions: set[int] | None = None, timeout_s: float | None = None) -> None:
        """Until the flushes of these partitions (None: all) are done; after timeout_s they are dropped,
        their offsets unstored (a revocation must not wait on a broker that is away for ever)."""
        flushes = [f for p, f in self._flushing.items() if partitions is None or p in partitions]
        if not flushes:
            return
        _, pending = await asyncio.wait(flushes, timeout=timeout_s)
        for flush in pending:
            flush.cancel()
        if pending:
            log.warning(
                "dropped %d schedule changelog flushes still pending after %s s", len(pending), timeout_s
            )
