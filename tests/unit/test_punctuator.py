"""Punctuator driven with fakes: a mutable clock, a recording send, a dict-backed table, recorded progress."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterable

import pytest

from scheduler.domain.model import (
    CatchUpPolicy,
    CronTrigger,
    FiredTask,
    FrequencyTrigger,
    Schedule,
    ScheduleKey,
    ScheduleState,
    TimeUnit,
    Trigger,
)
from scheduler.kafka.transactions import PartitionGone
from scheduler.wire.codec import key_bytes
from scheduler.wire.fires import decode_fired
from scheduler.worker.held import Unreadable
from scheduler.worker.punctuator import Punctuator

pytestmark = pytest.mark.unit

#: 2024-01-01T00:00:00Z
T0 = 1_704_067_200_000
S = TimeUnit.SECONDS


class FakeClock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class Harness:
    """A punctuator with recording fakes. `mode` decides how the futures send returns end up."""

    def __init__(self, now: int) -> None:
        self.clock = FakeClock(now)
        self.table: dict[tuple[int, bytes], ScheduleState] = {}
        self.sent: list[tuple[str, bytes, bytes]] = []
        self.futures: list[asyncio.Future[object]] = []
        self.saved: list[tuple[int, TimeUnit, int]] = []
        # "ack": resolved, "pending": unresolved, "fail": failed, "raise": send raises, "revoke": partition 0
        # is revoked while the send is awaited
        self.mode = "ack"
        self.unreadable = 0  # how many of the next loads fail as a store that cannot be opened does
        self.undecodable: set[bytes] = set()  # the keys whose state cannot be decoded
        self.on_send: Callable[[], None] | None = None  # called as each send begins (what happens meanwhile)
        self.punctuator = Punctuator(self.send, self.load, self.save_progress, self.clock)

    async def send(self, topic: str, key: bytes, value: bytes) -> asyncio.Future[object]:
        if self.mode == "raise":
            raise RuntimeError("producer buffer full")
        if self.mode == "revoke":  # the partition is revoked while this send is awaited
            self.punctuator.revoke(0)
        if self.on_send is not None:
            self.on_send()
        self.sent.append((topic, key, value))
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        if self.mode == "ack":
            fut.set_result(None)
        elif self.mode == "fail":
            fut.set_exception(RuntimeError("not acknowledged"))
        self.futures.append(fut)
        return fut

    def load(self, partition: int, key: bytes) -> ScheduleState | None:
        if self.unreadable > 0:
            self.unreadable -= 1
            raise Unreadable(partition, OSError("IO error: lock hold by current process"))
        if key in self.undecodable:
            raise ValueError("not an Avro ScheduleState")
        return self.table.get((partition, key))

    def save_progress(self, partition: int, unit: TimeUnit, fired_up_to: int) -> None:
        self.saved.append((partition, unit, fired_up_to))

    # --- helpers ---

    def put(self, partition: int, state: ScheduleState) -> bytes:
        kb = key_bytes(state.schedule.key)
        self.table[(partition, kb)] = state
        return kb

    async def assign(
        self, partition: int, states: Iterable[ScheduleState], fired_up_to: dict[TimeUnit, int] | None = None
    ) -> None:
        pairs = [(self.put(partition, st), st) for st in states]
        await self.punctuator.assign(partition, pairs, fired_up_to or {})

    async def tick_at(self, now: int, unit: TimeUnit = S) -> list[FiredTask]:
        """Move the clock to `now`, tick, and return the fires this tick produced."""
        self.clock.now = now
        before = len(self.sent)
        await self.punctuator.tick(unit)
        return [decode_fired(value) for _, _, value in self.sent[before:]]

    def fired(self) -> list[FiredTask]:
        return [decode_fired(value) for _, _, value in self.sent]


def state(
    name: str,
    trigger: Trigger | None = None,
    *,
    enabled: bool = True,
    active_since: int = T0 - 1_000,
    catch_up: CatchUpPolicy = CatchUpPolicy.COALESCE,
    window_ms: int = 3_600_000,
    topic: str = "out",
) -> ScheduleState:
    schedule = Schedule(
        ScheduleKey("acme", name),
        trigger or FrequencyTrigger(S, 10, T0),
        topic,
        {"name": name},
        enabled=enabled,
        catch_up=catch_up,
        catch_up_window_ms=window_ms,
    )
    return ScheduleState(schedule, active_since, active_since, active_since)


def dues_by_name(fires: list[FiredTask]) -> list[tuple[str, int]]:
    return [(f.key.name, f.due_at - T0) for f in fires]


# --- assign and catch-up ---------------------------------------------------------------------------


async def test_taking_a_partition_up_or_giving_it_up_tells_the_moved_callbacks() -> None:
    """The delayed messages' loop sleeps while quiet and is woken by these (worker/delayed.py)."""
    h = Harness(T0 + 25_000)
    seen: list[set[int]] = []
    h.punctuator.moved.append(lambda: seen.append(h.punctuator.partitions))
    await h.assign(0, [state("a")], {S: T0 + 25_000})
    await h.assign(1, [], {S: T0 + 25_000})
    h.punctuator.revoke(0)
    h.punctuator.clear()
    assert seen == [{0}, {0, 1}, {1}, set()]


