"""Exclusion calendars: named sets of days (dates, date ranges, weekdays) in a time zone. A schedule that
excludes a calendar does not fire at an instant whose local date (in the calendar's zone) the calendar
holds: holidays, maintenance freezes, weekends. Pure; the worker keeps every calendar in memory (the
calendars topic, scheduler.worker.calendars) and asks at each instant, so a calendar's update counts from
the next instant of every schedule that uses it, without re-sending them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime
from functools import cache
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field

from scheduler.domain.basics import InvalidSchedule

WEEKDAYS = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")
MAX_CALENDAR_DAYS = 5_000  # dates and ranges of one calendar
CALENDAR_NAME = r"[A-Za-z0-9._-]{1,128}"
CALENDAR_NAME_RE = re.compile(CALENDAR_NAME, re.ASCII)
Weekday = Literal["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"]


class DateRangeIn(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    from_: date = Field(alias="from", description="first day (YYYY-MM-DD), included")
    to: date = Field(description="last day, included")


class CalendarIn(BaseModel):
    """Body of PUT /calendars/{tenant}/{name}."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timezone: str = Field("UTC", max_length=64, description="the zone its days are local to")
    dates: list[date] = Field(default_factory=list, max_length=MAX_CALENDAR_DAYS)
    ranges: list[DateRangeIn] = Field(default_factory=list, max_length=MAX_CALENDAR_DAYS)
    weekdays: list[Weekday] = Field(default_factory=list, max_length=7)
    description: str = Field("", max_length=1024)


@dataclass(frozen=True, slots=True)
class Calendar:
    tenant: str
    name: str
    timezone: str = "UTC"
    dates: frozenset[date] = frozenset()
    ranges: tuple[tuple[date, date], ...] = ()
    weekdays: frozenset[str] = frozenset()
    description: str = ""

    @property
    def id(self) -> str:
        return f"{self.tenant}/{self.name}"

    def validate(self) -> None:
        if not CALENDAR_NAME_RE.fullmatch(self.name):
            raise InvalidSchedule("name", "must be 1-128 characters of [A-Za-z0-9._-]")
        if zone(self.timezone) is None:
            raise InvalidSchedule("timezone", f"unknown time zone {self.timezone[:64]!r}")
        for i, (start, end) in enumerate(self.ranges):
            if end < start:
                raise InvalidSchedule(f"ranges.{i}.to", "must not be before 'from'")
        if len(self.dates) + len(self.ranges) > MAX_CALENDAR_DAYS:
            raise InvalidSchedule("dates", f"more than {MAX_CALENDAR_DAYS} dates and ranges")

    def holds(self, day: date) -> bool:
        return (
            day in self.dates
            or WEEKDAYS[day.weekday()] in self.weekdays
            or any(start <= day <= end for start, end in self.ranges)
        )

    def excludes(self, instant_ms: int) -> bool:
        """Whether the local date of the instant (in the calendar's zone) is one of its days."""
        tz = zone(self.timezone) or ZoneInfo("UTC")
        return self.holds(datetime.fromtimestamp(instant_ms / 1000, UTC).astimezone(tz).date())

    def to_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "name": self.name,
            "timezone": self.timezone,
            "dates": sorted(d.isoformat() for d in self.dates),
            "ranges": [{"from": a.isoformat(), "to": b.isoformat()} for a, b in self.ranges],
            "weekdays": [w for w in WEEKDAYS if w in self.weekdays],
            "description": self.description,
        }

    @classmethod
    def from_body(cls, tenant: str, name: str, body: CalendarIn) -> Calendar:
        return cls(
            tenant,
            name,
            body.timezone,
            frozenset(body.dates),
            tuple((r.from_, r.to) for r in body.ranges),
            frozenset(body.weekdays),
            body.description,
        )

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Calendar:
        return cls.from_body(
            d["tenant"],
            d["name"],
            CalendarIn.model_validate({k: v for k, v in d.items() if k not in ("tenant", "name")}),
        )


@cache
def zone(name: str) -> ZoneInfo | None:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None


def calendar_key(tenant: str, name: str) -> str:
    """A calendar's key on the calendars topic (and in a schedule's tenant: its name)."""
    return f"{tenant}/{name}"
