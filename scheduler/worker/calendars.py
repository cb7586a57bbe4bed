"""The calendars every worker holds: the `<app>-calendars` topic (compacted, keyed `tenant/name`, JSON),
read whole and followed (worker.programs.TopicMap). HTTP writes a calendar there; the punctuator asks, at
each instant of a schedule that excludes calendars, whether one of them holds that instant's day."""

from __future__ import annotations

import json
import logging

from scheduler.domain.calendars import Calendar, calendar_key
from scheduler.worker.programs import TopicMap

log = logging.getLogger(__name__)


class CalendarRegistry(TopicMap[Calendar]):
    what = "calendar"

    def parse(self, key: str, value: bytes) -> Calendar:
        calendar = Calendar.from_json(json.loads(value))
        if calendar.id != key:
            raise ValueError(f"calendar {calendar.id!r} under key {key!r}")
        return calendar

    def excluding(self, tenant: str, names: tuple[str, ...], instant_ms: int) -> str | None:
        """The first of the tenant's calendars `names` that holds the instant's day (None: none does; a
        calendar that does not exist, or no longer does, holds no day)."""
        for name in names:
            calendar = self.get(calendar_key(tenant, name))
            if calendar is not None and calendar.excludes(instant_ms):
                return name
        return None
