"""Faust's tables as the worker uses them: bytes to bytes, read and written per partition straight in
RocksDB. The only module that reaches into Faust's RocksDB store (its private members), so a Faust upgrade
that changes them breaks here and nowhere else."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from rocksdict import ReadOptions, WriteBatch

log = logging.getLogger(__name__)


#: RocksDB memtables per table partition (Faust's default: 64 MiB, 3 of them)
WRITE_BUFFER_BYTES = 16 * 2**20
#: a memtable's bloom filter, of its size (raw_table's memtable_bloom: 320 KiB a 16 MiB memtable)
MEMTABLE_BLOOM_RATIO = 0.02


def raw_table(
    app: Any, name: str, partitions: int, cache_mb: int = 32, *, memtable_bloom: bool = False
) -> Any:
    """A table of bytes to bytes: we encode (Avro) ourselves. Faust would pick json for `bytes`. Each
    partition's RocksDB gets a block cache of `cache_mb` and 16 MiB memtables (Faust's defaults, 2 GiB and
    3 x 64 MiB per partition of each table, would let RocksDB's memory grow with the data).
    `memtable_bloom`: its memtables get a bloom filter of whole keys (MEMTABLE_BLOOM_RATIO of their size),
    for a table whose writes each look up a key that is mostly absent (a new schedule, a new delayed
    message): such a get skips the memtable's skip list (~0.6 µs of ~1.2)."""
    options = {"block_cache_size": cache_mb * 2**20, "write_buffer_size": WRITE_BUFFER_BYTES}
    table: Any = app.Table(name, partitions=partitions, key_type=bytes, value_type=bytes, options=options)
    table.key_serializer = table.value_serializer = "raw"
    if memtable_bloom:
        _memtable_bloom(table)
    return table


def _memtable_bloom(table: Any) -> None:
    """Faust's RocksDB options have no word for it: its store's options get it as they are built."""
    rocksdb_options = getattr(table.data, "rocksdb_options", None)  # (None: a store that is not RocksDB)
    if rocksdb_options is None:
        return
    build = rocksdb_options.as_options

    def as_options() -> Any:
        options = build()
        options.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO)
        options.set_memtable_whole_key_filtering(True)
        return options

    rocksdb_options.as_options = as_options


def keep_newest_generation(
    table: Any,
    generation_of: Callable[[bytes], int | None],
    stored: Callable[[int, bytes], bytes | None] | None = None,
    stamp: str = "group generation",
) -> None:
    """Restore (and standby replication) of `table` skips a changelog record written in an earlier group
    generation than the key's value it would replace. Each value names the generation of the assignment it
    was written in (`generation_of` reads it; None: unknown, always applied, as a delete is). Without
    transactions nothing fences a worker whose partitions moved while it was frozen or cut off: what its
    producers held goes out when it wakes, after the new owner's writes of the same keys, and a restore
    that took the last record would take its stale value. `stored`: the value in the partition's RocksDB
    (tests give their own). `stamp`: what `generation_of` reads, for the log (a schedule's version also
    only grows: an update's record never goes below the one before it)."""
    apply = table.apply_changelog_batch
    read = stored or (lambda partition, key: partition_db(table, partition).get(key))

    def apply_newest(batch: Iterable[Any]) -> None:
        newest: dict[tuple[int, bytes], int | None] = {}  # what this batch applied, per key
        kept = []
        skipped = 0
        for event in batch:
            msg = event.message
            where = (msg.partition, bytes(msg.key))
            generation = None if msg.value is None else generation_of(msg.value)
            if generation is not None:
                if where in newest:
                    current = newest[where]
                else:
                    raw = read(*where)
                    current = None if raw is None else generation_of(raw)
                if current is not None and generation < current:
                    skipped += 1
                    continue  # a frozen owner's write, landed after the next owner's
            newest[where] = generation
            kept.append(event)
        if skipped:
            log.warning(
                "%s: %d changelog records of an earlier %s than their key's were not applied (a frozen "
                "owner's late writes)",
                getattr(table, "name", "table"),
                skipped,
                stamp,
            )
        apply(kept)

    table.apply_changelog_batch = apply_newest


def skip_applied_records(table: Any) -> None:
    """Restore and standby replication of `table` apply only changelog records past the offset its
    partition's RocksDB holds (install it last: every other wrapper sees only what is applied).

    Faust applies a changelog partition's records a buffer at a time, and flushes what its buffer holds at
    the next revocation. A record of an active partition that reached the buffer after its restore ended
    (the owner's own transactional write read back from a fetch in flight) stayed there, and the next
    revocation wrote it over the two minutes of newer state the owner had committed meanwhile: its fire
    watermark went back from 01:19:42 to 01:17:44 and its next ownership fired those two minutes again
    (438 duplicates, campaign seed 3016). The stored offset says what the partition's database holds
    already; a record at or below it is never applied again (forget_persisted_offset clears it when a
    restore must replay everything)."""
    apply = table.apply_changelog_batch

    def apply_unapplied(batch: Iterable[Any]) -> None:
        stored: dict[Any, int | None] = {}
        kept = []
        stale: dict[Any, list[int]] = {}  # changelog partition -> offsets of records below its stored offset
        for event in batch:
            tp, offset = event.message.tp, event.message.offset
            if tp not in stored:
                stored[tp] = table.data.persisted_offset(tp)
            held = stored[tp]
            if held is not None and offset <= held:
                if offset < held:  # (Faust's restore seeks to the stored offset: that one comes again)
                    stale.setdefault(tp, []).append(offset)
                continue
            kept.append(event)
        if stale:
            log.warning(
                "%s: changelog records below their partition's stored offset not applied again (read after "
                "their restore ended, or twice): %s",
                getattr(table, "name", "table"),
                "; ".join(
                    f"partition {tp.partition}: {len(offs)} from offset {min(offs)} (stored {stored[tp]})"
                    for tp, offs in sorted(stale.items())
                ),
            )
        if kept:
            apply(kept)

    table.apply_changelog_batch = apply_unapplied


