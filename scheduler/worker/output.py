"""What the worker produces, and how: in the transaction of the schedule partition whose work it is (OWNER)
when there are transactions and the work is a partition's, else outside any (the batched producer). Fires,
agent hops, commands, dead letters, and the HTTP writes that answer once the broker has them.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable

from faust.types import EventT

from scheduler.domain.model import ScheduleCommand
from scheduler.kafka.config import Settings
from scheduler.kafka.gathered import GatheredSender
from scheduler.kafka.partitioner import kafka_partition as partition_for
from scheduler.kafka.producer import BatchedProducer
from scheduler.kafka.transactions import OWNER, Transactions
from scheduler.wire.codec import encode, encode_command, key_bytes
from scheduler.wire.dead_letters import dead_letter_record, origin
from scheduler.worker.counters import WorkerCounts
from scheduler.worker.vouched import Vouched

log = logging.getLogger(__name__)

Headers = list[tuple[str, bytes]]

#: how many keys' partitions partition_of keeps (all are forgotten when full: ~0.5 MB at most)
RECENT_KEYS = 4_096


class Output:
    """The worker's producing side (its methods are the Producing, Outbox and CommandSender ports')."""

    def __init__(
        self,
        settings: Settings,
        producer: BatchedProducer,
        txns: Transactions | None,
        counts: WorkerCounts,
        clock: Callable[[], int],
        vouched: Vouched,
    ) -> None:
        self._settings = settings
        self._vouched = vouched
        self._producer = producer
        self._txns = txns
        self._counts = counts
        self._clock = clock
        self._gathered: GatheredSender | None = None  # (made in the loop, at the first HTTP write)
        self._partitions: dict[bytes, int] = {}  # recent keys' partitions (partition_of)

    def partition_of(self, key: bytes) -> int:
        """The partition of our topics that owns `key`. An HTTP write asks it of one key ~5 times (its
        owner, its state, its tenant's share, its command) and murmur2 is ~1.5 µs in Python: the recent
        keys' are kept."""
        found = self._partitions.get(key)
        if found is None:
            if len(self._partitions) >= RECENT_KEYS:
                self._partitions.clear()
            found = self._partitions[key] = partition_for(key, self._settings.partitions)
        return found

    async def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None = None,
        headers: Headers | None = None,
    ) -> asyncio.Future[object]:
        """Produce a record (see the module's doc). The future resolves when the broker acknowledged it."""
        owner = OWNER.get()
        if self._txns is None or owner is None:
            return await self._producer.send(topic, key, value, partition=partition, headers=headers)
        return await self._txns.send(owner, topic, key, value, partition, headers)

    async def produce_many(
        self, topic: str, records: list[tuple[bytes, bytes, Headers]]
    ) -> list[asyncio.Future[object]]:
        """Keyed records with headers, as `produce` does each (Kafka's default partitioner), but sent as
        whole batches per partition (~10x cheaper a record); one at a time while the topic's partition
        count is not known yet."""
        count = self.partition_count(topic)
        if count is None:
            return [await self.produce(topic, k, v, headers=h) for k, v, h in records]
        batch = [(k, v, partition_for(k, count), h) for k, v, h in records]
        return await self.send_batch(topic, batch)  # type: ignore[arg-type]

    async def publish(
        self, topic: str, key: bytes, value: bytes | None, partition: int | None | str = "auto"
    ) -> None:
        """What an HTTP write answers 202 for (a definition on a compacted topic every worker follows —
        programs, calendars, rules; None: a tombstone —, an event, a queue's or a run's order), outside any
        transaction; returns once the broker has it: nothing answered is lost with the worker, and a read of
        the topic to its end after the answer sees it (TopicMap.lookup: read-your-writes). `partition` as
        send_keyed's ("auto": the one that owns `key`; None: the producer's choice)."""
        if partition == "auto":
            partition = self.partition_of(key)
        where = partition if isinstance(partition, int) else None
        await (await self._producer.send(topic, key, value, partition=where))

    async def send_batch(
        self, topic: str, records: list[tuple[bytes, bytes, int]]
    ) -> list[asyncio.Future[object]]:
        """Records with their partitions, as whole batches (the punctuator's fires)."""
        owner = OWNER.get()
        if self._txns is None or owner is None:
            return await self._producer.send_batch(topic, records)
        return await self._txns.send_batch(owner, topic, records)  # type: ignore[arg-type]

    def partition_count(self, topic: str) -> int | None:
        count = self._producer.partition_count(topic)
        if count is None and self._txns is not None:
            count = self._txns.partition_count(topic)
        return count

    async def send_keyed(
        self, topic: str, key: bytes, value: bytes, partition: int | None | str = "auto"
    ) -> None:
        """Produce (batched) to a topic co-partitioned with ours, on the partition that owns `key`."""
        if partition == "auto":
            partition = self.partition_of(key)
        await self.produce(topic, key, value, partition=partition if isinstance(partition, int) else None)

    async def send_command(
        self,
        cmd: ScheduleCommand,
        value: bytes | None = None,
        headers: Headers | None = None,
    ) -> asyncio.Future[object]:
        """Produce a command; the future resolves (to its RecordMetadata) once the broker has it."""
        kb = key_bytes(cmd.key)
        return await self.produce(
            self._settings.commands_topic,
            kb,
            value if value is not None else encode_command(cmd),
            partition=self.partition_of(kb),
            headers=headers,
        )

    def submit_command(self, cmd: ScheduleCommand, headers: Headers | None = None) -> asyncio.Future[object]:
        """An HTTP write's command, validated, outside any transaction, sent with every other handed over in
        the same turn of the loop as whole batches (scheduler.kafka.gathered: a batch of schedules over HTTP
        is one send, not one each); vouched for, for the command path if the key is this worker's
        (vouched.py). The future resolves to its own RecordMetadata once the broker has it."""
        if self._gathered is None:
            self._gathered = GatheredSender(self._producer, self._settings.commands_topic)
        kb = key_bytes(cmd.key)
        value, partition = encode_command(cmd), self.partition_of(kb)
        self._vouched.vouch(partition, value, cmd)
        return self._gathered.send(kb, value, partition, headers)  # type: ignore[return-value]

    async def send_fire(self, topic: str, key: bytes, value: bytes) -> asyncio.Future[object]:
        return await self.produce(topic, key, value)

    async def dead_letter(self, event: EventT, reason: str) -> None:
        msg = event.message
        self._counts.dead_letter(msg.topic, reason, sys.exc_info()[1])  # classed by the exception handled
        # a command moved to the partition that owns its key is named as its producer wrote it
        where = origin(msg, moved_here=msg.topic == self._settings.commands_topic)
        log.warning("dead-lettered %s[%d]@%d: %s", msg.topic, where.partition, where.offset, reason)
        key, record = dead_letter_record(msg.topic, where, msg.value, reason, self._clock())
        try:
            await self.produce(self._settings.dead_letter_topic, key, encode("DeadLetter", record))
        except Exception:  # a dead letter the producer refuses must not take the agent down with it
            log.exception("could not dead-letter %s[%d]@%d", msg.topic, where.partition, where.offset)
