"""The cron dialect: parsing an expression into the sets of values it matches, and the first matching
local wall-clock time at or after a given one. Pure, no time zones (see cron.py for those).

The dialect (README, "Cron expressions"): 5 fields (minute hour day-of-month month day-of-week) or 6
(second first). A field is a comma list of `*`, `v`, `a-b`, `*/n`, `a-b/n` or `a/n` (from a to the
field's maximum, every n, as Quartz and Spring read it); a range whose end is below its start wraps
around (`22-2`); months JAN-DEC and days SUN-SAT by name; day of week 0-7 with 0 and 7 both Sunday; `?`
for `*` in day-of-month and day-of-week (Quartz); `L` (last day) and `LW` (last weekday) in day-of-month;
`dL` (last weekday d of the month) and `d#k` (k-th weekday d) in day-of-week. When day-of-month or
day-of-week starts with `*` or `?`, a day must match both; otherwise either (Vixie and Debian cron).
Everything else (`W`, `H`, years, `@daily`) is refused with a message naming the field.
"""

from __future__ import annotations

import calendar
from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache

FIELD_NAMES = ("second", "minute", "hour", "day-of-month", "month", "day-of-week")
_BOUNDS = ((0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_MONTHS = {
    n: i + 1
    for i, n in enumerate(
        ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
    )
}
_DAYS = {n: i for i, n in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}
SECOND, MINUTE, HOUR, DOM, MONTH, DOW = range(6)

#: day-of-month markers (beside the numbers 1-31)
LAST_DAY, LAST_WEEKDAY = -1, -2
#: `dL` in day-of-week: (d, LAST_OF_MONTH)
LAST_OF_MONTH = 0
#: how far ahead a match is looked for before an expression is said never to fire
MAX_YEARS = 50


class CronSyntaxError(ValueError):
    """An expression outside the dialect: the message names the field and why."""


def _number(text: str, index: int) -> int:
    upper = text.upper()
    if index == MONTH and upper in _MONTHS:
        return _MONTHS[upper]
    if index == DOW and upper in _DAYS:
        return _DAYS[upper]
    if not text.isdigit() or not text.isascii():
        raise CronSyntaxError(f"{FIELD_NAMES[index]}: {text!r} is not a number")
    value = int(text)
    lo, hi = _BOUNDS[index]
    if not lo <= value <= hi:
        raise CronSyntaxError(f"{FIELD_NAMES[index]}: {value} is outside {lo}-{hi}")
    return value


def _term(term: str, index: int) -> set[int] | set[tuple[int, int]]:
    name = FIELD_NAMES[index]
    lo, hi = _BOUNDS[index]
    upper = term.upper()
    if index == DOM and upper in ("L", "LW"):
        return {LAST_DAY if upper == "L" else LAST_WEEKDAY}
    if index == DOW and upper.endswith("L") and len(upper) > 1:
        return {(_number(term[:-1], index) % 7, LAST_OF_MONTH)}
    if index == DOW and "#" in term:
        day, _, nth = term.partition("#")
        if not nth.isdigit() or not 1 <= int(nth) <= 5:
            raise CronSyntaxError(f"{name}: {term!r} needs a week 1-5 after '#'")
        return {(_number(day, index) % 7, int(nth))}
    base, slash, step_text = term.partition("/")
    step = 1
    if slash:
        if not step_text.isdigit() or not step_text.isascii() or int(step_text) == 0:
            raise CronSyntaxError(f"{name}: step {step_text!r} must be a whole number above 0")
        step = int(step_text)
    if base == "*" or (base == "?" and index in (DOM, DOW) and not slash):
        start, end = lo, hi
    elif "-" in base:
        a, _, b = base.partition("-")
        start, end = _number(a, index), _number(b, index)
        if end < start:
            # wraps around the field's end (`22-2` hours: 22, 23, 0, 1, 2), as Quartz and croniter read it
            span = hi - lo + 1 if index != DOW else 7
            values = {lo + (v - lo) % span for v in range(start, end + span + 1, step)}
            return {v % 7 for v in values} if index == DOW else values
    else:
        start = _number(base, index)
        end = hi if slash else start  # `a/n`: from a to the field's maximum, every n
    values = set(range(start, end + 1, step))
    return {v % 7 for v in values} if index == DOW else values


@lru_cache(maxsize=4096)
def _field(text: str, index: int) -> frozenset:  # type: ignore[type-arg]
    """The values a field matches; remembered, as expressions share most of their fields (`*`, a minute)."""
    if not text:
        raise CronSyntaxError(f"{FIELD_NAMES[index]} is empty")
    values: set = set()  # type: ignore[type-arg]
    for term in text.split(","):
        if not term:
            raise CronSyntaxError(f"{FIELD_NAMES[index]}: empty item in {text!r}")
        values |= _term(term, index)
    return frozenset(values)


@dataclass(frozen=True)
class CronFields:
    """The values each field of an expression matches."""

    with_seconds: bool
    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: tuple[int, ...]
    doms: frozenset[int]
    dows: frozenset[int | tuple[int, int]]
    days_and: bool
    #: the hour field holds no `*`: a wall time repeated by a fall-back fires once (see cron.py)
    fixed_hour: bool
    _days: dict[tuple[int, int], tuple[int, ...]] = field(default_factory=dict, compare=False, repr=False)

    @staticmethod
    def parse(expression: str) -> CronFields:
        parts = expression.split()
        if len(parts) not in (5, 6):
            raise CronSyntaxError(f"cron needs 5 or 6 fields (second first), got {len(parts)}")
        with_seconds = len(parts) == 6
        if not with_seconds:
            parts = ["0", *parts]
        sets = [_field(text, i) for i, text in enumerate(parts)]
        return CronFields(
            with_seconds=with_seconds,
            seconds=tuple(sorted(sets[SECOND])),
            minutes=tuple(sorted(sets[MINUTE])),
            hours=tuple(sorted(sets[HOUR])),
            months=tuple(sorted(sets[MONTH])),
            doms=frozenset(sets[DOM]),
            dows=frozenset(sets[DOW]),
            days_and=parts[DOM][0] in "*?" or parts[DOW][0] in "*?",
            fixed_hour="*" not in parts[HOUR],
        )

    def days(self, year: int, month: int) -> tuple[int, ...]:
        """The days of this month the day fields match, ascending."""
        key = (year, month)
        cached = self._days.get(key)
        if cached is not None:
            return cached
        first_weekday, length = calendar.monthrange(year, month)  # Monday = 0
        last_weekday = length - max(0, (first_weekday + length - 1) % 7 - 4)  # Sat -> Fri, Sun -> Fri
        doms, dows = self.doms, self.dows
        matched = []
        for day in range(1, length + 1):
            in_dom = (
                day in doms
                or (day == length and LAST_DAY in doms)
                or (day == last_weekday and LAST_WEEKDAY in doms)
            )
            weekday = (first_weekday + day) % 7  # Sunday = 0
            in_dow = (
                weekday in dows
                or (weekday, (day - 1) // 7 + 1) in dows
                or (day + 7 > length and (weekday, LAST_OF_MONTH) in dows)
            )
            if (in_dom and in_dow) if self.days_and else (in_dom or in_dow):
                matched.append(day)
        if len(self._days) > 1024:
            self._days.clear()
        result = self._days[key] = tuple(matched)
        return result

    def first_at_or_after(
        self, year: int, month: int, day: int, hour: int, minute: int, second: int
    ) -> tuple[int, int, int, int, int, int] | None:
        """The first matching wall-clock time at or after the given one, or None within MAX_YEARS."""
        limit = year + MAX_YEARS
        months, hours, minutes, seconds = self.months, self.hours, self.minutes, self.seconds
        while year <= limit:
            i = bisect_left(months, month)
            if i == len(months):
                year, month, day, hour, minute, second = year + 1, 1, 1, 0, 0, 0
                continue
            if months[i] != month:
                month, day, hour, minute, second = months[i], 1, 0, 0, 0
            days = self.days(year, month)
            i = bisect_left(days, day)
            if i == len(days):
                month, day, hour, minute, second = month + 1, 1, 0, 0, 0
                continue
            if days[i] != day:
                day, hour, minute, second = days[i], 0, 0, 0
            i = bisect_left(hours, hour)
            if i == len(hours):
                day, hour, minute, second = day + 1, 0, 0, 0
                continue
            if hours[i] != hour:
                hour, minute, second = hours[i], 0, 0
            i = bisect_left(minutes, minute)
            if i == len(minutes):
                hour, minute, second = hour + 1, 0, 0
                continue
            if minutes[i] != minute:
                minute, second = minutes[i], 0
            i = bisect_left(seconds, second)
            if i == len(seconds):
                minute, second = minute + 1, 0
                continue
            return year, month, day, hour, minute, seconds[i]
        return None


_EPOCH_DAY = date(1970, 1, 1).toordinal()


def wall_ms(year: int, month: int, day: int, hour: int, minute: int, second: int) -> int:
    """A wall-clock time as naive-local milliseconds since 1970-01-01T00:00."""
    days = date(year, month, day).toordinal() - _EPOCH_DAY
    return ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000


def wall_fields(ms: int) -> tuple[int, int, int, int, int, int]:
    """The inverse of wall_ms (whole seconds; milliseconds dropped)."""
    days, rest = divmod(ms // 1000, 86_400)
    d = date.fromordinal(days + _EPOCH_DAY)
    return d.year, d.month, d.day, rest // 3600, rest // 60 % 60, rest % 60