async def test_assign_with_nothing_missed_fires_nothing_and_schedules_the_next_due() -> None:
    h = Harness(T0 + 25_000)
    await h.assign(0, [state("a")], {S: T0 + 25_000})
    assert h.sent == []
    assert h.punctuator.partitions == {0}
    assert await h.tick_at(T0 + 29_999) == []
    fires = await h.tick_at(T0 + 30_000)
    assert dues_by_name(fires) == [("a", 30_000)]
    assert fires[0].catch_up is False and fires[0].missed == 0


async def test_assign_after_a_watermark_catches_up_each_schedule_by_its_policy() -> None:
    # every 10 s from T0; progress saved up to T0+5s; taken over at T0+45s: 10, 20, 30, 40 s were missed
    now = T0 + 45_000
    h = Harness(now)
    await h.assign(
        3,
        [
            state("coalesce", catch_up=CatchUpPolicy.COALESCE),
            state("each", catch_up=CatchUpPolicy.EACH),
            state("skip", catch_up=CatchUpPolicy.SKIP),
        ],
        {S: T0 + 5_000},
    )
    fires = h.fired()
    assert all(f.catch_up for f in fires)
    assert all(f.fired_at == now for f in fires)
    # (schedules in the order of their index entries; each one's fires in order)
    assert sorted((f.key.name, f.due_at - T0, f.missed) for f in fires) == [
        ("coalesce", 40_000, 3),
        ("each", 10_000, 0),
        ("each", 20_000, 0),
        ("each", 30_000, 0),
        ("each", 40_000, 0),
    ]
    assert [f.job_id for f in fires if f.key.name == "coalesce"] == [f"acme/coalesce@{T0 + 40_000}"]
    assert all(
        topic == "out" and key == key_bytes(ScheduleKey("acme", decode_fired(v).key.name))
        for topic, key, v in h.sent
    )
    assert h.punctuator.stats.catch_up_fires == 5
    assert h.punctuator.stats.skipped == 4
    # afterwards all three fire normally at the next due
    fires = await h.tick_at(T0 + 50_000)
    assert sorted(dues_by_name(fires)) == [("coalesce", 50_000), ("each", 50_000), ("skip", 50_000)]
    assert not any(f.catch_up for f in fires)


async def test_assign_without_a_watermark_owes_every_due_since_the_schedule_became_active() -> None:
    h = Harness(T0 + 45_000)
    await h.assign(0, [state("a", active_since=T0 + 12_000, catch_up=CatchUpPolicy.EACH)])
    assert dues_by_name(h.fired()) == [("a", 20_000), ("a", 30_000), ("a", 40_000)]


