"""The punctuator: per-time-unit timers that fire due time triggers of the partitions this worker owns.

Every enabled schedule's next due per time trigger is in the due-time index (kafka.due_index: RocksDB,
keyed by the instant, next to the schedules table); in memory, per owned partition and time unit, only a
heap of what comes due within HORIZON_MS, loaded from the index a chunk at a time ahead of it, with the
compiled schedules those entries need. Memory grows with the fires of the next few seconds, not with the
number of schedules; a tick costs O(due schedules); an assignment reads the entries due at or before now
(to catch them up), not every schedule.

Fires are prepared ahead: up to STAGE_AHEAD_MS before an instant comes due, its entries are taken off the
heaps, their next dues written to the index (and pushed, if within the horizon) and their FiredTask bytes
built but for `firedAt`; at the instant only `firedAt` is written and the record handed to the producer.
A burst of 10k schedules due at the same second then costs a few microseconds per fire at the due instant
instead of the whole per-fire work. A staged fire whose schedule changed (or whose partition moved)
before its instant is dropped.

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
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from scheduler.domain.model import ElapsedTrigger, ScheduleState, TimeUnit, trigger_leaves
from scheduler.domain.triggers import plan_catch_up
from scheduler.domain.triggers.base import TimeTrigger
from scheduler.domain.triggers.progress import SLA_PATH
from scheduler.kafka.due_index import COMPLETE, Due, DueIndex, bound, due_key, elapsed_key
from scheduler.kafka.partitioner import kafka_partition
from scheduler.kafka.transactions import PartitionGone, owned_by
from scheduler.wire.codec import fire_bytes, zigzag_long
from scheduler.wire.messages import TriggerFired
from scheduler.worker.armed import Armed, Instant
from scheduler.worker.counters import FireCounts, count_missed

log = logging.getLogger(__name__)

Clock = Callable[[], int]
#: (topic, key, value) -> future that resolves when the broker acknowledged the record
Send = Callable[[str, bytes, bytes], Awaitable["asyncio.Future[object]"]]
#: (topic, [(key, value, partition)]) -> one future per record (a burst is produced as whole batches)
SendBatch = Callable[[str, list[tuple[bytes, bytes, int]]], Awaitable[list["asyncio.Future[object]"]]]
#: topic -> its partition count, None while unknown
PartitionCount = Callable[[str], "int | None"]
#: (partition, key) -> the schedule's current state, read from the local table (None: gone). Raises
#: Unreadable when the partition's store cannot be read; anything else it raises means undecodable
Load = Callable[[int, bytes], "ScheduleState | None"]
#: (partition, why) -> give the partition up here until it is assigned again (its store is unreadable)
GiveUp = Callable[[int, BaseException], Awaitable[None]]
#: (partition, unit, fired_up_to_ms) -> persist the watermark
SaveProgress = Callable[[int, TimeUnit, int], None]
Excluded = Callable[[str, tuple[str, ...], int], "str | None"]  # (tenant, calendars, instant) -> calendar
#: (unit, partitions) -> awaited once a tick's fires of these partitions were handed to the producer
Fired = Callable[[TimeUnit, list[int]], Awaitable[None]]


class Unreadable(Exception):
    """A partition's schedules cannot be read now: its store was closed under a revocation and cannot be
    opened again yet, or it fails. Unlike a schedule that is gone, nothing of the partition's index is
    dropped for it: the partition is given up here (GiveUp) and caught up from its index when it comes back."""

    def __init__(self, partition: int, cause: BaseException) -> None:
        super().__init__(f"the schedules of partition {partition} cannot be read: {cause!r}")
        self.partition = partition


#: how long before an instant comes due its fires are prepared (see the module doc)
STAGE_AHEAD_MS = 500
#: how far ahead of now the due-time index is held in memory (loaded again when less than half is left)
HORIZON_MS = 10_000
#: index entries loaded per step before the rest of the worker runs again
LOAD_CHUNK = 1000
#: a schedule written by a command is held in memory at once when it comes due within this much past the
#: horizon (its index entry may wait for its transaction's commit: the loader must not pass it unseen)
UPSERT_MARGIN_MS = 60_000
#: a schedule that fired stays in memory when its next due is within this much past the horizon: one that
#: fires every minute or more often is not read and compiled again for each fire (memory then holds the
#: schedules that fire within ~2 minutes: it grows with the fire rate, not with the number of schedules)
KEEP_MS = 120_000
#: staged per step before checking whether something is due (bounds how long emission can wait)
STAGE_CHUNK = 500
#: behind the clock, the index is loaded this much further per step before what it holds is fired
CATCH_UP_STEP_MS = 1_000


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


#: the wall clock moving more than this against the monotonic clock between two looks is a clock jump (an
#: NTP step, a VM resumed), not lateness
CLOCK_JUMP_MS = 1_000


@dataclass(slots=True)
class _Sent:
    """Records handed to the producer with one future for them all: a batch's (the records of one schedule
    partition in it), or a record's own. A record is (key, value, its partition on the topic; -1: the
    producer's partitioner)."""

    future: asyncio.Future[object]
    topic: str
    records: list[tuple[bytes, bytes, int]]


