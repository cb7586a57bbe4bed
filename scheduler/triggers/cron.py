"""Cron trigger on croniter, evaluated in an IANA time zone.

croniter costs ~100 µs a call, and many schedules share an expression and a due instant, so one
evaluator per (expression, time zone) memoises next_due by instant.
"""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from scheduler.model import InvalidSchedule, TimeUnit
from scheduler.triggers.base import TimeTrigger

_MEMO_LIMIT = 200_000


def _fields(expression: str) -> int:
    return len(expression.split())


class CronEvaluator(TimeTrigger):
    def __init__(self, expression: str, timezone: str) -> None:
        self.expression = expression
        self.tz = ZoneInfo(timezone)
        with_seconds = _fields(expression) == 6
        self.unit = TimeUnit.SECONDS if with_seconds else TimeUnit.MINUTES
        self._iter = croniter(
            expression,
            datetime.now(self.tz),
            second_at_beginning=with_seconds,
            max_years_between_matches=50,
        )
        self._memo: dict[int, int | None] = {}

    def next_due(self, after_ms: int) -> int | None:
        memo = self._memo
        try:
            return memo[after_ms]
        except KeyError:
            pass
        self._iter.set_current(datetime.fromtimestamp(after_ms / 1000, self.tz), force=True)
        try:
            nxt: int | None = round(self._iter.get_next(float) * 1000)
        except CroniterBadDateError:
            nxt = None
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        memo[after_ms] = nxt
        return nxt


@lru_cache(maxsize=65_536)
def cron_evaluator(expression: str, timezone: str) -> CronEvaluator:
    return CronEvaluator(expression, timezone)


def validate_cron(expression: str, timezone: str) -> None:
    """Raise InvalidSchedule if the expression or the zone is wrong, or if it would never fire."""
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
        evaluator = cron_evaluator(expression, timezone)
        if evaluator.next_due(round(datetime.now().timestamp() * 1000)) is None:
            raise InvalidSchedule("trigger.expression", f"cron expression {expression!r} never fires")
    except (CroniterBadCronError, CroniterBadDateError, ValueError, KeyError, OverflowError) as exc:
        raise InvalidSchedule(
            "trigger.expression", f"invalid cron expression {expression!r}: {exc}"
        ) from None
