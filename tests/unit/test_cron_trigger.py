"""Cron trigger: field layouts, strictly-after semantics, time zones, DST, validation, memoisation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from scheduler.domain.model import CronTrigger, InvalidSchedule, TimeUnit
from scheduler.domain.triggers import cron as cron_module
from scheduler.domain.triggers.cron import CronEvaluator, cron_evaluator, validate_cron

pytestmark = pytest.mark.unit

NEW_YORK = ZoneInfo("America/New_York")
PARIS = ZoneInfo("Europe/Paris")

#: 2024-01-01T00:00:00Z, a Monday; a whole second, minute, hour and day.
BASE = 1_704_067_200_000


def ms(dt: datetime) -> int:
    return round(dt.timestamp() * 1000)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> int:
    return ms(datetime(year, month, day, hour, minute, second, tzinfo=UTC))


def dues(evaluator: CronEvaluator, after_ms: int, n: int) -> list[int]:
    out: list[int] = []
    t = after_ms
    for _ in range(n):
        nxt = evaluator.next_due(t)
        assert nxt is not None
        out.append(nxt)
        t = nxt
    return out


# --- field layouts ------------------------------------------------------------------------------


def test_five_field_expression_is_minute_first_and_driven_by_the_minute_timer() -> None:
    ev = CronEvaluator("*/15 * * * *", "UTC")
    assert ev.unit is TimeUnit.MINUTES
    assert dues(ev, BASE, 4) == [BASE + k * 900_000 for k in (1, 2, 3, 4)]


def test_six_field_expression_is_second_first_so_star_slash_five_fires_every_five_seconds() -> None:
    ev = CronEvaluator("*/5 * * * * *", "UTC")
    assert ev.unit is TimeUnit.SECONDS
    assert dues(ev, BASE, 4) == [BASE + k * 5_000 for k in (1, 2, 3, 4)]


def test_the_same_leading_number_means_second_in_six_fields_and_minute_in_five() -> None:
    six = CronEvaluator("30 * * * * *", "UTC")  # second 30 of every minute
    five = CronEvaluator("30 * * * *", "UTC")  # minute 30 of every hour
    assert dues(six, BASE, 2) == [BASE + 30_000, BASE + 90_000]
    assert dues(five, BASE, 2) == [BASE + 1_800_000, BASE + 5_400_000]


def test_six_field_daily_expression_fires_at_hour_minute_second() -> None:
    ev = CronEvaluator("15 30 2 * * *", "UTC")
    assert dues(ev, BASE, 2) == [utc(2024, 1, 1, 2, 30, 15), utc(2024, 1, 2, 2, 30, 15)]


def test_cron_trigger_record_gives_the_shared_memoised_evaluator() -> None:
    trigger = CronTrigger("*/5 * * * * *", "Europe/Paris")
    assert trigger.evaluator() is cron_evaluator("*/5 * * * * *", "Europe/Paris")
    assert CronTrigger("0 * * * *").timezone == "UTC"


# --- strictly after ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offset_ms", "expected_offset_ms"),
    [
        (0, 5_000),  # from an exact due instant: the next one, never itself
        (1, 5_000),
        (999, 5_000),
        (2_500, 5_000),
        (4_999, 5_000),  # a millisecond before a due instant: that instant
        (5_000, 10_000),
        (-1, 0),
    ],
)
def test_six_field_next_due_is_strictly_after_its_argument(offset_ms: int, expected_offset_ms: int) -> None:
    ev = CronEvaluator("*/5 * * * * *", "UTC")
    assert ev.next_due(BASE + offset_ms) == BASE + expected_offset_ms


@pytest.mark.parametrize(
    ("offset_ms", "expected_offset_ms"),
    [
        (0, 900_000),
        (1, 900_000),
        (500, 900_000),  # sub-second instant
        (899_999, 900_000),
        (900_000, 1_800_000),
        (900_001, 1_800_000),
    ],
)
def test_five_field_next_due_is_strictly_after_its_argument(offset_ms: int, expected_offset_ms: int) -> None:
    ev = CronEvaluator("*/15 * * * *", "UTC")
    assert ev.next_due(BASE + offset_ms) == BASE + expected_offset_ms


def test_iterating_next_due_from_each_due_never_repeats_an_instant() -> None:
    ev = CronEvaluator("*/7 * * * * *", "Europe/Paris")
    seq = dues(ev, BASE + 123, 30)
    assert all(b > a for a, b in zip(seq, seq[1:], strict=False))
    assert seq[0] > BASE + 123


# --- time zones ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "after", "expected_local"),
    [
        # 2024-06-01T00:00Z is 05:30 in Kolkata: today's 02:30 has passed, so tomorrow's.
        ("Asia/Kolkata", datetime(2024, 6, 1, tzinfo=UTC), datetime(2024, 6, 2, 2, 30)),
        # 2024-07-01T00:00Z is 20:00 EDT on June 30: 02:30 EDT on July 1.
        ("America/New_York", datetime(2024, 7, 1, tzinfo=UTC), datetime(2024, 7, 1, 2, 30)),
        # Winter in Sydney is AEST (+10): 2024-07-01T00:00Z is 10:00 local.
        ("Australia/Sydney", datetime(2024, 7, 1, tzinfo=UTC), datetime(2024, 7, 2, 2, 30)),
        ("UTC", datetime(2024, 7, 1, 1, tzinfo=UTC), datetime(2024, 7, 1, 2, 30)),
    ],
)
def test_daily_cron_is_evaluated_in_its_time_zone(
    zone: str, after: datetime, expected_local: datetime
) -> None:
    ev = CronEvaluator("0 30 2 * * *", zone)
    expected = ms(expected_local.replace(tzinfo=ZoneInfo(zone)))
    assert ev.next_due(ms(after)) == expected
    # and the day after, at the same local wall time (no DST change in these ranges)
    assert ev.next_due(expected) == ms((expected_local + timedelta(days=1)).replace(tzinfo=ZoneInfo(zone)))


def test_same_expression_in_two_zones_fires_at_different_instants() -> None:
    after = ms(datetime(2024, 7, 1, tzinfo=UTC))
    in_utc = CronEvaluator("0 30 2 * * *", "UTC").next_due(after)
    in_new_york = CronEvaluator("0 30 2 * * *", "America/New_York").next_due(after)
    assert in_utc is not None and in_new_york is not None
    assert in_new_york - in_utc == 4 * 3_600_000  # EDT is UTC-4


# --- DST: what actually happens ----------------------------------------------------------------


@pytest.mark.parametrize("expression", ["30 2 * * *", "0 30 2 * * *"])
@pytest.mark.parametrize(
    ("zone", "day"),
    [(NEW_YORK, datetime(2024, 3, 10)), (PARIS, datetime(2024, 3, 31))],
    ids=["new-york", "paris"],
)
def test_spring_forward_gap_daily_0230_fires_once_at_0330_new_local_time(
    expression: str, zone: ZoneInfo, day: datetime
) -> None:
    """Defined: a daily job at 02:30, a local time that does not exist on the spring-forward day (clocks
    jump 02:00 -> 03:00), fires once that day, at 03:30 local, i.e. one hour later in wall time. That is
    the instant zoneinfo gives to the non-existent 02:30 (read with the pre-transition offset, fold=0).
    """
    ev = CronEvaluator(expression, zone.key)
    midnight = ms(day.replace(tzinfo=zone))
    end_of_day = ms((day + timedelta(days=1)).replace(tzinfo=zone)) - 1
    fired = ev.dues_between(midnight, end_of_day, 10)
    assert fired == [ms(day.replace(hour=3, minute=30, tzinfo=zone))]
    assert fired == [ms(day.replace(hour=2, minute=30, tzinfo=zone))]  # zoneinfo's reading of the gap
    assert datetime.fromtimestamp(fired[0] / 1000, zone).strftime("%H:%M") == "03:30"
    # iterating from the day before's fire lands on the same instant
    day_before = ms((day - timedelta(days=1)).replace(hour=2, minute=30, tzinfo=zone))
    assert ev.next_due(day_before) == fired[0]


@pytest.mark.parametrize("expression", ["30 1 * * *", "0 30 1 * * *"])
def test_fall_back_overlap_new_york_daily_0130_fires_once_at_the_first_occurrence(expression: str) -> None:
    """Defined: on 2024-11-03 New York repeats 01:00-02:00 (EDT, then EST). A daily job at 01:30 fires
    once, at the first (EDT, fold=0) 01:30 = 05:30Z; the second (EST) 01:30 = 06:30Z does not fire.
    """
    ev = CronEvaluator(expression, "America/New_York")
    day = datetime(2024, 11, 3)
    midnight = ms(day.replace(tzinfo=NEW_YORK))
    noon = ms(day.replace(hour=12, tzinfo=NEW_YORK))
    assert ev.dues_between(midnight, noon, 10) == [utc(2024, 11, 3, 5, 30)]
    assert utc(2024, 11, 3, 5, 30) == ms(day.replace(hour=1, minute=30, fold=0, tzinfo=NEW_YORK))
    # from the day before's fire, the next one is the same first occurrence
    assert ev.next_due(ms(datetime(2024, 11, 2, 1, 30, tzinfo=NEW_YORK))) == utc(2024, 11, 3, 5, 30)
    # and not the second occurrence
    assert ev.count_between(midnight, noon, 10) == 1


def test_fall_back_overlap_paris_daily_0230_fires_once_at_the_first_occurrence() -> None:
    """Defined: on 2024-10-27 Paris repeats 02:00-03:00 (CEST, then CET). A daily job at 02:30 fires once,
    at the first (CEST, fold=0) 02:30 = 00:30Z; the second (CET) 02:30 = 01:30Z does not fire.
    """
    ev = CronEvaluator("0 30 2 * * *", "Europe/Paris")
    day = datetime(2024, 10, 27)
    midnight = ms(day.replace(tzinfo=PARIS))
    noon = ms(day.replace(hour=12, tzinfo=PARIS))
    assert ev.dues_between(midnight, noon, 10) == [utc(2024, 10, 27, 0, 30)]
    assert ev.next_due(ms(datetime(2024, 10, 26, 2, 30, tzinfo=PARIS))) == utc(2024, 10, 27, 0, 30)


def test_hourly_job_on_spring_forward_day_skips_only_the_missing_hour() -> None:
    """Defined: "0 * * * *" in New York on 2024-03-10 fires at 01:00 EST then 03:00 EDT (one real hour
    apart): nothing is lost, the 02:00 that does not exist is simply not there."""
    ev = CronEvaluator("0 * * * *", "America/New_York")
    start = ms(datetime(2024, 3, 10, 0, 30, tzinfo=NEW_YORK))
    assert dues(ev, start, 3) == [utc(2024, 3, 10, 6), utc(2024, 3, 10, 7), utc(2024, 3, 10, 8)]


def test_the_day_after_fall_back_a_daily_0130_job_fires_at_0130_again() -> None:
    ev = CronEvaluator("30 1 * * *", "America/New_York")
    first_occurrence = utc(2024, 11, 3, 5, 30)  # 01:30 EDT on the fall-back day
    assert ev.next_due(first_occurrence) == ms(datetime(2024, 11, 4, 1, 30, tzinfo=NEW_YORK))


@pytest.mark.parametrize(
    ("zone", "transition_day"),
    [
        (NEW_YORK, datetime(2024, 3, 10)),
        (NEW_YORK, datetime(2024, 11, 3)),
        (PARIS, datetime(2024, 3, 31)),
        (PARIS, datetime(2024, 10, 27)),
    ],
    ids=["new-york-spring", "new-york-fall", "paris-spring", "paris-fall"],
)
def test_daily_noon_job_fires_once_a_day_at_noon_local_through_a_dst_change(
    zone: ZoneInfo, transition_day: datetime
) -> None:
    ev = CronEvaluator("0 12 * * *", zone.key)
    first_day = transition_day - timedelta(days=2)
    expected = [ms((first_day + timedelta(days=k)).replace(hour=12, tzinfo=zone)) for k in range(5)]
    assert dues(ev, ms(first_day.replace(tzinfo=zone)), 5) == expected


@pytest.mark.parametrize(
    ("expression", "zone", "start", "step_ms"),
    [
        ("*/5 * * * * *", "Europe/Paris", utc(2024, 10, 27, 0, 59, 50), 5_000),
        ("0 * * * *", "America/New_York", utc(2024, 11, 3, 4, 30), 3_600_000),
    ],
    ids=["every-5s-paris", "hourly-new-york"],
)
def test_interval_cron_keeps_its_real_time_interval_through_the_repeated_hour(
    expression: str, zone: str, start: int, step_ms: int
) -> None:
    ev = CronEvaluator(expression, zone)
    first = ev.next_due(start)
    assert first is not None
    assert dues(ev, start, 4) == [first + k * step_ms for k in range(4)]


# --- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "zone"),
    [
        ("*/5 * * * *", "UTC"),
        ("*/5 * * * * *", "UTC"),
        ("0 30 2 * * *", "Europe/Paris"),
        ("0 0 29 2 *", "UTC"),  # leap day: rare but fires
        ("0 9 * * 1-5", "America/New_York"),
    ],
)
def test_validate_cron_accepts_good_expressions(expression: str, zone: str) -> None:
    validate_cron(expression, zone)


@pytest.mark.parametrize(
    "expression",
    ["", "* * * *", "* * * * * * *", "0 0 0 1 1 * 2030", "@daily"],
)
def test_validate_cron_rejects_a_wrong_number_of_fields(expression: str) -> None:
    with pytest.raises(InvalidSchedule) as exc:
        validate_cron(expression, "UTC")
    assert exc.value.field == "trigger.expression"
    assert "5 or 6 fields" in exc.value.message


@pytest.mark.parametrize(
    "expression",
    [
        "60 * * * *",
        "* 24 * * *",
        "* * 32 * *",
        "* * * 13 *",
        "0 0 * * 8",
        "abc * * * *",
        "*/0 * * * *",
        "61 * * * * *",
    ],
)
def test_validate_cron_rejects_bad_field_values(expression: str) -> None:
    with pytest.raises(InvalidSchedule) as exc:
        validate_cron(expression, "UTC")
    assert exc.value.field == "trigger.expression"


@pytest.mark.parametrize("zone", ["Mars/Olympus", "", "Europe/Pariss", "../etc/passwd", "utc"])
def test_validate_cron_rejects_unknown_time_zones(zone: str) -> None:
    with pytest.raises(InvalidSchedule) as exc:
        validate_cron("* * * * *", zone)
    assert exc.value.field == "trigger.timezone"


def test_validate_cron_reports_the_zone_before_the_expression() -> None:
    with pytest.raises(InvalidSchedule) as exc:
        validate_cron("not a cron", "Nowhere/Zone")
    assert exc.value.field == "trigger.timezone"


@pytest.mark.parametrize("expression", ["0 0 30 2 *", "0 0 31 4 *"])
def test_validate_cron_rejects_an_expression_that_never_fires(expression: str) -> None:
    with pytest.raises(InvalidSchedule) as exc:
        validate_cron(expression, "UTC")
    assert exc.value.field == "trigger.expression"
    assert "never fires" in str(exc.value)


def test_validate_cron_remembers_what_it_accepted_and_rejects_again(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = cron_module._validate_cron

    def counted(expression: str, zone: str) -> None:
        calls.append(expression)
        real(expression, zone)

    monkeypatch.setattr(cron_module, "_validate_cron", counted)
    monkeypatch.setattr(cron_module, "_VALID", set())
    for _ in range(3):
        validate_cron("7 */9 * * * *", "Asia/Tokyo")
    assert calls == ["7 */9 * * * *"]  # validated once
    validate_cron("7 */9 * * * *", "UTC")  # another zone is another pair
    assert len(calls) == 2
    for _ in range(2):  # a refusal is not remembered: refused each time, with its reason
        with pytest.raises(InvalidSchedule, match="never fires"):
            validate_cron("0 0 30 2 *", "UTC")
    assert calls.count("0 0 30 2 *") == 2


def test_a_never_firing_expression_has_no_next_due() -> None:
    assert CronEvaluator("0 0 30 2 *", "UTC").next_due(BASE) is None


def test_validate_cron_never_fires_message_is_not_wrapped_twice() -> None:
    with pytest.raises(InvalidSchedule) as exc:
        validate_cron("0 0 30 2 *", "UTC")
    assert exc.value.message == "cron expression '0 0 30 2 *' never fires (within 50 years)"


# --- memoisation --------------------------------------------------------------------------------


def test_cron_evaluator_is_shared_per_expression_and_zone() -> None:
    assert cron_evaluator("*/5 * * * *", "UTC") is cron_evaluator("*/5 * * * *", "UTC")
    assert cron_evaluator("*/5 * * * *", "UTC") is not cron_evaluator("*/5 * * * *", "Europe/Paris")


def test_memoised_next_due_returns_the_same_instant_as_a_fresh_evaluation() -> None:
    instants = [BASE + k * 1_234 for k in range(20)]
    memoised = CronEvaluator("*/5 * * * * *", "Europe/Paris")
    first = [memoised.next_due(t) for t in instants]
    # asked again, in another order, interleaved with other instants
    again = [memoised.next_due(t) for t in reversed(instants)][::-1]
    assert first == again
    for t, expected in zip(instants, first, strict=True):
        assert CronEvaluator("*/5 * * * * *", "Europe/Paris").next_due(t) == expected
    assert set(memoised._memo) == {t - t % 1000 + 999 for t in instants}  # one entry per second


@pytest.mark.parametrize(
    ("expression", "zone"),
    [("*/5 * * * * *", "UTC"), ("0 30 2 * * *", "Europe/Paris"), ("30 1 * * *", "America/New_York")],
)
def test_the_memo_by_second_answers_what_each_millisecond_would(expression: str, zone: str) -> None:
    """next_due memoises per second; a fresh computation at the exact millisecond agrees, across DST too."""
    evaluator = CronEvaluator(expression, zone)
    spring_2024_paris, fall_2024_new_york = 1_711_846_800_000, 1_730_613_600_000
    for start in (BASE, spring_2024_paris - 3_600_000, fall_2024_new_york - 7_200_000):
        due = evaluator.next_due(start)
        for _ in range(5):
            assert due is not None
            for t in (due - 1000, due - 1, due, due + 1, due + 999):
                assert evaluator.next_due(t) == evaluator._compute(t), t
            due = evaluator.next_due(due)


def test_memo_is_cleared_when_full_and_results_stay_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cron_module, "_MEMO_LIMIT", 3)
    ev = CronEvaluator("*/5 * * * * *", "UTC")
    instants = [BASE + k * 1_000 for k in range(10)]
    results = [ev.next_due(t) for t in instants]
    assert len(ev._memo) <= 3
    assert [ev.next_due(t) for t in instants] == results
    assert results == [BASE + 5_000] * 5 + [BASE + 10_000] * 5


def test_memoised_never_fires_result_is_still_none() -> None:
    ev = CronEvaluator("0 0 30 2 *", "UTC")
    assert ev.next_due(BASE) is None
    assert ev.next_due(BASE) is None


def test_an_every_five_seconds_job_keeps_its_real_time_interval_through_spring_forward() -> None:
    """Defined: a wildcard-hour job just continues in the new offset; nothing is fired twice or skipped."""
    ev = CronEvaluator("*/5 * * * * *", "America/New_York")
    start = utc(2024, 3, 10, 6, 59, 50)  # 01:59:50 EST, ten seconds before clocks jump to 03:00 EDT
    assert dues(ev, start, 4) == [start + k * 5_000 for k in range(1, 5)]


def _local(ms: int, zone: str = "America/New_York") -> str:
    from datetime import datetime as _dt
    from zoneinfo import ZoneInfo as _Zone

    return _dt.fromtimestamp(ms / 1000, _Zone(zone)).strftime("%Y-%m-%d %H:%M %Z")


def test_a_fixed_hour_cron_with_many_matches_in_the_repeated_hour_keeps_firing_after_that_night():
    """Acceptance finding: `*/4 1 * * *` in New York fired on 2027-11-06 and 11-07 and never again (each
    second occurrence skipped in the repeated hour used up one of 16 rounds)."""
    from scheduler.domain.triggers.cron import CronEvaluator

    ev = CronEvaluator("*/4 1 * * *", "America/New_York")
    t = 1_825_473_600_000  # 2027-11-06 00:00 EDT
    fires = []
    for _ in range(60):
        nxt = ev.next_due(t)
        assert nxt is not None, f"no next fire after {_local(t)}"
        fires.append(_local(nxt))
        t = nxt
    days = [f[:10] for f in fires]
    assert (
        days.count("2027-11-06") == 15 and days.count("2027-11-07") == 15 and days.count("2027-11-08") == 15
    )
    assert all(f.endswith("EDT") for f in fires if f.startswith("2027-11-07"))  # the first occurrence only


def test_a_fall_back_day_two_transitions_ahead_is_not_skipped():
    """Acceptance finding: `30 1 * 11 0` in New York went 2026-11-29 -> 2027-11-14, missing 2027-11-07 01:30
    EDT (the stale offset skipped the spring transition and the summer both)."""
    from scheduler.domain.triggers.cron import CronEvaluator

    ev = CronEvaluator("30 1 * 11 0", "America/New_York")
    nov_29 = ev.next_due(1_795_521_600_000)  # 2026-11-24
    assert nov_29 is not None and _local(nov_29) == "2026-11-29 01:30 EST"
    nxt = ev.next_due(nov_29)
    assert nxt is not None and _local(nxt) == "2027-11-07 01:30 EDT"
    assert _local(ev.next_due(1_825_560_000_000) or 0) == "2027-11-07 01:30 EDT"  # from 00:00 that day


# --- the dialect (acceptance findings 3-6; croniter 5.0.1 got each wrong) -----------------------


def _local_dues(expression: str, zone: str, start: datetime, n: int) -> list[str]:
    return [_local(d, zone) for d in dues(CronEvaluator(expression, zone), ms(start), n)]


def test_a_slash_b_without_a_range_means_from_a_every_b_as_quartz_reads_it() -> None:
    """Finding 3: `12/2` in the month field ("December") fired every day of November; `23/2` in the hour
    field fired at even hours; `12/7` meant months 1 and 8."""
    nov = datetime(2026, 11, 1, tzinfo=UTC)
    assert {d[:7] for d in _local_dues("6,29 12 * 12/2 *", "UTC", nov, 70)} == {"2026-12", "2027-12"}
    assert {d[11:16] for d in _local_dues("0 23/2 * * *", "UTC", nov, 5)} == {"23:00"}
    assert {d[5:7] for d in _local_dues("0 0 1 12/7 *", "UTC", nov, 3)} == {"12"}
    assert {d[11:16] for d in _local_dues("0 5/8 * * *", "UTC", nov, 6)} == {"05:00", "13:00", "21:00"}


def test_star_slash_n_in_day_of_month_counts_from_the_first_of_every_month() -> None:
    """Finding 4: `0 0 */5 * *` went 02-26 -> 03-06, skipping 1 March."""
    got = _local_dues("0 0 */5 * *", "UTC", datetime(2027, 2, 25, tzinfo=UTC), 3)
    assert [d[:10] for d in got] == ["2027-02-26", "2027-03-01", "2027-03-06"]


@pytest.mark.parametrize("expression", ["0 0 * * 7", "0 0 0 * * 7", "0 0 * * SUN", "0 0 0 * * 0"])
def test_day_of_week_7_is_sunday_in_five_and_six_fields(expression: str) -> None:
    """Finding 5: 6-field crons refused day-of-week 7."""
    validate_cron(expression, "UTC")
    got = _local_dues(expression, "UTC", datetime(2026, 11, 24, tzinfo=UTC), 2)
    assert [d[:10] for d in got] == ["2026-11-29", "2026-12-06"]


def test_day_of_month_and_day_of_week_combine_with_and_when_either_starts_with_a_star() -> None:
    """Finding 6 (undocumented before): Vixie and Debian cron's rule. `0 0 */2 * 1` is odd days that are
    Mondays; `0 0 1,15 * 1` is the 1st, the 15th and every Monday."""
    and_days = _local_dues("0 0 */2 * 1", "UTC", datetime(2026, 11, 24, tzinfo=UTC), 4)
    assert all(datetime.fromisoformat(d[:10]).weekday() == 0 and int(d[8:10]) % 2 == 1 for d in and_days)
    or_days = [d[:10] for d in _local_dues("0 0 1,15 * 1", "UTC", datetime(2026, 11, 24, tzinfo=UTC), 4)]
    assert or_days == ["2026-11-30", "2026-12-01", "2026-12-07", "2026-12-14"]


def test_each_wall_time_in_a_spring_forward_gap_shifts_forward_by_the_gap() -> None:
    """Finding 6: `*/15 2 * * *` in New York on 2027-03-14 fired only at 03:00 (the gap's matches
    collapsed into one), where the README says each shifts."""
    got = _local_dues("*/15 2 * * *", "America/New_York", datetime(2027, 3, 14, 5, 0, tzinfo=UTC), 5)
    assert got == [
        "2027-03-14 03:00 EDT",
        "2027-03-14 03:15 EDT",
        "2027-03-14 03:30 EDT",
        "2027-03-14 03:45 EDT",
        "2027-03-15 02:00 EDT",
    ]


def test_an_hourly_job_in_a_30_minute_gap_fires_shifted_by_the_gap() -> None:
    """Lord Howe moves its clocks 30 minutes: 02:00 does not exist on 2027-10-03 and fires at 02:30."""
    got = _local_dues("0 * * * *", "Australia/Lord_Howe", datetime(2027, 10, 2, 14, 0, tzinfo=UTC), 3)
    assert got == ["2027-10-03 01:00 +1030", "2027-10-03 02:30 +11", "2027-10-03 03:00 +11"]


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("0 0 ?/2 * 1", "day-of-month: '?' is not a number"),
        ("0 0 1-L * *", "day-of-month: 'L' is not a number"),
        ("0 0 15W * *", "day-of-month: '15W' is not a number"),
        ("H * * * *", "minute: 'H' is not a number"),
        ("*/0 * * * *", "minute: step '0' must be a whole number above 0"),
        ("0 0 * * 1#6", "day-of-week: '1#6' needs a week 1-5 after '#'"),
        ("0 24 * * *", "hour: 24 is outside 0-23"),
        ("0 0 * * 8", "day-of-week: 8 is outside 0-7"),
        ("0 0 1,,2 * *", "day-of-month: empty item in '1,,2'"),
    ],
)
def test_what_the_dialect_does_not_have_is_refused_naming_the_field(expression: str, reason: str) -> None:
    with pytest.raises(InvalidSchedule) as exc:
        validate_cron(expression, "UTC")
    assert exc.value.field == "trigger.expression"
    assert exc.value.message == f"invalid cron expression {expression!r}: {reason}"


def test_last_day_last_weekday_and_nth_weekday_of_the_month() -> None:
    start = datetime(2027, 1, 1, tzinfo=UTC)
    assert [d[:10] for d in _local_dues("0 0 L * *", "UTC", start, 2)] == ["2027-01-31", "2027-02-28"]
    assert [d[:10] for d in _local_dues("0 0 LW 1 *", "UTC", start, 1)] == ["2027-01-29"]  # 31st: Sunday
    assert [d[:10] for d in _local_dues("0 0 * * 5L", "UTC", start, 1)] == ["2027-01-29"]  # last Friday
    assert [d[:10] for d in _local_dues("0 0 * * MON#2", "UTC", start, 1)] == ["2027-01-11"]


def test_a_range_whose_end_is_below_its_start_wraps_around_the_field() -> None:
    """croniter read `22-2` as 22, 23, 0, 1, 2 (stored schedules have it); Quartz does too."""
    start = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
    assert [d[11:16] for d in _local_dues("0 22-2 * * *", "UTC", start, 5)] == [
        "22:00", "23:00", "00:00", "01:00", "02:00"
    ]  # fmt: skip
    assert [d[:10] for d in _local_dues("0 0 * * FRI-MON", "UTC", start, 4)] == [
        "2026-11-27", "2026-11-28", "2026-11-29", "2026-11-30"
    ]  # fmt: skip


def test_a_question_mark_is_a_star_in_the_day_fields() -> None:
    """Quartz writes `0 0 12 ? * MON`; like `*`, it makes the other day field decide alone."""
    start = datetime(2026, 11, 24, tzinfo=UTC)
    assert _local_dues("0 0 12 ? * MON", "UTC", start, 2) == _local_dues("0 0 12 * * MON", "UTC", start, 2)
    assert [d[:10] for d in _local_dues("0 0 1 * ?", "UTC", start, 1)] == ["2026-12-01"]


def test_a_stored_expression_the_dialect_refuses_never_fires_and_does_not_raise() -> None:
    """croniter took `1-L`; a schedule stored with it must not take a worker down when compiled."""
    evaluator = CronTrigger("0 0 1-L * *").evaluator()
    assert evaluator.next_due(BASE) is None
    with pytest.raises(InvalidSchedule, match="day-of-month"):
        validate_cron("0 0 1-L * *", "UTC")