async def test_a_watermark_older_than_active_since_does_not_revive_dues_before_it() -> None:
    h = Harness(T0 + 45_000)
    await h.assign(0, [state("a", active_since=T0 + 25_000, catch_up=CatchUpPolicy.EACH)], {S: T0})
    assert dues_by_name(h.fired()) == [("a", 30_000), ("a", 40_000)]


async def test_the_watermark_of_another_unit_does_not_count() -> None:
    h = Harness(T0 + 45_000)
    await h.assign(0, [state("a", active_since=T0 + 25_000)], {TimeUnit.MINUTES: T0 + 45_000})
    [fire] = h.fired()
    assert (fire.due_at, fire.missed, fire.catch_up) == (T0 + 40_000, 1, True)


async def test_catch_up_respects_the_schedule_window() -> None:
    h = Harness(T0 + 45_000)
    await h.assign(0, [state("a", catch_up=CatchUpPolicy.EACH, window_ms=20_000)], {S: T0 + 5_000})
    assert dues_by_name(h.fired()) == [("a", 30_000), ("a", 40_000)]
    assert h.punctuator.stats.skipped == 2


async def test_assign_ignores_disabled_schedules() -> None:
    h = Harness(T0 + 45_000)
    await h.assign(0, [state("off", enabled=False)], {S: T0})
    assert h.sent == []
    assert await h.tick_at(T0 + 100_000) == []


async def test_assign_catches_up_a_cron_schedule_on_its_own_unit() -> None:
    h = Harness(T0 + 3 * 60_000 + 30_000)
    every_minute = CronTrigger("* * * * *", "UTC")
    await h.assign(0, [state("cron", every_minute)], {TimeUnit.MINUTES: T0 + 30_000})
    [fire] = h.fired()
    assert (fire.due_at, fire.missed, fire.catch_up) == (T0 + 180_000, 2, True)  # 60, 120, 180 s missed
    assert await h.tick_at(T0 + 240_000, S) == []  # driven by the minute timer, not the second one
    assert dues_by_name(await h.tick_at(T0 + 240_000, TimeUnit.MINUTES)) == [("cron", 240_000)]


# --- ticking ---------------------------------------------------------------------------------------


async def test_tick_fires_exactly_the_due_schedules_and_reschedules_them() -> None:
    h = Harness(T0 - 1)
    every_15 = FrequencyTrigger(S, 15, T0)
    await h.assign(0, [state("a"), state("b", every_15)], {S: T0 - 1})
    steps = {
        T0: [("a", 0), ("b", 0)],
        T0 + 5_000: [],
        T0 + 9_999: [],
        T0 + 10_000: [("a", 10_000)],
        T0 + 14_000: [],
        T0 + 15_500: [("b", 15_000)],  # a late tick fires the due instant, not the tick time
        T0 + 20_000: [("a", 20_000)],
        T0 + 30_000: [("a", 30_000), ("b", 30_000)],
    }
    for now, expected in steps.items():
        fires = await h.tick_at(now)
        assert sorted(dues_by_name(fires)) == expected, f"at T0+{now - T0}"
        assert all(f.fired_at == now and not f.catch_up and f.missed == 0 for f in fires)
    assert h.punctuator.stats.fires == 7


async def test_tick_of_another_unit_fires_nothing() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("a")], {S: T0 - 1})
    for unit in TimeUnit:
        if unit is not S:
            assert await h.tick_at(T0 + 60_000, unit) == []
    assert dues_by_name(await h.tick_at(T0 + 1, S)) == [("a", 0)]