def _one(future: asyncio.Future[object], topic: str, key: bytes, value: bytes) -> _Sent:
    return _Sent(future, topic, [(key, value, -1)])


def _count(sent: list[_Sent]) -> int:
    return sum(len(s.records) for s in sent)


@dataclass(slots=True)
class _Compiled:
    """What firing a schedule needs, prepared once per definition (the table is read on change, not per fire).
    `fast` schedules (a plain time trigger and no program) fire a FiredTask encoded from prebuilt bytes."""

    topic: str
    leaves: tuple[tuple[str, TimeTrigger], ...]
    elapsed: tuple[str, ...]
    encode: Callable[[int, int, int, bool], bytes] | None  # fast path
    state: ScheduleState | None  # slow path: the trigger agent decides
    version: int
    # fast path, staged: due -> (head, tail): the value is head + firedAt's bytes + tail (tail None: head)
    parts: Callable[[int], tuple[bytes, bytes | None]] | None = None
    kafka_partition: tuple[int, int] | None = None  # (partition count, partition) of its key on its topic
    calendars: tuple[str, ...] = ()  # (tenant, *calendar names) it excludes, if any

    def leaf(self, path: str) -> TimeTrigger | None:
        for p, t in self.leaves:
            if p == path:
                return t
        return None


def compile_schedule(state: ScheduleState, key: bytes | None = None) -> _Compiled:
    """`key`: the schedule's key bytes (key_bytes), when known already."""
    s = state.schedule
    leaves = tuple(state.time_leaves())
    elapsed = tuple(p for p, t in trigger_leaves(s.trigger) if isinstance(t, ElapsedTrigger))
    if s.fire_at_least_every_ms is not None:
        elapsed += (SLA_PATH,)  # its watchdog: armed by the trigger agent, checked there
    calendars = (s.key.tenant, *s.exclude_calendars) if s.exclude_calendars else ()
    # (a limited schedule's fires go through its trigger agent, which counts them toward maxFires)
    if s.program is None and s.max_fires is None and [p for p, _ in leaves] == ["0"]:
        fired = fire_bytes(s, key)
        return _Compiled(
            s.topic, leaves, elapsed, fired.encode, None, state.version, fired.parts, calendars=calendars
        )
    return _Compiled(s.topic, leaves, elapsed, None, state, state.version, calendars=calendars)


def has_elapsed(state: ScheduleState) -> bool:
    """Whether the schedule has timers the trigger agent arms (elapsed triggers, an SLA watchdog)."""
    s = state.schedule
    return s.fire_at_least_every_ms is not None or any(
        isinstance(t, ElapsedTrigger) for _, t in trigger_leaves(s.trigger)
    )


def index_writes(
    key: bytes, state: ScheduleState, since: Callable[[TimeUnit], int | None]
) -> list[tuple[bytes, bytes | None]]:
    """A schedule's due-time index entries: per time trigger its next due after `since(unit)` (None: from its
    activation), and its elapsed mark (put or deleted)."""
    return index_entries(key, state, since)[0]


def index_entries(
    key: bytes, state: ScheduleState, since: Callable[[TimeUnit], int | None]
) -> tuple[list[tuple[bytes, bytes | None]], list[tuple[str, TimeUnit, int]]]:
    """index_writes, and the next dues they hold: (time-trigger path, unit, due) each."""
    if not state.firing:
        return [(elapsed_key(key), None)], []
    writes: list[tuple[bytes, bytes | None]] = []
    dues = []
    for path, trigger in state.time_leaves():
        unit = trigger.unit
        after = since(unit)
        nxt = trigger.next_due(
            state.active_since - 1 if after is None else max(after, state.active_since - 1)
        )
        if nxt is not None:
            writes.append((due_key(unit, nxt, key, path, state.version), b""))
            dues.append((path, unit, nxt))
    writes.append((elapsed_key(key), b"" if has_elapsed(state) else None))
    return writes, dues


