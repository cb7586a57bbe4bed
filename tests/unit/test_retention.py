"""Which finished schedules go, and when (scheduler/domain/retention.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from scheduler.domain.model import ScheduleState
from scheduler.domain.retention import past_retention
from scheduler.http.api import ScheduleIn

pytestmark = pytest.mark.unit

T = 1_795_341_600_000  # 2026-11-22T10:00:00Z
DAY = 86_400_000
WEEK = 7 * DAY


def state(trigger: dict[str, Any], updated_at: int = T - DAY, **fields: Any) -> ScheduleState:
    program = None if trigger["type"] in ("cron", "frequency", "once") else "acme/p/workflow/w"
    body = ScheduleIn.model_validate(
        {"tenant": "acme", "name": "s", "trigger": trigger, "topic": "out", "program": program, **fields}
    )
    schedule = body.to_schedule(body.key())
    schedule.validate()
    return ScheduleState(schedule, updated_at, updated_at, updated_at)


def test_a_one_shot_goes_a_retention_after_its_instant_not_before() -> None:
    once = state({"type": "once", "at": T})
    assert not past_retention(once, T - 1, WEEK), "not even fired"
    assert not past_retention(once, T + WEEK - 1, WEEK)
    assert past_retention(once, T + WEEK, WEEK)
    assert not past_retention(once, T + 10 * WEEK, 0), "0 keeps finished schedules"


def test_a_schedule_changed_within_the_period_stays_a_period_from_its_change() -> None:
    once = state({"type": "once", "at": T}, updated_at=T + DAY)
    assert not past_retention(once, T + WEEK, WEEK)
    assert past_retention(once, T + DAY + WEEK, WEEK)


def test_what_never_finishes_by_time_stays() -> None:
    every_day = state({"type": "cron", "expression": "0 3 * * *"})
    assert not past_retention(every_day, T + 100 * WEEK, WEEK)
    exhausted = replace(state({"type": "cron", "expression": "0 3 * * *"}, maxFires=1), fires=1)
    assert exhausted.finished(T) and not past_retention(exhausted, T + 100 * WEEK, WEEK)
    on_data = state({"type": "partition", "dataset": "acme.x", "minPartitions": 1})
    assert not past_retention(on_data, T + 100 * WEEK, WEEK)


def test_not_after_finishes_any_schedule_and_the_retention_counts_from_it() -> None:
    on_data = state({"type": "partition", "dataset": "acme.x", "minPartitions": 1}, notAfter=T)
    assert not past_retention(on_data, T + WEEK - 1, WEEK)
    assert past_retention(on_data, T + WEEK, WEEK)
    bounded = state({"type": "cron", "expression": "0 3 * * *"}, notAfter=T)
    assert past_retention(bounded, T + WEEK, WEEK)


def test_time_triggers_that_end_go_a_retention_after_their_last_instant() -> None:
    both = state({"type": "or", "triggers": [{"type": "once", "at": T}, {"type": "once", "at": T + 2 * DAY}]},
                 program="acme/p/workflow/w")  # fmt: skip
    assert not past_retention(both, T + WEEK, WEEK), "its last instant is two days later"
    assert past_retention(both, T + 2 * DAY + WEEK, WEEK)
