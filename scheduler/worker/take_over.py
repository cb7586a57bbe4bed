"""A partition taken over (Punctuator.assign): its due-time index built when it is not complete (a data dir
from before the index, or one that may have lost writes), and what the index holds due at or before now
caught up from the partition's watermark by each schedule's catch-up policy, before the timers fire it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from scheduler.domain.model import ScheduleState, TimeUnit
from scheduler.domain.triggers import plan_catch_up
from scheduler.kafka.due_index import COMPLETE, DueIndex, due_key
from scheduler.kafka.transactions import PartitionGone
from scheduler.worker.counters import FireCounts, count_missed
from scheduler.worker.emitter import Emitter
from scheduler.worker.held import Compiled, Held, Sent, compile_schedule, index_writes
from scheduler.worker.horizon import Horizon


class TakeOver:
    def __init__(
        self,
        parts: dict[int, Held],
        index: DueIndex,
        horizon: Horizon,
        emitter: Emitter,
        stats: FireCounts,
        is_excluded: Callable[[Compiled, int], bool],
    ) -> None:
        """`parts`: the punctuator's partitions (its own dict, shared); `is_excluded`: whether a calendar
        holds an instant (counted: it is not fired)."""
        self._parts = parts
        self.index = index
        self._horizon = horizon
        self._emitter = emitter
        self._stats = stats
        self._is_excluded = is_excluded
        self.caught_up_entries = 0  # index entries the catch-up scans read (by the thousand)

    async def build_index(
        self, partition: int, states: Iterable[tuple[bytes, ScheduleState]], fired_up_to: dict[TimeUnit, int]
    ) -> int:
        """Index every schedule of the partition (its next dues after the watermarks) and mark the index
        complete: a data dir from before the index, or one whose index may have lost writes. Returns how
        many schedules it read."""
        writes: list[tuple[bytes, bytes | None]] = []
        n = 0
        for n, (key, state) in enumerate(states, 1):
            writes += index_writes(key, state, fired_up_to.get)
            if n % 1000 == 0:
                self.index.write(partition, writes)
                writes = []
                await asyncio.sleep(0)  # keep the event loop (heartbeats, web) responsive
        writes.append((COMPLETE, b""))
        self.index.write(partition, writes)
        return n

    async def scan(
        self,
        partition: int,
        part: Held,
        unit: TimeUnit,
        now: int,
        watermark: int | None,
        out: list[Sent],
    ) -> None:
        """The partition's index entries of `unit` due at or before now: each live one is caught up from the
        watermark by its schedule's policy and moved to its next due; the stale ones (another version,
        disabled, deleted) and the leftovers (a fired entry the watermark had not covered yet when the
        previous owner stopped) are deleted."""
        handled: dict[tuple[bytes, str], int | None] = {}  # (schedule, path) -> its next due
        writes: list[tuple[bytes, bytes | None]] = []
        for n, e in enumerate(self.index.scan(partition, unit, b"", now)):
            if n % 1000 == 999:
                self.index.write(partition, writes)
                writes = []
                self.caught_up_entries += 1000  # (the group's watchdog: a long take-up is progress)
                await asyncio.sleep(0)
                self.still_owned(partition, part)
            where = (e.key, e.path)
            if where in handled:
                if handled[where] != e.due:
                    writes.append((e.raw, None))
                continue
            state = self._horizon.loaded(partition, e.key)
            if state is None or not state.firing or not e.names(state.created_at, state.version):
                writes.append((e.raw, None))
                continue
            entry = part.compiled.get(e.key)
            if entry is None or entry.version != state.version:
                entry = compile_schedule(state, e.key)
            trigger = entry.leaf(e.path)
            if trigger is None:
                writes.append((e.raw, None))
                continue
            since = state.active_since - 1 if watermark is None else max(watermark, state.active_since - 1)
            plan = plan_catch_up(
                trigger, state.schedule.catch_up, since, now, state.schedule.catch_up_window_ms
            )
            for due, missed in plan.fires:
                if self._is_excluded(entry, due):
                    continue
                out.append(
                    await self._emitter.fire(
                        partition, e.key, entry, e.path, due, now, missed=missed, catch_up=True
                    )
                )
                self.still_owned(partition, part)
            count_missed(self._stats.missed, state.schedule.catch_up, plan)
            handled[where] = plan.next_due
            if plan.next_due is not None:
                writes.append((due_key(unit, plan.next_due, e.key, e.path, e.version), entry.created))
        self.index.write(partition, writes)

    def still_owned(self, partition: int, part: Held) -> None:
        """After an await of an assignment's catch-up: the partition was not revoked (nor assigned again)
        meanwhile. A scan that went on would read a store closed under it (Unreadable) and write its
        index entries into the next ownership's."""
        if self._parts.get(partition) is not part:
            raise PartitionGone(f"partition {partition} was revoked while it was caught up")
