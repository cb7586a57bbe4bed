"""Frequency trigger: start + k * period, anchoring without a start, and the closed-form range queries."""

from __future__ import annotations

import random

import pytest

from scheduler.domain.model import (
    CatchUpPolicy,
    FrequencyTrigger,
    Schedule,
    ScheduleKey,
    ScheduleState,
    TimeUnit,
)
from scheduler.domain.triggers.base import TimeTrigger
from scheduler.domain.triggers.frequency import FrequencyEvaluator

pytestmark = pytest.mark.unit

#: 2024-01-01T00:00:00Z: a whole second, minute, hour and (UTC) day.
BASE = 1_704_067_200_000


def test_fires_at_start_plus_whole_periods() -> None:
    ev = FrequencyEvaluator(TimeUnit.SECONDS, 10, BASE)
    assert ev.period_ms == 10_000
    t, seen = BASE - 1, []
    for _ in range(4):
        nxt = ev.next_due(t)
        assert nxt is not None
        seen.append(nxt)
        t = nxt
    assert seen == [BASE, BASE + 10_000, BASE + 20_000, BASE + 30_000]


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        (BASE - 86_400_000, BASE),  # long before start: start
        (BASE - 1, BASE),
        (BASE, BASE + 300_000),  # exactly on a due instant: the next one
        (BASE + 1, BASE + 300_000),
        (BASE + 299_999, BASE + 300_000),
        (BASE + 300_000, BASE + 600_000),
        (BASE + 7 * 300_000 + 17, BASE + 8 * 300_000),
    ],
)
def test_next_due_is_strictly_after_and_never_before_start(after: int, expected: int) -> None:
    ev = FrequencyEvaluator(TimeUnit.MINUTES, 5, BASE)
    assert ev.next_due(after) == expected


def test_start_need_not_be_on_a_unit_boundary() -> None:
    ev = FrequencyEvaluator(TimeUnit.HOURS, 2, BASE + 123)
    assert ev.next_due(BASE) == BASE + 123
    assert ev.next_due(BASE + 123) == BASE + 123 + 7_200_000


def test_next_due_without_a_start_must_be_anchored_first() -> None:
    with pytest.raises(ValueError, match="anchored"):
        FrequencyEvaluator(TimeUnit.SECONDS, 1, None).next_due(BASE)


@pytest.mark.parametrize(
    ("unit", "active_since", "expected_start"),
    [
        (TimeUnit.MILLISECONDS, BASE + 123, BASE + 124),  # the next whole millisecond
        (TimeUnit.SECONDS, BASE + 123, BASE + 1_000),
        (TimeUnit.SECONDS, BASE + 999, BASE + 1_000),
        (TimeUnit.SECONDS, BASE + 1_001, BASE + 2_000),
        (TimeUnit.MINUTES, BASE + 59_999, BASE + 60_000),
        (TimeUnit.MINUTES, BASE + 61_000, BASE + 120_000),
        (TimeUnit.HOURS, BASE + 1, BASE + 3_600_000),
        (TimeUnit.DAYS, BASE + 5 * 3_600_000, BASE + 86_400_000),  # whole UTC days
    ],
)
def test_anchoring_without_start_rounds_active_since_up_to_the_next_whole_unit(
    unit: TimeUnit, active_since: int, expected_start: int
) -> None:
    anchored = FrequencyEvaluator(unit, 3, None).anchored(active_since)
    assert anchored.start_ms == expected_start
    assert anchored.period_ms == 3 * unit.ms  # the period is kept
    assert anchored.unit is unit
    assert anchored.next_due(active_since - 1) == expected_start


def test_anchoring_exactly_on_a_whole_unit_starts_at_the_next_unit_like_light_scheduler() -> None:
    anchored = FrequencyEvaluator(TimeUnit.MINUTES, 1, None).anchored(BASE)
    assert anchored.start_ms == BASE + 60_000


def test_anchoring_keeps_an_explicit_start() -> None:
    ev = FrequencyEvaluator(TimeUnit.MINUTES, 1, BASE - 12_345)
    anchored = ev.anchored(BASE + 999_999)
    assert anchored is ev
    assert anchored.start_ms == BASE - 12_345


