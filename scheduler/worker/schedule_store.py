"""The schedules table as the command path writes it: a command's write is held, and read back at once
(`read`), until the ingest puts the held writes in RocksDB, a write batch per partition (`write_local`,
~2x cheaper than a put each), and sends them to the changelog as whole batches (`take_writes`,
`write_changelog`). With transactions they go into the partition's transaction instead (`stage_commit`),
and RocksDB gets them only once it committed: the local store holds committed state only; what a hop
topic's fetch wrote to the staged tables goes in with them. The due-time
index's writes (kafka.due_index) are held with them, in their write batch and transaction, never in the
changelog (`index_put`). A restored state is indexed before Faust applies it (`index_restored_states`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from faust.types import TP

from scheduler.domain.model import ScheduleState, TimeUnit
from scheduler.kafka.due_index import COMPLETE, DueIndex, elapsed_key
from scheduler.kafka.producer import BatchedProducer
from scheduler.kafka.staged import StagedTable
from scheduler.kafka.tables import (
    done_offsets,
    fresh_partition,
    last_offsets,
    partition_db,
    partition_items,
    partition_items_from,
    write_local,
)
from scheduler.kafka.transactions import PartitionGone, Transactions
from scheduler.wire.codec import DecodeError, decode_state
from scheduler.worker.flushes import offset_record
from scheduler.worker.held import Unreadable, index_writes

log = logging.getLogger(__name__)

Write = tuple[bytes, bytes | None, int]  # (key, value or None: deleted, partition)


class ScheduleStore:
    """The schedule writes held per partition (see the module's doc)."""

    def __init__(
        self,
        schedules: Any,
        progress: Any,
        producer: BatchedProducer,
        txns: Transactions | None,
        staged: Sequence[StagedTable] = (),
    ) -> None:
        """`staged`: with transactions, the worker's staged tables (see stage_commit)."""
        self.schedules = schedules
        self._staged = staged
        self._progress = progress
        self._producer = producer
        self._txns = txns
        self._writes: dict[int, list[Write]] = {}  # partition -> changelog records not yet sent
        self._unwritten: dict[int, dict[bytes, bytes | None]] = {}  # partition -> writes not in RocksDB yet

    def db(self, partition: int) -> Any:
        return schedules_db(self.schedules, partition)

    def write(self, partition: int, key: bytes, value: bytes | None) -> None:
        """Held until write_local puts it in RocksDB (read sees it meanwhile); the changelog once the fetch
        is applied (take_writes). None: deleted. With transactions RocksDB gets it only once its transaction
        committed (stage_commit)."""
        held = self._unwritten.get(partition)
        if held is None:
            held = self._unwritten[partition] = {}
        held[key] = value
        self._writes.setdefault(partition, []).append((key, value, partition))

    def index_put(self, partition: int, writes: list[tuple[bytes, bytes | None]]) -> None:
        """Due-time index writes held with the schedule writes: in their write batch (and transaction), never
        in the changelog."""
        if writes:
            self._unwritten.setdefault(partition, {}).update(writes)

    def read(self, partition: int, key: bytes) -> bytes | None:
        """A schedule's state as stored: held by write, else RocksDB's."""
        held = self._unwritten.get(partition)
        if held is not None and key in held:
            return held[key]
        return self.db(partition).get(key)

    def write_local(self) -> None:
        """The writes held since the last call into RocksDB, a write batch per partition. The ingest calls it
        before it lets other tasks run. With transactions, nothing: the writes wait for their commit."""
        if self._txns is not None:
            return
        for partition in list(self._unwritten):
            self._write_partition_local(partition)

    def _write_partition_local(self, partition: int) -> None:
        writes = self._unwritten.pop(partition, None)
        if writes:
            write_local(self.schedules, partition, writes)

    def writes_held(self) -> bool:
        """Schedule writes wait for the changelog (take_writes)."""
        return bool(self._writes)

    def take_writes(self, partition: int | None = None) -> list[Write]:
        """The schedule writes since the last take (of one partition, or all), for write_changelog."""
        if partition is not None:
            return self._writes.pop(partition, [])
        writes, self._writes = self._writes, {}
        return [w for ws in writes.values() for w in ws]

    async def write_changelog(self, writes: list[Write]) -> None:
        """Schedule writes sent to the changelog as whole batches; returns once the broker has them, with
        the offset each partition's store holds recorded as Faust does (so a restart restores only what
        came after)."""
        if not writes:
            return
        topic = self.schedules.changelog_topic.get_topic_name()
        futures = await self._producer.send_batch(topic, writes)  # type: ignore[arg-type]
        for partition, offset in (await last_offsets(futures)).items():
            self.schedules.data.set_persisted_offset(TP(topic, partition), offset)

    async def stage_commit(self, partition: int, next_offset: int, topic: str | None = None) -> None:
        """Transactions: a fetch of the partition's commands (topic None) or of a hop topic is applied. Its
        schedule writes and its next offset go into the partition's transaction; so do, for a hop topic,
        what its records wrote to the staged tables (a delayed message's two entries), while the fetch's
        next partition is applied: the commit no longer waits for them (~0.1 s of a fetch of 10,000
        delayed messages; a bulk load went ~30 % faster). A command's history entry waits for the commit:
        a command's own work is ~4x a message's, and sending it sooner measured no better. RocksDB, the
        persisted changelog offsets and the stored offset get them once it commits (never before: the
        local store holds committed state only)."""
        txns = self._txns
        assert txns is not None
        writes = self.take_writes(partition)
        schedules_topic = self.schedules.changelog_topic.get_topic_name()
        progress_topic = self._progress.changelog_topic.get_topic_name()
        key, value = offset_record(partition, next_offset, topic)
        try:
            futures = await txns.send_batch(partition, schedules_topic, writes) if writes else []  # type: ignore[arg-type]
            offset_sent = await txns.send(partition, progress_topic, key, value, partition)
            if topic is not None:
                for table in self._staged:
                    await table.send_now(partition)
        except PartitionGone:  # (a failed send gave the partition up)
            return

        def committed() -> None:
            self._write_partition_local(partition)
            for p, offset in done_offsets(futures).items():
                self.schedules.data.set_persisted_offset(TP(schedules_topic, p), offset)
            partition_db(self._progress, partition)[key] = value
            for p, offset in done_offsets([offset_sent]).items():
                self._progress.data.set_persisted_offset(TP(progress_topic, p), offset)

        with contextlib.suppress(PartitionGone):  # (given up meanwhile, by a send of another task)
            txns.after_commit(partition, committed)

    def drop(self, partition: int) -> None:
        """Forget the writes held for the partition (its transaction was given up)."""
        self._unwritten.pop(partition, None)
        self._writes.pop(partition, None)

    # --- what HTTP (and the take-up) read -------------------------------------------------------

    def local_states(self, partition: int) -> Iterator[tuple[bytes, ScheduleState]]:
        self.write_local()  # (held writes exist only while a command's handling awaits)
        for key, raw in partition_items(self.schedules, partition):
            try:
                yield key, decode_state(raw)
            except DecodeError:
                log.error("undecodable schedule state in partition %d; ignored", partition)

    def states_from(
        self, partition: int, prefixes: list[bytes], after: bytes | None
    ) -> Iterator[tuple[bytes, ScheduleState]]:
        """The partition's schedules whose keys start with one of `prefixes` (sorted, none a prefix of
        another), in key order, after the key `after`: what a page of a list reads (O(page), not O(table))."""
        self.write_local()
        for prefix in prefixes:
            for key, raw in partition_items_from(self.schedules, partition, prefix, after):
                try:
                    yield key, decode_state(raw)
                except DecodeError:
                    log.error("undecodable schedule state in partition %d; ignored", partition)

    def committed_state(self, partition: int, key: bytes) -> ScheduleState | None:
        """A schedule's state as HTTP reads it. With transactions, what committed: never the open
        transaction's writes, which a fence may still abort, so a one-key read shows what a list shows."""
        raw = (
            partition_db(self.schedules, partition).get(key)
            if self._txns is not None
            else self.read(partition, key)
        )
        return None if raw is None else decode_state(raw)


def schedules_db(table: Any, partition: int) -> Any:
    """The schedules table's RocksDB of a partition, where its due-time index lives too. Faust closes a
    revoked partition's database by dropping it; while a scan of it is still open, it cannot be opened
    again ("lock hold by current process"): Unreadable then, and the punctuator drops nothing for it."""
    try:
        return partition_db(table, partition)
    except Exception as exc:
        raise Unreadable(partition, exc) from exc


def index_restored_states(
    table: Any, index: DueIndex, fired_up_to: Callable[[int], dict[TimeUnit, int]]
) -> None:
    """A restored (or standby-replicated) schedule state is indexed before Faust applies it: a crash in
    between restores it again. A partition whose database was created empty gets every state this way:
    its index is complete (no rebuild on assignment). `fired_up_to`: a partition's watermarks."""
    apply = table.apply_changelog_batch

    def index_then_apply(batch: Any) -> None:
        events = list(batch)
        writes: dict[int, list[tuple[bytes, bytes | None]]] = {}
        marks: dict[int, dict[TimeUnit, int]] = {}
        for event in events:
            msg = event.message
            partition, key = msg.partition, bytes(msg.key)
            out = writes.get(partition)
            if out is None:
                out = writes[partition] = [(COMPLETE, b"")] if fresh_partition(table, partition) else []
                marks[partition] = fired_up_to(partition)
            if msg.value is None:
                out.append((elapsed_key(key), None))
                continue
            try:
                state = decode_state(msg.value)
            except DecodeError:
                continue
            out += index_writes(key, state, marks[partition].get)
        for partition, batch_writes in writes.items():
            index.write(partition, batch_writes)
        apply(events)

    table.apply_changelog_batch = index_then_apply
