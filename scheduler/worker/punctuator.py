"""The punctuator: per-time-unit timers that fire due time triggers of the partitions this worker owns.

Every enabled schedule's next due per time trigger is in the due-time index (kafka.due_index: RocksDB,
keyed by the instant, next to the schedules table); in memory, per owned partition and time unit, only a
heap of what comes due within HORIZON_MS, loaded from the index a chunk at a time ahead of it, with the
compiled schedules those entries need. Memory grows with the fires of the next few seconds, not with the
number of schedules; a tick costs O(due schedules); an assignment reads the entries due at or before now
(to catch them up), not every schedule.

Fires are prepared ahead: up to STAGE_AHEAD_MS before an instant comes due, its entries are taken off the
heaps, their next dues written to the index (and pushed, if within the horizon) and their FiredTask bytes
built but for `firedAt` (staging.py); at the instant only `firedAt` is written and the record handed to
the producer.
A burst of 10k schedules due at the same second then costs a few microseconds per fire at the due instant
instead of the whole per-fire work. A staged fire whose schedule changed (or whose partition moved)
before its instant is dropped. Given `hold_commit` (transactions), the fires are sent SEND_AHEAD_MS before
their instant (firedAt = the instant) and the partitions' transactions held until it (Transactions.hold): a
read_committed reader then waits only for the instant's commit. A command applied from when the instant
begins to be sent until it comes is never armed at it: when its schedule comes due there and the version
it replaced did not fire there, it owes that fire, sent into the partition's transaction before that
commits (owed.py, settle).

Progress is a watermark per (partition, unit), "every fire due at or before T has been produced and
acknowledged", written to the fire-progress table once per progress interval, not once per fire. A fired
entry leaves the index once the watermark covers it, never before; a new owner treats dues after the
watermark as missed and applies each schedule's catch-up policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable

from scheduler.domain.model import ScheduleState, TimeUnit
from scheduler.kafka.due_index import DueIndex, bound, elapsed_key
from scheduler.kafka.transactions import PartitionGone
from scheduler.worker.clocks import JumpWatch, wall_clock_ms
from scheduler.worker.counters import FireCounts
from scheduler.worker.emitter import Clock, Emitter, PartitionCount, SendBatch, SendFailed
from scheduler.worker.fire_progress import FireProgress, SaveProgress, Send
from scheduler.worker.held import (
    LEAVING,
    Compiled,
    Held,
    Sent,
    Unreadable,
    compile_schedule,
    due_by,
    has_elapsed,
    index_entries,
    loaded_until,
    next_index_keys,
)
from scheduler.worker.horizon import Horizon, Load
from scheduler.worker.owed import Owed
from scheduler.worker.staging import Stager
from scheduler.worker.take_over import TakeOver

log = logging.getLogger(__name__)

#: (partition, why) -> give the partition up here until it is assigned again (its store is unreadable)
GiveUp = Callable[[int, BaseException], Awaitable[None]]
Excluded = Callable[[str, tuple[str, ...], int], "str | None"]  # (tenant, calendars, instant) -> calendar
#: (unit, partitions) -> awaited once a tick's fires of these partitions were handed to the producer
Fired = Callable[[TimeUnit, list[int]], Awaitable[None]]
#: (partition, time.monotonic()) -> the partition's open transaction commits no earlier than then
HoldCommit = Callable[[int, float], None]


#: how long before an instant comes due its fires are prepared (see the module doc)
STAGE_AHEAD_MS = 500
#: how far ahead of now the due-time index is held in memory (loaded again when less than half is left)
HORIZON_MS = 10_000
#: a schedule written by a command is held in memory at once when it comes due within this much past the
#: horizon (its index entry may wait for its transaction's commit: the loader must not pass it unseen)
UPSERT_MARGIN_MS = 60_000
#: staged per step before checking whether something is due (bounds how long emission can wait)
STAGE_CHUNK = 500
#: with transactions, how long before an instant its fires are sent: their partitions' transactions are
#: held until the instant (Transactions.hold), so a read_committed reader waits only for the commit
SEND_AHEAD_MS = 50
#: behind the clock, the index is loaded this much further per step before what it holds is fired
CATCH_UP_STEP_MS = 1_000


class Punctuator:
    def __init__(
        self,
        send: Send,
        load: Load,
        save_progress: SaveProgress,
        clock: Clock = wall_clock_ms,
        trigger_topic: str = "",
        send_batch: SendBatch | None = None,
        partition_count: PartitionCount | None = None,
        monotonic: Clock | None = None,
        stats: FireCounts | None = None,
        transactional: bool = False,
        work: Callable[[], contextlib.AbstractAsyncContextManager[None]] | None = None,
        hold: Callable[[], Awaitable[bool]] | None = None,
        excluded: Excluded | None = None,
        index: DueIndex | None = None,
        index_put: Callable[[int, list[tuple[bytes, bytes | None]]], None] | None = None,
        give_up: GiveUp | None = None,
        fired: Fired | None = None,
        hold_commit: HoldCommit | None = None,
    ) -> None:
        """`monotonic`: a clock that never jumps, to tell a jump of `clock` from lateness (None: not told).
        `stats`: where the fires are counted (the worker's registry, WorkerCounts.fires).
        `transactional`: each send names its schedule partition (kafka.transactions.owned_by), batches are
        per partition, and the watermarks commit with the fires (pending_marks, committed), not by
        flush_progress. `hold`: asked before each tick's work and each progress flush; False drops it (the
        worker froze past its session: see freeze.py). `excluded`: (tenant, calendar names, instant) -> the
        calendar that holds the instant's day, if one does: such an instant is not fired (counted).
        `index`: the due-time index (default: in memory). `index_put`: how the index writes of a command (a
        schedule's new entries) and of a stale entry's removal are written: with the schedule writes, in
        their write batch and transaction (default: straight into the index). `give_up`: what gives up a
        partition whose store is unreadable (see Unreadable; default: it is only dropped from memory).
        `fired`: awaited inside a tick's unit of work once it handed its fires to the producer, with the
        partitions that fired (transactions: their watermarks go in then, watermarks.py). `hold_commit`:
        (partition, time.monotonic()) -> its open transaction commits no earlier (Transactions.hold); given,
        an instant's fires are sent SEND_AHEAD_MS before it."""
        self._fired = fired
        self._hold_commit = hold_commit
        self._excluded = excluded
        self._give_up = give_up
        self.index = index if index is not None else DueIndex()
        self._index_put = index_put or self.index.write
        self._load = load
        self._clock = clock
        self.transactional = transactional
        # what a tick's staging and emission run inside (Transactions.work: no commit splits a tick)
        self._work = work or contextlib.nullcontext
        self._hold = hold
        self._parts: dict[int, Held] = {}
        #: called once a partition was taken up or given up (the delayed messages' loop wakes: delayed.py)
        self.moved: list[Callable[[], None]] = []
        self._seq = itertools.count()
        self._wakeup = {u: asyncio.Event() for u in TimeUnit}
        # set while no timer is staging, firing or loading: bulk work (a fetch of commands) yields to the
        # timers, so fires stay on time while it goes on (ingest.CommandIngest)
        self.idle = asyncio.Event()
        self.idle.set()
        self._busy: set[TimeUnit] = set()
        self._planned_wake: dict[TimeUnit, int | None] = {u: None for u in TimeUnit}
        self._load_target: dict[TimeUnit, int] = {u: 0 for u in TimeUnit}  # the horizon being loaded
        self.stats = stats if stats is not None else FireCounts()
        self._jump_watch = None if monotonic is None else JumpWatch(monotonic)
        self.horizon = Horizon(self._parts, self.index, self._index_put, load, self._push)
        self.progress = FireProgress(self._parts, self.index, self.stats, save_progress, send, hold)
        self.emitter = Emitter(
            self._parts, send, send_batch, partition_count, clock, self.stats, trigger_topic, transactional
        )
        self.take_over = TakeOver(
            self._parts, self.index, self.horizon, self.emitter, self.stats, self.is_excluded
        )
        self.stager = Stager(
            self._parts,
            self.index,
            self.horizon,
            self.emitter,
            self.stats,
            load,
            self._push,
            self.is_excluded,
        )
        self._staged = self.stager.staged  # (fires taken off the heaps ahead of their instant: staging.py)
        self._jumps = self.stager.jumps
        self.owed = Owed(self._parts, self.emitter, self.stats, self.is_excluded, clock, SEND_AHEAD_MS)
        self.emitter.dropped = self.owed.dropped

    # --- ownership -------------------------------------------------------------------------------

    @property
    def partitions(self) -> set[int]:
        return set(self._parts)

    @property
    def caught_up_entries(self) -> int:
        """Index entries the take-overs' catch-up scans read (by the thousand: the group's watchdog)."""
        return self.take_over.caught_up_entries

    async def assign(
        self,
        partition: int,
        states: Iterable[tuple[bytes, ScheduleState]] | None,
        fired_up_to: dict[TimeUnit, int],
    ) -> int:
        """Take over a partition: catch up what its index holds due since its watermark (`states`: every
        schedule of the partition, when its index is not complete and must be built from them first).
        Returns how many schedules the index was built from (0: it was complete)."""
        built = 0 if states is None else await self.take_over.build_index(partition, states, fired_up_to)
        part = self._parts[partition] = Held(high=dict(fired_up_to))
        now = self._clock()
        catch_up: dict[TimeUnit, list[Sent]] = {u: [] for u in TimeUnit}
        for unit in TimeUnit:
            await self.take_over.scan(partition, part, unit, now, fired_up_to.get(unit), catch_up[unit])
            part.loaded[unit] = bound(unit, now + 1)
        for unit, futures in catch_up.items():
            self.stats.catch_up_by_unit[unit] += len(futures)
            if futures:
                part.inflight[unit].append((now, futures))
        for unit in TimeUnit:
            self._wakeup[unit].set()
        self._moved()
        return built

    def _moved(self) -> None:
        for moved in self.moved:
            moved()

    def is_excluded(self, entry: Compiled, due: int) -> bool:
        """An instant a calendar its schedule excludes holds (counted: it is not fired)."""
        if not entry.calendars or self._excluded is None:
            return False
        tenant, *names = entry.calendars
        if self._excluded(tenant, tuple(names), due) is None:
            return False
        self.stats.excluded += 1
        return True

    def compiled_count(self, partition: int) -> int:
        """How many schedules of the partition are held in memory (those due within the horizon)."""
        part = self._parts.get(partition)
        return 0 if part is None else len(part.compiled)

    def revoke(self, partition: int) -> bool:
        """Forget the partition. Returns whether it owed fires (owed.py): its transaction must not commit."""
        part = self._parts.pop(partition, None)
        self._moved()
        return part is not None and bool(part.owed or part.unsure)

    def clear(self) -> None:
        self._parts.clear()
        self._moved()

    # --- changes from the commands ingest (same partition, same process) --------------------------

    def upsert(
        self, partition: int, key: bytes, state: ScheduleState, previous: ScheduleState | None = None
    ) -> None:
        """A command wrote the schedule (`previous`: the version it replaced): its index entries go with the
        write (index_put); those due within the horizon (or just past it) are held in memory at once; an
        instant sent ahead, or being sent, that it comes due at is owed (owed.py)."""
        part = self._parts.get(partition)
        now = self._clock()
        high = {} if part is None else self.owed.marks(part)  # (or an instant being sent ahead: owed.py)
        removed = None if part is None or previous is not None else self.owed.reinserted(part, key, now)
        if removed is not None:  # (deleted while an instant was sent or late: it replaces what was deleted)
            previous = removed[0]

        def since(unit: TimeUnit) -> int:
            after = max(now, state.active_since) - 1
            return max(after, high.get(unit, after))

        writes, dues = index_entries(key, state, since)
        self._index_put(partition, writes)
        if part is None:
            return  # not (yet) ours: assign() reads the index
        armed, replaced = self._written(partition, part, key, now, {path: nxt for path, _, nxt in dues})
        if removed is not None:
            replaced, armed = removed[1], armed + removed[2]
        if self._hold_commit is not None:
            self.owed.owe(part, key, state, previous, now, armed, high, replaced)
        near = [
            (path, unit, nxt)
            for path, unit, nxt in dues
            if (loaded := part.loaded.get(unit)) is not None
            and nxt <= loaded_until(loaded) + UPSERT_MARGIN_MS
        ]
        if near:  # (compiled when it comes within the horizon otherwise: _compile_loaded)
            part.compiled[key] = compile_schedule(state, key)
            for path, unit, nxt in near:
                self._push(part, unit, key, path, nxt)

    def elapsed_schedules(self, partition: int) -> list[tuple[bytes, ScheduleState]]:
        """The partition's enabled schedules with elapsed triggers or an SLA watchdog (marked in the index)."""
        out = []
        for key in self.index.elapsed(partition):
            state = self._load(partition, key)
            if state is not None and state.firing and has_elapsed(state):
                out.append((key, state))
        return out

    def arm(self, partition: int, key: bytes, path: str, due: int) -> None:
        """Make the elapsed trigger at `path` come due at `due` (replacing what was armed before)."""
        part = self._parts.get(partition)
        if part is not None:
            self._push(part, TimeUnit.SECONDS, key, path, due)

    def remove(self, partition: int, key: bytes, previous: ScheduleState | None = None) -> None:
        """The schedule was deleted (`previous`: as it was). Its index entries are dropped when reached, and
        those at its next two dues now: an INSERT of it again in the same millisecond has its creation, and
        an entry of the deleted version would be taken for the new one's (due_index)."""
        part = self._parts.get(partition)
        now = self._clock()
        writes: list[tuple[bytes, bytes | None]] = [(elapsed_key(key), None)]
        if previous is not None:
            marks = {} if part is None else self.owed.marks(part)
            writes += [(raw, None) for raw in next_index_keys(key, previous, now, marks, 2)]
        self._index_put(partition, writes)
        if part is None:
            return
        armed, replaced = self._written(partition, part, key, now, {})
        if self._hold_commit is not None:
            self.owed.owe(part, key, None, previous, now, armed, None, replaced)
            if previous is not None:
                self.owed.deleted(part, key, previous, replaced, armed, now, self.stager.late(now))

    def _written(
        self, partition: int, part: Held, key: bytes, now: int, firsts: dict[str, int]
    ) -> tuple[list[tuple[str, int]], Compiled | None]:
        """A command wrote the schedule (or deleted it) at `now`; `firsts`: the new version's first due per
        time-trigger path. What memory held of it is not valid any more, but a fire of the version it
        replaced due by now (the timer late), staged or armed, that the new version does not make itself is
        sent all the same, as that version (Stager.overdue, held.still_due). Returns the (path, due) the
        replaced version is left armed at, not staged (never sent now: owed.py), and that version compiled,
        if memory held it."""
        live = part.live.pop(key, None)
        replaced = part.compiled.pop(key, None)
        armed = [] if not live else [(path, due) for path, (_, due) in live.items()]
        if firsts and part.written and (earlier := part.written.get(key)):
            # (what an earlier write replaced fires no instant this version makes itself: a DELETE, then an
            # INSERT due at the instant the deleted version's staged fire is due at)
            for one, (entry, at, due_from) in list(earlier.items()):
                lowest = {path: min(due, due_from.get(path, LEAVING)) for path, due in firsts.items()}
                earlier[one] = (entry, at, {**due_from, **lowest})
        if replaced is None:
            return armed, None
        overdue = [(path, due) for path, due in armed if due <= now and due < firsts.get(path, LEAVING)]
        if overdue:
            # (and the instants after it that were due by now too: the timer late by more than a period)
            self.stager.overdue(partition, part, key, replaced, due_by(replaced, overdue, now, firsts))
            armed = [one for one in armed if one not in overdue]  # (staged now: they are sent)
        if self.stager.late(now):
            part.written.setdefault(key, {})[id(replaced)] = (replaced, now, firsts)
        return armed, replaced

    def _push(self, part: Held, unit: TimeUnit, key: bytes, path: str, due: int) -> None:
        seq = next(self._seq)
        paths = part.live.get(key)  # (not setdefault: its default would be a dict made per fire)
        if paths is None:
            paths = part.live[key] = {}
        paths[path] = (seq, due)
        part.heaps[unit].push(due, seq, key, path)
        planned = self._planned_wake[unit]
        if planned is None or due < planned:
            self._wakeup[unit].set()

    # --- firing -----------------------------------------------------------------------------------

    async def tick(self, unit: TimeUnit) -> None:
        """Fire every schedule of `unit` due at or before now, in every owned partition."""
        now = self._clock()
        self._look_at_clock(now)
        await self.horizon.fill(unit, now + HORIZON_MS)
        async with self._work():
            await self._stage(unit, now, None)
            await self._emit(unit, now)

    async def _stage(self, unit: TimeUnit, until: int, limit: int | None) -> int:
        """Take up to `limit` (None: all) entries due at or before `until` off the heaps (Stager.stage)."""
        return await self.stager.stage(unit, until, limit)

    def _look_at_clock(self, now: int) -> None:
        """Tell a jump of the wall clock from lateness, against the monotonic clock. Forward: the dues the
        jump passed over follow each schedule's catch-up policy, as after a restart (not fired one by one,
        not counted as late). Back: nothing fires again (next dues never go below what was fired)."""
        step = 0 if self._jump_watch is None else self._jump_watch.jump(now)
        if step > 0:
            log.warning("the wall clock jumped %d ms forward: its dues follow their catch-up policy", step)
            self.stats.clock_jumps["forward"] += 1
            expected = now - step
            for unit in TimeUnit:
                start = min(self._jumps[unit][0], expected) if unit in self._jumps else expected
                self._jumps[unit] = (start, now)
                self._wakeup[unit].set()
        elif step < 0:
            log.warning("the wall clock stepped %d ms back: nothing fired fires again", -step)
            self.stats.clock_jumps["backward"] += 1

    async def _emit(self, unit: TimeUnit, now: int) -> list[int]:
        """Fire every staged entry due at or before `now`; record them for the watermark per partition.
        Returns the partitions that fired."""
        dues, by_due = self._staged[unit]
        sent: dict[int, tuple[Held, list[Sent]]] = {}
        fired: list[int] = []
        transactions = self._hold_commit is not None
        try:
            while dues and dues[0] <= now:
                due = dues[0]
                items = by_due[due]
                try:  # (with transactions the instant is being sent: owed.py)
                    with self.owed.emitting(unit, due) if transactions else contextlib.nullcontext():
                        await self.emitter.emit_due(due, items, now, sent)
                except SendFailed as failed:  # the producer refused one: keep the rest staged, retry later
                    by_due[due] = failed.remaining
                    self.progress.record(unit, sent, due - 1)  # the watermark must stay before what is left
                    raise failed.error from None
                heapq.heappop(dues)
                del by_due[due]
            fired = list(sent)
        finally:
            self.progress.record(unit, sent, now)  # (empty after a failure: recorded up to before it above)
            self._prune_written()
        if fired and self._fired is not None:
            await self._fired(unit, fired)
        return fired

    def _prune_written(self) -> None:
        """Forget the writes no staged fire is due before any more (Held.written)."""
        floor = None
        for part in self._parts.values():
            if part.written:
                if floor is None:
                    floor = self.stager.floor()
                    if floor is None:
                        floor = 2**63
                for key, versions in list(part.written.items()):
                    if max(at for _, at, _ in versions.values()) < floor:
                        del part.written[key]

    async def _send_ahead(self, unit: TimeUnit, due: int, now: int) -> None:
        """The instant `due`, SEND_AHEAD_MS or less ahead: whatever of it is not staged yet staged, all of it
        fired now (firedAt = due) with its watermark, and every partition's open transaction held until the
        instant (a failed send's partitions too: what they sent must not be seen early either). What was
        armed at the instant while it was being sent (an elapsed trigger's timer) is sent in the same unit
        of work: no commit can pass the instant's watermark without it. A command's schedule is never armed
        there from when the sending begins (`owed.sending`): it owes its fire there (owed.py)."""
        hold = self._hold_commit
        assert hold is not None
        release = time.monotonic() + (due - now) / 1000
        self.owed.sending[unit] = due  # (a command from now on is not armed at it: it owes it, owed.py)
        try:
            async with self._work():
                try:
                    await self._stage(unit, due, None)
                    await self._emit(unit, due)
                    while (first := self._earliest(unit)) is not None and first <= due:
                        await self._stage(unit, due, None)
                        await self._emit(unit, due)
                finally:  # (inside the unit of work: no commit came between)
                    for partition in self._parts:
                        hold(partition, release)
                    self.owed.sent(unit, due)
        finally:
            self.owed.sending.pop(unit, None)

    def _ahead(self, unit: TimeUnit, now: int, earliest: int | None) -> int | None:
        """The next instant of `unit` if its fires are to be sent ahead of it now, else None. (A command
        after that computes its schedule's dues after the instant, Punctuator.upsert's `high`, and owes its
        fire at the instant: owed.py.)"""
        if self._hold_commit is None or unit in self._jumps:
            return None
        staged = self._staged[unit][0]
        dues = [d for d in (staged[0] if staged else None, earliest) if d is not None]
        return min(dues) if dues and min(dues) <= now + SEND_AHEAD_MS else None

    def overdue(self, late_ms: int = 2_000) -> int:
        """The time units with an instant due more than late_ms ago and not fired yet (liveness.py)."""
        now = self._clock()
        return sum(
            1
            for unit in TimeUnit
            if any(
                due is not None and due < now - late_ms
                for due in (self._earliest(unit), self.stager.first(unit))
            )
        )

    def _earliest(self, unit: TimeUnit) -> int | None:
        dues = [due for part in self._parts.values() if (due := part.heaps[unit].first()) is not None]
        return min(dues) if dues else None

    async def run_timer(self, unit: TimeUnit, idle_s: float = 1.0) -> None:
        """One timer per time unit: prepare what comes due within STAGE_AHEAD_MS, fire it when it is due."""
        wakeup = self._wakeup[unit]
        staged, _ = self._staged[unit]  # the heap of staged dues
        while True:
            self._set_busy(unit, False)
            if self._hold is not None and not await self._hold():
                await asyncio.sleep(0.1)  # (dropped: the partitions' next owner fires what is due)
                continue
            self._set_busy(unit, True)
            now = self._clock()
            self._look_at_clock(now)
            try:
                lowest = self.horizon.lowest_loaded(unit)
                if lowest is not None:
                    if lowest < now + HORIZON_MS // 2:  # half the horizon left: load it whole again
                        self._load_target[unit] = max(self._load_target[unit], now + HORIZON_MS)
                    if lowest < self._load_target[unit]:
                        if lowest < now:  # behind: a restart's backlog, a stall, a clock jump
                            await self._catch_up_step(unit, lowest, now)
                            continue
                        self.horizon.load(unit, self._load_target[unit])
                        await asyncio.sleep(0)
                earliest = self._earliest(unit)
                if staged and staged[0] <= now or (earliest is not None and earliest <= now):
                    async with self._work():
                        await self._stage(unit, now, None)  # whatever is due and not staged yet, first
                        await self._emit(unit, now)
                    continue
                ahead = self._ahead(unit, now, earliest)
                if ahead is not None:
                    await self._send_ahead(unit, ahead, now)
                    continue
                if earliest is not None and earliest <= now + STAGE_AHEAD_MS:
                    async with self._work():  # (a clock jump's catch-up fires while staging)
                        await self._stage(unit, now + STAGE_AHEAD_MS, STAGE_CHUNK)
                    await asyncio.sleep(0)  # let the rest of the worker run between chunks
                    continue
            except PartitionGone as exc:  # given up meanwhile (fenced, failed): its fires are dropped with it
                log.info("punctuator tick for %s: %s; the other partitions' fires go on", unit.value, exc)
                await asyncio.sleep(0.1)
                continue
            except Unreadable as exc:
                await self.unreadable(exc)
                continue
            except Exception:  # a fire must never kill the timer
                log.exception("punctuator tick for %s failed", unit.value)
                await asyncio.sleep(0.1)
                continue
            self._set_busy(unit, False)
            self._planned_wake[unit] = earliest
            wakeup.clear()
            wake_at = [staged[0] - (SEND_AHEAD_MS if self._hold_commit is not None else 0)] if staged else []
            if earliest is not None:
                wake_at.append(earliest - STAGE_AHEAD_MS)
            if (lowest := self.horizon.lowest_loaded(unit)) is not None:
                wake_at.append(lowest - HORIZON_MS // 2)
            timeout = idle_s if not wake_at else max(0.0, min(idle_s, (min(wake_at) - now) / 1000))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wakeup.wait(), timeout)

    async def _catch_up_step(self, unit: TimeUnit, lowest: int, now: int) -> None:
        """Behind the clock: every owned partition's index is loaded a step further (the least loaded
        first), and what all of them hold in memory by then is fired, oldest first. A partition only fires
        up to what every one has loaded (the watermark it commits drops the index entries before it), so
        a backlog of a million dues fires as it loads, not after the whole of it is loaded."""
        self.horizon.load(unit, min(self._load_target[unit], lowest + CATCH_UP_STEP_MS))
        await asyncio.sleep(0)
        complete = self.horizon.lowest_loaded(unit)
        if complete is None:
            return
        until = min(now, complete)
        dues = self._staged[unit][0]
        if (dues and dues[0] <= until) or ((first := self._earliest(unit)) is not None and first <= until):
            async with self._work():
                await self._stage(unit, until, None)
                await self._emit(unit, until)

    def _set_busy(self, unit: TimeUnit, busy: bool) -> None:
        if busy:
            self._busy.add(unit)
            self.idle.clear()
        else:
            self._busy.discard(unit)
            if not self._busy:
                self.idle.set()

    async def unreadable(self, exc: Unreadable) -> None:
        """Give up a partition whose store cannot be read: nothing of its index is dropped, its fires in
        flight never commit (transactions), and it is caught up from its index when it comes back."""
        log.warning("%s: the partition is given up here until it is assigned again", exc)
        self.stats.unreadable += 1
        self.revoke(exc.partition)
        if self._give_up is not None:
            await self._give_up(exc.partition, exc)

    # --- progress (fire_progress.py) ----------------------------------------------------------------

    async def settle(self, partition: int) -> None:
        """Transactional, before the partition commits: the fires it owes go into its transaction."""
        await self.owed.settle(partition)

    def pending_marks(self, partition: int) -> dict[TimeUnit, int]:
        return self.progress.pending_marks(partition)

    def sent_uncommitted(self) -> bool:
        return self.progress.sent_uncommitted()

    def committed(self, partition: int, marks: dict[TimeUnit, int]) -> None:
        self.progress.committed(partition, marks)

    async def flush_progress(self) -> None:
        await self.progress.flush_progress()

    async def drain(self, timeout_s: float = 5.0) -> None:
        await self.progress.drain(timeout_s)

    async def run_progress(self, interval_s: float) -> None:
        await self.progress.run(interval_s)
