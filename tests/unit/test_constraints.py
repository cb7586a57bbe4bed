"""Run constraints: each constraint's verdict, the decision for one job, pending timeouts, validation.

The clock is the `now` argument of check()/decide(): every instant here is a fixed epoch millisecond.
Expected instants in other zones are written as UTC wall times with the offset spelled out, so the
tests do not reuse the code's own zone arithmetic.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduler.domain.constraints import (
    ACTIVE_STATUSES,
    ConcurrencyConstraint,
    DelayConstraint,
    LastRunConstraint,
    Outcome,
    PendingTimeout,
    RateConstraint,
    RunState,
    TimeoutAction,
    TimeWindowConstraint,
    UnmetAction,
    decide,
)
from scheduler.domain.model import InvalidSchedule, TimeUnit

pytestmark = pytest.mark.unit

#: 2024-01-01T00:00:00Z
T0 = 1_704_067_200_000
MINUTE = 60_000
HOUR = 3_600_000
NO_RUNS = RunState()


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    return round(datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp() * 1000)


def active(*statuses: str) -> RunState:
    return RunState(active={f"run-{i}": s for i, s in enumerate(statuses)})


# --- concurrency ----------------------------------------------------------------------------------


def test_concurrency_is_met_below_max_runs() -> None:
    c = ConcurrencyConstraint(2)
    assert c.check(T0, T0, NO_RUNS).met
    assert c.check(T0, T0, active("RUNNING")).met


def test_concurrency_is_unmet_at_max_runs_and_waits_for_a_run_change() -> None:
    v = ConcurrencyConstraint(2).check(T0, T0, active("RUNNING", "RUNNING"))
    assert not v.met
    assert not v.skip
    assert v.until is None  # no instant helps: the next run status change wakes the job
    assert "2 runs active" in v.reason


@pytest.mark.parametrize("status", ["PENDING", "STARTING", "RUNNING"])
def test_concurrency_counts_pending_starting_and_running_runs(status: str) -> None:
    assert status in ACTIVE_STATUSES
    assert not ConcurrencyConstraint(1).check(T0, T0, active(status)).met


def test_concurrency_counts_a_mix_of_not_yet_ended_runs() -> None:
    runs = active("PENDING", "STARTING", "RUNNING")
    assert not ConcurrencyConstraint(3).check(T0, T0, runs).met
    assert ConcurrencyConstraint(4).check(T0, T0, runs).met


def test_concurrency_with_skip_on_unmet_says_skip() -> None:
    v = ConcurrencyConstraint(1, UnmetAction.SKIP).check(T0, T0, active("RUNNING"))
    assert (v.met, v.skip) == (False, True)


# --- delay ----------------------------------------------------------------------------------------


def test_delay_waits_until_triggered_at_plus_delay() -> None:
    c = DelayConstraint(5 * MINUTE)
    v = c.check(T0, T0 + MINUTE, NO_RUNS)
    assert not v.met
    assert v.until == T0 + 5 * MINUTE


def test_delay_is_met_at_and_after_triggered_at_plus_delay() -> None:
    c = DelayConstraint(5 * MINUTE)
    assert c.check(T0, T0 + 5 * MINUTE, NO_RUNS).met
    assert c.check(T0, T0 + 6 * MINUTE, NO_RUNS).met


def test_zero_delay_is_met_at_once() -> None:
    assert DelayConstraint(0).check(T0, T0, NO_RUNS).met


# --- time window ----------------------------------------------------------------------------------

NIGHT_PARIS = TimeWindowConstraint("22:00", "06:00", "Europe/Paris")
NIGHT_NEW_YORK = TimeWindowConstraint("22:00", "06:00", "America/New_York")


@pytest.mark.parametrize(
    ("window", "now"),
    [
        # Paris in January is UTC+1.
        (NIGHT_PARIS, utc(2024, 1, 15, 22, 30)),  # 23:30 local
        (NIGHT_PARIS, utc(2024, 1, 16, 4, 59)),  # 05:59 local
        (NIGHT_PARIS, utc(2024, 1, 15, 21, 0)),  # 22:00 local: the start minute is inside
        # New York in January is UTC-5.
        (NIGHT_NEW_YORK, utc(2024, 1, 16, 4, 30)),  # 23:30 local (Jan 15)
        (NIGHT_NEW_YORK, utc(2024, 1, 16, 10, 59)),  # 05:59 local
        # New York in July is UTC-4.
        (NIGHT_NEW_YORK, utc(2024, 7, 16, 3, 30)),  # 23:30 local (Jul 15)
    ],
)
def test_time_window_across_midnight_is_met_inside(window: TimeWindowConstraint, now: int) -> None:
    assert window.check(T0, now, NO_RUNS).met


@pytest.mark.parametrize(
    ("window", "now", "opens"),
    [
        # 06:00 Paris (UTC+1) is outside; the window opens at 22:00 local = 21:00Z the same day.
        (NIGHT_PARIS, utc(2024, 1, 16, 5, 0), utc(2024, 1, 16, 21, 0)),
        # 21:59 Paris is outside; one minute to go.
        (NIGHT_PARIS, utc(2024, 1, 15, 20, 59), utc(2024, 1, 15, 21, 0)),
        # 06:00 New York (UTC-5) is outside; 22:00 local = 03:00Z the next UTC day.
        (NIGHT_NEW_YORK, utc(2024, 1, 16, 11, 0), utc(2024, 1, 17, 3, 0)),
        # 21:59 New York.
        (NIGHT_NEW_YORK, utc(2024, 1, 16, 2, 59), utc(2024, 1, 16, 3, 0)),
        # New York in July (UTC-4): 12:00 local, opens 22:00 EDT = 02:00Z.
        (NIGHT_NEW_YORK, utc(2024, 7, 15, 16, 0), utc(2024, 7, 16, 2, 0)),
    ],
)
def test_time_window_across_midnight_waits_until_the_next_local_start(
    window: TimeWindowConstraint, now: int, opens: int
) -> None:
    v = window.check(T0, now, NO_RUNS)
    assert not v.met
    assert v.until == opens
    assert window.check(T0, opens, NO_RUNS).met
    assert not window.check(T0, opens - MINUTE, NO_RUNS).met


@pytest.mark.parametrize(
    ("window", "now", "opens"),
    [
        # Paris springs forward on 2024-03-31 (02:00 CET -> 03:00 CEST): 06:00 CEST = 04:00Z,
        # and that evening's 22:00 is CEST (UTC+2) = 20:00Z, not 21:00Z.
        (NIGHT_PARIS, utc(2024, 3, 31, 4, 0), utc(2024, 3, 31, 20, 0)),
        # Paris falls back on 2024-10-27 (03:00 CEST -> 02:00 CET): 12:00 CET = 11:00Z, opens 21:00Z.
        (NIGHT_PARIS, utc(2024, 10, 27, 11, 0), utc(2024, 10, 27, 21, 0)),
        # New York springs forward on 2024-03-10: 12:00 EDT = 16:00Z, 22:00 EDT = 02:00Z next day.
        (NIGHT_NEW_YORK, utc(2024, 3, 10, 16, 0), utc(2024, 3, 11, 2, 0)),
        # New York falls back on 2024-11-03: 12:00 EST = 17:00Z, 22:00 EST = 03:00Z next day.
        (NIGHT_NEW_YORK, utc(2024, 11, 3, 17, 0), utc(2024, 11, 4, 3, 0)),
        # Checked before the change, opening after it: 01:00 CET on 2024-03-31 (00:00Z); a window
        # from 04:00 opens at 04:00 CEST = 02:00Z (three wall hours later, two real hours).
        (
            TimeWindowConstraint("04:00", "05:00", "Europe/Paris"),
            utc(2024, 3, 31, 0, 0),
            utc(2024, 3, 31, 2, 0),
        ),
        # The next-day branch across the change: 12:00 CET on 2024-03-30, window 05:00-06:00 opens
        # the next morning at 05:00 CEST = 03:00Z (not 24 hours after 05:00 CET).
        (
            TimeWindowConstraint("05:00", "06:00", "Europe/Paris"),
            utc(2024, 3, 30, 11, 0),
            utc(2024, 3, 31, 3, 0),
        ),
        # The same in New York on its fall-back day: 03:00-04:00, checked 05:00 EDT on 2024-11-02,
        # opens 03:00 EST on 2024-11-03 = 08:00Z.
        (
            TimeWindowConstraint("03:00", "04:00", "America/New_York"),
            utc(2024, 11, 2, 9, 0),
            utc(2024, 11, 3, 8, 0),
        ),
    ],
)
def test_time_window_until_is_the_next_local_start_across_a_dst_change(
    window: TimeWindowConstraint, now: int, opens: int
) -> None:
    v = window.check(T0, now, NO_RUNS)
    assert not v.met
    assert v.until == opens


def test_time_window_on_the_25_hour_fall_back_day_still_closes_at_local_six() -> None:
    # New York, 2024-11-03: 05:59 EST (10:59Z) inside, 06:00 EST (11:00Z) outside.
    assert NIGHT_NEW_YORK.check(T0, utc(2024, 11, 3, 10, 59), NO_RUNS).met
    assert not NIGHT_NEW_YORK.check(T0, utc(2024, 11, 3, 11, 0), NO_RUNS).met


def test_time_window_within_one_day() -> None:
    office = TimeWindowConstraint("09:00", "17:00", "UTC")
    assert office.check(T0, utc(2024, 1, 2, 9, 0), NO_RUNS).met
    assert office.check(T0, utc(2024, 1, 2, 16, 59), NO_RUNS).met
    late = office.check(T0, utc(2024, 1, 2, 17, 0), NO_RUNS)
    assert not late.met
    assert late.until == utc(2024, 1, 3, 9, 0)  # past today's start: tomorrow's
    early = office.check(T0, utc(2024, 1, 2, 8, 0), NO_RUNS)
    assert early.until == utc(2024, 1, 2, 9, 0)


@pytest.mark.parametrize("now", [utc(2024, 1, 2, 0, 0), utc(2024, 1, 2, 12, 34), utc(2024, 7, 1, 23, 59)])
def test_time_window_with_start_equal_to_end_is_always_open(now: int) -> None:
    assert TimeWindowConstraint("07:00", "07:00", "Europe/Paris").check(T0, now, NO_RUNS).met


def _first_open_minute(window: TimeWindowConstraint, now: int) -> int:
    """The first whole minute from `now` at which the window is open, by trying every minute."""
    t = -(-now // MINUTE) * MINUTE
    for _ in range(3 * 24 * 60):
        if window.check(T0, t, NO_RUNS).met:
            return t
        t += MINUTE
    raise AssertionError("window never opens")


@pytest.mark.parametrize(
    ("window", "now"),
    [
        pytest.param(NIGHT_PARIS, utc(2024, 3, 31, 4, 0), id="paris-spring-forward-day"),
        pytest.param(NIGHT_NEW_YORK, utc(2024, 11, 3, 11, 0), id="new-york-fall-back-day"),
        pytest.param(
            TimeWindowConstraint("05:00", "06:00", "Europe/Paris"),
            utc(2024, 3, 30, 11, 0),
            id="paris-next-day-across-spring-forward",
        ),
        pytest.param(
            TimeWindowConstraint("09:15", "09:45", "Asia/Kolkata"),
            utc(2024, 1, 2, 5, 0),
            id="kolkata-half-hour-offset",
        ),
        pytest.param(
            # 2024-03-10 in New York: 02:00-02:59 does not exist, so the window is open 03:00-03:29 EDT.
            TimeWindowConstraint("02:30", "03:30", "America/New_York"),
            utc(2024, 3, 10, 6, 0),  # 01:00 EST
            id="new-york-start-in-spring-forward-gap",
        ),
        pytest.param(
            # 2024-11-03 in New York: 01:00-01:59 happens twice; at 01:50 EDT the 01:30 EST repeat is next.
            TimeWindowConstraint("01:30", "01:45", "America/New_York"),
            utc(2024, 11, 3, 5, 50),  # 01:50 EDT
            id="new-york-repeated-fall-back-hour",
        ),
    ],
)
def test_time_window_until_is_the_first_instant_the_window_is_open(
    window: TimeWindowConstraint, now: int
) -> None:
    v = window.check(T0, now, NO_RUNS)
    assert not v.met
    assert v.until == _first_open_minute(window, now)


# --- last run ------------------------------------------------------------------------------------


def test_last_run_is_met_when_the_program_never_ran() -> None:
    assert LastRunConstraint(HOUR).check(T0, T0, NO_RUNS).met


def test_last_run_waits_until_last_start_plus_min() -> None:
    runs = RunState(last_start=T0)
    v = LastRunConstraint(HOUR).check(T0, T0 + 10 * MINUTE, runs)
    assert not v.met
    assert v.until == T0 + HOUR
    assert LastRunConstraint(HOUR).check(T0, T0 + HOUR, runs).met


def test_last_run_looks_at_the_start_not_the_end() -> None:
    runs = RunState(last_start=T0, last_end=T0 + 50 * MINUTE)
    assert LastRunConstraint(HOUR).check(T0, T0 + HOUR, runs).met


# --- rate ----------------------------------------------------------------------------------------


def test_rate_is_met_below_max_runs_in_the_sliding_window() -> None:
    runs = RunState(recent_starts=(T0, T0 + 10 * MINUTE))
    assert RateConstraint(3, TimeUnit.HOURS).check(T0, T0 + 20 * MINUTE, runs).met


def test_rate_waits_until_the_oldest_counted_start_leaves_the_window() -> None:
    runs = RunState(recent_starts=(T0 - 2 * HOUR, T0 + 10 * MINUTE, T0 + 20 * MINUTE))
    c = RateConstraint(2, TimeUnit.HOURS)
    v = c.check(T0, T0 + 30 * MINUTE, runs)  # the start two hours ago does not count
    assert not v.met
    assert v.until == T0 + 10 * MINUTE + HOUR
    assert c.check(T0, v.until, runs).met  # a start exactly one window old has left it


def test_rate_with_more_starts_than_allowed_waits_until_enough_have_left() -> None:
    # Three starts (one manual) against at most two: two of them must leave before a third is allowed.
    runs = RunState(recent_starts=(T0, T0 + MINUTE, T0 + 2 * MINUTE))
    c = RateConstraint(2, TimeUnit.HOURS)
    v = c.check(T0, T0 + 3 * MINUTE, runs)
    assert v.until == T0 + MINUTE + HOUR
    assert c.check(T0, v.until, runs).met


def test_rate_window_is_the_unit() -> None:
    runs = RunState(recent_starts=(T0,))
    c = RateConstraint(1, TimeUnit.MINUTES)
    assert c.check(T0, T0 + MINUTE - 1, runs).until == T0 + MINUTE
    assert c.check(T0, T0 + MINUTE, runs).met


# --- decide --------------------------------------------------------------------------------------


def test_decide_without_constraints_launches() -> None:
    d = decide((), None, T0, T0, NO_RUNS)
    assert d.outcome is Outcome.LAUNCH
    assert not d.forced


def test_decide_skip_constraint_short_circuits_with_its_name() -> None:
    constraints = (
        DelayConstraint(HOUR),  # waiting, but a skip later wins
        ConcurrencyConstraint(1, UnmetAction.SKIP),
        LastRunConstraint(HOUR),
    )
    d = decide(constraints, None, T0, T0, RunState(active={"r": "RUNNING"}, last_start=T0))
    assert d.outcome is Outcome.SKIP
    assert d.blocked_by == "ConcurrencyConstraint"
    assert "1 run active" in d.reason


def test_decide_wait_returns_the_earliest_until_and_the_first_blocker() -> None:
    constraints = (
        ConcurrencyConstraint(1),  # until None
        DelayConstraint(2 * HOUR),  # until T0 + 2h
        LastRunConstraint(HOUR),  # until last_start + 1h = T0 + 1h
    )
    runs = RunState(active={"r": "RUNNING"}, last_start=T0)
    d = decide(constraints, None, T0, T0 + MINUTE, runs)
    assert d.outcome is Outcome.WAIT
    assert d.until == T0 + HOUR
    assert d.blocked_by == "ConcurrencyConstraint"


def test_decide_wait_on_run_changes_only_has_no_until() -> None:
    d = decide((ConcurrencyConstraint(1),), None, T0, T0, RunState(active={"r": "RUNNING"}))
    assert d.outcome is Outcome.WAIT
    assert d.until is None


def test_decide_launches_once_every_constraint_is_met() -> None:
    constraints = (ConcurrencyConstraint(2), DelayConstraint(MINUTE), LastRunConstraint(HOUR))
    runs = RunState(active={"r": "RUNNING"}, last_start=T0 - HOUR)
    assert decide(constraints, None, T0, T0 + MINUTE, runs).outcome is Outcome.LAUNCH


def test_pending_timeout_discard_drops_the_job_at_the_deadline() -> None:
    timeout = PendingTimeout(10 * MINUTE, TimeoutAction.DISCARD)
    blocked = RunState(active={"r": "RUNNING"})
    before = decide((ConcurrencyConstraint(1),), timeout, T0, T0 + 10 * MINUTE - 1, blocked)
    assert before.outcome is Outcome.WAIT
    at = decide((ConcurrencyConstraint(1),), timeout, T0, T0 + 10 * MINUTE, blocked)
    assert at.outcome is Outcome.DISCARD
    assert not at.forced


def test_pending_timeout_force_start_launches_forced_at_the_deadline() -> None:
    timeout = PendingTimeout(10 * MINUTE, TimeoutAction.FORCE_START)
    d = decide((ConcurrencyConstraint(1),), timeout, T0, T0 + 10 * MINUTE, RunState(active={"r": "RUNNING"}))
    assert d.outcome is Outcome.LAUNCH
    assert d.forced


def test_pending_timeout_wins_over_a_skip_constraint() -> None:
    timeout = PendingTimeout(MINUTE, TimeoutAction.FORCE_START)
    skip = ConcurrencyConstraint(1, UnmetAction.SKIP)
    d = decide((skip,), timeout, T0, T0 + MINUTE, RunState(active={"r": "RUNNING"}))
    assert (d.outcome, d.forced) == (Outcome.LAUNCH, True)


def test_a_wait_until_is_capped_at_the_timeout_deadline() -> None:
    timeout = PendingTimeout(10 * MINUTE, TimeoutAction.DISCARD)
    d = decide((DelayConstraint(HOUR),), timeout, T0, T0, NO_RUNS)
    assert d.outcome is Outcome.WAIT
    assert d.until == T0 + 10 * MINUTE


def test_a_wait_for_run_changes_checks_again_at_the_timeout_deadline() -> None:
    timeout = PendingTimeout(10 * MINUTE, TimeoutAction.FORCE_START)
    d = decide((ConcurrencyConstraint(1),), timeout, T0, T0, RunState(active={"r": "RUNNING"}))
    assert d.until == T0 + 10 * MINUTE


def test_an_earlier_until_than_the_deadline_is_kept() -> None:
    timeout = PendingTimeout(HOUR, TimeoutAction.DISCARD)
    d = decide((DelayConstraint(MINUTE),), timeout, T0, T0, NO_RUNS)
    assert d.until == T0 + MINUTE


# --- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("constraint", "field"),
    [
        (ConcurrencyConstraint(0), "constraints.concurrency.maxRuns"),
        (ConcurrencyConstraint(-1), "constraints.concurrency.maxRuns"),
        (RateConstraint(0, TimeUnit.HOURS), "constraints.rate.maxRuns"),
        (DelayConstraint(-1), "constraints.delay.delayMs"),
        (DelayConstraint(7 * 86_400_000 + 1), "constraints.delay.delayMs"),
        (LastRunConstraint(-1), "constraints.lastRun.minMs"),
        (TimeWindowConstraint("24:00", "06:00"), "constraints.timeWindow.start"),
        (TimeWindowConstraint("7:00", "09:00"), "constraints.timeWindow.start"),
        (TimeWindowConstraint("ab:cd", "09:00"), "constraints.timeWindow.start"),
        (TimeWindowConstraint("0700", "09:00"), "constraints.timeWindow.start"),
        (TimeWindowConstraint("07:00", "09:60"), "constraints.timeWindow.end"),
        (TimeWindowConstraint("07:00", "09:5"), "constraints.timeWindow.end"),
        (TimeWindowConstraint("07:00", "09:00:00"), "constraints.timeWindow.end"),
        (TimeWindowConstraint("07:00", "09:00", "Mars/Olympus_Mons"), "constraints.timeWindow.timezone"),
        (TimeWindowConstraint("07:00", "09:00", ""), "constraints.timeWindow.timezone"),
    ],
)
def test_validate_rejects_bad_values_naming_the_field(constraint: object, field: str) -> None:
    with pytest.raises(InvalidSchedule) as exc:
        constraint.validate()  # type: ignore[attr-defined]
    assert exc.value.field == field


@pytest.mark.parametrize(
    "constraint",
    [
        ConcurrencyConstraint(1),
        DelayConstraint(0),
        DelayConstraint(7 * 86_400_000),
        LastRunConstraint(0),
        RateConstraint(1, TimeUnit.DAYS),
        TimeWindowConstraint("00:00", "23:59", "Europe/Paris"),
        TimeWindowConstraint("22:00", "06:00", "America/New_York"),
    ],
)
def test_validate_accepts_good_values(constraint: object) -> None:
    constraint.validate()  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", ["+1:30", " 9:00", "\u0660\u0669:\u0663\u0660"])
def test_validate_rejects_hh_mm_that_int_would_accept(value: str) -> None:
    with pytest.raises(InvalidSchedule):
        TimeWindowConstraint(value, "06:00").validate()


def test_group_concurrency_counts_the_runs_of_every_program_in_the_group() -> None:
    c = ConcurrencyConstraint(2, group="spark-cluster")
    mine = {"run-1": "RUNNING"}
    assert c.check(T0, T0, RunState(active=mine, group_active=1)).met
    held = c.check(T0, T0, RunState(active=mine, group_active=2))
    assert not held.met and "in group spark-cluster" in held.reason
    assert ConcurrencyConstraint(2).check(T0, T0, RunState(active=mine, group_active=5)).met