async def test_a_tick_late_by_several_periods_fires_each_due_instant_in_order() -> None:
    """Observed: a tick that runs several periods late (event loop stalled) fires every due instant it
    passed, oldest first, as regular fires (catch_up false), all with the late tick time as firedAt."""
    h = Harness(T0 - 1)
    await h.assign(0, [state("a")], {S: T0 - 1})
    fires = await h.tick_at(T0 + 35_000)
    assert dues_by_name(fires) == [("a", 0), ("a", 10_000), ("a", 20_000), ("a", 30_000)]
    assert {f.fired_at for f in fires} == {T0 + 35_000}
    assert dues_by_name(await h.tick_at(T0 + 40_000)) == [("a", 40_000)]


async def test_fired_task_carries_the_schedule_data_topic_and_deterministic_job_id() -> None:
    h = Harness(T0 - 1)
    await h.assign(5, [state("a", topic="jobs.out")], {S: T0 - 1})
    [fire] = await h.tick_at(T0)
    topic, key, _ = h.sent[0]
    assert topic == "jobs.out"
    assert key == key_bytes(ScheduleKey("acme", "a"))
    assert fire == FiredTask(ScheduleKey("acme", "a"), f"acme/a@{T0}", T0, T0, {"name": "a"})


async def test_a_schedule_disabled_in_the_table_does_not_fire() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("a")], {S: T0 - 1})
    kb = key_bytes(ScheduleKey("acme", "a"))
    h.table[(0, kb)] = state("a", enabled=False)
    h.punctuator.upsert(0, kb, h.table[(0, kb)])  # the schedule agent tells the punctuator of every change
    assert await h.tick_at(T0) == []
    assert await h.tick_at(T0 + 100_000) == []


async def test_a_schedule_gone_from_the_table_does_not_fire() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("a"), state("b")], {S: T0 - 1})
    del h.table[(0, key_bytes(ScheduleKey("acme", "a")))]
    assert dues_by_name(await h.tick_at(T0)) == [("b", 0)]
    assert dues_by_name(await h.tick_at(T0 + 10_000)) == [("b", 10_000)]


async def test_a_removed_schedule_does_not_fire() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("a"), state("b")], {S: T0 - 1})
    del h.table[(0, key_bytes(ScheduleKey("acme", "a")))]  # (the ingest deletes it from the table, then:)
    h.punctuator.remove(0, key_bytes(ScheduleKey("acme", "a")))
    assert dues_by_name(await h.tick_at(T0)) == [("b", 0)]
    h.punctuator.remove(7, b"not-owned")  # a partition it does not own: nothing happens


async def test_upsert_of_a_disabled_state_stops_the_schedule() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("a")], {S: T0 - 1})
    paused = state("a", enabled=False)
    kb = h.put(0, paused)
    h.punctuator.upsert(0, kb, paused)
    assert await h.tick_at(T0 + 60_000) == []


async def test_upsert_of_an_update_replaces_the_old_heap_entry_without_double_fire() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("a")], {S: T0 - 1})  # every 10 s from T0
    assert dues_by_name(await h.tick_at(T0)) == [("a", 0)]
    # at T0+1s the schedule is updated to every 7 s from T0+3s: its old entry (due T0+10s) must not fire
    h.clock.now = T0 + 1_000
    updated = state("a", FrequencyTrigger(S, 7, T0 + 3_000), active_since=T0 + 1_000)
    kb = h.put(0, updated)
    h.punctuator.upsert(0, kb, updated)
    assert dues_by_name(await h.tick_at(T0 + 3_000)) == [("a", 3_000)]
    assert dues_by_name(await h.tick_at(T0 + 10_000)) == [("a", 10_000)]  # new cadence, once
    assert dues_by_name(await h.tick_at(T0 + 17_000)) == [("a", 17_000)]
    assert await h.tick_at(T0 + 20_000) == []  # the old cadence is gone