@dataclass
class _Partition:
    heaps: dict[TimeUnit, Armed] = field(default_factory=lambda: {u: Armed() for u in TimeUnit})
    # schedule key -> time-trigger path -> (seq, due) of its valid heap entry (what is in memory)
    live: dict[bytes, dict[str, tuple[int, int]]] = field(default_factory=dict)
    compiled: dict[bytes, _Compiled] = field(default_factory=dict)  # the schedules of the entries in memory
    # per unit: every index key below it has been loaded into the heap
    loaded: dict[TimeUnit, bytes] = field(default_factory=dict)
    inflight: dict[TimeUnit, deque[tuple[int, list[_Sent]]]] = field(
        default_factory=lambda: {u: deque() for u in TimeUnit}
    )
    saved: dict[TimeUnit, int] = field(default_factory=dict)
    # the latest tick whose fires were recorded (or the watermark it was assigned with): every due at or
    # before it was fired, so nothing computes a next due before it (the wall clock may step back)
    high: dict[TimeUnit, int] = field(default_factory=dict)


class _SendFailed(Exception):
    def __init__(self, remaining: list[_Staged], error: Exception) -> None:
        super().__init__(str(error))
        self.remaining, self.error = remaining, error


@dataclass(slots=True)
class _Staged:
    """A fire taken off its heap ahead of its due instant."""

    partition: int
    part: _Partition
    key: bytes
    path: str
    entry: _Compiled
    seq: int  # its heap entry (an elapsed trigger re-armed since has another: this fire is then dropped)
    elapsed: bool  # an elapsed trigger (armed per due) rather than a time trigger
    final: bool  # no next due: drop the path from `live` once fired
    head: bytes | None  # fast path: FiredTask bytes before firedAt ...
    tail: bytes | None  # ... and after


#: the due a staged fire that leaves memory shows the loader (its next due, found in the index, is loaded)
_LEAVING = 2**63


def _seq_of(part: _Partition, key: bytes, path: str) -> int | None:
    """The seq of the heap entry of (schedule, path) that counts, if one is in memory."""
    live = part.live.get(key)
    entry = None if live is None else live.get(path)
    return None if entry is None else entry[0]


def _forget(part: _Partition, key: bytes, path: str, seq: int | None) -> None:
    """(schedule, path) leaves memory (its heap entry `seq` was the last): and the schedule with its last."""
    live = part.live.get(key)
    if live is None or (entry := live.get(path)) is None or entry[0] != seq:
        return
    del live[path]
    if not live:
        del part.live[key]
        part.compiled.pop(key, None)


