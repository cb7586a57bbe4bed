"""Catch-up planning: what a new owner does about dues in (fired_up_to, now], per policy and window."""

from __future__ import annotations

import pytest

from scheduler.domain.model import CatchUpPolicy, TimeUnit
from scheduler.domain.triggers import plan_catch_up
from scheduler.domain.triggers.catchup import MAX_EACH_FIRES
from scheduler.domain.triggers.cron import CronEvaluator
from scheduler.domain.triggers.frequency import FrequencyEvaluator

pytestmark = pytest.mark.unit

#: 2024-01-01T00:00:00Z
BASE = 1_704_067_200_000
HOUR = 3_600_000

EVERY_10_S = FrequencyEvaluator(TimeUnit.SECONDS, 10, BASE)


# Scenario used below: dues every 10 s from BASE; last fired up to BASE+5s, now BASE+65s.
# Missed: BASE+10s, +20s, +30s, +40s, +50s, +60s (6); next due BASE+70s.
FIRED_UP_TO = BASE + 5_000
NOW = BASE + 65_000
MISSED = [BASE + k * 10_000 for k in range(1, 7)]


def test_coalesce_fires_once_at_the_latest_missed_due_standing_for_the_others() -> None:
    plan = plan_catch_up(EVERY_10_S, CatchUpPolicy.COALESCE, FIRED_UP_TO, NOW, HOUR)
    assert plan.fires == [(MISSED[-1], len(MISSED) - 1)]
    assert plan.skipped == 0
    assert plan.next_due == BASE + 70_000


def test_each_fires_every_missed_due_oldest_first() -> None:
    plan = plan_catch_up(EVERY_10_S, CatchUpPolicy.EACH, FIRED_UP_TO, NOW, HOUR)
    assert plan.fires == [(due, 0) for due in MISSED]
    assert plan.skipped == 0
    assert plan.next_due == BASE + 70_000


def test_skip_fires_nothing_and_counts_every_missed_due() -> None:
    plan = plan_catch_up(EVERY_10_S, CatchUpPolicy.SKIP, FIRED_UP_TO, NOW, HOUR)
    assert plan.fires == []
    assert plan.skipped == len(MISSED)
    assert plan.next_due == BASE + 70_000


def test_each_is_capped_and_the_oldest_beyond_the_cap_are_skipped() -> None:
    every_ms = FrequencyEvaluator(TimeUnit.MILLISECONDS, 1, BASE)
    missed = MAX_EACH_FIRES + 500
    plan = plan_catch_up(every_ms, CatchUpPolicy.EACH, BASE, BASE + missed, HOUR)
    assert len(plan.fires) == MAX_EACH_FIRES
    assert plan.fires[0] == (BASE + 501, 0)  # the latest MAX_EACH_FIRES, oldest first
    assert plan.fires[-1] == (BASE + missed, 0)
    assert [d for d, _ in plan.fires] == sorted(d for d, _ in plan.fires)
    assert plan.skipped == 500
    assert plan.next_due == BASE + missed + 1


@pytest.mark.parametrize(
    ("policy", "fires", "skipped"),
    [
        # window 30 s: only dues in (now-30s, now] = +40s, +50s, +60s count; +10s..+30s are skipped
        (CatchUpPolicy.COALESCE, [(BASE + 60_000, 2)], 3),
        (CatchUpPolicy.EACH, [(BASE + 40_000, 0), (BASE + 50_000, 0), (BASE + 60_000, 0)], 3),
        (CatchUpPolicy.SKIP, [], 6),
    ],
)
def test_catch_up_window_drops_dues_older_than_the_window(
    policy: CatchUpPolicy, fires: list[tuple[int, int]], skipped: int
) -> None:
    plan = plan_catch_up(EVERY_10_S, policy, FIRED_UP_TO, NOW, 30_000)
    assert plan.fires == fires
    assert plan.skipped == skipped
    assert plan.next_due == BASE + 70_000


def test_coalesce_with_every_missed_due_outside_the_window_fires_nothing() -> None:
    plan = plan_catch_up(EVERY_10_S, CatchUpPolicy.COALESCE, FIRED_UP_TO, NOW, 4_000)
    assert plan.fires == []
    assert plan.skipped == len(MISSED)


def test_zero_window_skips_everything_whatever_the_policy() -> None:
    for policy in CatchUpPolicy:
        plan = plan_catch_up(EVERY_10_S, policy, FIRED_UP_TO, NOW, 0)
        assert plan.fires == []
        assert plan.skipped == len(MISSED)