async def test_upsert_that_moves_a_schedule_to_another_unit_leaves_nothing_behind() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("a")], {S: T0 - 1})
    h.clock.now = T0 - 1
    to_cron = state("a", CronTrigger("* * * * *"), active_since=T0 - 1)
    kb = h.put(0, to_cron)
    h.punctuator.upsert(0, kb, to_cron)
    assert await h.tick_at(T0 + 30_000, S) == []  # the old every-10-s entry is gone
    assert dues_by_name(await h.tick_at(T0 + 30_000, TimeUnit.MINUTES)) == [("a", 0)]
    assert dues_by_name(await h.tick_at(T0 + 60_000, TimeUnit.MINUTES)) == [("a", 60_000)]


async def test_upsert_of_a_new_schedule_starts_it_from_now() -> None:
    h = Harness(T0 + 25_000)
    await h.assign(0, [], {})
    new = state("new", active_since=T0 + 25_000)
    kb = h.put(0, new)
    h.punctuator.upsert(0, kb, new)
    assert dues_by_name(await h.tick_at(T0 + 30_000)) == [("new", 30_000)]  # no catch-up of 0..20 s


async def test_upsert_for_a_partition_not_owned_is_ignored() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [], {})
    st = state("elsewhere")
    h.punctuator.upsert(1, h.put(1, st), st)
    assert h.punctuator.partitions == {0}
    assert await h.tick_at(T0 + 60_000) == []


async def test_revoke_drops_the_partition_and_its_schedules() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("p0")], {S: T0 - 1})
    await h.assign(1, [state("p1")], {S: T0 - 1})
    h.punctuator.revoke(0)
    assert h.punctuator.partitions == {1}
    assert dues_by_name(await h.tick_at(T0)) == [("p1", 0)]
    h.punctuator.revoke(0)  # revoking twice is harmless
    h.punctuator.clear()
    assert h.punctuator.partitions == set()
    assert await h.tick_at(T0 + 10_000) == []


async def test_reassigning_a_partition_rebuilds_it_from_the_given_states() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("old")], {S: T0 - 1})
    h.table.clear()
    await h.assign(0, [state("new")], {S: T0 - 1})
    assert dues_by_name(await h.tick_at(T0)) == [("new", 0)]


# --- progress ---------------------------------------------------------------------------------------


async def test_flush_saves_the_tick_time_once_its_fires_are_acknowledged() -> None:
    h = Harness(T0 - 1)
    await h.assign(2, [state("a")], {S: T0 - 1})
    await h.punctuator.flush_progress()
    assert h.saved == []  # nothing fired yet
    await h.tick_at(T0 + 400)
    await h.punctuator.flush_progress()
    assert h.saved == [(2, S, T0 + 400)]
    await h.punctuator.flush_progress()
    assert h.saved == [(2, S, T0 + 400)]  # not saved again
    await h.tick_at(T0 + 5_000)  # no fire: nothing new to save
    await h.punctuator.flush_progress()
    assert h.saved == [(2, S, T0 + 400)]
    await h.tick_at(T0 + 10_000)
    await h.punctuator.flush_progress()
    assert h.saved == [(2, S, T0 + 400), (2, S, T0 + 10_000)]


async def test_flush_does_not_save_a_tick_whose_fires_are_still_pending() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("a"), state("b")], {S: T0 - 1})
    h.mode = "pending"
    await h.tick_at(T0)
    await h.punctuator.flush_progress()
    assert h.saved == []
    h.futures[0].set_result(None)  # one of the two acknowledged: still not saved
    await h.punctuator.flush_progress()
    assert h.saved == []
    h.futures[1].set_result(None)
    await h.punctuator.flush_progress()
    assert h.saved == [(0, S, T0)]


async def test_a_later_acknowledged_tick_waits_for_an_earlier_pending_one() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("a")], {S: T0 - 1})
    h.mode = "pending"
    await h.tick_at(T0)
    pending = h.futures[-1]
    h.mode = "ack"
    await h.tick_at(T0 + 10_000)
    await h.punctuator.flush_progress()
    assert h.saved == []
    pending.set_result(None)
    await h.punctuator.flush_progress()
    assert h.saved == [(0, S, T0 + 10_000)]  # the latest acknowledged tick, in one save


