"""A silent schedule's NOT_FIRED alerts back off (its "fire at least every" watchdog): one at the 1st, 2nd,
4th … 64th late period, then every 64th, each saying which of its silence it is; a watchdog armed again
(a takeover) repeats the last one at most, never one per period it missed."""

from __future__ import annotations

import pytest

from scheduler.domain.triggers.progress import (
    TriggerProgress,
    alerted_periods,
    next_alert_due,
    silent_periods,
    watchdog_due,
)

pytestmark = pytest.mark.unit

T0, EVERY = 1_000_000, 2_000


def test_the_alerted_periods_double_then_come_every_64th():
    assert alerted_periods(0) == []
    assert alerted_periods(1) == [1]
    assert alerted_periods(5) == [1, 2, 4]
    assert alerted_periods(200) == [1, 2, 4, 8, 16, 32, 64, 128, 192]
    assert len(alerted_periods(24 * 60)) == 28  # a day of 1-minute periods: 28 alerts, not 1,440


def test_the_next_alert_comes_after_the_periods_already_alerted():
    p = TriggerProgress(1)
    assert silent_periods(p, T0, EVERY, T0 + 1_999) == 0
    assert next_alert_due(p, T0, EVERY, T0) == T0 + EVERY
    assert next_alert_due(p, T0, EVERY, T0 + EVERY) == T0 + 2 * EVERY
    assert next_alert_due(p, T0, EVERY, T0 + 3 * EVERY) == T0 + 4 * EVERY
    assert next_alert_due(p, T0, EVERY, T0 + 64 * EVERY) == T0 + 128 * EVERY
    assert next_alert_due(p, T0, EVERY, T0 + 130 * EVERY) == T0 + 192 * EVERY


def test_a_job_starts_a_new_silence():
    p = TriggerProgress(1)
    p.last_job_at = T0 + 10 * EVERY
    assert silent_periods(p, T0, EVERY, T0 + 11 * EVERY) == 1
    assert next_alert_due(p, T0, EVERY, T0 + 11 * EVERY) == T0 + 12 * EVERY


def test_a_watchdog_armed_again_repeats_the_last_alert_at_most():
    p = TriggerProgress(1)
    assert watchdog_due(p, T0, EVERY, T0 + 500) == T0 + EVERY
    assert watchdog_due(p, T0, EVERY, T0 + 10 * EVERY + 1) == T0 + 8 * EVERY  # (8: the last alerted)
