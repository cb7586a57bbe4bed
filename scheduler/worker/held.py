"""What the punctuator holds of a partition it owns (Held): its armed entries per time unit, the compiled
schedules they need and the fires in flight; a compiled schedule (Compiled) and a fire staged ahead of its
instant (Staged); and a schedule's entries in the due-time index (index_entries).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler.domain.model import ElapsedTrigger, ScheduleState, TimeUnit, trigger_leaves
from scheduler.domain.triggers.base import TimeTrigger
from scheduler.domain.triggers.progress import SLA_PATH
from scheduler.kafka.due_index import created, due_key, elapsed_key
from scheduler.wire.fires import fire_bytes
from scheduler.worker.armed import Armed


class Unreadable(Exception):
    """A partition's schedules cannot be read now: its store was closed under a revocation and cannot be
    opened again yet, or it fails. Unlike a schedule that is gone, nothing of the partition's index is
    dropped for it: the partition is given up here (GiveUp) and caught up from its index when it comes back."""

    def __init__(self, partition: int, cause: BaseException) -> None:
        super().__init__(f"the schedules of partition {partition} cannot be read: {cause!r}")
        self.partition = partition


@dataclass(slots=True)
class Sent:
    """Records handed to the producer with one future for them all: a batch's (the records of one schedule
    partition in it), or a record's own. A record is (key, value, its partition on the topic; -1: the
    producer's partitioner)."""

    future: asyncio.Future[object]
    topic: str
    records: list[tuple[bytes, bytes, int]]


def single(future: asyncio.Future[object], topic: str, key: bytes, value: bytes) -> Sent:
    return Sent(future, topic, [(key, value, -1)])


def record_count(sent: list[Sent]) -> int:
    return sum(len(s.records) for s in sent)


@dataclass(slots=True)
class Compiled:
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
    created: bytes = b""  # its schedule's creation, as the due-time index holds it (due_index.created)

    def leaf(self, path: str) -> TimeTrigger | None:
        for p, t in self.leaves:
            if p == path:
                return t
        return None


def compile_schedule(state: ScheduleState, key: bytes | None = None) -> Compiled:
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
        return Compiled(
            s.topic,
            leaves,
            elapsed,
            fired.encode,
            None,
            state.version,
            fired.parts,
            calendars=calendars,
            created=created(state.created_at),
        )
    return Compiled(
        s.topic,
        leaves,
        elapsed,
        None,
        state,
        state.version,
        calendars=calendars,
        created=created(state.created_at),
    )


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
            writes.append((due_key(unit, nxt, key, path, state.version), created(state.created_at)))
            dues.append((path, unit, nxt))
    writes.append((elapsed_key(key), b"" if has_elapsed(state) else None))
    return writes, dues


@dataclass
class Held:
    heaps: dict[TimeUnit, Armed] = field(default_factory=lambda: {u: Armed() for u in TimeUnit})
    # schedule key -> time-trigger path -> (seq, due) of its valid heap entry (what is in memory)
    live: dict[bytes, dict[str, tuple[int, int]]] = field(default_factory=dict)
    compiled: dict[bytes, Compiled] = field(default_factory=dict)  # the schedules of the entries in memory
    # per unit: every index key below it has been loaded into the heap
    loaded: dict[TimeUnit, bytes] = field(default_factory=dict)
    inflight: dict[TimeUnit, deque[tuple[int, list[Sent]]]] = field(
        default_factory=lambda: {u: deque() for u in TimeUnit}
    )
    saved: dict[TimeUnit, int] = field(default_factory=dict)
    # the latest tick whose fires were recorded (or the watermark it was assigned with): every due at or
    # before it was fired, so nothing computes a next due before it (the wall clock may step back)
    high: dict[TimeUnit, int] = field(default_factory=dict)
    # fires a command made owed at an instant already sent ahead (Punctuator.upsert): schedule key ->
    # [(the state that owes it, (unit, path, due))], fired into the partition's transaction before it
    # commits (owed.py)
    owed: dict[bytes, list[tuple[ScheduleState, tuple[TimeUnit, str, int]]]] = field(default_factory=dict)
    # schedule key -> version -> (when a command replaced it, the new version's first due per time-trigger
    # path), noted while fires due by then were staged and not sent yet (a late tick): see still_due.
    # Pruned once no fire due by then is staged (Punctuator._emit).
    # (keyed by the replaced version's Compiled, by identity, and holding it: a schedule deleted and inserted
    # again numbers its versions from 1 again)
    written: dict[bytes, dict[int, tuple[Compiled, int, dict[str, int]]]] = field(default_factory=dict)
    # fires a command made unsure at an instant being sent ahead: owed if the staged fire of the version it
    # replaced is dropped at emission, forgotten once the instant was sent (owed.py): schedule key ->
    # [(the state that would owe it, (unit, path, due), the compiled version whose staged fire decides)]
    unsure: dict[bytes, list[tuple[ScheduleState, tuple[TimeUnit, str, int], Compiled | None]]] = field(
        default_factory=dict
    )
    # instants of the window (sent ahead, being sent) a schedule's current version does not come due at but
    # an earlier one fired at (None), or may have (the compiled version whose staged fire decides): key ->
    # {(unit, path, due): that} (owed.py, Owed._settle_on)
    settled: dict[bytes, dict[tuple[TimeUnit, str, int], Compiled | None]] = field(default_factory=dict)
    # schedules deleted while an instant was sent ahead, being sent or late (staged, not sent): key -> (the
    # state deleted, its compiled version, where it was armed, the last instant it concerns), what an
    # INSERT of it again at or before that instant replaces (owed.py)
    removed: dict[bytes, tuple[ScheduleState, Compiled | None, list[tuple[str, int]], int]] = field(
        default_factory=dict
    )


