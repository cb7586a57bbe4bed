"""The small topics a process follows whole (programs.TopicMap: programs, calendars, notification rules,
deliveries, sensor states) on one consumer. Each follower had a consumer of its own, and an idle consumer
still costs its fetch loop: an empty fetch answered every wait, the tasks and futures of each round, a
metadata refresh every 2 s. Five of them were a quarter of an idle worker's CPU; one consumer fetches every
followed partition in one request.

A consumer with no group, subscribed to the followed topics and reading each from its beginning; a record
goes to the map of its topic. A map that starts following (`add`) or a follower found stalled (`heal`)
starts a new consumer, and every map is read again from its beginning: the latest value of each key wins,
so reading a topic again changes nothing but the map's `applied` count."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition

from scheduler.kafka.consumers import FETCH_LOOP_WAKE_MS, started

log = logging.getLogger(__name__)

#: once it read to the end, how long a getmany waits for records (a record arriving ends it at once): each
#: wait that ends empty is a turn of its loop and of the consumer's (five a second at 200 ms)
CAUGHT_UP_WAIT_MS = 1000


class Followed(Protocol):
    """What the consumer hands records to (programs.TopicMap)."""

    topic: str

    def apply(self, key: bytes | None, value: bytes | None) -> None: ...

    def caught_up(self) -> None: ...


class Following:
    """One consumer following the topics of the maps added to it (see the module's doc)."""

    def __init__(self, bootstrap_servers: str, fetch_max_wait_ms: int, read_committed: bool = False) -> None:
        """`read_committed`: a topic among them is written in transactions (what an aborted one wrote is
        never seen; the others' records read the same either way)."""
        self._bootstrap = bootstrap_servers
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self._isolation = "read_committed" if read_committed else "read_uncommitted"
        self._maps: dict[str, Followed] = {}
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # (maps added at once: one consumer at a time)
        self.consumer: AIOKafkaConsumer | None = None

    @property
    def isolation(self) -> str:
        return self._isolation

    async def add(self, followed: Followed) -> None:
        """Follow `followed.topic` too (from its beginning), on a new consumer."""
        if self._maps.get(followed.topic) is followed and self._task is not None:
            return
        self._maps[followed.topic] = followed
        await self.heal()

    async def remove(self, followed: Followed) -> None:
        """Stop following `followed.topic`; the consumer stops with the last one."""
        if self._maps.get(followed.topic) is not followed:
            return
        del self._maps[followed.topic]
        await self.heal()

    def partitions(self, topic: str) -> list[TopicPartition]:
        """The topic's partitions the consumer reads (none before it knows them)."""
        consumer = self.consumer
        if consumer is None:
            return []
        return sorted(tp for tp in consumer.assignment() if tp.topic == topic)

    async def heal(self) -> None:
        """Follow every topic again on a new consumer, from their beginnings."""
        async with self._lock:
            await self._cancel()
            if self._maps:
                self._task = asyncio.create_task(self._follow(sorted(self._maps)))

    async def _cancel(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            self.consumer = None

    async def _follow(self, topics: list[str]) -> None:
        while True:
            try:
                consumer = self.consumer = AIOKafkaConsumer(
                    *topics,
                    bootstrap_servers=self._bootstrap,
                    auto_offset_reset="earliest",
                    enable_auto_commit=False,
                    fetch_max_wait_ms=self._fetch_max_wait_ms,
                    metadata_max_age_ms=2000,  # (a topic created after it started is found soon)
                    isolation_level=self._isolation,
                    consumer_timeout_ms=FETCH_LOOP_WAKE_MS,
                )
                await started(consumer)
                try:
                    wait_ms = 200  # (until it read to the end once: a map's start waits for that)
                    while True:
                        batch = await consumer.getmany(timeout_ms=wait_ms)
                        for tp, records in batch.items():
                            followed = self._maps.get(tp.topic)
                            if followed is not None:
                                for msg in records:
                                    followed.apply(msg.key, msg.value)
                        if not batch:
                            wait_ms = CAUGHT_UP_WAIT_MS
                            for followed in list(self._maps.values()):
                                followed.caught_up()
                finally:
                    await consumer.stop()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the consumer following %s failed; retrying", ", ".join(topics))
                await asyncio.sleep(1)

    async def stop(self) -> None:
        self._maps.clear()
        async with self._lock:
            await self._cancel()
