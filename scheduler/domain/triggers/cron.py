"""Cron trigger: an expression of our dialect (cron_fields.py) evaluated in an IANA time zone.

A next-fire computation costs tens of µs, and many schedules share an expression and a due instant, so
one evaluator per (expression, time zone) memoises next_due by instant.
"""

from __future__ import annotations

import logging
from datetime import datetime
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from scheduler.domain.basics import InvalidSchedule, TimeUnit
from scheduler.domain.triggers.base import TimeTrigger
from scheduler.domain.triggers.cron_fields import MAX_YEARS, CronFields, CronSyntaxError, wall_fields, wall_ms

log = logging.getLogger(__name__)

_MEMO_LIMIT = 200_000
_DAY_MS = 86_400_000
#: how far back a transition can still shape the next fire: the longest gap or overlap (Samoa skipped a
#: whole day in 2011) plus a margin
_LOOKBACK_MS = 2 * _DAY_MS
#: transitions one next-fire computation may cross: two a year for the MAX_YEARS a cron may look ahead
_MAX_TRANSITIONS = 4 * MAX_YEARS


class CronEvaluator(TimeTrigger):
    """Due instants of a cron expression in a time zone, with defined DST behaviour.

    The expression matches local wall-clock times; each one fires at the instant java.time and Python's
    zoneinfo (fold=0) read it as, and two wall times read as one instant fire once:
    - a wall-clock time that does not exist (spring-forward gap) fires shifted forward by the length of
      the gap: a daily 02:30 fires at 03:30 on that day, and `*/15 2 * * *` at 03:00, 03:15, 03:30, 03:45;
    - a wall-clock time that occurs twice (fall-back overlap) fires at its first occurrence, and, when the
      hour field holds a `*` (`*/5 * * * * *`, `0 * * * *`), at its second occurrence too, so interval
      jobs keep their real-time interval; a fixed hour (`30 1 * * *`, `0 1-3 * * *`) fires once.
    The wall clock is walked one UTC-offset segment at a time: within a segment, wall time and instant
    differ by a constant.
    """

    def __init__(self, expression: str, timezone: str) -> None:
        self.expression = expression
        self.tz = ZoneInfo(timezone)
        self.utc = timezone in ("UTC", "Etc/UTC", "GMT", "Etc/GMT", "Z")
        self.fields = CronFields.parse(expression)
        self.unit = TimeUnit.SECONDS if self.fields.with_seconds else TimeUnit.MINUTES
        self._memo: dict[int, int | None] = {}

    def _wall_next(self, wall: int) -> int | None:
        """First matching wall-clock time strictly after `wall` (both as naive-local milliseconds)."""
        found = self.fields.first_at_or_after(*wall_fields(wall - wall % 1000 + 1000))
        return None if found is None else wall_ms(*found)

    def _offset(self, instant_ms: int) -> int:
        off = datetime.fromtimestamp(instant_ms // 1000, self.tz).utcoffset()
        return 0 if off is None else int(off.total_seconds()) * 1000

    def _transition(self, after_ms: int, before_ms: int, offset: int) -> int:
        """The first whole second in (after_ms, before_ms] whose UTC offset differs from `offset`."""
        lo, hi = after_ms // 1000, before_ms // 1000
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._offset(mid * 1000) == offset:
                lo = mid
            else:
                hi = mid
        return hi * 1000

    def _next_change(self, after_ms: int, until_ms: int, offset: int) -> int | None:
        """The first whole second in (after_ms, until_ms] whose UTC offset differs from `offset`, or None.
        Stepped a day at a time, so that a span holding two transitions (spring and autumn, when a cron
        matches once a year) is not read as holding none."""
        lo = after_ms
        while lo < until_ms:
            hi = min(lo + _DAY_MS, until_ms)
            if self._offset(hi) != offset:
                return self._transition(lo, hi, offset)
            lo = hi
        return None

    def _last_change(self, at_ms: int, offset: int) -> tuple[int | None, int]:
        """The last transition in the _LOOKBACK_MS before `at_ms` and the offset before it (None and
        `offset` when there was none)."""
        lo = at_ms - _LOOKBACK_MS
        before = self._offset(lo)
        last: int | None = None
        last_before = offset
        change = self._next_change(lo, at_ms, before)
        while change is not None:
            last, last_before = change, before
            before = self._offset(change)
            change = self._next_change(change, at_ms, before)
        return last, last_before

    def _compute(self, after_ms: int) -> int | None:
        if self.utc:
            return self._wall_next(after_ms)
        t = after_ms
        offset = self._offset(t)
        # the segment holding t began at `start`, where the offset changed from `before` (if lately)
        start, before = self._last_change(t, offset)
        for _ in range(_MAX_TRANSITIONS):
            gap_fire: int | None = None
            if start is not None and before < offset:
                # spring forward at `start`: wall times [start + before, start + offset) do not exist;
                # each fires shifted forward by the gap, at wall - before
                w = self._wall_next(max(t + before, start + before - 1))
                if w is not None and w < start + offset:
                    gap_fire = w - before
            lower = t + offset
            if start is not None and before > offset and self.fields.fixed_hour:
                # fall back at `start`: wall times [start + offset, start + before) come a second time;
                # with a fixed hour they fired at their first occurrence
                lower = max(lower, start + before - 1)
            w = self._wall_next(lower)
            if w is None:
                return gap_fire
            instant = w - offset
            change = self._next_change(t, instant, offset)
            if change is None:
                return instant if gap_fire is None else min(gap_fire, instant)
            if gap_fire is not None:
                return gap_fire
            start, before, offset, t = change, offset, self._offset(change), change - 1
        return None

    def next_due(self, after_ms: int) -> int | None:
        # Due instants are whole seconds (zone offsets are whole seconds), so every instant of one second
        # has the next due of the second's last millisecond: one memo entry per second, not per ms (a
        # schedule INSERTed at any ms of a second shares the work with the others of that second).
        after_ms = after_ms - after_ms % 1000 + 999
        memo = self._memo
        try:
            return memo[after_ms]
        except KeyError:
            pass
        nxt = self._compute(after_ms)
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        memo[after_ms] = nxt
        return nxt


class _NeverFires(TimeTrigger):
    unit = TimeUnit.MINUTES

    def next_due(self, after_ms: int) -> int | None:
        return None


@lru_cache(maxsize=4096)
def unparsable(expression: str, timezone: str, error: str) -> TimeTrigger:
    """The evaluator of a stored expression the dialect refuses (accepted by croniter before 2026-11-24):
    it never fires; said once per expression in the log."""
    log.error(
        "stored cron expression %r (%s) is refused now and never fires: %s", expression, timezone, error
    )
    return _NeverFires()


@lru_cache(maxsize=65_536)
def cron_evaluator(expression: str, timezone: str) -> CronEvaluator:
    return CronEvaluator(expression, timezone)


#: (expression, zone) pairs validate_cron accepted: many schedules share one, and validating costs
#: a parse and a next-fire computation, a large part of a schedule INSERT's handling
_VALID: set[tuple[str, str]] = set()
_VALID_LIMIT = 65_536


def validate_cron(expression: str, timezone: str) -> None:
    """Raise InvalidSchedule if the expression or the zone is wrong, or if it would never fire."""
    if (expression, timezone) in _VALID:
        return
    _validate_cron(expression, timezone)
    if len(_VALID) >= _VALID_LIMIT:
        _VALID.clear()
    _VALID.add((expression, timezone))


def _validate_cron(expression: str, timezone: str) -> None:
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise InvalidSchedule("trigger.timezone", f"unknown time zone {timezone!r}") from None
    try:
        evaluator = cron_evaluator(expression, timezone)
    except CronSyntaxError as exc:
        raise InvalidSchedule(
            "trigger.expression", f"invalid cron expression {expression!r}: {exc}"
        ) from None
    if evaluator.next_due(round(datetime.now().timestamp() * 1000)) is None:
        raise InvalidSchedule(
            "trigger.expression", f"cron expression {expression!r} never fires (within {MAX_YEARS} years)"
        )