@pytest.mark.parametrize("policy", list(CatchUpPolicy))
@pytest.mark.parametrize("fired_up_to", [NOW, NOW + 1, NOW + HOUR])
def test_nothing_is_missed_when_fired_up_to_is_at_or_after_now(
    policy: CatchUpPolicy, fired_up_to: int
) -> None:
    """A watermark after now: the wall clock stepped back, or the last owner's clock was ahead of ours.
    The next due comes after the watermark: nothing it covered fires twice."""
    plan = plan_catch_up(EVERY_10_S, policy, fired_up_to, NOW, HOUR)
    assert plan.fires == []
    assert plan.skipped == 0
    assert plan.next_due == EVERY_10_S.next_due(fired_up_to)
    assert plan.next_due is not None and plan.next_due > fired_up_to


@pytest.mark.parametrize("policy", list(CatchUpPolicy))
def test_nothing_is_missed_when_no_due_fell_in_between(policy: CatchUpPolicy) -> None:
    plan = plan_catch_up(EVERY_10_S, policy, BASE + 11_000, BASE + 19_000, HOUR)
    assert plan.fires == []
    assert plan.skipped == 0
    assert plan.next_due == BASE + 20_000


@pytest.mark.parametrize("policy", list(CatchUpPolicy))
def test_next_due_is_strictly_after_now_even_when_now_is_a_due_instant(policy: CatchUpPolicy) -> None:
    plan = plan_catch_up(EVERY_10_S, policy, FIRED_UP_TO, BASE + 60_000, HOUR)
    assert plan.next_due == BASE + 70_000
    # the due at exactly now counts as missed (the range is (fired_up_to, now])
    if policy is CatchUpPolicy.COALESCE:
        assert plan.fires == [(BASE + 60_000, 5)]


def test_a_due_exactly_at_fired_up_to_is_not_missed() -> None:
    plan = plan_catch_up(EVERY_10_S, CatchUpPolicy.EACH, BASE + 10_000, BASE + 25_000, HOUR)
    assert plan.fires == [(BASE + 20_000, 0)]


# --- cron triggers --------------------------------------------------------------------------------

EVERY_5_S_CRON = CronEvaluator("*/5 * * * * *", "UTC")


def test_coalesce_with_a_six_field_cron() -> None:
    # missed: +5s, +10s, +15s, +20s
    plan = plan_catch_up(EVERY_5_S_CRON, CatchUpPolicy.COALESCE, BASE, BASE + 23_000, HOUR)
    assert plan.fires == [(BASE + 20_000, 3)]
    assert plan.skipped == 0
    assert plan.next_due == BASE + 25_000


def test_each_with_a_six_field_cron_and_a_window() -> None:
    plan = plan_catch_up(EVERY_5_S_CRON, CatchUpPolicy.EACH, BASE, BASE + 23_000, 10_000)
    assert plan.fires == [(BASE + 15_000, 0), (BASE + 20_000, 0)]
    assert plan.skipped == 2
    assert plan.next_due == BASE + 25_000


def test_skip_with_a_five_field_cron_in_a_time_zone() -> None:
    hourly_paris = CronEvaluator("0 * * * *", "Europe/Paris")
    # Paris is UTC+1 in January: local whole hours are UTC whole hours; 3 h of dues missed.
    plan = plan_catch_up(hourly_paris, CatchUpPolicy.SKIP, BASE + 1, BASE + 3 * HOUR + 60_000, 4 * HOUR)
    assert plan.fires == []
    assert plan.skipped == 3
    assert plan.next_due == BASE + 4 * HOUR


def test_coalesce_with_a_daily_cron_missing_two_days_within_a_three_day_window() -> None:
    daily = CronEvaluator("0 30 2 * * *", "UTC")
    two_thirty = BASE + 2 * HOUR + 30 * 60_000
    plan = plan_catch_up(
        daily, CatchUpPolicy.COALESCE, two_thirty, two_thirty + 2 * 86_400_000 + 1, 3 * 86_400_000
    )
    assert plan.fires == [(two_thirty + 2 * 86_400_000, 1)]
    assert plan.next_due == two_thirty + 3 * 86_400_000


def test_never_firing_cron_has_no_catch_up_and_no_next_due() -> None:
    never = CronEvaluator("0 0 30 2 *", "UTC")
    for policy in CatchUpPolicy:
        plan = plan_catch_up(never, policy, BASE, BASE + HOUR, HOUR)
        assert plan.fires == []
        assert plan.skipped == 0
        assert plan.next_due is None
