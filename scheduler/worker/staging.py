"""Staging: an instant's fires taken off the partitions' heaps ahead of it (punctuator.py's module doc).

Up to STAGE_AHEAD_MS before an instant (or at it, for what was armed later) its entries are taken off the
heaps of every owned partition, earliest instant first: each one's next due is written to the index (and
pushed, if within the horizon), and its FiredTask bytes are built but for `firedAt` (`Staged`). The
punctuator fires what is staged when its instant comes (emitter.py). A forward jump of the wall clock
(`jumps`, told by the punctuator) turns the dues it passed over into catch-ups, planned by each schedule's
policy, as after a restart."""

from __future__ import annotations

import heapq
from collections.abc import Callable

from scheduler.domain.model import TimeUnit
from scheduler.domain.triggers import plan_catch_up
from scheduler.domain.triggers.base import TimeTrigger
from scheduler.kafka.due_index import DueIndex, due_key
from scheduler.worker.armed import Armed, Instant
from scheduler.worker.counters import FireCounts, count_missed
from scheduler.worker.emitter import Emitter
from scheduler.worker.held import (
    LEAVING,
    Compiled,
    Held,
    Staged,
    Unreadable,
    forget,
    loaded_until,
    seq_of,
)
from scheduler.worker.horizon import Horizon, Load

#: a schedule that fired stays in memory when its next due is within this much past the horizon: one that
#: fires every minute or more often is not read and compiled again for each fire (memory then holds the
#: schedules that fire within ~2 minutes: it grows with the fire rate, not with the number of schedules)
KEEP_MS = 120_000

#: (part, unit, key, path, due) -> armed in memory (Punctuator._push)
Push = Callable[[Held, TimeUnit, bytes, str, int], None]


