"""Fires a command makes owed at an instant its partition's fires were sent ahead of, or are being sent.

With transactions the punctuator sends an instant's fires SEND_AHEAD_MS before it and holds the partition's
transaction until the instant (punctuator.py, Transactions.hold); the partition's watermark (Held.high)
says the instant is fired as soon as they are sent. A schedule a command writes from the moment the
instant begins to be sent (`sending`) computes its index entries after the instant (Punctuator.upsert), so
nothing arms it there again. When it comes due at that instant, its fire there is owed unless the version
it replaced fired there: owed fires are sent into the partition's open transaction before it commits
(settle, from the commit's before_commit), so they commit with the watermark that covers them, at the
instant, or not at all (a partition given up takes the command with it: its next owner applies the
command again, from before that watermark).

While the instant is being sent, whether the replaced version fired there is not known yet: its staged fire
is emitted, or dropped at its emission because its schedule was written since (Emitter.emit_due). Such a
fire is unsure (Held.unsure): owed if the staged one is dropped (dropped), forgotten once the instant was
sent (sent). A fire owed or unsure stays so through later commands that still come due there, and, once
its instant came, through any later command (an update, a delete): it was due before that command, so it is
sent all the same, as the version that owed it (as a staged fire is: held.still_due). Stop 81's CI showed
why: an update while the instant was sent made fires owed, and a second update after the instant, before
the partition's commit settled them, took them back: 32 instants missed.

A watermark above the clock by more than the send-ahead (the wall clock stepped back) owes nothing: the
dues it passed are skipped, as without sending ahead."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

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


#: (unit, trigger path, due instant) of one fire
Due = tuple[TimeUnit, str, int]
#: a fire owed and the state that owes it
Owing = tuple[ScheduleState, Due]
#: a fire unsure, the state that would owe it, and the compiled version whose staged fire there decides
#: (owed if that one is dropped at its emission: an older version's staged fire dropped there decides nothing)
Unsure = tuple[ScheduleState, Due, Compiled | None]


def owed_dues(
    marks: dict[TimeUnit, int],
    state: ScheduleState,
    previous: ScheduleState | None,
    now: int,
    ahead_ms: int,
    sending: dict[TimeUnit, int] | None = None,
    was_owed: Sequence[Due] = (),
    was_unsure: Sequence[Due] = (),
    armed: Collection[tuple[str, int]] = (),
) -> tuple[list[Due], list[Due]]:
    """The instants after `now` and at or before their unit's mark (at most `ahead_ms` ahead: sent, or being
    sent, ahead) that the new state comes due at: (owed, unsure). Owed: `previous` did not come due there,
    its fire there was owed itself (`was_owed`), or was still armed there, not staged (`armed`: (path,
    due); it is never sent now). Unsure: `previous` came due at an instant being sent (`sending`), whose
    fire may not be emitted yet (a replaced version's staged fire is dropped then: the fire becomes owed,
    Owed.dropped), or was unsure itself."""
    owed: list[Due] = []
    unsure: list[Due] = []
    if not state.firing:
        return owed, unsure
    for path, trigger in state.time_leaves():
        unit = trigger.unit
        mark = marks.get(unit)
        if mark is None or not now <= mark <= now + ahead_ms:
            continue
        due = trigger.next_due(max(now, state.active_since) - 1)
        while due is not None and due <= mark:
            one = (unit, path, due)
            if one in was_owed or (path, due) in armed:
                owed.append(one)
            elif one in was_unsure:
                unsure.append(one)
            elif not fired_before(previous, path, due):
                owed.append(one)
            elif sending is not None and sending.get(unit) == due:
                unsure.append(one)
            due = trigger.next_due(due)
    return owed, unsure


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
        #: per unit, the instant being sent ahead now (Punctuator._send_ahead): its watermark not moved yet
        self.sending: dict[TimeUnit, int] = {}

    def marks(self, part: Held) -> dict[TimeUnit, int]:
        """Per unit, what a command's dues come after: the partition's watermark, or the instant being sent."""
        if not self.sending:
            return part.high
        marks = dict(part.high)
        for unit, due in self.sending.items():
            if due > marks.get(unit, due - 1):
                marks[unit] = due
        return marks

    def owe(
        self,
        part: Held,
        key: bytes,
        state: ScheduleState | None,
        previous: ScheduleState | None,
        now: int,
        armed: Collection[tuple[str, int]] = (),
        marks: dict[TimeUnit, int] | None = None,
        replaced: Compiled | None = None,
    ) -> None:
        """A command wrote the schedule at `now` (`state`; None: deleted): what an earlier command of it made
        owed (or unsure) at an instant still to come is not any more, and what this one makes owed (or
        unsure) is; what was owed (or unsure) at an instant that came by `now` stays so, as it was. `armed`:
        the (path, due) `previous` was armed at in memory, not staged (owed_dues); `marks`:
        self.marks(part), when the caller has it; `replaced`: `previous` compiled, as memory held it (its
        staged fire decides what is unsure)."""
        was_owed = part.owed.pop(key, None) if part.owed else None
        was_unsure = part.unsure.pop(key, None) if part.unsure else None
        owed: list[Due] = []
        unsure: list[Due] = []
        if state is not None:
            owed, unsure = owed_dues(
                self.marks(part) if marks is None else marks,
                state,
                previous,
                now,
                self._ahead_ms,
                self.sending,
                () if was_owed is None else [one for _, one in was_owed],
                () if was_unsure is None else [one for _, one, _ in was_unsure],
                armed,
            )
        new = set(owed) | set(unsure)
        # (what an earlier command made owed or unsure at an instant that came by this write stays as it was)
        owing = [(st, one) for st, one in was_owed or () if one[2] <= now and one not in new]
        if state is not None:
            owing += [(state, one) for one in owed]
        if owing:
            part.owed[key] = owing
        deciding = {one: entry for _, one, entry in was_unsure or ()}
        unsure_now = [(st, one, e) for st, one, e in was_unsure or () if one[2] <= now and one not in new]
        if state is not None:
            # (the staged fire that decides: the replaced version's, or what decided already)
            unsure_now += [(state, one, deciding.get(one, replaced)) for one in unsure]
        if unsure_now:
            part.unsure[key] = unsure_now

    def dropped(self, part: Held, key: bytes, path: str, due: int, entry: Compiled) -> None:
        """A staged fire of `entry` was dropped at its emission (its schedule was written since it was
        staged): a fire unsure there that this one decides is owed. (An older version's staged fire there is
        dropped too, whether the one that decides is sent or not: test_fire_once_through_updates found that
        duplicate.)"""
        unsure = part.unsure.get(key)
        if unsure is None:
            return
        for at, (state, one, deciding) in enumerate(unsure):
            if one[1] == path and one[2] == due and deciding is entry:
                del unsure[at]
                if not unsure:
                    del part.unsure[key]
                part.owed.setdefault(key, []).append((state, one))
                return

    def sent(self, unit: TimeUnit, due: int) -> None:
        """The instant `due` of `unit` was sent: every staged fire of it was emitted or dropped, so what is
        still unsure there was fired."""
        for part in self._parts.values():
            if part.unsure:
                for key in list(part.unsure):
                    left = [one for one in part.unsure[key] if one[1][0] is not unit or one[1][2] != due]
                    if left:
                        part.unsure[key] = left
                    else:
                        del part.unsure[key]

    async def settle(self, partition: int) -> None:
        """Send what the partition owes into its open transaction (before it commits); a send that fails
        raises, and the partition is given up uncommitted."""
        part = self._parts.get(partition)
        if part is None:
            return
        now = self._clock()
        if part.removed:  # (what no INSERT from now on replaces)
            part.removed = {key: one for key, one in part.removed.items() if one[3] >= now}
        if not part.owed:
            return
        owed, part.owed = part.owed, {}
        for key, owing in owed.items():
            compiled: dict[int, Compiled] = {}  # (per state that owes: one, in the common case)
            for state, (unit, path, due) in owing:
                entry = compiled.get(id(state))
                if entry is None:
                    entry = compiled[id(state)] = compile_schedule(state, key)
                if entry.calendars and self._is_excluded(entry, due):
                    continue
                sent = await self._emitter.fire(partition, key, entry, path, due, now)
                self._stats.fires_by_unit[unit] += 1
                part.inflight[unit].append((max(due, part.high.get(unit, due)), [sent]))
