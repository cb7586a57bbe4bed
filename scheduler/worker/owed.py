"""Fires a command makes owed at an instant its partition's fires were already sent ahead of.

With transactions the punctuator sends an instant's fires SEND_AHEAD_MS before it and holds the partition's
transaction until the instant (punctuator.py, Transactions.hold); the partition's watermark (Held.high)
says the instant is fired as soon as they are sent. A schedule a command writes in those milliseconds
computes its index entries after the watermark (Punctuator.upsert), as it must: a watermark covers only
what was fired. When such a schedule comes due at that instant, and the version it replaces did not (it
was fired there already), the instant's fire is owed: it is sent into the partition's open transaction
before that transaction commits (settle, from the commit's before_commit), so it commits with the
watermark that covers it, at the instant, or not at all (a partition given up takes the command with it:
its next owner applies the command again, from before that watermark).

A watermark above the clock by more than the send-ahead (the wall clock stepped back) owes nothing: the
dues it passed are skipped, as without sending ahead."""

from __future__ import annotations

from collections.abc import Callable

from scheduler.domain.model import ScheduleState, TimeUnit
from scheduler.worker.counters import FireCounts
from scheduler.worker.emitter import Clock, Emitter
from scheduler.worker.held import Compiled, Held, compile_schedule


def fired_before(previous: ScheduleState | None, path: str, due: int) -> bool:
    """Whether the version a command replaced came due at `due` on the trigger at `path` (so it fired
    there, if the instant was sent ahead)."""
    if previous is None or not previous.firing:
        return False
    for leaf, trigger in previous.time_leaves():
        if leaf == path:
            return trigger.next_due(max(due, previous.active_since) - 1) == due
    return False


def owed_dues(
    high: dict[TimeUnit, int],
    state: ScheduleState,
    previous: ScheduleState | None,
    now: int,
    ahead_ms: int,
) -> list[tuple[TimeUnit, str, int]]:
    """(unit, path, due) of each instant after `now` and at or before its unit's watermark (at most
    `ahead_ms` ahead: sent ahead) that the new state comes due at and `previous` did not."""
    if not state.firing:
        return []
    out = []
    for path, trigger in state.time_leaves():
        unit = trigger.unit
        mark = high.get(unit)
        if mark is None or not now <= mark <= now + ahead_ms:
            continue
        due = trigger.next_due(max(now, state.active_since) - 1)
        while due is not None and due <= mark:
            if not fired_before(previous, path, due):
                out.append((unit, path, due))
            due = trigger.next_due(due)
    return out


class Owed:
    """The punctuator's owed fires, per partition in Held.owed (see the module doc)."""

    def __init__(
        self,
        parts: dict[int, Held],
        emitter: Emitter,
        stats: FireCounts,
        is_excluded: Callable[[Compiled, int], bool],
        clock: Clock,
        ahead_ms: int,
    ) -> None:
        self._parts = parts
        self._emitter = emitter
        self._stats = stats
        self._is_excluded = is_excluded
        self._clock = clock
        self._ahead_ms = ahead_ms

    def owe(
        self, part: Held, key: bytes, state: ScheduleState | None, previous: ScheduleState | None, now: int
    ) -> None:
        """A command wrote the schedule (`state`; None: deleted): what an earlier command of it made owed
        is not any more, and what this one makes owed is."""
        if part.owed:
            part.owed.pop(key, None)
        if state is not None and (dues := owed_dues(part.high, state, previous, now, self._ahead_ms)):
            part.owed[key] = (state, dues)

    async def settle(self, partition: int) -> None:
        """Send what the partition owes into its open transaction (before it commits); a send that fails
        raises, and the partition is given up uncommitted."""
        part = self._parts.get(partition)
        if part is None or not part.owed:
            return
        owed, part.owed = part.owed, {}
        now = self._clock()
        for key, (state, dues) in owed.items():
            entry = compile_schedule(state, key)
            for unit, path, due in dues:
                if entry.calendars and self._is_excluded(entry, due):
                    continue
                sent = await self._emitter.fire(partition, key, entry, path, due, now)
                self._stats.fires_by_unit[unit] += 1
                part.inflight[unit].append((max(due, part.high.get(unit, due)), [sent]))