class Stager:
    """The punctuator's staged fires: per unit, a heap of their distinct dues and due -> the fires due then
    (a burst of 10k at one instant is one heap entry, not 10k)."""

    def __init__(
        self,
        parts: dict[int, Held],
        index: DueIndex,
        horizon: Horizon,
        emitter: Emitter,
        stats: FireCounts,
        load: Load,
        push: Push,
        is_excluded: Callable[[Compiled, int], bool],
    ) -> None:
        self._parts = parts
        self._index = index
        self._horizon = horizon
        self._emitter = emitter
        self._stats = stats
        self._load = load
        self._push = push
        self._is_excluded = is_excluded
        self.staged: dict[TimeUnit, tuple[list[int], dict[int, list[Staged]]]] = {
            u: ([], {}) for u in TimeUnit
        }
        # per unit: a forward clock jump's span (from, to]: dues in it follow their catch-up policy
        self.jumps: dict[TimeUnit, tuple[int, int]] = {}

    def first(self, unit: TimeUnit) -> int | None:
        """The earliest staged instant of `unit` (None: nothing staged)."""
        dues = self.staged[unit][0]
        return dues[0] if dues else None

    def late(self, now: int) -> bool:
        """Whether a fire due by `now` is staged and not sent yet (of any unit)."""
        return any(dues and dues[0] <= now for dues, _ in self.staged.values())

    def floor(self) -> int | None:
        """The earliest instant staged, of any unit (None: nothing staged)."""
        firsts = [dues[0] for dues, _ in self.staged.values() if dues]
        return min(firsts) if firsts else None

    def overdue(
        self, partition: int, part: Held, key: bytes, entry: Compiled, dues: list[tuple[str, int]]
    ) -> None:
        """A command replaced `entry` while these (path, due) of it were armed and due already (the timer
        late), and the new version does not come due there: they are staged as they are, fired as that
        version (they were due before the change: held.still_due keeps them at their emission)."""
        for path, due in dues:
            trigger = entry.leaf(path)
            if trigger is None or (entry.calendars and self._is_excluded(entry, due)):
                continue
            head, tail = entry.parts(due) if entry.parts is not None else (None, None)
            dues_of, items = self.staged[trigger.unit]
            at_due = items.get(due)
            if at_due is None:
                at_due = items[due] = []
                heapq.heappush(dues_of, due)
            at_due.append(Staged(partition, part, key, path, entry, -1, False, False, head, tail))

    async def stage(self, unit: TimeUnit, until: int, limit: int | None) -> int:
        """Take up to `limit` (None: all) entries due at or before `until` off the heaps, earliest first:
        index (and push) each one's next due, build its bytes but for firedAt. Returns how many were taken."""
        writes: dict[int, list[tuple[bytes, bytes | None]]] = {}
        try:
            return await self._stage_into(unit, until, limit, writes)
        finally:  # (what was taken is staged: its next dues must be in the index whatever happens next)
            for partition, batch in writes.items():
                self._index.write(partition, batch)

    async def _stage_into(
        self,
        unit: TimeUnit,
        until: int,
        limit: int | None,
        writes: dict[int, list[tuple[bytes, bytes | None]]],
    ) -> int:
        taken = 0
        jump = self.jumps.get(unit)
        heads = [(part.heaps[unit], partition, part) for partition, part in self._parts.items()]
        # The partitions' armed entries merged: the earliest instant first, the first partition's on a tie,
        # an instant of one partition taken whole (what is taken re-arms later: it never joins the instant
        # being taken; what a command arms meanwhile at that instant is taken after it, as its seq is).
        while limit is None or taken < limit:
            found, found_at = None, 0
            for i, head in enumerate(heads):
                dues_of = head[0].dues
                if dues_of and dues_of[0] <= until and (found is None or dues_of[0] < found):
                    found, found_at = dues_of[0], i
            if found is None:
                break
            armed, partition, part = heads[found_at]
            due, instant = armed.take()
            if limit is not None and len(instant) > limit - taken:
                armed.put_back(due, instant.cut(limit - taken))
            taken += len(instant)
            await self._stage_instant(unit, armed, partition, part, due, instant, jump, writes)
        if jump is not None and limit is None and until >= jump[1]:
            del self.jumps[unit]  # every due of the span was taken
        return taken

    async def _stage_instant(
        self,
        unit: TimeUnit,
        armed: Armed,
        partition: int,
        part: Held,
        due: int,
        instant: Instant,
        jump: tuple[int, int] | None,
        writes: dict[int, list[tuple[bytes, bytes | None]]],
    ) -> None:
        """Stage a partition's entries of one instant, taken off `armed` (what a failure leaves is put back)."""
        dues, by_due = self.staged[unit]
        at_due: list[Staged] | None = None
        at = 0
        try:
            for seq, key, path in zip(instant.seqs, instant.keys, instant.paths):
                at += 1
                if seq_of(part, key, path) != seq:
                    continue  # superseded by an update, disabled or deleted
                try:
                    entry = part.compiled.get(key) or self._horizon.compile_loaded(part, partition, key)
                except Unreadable:
                    at -= 1  # (not fired: kept for when it is readable)
                    raise
                trigger = None if entry is None else entry.leaf(path)
                if entry is None or (trigger is None and path not in entry.elapsed):
                    part.live.pop(key, None)
                    continue
                if jump is not None and trigger is not None and jump[0] < due <= jump[1]:
                    await self._jumped_over(
                        unit, partition, part, key, path, entry, trigger, due, jump[1], writes
                    )
                    continue
                # stays: its next due is in memory too (an elapsed trigger is re-armed by its agent); a
                # time trigger's index entry moves on to its next due now (this one's: once the watermark passes it)
                stays = False
                if trigger is not None:
                    nxt = trigger.next_due(due)
                    if nxt is not None:
                        stays = self.moved(partition, part, unit, key, path, entry, nxt, writes)
                if entry.calendars and trigger is not None and self._is_excluded(entry, due):
                    if not stays:
                        forget(part, key, path, seq)
                    continue
                if not stays and trigger is not None:  # leaves memory once fired: the loader arms the next
                    part.live[key][path] = (seq, LEAVING)
                head, tail = entry.parts(due) if entry.parts is not None else (None, None)
                item = Staged(partition, part, key, path, entry, seq, trigger is None, not stays, head, tail)
                if at_due is None:
                    at_due = by_due.get(due)
                    if at_due is None:
                        at_due = by_due[due] = []
                        heapq.heappush(dues, due)
                at_due.append(item)
        finally:  # (a failure keeps what was not taken yet armed, as it was)
            if at < len(instant):
                armed.put_back(due, instant.cut(at))
            armed.recycle(instant)

    def moved(
        self,
        partition: int,
        part: Held,
        unit: TimeUnit,
        key: bytes,
        path: str,
        entry: Compiled,
        nxt: int,
        writes: dict[int, list[tuple[bytes, bytes | None]]],
    ) -> bool:
        """A time trigger's next due: into the index (written at the end of the stage), and into memory when
        the horizon holds it already. Returns whether it is in memory."""
        raw = due_key(unit, nxt, key, path, entry.version)
        batch = writes.get(partition)
        if batch is None:
            batch = writes[partition] = []
        batch.append((raw, entry.created))
        loaded = part.loaded[unit]
        if raw < loaded or nxt <= loaded_until(loaded) + KEEP_MS:  # (the loader skips it: same due)
            self._push(part, unit, key, path, nxt)
            return True
        return False

    async def _jumped_over(
        self,
        unit: TimeUnit,
        partition: int,
        part: Held,
        key: bytes,
        path: str,
        entry: Compiled,
        trigger: TimeTrigger,
        due: int,
        now: int,
        writes: dict[int, list[tuple[bytes, bytes | None]]],
    ) -> None:
        """A forward clock jump passed `due`: plan it and what follows up to `now` as a catch-up."""
        state = entry.state or self._load(partition, key)
        if state is None:
            part.live.pop(key, None)
            return
        s = state.schedule
        plan = plan_catch_up(trigger, s.catch_up, due - 1, now, s.catch_up_window_ms)
        futures = [
            await self._emitter.fire(partition, key, entry, path, d, now, missed=missed, catch_up=True)
            for d, missed in plan.fires
        ]
        count_missed(self._stats.missed, s.catch_up, plan)
        self._stats.catch_up_by_unit[unit] += len(futures)
        if futures:  # moves no watermark by itself: the next recorded tick covers it
            part.inflight[unit].append((part.high.get(unit, due - 1), futures))
        seq = seq_of(part, key, path)
        if plan.next_due is None or not self.moved(
            partition, part, unit, key, path, entry, plan.next_due, writes
        ):
            forget(part, key, path, seq)