@dataclass(slots=True)
class Staged:
    """A fire taken off its heap ahead of its due instant."""

    partition: int
    part: Held
    key: bytes
    path: str
    entry: Compiled
    seq: int  # its heap entry (an elapsed trigger re-armed since has another: this fire is then dropped)
    elapsed: bool  # an elapsed trigger (armed per due) rather than a time trigger
    final: bool  # no next due: drop the path from `live` once fired
    head: bytes | None  # fast path: FiredTask bytes before firedAt ...
    tail: bytes | None  # ... and after


#: the due a staged fire that leaves memory shows the loader (its next due, found in the index, is loaded)
LEAVING = 2**63


def still_due(part: Held, item: Staged, due: int) -> bool:
    """A staged fire whose schedule a command wrote since it was staged is sent all the same, as the version
    it was staged with, when that version was replaced once the instant had come (it was due before the
    change) and the new version does not come due there itself (its dues start after it)."""
    replaced = part.written.get(item.key, {}).get(id(item.entry))
    return (
        replaced is not None
        and replaced[0] is item.entry
        and due <= replaced[1]
        and due < replaced[2].get(item.path, LEAVING)
    )


def seq_of(part: Held, key: bytes, path: str) -> int | None:
    """The seq of the heap entry of (schedule, path) that counts, if one is in memory."""
    live = part.live.get(key)
    entry = None if live is None else live.get(path)
    return None if entry is None else entry[0]


def forget(part: Held, key: bytes, path: str, seq: int | None) -> None:
    """(schedule, path) leaves memory (its heap entry `seq` was the last): and the schedule with its last."""
    live = part.live.get(key)
    if live is None or (entry := live.get(path)) is None or entry[0] != seq:
        return
    del live[path]
    if not live:
        del part.live[key]
        part.compiled.pop(key, None)


def loaded_until(loaded: bytes) -> int:
    """The instant up to which an index whose keys below `loaded` are in memory is (every due before the
    one `loaded` names)."""
    return int.from_bytes(loaded[2:10], "big") - 1


def due_by(
    entry: Compiled, armed: list[tuple[str, int]], now: int, firsts: dict[str, int]
) -> list[tuple[str, int]]:
    """Each armed (path, due) of a replaced version, and its trigger's instants after it up to `now` that the
    new version does not come due at (before its first due): all were due before the change."""
    out = []
    for path, due in armed:
        trigger = entry.leaf(path)
        until = min(now, firsts.get(path, LEAVING) - 1)
        nxt: int | None = due
        while nxt is not None and nxt <= until:
            out.append((path, nxt))
            nxt = None if trigger is None else trigger.next_due(nxt)
    return out


def next_index_keys(
    key: bytes, state: ScheduleState, now: int, marks: dict[TimeUnit, int], count: int
) -> list[bytes]:
    """The index keys of a schedule's next `count` dues per time trigger after `now` (and the marks: what
    was sent ahead), where its entries are (written by its command, or moved on as it fired)."""
    out: list[bytes] = []
    if not state.firing:
        return out
    for path, trigger in state.time_leaves():
        after = max(now, state.active_since) - 1
        due = trigger.next_due(max(after, marks.get(trigger.unit, after)))
        for _ in range(count):
            if due is None:
                break
            out.append(due_key(trigger.unit, due, key, path, state.version))
            due = trigger.next_due(due)
    return out
