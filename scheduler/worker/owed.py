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

import contextlib
from collections.abc import Callable, Collection, Iterator
from typing import NamedTuple

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


class Before(NamedTuple):
    """What the commands before one left for its schedule key in the partition (Held.owed, Held.unsure,
    Held.settled), taken out by it: it puts back what still holds."""

    owed: list[Owing] | None
    unsure: list[Unsure] | None
    settled: dict[Due, Compiled | None] | None

    @classmethod
    def take(cls, part: Held, key: bytes) -> Before:
        return cls(
            part.owed.pop(key, None) if part.owed else None,
            part.unsure.pop(key, None) if part.unsure else None,
            part.settled.pop(key, None) if part.settled else None,
        )


#: no command before left anything for the key
NOTHING_BEFORE = Before(None, None, None)


def window_dues(
    marks: dict[TimeUnit, int], state: ScheduleState | None, now: int, ahead_ms: int
) -> list[Due]:
    """The instants after `now` and at or before their unit's mark (at most `ahead_ms` ahead: sent, or being
    sent, ahead) that `state` comes due at."""
    out: list[Due] = []
    if state is None or not state.firing or not any(now <= m <= now + ahead_ms for m in marks.values()):
        return out  # (most commands: no instant sent ahead or being sent; its time leaves are not built)
    for path, trigger in state.time_leaves():
        unit = trigger.unit
        mark = marks.get(unit)
        if mark is None or not now <= mark <= now + ahead_ms:
            continue
        due = trigger.next_due(max(now, state.active_since) - 1)
        while due is not None and due <= mark:
            out.append((unit, path, due))
            due = trigger.next_due(due)
    return out


