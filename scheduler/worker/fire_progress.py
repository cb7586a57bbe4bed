"""Fire progress: a watermark per (partition, time unit), "every fire due at or before T has been produced
and acknowledged". Without transactions it is saved once per progress interval, once the producer has
acknowledged every fire up to it (flush_progress; a fire it gave up on is sent again first); with them it
commits with the fires, in the partition's transaction (pending_marks, committed: watermarks.py). Once a
watermark is saved the index entries due at or before it are dropped (fired, their next dues written).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from scheduler.domain.model import TimeUnit
from scheduler.kafka.due_index import DueIndex
from scheduler.worker.counters import FireCounts
from scheduler.worker.held import Held, Sent, record_count, single

log = logging.getLogger(__name__)

#: (topic, key, value) -> future that resolves when the broker acknowledged the record
Send = Callable[[str, bytes, bytes], Awaitable["asyncio.Future[object]"]]
#: (partition, unit, fired_up_to_ms) -> persist the watermark
SaveProgress = Callable[[int, TimeUnit, int], None]


class FireProgress:
    """The watermarks of the partitions the punctuator holds (`parts`: the punctuator's own dict, shared)."""

    def __init__(
        self,
        parts: dict[int, Held],
        index: DueIndex,
        stats: FireCounts,
        save_progress: SaveProgress,
        send: Send,
        hold: Callable[[], Awaitable[bool]] | None,
    ) -> None:
        self.parts = parts
        self._index = index
        self.stats = stats
        self._save_progress = save_progress
        self._send = send
        self._hold = hold

    def record(self, unit: TimeUnit, sent: dict[int, tuple[Held, list[Sent]]], tick_ms: int) -> None:
        """A tick's fires handed to the producer, per partition: in flight until acknowledged (or committed)."""
        for part, futures in sent.values():
            self.stats.fires_by_unit[unit] += record_count(futures)
            part.inflight[unit].append((tick_ms, futures))
            if tick_ms > part.high.get(unit, tick_ms - 1):
                part.high[unit] = tick_ms
        sent.clear()

    def pending_marks(self, partition: int) -> dict[TimeUnit, int]:
        """Transactional: per unit, the watermark that covers the fires the partition sent since its last
        commit (every one of them is in the transaction being committed)."""
        part = self.parts.get(partition)
        out: dict[TimeUnit, int] = {}
        if part is None:
            return out
        for unit, inflight in part.inflight.items():
            if inflight:
                tick = max(t for t, _ in inflight)
                if tick > part.saved.get(unit, -1):
                    out[unit] = tick
        return out

    def sent_uncommitted(self) -> bool:
        """Transactional: a partition sent fires its transaction has not committed yet (a read_committed
        reader waits for that commit)."""
        return any(inflight for part in self.parts.values() for inflight in part.inflight.values())

    def committed(self, partition: int, marks: dict[TimeUnit, int]) -> None:
        """Transactional: the partition's transaction committed, with these watermarks (pending_marks)."""
        part = self.parts.get(partition)
        if part is None:
            return
        for inflight in part.inflight.values():
            inflight.clear()
        for unit, tick in marks.items():
            part.saved[unit] = max(tick, part.saved.get(unit, -1))
            self._drop_fired(partition, part, unit, tick)

    def _drop_fired(self, partition: int, part: Held, unit: TimeUnit, watermark: int) -> None:
        """The watermark moved: every index entry due at or before it is out (fired, or caught up, and its
        next due written; or stale). Nothing live is that early: a schedule's next due is written when it
        fires, after the watermark, or by a command or a restore, after the watermark too."""
        self._index.drop_before(partition, unit, watermark)

    async def flush_progress(self) -> None:
        """Persist, per partition and unit, the latest tick whose fires have all been acknowledged.

        A fire the producer gave up on is sent again; the watermark waits for it.
        """
        for partition, part in list(self.parts.items()):
            for unit, inflight in part.inflight.items():
                acked: int | None = None
                while inflight and all(s.future.done() for s in inflight[0][1]):
                    tick_ms, sent = inflight[0]
                    failed = [s for s in sent if s.future.cancelled() or s.future.exception() is not None]
                    if failed:
                        self.stats.failed_sends += record_count(failed)
                        log.warning(
                            "resending %d unacknowledged fires of partition %d",
                            record_count(failed),
                            partition,
                        )
                        inflight[0] = (
                            tick_ms,
                            [await self._resend(one, r) for one in failed for r in one.records],
                        )
                        break
                    inflight.popleft()
                    acked = tick_ms
                if acked is not None and acked > part.saved.get(unit, -1):
                    part.saved[unit] = acked
                    self._save_progress(partition, unit, acked)
                    self._drop_fired(partition, part, unit, acked)

    async def drain(self, timeout_s: float = 5.0) -> None:
        """Wait (bounded) until every fire produced so far is acknowledged, then persist the watermarks:
        a clean handover then gives the next owner nothing to repeat."""
        pending = [
            s.future
            for part in self.parts.values()
            for q in part.inflight.values()
            for _, sent in q
            for s in sent
        ]
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)
        await self.flush_progress()

    async def _resend(
        self, sent: Sent, record: tuple[bytes, bytes, int]
    ) -> Sent:  # (never transactional: a failed transaction is redone whole)
        key, value, _ = record
        return single(await self._send(sent.topic, key, value), sent.topic, key, value)

    async def run(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            if self._hold is not None and not await self._hold():
                continue
            try:
                await self.flush_progress()
            except Exception:
                log.exception("saving fire progress failed")
