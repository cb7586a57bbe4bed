"""Exclusion calendars: which instants their days hold (in their zone), and the registry's answer."""

from __future__ import annotations

import json
from datetime import date

import pytest

from scheduler.domain.calendars import Calendar, CalendarIn
from scheduler.domain.model import InvalidSchedule
from scheduler.worker.calendars import CalendarRegistry

pytestmark = pytest.mark.unit

#: 2026-12-24T23:30:00Z: still the 24th in UTC, already the 25th in Paris
XMAS_EVE_LATE = 1_798_155_000_000


def calendar(**body: object) -> Calendar:
    return Calendar.from_body("acme", "holidays", CalendarIn.model_validate(body))


def test_a_calendar_holds_its_dates_ranges_and_weekdays_in_its_own_time_zone() -> None:
    paris = calendar(timezone="Europe/Paris", dates=["2026-12-25"])
    assert paris.excludes(XMAS_EVE_LATE) and not calendar(dates=["2026-12-25"]).excludes(XMAS_EVE_LATE)
    summer = calendar(ranges=[{"from": "2026-08-01", "to": "2026-08-15"}])
    assert (
        summer.holds(date(2026, 8, 1))
        and summer.holds(date(2026, 8, 15))
        and not summer.holds(date(2026, 8, 16))
    )
    weekends = calendar(weekdays=["SAT", "SUN"])
    assert weekends.holds(date(2026, 11, 28)) and not weekends.holds(
        date(2026, 11, 27)
    )  # a Saturday, a Friday


def test_a_calendar_round_trips_through_its_json_and_bad_ones_name_the_field() -> None:
    c = calendar(
        timezone="Asia/Tokyo",
        dates=["2027-01-01"],
        ranges=[{"from": "2026-12-29", "to": "2026-12-31"}],
        weekdays=["SUN"],
    )
    assert Calendar.from_json(json.loads(json.dumps(c.to_json()))) == c
    for body, field in (
        ({"timezone": "Mars/Olympus"}, "timezone"),
        ({"ranges": [{"from": "2026-02-02", "to": "2026-02-01"}]}, "ranges.0.to"),
    ):
        with pytest.raises(InvalidSchedule) as err:
            calendar(**body).validate()
        assert err.value.field == field


def test_the_registry_says_which_calendar_of_a_tenant_holds_an_instant_and_follows_updates_and_deletes() -> (
    None
):
    registry = CalendarRegistry("127.0.0.1:9", "t-calendars")
    key = b"acme/holidays"
    registry.apply(key, json.dumps(calendar(dates=["2026-12-24"]).to_json()).encode())
    assert registry.excluding("acme", ("other", "holidays"), XMAS_EVE_LATE) == "holidays"
    assert registry.excluding("beta", ("holidays",), XMAS_EVE_LATE) is None  # another tenant's: none
    registry.apply(key, json.dumps(calendar(dates=["2026-12-26"]).to_json()).encode())  # updated
    assert registry.excluding("acme", ("holidays",), XMAS_EVE_LATE) is None
    registry.apply(b"acme/wrong", json.dumps(calendar().to_json()).encode())  # under another key: ignored
    assert registry.get("acme/wrong") is None
    registry.apply(key, None)
    assert registry.get("acme/holidays") is None