def owed_dues(
    marks: dict[TimeUnit, int],
    state: ScheduleState,
    previous: ScheduleState | None,
    now: int,
    ahead_ms: int,
    sending: dict[TimeUnit, int] | None = None,
    before: Before = NOTHING_BEFORE,
    armed: Collection[tuple[str, int]] = (),
) -> tuple[list[Due], list[Due]]:
    """Of the instants of the window (window_dues) the new state comes due at: (owed, unsure). Owed:
    `previous` did not come due there, its fire there was owed itself (`before.owed`), or was still armed
    there, not staged (`armed`: (path, due); it is never sent now). Unsure: `previous` came due at an instant
    being sent (`sending`), whose fire may not be emitted yet (a replaced version's staged fire is dropped
    then: the fire becomes owed, Owed.dropped), or was unsure itself (`before.unsure`). `before.settled`:
    what a version before `previous` fired there (None) or may have (not None: unsure), `previous` not
    coming due there itself."""
    owed: list[Due] = []
    unsure: list[Due] = []
    dues = window_dues(marks, state, now, ahead_ms)
    if not dues:
        return owed, unsure  # (most commands: nothing of the window; what came before is not looked at)
    was_owed = {one for _, one in before.owed or ()}
    was_unsure = {one for _, one, _ in before.unsure or ()}
    settled = before.settled or {}
    for one in dues:
        unit, path, due = one
        if one in was_owed or (path, due) in armed:
            owed.append(one)
        elif one in was_unsure:
            unsure.append(one)
        elif one in settled:
            if settled[one] is not None:
                unsure.append(one)
        elif not fired_before(previous, path, due):
            owed.append(one)
        elif sending is not None and sending.get(unit) == due:
            unsure.append(one)
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
        before = Before.take(part, key)
        was_owed, was_unsure, was_settled = before
        marks = self.marks(part) if marks is None else marks
        owed: list[Due] = []
        unsure: list[Due] = []
        if state is not None:
            owed, unsure = owed_dues(marks, state, previous, now, self._ahead_ms, self.sending, before, armed)
        self._settle_on(part, key, state, previous, now, marks, armed, replaced, before)
        new = set(owed) | set(unsure)
        # (what an earlier command made owed or unsure at an instant that came by this write stays as it was)
        owing = [(st, one) for st, one in was_owed or () if one[2] <= now and one not in new]
        if state is not None:
            owing += [(state, one) for one in owed]
        if owing:
            part.owed[key] = owing
        deciding: dict[Due, Compiled | None] = {
            one: entry for one, entry in (was_settled or {}).items() if entry is not None
        }
        deciding.update((one, entry) for _, one, entry in was_unsure or ())
        unsure_now = [(st, one, e) for st, one, e in was_unsure or () if one[2] <= now and one not in new]
        if state is not None:
            # (the staged fire that decides: the replaced version's, or what decided already)
            unsure_now += [(state, one, deciding.get(one, replaced)) for one in unsure]
        if unsure_now:
            part.unsure[key] = unsure_now

    def _settle_on(
        self,
        part: Held,
        key: bytes,
        state: ScheduleState | None,
        previous: ScheduleState | None,
        now: int,
        marks: dict[TimeUnit, int],
        armed: Collection[tuple[str, int]],
        replaced: Compiled | None,
        before: Before,
    ) -> None:
        """Held.settled after a command: the instants of the window the new state does not come due at,
        where a version before it fired (None) or may have (the compiled version whose staged fire decides):
        a later command whose version comes due there again owes nothing there (or is unsure). Else an
        UPDATE that moved the schedule off the instant its fire was sent at, then one that moved it back,
        owed it a second time (test_fire_once_through_updates found it)."""
        window = window_dues(marks, previous, now, self._ahead_ms)
        if not window and not before.settled:
            return  # (most commands: no instant sent ahead or being sent)
        coming = set(window_dues(marks, state, now, self._ahead_ms))
        settled = {one: c for one, c in (before.settled or {}).items() if one[2] >= now and one not in coming}
        owing = {one for _, one in before.owed or ()}
        unsure = {one: c for _, one, c in before.unsure or ()}
        for one in window:
            unit, path, due = one
            if one in coming or one in settled or one in owing or (path, due) in armed:
                continue  # (owed by it, or never sent: not fired)
            if one in unsure:
                settled[one] = unsure[one]
            elif self.sending.get(unit) == due:
                settled[one] = replaced
            else:
                settled[one] = None
        if settled:
            part.settled[key] = settled

    def deleted(
        self,
        part: Held,
        key: bytes,
        previous: ScheduleState,
        replaced: Compiled | None,
        armed: list[tuple[str, int]],
        now: int,
        late: bool,
    ) -> None:
        """A command deleted the schedule (`previous`) at `now`: while an instant is sent ahead, being sent
        or late (`late`: a staged fire due by now), an INSERT of it again replaces it (Held.removed)."""
        until = max(self.marks(part).values(), default=now)
        if until >= now or late:
            part.removed[key] = (previous, replaced, armed, max(until, now))

    def reinserted(
        self, part: Held, key: bytes, now: int
    ) -> tuple[ScheduleState, Compiled | None, list[tuple[str, int]], int] | None:
        """What an INSERT of the schedule at `now` replaces: what a DELETE of it took out while an instant
        it concerns was sent ahead, being sent or late (None: nothing)."""
        removed = part.removed.pop(key, None) if part.removed else None
        return None if removed is None or removed[3] < now else removed

    @contextlib.contextmanager
    def emitting(self, unit: TimeUnit, due: int) -> Iterator[None]:
        """The instant `due` is emitted (sent ahead, or at a late tick): it is being sent meanwhile, and
        once it was, what is unsure there was fired (sent); a send ahead says so itself. A late tick's
        instant like a sent one: a command written at its very millisecond while its fires are sent is due
        after it, and owes it only if its replaced version did not fire there (before, its version came due
        there again)."""
        ahead = self.sending.get(unit)
        self.sending[unit] = due
        try:
            yield
        finally:
            if ahead is None:
                self.sending.pop(unit, None)
            else:
                self.sending[unit] = ahead
        if due != ahead:
            self.sent(unit, due)

    def dropped(self, part: Held, key: bytes, path: str, due: int, entry: Compiled) -> None:
        """A staged fire of `entry` was dropped at its emission (its schedule was written since it was
        staged): a fire unsure there that this one decides is owed. (An older version's staged fire there is
        dropped too, whether the one that decides is sent or not: test_fire_once_through_updates found that
        duplicate.)"""
        settled = part.settled.get(key)
        if settled is not None:  # (not fired there: a later version that comes due there owes it)
            for one in [one for one, c in settled.items() if c is entry and one[1] == path and one[2] == due]:
                del settled[one]
            if not settled:
                del part.settled[key]
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
            for settled in part.settled.values():  # (what may have been fired there was)
                for one, c in settled.items():
                    if c is not None and one[0] is unit and one[2] == due:
                        settled[one] = None
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
        if part.settled:  # (instants no command from now on can come due at: past)
            kept = {key: {one: c for one, c in v.items() if one[2] >= now} for key, v in part.settled.items()}
            part.settled = {key: v for key, v in kept.items() if v}
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