def forget_persisted_offset(table: Any, partition: int) -> None:
    """The partition's next restore reads its changelog from the start (its data stays: the replay
    applies every record again, in order, over it)."""
    partition_db(table, partition).delete(table.data.offset_key)


def partition_db(table: Any, partition: int) -> Any:
    """The RocksDB database of one partition of a table (opened if it was not)."""
    return table.data._db_for_partition(partition)


def opened_partition_db(table: Any, partition: int) -> Any | None:
    """The same if it is open already; None never opens one (a partition not opened has nothing)."""
    return table.data._dbs.get(partition)


#: keys from this byte on are no table's entries: the schedules table's due-time index (kafka.due_index)
LOCAL_KEYS = b"\xff"


@functools.lru_cache(maxsize=256)  # (a few fixed prefixes, and a tenant's for each list)
def _bounded(prefix: bytes) -> ReadOptions:
    """Reads that stop at the end of the prefix's keys (RocksDB's iterate upper bound): without it an
    iterator past the last live key of the prefix walks every deleted key after it (1.1 ms a seek over
    20,000 delivered messages' tombstones, 1.3 µs with it)."""
    end = prefix.rstrip(b"\xff")
    bound = end[:-1] + bytes([end[-1] + 1]) if end else LOCAL_KEYS
    options = ReadOptions()
    options.set_iterate_upper_bound(min(bound, LOCAL_KEYS))
    return options


def partition_items(table: Any, partition: int) -> Iterator[tuple[bytes, bytes]]:
    """The entries of one partition of a table, without Faust's offset bookkeeping nor the local keys."""
    yield from partition_items_from(table, partition, b"")


def fresh_partition(table: Any, partition: int) -> bool:
    """Whether the partition's database has never held a restored or written offset (created empty)."""
    return partition_db(table, partition).get(table.data.offset_key) is None


def partition_items_from(
    table: Any, partition: int, prefix: bytes, after: bytes | None = None, *, at: bytes | None = None
) -> Iterator[tuple[bytes, bytes]]:
    """The entries of one partition whose key starts with `prefix`, in key order, from the first key after
    `after` (a cursor: exclusive), or from `at` (inclusive): a RocksDB seek and as many steps as are read,
    whatever the table holds."""
    db = partition_db(table, partition)
    start = prefix if after is None or after < prefix else after + b"\0"  # the least key above `after`
    if at is not None:
        start = max(start, at)
    offset_key = table.data.offset_key
    for key, value in db.items(from_key=start, read_opt=_bounded(prefix)):
        if not key.startswith(prefix) or key >= LOCAL_KEYS:
            return
        if key != offset_key:
            yield key, value


def write_local(table: Any, partition: int, writes: dict[bytes, bytes | None]) -> None:
    """Writes (None: a delete) into one partition's RocksDB database as one write batch."""
    if not writes:
        return
    batch = WriteBatch(raw_mode=True)
    for key, value in writes.items():
        if value is None:
            batch.delete(key)
        else:
            batch.put(key, value)
    partition_db(table, partition).write(batch)


async def last_offsets(futures: list[asyncio.Future[object]]) -> dict[int, int]:
    """partition -> the offset of its last record, from send_batch's futures (one per record: its batch's)."""
    for fut in dict(zip(map(id, futures), futures)).values():
        await fut
    return done_offsets(futures)


def done_offsets(futures: list[asyncio.Future[object]]) -> dict[int, int]:
    """The same from futures that are done (a batch held back by the producer resolves its future from a
    callback, a moment after its transaction committed: it is left out, and only a later write of the
    partition records where its store stands — a restart then restores a little more than it needs)."""
    members = Counter(map(id, futures))  # (records a batch: in C, as is the dict below)
    last: dict[int, int] = {}
    for fut in dict(zip(map(id, futures), futures)).values():
        if not fut.done() or fut.cancelled() or fut.exception() is not None:
            continue
        meta: Any = fut.result()
        end = meta.offset + members[id(fut)] - 1
        last[meta.partition] = max(last.get(meta.partition, -1), end)
    return last


def start_tables_at_once(app: Any) -> None:
    """Faust's table manager sleeps a second before it starts, so that tables defined after the app
    started can still register. Every table of a worker is made before (Worker.__init__): start at once.
    A second of every worker start (the tests start hundreds)."""
    manager = app.tables

    async def on_start() -> None:
        if not manager.should_stop:
            await manager._update_channels()
            await manager.recovery.start()

    manager.on_start = on_start


def collect_only_what_was_closed() -> None:
    """Process-wide: Faust's RocksDB store runs a full garbage collection for every table at every
    rebalance, to release the databases of the partitions it revoked (a database's lock goes with its
    last reference). With none of them open there is nothing to release, and each collection costs tens
    of milliseconds (a worker has eight tables): collect only when a database was dropped."""
    from faust.stores.rocksdb import Store

    revoke = Store.revoke_partitions
    if getattr(revoke, "_collects_only_when_closed", False):
        return

    def revoke_partitions(self: Any, table: Any, tps: Any) -> None:
        topics = table.changelog_topic.topics
        if any(tp.topic in topics and tp.partition in self._dbs for tp in tps):
            revoke(self, table, tps)

    revoke_partitions._collects_only_when_closed = True  # type: ignore[attr-defined]
    Store.revoke_partitions = revoke_partitions  # type: ignore[method-assign]
