"""Fires prepared ahead of their due instant (the punctuator's staging): what may and may not change between
staging and firing, and the FiredTask bytes split around firedAt."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable

import pytest

from scheduler.domain.model import (
    CronTrigger,
    FiredTask,
    FrequencyTrigger,
    ProgramId,
    ScheduleKey,
    ScheduleState,
)
from scheduler.kafka.partitioner import kafka_partition
from scheduler.wire.fires import FiredTaskBytes, decode_fired, encode_fired, zigzag_long
from scheduler.worker import horizon
from scheduler.worker.held import loaded_until
from scheduler.worker.punctuator import HORIZON_MS, SEND_AHEAD_MS, STAGE_AHEAD_MS
from tests.unit.test_punctuator import T0, Harness, S, state

pytestmark = pytest.mark.unit


#: a name whose job id is 64 bytes or more: its length takes two bytes of varint
LONG_NAME = "n" * 70


@pytest.mark.parametrize("name", ["nightly/ü", LONG_NAME])
@pytest.mark.parametrize("data", [{}, {"a": "b", "ü": "x" * 300}])
@pytest.mark.parametrize(("due", "fired_at"), [(T0, T0), (T0, T0 + 3), (0, 1), (2**45, 2**45 + 99_999)])
def test_fired_task_parts_around_fired_at_are_byte_identical_to_encode_fired(name, data, due, fired_at):
    key = ScheduleKey("acme", name)
    head, tail = FiredTaskBytes(key, data).parts(due)
    expected = encode_fired(FiredTask(key, f"{key.id}@{due}", due, fired_at, data))
    assert head + zigzag_long(fired_at) + tail == expected


@pytest.mark.parametrize("name", ["nightly/ü", LONG_NAME])
@pytest.mark.parametrize("data", [{}, {"a": "b", "ü": "x" * 300}])
@pytest.mark.parametrize(("missed", "catch_up"), [(0, False), (3, True), (200, False)])
def test_a_fired_task_encoded_whole_is_byte_identical_to_encode_fired(name, data, missed, catch_up):
    key = ScheduleKey("acme", name)
    value = FiredTaskBytes(key, data).encode(T0, T0 + 7, missed, catch_up)
    assert value == encode_fired(FiredTask(key, f"{key.id}@{T0}", T0, T0 + 7, data, missed, catch_up))


async def _stage(h: Harness, now: int) -> None:
    """What the timer does STAGE_AHEAD_MS before an instant: take its fires off the heaps (loaded from the
    index ahead of it)."""
    h.clock.now = now
    await h.punctuator.horizon.fill(S, now + HORIZON_MS)
    await h.punctuator._stage(S, now + STAGE_AHEAD_MS, None)


async def test_a_staged_fire_fires_at_its_instant_with_the_firing_time_not_the_staging_time():
    h = Harness(T0 - 1)
    await h.assign(0, [state("a")], {S: T0 - 1})
    await _stage(h, T0 - 300)
    assert h.sent == []  # nothing is sent before its instant
    assert await h.tick_at(T0 - 1) == []
    [fire] = await h.tick_at(T0 + 2)
    assert (fire.due_at, fire.fired_at) == (T0, T0 + 2)
    assert [f.due_at for f in await h.tick_at(T0 + 10_000)] == [T0 + 10_000]  # the next due was pushed


async def test_a_schedule_updated_deleted_or_disabled_after_staging_does_not_fire_its_staged_instant():
    h = Harness(T0 - 1)
    a, b, c = state("a"), state("b"), state("c")
    await h.assign(0, [a, b, c], {S: T0 - 1})
    await _stage(h, T0 - 200)
    # a: updated to fire at other instants; b: deleted; c: disabled (each a new version in the table first,
    # as the ingest writes it)
    a2 = dataclasses.replace(
        a, schedule=dataclasses.replace(a.schedule, trigger=FrequencyTrigger(S, 7, T0 + 3)), version=2
    )
    c2 = dataclasses.replace(c, schedule=dataclasses.replace(c.schedule, enabled=False), version=2)
    kb_a, kb_c = h.put(0, a2), h.put(0, c2)
    kb_b = h.put(0, b)
    del h.table[(0, kb_b)]
    h.punctuator.upsert(0, kb_a, a2)
    h.punctuator.remove(0, kb_b)
    h.punctuator.upsert(0, kb_c, c2)
    assert await h.tick_at(T0 + 1) == []
    assert [(f.key.name, f.due_at) for f in await h.tick_at(T0 + 3)] == [("a", T0 + 3)]


async def test_a_partition_revoked_after_staging_does_not_fire_and_its_watermark_stays_before_it():
    h = Harness(T0 - 1)
    await h.assign(0, [state("a")], {S: T0 - 1})
    await _stage(h, T0 - 100)
    await h.punctuator.flush_progress()
    h.punctuator.revoke(0)
    assert await h.tick_at(T0 + 5) == []
    await h.punctuator.flush_progress()
    assert all(up_to < T0 for _, _, up_to in h.saved)  # the next owner catches T0 up
    # taken over again: the instant is caught up from the watermark
    await h.assign(0, [state("a")], {S: T0 - 1})
    assert [f.due_at for f in h.fired()] == [T0]


async def test_staging_takes_every_instant_of_a_fast_schedule_within_the_lead_in_order():
    h = Harness(T0 - 1)
    every_100ms = state("fast", FrequencyTrigger(S, 1, T0))  # whole seconds: one instant in the lead
    cron = state("cron", CronTrigger("* * * * * *"))
    await h.assign(0, [every_100ms, cron], {S: T0 - 1})
    await _stage(h, T0 - STAGE_AHEAD_MS + 1)
    fires = await h.tick_at(T0 + 2_000)
    assert [f.due_at for f in fires] == sorted(f.due_at for f in fires)  # instants in order
    assert sorted((f.due_at, f.key.name) for f in fires) == [
        (T0 + d, name) for d in (0, 1000, 2000) for name in ("cron", "fast")
    ]
    assert all(decode_fired(v).fired_at == T0 + 2_000 for _, _, v in h.sent)


async def _refused_at(h: Harness, now: int) -> None:
    """A tick at `now` whose sends the producer refuses: it raises, and no watermark passes T0."""
    h.mode = "raise"
    h.clock.now = now
    with pytest.raises(RuntimeError):
        await h.punctuator.tick(S)
    await h.punctuator.flush_progress()
    assert all(up_to < T0 for _, _, up_to in h.saved)
    h.mode = "ack"


async def test_a_send_that_raises_keeps_the_fire_staged_and_the_watermark_before_it():
    h = Harness(T0 - 1)
    await h.assign(0, [state("a")], {S: T0 - 1})
    await _stage(h, T0 - 100)
    await _refused_at(h, T0 + 1)
    assert [f.due_at for f in await h.tick_at(T0 + 2)] == [T0]
    await h.punctuator.flush_progress()
    assert h.saved[-1][2] == T0 + 2


class BatchHarness(Harness):
    """The punctuator with a batch sink, as the worker wires it: topic 'out' has 4 partitions, others unknown."""

    def __init__(self, now: int) -> None:
        super().__init__(now)
        self.batches: list[tuple[str, list[tuple[bytes, bytes, int]]]] = []
        p = self.punctuator
        p.emitter._send_batch = self.send_batch  # type: ignore[assignment]
        p.emitter._partition_count = lambda topic: 4 if topic == "out" else None

    async def send_batch(self, topic: str, records: list[tuple[bytes, bytes, int]]) -> list:
        if self.mode == "raise":
            raise RuntimeError("producer buffer full")
        self.batches.append((topic, records))
        futures = []
        batch: dict[int, asyncio.Future[object]] = {}  # one future per partition's batch, as the producer's
        for key, value, partition in records:
            self.sent.append((topic, key, value))
            fut = batch.get(partition)
            if fut is None:
                fut = batch[partition] = asyncio.get_running_loop().create_future()
                if self.mode == "fail":
                    fut.set_exception(RuntimeError("not acknowledged"))
                else:
                    fut.set_result(None)
            futures.append(fut)
        return futures


async def test_a_burst_goes_to_the_producer_as_one_batch_per_topic_partitioned_like_kafka():
    h = BatchHarness(T0 - 1)
    names = [f"s{i}" for i in range(50)]
    await h.assign(0, [state(n) for n in names] + [state("other", topic="elsewhere")], {S: T0 - 1})
    fires = await h.tick_at(T0 + 1)
    assert sorted(f.key.name for f in fires) == sorted([*names, "other"])
    [(topic, records)] = h.batches
    assert topic == "out" and len(records) == 50
    assert all(p == kafka_partition(key, 4) for key, _, p in records)
    assert [t for t, _, _ in h.sent].count("elsewhere") == 1  # an unknown topic: one by one
    await h.punctuator.flush_progress()
    assert h.saved[-1] == (0, S, T0 + 1)


async def test_a_failed_batch_is_sent_again_record_by_record_and_the_watermarks_wait_for_it():
    """The records of a batch share its future, and a batch holds fires of several schedule partitions: each
    fire of a failed batch is sent again once, its own partition's watermark waiting for it."""
    h = BatchHarness(T0 - 1)
    for p in (0, 1):
        await h.assign(p, [state(f"p{p}-{i}") for i in range(12)], {S: T0 - 1})
    h.mode = "fail"
    await h.tick_at(T0 + 1)
    first = list(h.sent)
    assert len(first) == 24 and len({p for _, records in h.batches for _, _, p in records}) > 1
    assert h.punctuator.stats.fires_by_unit[S] == 24
    h.mode = "ack"
    await h.punctuator.flush_progress()  # the failed fires resent, one by one
    assert h.saved == [] and h.punctuator.stats.failed_sends == 24
    assert sorted(h.sent[24:]) == sorted(first)  # each once, the same bytes
    await h.punctuator.flush_progress()
    assert sorted(h.saved) == [(0, S, T0 + 1), (1, S, T0 + 1)]


