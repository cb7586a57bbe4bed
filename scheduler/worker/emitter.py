"""A tick's fires handed to the producer (the punctuator's emission): at the instant, each staged fire of it
still owed gets its `firedAt` and goes out, FiredTasks as whole batches per topic (and, with transactions,
per schedule partition: each batch is in its partition's transaction), a fire its trigger agent decides (a
program launch, a time trigger inside AND/OR) as a TriggerFired. What was sent is recorded per partition
for the watermark (fire_progress.py); a send that raised leaves what was not sent staged (SendFailed). A fire
sent ahead of its instant (the punctuator's SEND_AHEAD_MS, its transaction held until the instant) says
`firedAt` = the instant.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from scheduler.kafka.partitioner import kafka_partition
from scheduler.kafka.transactions import owned_by
from scheduler.wire.fires import zigzag_long
from scheduler.wire.messages import TriggerFired
from scheduler.worker.counters import FireCounts
from scheduler.worker.fire_progress import Send
from scheduler.worker.held import Compiled, Held, Sent, Staged, forget, seq_of, single, still_due

Clock = Callable[[], int]
#: (topic, [(key, value, partition)]) -> one future per record (a burst is produced as whole batches)
SendBatch = Callable[[str, list[tuple[bytes, bytes, int]]], Awaitable[list["asyncio.Future[object]"]]]
#: topic -> its partition count, None while unknown
PartitionCount = Callable[[str], "int | None"]


class SendFailed(Exception):
    """A send of an instant's fires raised: `remaining`, the fires not handed to the producer."""

    def __init__(self, remaining: list[Staged], error: Exception) -> None:
        super().__init__(str(error))
        self.remaining, self.error = remaining, error


