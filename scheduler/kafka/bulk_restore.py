"""Bulk restore: active changelog partitions far behind their end (together) are read by a consumer of
its own, in large fetches, and applied a fetch at a time through their table's apply_changelog_batch (RocksDB
write batches, the persisted offset, and the due-time index's restore hook) before Faust's recovery starts
reading them. The worker's tables that can hold millions of entries are restored so: the schedules and
the delayed messages. Faust's own loop, a record at a time through its changelog queue and recovery buffers, then
reads only the tail. A restart that keeps its data dir has nothing to bulk-load.

Safe to stop anywhere (a rebalance cancels it): each applied fetch moved the partition's persisted offset
past what it wrote, and Faust's recovery reads on from there. The step it runs in (building the active
offsets) loses Faust's time limit (its broker request timeout, meant for the offset requests: 10M records
take minutes); a load that receives nothing for STALL_S, or runs past MAX_S, leaves the rest to Faust.

Reaches into Faust's recovery service (its private _build_offsets and highwaters): a kafka-layer module."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from typing import Any

from faust.types import TP

from scheduler.kafka.consumers import started

log = logging.getLogger(__name__)

#: records applied per write batch (and the most a fetch returns)
BATCH_RECORDS = 20_000
#: per partition per fetch (aiokafka's default is 1 MiB)
FETCH_BYTES = 16 * 2**20
#: the longest a bulk load runs before leaving the rest to Faust's loop
MAX_S = 3600.0
#: a bulk load that receives nothing for this long stops (Faust's loop then reads what is left)
STALL_S = 10.0


class _Message:
    """What apply_changelog_batch reads of a changelog record (Faust's Message has these too)."""

    __slots__ = ("tp", "topic", "partition", "offset", "key", "value")

    def __init__(self, tp: TP, offset: int, key: bytes, value: bytes | None) -> None:
        self.tp, self.topic, self.partition = tp, tp.topic, tp.partition
        self.offset, self.key, self.value = offset, key, value


class _Event:
    __slots__ = ("message",)

    def __init__(self, message: _Message) -> None:
        self.message = message


def behind(
    starts: Mapping[TP, int | None], highwaters: Mapping[TP, int | None], min_records: int
) -> dict[TP, int]:
    """The partitions worth a bulk load: every one with records to read, when together they have at
    least min_records (a takeover of several partitions of a few thousand records each is one bulk load,
    not a record at a time through Faust's loop). start = the last offset applied (-1 or None: none),
    highwater = the offset of the last record to restore (Faust's: the end - 1).
    -> {tp: the first offset to read}."""
    firsts, total = {}, 0
    for tp, hw in highwaters.items():
        start = starts.get(tp)
        first = 0 if start is None or start < 0 else start + 1
        if hw is not None and hw >= first:
            firsts[tp] = first
            total += hw - first + 1
    return firsts if total >= min_records else {}


async def load(
    consumer_factory: Callable[[], Any],
    firsts: Mapping[TP, int],
    highwaters: Mapping[TP, int],
    apply: Callable[[Iterable[_Event]], None],
    budget_s: float,
    applied_to: MutableMapping[TP, int] | None = None,
) -> tuple[dict[TP, int], int]:
    """Read each partition from its first offset to its highwater (inclusive) and apply what was read, a
    fetch at a time. -> ({tp: the last offset applied} for the partitions that applied anything, how many
    records were applied). `applied_to`: moved to the last offset applied of each partition after each
    fetch, but never to its highwater (Faust's recovery offsets: the group's watchdog sees a load of
    minutes make progress, and Faust's own sees records left, not a restore done that never ends)."""
    consumer = await started(consumer_factory())
    applied: dict[TP, int] = {}
    count = 0
    try:
        from aiokafka import TopicPartition

        tps = {TopicPartition(tp.topic, tp.partition): tp for tp in firsts}
        consumer.assign(list(tps))
        for atp, tp in tps.items():
            consumer.seek(atp, firsts[tp])
        reading = set(tps)
        began = last_record = time.monotonic()
        while reading:
            now = time.monotonic()
            if now - began > budget_s or now - last_record > STALL_S:
                log.warning(
                    "bulk restore stopped after %.0fs with %d partition(s) left: the changelog restore "
                    "reads the rest", now - began, len(reading),
                )  # fmt: skip
                break
            batches = await consumer.getmany(*reading, timeout_ms=500, max_records=BATCH_RECORDS)
            events = []
            for atp, records in batches.items():
                tp, hw = tps[atp], highwaters[tps[atp]]
                for r in records:
                    if r.offset > hw:
                        break
                    events.append(_Event(_Message(tp, r.offset, r.key, r.value)))
                if records:
                    last_record = time.monotonic()
            if events:
                apply(events)
                count += len(events)
                for e in events:
                    applied[e.message.tp] = e.message.offset
                if applied_to is not None:  # (one short of the end until it returns: see install)
                    for tp, offset in applied.items():
                        applied_to[tp] = max(applied_to.get(tp) or -1, min(offset, highwaters[tp] - 1))
            for atp in list(reading):
                tp = tps[atp]
                position = await consumer.position(atp)
                if applied.get(tp, -1) >= highwaters[tp] or position > highwaters[tp]:
                    reading.discard(atp)  # (a position past it: only markers or aborted records were left)
            await asyncio.sleep(0)
    finally:
        await consumer.stop()
    return applied, count


def install(
    app: Any,
    tables: Sequence[Any],
    bootstrap_servers: str,
    consumer_options: Mapping[str, Any],
    min_records: int,
    on_loaded: Callable[[int], None],
) -> None:
    """Bulk-load the tables' active changelog partitions, when together at least min_records behind, once
    Faust's recovery has their start offsets and highwaters and before it seeks them (so it reads on from
    where the load stopped): one consumer reads them all, each fetch applied to its table.
    consumer_options: the broker profile's (read_committed on Kafka). on_loaded: how many records each
    load applied."""
    recovery = app.tables.recovery
    original = recovery._build_offsets
    if getattr(original, "_bulk", False):
        return
    original_wait = recovery._wait
    by_topic = {table.changelog_topic.get_topic_name(): table for table in tables}

    def consumer() -> Any:
        from aiokafka import AIOKafkaConsumer

        return AIOKafkaConsumer(
            bootstrap_servers=bootstrap_servers,
            enable_auto_commit=False,
            auto_offset_reset="earliest",  # (a first offset below the log start: from the start)
            max_partition_fetch_bytes=FETCH_BYTES,
            fetch_max_bytes=4 * FETCH_BYTES,
            **{"fetch_max_wait_ms": 100, **consumer_options},
        )

    def apply(events: Iterable[_Event]) -> None:
        """A fetch's records, each table's in one write batch."""
        per_topic: dict[str, list[_Event]] = {}
        for event in events:
            per_topic.setdefault(event.message.topic, []).append(event)
        for topic, batch in per_topic.items():
            by_topic[topic].apply_changelog_batch(batch)

    async def build_offsets(consumer_: Any, tps: Any, destination: Any, title: str) -> None:
        await original(consumer_, tps, destination, title)
        if title != "active":
            return
        mine = {tp: destination.get(tp) for tp in tps if tp.topic in by_topic}
        firsts = behind(mine, {tp: recovery.active_highwaters.get(tp) for tp in mine}, min_records)
        if not firsts:
            return
        t0 = time.monotonic()
        highwaters = {tp: recovery.active_highwaters[tp] for tp in firsts}
        # (the offsets move with each fetch: liveness.Membership counts restored records as progress, and
        # a load of 10M records takes minutes; the group's stall bound made the worker leave mid-load)
        applied, records = await load(consumer, firsts, highwaters, apply, MAX_S, destination)
        for tp, offset in applied.items():
            destination[tp] = max(destination.get(tp) or -1, offset)
        on_loaded(records)
        log.info(
            "bulk restore: %d record(s) of %d partition(s) of %s in %.1fs",
            records, len(firsts), ", ".join(sorted({tp.topic for tp in firsts})), time.monotonic() - t0,
        )  # fmt: skip

    async def wait(coro: Any, timeout: Any = None) -> None:
        if getattr(coro, "cr_code", None) is build_offsets.__code__:
            timeout = None  # (the bulk load: bounded by MAX_S and STALL_S, cancelled by a rebalance)
        await original_wait(coro, timeout)

    build_offsets._bulk = True  # type: ignore[attr-defined]
    recovery._build_offsets = build_offsets
    recovery._wait = wait