async def test_a_batch_the_producer_refuses_stays_staged_and_fires_on_the_next_round():
    h = BatchHarness(T0 - 1)
    await h.assign(0, [state("a"), state("b")], {S: T0 - 1})
    await _refused_at(h, T0 + 1)
    assert sorted(f.key.name for f in await h.tick_at(T0 + 2)) == ["a", "b"]


async def test_fired_at_is_set_even_when_the_first_fires_of_an_instant_take_the_slow_path():
    h = Harness(T0 - 1)
    slow = dataclasses.replace(
        state("slow"),
        schedule=dataclasses.replace(state("slow").schedule, program=ProgramId.parse("acme/a/workflow/p")),
    )
    h.punctuator.emitter._trigger_topic = "trigger-fired"
    await h.assign(0, [slow, state("fast")], {S: T0 - 1})
    h.clock.now = T0 + 3
    await h.punctuator.tick(S)
    fast = [decode_fired(v) for t, _, v in h.sent if t == "out"]
    assert [(f.key.name, f.fired_at) for f in fast] == [("fast", T0 + 3)]


async def test_staging_in_chunks_takes_the_earliest_of_every_partition_first_and_an_instant_by_partition():
    """A chunk (the timer's STAGE_CHUNK) takes the earliest entries of all partitions' heaps merged: none
    staged is later than one left, and an instant's entries are staged partition by partition."""
    h = Harness(T0 - 1)
    for p in (2, 0, 1):  # (assigned out of order)
        states = [state(f"p{p}-s{i}", FrequencyTrigger(S, 1 + (i + p) % 3, T0)) for i in range(4)]
        await h.assign(p, states, {S: T0 - 1})
    h.clock.now = T0 - 1
    await h.punctuator.horizon.fill(S, T0 + HORIZON_MS)
    until = T0 + 6_000
    order = list(h.punctuator._parts)  # (the merge's partition order on a tie: the punctuator's own)
    chunks = 0
    while await h.punctuator._stage(S, until, 5):
        chunks += 1
        dues, by_due = h.punctuator._staged[S]
        left = [d for part in h.punctuator._parts.values() for d, *_ in part.heaps[S].entries() if d <= until]
        assert not left or max(by_due) <= min(left), (sorted(by_due), sorted(left)[:5])
    _, by_due = h.punctuator._staged[S]
    for due, items in by_due.items():
        ranks = [order.index(item.partition) for item in items]
        assert ranks == sorted(ranks), (due, [item.partition for item in items])
    staged = sum(len(items) for items in by_due.values())
    # each schedule every 1, 2 or 3 s from T0 to T0 + 6 s
    assert staged == sum(6 // (1 + (i + p) % 3) + 1 for p in range(3) for i in range(4)) and chunks > 2


async def test_a_backlog_fires_oldest_first_while_it_is_loaded_never_past_what_every_partition_loaded(
    monkeypatch,
):
    """Behind the clock (a restart's backlog, a stall): the timer loads every partition's index a step at a
    time and fires what all of them hold, instead of loading the whole horizon first (a million dues took
    ~40 s to load before the first of them fired); a partition's fires never pass what another has not
    loaded yet (the watermark they commit drops the index entries before it)."""
    monkeypatch.setattr(horizon, "LOAD_CHUNK", 10)
    h = Harness(T0 - 1)
    p = h.punctuator
    expected = set()
    for partition in (0, 1):
        states = []
        for i in range(150):  # every minute, the first dues spread over the 30 s the worker is behind
            start = T0 + i * 200 + partition * 100
            states.append(state(f"p{partition}-{i}", FrequencyTrigger(S, 60, start)))
            expected.add((f"p{partition}-{i}", start))
        await h.assign(partition, states, {S: T0 - 1})
    loaded_at_send: list[int] = []
    send = h.send

    async def recording(topic: str, key: bytes, value: bytes) -> asyncio.Future[object]:
        loaded = [loaded_until(part.loaded[S]) for part in p._parts.values()]
        assert decode_fired(value).due_at <= min(loaded), "fired past what a partition has loaded"
        loaded_at_send.append(max(loaded))
        return await send(topic, key, value)

    p.emitter._send = recording
    h.clock.now = T0 + 30_000
    timer = asyncio.create_task(p.run_timer(S))
    try:
        async with asyncio.timeout(10):
            while len(h.sent) < len(expected):
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
    finally:
        timer.cancel()
    fired = [decode_fired(value) for _, _, value in h.sent]
    assert sorted((f.key.name, f.due_at) for f in fired) == sorted(expected)  # each once
    assert [f.due_at for f in fired] == sorted(f.due_at for f in fired)  # oldest first
    assert loaded_at_send[0] < T0 + 5_000  # the first fired when little of the backlog was loaded


async def test_a_failure_while_an_instant_is_staged_keeps_its_entries_not_taken_yet_armed():
    """An instant's entries are taken off together: one that raises while staged (here its calendar's check)
    leaves the ones after it armed, and they fire at the next tick."""
    h = Harness(T0 - 1)
    calendared = [
        dataclasses.replace(st, schedule=dataclasses.replace(st.schedule, exclude_calendars=("holidays",)))
        for st in (state(n) for n in "abcd")
    ]
    await h.assign(0, calendared, {S: T0 - 1})
    calls = []

    def excluded(tenant: str, names: tuple[str, ...], instant: int) -> str | None:
        calls.append(instant)
        if len(calls) == 1:
            raise RuntimeError("calendar table unreadable")
        return None

    h.punctuator._excluded = excluded
    h.clock.now = T0 + 1
    with pytest.raises(RuntimeError):
        await h.punctuator.tick(S)
    assert h.sent == []
    fires = await h.tick_at(T0 + 2)
    assert sorted((f.key.name, f.due_at) for f in fires) == [("b", T0), ("c", T0), ("d", T0)]


async def test_with_commits_held_an_instant_is_sent_ahead_of_it_with_firedat_the_instant_and_held_until_it():
    """Transactions: SEND_AHEAD_MS before an instant its fires are sent (firedAt = the instant) and every
    partition's transaction is held until it (Transactions.hold), so a read_committed reader sees them when
    the instant's commit lands; a command after that computes its schedule's dues after the instant, and
    owes its fire at the instant, sent into the transaction before it commits (settle: owed.py)."""
    h = Harness(T0 - 1)
    p = h.punctuator
    holds: list[tuple[int, float]] = []
    p._hold_commit = lambda partition, release: holds.append((partition, release))
    await h.assign(0, [state("a")], {S: T0 - 1})
    await h.assign(1, [state("b")], {S: T0 - 1})
    h.clock.now = T0 - SEND_AHEAD_MS // 2
    sent_at = time.monotonic()
    timer = asyncio.create_task(p.run_timer(S))
    try:
        async with asyncio.timeout(5):
            while len(h.sent) < 2 or len(holds) < 2:
                await asyncio.sleep(0.005)
        await asyncio.sleep(0.05)
        fired = [decode_fired(value) for _, _, value in h.sent]
        assert sorted((f.key.name, f.due_at, f.fired_at) for f in fired) == [("a", T0, T0), ("b", T0, T0)]
        assert sorted(partition for partition, _ in holds) == [0, 1]
        # held until the instant: half of SEND_AHEAD_MS from when the clock said so
        assert all(sent_at + SEND_AHEAD_MS / 2000 - 0.01 <= at <= time.monotonic() + 0.05 for _, at in holds)
        assert p.pending_marks(0) == {S: T0} and p.pending_marks(1) == {S: T0}  # (with them)
        c = state("c")
        p.upsert(0, h.put(0, c), c)  # every 10 s from T0, written after T0 was sent
        await asyncio.sleep(0.05)
        assert len(h.sent) == 2, "an instant already sent is not sent again"
        await p.settle(0)  # (the partition's commit: its before_commit)
        [owed] = [decode_fired(value) for _, _, value in h.sent[2:]]
        assert (owed.key.name, owed.due_at, owed.fired_at) == ("c", T0, T0), "owed at the instant"
        assert p.pending_marks(0) == {S: T0}
        await p.settle(0)
        assert len(h.sent) == 3, "owed once"
    finally:
        timer.cancel()
    assert [f.due_at for f in await h.tick_at(T0 + 10_000)] == [T0 + 10_000] * 3


async def _sending_ahead(h: Harness, *partitions: list[ScheduleState]) -> list[int]:
    """The partitions assigned with these schedules, commits held (recorded: returned), the clock
    SEND_AHEAD_MS / 2 before T0 and the horizon loaded: ready for _send_ahead(S, T0, now)."""
    held: list[int] = []
    h.punctuator._hold_commit = lambda partition, release: held.append(partition)
    for partition, states in enumerate(partitions):
        await h.assign(partition, states, {S: T0 - 1})
    h.clock.now = T0 - SEND_AHEAD_MS // 2
    await h.punctuator.horizon.fill(S, h.clock.now + HORIZON_MS)
    return held


def _on_send(h: Harness, at: int, command: Callable[[], None]) -> None:
    """Apply `command` as the send of the `at`-th fire (from 0) begins: while the instant is being sent."""

    def hook() -> None:
        if len(h.sent) == at:
            h.on_send = None
            command()

    h.on_send = hook


def _fires(h: Harness, since: int = 0) -> list[tuple[str, int, int]]:
    return sorted(
        (f.key.name, f.due_at, f.fired_at) for f in map(decode_fired, (v for _, _, v in h.sent[since:]))
    )


async def test_a_new_schedule_written_while_an_instant_is_being_sent_ahead_owes_its_fire_there():
    """A command applied while an instant is being sent (the watermark not moved yet) is not armed at the
    instant: its fire there is owed, sent into its partition's transaction before it commits (settle)."""
    h = Harness(T0 - 1)
    p = h.punctuator
    held = await _sending_ahead(h, [state("a")], [])
    late = state("late")
    _on_send(h, 0, lambda: p.upsert(1, h.put(1, late), late))
    await p._send_ahead(S, T0, h.clock.now)
    assert _fires(h) == [("a", T0, T0)]
    assert sorted(held) == [0, 1]
    await p.settle(1)
    assert _fires(h, 1) == [("late", T0, T0)]
    assert p.pending_marks(1) == {S: T0}
    await p.settle(1)
    assert len(h.sent) == 2, "owed once"
    assert _fires(h, 2) == []
    assert [f.key.name for f in await h.tick_at(T0 + 10_000)] == ["a", "late"]


async def test_an_update_while_an_instant_is_being_sent_of_a_schedule_already_sent_there_owes_nothing():
    """The fault campaign's duplicate (2026-12-05, seed 119): the update of a schedule whose fire at the
    instant was already sent armed the instant again. Its next due is after the instant now."""
    h = Harness(T0 - 1)
    p = h.punctuator
    a, b = state("a"), state("b")
    await _sending_ahead(h, [a, b])
    a2 = dataclasses.replace(a, version=a.version + 1)
    _on_send(h, 1, lambda: p.upsert(0, h.put(0, a2), a2, a))  # (as b's fire is sent: a's was)
    await p._send_ahead(S, T0, h.clock.now)
    await p.settle(0)
    assert _fires(h) == [("a", T0, T0), ("b", T0, T0)]
    h.clock.now = T0 + 1
    await p.tick(S)
    assert len(h.sent) == 2, "sent once"
    assert sorted(f.key.name for f in await h.tick_at(T0 + 10_000)) == ["a", "b"]


async def test_an_update_while_an_instant_is_being_sent_of_a_schedule_not_sent_there_yet_owes_it():
    """Its staged fire (the version it replaced) is dropped at its emission: the new version's fire there is
    owed, once, through a second update too."""
    h = Harness(T0 - 1)
    p = h.punctuator
    a, b = state("a"), state("b")
    await _sending_ahead(h, [a, b])
    b2 = dataclasses.replace(b, version=b.version + 1)
    b3 = dataclasses.replace(b, version=b.version + 2)
    _on_send(h, 0, lambda: p.upsert(0, h.put(0, b2), b2, b))  # (as a's fire is sent: b's is staged)
    await p._send_ahead(S, T0, h.clock.now)
    assert _fires(h) == [("a", T0, T0)]
    p.upsert(0, h.put(0, b3), b3, b2)
    await p.settle(0)
    [owed] = [decode_fired(v) for _, _, v in h.sent[1:]]
    assert (owed.key.name, owed.due_at, owed.fired_at) == ("b", T0, T0)
    h.clock.now = T0 + 1
    await p.tick(S)
    await p.settle(0)
    assert len(h.sent) == 2, "sent once"
    assert sorted(f.key.name for f in await h.tick_at(T0 + 10_000)) == ["a", "b"]


async def test_an_update_while_an_instant_is_being_sent_of_a_schedule_armed_not_staged_there_owes_it():
    """The sending began (waiting for a commit to end, say) and the replaced version's entry at the instant
    was still armed, not staged: it is never sent now, so the new version owes the fire there."""
    h = Harness(T0 - 1)
    p = h.punctuator
    a = state("a")
    await _sending_ahead(h, [a])
    p.owed.sending[S] = T0  # (_send_ahead's first step, before its unit of work began)
    a2 = dataclasses.replace(a, version=a.version + 1)
    p.upsert(0, h.put(0, a2), a2, a)
    await p._send_ahead(S, T0, h.clock.now)
    assert _fires(h) == []
    await p.settle(0)
    assert [(n, due) for n, due, _ in _fires(h)] == [("a", T0)]
    assert sorted(f.key.name for f in await h.tick_at(T0 + 10_000)) == ["a"]
    assert len(h.sent) == 2


async def test_an_update_at_the_instant_while_it_is_being_sent_of_a_schedule_armed_there_fires_it_once():
    """The sending waited past the instant (a commit) with the replaced version still armed there: that
    fire is due already, so it is staged as it was, and nothing is owed besides."""
    h = Harness(T0 - 1)
    p = h.punctuator
    a = state("a")
    await _sending_ahead(h, [a])
    p.owed.sending[S] = T0
    h.clock.now = T0
    a2 = dataclasses.replace(a, version=a.version + 1, active_since=T0)
    p.upsert(0, h.put(0, a2), a2, a)
    await p._send_ahead(S, T0, h.clock.now)
    await p.settle(0)
    assert [(n, due) for n, due, _ in _fires(h)] == [("a", T0)]
    assert sorted(f.key.name for f in await h.tick_at(T0 + 10_000)) == ["a"]
    assert len(h.sent) == 2


async def _staged_at_t0() -> tuple[Harness, ScheduleState]:
    """Schedule "a" (every 10 s from T0) assigned, its fire at T0 staged 100 ms before it."""
    h = Harness(T0 - 1)
    a = state("a")
    await h.assign(0, [a], {S: T0 - 1})
    h.clock.now = T0 - 100
    await h.punctuator.horizon.fill(S, h.clock.now + HORIZON_MS)
    await h.punctuator._stage(S, T0, None)
    return h, a


async def test_a_schedule_written_after_its_instant_came_fires_there_as_it_was_when_the_tick_is_late():
    """Its fire there was staged and not sent yet (the timer late): the instant was due before the change,
    so it fires, as the version it was staged with, once; the new version's dues come after the write."""
    h, a = await _staged_at_t0()
    p = h.punctuator
    h.clock.now = T0 + 5
    a2 = dataclasses.replace(a, version=a.version + 1, active_since=T0 + 5)
    p.upsert(0, h.put(0, a2), a2, a)
    assert [(f.key.name, f.due_at) for f in await h.tick_at(T0 + 6)] == [("a", T0)]
    assert [f.due_at for f in await h.tick_at(T0 + 10_000)] == [T0 + 10_000]
    assert len(h.sent) == 2
    assert p._parts[0].written == {}, "forgotten once nothing staged is due before the write"


async def test_of_the_versions_staged_at_an_instant_only_the_one_current_then_fires_there():
    """Written twice, once before the instant (its fire there staged again) and once after it came with the
    tick late: the version of the first write fires there, once; the one it replaced before the instant
    does not."""
    h, a = await _staged_at_t0()
    p = h.punctuator

    def version(n: int, at: int) -> ScheduleState:
        data = {"v": str(n)}
        return dataclasses.replace(
            a, version=a.version + n, active_since=at, schedule=dataclasses.replace(a.schedule, data=data)
        )

    h.clock.now = T0 - 50
    a1 = version(1, h.clock.now)
    p.upsert(0, h.put(0, a1), a1, a)
    await p._stage(S, T0, None)
    h.clock.now = T0 + 5
    a2 = version(2, h.clock.now)
    p.upsert(0, h.put(0, a2), a2, a1)
    assert [(f.due_at, f.data) for f in await h.tick_at(T0 + 6)] == [(T0, {"v": "1"})]
    assert [(f.due_at, f.data) for f in await h.tick_at(T0 + 10_000)] == [(T0 + 10_000, {"v": "2"})]


@pytest.mark.parametrize(
    ("written_at", "active_since", "fires"),
    [
        (T0 + 5, T0 + 5, "1"),  # armed, not staged (the timer late): it fires as it was
        (T0, T0, "1"),  # at the instant, the new version active from it (due after it): as it was
        (T0, T0 - 1, "2"),  # at the instant, the new version due there itself: as the new version, once
    ],
)
async def test_a_schedule_written_once_its_instant_came_fires_there_once(
    written_at: int, active_since: int, fires: str
):
    """Its fire there was armed, not staged (the timer late): the version current then makes it."""
    h = Harness(T0 - 1)
    p = h.punctuator
    a = state("a", FrequencyTrigger(S, 10), active_since=T0 - 10_001)  # (due from the second after it)
    a1 = dataclasses.replace(a, schedule=dataclasses.replace(a.schedule, data={"v": "1"}))
    await h.assign(0, [a1], {S: T0 - 1})
    await p.horizon.fill(S, h.clock.now + HORIZON_MS)
    h.clock.now = written_at
    a2 = dataclasses.replace(
        a1,
        version=a.version + 1,
        active_since=active_since,
        schedule=dataclasses.replace(a.schedule, data={"v": "2"}),
    )
    p.upsert(0, h.put(0, a2), a2, a1)
    assert [(f.due_at, f.data) for f in await h.tick_at(T0 + 6)] == [(T0, {"v": fires})]
    later = await h.tick_at(T0 + 20_000)
    assert later and all(f.due_at > T0 and f.data == {"v": "2"} for f in later)


async def test_a_schedule_written_after_its_instant_while_it_is_still_being_sent_fires_there_as_it_was():
    """The instant's sending began before it and was still going on after it (a commit, a long unit of
    commands): an update then, of a schedule whose fire there is not sent yet, does not take it away."""
    h = Harness(T0 - 1)
    p = h.punctuator
    a, b = state("a"), state("b")
    await _sending_ahead(h, [a, b])
    b2 = dataclasses.replace(b, version=b.version + 1, active_since=T0 + 5)

    def late_update() -> None:
        h.clock.now = T0 + 5
        p.upsert(0, h.put(0, b2), b2, b)

    _on_send(h, 0, late_update)  # (as a's fire is sent: b's is staged)
    await p._send_ahead(S, T0, h.clock.now)
    await p.settle(0)
    assert [(n, due) for n, due, _ in _fires(h)] == [("a", T0), ("b", T0)]
    assert sorted(f.key.name for f in await h.tick_at(T0 + 10_000)) == ["a", "b"]
    assert len(h.sent) == 4


async def test_a_command_after_an_instant_was_sent_ahead_owes_only_what_its_previous_version_did_not_fire():
    """An update of a schedule fired at the instant sent ahead owes nothing; a delete, or a later update
    that no longer comes due then, takes back what was owed; a partition revoked while owing says so (its
    transaction must not commit: ownership._take_up)."""
    h = Harness(T0 - 1)
    p = h.punctuator
    p._hold_commit = lambda partition, release: None
    a = state("a")
    await h.assign(0, [a], {S: T0 - 1})
    h.clock.now = T0 - SEND_AHEAD_MS // 2
    await p.horizon.fill(S, h.clock.now + HORIZON_MS)
    await p._send_ahead(S, T0, h.clock.now)
    assert [decode_fired(v).key.name for _, _, v in h.sent] == ["a"]
    a2 = dataclasses.replace(a, version=a.version + 1)
    p.upsert(0, h.put(0, a2), a2, a)
    b = state("b")
    kb = h.put(0, b)
    p.upsert(0, kb, b)
    p.remove(0, kb)
    c = state("c")
    kc = h.put(0, c)
    p.upsert(0, kc, c)
    later = state("c", FrequencyTrigger(S, 10, T0 + 5_000))
    p.upsert(0, h.put(0, later), later, c)
    d = state("d")
    p.upsert(0, h.put(0, d), d)
    await p.settle(0)
    assert [decode_fired(v).key.name for _, _, v in h.sent[1:]] == ["d"]
    e = state("e")
    p.upsert(0, h.put(0, e), e)
    assert p.revoke(0) is True
    assert p.revoke(0) is False


async def test_without_commits_held_nothing_is_sent_before_its_instant():
    h = Harness(T0 - 1)
    p = h.punctuator
    await h.assign(0, [state("a")], {S: T0 - 1})
    h.clock.now = T0 - SEND_AHEAD_MS // 2
    timer = asyncio.create_task(p.run_timer(S))
    try:
        await asyncio.sleep(0.1)
        assert h.sent == []
    finally:
        timer.cancel()