class Emitter:
    def __init__(
        self,
        parts: dict[int, Held],
        send: Send,
        send_batch: SendBatch | None,
        partition_count: PartitionCount | None,
        clock: Clock,
        stats: FireCounts,
        trigger_topic: str,
        transactional: bool,
    ) -> None:
        """`parts`: the punctuator's partitions (a fire of a partition given up since it was staged is not
        owed); `transactional`: batches per schedule partition, each sent inside its partition's work."""
        self._parts = parts
        self._send = send
        self._send_batch = send_batch
        self._partition_count = partition_count
        self._clock = clock
        self.stats = stats
        self._trigger_topic = trigger_topic
        self.transactional = transactional
        #: told of a staged time-trigger fire dropped at its emission (its schedule written since): Owed.dropped
        self.dropped: Callable[[Held, bytes, str, int, Compiled], None] | None = None

    async def fire(
        self,
        partition: int,
        key: bytes,
        entry: Compiled,
        path: str,
        due: int,
        now: int,
        *,
        missed: int = 0,
        catch_up: bool = False,
    ) -> Sent:
        fired_at = max(self._clock(), due)  # not the tick start: a large tick takes a while (ahead: due)
        if not catch_up:
            self.stats.lateness.observe(fired_at - due)
        if entry.encode is not None:
            topic = entry.topic
            value = entry.encode(due, fired_at, missed, catch_up)
        else:
            state = entry.state
            assert state is not None
            s = state.schedule
            # A schedule that launches a program, or a time trigger inside AND/OR: its trigger agent decides.
            topic = self._trigger_topic
            value = TriggerFired(
                key,
                s.key.id,
                state.version,
                path,
                source=f"t{path}",
                position=due,
                at=fired_at,
                due=due,
                missed=missed,
                catch_up=catch_up,
            ).encode()
        with owned_by(partition):
            return single(await self._send(topic, key, value), topic, key, value)

    async def emit_due(
        self, due: int, items: list[Staged], now: int, sent: dict[int, tuple[Held, list[Sent]]]
    ) -> None:
        """Fire the staged entries of one instant: FiredTasks grouped by topic and produced as whole batches
        when the producer can, others one by one (SendFailed holds what is left when a send raised)."""
        parts, clock, observe = self._parts, self._clock, self.stats.lateness.observe
        fired_at, zz, fast, observed = -1, b"", 0, 0
        grouped: dict[tuple[str, int], list[tuple[Staged, bytes]]] = {}
        per_partition = self.transactional
        handled: list[Staged] = []
        try:
            for item in items:
                part = item.part
                if parts.get(item.partition) is not part or (
                    item.elapsed and seq_of(part, item.key, item.path) != item.seq
                ):
                    handled.append(item)  # re-armed or moved since it was staged: not owed any more
                    continue
                if part.compiled.get(item.key) is not item.entry and not (
                    part.written and still_due(part, item, due)
                ):  # (its version replaced once this instant came: it fires as it was, Held.written)
                    handled.append(item)  # changed since it was staged: its new version decides
                    if part.unsure and self.dropped is not None:  # (and may owe it: owed.py)
                        self.dropped(part, item.key, item.path, due, item.entry)
                    continue
                if item.head is None:
                    fired = await self.fire(item.partition, item.key, item.entry, item.path, due, now)
                    self._sent_one(item, fired, sent)
                    handled.append(item)
                    continue
                if fast & 31 == 0:  # the clock, and firedAt's bytes, every 32 fires (well within 1 ms)
                    if observed:
                        observe(fired_at - due, observed)
                    fired_at, observed = max(clock(), due), 0  # (sent ahead of its instant: firedAt is it)
                    zz = zigzag_long(fired_at)
                fast += 1
                observed += 1
                value = item.head + zz + item.tail if item.tail is not None else item.head  # type: ignore[operator]
                if self._send_batch is not None:
                    where = (item.entry.topic, item.partition if per_partition else -1)
                    group = grouped.get(where)
                    if group is None:
                        group = grouped[where] = []
                    group.append((item, value))
                    continue
                topic = item.entry.topic
                with owned_by(item.partition):
                    one = single(await self._send(topic, item.key, value), topic, item.key, value)
                self._sent_one(item, one, sent)
                handled.append(item)
            if observed:
                observe(fired_at - due, observed)
            for (topic, owner), group in grouped.items():
                with owned_by(None if owner < 0 else owner):
                    await self._send_group(topic, group, sent, handled)
        except Exception as exc:
            done = {id(item) for item in handled}
            raise SendFailed([item for item in items if id(item) not in done], exc) from exc

    async def _send_group(
        self,
        topic: str,
        group: list[tuple[Staged, bytes]],
        sent: dict[int, tuple[Held, list[Sent]]],
        handled: list[Staged],
    ) -> None:
        """One topic's FiredTasks of an instant, as whole batches (one by one while the topic is unknown)."""
        count = None if self._partition_count is None else self._partition_count(topic)
        if count is None or self._send_batch is None:
            for item, value in group:
                self._sent_one(
                    item, single(await self._send(topic, item.key, value), topic, item.key, value), sent
                )
                handled.append(item)
            return
        records = []
        for item, value in group:
            cached = item.entry.kafka_partition
            if cached is None or cached[0] != count:
                cached = item.entry.kafka_partition = (count, kafka_partition(item.key, count))
            records.append((item.key, value, cached[1]))
        futures = await self._send_batch(topic, records)
        # one Sent per batch and schedule partition (the records of a batch share its future)
        current: dict[int, Sent] = {}
        for (item, _), record, future in zip(group, records, futures, strict=True):
            one = current.get(item.partition)
            if one is None or one.future is not future:
                one = current[item.partition] = Sent(future, topic, [])
                self._sent_one(item, one, sent)
            elif item.final:
                forget(item.part, item.key, item.path, item.seq)
            one.records.append(record)
            handled.append(item)

    @staticmethod
    def _sent_one(item: Staged, one: Sent, sent: dict[int, tuple[Held, list[Sent]]]) -> None:
        part = item.part
        if item.final:
            forget(part, item.key, item.path, item.seq)
        bucket = sent.get(item.partition)
        if bucket is None:
            bucket = sent[item.partition] = (part, [])
        bucket[1].append(one)
