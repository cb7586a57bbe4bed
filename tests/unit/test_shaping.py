"""Bounds, spread and jitter of a schedule's time instants (scheduler.domain.triggers.shaping), and one-shot
schedules."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from scheduler.domain.model import (
    CronTrigger,
    FrequencyTrigger,
    InvalidSchedule,
    OnceTrigger,
    PartitionTrigger,
    ProgramId,
    Schedule,
    ScheduleKey,
    ScheduleState,
    TimeUnit,
)
from scheduler.domain.triggers.shaping import jitter_of, spread_offset

pytestmark = pytest.mark.unit

DAY = 86_400_000
T0 = 1_795_305_600_000  # 2026-11-22T00:00:00Z


def daily(name: str, **kw: object) -> ScheduleState:
    s = Schedule(ScheduleKey("acme", name), CronTrigger("0 0 0 * * *"), "out", enabled=True, **kw)  # type: ignore[arg-type]
    s.validate()
    return ScheduleState(s, T0 - DAY, T0 - DAY, T0 - DAY)


def dues(state: ScheduleState, after: int, n: int) -> list[int]:
    out, t, ev = [], after, state.evaluator()
    for _ in range(n):
        nxt = ev.next_due(t)
        if nxt is None:
            break
        out.append(nxt)
        t = nxt
    return out


def test_user_story_5_a_daily_anytime_schedule_gets_one_stable_slot_a_day_and_ten_thousand_are_spread_flat() -> (
    None
):
    """Seed 003's user story 5: thousands of feeds "once a day at no particular time". Each gets a slot of
    the day from its key (the same on every worker, after every restart); together they are flat."""
    one = daily("feed-1", spread_ms=DAY)
    slot = spread_offset("acme/feed-1", DAY)
    assert dues(one, T0 - 1, 3) == [T0 + slot, T0 + DAY + slot, T0 + 2 * DAY + slot]
    assert dues(daily("feed-1", spread_ms=DAY), T0 - 1, 3) == dues(one, T0 - 1, 3)  # (computed again)
    hours = Counter(
        (dues(daily(f"feed-{i}", spread_ms=DAY), T0 - 1, 1)[0] - T0) // 3_600_000 for i in range(10_000)
    )
    assert set(hours) == set(range(24))
    mean = 10_000 / 24
    assert all(abs(n - mean) < 0.2 * mean for n in hours.values()), hours


def test_jitter_moves_each_instant_by_its_own_stable_amount_and_keeps_them_in_order() -> None:
    every_minute = Schedule(ScheduleKey("acme", "j"), CronTrigger("0 * * * * *"), "out", jitter_ms=150_000)
    state = ScheduleState(every_minute, T0, T0, T0)
    got = dues(state, T0, 200)
    assert got == sorted(got) and len(set(got)) == len(got)
    nominal = [T0 + 60_000 * k for k in range(-3, 400)]  # (one before T0 may be moved past it)
    moved = sorted(n + jitter_of("acme/j", n, 150_000) for n in nominal)
    assert got == [d for d in moved if d > T0][:200]  # every instant, once, in order, none lost to reordering
    assert all(0 <= jitter_of("acme/j", n, 150_000) <= 150_000 for n in nominal)
    assert len({jitter_of("acme/j", n, 150_000) for n in nominal}) > 300  # (not one offset for all)
    assert dues(ScheduleState(every_minute, T0, T0, T0), T0, 200) == got  # a replay: the same instants


def test_not_before_and_not_after_bound_the_instants_and_the_schedule_is_finished_after() -> None:
    state = daily("bounded", not_before=T0 + DAY, not_after=T0 + 3 * DAY)
    assert dues(state, T0 - 1, 10) == [T0 + DAY, T0 + 2 * DAY, T0 + 3 * DAY]
    assert not state.finished(T0 + 3 * DAY) and state.finished(T0 + 3 * DAY + 1)
    assert state.schedule.within_bounds(T0 + DAY) and not state.schedule.within_bounds(T0 + DAY - 1)


def test_a_one_shot_schedule_fires_once_and_is_finished_once_its_instant_passed() -> None:
    s = Schedule(ScheduleKey("acme", "once"), OnceTrigger(T0 + 5_000), "out", enabled=True)
    s.validate()
    state = ScheduleState(s, T0, T0, T0)
    assert dues(state, T0, 5) == [T0 + 5_000]
    assert not state.finished(T0 + 5_000) and state.finished(T0 + 5_001)
    program = replace(s, trigger=PartitionTrigger("acme.feed"), program=ProgramId.parse("acme/a/b/c"))
    assert not ScheduleState(program, T0, T0, T0).finished(T0 + DAY)  # an event may still come


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"not_before": T0, "not_after": T0 - 1}, "notAfter"),
        ({"not_before": -1}, "notBefore"),
        ({"spread_ms": 32 * DAY}, "spreadMs"),
        ({"jitter_ms": 3_600_001}, "jitterMs"),
        (
            {
                "jitter_ms": 10,
                "trigger": PartitionTrigger("acme.feed"),
                "program": ProgramId.parse("acme/a/b/c"),
            },
            "jitterMs",
        ),
    ],
)
def test_bad_bounds_spread_and_jitter_are_refused_naming_the_field(changes: dict, field: str) -> None:
    s = replace(Schedule(ScheduleKey("acme", "bad"), FrequencyTrigger(TimeUnit.MINUTES, 1), "out"), **changes)
    with pytest.raises(InvalidSchedule) as err:
        s.validate()
    assert err.value.field == field
