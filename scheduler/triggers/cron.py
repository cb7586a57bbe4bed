"""Cron trigger on croniter, evaluated in an IANA time zone.

croniter costs ~100 µs a call, and many schedules share an expression and a due instant, so one
evaluator per (expression, time zone) memoises next_due by instant.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from scheduler.model import InvalidSchedule, TimeUnit
from scheduler.triggers.base import TimeTrigger

_MEMO_LIMIT = 200_000


def _fields(expression: str) -> int:
    return len(expression.split())


_EPOCH = datetime(1970, 1, 1)
_MS = timedelta(milliseconds=1)
_DAY_MS = 86_400_000
#: transitions one next-fire computation may cross: two a year for the 50 years a cron may look ahead
_MAX_TRANSITIONS = 128


class CronEvaluator(TimeTrigger):
    """Due instants of a cron expression in a time zone, with defined DST behaviour.

    croniter runs on naive local wall-clock time (where it is exact); this class maps wall-clock times to
    instants one UTC-offset segment at a time:
    - a wall-clock time that does not exist (spring-forward gap) fires shifted forward by the gap, as
      java.time and Python's zoneinfo (fold=0) read it: a daily 02:30 fires at 03:30 on that day;
    - a wall-clock time that occurs twice (fall-back overlap) fires once, at its first occurrence, when
      the hour field is fixed ("30 1 * * *"); with a wildcard hour ("*/5 * * * * *", "0 * * * *") it
      fires at both occurrences, so interval jobs keep their real-time interval.
    """

    def __init__(self, expression: str, timezone: str) -> None:
        self.expression = expression
        self.tz = ZoneInfo(timezone)
        self.utc = timezone in ("UTC", "Etc/UTC", "GMT", "Etc/GMT", "Z")
        fields = expression.split()
        with_seconds = len(fields) == 6
        self.fixed_hour = "*" not in fields[2 if with_seconds else 1]
        self.unit = TimeUnit.SECONDS if with_seconds else TimeUnit.MINUTES
        self._iter = croniter(
            expression, _EPOCH, second_at_beginning=with_seconds, max_years_between_matches=50
        )
        self._memo: dict[int, int | None] = {}

    def _wall_next(self, wall_ms: int) -> int | None:
        """First matching wall-clock time strictly after `wall_ms` (both as naive-local milliseconds)."""
        self._iter.set_current(_EPOCH + wall_ms * _MS, force=True)
        try:
            nxt = self._iter.get_next(datetime)
        except CroniterBadDateError:
            return None
        return (nxt - _EPOCH) // _MS

    def _offset(self, instant_ms: int) -> int:
        off = datetime.fromtimestamp(instant_ms // 1000, self.tz).utcoffset()
        return 0 if off is None else off // _MS

    def _second_occurrence(self, wall_ms: int, offset: int) -> bool:
        naive = _EPOCH + wall_ms * _MS
        first = naive.replace(tzinfo=self.tz, fold=0).utcoffset()
        second = naive.replace(tzinfo=self.tz, fold=1).utcoffset()
        assert first is not None and second is not None
        return first > second and second // _MS == offset

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

    def _compute(self, after_ms: int) -> int | None:
        if self.utc:
            return self._wall_next(after_ms)
        t = after_ms
        offset = self._offset(t)
        transitions = 0
        while transitions < _MAX_TRANSITIONS:
            wall = self._wall_next(t + offset)
            if wall is None:
                return None
            instant = wall - offset
            change = self._next_change(t, instant, offset)
            if change is None:
                if self.fixed_hour and self._second_occurrence(wall, offset):
                    # a second occurrence in a repeated hour: skipped without counting, as a repeated hour
                    # may hold thousands of matches (`*/20 * 1 * * *`), and each skip moves forward
                    t = instant
                    continue
                return instant
            transitions += 1
            new_offset = self._offset(change)
            if new_offset > offset:
                # Spring forward: wall times in [change + offset, change + new_offset) do not exist.
                skipped = self._wall_next(change + offset - 1)
                if skipped is not None and skipped < change + new_offset:
                    gap_instant = skipped - offset  # shifted forward by the gap
                    after_gap = self._wall_next(change + new_offset - 1)
                    if after_gap is None or gap_instant <= after_gap - new_offset:
                        return gap_instant
            t, offset = change - 1, new_offset
        return None

    def next_due(self, after_ms: int) -> int | None:
        # Due instants are whole seconds (zone offsets are whole seconds), so every instant of one second
        # has the next due of the second's last millisecond: one memo entry per second, not per ms (a
        # schedule INSERTed at any ms of a second shares croniter's work with the others of that second).
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


@lru_cache(maxsize=65_536)
def cron_evaluator(expression: str, timezone: str) -> CronEvaluator:
    return CronEvaluator(expression, timezone)


#: (expression, zone) pairs validate_cron accepted: many schedules share one, and validating costs
#: croniter's parse and a next-fire computation (~300 µs), a third of a schedule INSERT's handling
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
    n = _fields(expression)
    if n not in (5, 6):
        raise InvalidSchedule(
            "trigger.expression", f"cron needs 5 or 6 fields (second first), got {n}: {expression!r}"
        )
    if not croniter.is_valid(expression, second_at_beginning=n == 6):
        raise InvalidSchedule("trigger.expression", f"invalid cron expression {expression!r}")
    try:
        nxt = cron_evaluator(expression, timezone).next_due(round(datetime.now().timestamp() * 1000))
    except (CroniterBadCronError, CroniterBadDateError, ValueError, KeyError, OverflowError) as exc:
        raise InvalidSchedule(
            "trigger.expression", f"invalid cron expression {expression!r}: {exc}"
        ) from None
    if nxt is None:
        raise InvalidSchedule("trigger.expression", f"cron expression {expression!r} never fires")