def _loaded_until(loaded: bytes) -> int:
    """The instant up to which an index whose keys below `loaded` are in memory is (every due before the
    one `loaded` names)."""
    return int.from_bytes(loaded[2:10], "big") - 1


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
        partitions that fired (transactions: their watermarks go in then, watermarks.py)."""
        self._fired = fired
        self._excluded = excluded
        self._give_up = give_up
        self.index = index if index is not None else DueIndex()
        self._index_put = index_put or self.index.write
        self._send = send
        self._send_batch = send_batch
        self._partition_count = partition_count
        self._load = load
        self._save_progress = save_progress
        self._clock = clock
        self.transactional = transactional
        # what a tick's staging and emission run inside (Transactions.work: no commit splits a tick)
        self._work = work or contextlib.nullcontext
        self._hold = hold
        self._trigger_topic = trigger_topic
        self._parts: dict[int, _Partition] = {}
        self.caught_up_entries = 0  # index entries the take-ups' catch-up scans read (by the thousand)
        self._seq = itertools.count()
        self._wakeup = {u: asyncio.Event() for u in TimeUnit}
        # set while no timer is staging, firing or loading: bulk work (a fetch of commands) yields to the
        # timers, so fires stay on time while it goes on (ingest.CommandIngest)
        self.idle = asyncio.Event()
        self.idle.set()
        self._busy: set[TimeUnit] = set()
        self._planned_wake: dict[TimeUnit, int | None] = {u: None for u in TimeUnit}
        self._load_target: dict[TimeUnit, int] = {u: 0 for u in TimeUnit}  # the horizon being loaded
        # per unit: fires taken off the partition heaps ahead of time: a heap of their distinct dues, and
        # due -> the fires due then (a burst of 10k at one instant is one heap entry, not 10k)
        self._staged: dict[TimeUnit, tuple[list[int], dict[int, list[_Staged]]]] = {
            u: ([], {}) for u in TimeUnit
        }
        self.stats = stats if stats is not None else FireCounts()
        self._monotonic = monotonic
        self._last_look: tuple[int, int] | None = None  # (clock, monotonic) when the clock was last read
        # per unit: a forward clock jump's span (from, to]: dues in it follow their catch-up policy
        self._jumps: dict[TimeUnit, tuple[int, int]] = {}

    # --- ownership -------------------------------------------------------------------------------

    @property
    def partitions(self) -> set[int]:
        return set(self._parts)

    async def assign(
        self,
        partition: int,
        states: Iterable[tuple[bytes, ScheduleState]] | None,
        fired_up_to: dict[TimeUnit, int],
    ) -> int:
        """Take over a partition: catch up what its index holds due since its watermark (`states`: every
        schedule of the partition, when its index is not complete and must be built from them first).
        Returns how many schedules the index was built from (0: it was complete)."""
        built = 0 if states is None else await self.build_index(partition, states, fired_up_to)
        part = self._parts[partition] = _Partition(high=dict(fired_up_to))
        now = self._clock()
        catch_up: dict[TimeUnit, list[_Sent]] = {u: [] for u in TimeUnit}
        for unit in TimeUnit:
            await self._catch_up_scan(partition, part, unit, now, fired_up_to.get(unit), catch_up[unit])
            part.loaded[unit] = bound(unit, now + 1)
        for unit, futures in catch_up.items():
            self.stats.catch_up_by_unit[unit] += len(futures)
            if futures:
                part.inflight[unit].append((now, futures))
        for unit in TimeUnit:
            self._wakeup[unit].set()
        return built

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

    async def _catch_up_scan(
        self,
        partition: int,
        part: _Partition,
        unit: TimeUnit,
        now: int,
        watermark: int | None,
        out: list[_Sent],
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
                self._still_owned(partition, part)
            where = (e.key, e.path)
            if where in handled:
                if handled[where] != e.due:
                    writes.append((e.raw, None))
                continue
            state = self._loaded(partition, e.key)
            if state is None or not state.firing or state.version != e.version:
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
                if self.is_excluded(entry, due):
                    continue
                out.append(
                    await self._fire(partition, e.key, entry, e.path, due, now, missed=missed, catch_up=True)
                )
                self._still_owned(partition, part)
            count_missed(self.stats.missed, state.schedule.catch_up, plan)
            handled[where] = plan.next_due
            if plan.next_due is not None:
                writes.append((due_key(unit, plan.next_due, e.key, e.path, e.version), b""))
        self.index.write(partition, writes)

    def _still_owned(self, partition: int, part: _Partition) -> None:
        """After an await of an assignment's catch-up: the partition was not revoked (nor assigned again)
        meanwhile. A scan that went on would read a store closed under it (Unreadable) and write its
        index entries into the next ownership's."""
        if self._parts.get(partition) is not part:
            raise PartitionGone(f"partition {partition} was revoked while it was caught up")

    def is_excluded(self, entry: _Compiled, due: int) -> bool:
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

    def revoke(self, partition: int) -> None:
        self._parts.pop(partition, None)

    def clear(self) -> None:
        self._parts.clear()

    # --- changes from the commands ingest (same partition, same process) --------------------------

    def upsert(self, partition: int, key: bytes, state: ScheduleState) -> None:
        """A command wrote the schedule: its index entries go with the write (index_put); those due within
        the horizon (or just past it) are held in memory at once."""
        part = self._parts.get(partition)
        now = self._clock()
        high = {} if part is None else part.high

        def since(unit: TimeUnit) -> int:
            after = max(now, state.active_since) - 1
            return max(after, high.get(unit, after))

        writes, dues = index_entries(key, state, since)
        self._index_put(partition, writes)
        if part is None:
            return  # not (yet) ours: assign() reads the index
        part.live.pop(key, None)
        part.compiled.pop(key, None)
        near = [
            (path, unit, nxt)
            for path, unit, nxt in dues
            if (loaded := part.loaded.get(unit)) is not None
            and nxt <= _loaded_until(loaded) + UPSERT_MARGIN_MS
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

    def remove(self, partition: int, key: bytes) -> None:
        """The schedule was deleted (its index entries are dropped when reached)."""
        self._index_put(partition, [(elapsed_key(key), None)])
        part = self._parts.get(partition)
        if part is not None:
            part.live.pop(key, None)
            part.compiled.pop(key, None)

    def _push(self, part: _Partition, unit: TimeUnit, key: bytes, path: str, due: int) -> None:
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

    async def _fire(
        self,
        partition: int,
        key: bytes,
        entry: _Compiled,
        path: str,
        due: int,
        now: int,
        *,
        missed: int = 0,
        catch_up: bool = False,
    ) -> _Sent:
        fired_at = self._clock()  # not the tick's start: a large tick takes a while
        if not catch_up:
            self.stats.lateness.observe(fired_at - due)
        if entry.encode is not None:
            topic = entry.topic
            value = entry.encode(due, fired_at, missed, catch_up)
        else:
            state = entry.state
            assert state is not None
            s = state.schedule
            # A schedule that launches a program, or a time trigger inside AND/OR: its trigger agent decides.
            topic = self._trigger_topic
            value = TriggerFired(
                key,
                s.key.id,
                state.version,
                path,
                source=f"t{path}",
                position=due,
                at=fired_at,
                due=due,
                missed=missed,
                catch_up=catch_up,
            ).encode()
        with owned_by(partition):
            return _one(await self._send(topic, key, value), topic, key, value)

    async def tick(self, unit: TimeUnit) -> None:
        """Fire every schedule of `unit` due at or before now, in every owned partition."""
        now = self._clock()
        self._look_at_clock(now)
        await self._fill(unit, now + HORIZON_MS)
        async with self._work():
            await self._stage(unit, now, None)
            await self._emit(unit, now)

    async def _stage(self, unit: TimeUnit, until: int, limit: int | None) -> int:
        """Take up to `limit` (None: all) entries due at or before `until` off the heaps, earliest first:
        index (and push) each one's next due, build its bytes but for firedAt. Returns how many were taken."""
        writes: dict[int, list[tuple[bytes, bytes | None]]] = {}
        try:
            return await self._stage_into(unit, until, limit, writes)
        finally:  # (what was taken is staged: its next dues must be in the index whatever happens next)
            for partition, batch in writes.items():
                self.index.write(partition, batch)

    async def _stage_into(
        self,
        unit: TimeUnit,
        until: int,
        limit: int | None,
        writes: dict[int, list[tuple[bytes, bytes | None]]],
    ) -> int:
        taken = 0
        jump = self._jumps.get(unit)
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
            del self._jumps[unit]  # every due of the span was taken
        return taken

    async def _stage_instant(
        self,
        unit: TimeUnit,
        armed: Armed,
        partition: int,
        part: _Partition,
        due: int,
        instant: Instant,
        jump: tuple[int, int] | None,
        writes: dict[int, list[tuple[bytes, bytes | None]]],
    ) -> None:
        """Stage a partition's entries of one instant, taken off `armed` (what a failure leaves is put back)."""
        dues, by_due = self._staged[unit]
        at_due: list[_Staged] | None = None
        at = 0
        try:
            for seq, key, path in zip(instant.seqs, instant.keys, instant.paths):
                at += 1
                if _seq_of(part, key, path) != seq:
                    continue  # superseded by an update, disabled or deleted
                try:
                    entry = part.compiled.get(key) or self._compile_loaded(part, partition, key)
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
                # time trigger's index entry moves on to its next due now (this one's: see _drop_fired)
                stays = False
                if trigger is not None:
                    nxt = trigger.next_due(due)
                    if nxt is not None:
                        stays = self._moved(partition, part, unit, key, path, entry.version, nxt, writes)
                if entry.calendars and trigger is not None and self.is_excluded(entry, due):
                    if not stays:
                        _forget(part, key, path, seq)
                    continue
                if not stays and trigger is not None:  # leaves memory once fired: the loader arms the next
                    part.live[key][path] = (seq, _LEAVING)
                head, tail = entry.parts(due) if entry.parts is not None else (None, None)
                item = _Staged(partition, part, key, path, entry, seq, trigger is None, not stays, head, tail)
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

    def _moved(
        self,
        partition: int,
        part: _Partition,
        unit: TimeUnit,
        key: bytes,
        path: str,
        version: int,
        nxt: int,
        writes: dict[int, list[tuple[bytes, bytes | None]]],
    ) -> bool:
        """A time trigger's next due: into the index (written at the end of the stage), and into memory when
        the horizon holds it already. Returns whether it is in memory."""
        raw = due_key(unit, nxt, key, path, version)
        batch = writes.get(partition)
        if batch is None:
            batch = writes[partition] = []
        batch.append((raw, b""))
        loaded = part.loaded[unit]
        if raw < loaded or nxt <= _loaded_until(loaded) + KEEP_MS:  # (the loader skips it: same due)
            self._push(part, unit, key, path, nxt)
            return True
        return False

    def _look_at_clock(self, now: int) -> None:
        """Tell a jump of the wall clock from lateness, against the monotonic clock. Forward: the dues the
        jump passed over follow each schedule's catch-up policy, as after a restart (not fired one by one,
        not counted as late). Back: nothing fires again (next dues never go below what was fired)."""
        if self._monotonic is None:
            return
        mono = self._monotonic()
        last, self._last_look = self._last_look, (now, mono)
        if last is None:
            return
        expected = last[0] + (mono - last[1])
        step = now - expected
        if step > CLOCK_JUMP_MS:
            log.warning("the wall clock jumped %d ms forward: its dues follow their catch-up policy", step)
            self.stats.clock_jumps["forward"] += 1
            for unit in TimeUnit:
                start = min(self._jumps[unit][0], expected) if unit in self._jumps else expected
                self._jumps[unit] = (start, now)
                self._wakeup[unit].set()
        elif step < -CLOCK_JUMP_MS:
            log.warning("the wall clock stepped %d ms back: nothing fired fires again", -step)
            self.stats.clock_jumps["backward"] += 1

    async def _jumped_over(
        self,
        unit: TimeUnit,
        partition: int,
        part: _Partition,
        key: bytes,
        path: str,
        entry: _Compiled,
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
            await self._fire(partition, key, entry, path, d, now, missed=missed, catch_up=True)
            for d, missed in plan.fires
        ]
        count_missed(self.stats.missed, s.catch_up, plan)
        self.stats.catch_up_by_unit[unit] += len(futures)
        if futures:  # moves no watermark by itself: the next recorded tick covers it
            part.inflight[unit].append((part.high.get(unit, due - 1), futures))
        seq = _seq_of(part, key, path)
        if plan.next_due is None or not self._moved(
            partition, part, unit, key, path, entry.version, plan.next_due, writes
        ):
            _forget(part, key, path, seq)

    async def _emit(self, unit: TimeUnit, now: int) -> None:
        """Fire every staged entry due at or before `now`; record them for the watermark per partition."""
        dues, by_due = self._staged[unit]
        sent: dict[int, tuple[_Partition, list[_Sent]]] = {}
        fired: list[int] = []
        try:
            while dues and dues[0] <= now:
                due = dues[0]
                items = by_due[due]
                try:
                    await self._emit_due(due, items, now, sent)
                except _SendFailed as failed:  # the producer refused one: keep the rest staged, retry later
                    by_due[due] = failed.remaining
                    self._record(unit, sent, due - 1)  # the watermark must stay before what is left
                    raise failed.error from None
                heapq.heappop(dues)
                del by_due[due]
            fired = list(sent)
        finally:
            self._record(unit, sent, now)  # (empty after a failure: recorded up to before it above)
        if fired and self._fired is not None:
            await self._fired(unit, fired)

    async def _emit_due(
        self, due: int, items: list[_Staged], now: int, sent: dict[int, tuple[_Partition, list[_Sent]]]
    ) -> None:
        """Fire the staged entries of one instant: FiredTasks grouped by topic and produced as whole batches
        when the producer can, others one by one (_SendFailed holds what is left when a send raised)."""
        parts, clock, observe = self._parts, self._clock, self.stats.lateness.observe
        fired_at, zz, fast, observed = -1, b"", 0, 0
        grouped: dict[tuple[str, int], list[tuple[_Staged, bytes]]] = {}
        per_partition = self.transactional
        handled: list[_Staged] = []
        try:
            for item in items:
                part = item.part
                if (
                    parts.get(item.partition) is not part
                    or part.compiled.get(item.key) is not item.entry
                    or (item.elapsed and _seq_of(part, item.key, item.path) != item.seq)
                ):
                    handled.append(item)  # changed, re-armed or moved since it was staged: not owed any more
                    continue
                if item.head is None:
                    fired = await self._fire(item.partition, item.key, item.entry, item.path, due, now)
                    self._sent_one(item, fired, sent)
                    handled.append(item)
                    continue
                if fast & 31 == 0:  # the clock, and firedAt's bytes, every 32 fires (well within 1 ms)
                    if observed:
                        observe(fired_at - due, observed)
                    fired_at, observed = clock(), 0
                    zz = zigzag_long(fired_at)
                fast += 1
                observed += 1
                value = item.head + zz + item.tail if item.tail is not None else item.head  # type: ignore[operator]
                if self._send_batch is not None:
                    where = (item.entry.topic, item.partition if per_partition else -1)
                    group = grouped.get(where)
                    if group is None:
                        group = grouped[where] = []
                    group.append((item, value))
                    continue
                topic = item.entry.topic
                with owned_by(item.partition):
                    one = _one(await self._send(topic, item.key, value), topic, item.key, value)
                self._sent_one(item, one, sent)
                handled.append(item)
            if observed:
                observe(fired_at - due, observed)
            for (topic, owner), group in grouped.items():
                with owned_by(None if owner < 0 else owner):
                    await self._send_group(topic, group, sent, handled)
        except Exception as exc:
            done = {id(item) for item in handled}
            raise _SendFailed([item for item in items if id(item) not in done], exc) from exc

    async def _send_group(
        self,
        topic: str,
        group: list[tuple[_Staged, bytes]],
        sent: dict[int, tuple[_Partition, list[_Sent]]],
        handled: list[_Staged],
    ) -> None:
        """One topic's FiredTasks of an instant, as whole batches (one by one while the topic is unknown)."""
        count = None if self._partition_count is None else self._partition_count(topic)
        if count is None or self._send_batch is None:
            for item, value in group:
                self._sent_one(
                    item, _one(await self._send(topic, item.key, value), topic, item.key, value), sent
                )
                handled.append(item)
            return
        records = []
        for item, value in group:
            cached = item.entry.kafka_partition
            if cached is None or cached[0] != count:
                cached = item.entry.kafka_partition = (count, kafka_partition(item.key, count))
            records.append((item.key, value, cached[1]))
        futures = await self._send_batch(topic, records)
        # one _Sent per batch and schedule partition (the records of a batch share its future)
        current: dict[int, _Sent] = {}
        for (item, _), record, future in zip(group, records, futures, strict=True):
            one = current.get(item.partition)
            if one is None or one.future is not future:
                one = current[item.partition] = _Sent(future, topic, [])
                self._sent_one(item, one, sent)
            elif item.final:
                _forget(item.part, item.key, item.path, item.seq)
            one.records.append(record)
            handled.append(item)

    @staticmethod
    def _sent_one(item: _Staged, one: _Sent, sent: dict[int, tuple[_Partition, list[_Sent]]]) -> None:
        part = item.part
        if item.final:
            _forget(part, item.key, item.path, item.seq)
        bucket = sent.get(item.partition)
        if bucket is None:
            bucket = sent[item.partition] = (part, [])
        bucket[1].append(one)

    def pending_marks(self, partition: int) -> dict[TimeUnit, int]:
        """Transactional: per unit, the watermark that covers the fires the partition sent since its last
        commit (every one of them is in the transaction being committed)."""
        part = self._parts.get(partition)
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
        return any(inflight for part in self._parts.values() for inflight in part.inflight.values())

    def committed(self, partition: int, marks: dict[TimeUnit, int]) -> None:
        """Transactional: the partition's transaction committed, with these watermarks (pending_marks)."""
        part = self._parts.get(partition)
        if part is None:
            return
        for inflight in part.inflight.values():
            inflight.clear()
        for unit, tick in marks.items():
            part.saved[unit] = max(tick, part.saved.get(unit, -1))
            self._drop_fired(partition, part, unit, tick)

    def _drop_fired(self, partition: int, part: _Partition, unit: TimeUnit, watermark: int) -> None:
        """The watermark moved: every index entry due at or before it is out (fired, or caught up, and its
        next due written; or stale). Nothing live is that early: a schedule's next due is written when it
        fires, after the watermark, or by a command or a restore, after the watermark too."""
        self.index.drop_before(partition, unit, watermark)

    def _record(self, unit: TimeUnit, sent: dict[int, tuple[_Partition, list[_Sent]]], tick_ms: int) -> None:
        for part, futures in sent.values():
            self.stats.fires_by_unit[unit] += _count(futures)
            part.inflight[unit].append((tick_ms, futures))
            if tick_ms > part.high.get(unit, tick_ms - 1):
                part.high[unit] = tick_ms
        sent.clear()

    def _loaded(self, partition: int, key: bytes) -> ScheduleState | None:
        """The schedule an index entry names, from the table (None: gone, or undecodable: never fired, its
        entry is dropped). Unreadable is raised: a store that cannot be read drops nothing."""
        try:
            return self._load(partition, key)
        except Unreadable:
            raise
        except Exception:
            log.exception("the schedule state of an index entry of partition %d is undecodable", partition)
            return None

    def _compile_loaded(self, part: _Partition, partition: int, key: bytes) -> _Compiled | None:
        """A schedule not in memory yet (an elapsed trigger its agent armed): read it from the table."""
        state = self._load(partition, key)
        if state is None or not state.firing:
            return None
        entry = part.compiled[key] = compile_schedule(state, key)
        return entry

    # --- the horizon: the index loaded into memory ahead of now -----------------------------------

    def _lowest_loaded(self, unit: TimeUnit) -> int | None:
        """The least instant up to which every owned partition's index of `unit` is in memory."""
        loaded = [_loaded_until(part.loaded[unit]) for part in self._parts.values() if unit in part.loaded]
        return min(loaded) if loaded else None

    def _load_horizon(self, unit: TimeUnit, until: int) -> bool:
        """Load up to LOAD_CHUNK index entries of `unit` due at or before `until` into the heaps. Returns
        whether some are left to load."""
        budget = LOAD_CHUNK
        stop = bound(unit, until + 1)
        for partition, part in list(self._parts.items()):
            start = part.loaded.get(unit)
            if start is None or start >= stop:
                continue
            stale: list[tuple[bytes, bytes | None]] = []
            last = None
            for e in self.index.scan(partition, unit, start, until):
                last = e.raw
                budget -= 1
                self._load_entry(partition, part, unit, e, stale)
                if budget <= 0:
                    break
            part.loaded[unit] = last + b"\x00" if budget <= 0 and last is not None else stop
            if stale:
                self._index_put(partition, stale)
            if budget <= 0:
                return True
        return False

    def _load_entry(
        self,
        partition: int,
        part: _Partition,
        unit: TimeUnit,
        e: Due,
        stale: list[tuple[bytes, bytes | None]],
    ) -> None:
        if (path_live := part.live.get(e.key)) and (held := path_live.get(e.path)) and held[1] <= e.due:
            # in memory already, due then or earlier: this entry is its own copy (a command's entry held at
            # once, before its commit), or a successor written by an owner that staged the earlier one and
            # lost the partition before firing it (the earlier one writes it again when it fires)
            return
        state = self._loaded(partition, e.key)
        if state is None or not state.firing or state.version != e.version:
            stale.append((e.raw, None))  # (with the schedule writes: never ahead of an update's commit)
            return
        entry = part.compiled.get(e.key)
        if entry is None or entry.version != state.version:
            entry = compile_schedule(state, e.key)
        if entry.leaf(e.path) is None:
            stale.append((e.raw, None))
            return
        part.compiled[e.key] = entry
        self._push(part, unit, e.key, e.path, e.due)

    async def _fill(self, unit: TimeUnit, until: int) -> None:
        """Load the horizon of `unit` up to `until`, a chunk at a time."""
        while self._load_horizon(unit, until):
            await asyncio.sleep(0)

    def overdue(self, late_ms: int = 2_000) -> int:
        """The time units with an instant due more than late_ms ago and not fired yet (liveness.py)."""
        now = self._clock()
        return sum(
            1
            for unit in TimeUnit
            if any(
                due is not None and due < now - late_ms
                for due in (self._earliest(unit), self._staged_first(unit))
            )
        )

    def _staged_first(self, unit: TimeUnit) -> int | None:
        staged = self._staged[unit][0]
        return staged[0] if staged else None

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
                lowest = self._lowest_loaded(unit)
                if lowest is not None:
                    if lowest < now + HORIZON_MS // 2:  # half the horizon left: load it whole again
                        self._load_target[unit] = max(self._load_target[unit], now + HORIZON_MS)
                    if lowest < self._load_target[unit]:
                        if lowest < now:  # behind: a restart's backlog, a stall, a clock jump
                            await self._catch_up_step(unit, lowest, now)
                            continue
                        self._load_horizon(unit, self._load_target[unit])
                        await asyncio.sleep(0)
                if (
                    staged
                    and staged[0] <= now
                    or ((earliest := self._earliest(unit)) is not None and earliest <= now)
                ):
                    async with self._work():
                        await self._stage(unit, now, None)  # whatever is due and not staged yet, first
                        await self._emit(unit, now)
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
            wake_at = [staged[0]] if staged else []
            if earliest is not None:
                wake_at.append(earliest - STAGE_AHEAD_MS)
            if (lowest := self._lowest_loaded(unit)) is not None:
                wake_at.append(lowest - HORIZON_MS // 2)
            timeout = idle_s if not wake_at else max(0.0, min(idle_s, (min(wake_at) - now) / 1000))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wakeup.wait(), timeout)

    async def _catch_up_step(self, unit: TimeUnit, lowest: int, now: int) -> None:
        """Behind the clock: every owned partition's index is loaded a step further (the least loaded
        first), and what all of them hold in memory by then is fired, oldest first. A partition only fires
        up to what every one has loaded (the watermark it commits drops the index entries before it), so
        a backlog of a million dues fires as it loads, not after the whole of it is loaded."""
        self._load_horizon(unit, min(self._load_target[unit], lowest + CATCH_UP_STEP_MS))
        await asyncio.sleep(0)
        complete = self._lowest_loaded(unit)
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

    # --- progress -----------------------------------------------------------------------------------

    async def flush_progress(self) -> None:
        """Persist, per partition and unit, the latest tick whose fires have all been acknowledged.

        A fire the producer gave up on is sent again; the watermark waits for it.
        """
        for partition, part in list(self._parts.items()):
            for unit, inflight in part.inflight.items():
                acked: int | None = None
                while inflight and all(s.future.done() for s in inflight[0][1]):
                    tick_ms, sent = inflight[0]
                    failed = [s for s in sent if s.future.cancelled() or s.future.exception() is not None]
                    if failed:
                        self.stats.failed_sends += _count(failed)
                        log.warning(
                            "resending %d unacknowledged fires of partition %d", _count(failed), partition
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
            for part in self._parts.values()
            for q in part.inflight.values()
            for _, sent in q
            for s in sent
        ]
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)
        await self.flush_progress()

    async def _resend(
        self, sent: _Sent, record: tuple[bytes, bytes, int]
    ) -> _Sent:  # (never transactional: a failed transaction is redone whole)
        key, value, _ = record
        return _one(await self._send(sent.topic, key, value), sent.topic, key, value)

    async def run_progress(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            if self._hold is not None and not await self._hold():
                continue
            try:
                await self.flush_progress()
            except Exception:
                log.exception("saving fire progress failed")