async def test_a_failed_fire_is_sent_again_and_the_watermark_waits_for_it() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("a")], {S: T0 - 1})
    h.mode = "fail"
    await h.tick_at(T0)
    assert len(h.sent) == 1
    h.mode = "ack"
    await h.punctuator.flush_progress()
    assert h.saved == []
    assert h.sent[1] == h.sent[0]  # same topic, key and value bytes
    assert h.punctuator.stats.failed_sends == 1
    await h.punctuator.flush_progress()
    assert h.saved == [(0, S, T0)]
    assert len(h.sent) == 2


async def test_a_fire_that_fails_again_is_resent_again() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("a")], {S: T0 - 1})
    h.mode = "fail"
    await h.tick_at(T0)
    await h.punctuator.flush_progress()
    await h.punctuator.flush_progress()
    assert len(h.sent) == 3 and len(set(h.sent)) == 1
    assert h.saved == []
    h.mode = "ack"
    await h.punctuator.flush_progress()
    await h.punctuator.flush_progress()
    assert h.saved == [(0, S, T0)]


async def test_only_the_failed_fires_of_a_tick_are_sent_again() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("a"), state("b")], {S: T0 - 1})
    h.mode = "pending"
    await h.tick_at(T0)
    first, second = h.futures
    first.set_result(None)
    second.set_exception(RuntimeError("lost"))
    await h.punctuator.flush_progress()
    assert len(h.sent) == 3
    assert h.sent[2] == h.sent[1]
    h.futures[2].set_result(None)
    await h.punctuator.flush_progress()
    assert h.saved == [(0, S, T0)]


async def test_catch_up_fires_advance_the_watermark_to_the_takeover_time() -> None:
    h = Harness(T0 + 45_000)
    await h.assign(4, [state("a")], {S: T0 + 5_000})
    await h.punctuator.flush_progress()
    assert h.saved == [(4, S, T0 + 45_000)]


async def test_progress_is_kept_per_partition_and_unit() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("a")], {})
    await h.assign(1, [state("b"), state("cron", CronTrigger("* * * * *"))], {})
    await h.tick_at(T0)
    await h.tick_at(T0 + 60_000, TimeUnit.MINUTES)
    await h.punctuator.flush_progress()
    assert set(h.saved) == {(0, S, T0), (1, S, T0), (1, TimeUnit.MINUTES, T0 + 60_000)}
    assert len(h.saved) == 3


async def test_a_revoked_partition_saves_no_progress() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("a")], {S: T0 - 1})
    await h.tick_at(T0)
    h.punctuator.revoke(0)
    await h.punctuator.flush_progress()
    assert h.saved == []


# --- bugs ------------------------------------------------------------------------------------------


async def test_a_send_that_raises_does_not_drop_the_schedule() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("a")], {S: T0 - 1})
    h.mode = "raise"
    with pytest.raises(RuntimeError):
        await h.tick_at(T0)
    h.mode = "ack"
    fires = await h.tick_at(T0 + 10_000)
    assert ("a", 10_000) in dues_by_name(fires)


async def test_upsert_of_a_schedule_whose_start_is_exactly_now_fires_at_start() -> None:
    h = Harness(T0)
    await h.assign(0, [], {})
    new = dataclasses.replace(state("a", FrequencyTrigger(S, 10, T0)), active_since=T0)
    h.punctuator.upsert(0, h.put(0, new), new)
    assert dues_by_name(await h.tick_at(T0)) == [("a", 0)]


# --- a store that cannot be read drops nothing (seed 2021 of the fault campaign) -----------------------


