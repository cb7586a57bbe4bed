"""Fire watermarks in the transaction of the fires they cover (transactions on).

A partition's watermark per time unit says "every fire due at or before T was produced" (punctuator.py);
with transactions it commits with the fires it covers, in the partition's transaction, and a new owner
starts from it. It is sent as soon as a tick has handed its fires to the producer — inside the tick's unit
of work, so no commit comes between — rather than when the transaction commits: the producer then adds the
output partition and the fire-progress partition to the transaction in one AddPartitionsToTxn request and
sends both records in one produce request, where a watermark sent at the commit took a second round of each
after the fires were acknowledged, ahead of the commit a reader waits for. What the commit still sends
(`before_commit`) is what no tick sent: the marks of an assignment's catch-up, of a clock jump's fires.

Each record is sent once per transaction and in order per (partition, unit): a tick sends only its own
unit's mark (one timer per unit, so two ticks never interleave theirs), and the commit runs when no unit of
work does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any

from faust.types import TP

from scheduler.domain.model import TimeUnit
from scheduler.kafka.tables import done_offsets, partition_db
from scheduler.kafka.transactions import PartitionGone, Transactions
from scheduler.wire.codec import encode
from scheduler.worker.punctuator import Punctuator


def progress_record(partition: int, unit: TimeUnit, fired_up_to: int) -> tuple[bytes, bytes]:
    """The fire-progress table's (key, value) for a partition's watermark of `unit`."""
    key = f"{partition}:{unit.value}".encode()
    value = encode("FireProgress", {"partition": partition, "unit": unit.value, "firedUpTo": fired_up_to})
    return key, value


class TransactionalWatermarks:
    def __init__(self, txns: Transactions, punctuator: Punctuator, progress: Any) -> None:
        """`progress`: the fire-progress table (its changelog topic, its local stores)."""
        self._txns = txns
        self._punctuator = punctuator
        self._progress = progress
        # partition -> (the open transaction's serial, unit -> the mark sent in it)
        self._in_txn: dict[int, tuple[int, dict[TimeUnit, int]]] = {}

    async def fired(self, unit: TimeUnit, partitions: Iterable[int]) -> None:
        """A tick of `unit` handed these partitions' fires to the producer: their marks of `unit` go in now."""
        for partition in partitions:
            with contextlib.suppress(PartitionGone):  # (given up meanwhile: nothing of it commits)
                await self.send(partition, (unit,))

    async def before_commit(self, partition: int) -> None:
        """The partition commits: what covers its fires and is not in its transaction yet goes in."""
        if partition in self._punctuator.partitions:
            await self.send(partition, tuple(TimeUnit))

    def drop(self, partition: int) -> None:
        self._in_txn.pop(partition, None)

    async def send(self, partition: int, units: tuple[TimeUnit, ...]) -> None:
        """The partition's pending marks of `units` not in its open transaction yet: into it, and into the
        punctuator and the local store once it commits."""
        marks = self._punctuator.pending_marks(partition)
        serial, sent = self._in_txn.get(partition, (None, {}))
        if serial is None or serial != self._txns.open_serial(partition):
            sent = {}  # (what was sent went with a transaction that ended: committed or given up)
        new = {u: tick for u, tick in marks.items() if u in units and sent.get(u) != tick}
        if not new:
            return
        topic = self._progress.changelog_topic.get_topic_name()
        records = [progress_record(partition, u, tick) for u, tick in new.items()]
        futures: list[asyncio.Future[object]] = [
            await self._txns.send(partition, topic, k, v, partition) for k, v in records
        ]
        now_serial = self._txns.open_serial(partition)
        if now_serial is not None:
            self._in_txn[partition] = (now_serial, {**sent, **new})

        def committed() -> None:
            self._punctuator.committed(partition, new)
            db = partition_db(self._progress, partition)
            for k, v in records:
                db[k] = v
            for p, offset in done_offsets(futures).items():
                self._progress.data.set_persisted_offset(TP(topic, p), offset)

        self._txns.after_commit(partition, committed)
