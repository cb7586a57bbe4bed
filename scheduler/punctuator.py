"""The punctuator: per-time-unit timers that fire due time triggers of the partitions this worker owns.

Each owned partition has one due-time heap per time unit (ms, s, min, h, day), rebuilt from the
schedules table when the partition is assigned and dropped when it is revoked: a tick costs
O(due schedules). The heaps are derived state; the table is the truth.

Progress is a watermark per (partition, unit), "every fire due at or before T has been produced and
acknowledged", written to the fire-progress table once per progress interval, not once per fire. A new
owner treats dues after the watermark as missed and applies each schedule's catch-up policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from scheduler.codec import encode_json, fired_task_encoder
from scheduler.metrics import Histogram, count_missed
from scheduler.model import ElapsedTrigger, ScheduleState, TimeUnit, trigger_leaves
from scheduler.triggers import plan_catch_up
from scheduler.triggers.base import TimeTrigger

log = logging.getLogger(__name__)

Clock = Callable[[], int]
#: (topic, key, value) -> future that resolves when the broker acknowledged the record
Send = Callable[[str, bytes, bytes], Awaitable["asyncio.Future[object]"]]
#: (partition, key) -> the schedule's current state, read from the local table
Load = Callable[[int, bytes], "ScheduleState | None"]
#: (partition, unit, fired_up_to_ms) -> persist the watermark
SaveProgress = Callable[[int, TimeUnit, int], None]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class _Sent:
    future: asyncio.Future[object]
    topic: str
    key: bytes
    value: bytes


@dataclass(slots=True)
class _Compiled:
    """What firing a schedule needs, prepared once per definition (the table is read on change, not per fire).
    `fast` schedules (a plain time trigger and no program) fire a FiredTask encoded from prebuilt bytes."""

    topic: str
    leaves: tuple[tuple[str, TimeTrigger], ...]
    elapsed: tuple[str, ...]
    encode: Callable[[int, int, int, bool], bytes] | None  # fast path
    state: ScheduleState | None  # slow path: the trigger agent decides

    def leaf(self, path: str) -> TimeTrigger | None:
        for p, t in self.leaves:
            if p == path:
                return t
        return None


def compile_schedule(state: ScheduleState) -> _Compiled:
    s = state.schedule
    leaves = tuple(state.time_leaves())
    elapsed = tuple(p for p, t in trigger_leaves(s.trigger) if isinstance(t, ElapsedTrigger))
    if s.program is None and [p for p, _ in leaves] == ["0"]:
        return _Compiled(s.topic, leaves, elapsed, fired_task_encoder(s.key, s.data), None)
    return _Compiled(s.topic, leaves, elapsed, None, state)


@dataclass
class _Partition:
    heaps: dict[TimeUnit, list[tuple[int, int, bytes, str]]] = field(
        default_factory=lambda: {u: [] for u in TimeUnit}
    )
    # schedule key -> time-trigger path -> seq of its valid heap entry
    live: dict[bytes, dict[str, int]] = field(default_factory=dict)
    compiled: dict[bytes, _Compiled] = field(default_factory=dict)  # enabled schedules with time triggers
    inflight: dict[TimeUnit, deque[tuple[int, list[_Sent]]]] = field(
        default_factory=lambda: {u: deque() for u in TimeUnit}
    )
    saved: dict[TimeUnit, int] = field(default_factory=dict)


@dataclass
class Stats:
    """Plain ints, read by /health and at scrape time by /metrics (scheduler.metrics): fires are counted
    per tick and per assignment, not per fire."""

    fires_by_unit: Counter[TimeUnit] = field(default_factory=Counter)  # scheduled fires
    catch_up_by_unit: Counter[TimeUnit] = field(default_factory=Counter)
    missed: Counter[str] = field(default_factory=Counter)  # due instants by reason (metrics.MISSED_REASONS)
    lateness: Histogram = field(default_factory=Histogram)  # ms, of scheduled fires
    failed_sends: int = 0

    @property
    def catch_up_fires(self) -> int:
        return sum(self.catch_up_by_unit.values())

    @property
    def fires(self) -> int:
        return sum(self.fires_by_unit.values()) + self.catch_up_fires

    @property
    def skipped(self) -> int:
        """Missed due instants that will never fire (policy, window or EACH cap)."""
        return sum(n for reason, n in self.missed.items() if reason != "coalesced")


class Punctuator:
    def __init__(
        self,
        send: Send,
        load: Load,
        save_progress: SaveProgress,
        clock: Clock = wall_clock_ms,
        trigger_topic: str = "",
    ) -> None:
        self._send = send
        self._load = load
        self._save_progress = save_progress
        self._clock = clock
        self._trigger_topic = trigger_topic
        self._parts: dict[int, _Partition] = {}
        self._seq = itertools.count()
        self._wakeup = {u: asyncio.Event() for u in TimeUnit}
        self._planned_wake: dict[TimeUnit, int | None] = {u: None for u in TimeUnit}
        self.stats = Stats()

    # --- ownership -------------------------------------------------------------------------------

    @property
    def partitions(self) -> set[int]:
        return set(self._parts)

    async def assign(
        self,
        partition: int,
        states: Iterable[tuple[bytes, ScheduleState]],
        fired_up_to: dict[TimeUnit, int],
    ) -> None:
        """Take over a partition: rebuild its heaps and catch up what was missed since its watermark."""
        part = self._parts[partition] = _Partition()
        now = self._clock()
        catch_up: dict[TimeUnit, list[_Sent]] = {u: [] for u in TimeUnit}
        for n, (key, state) in enumerate(states):
            if not state.schedule.enabled:
                continue
            entry = compile_schedule(state)
            if entry.leaves or entry.elapsed:
                part.compiled[key] = entry
            for path, trigger in entry.leaves:
                watermark = fired_up_to.get(trigger.unit)
                since = (
                    state.active_since - 1 if watermark is None else max(watermark, state.active_since - 1)
                )
                plan = plan_catch_up(
                    trigger, state.schedule.catch_up, since, now, state.schedule.catch_up_window_ms
                )
                for due, missed in plan.fires:
                    fut = await self._fire(key, entry, path, due, now, missed=missed, catch_up=True)
                    catch_up[trigger.unit].append(fut)
                count_missed(self.stats.missed, state.schedule.catch_up, plan)
                if plan.next_due is not None:
                    self._push(part, trigger.unit, key, path, plan.next_due)
            if n % 1000 == 999:
                await asyncio.sleep(0)  # keep the event loop (heartbeats, web) responsive
        for unit, futures in catch_up.items():
            self.stats.catch_up_by_unit[unit] += len(futures)
            if futures:
                part.inflight[unit].append((now, futures))
        for unit in TimeUnit:
            self._wakeup[unit].set()

    def revoke(self, partition: int) -> None:
        self._parts.pop(partition, None)

    def clear(self) -> None:
        self._parts.clear()

    # --- changes from the schedule agent (same partition, same process) --------------------------

    def upsert(self, partition: int, key: bytes, state: ScheduleState) -> None:
        part = self._parts.get(partition)
        if part is None:
            return  # not (yet) ours: assign() will read it from the table
        part.live.pop(key, None)
        part.compiled.pop(key, None)
        if not state.schedule.enabled:
            return
        entry = compile_schedule(state)
        if entry.leaves or entry.elapsed:
            part.compiled[key] = entry
        for path, trigger in entry.leaves:
            nxt = trigger.next_due(max(self._clock(), state.active_since) - 1)
            if nxt is not None:
                self._push(part, trigger.unit, key, path, nxt)

    def elapsed_schedules(self, partition: int) -> list[tuple[bytes, ScheduleState]]:
        """The partition's enabled schedules with elapsed triggers (compiled at assignment: no table read)."""
        part = self._parts.get(partition)
        if part is None:
            return []
        return [(k, e.state) for k, e in part.compiled.items() if e.elapsed and e.state is not None]

    def arm(self, partition: int, key: bytes, path: str, due: int) -> None:
        """Make the elapsed trigger at `path` come due at `due` (replacing what was armed before)."""
        part = self._parts.get(partition)
        if part is not None:
            self._push(part, TimeUnit.SECONDS, key, path, due)

    def remove(self, partition: int, key: bytes) -> None:
        part = self._parts.get(partition)
        if part is not None:
            part.live.pop(key, None)
            part.compiled.pop(key, None)

    def _push(self, part: _Partition, unit: TimeUnit, key: bytes, path: str, due: int) -> None:
        seq = next(self._seq)
        part.live.setdefault(key, {})[path] = seq
        heapq.heappush(part.heaps[unit], (due, seq, key, path))
        planned = self._planned_wake[unit]
        if planned is None or due < planned:
            self._wakeup[unit].set()

    # --- firing -----------------------------------------------------------------------------------

    async def _fire(
        self,
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
            value = encode_json(
                {
                    "scheduleKey": key.hex(),
                    "schedule": s.key.id,
                    "version": state.version,
                    "path": path,
                    "source": f"t{path}",
                    "position": due,
                    "due": due,
                    "at": fired_at,
                    "missed": missed,
                    "catchUp": catch_up,
                }
            )
        return _Sent(await self._send(topic, key, value), topic, key, value)

    async def tick(self, unit: TimeUnit) -> None:
        """Fire every schedule of `unit` due at or before now, in every owned partition."""
        now = self._clock()
        for partition, part in list(self._parts.items()):
            heap = part.heaps[unit]
            futures: list[_Sent] = []
            while heap and heap[0][0] <= now:
                due, seq, key, path = heapq.heappop(heap)
                if part.live.get(key, {}).get(path) != seq:
                    continue  # superseded by an update, disabled or deleted
                entry = part.compiled.get(key) or self._compile_loaded(part, partition, key)
                trigger = None if entry is None else entry.leaf(path)
                if entry is None or (trigger is None and path not in entry.elapsed):
                    part.live.pop(key, None)
                    continue
                try:
                    futures.append(await self._fire(key, entry, path, due, now))
                except Exception:
                    # Not queued (e.g. the producer's buffer is full): keep it due and retry next tick.
                    heapq.heappush(heap, (due, seq, key, path))
                    if futures:
                        part.inflight[unit].append((now, futures))
                    self.stats.fires_by_unit[unit] += len(futures)
                    raise
                nxt = None if trigger is None else trigger.next_due(due)  # an elapsed trigger is re-armed
                if nxt is None:
                    part.live[key].pop(path, None)
                else:
                    self._push(part, unit, key, path, nxt)
                if self._parts.get(partition) is not part:
                    break  # revoked while we were sending
            self.stats.fires_by_unit[unit] += len(futures)
            if futures:
                part.inflight[unit].append((now, futures))

    def _compile_loaded(self, part: _Partition, partition: int, key: bytes) -> _Compiled | None:
        """A schedule not compiled yet (should not happen: assign and upsert compile): read it from the table."""
        state = self._load(partition, key)
        if state is None or not state.schedule.enabled:
            return None
        entry = part.compiled[key] = compile_schedule(state)
        return entry

    def _earliest(self, unit: TimeUnit) -> int | None:
        dues = [part.heaps[unit][0][0] for part in self._parts.values() if part.heaps[unit]]
        return min(dues) if dues else None

    async def run_timer(self, unit: TimeUnit, idle_s: float = 1.0) -> None:
        """One timer per time unit: sleep until the earliest due of that unit, then tick."""
        wakeup = self._wakeup[unit]
        while True:
            earliest = self._earliest(unit)
            now = self._clock()
            if earliest is not None and earliest <= now:
                try:
                    await self.tick(unit)
                except Exception:  # a fire must never kill the timer
                    log.exception("punctuator tick for %s failed", unit.value)
                    await asyncio.sleep(0.1)
                continue
            self._planned_wake[unit] = earliest
            wakeup.clear()
            timeout = idle_s if earliest is None else min(idle_s, (earliest - now) / 1000)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wakeup.wait(), timeout)

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
                        self.stats.failed_sends += len(failed)
                        log.warning(
                            "resending %d unacknowledged fires of partition %d", len(failed), partition
                        )
                        inflight[0] = (tick_ms, [await self._resend(s) for s in failed])
                        break
                    inflight.popleft()
                    acked = tick_ms
                if acked is not None and acked > part.saved.get(unit, -1):
                    part.saved[unit] = acked
                    self._save_progress(partition, unit, acked)

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

    async def _resend(self, sent: _Sent) -> _Sent:
        return _Sent(await self._send(sent.topic, sent.key, sent.value), sent.topic, sent.key, sent.value)

    async def run_progress(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.flush_progress()
            except Exception:
                log.exception("saving fire progress failed")