async def test_a_store_unreadable_when_a_partition_is_caught_up_drops_none_of_its_index() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("a"), state("b")], {S: T0 - 1})
    h.punctuator.revoke(0)
    h.clock.now = T0 + 25_000  # 0, 10 and 20 s went by unfired: the next owner catches them up
    h.unreadable = 1
    with pytest.raises(Unreadable) as failed:
        await h.punctuator.assign(0, None, {S: T0 - 1})  # (its index is complete: no states given)
    await h.punctuator.unreadable(failed.value)
    assert h.punctuator.partitions == set() and h.punctuator.stats.unreadable == 1
    assert h.sent == []
    await h.punctuator.assign(0, None, {S: T0 - 1})  # readable again: every entry is still there
    assert sorted(dues_by_name(h.fired())) == [("a", 20_000), ("b", 20_000)]  # (coalesced)
    assert dues_by_name(await h.tick_at(T0 + 30_000)) == [("a", 30_000), ("b", 30_000)]


async def test_a_store_unreadable_when_the_horizon_is_loaded_drops_none_of_its_index() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("a")], {S: T0 - 1})
    h.unreadable = 1
    with pytest.raises(Unreadable) as failed:
        await h.tick_at(T0)
    await h.punctuator.unreadable(failed.value)
    assert h.sent == [] and h.punctuator.partitions == set()
    await h.punctuator.assign(0, None, {S: T0 - 1})  # back: the instant the failed tick owed is caught up
    assert dues_by_name(h.fired()) == [("a", 0)]
    assert dues_by_name(await h.tick_at(T0 + 10_000)) == [("a", 10_000)]


async def test_an_undecodable_schedule_state_drops_its_entry_and_the_others_fire() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("a"), state("b")], {S: T0 - 1})
    h.undecodable = {key_bytes(ScheduleKey("acme", "a"))}
    assert dues_by_name(await h.tick_at(T0)) == [("b", 0)]
    h.undecodable = set()  # (its entry was dropped: only a command that writes it again indexes it)
    assert dues_by_name(await h.tick_at(T0 + 10_000)) == [("b", 10_000)]


async def test_a_partition_revoked_while_it_is_caught_up_is_scanned_no_further() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("a"), state("b")], {S: T0 - 1})
    h.punctuator.revoke(0)
    h.clock.now = T0 + 25_000
    h.mode = "revoke"
    with pytest.raises(PartitionGone):
        await h.punctuator.assign(0, None, {S: T0 - 1})
    assert len(h.sent) == 1 and h.punctuator.partitions == set()
    h.mode = "ack"
    await h.punctuator.assign(0, None, {S: T0 - 1})  # (the next owner: its index was left as it was)
    assert sorted(dues_by_name(h.fired()[1:])) == [("a", 20_000), ("b", 20_000)]


async def test_what_the_horizon_compiles_is_frozen_once_a_load_has_compiled_freeze_after_schedules(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Most schedules come into memory as they come due, after the takeover froze what it built: the loader
    freezes them too (collector.freeze_long_lived), or every full collection walks them again."""
    import gc

    from scheduler.worker import horizon

    monkeypatch.setattr(horizon, "FREEZE_AFTER", 3)
    h = Harness(T0 + 5_000)
    minutely = FrequencyTrigger(S, 60, T0)  # (first due at T0 + 60 s: past the horizon at the takeover)
    await h.assign(0, [state(f"s{i}", minutely) for i in range(2)], {S: T0 + 5_000})
    await h.assign(1, [state(f"t{i}", minutely) for i in range(2)], {S: T0 + 5_000})
    frozen = gc.get_freeze_count()
    try:
        await h.tick_at(T0 + 55_000)  # the horizon loads the four schedules: frozen after the load
        assert h.punctuator.horizon.unfrozen == 0 and gc.get_freeze_count() > frozen
        assert sorted(dues_by_name(await h.tick_at(T0 + 60_000))) == [
            ("s0", 60_000),
            ("s1", 60_000),
            ("t0", 60_000),
            ("t1", 60_000),
        ]
        frozen = gc.get_freeze_count()
        await h.tick_at(T0 + 115_000)  # (the next load compiles nothing: in memory still, nothing to freeze)
        assert gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()
