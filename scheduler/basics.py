"""The domain's primitives: time units and the validation error. Every other domain module may import
this one; it imports nothing of the package (so triggers, constraints and the records do not import each
other in a circle)."""

from __future__ import annotations

from enum import StrEnum


class TimeUnit(StrEnum):
    MILLISECONDS = "MILLISECONDS"
    SECONDS = "SECONDS"
    MINUTES = "MINUTES"
    HOURS = "HOURS"
    DAYS = "DAYS"

    @property
    def ms(self) -> int:
        return _UNIT_MS[self]


_UNIT_MS = {
    TimeUnit.MILLISECONDS: 1,
    TimeUnit.SECONDS: 1_000,
    TimeUnit.MINUTES: 60_000,
    TimeUnit.HOURS: 3_600_000,
    TimeUnit.DAYS: 86_400_000,
}


class InvalidSchedule(ValueError):
    """A schedule or command that must not be applied; `field` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