def test_schedule_state_evaluator_is_anchored_at_active_since() -> None:
    key = ScheduleKey("t", "n")
    state = ScheduleState(
        Schedule(key, FrequencyTrigger(TimeUnit.SECONDS, 5), "out", enabled=True),
        created_at=BASE,
        updated_at=BASE,
        active_since=BASE + 2_500,
    )
    ev = state.evaluator()
    assert ev.unit is TimeUnit.SECONDS
    assert ev.next_due(0) == BASE + 3_000
    assert ev.next_due(BASE + 3_000) == BASE + 8_000
    # an explicit start wins over active_since
    explicit = ScheduleState(
        Schedule(key, FrequencyTrigger(TimeUnit.SECONDS, 5, BASE + 100), "out", catch_up=CatchUpPolicy.SKIP),
        BASE,
        BASE,
        BASE + 2_500,
    )
    assert explicit.evaluator().next_due(0) == BASE + 100


# --- closed-form range queries == the generic implementation ----------------------------------


def generic_dues(ev: TimeTrigger, after: int, until: int, limit: int) -> list[int]:
    return TimeTrigger.dues_between(ev, after, until, limit)


def generic_count(ev: TimeTrigger, after: int, until: int, cap: int) -> int:
    return TimeTrigger.count_between(ev, after, until, cap)


def iterate(ev: TimeTrigger, after: int, until: int) -> list[int]:
    out, t = [], ev.next_due(after)
    while t is not None and t <= until:
        out.append(t)
        t = ev.next_due(t)
    return out


@pytest.mark.parametrize(
    ("after", "until", "limit"),
    [
        (BASE - 1, BASE + 50_000, 100),  # (after, until] includes start and the last due
        (BASE, BASE + 50_000, 100),  # after on a due instant: excluded
        (BASE + 1, BASE + 49_999, 100),
        (BASE - 30_000, BASE - 1, 100),  # all before start: nothing
        (BASE + 50_000, BASE + 40_000, 100),  # empty range
        (BASE - 1, BASE + 50_000, 2),  # limit keeps the latest, oldest first
        (BASE - 1, BASE + 50_000, 1),
        (BASE - 1, BASE + 50_000, 0),
        (BASE + 3, BASE + 3, 5),
        (BASE + 9_999, BASE + 10_000, 5),
    ],
)
def test_dues_between_and_count_between_agree_with_iterating_next_due(
    after: int, until: int, limit: int
) -> None:
    ev = FrequencyEvaluator(TimeUnit.SECONDS, 10, BASE)
    all_dues = iterate(ev, after, until)
    assert ev.dues_between(after, until, limit) == generic_dues(ev, after, until, limit)
    assert ev.dues_between(after, until, limit) == (all_dues[-limit:] if limit > 0 else [])
    for cap in (0, 1, 3, 1_000):
        assert ev.count_between(after, until, cap) == generic_count(ev, after, until, cap)
        assert ev.count_between(after, until, cap) == min(cap, len(all_dues))


def test_dues_between_limit_examples() -> None:
    ev = FrequencyEvaluator(TimeUnit.SECONDS, 10, BASE)
    assert ev.dues_between(BASE - 1, BASE + 50_000, 2) == [BASE + 40_000, BASE + 50_000]
    assert ev.dues_between(BASE - 1, BASE + 50_000, 100) == [BASE + k * 10_000 for k in range(6)]
    assert ev.count_between(BASE - 1, BASE + 50_000, 100) == 6
    assert ev.count_between(BASE - 1, BASE + 50_000, 4) == 4


def test_closed_form_range_queries_match_the_generic_ones_on_many_seeded_cases() -> None:
    rng = random.Random(20240101)
    for _ in range(300):
        unit = rng.choice([TimeUnit.MILLISECONDS, TimeUnit.SECONDS, TimeUnit.MINUTES])
        ev = FrequencyEvaluator(unit, rng.randint(1, 7), BASE + rng.randint(-5, 5) * unit.ms)
        span = ev.period_ms * 12
        after = BASE + rng.randint(-span, span)
        until = after + rng.randint(-ev.period_ms, span)
        limit = rng.randint(0, 6)
        cap = rng.randint(0, 15)
        assert ev.dues_between(after, until, limit) == generic_dues(ev, after, until, limit)
        assert ev.count_between(after, until, cap) == generic_count(ev, after, until, cap)
