"""Fixed-frequency trigger (light-scheduler's TaskFrequency): start + k * period."""

from __future__ import annotations

from scheduler.domain.basics import TimeUnit
from scheduler.domain.triggers.base import TimeTrigger


class FrequencyEvaluator(TimeTrigger):
    __slots__ = ("unit", "period_ms", "start_ms")

    def __init__(self, unit: TimeUnit, time: int, start_ms: int | None) -> None:
        self.unit = unit
        self.period_ms = unit.ms * time
        self.start_ms = start_ms

    def anchored(self, active_since_ms: int) -> FrequencyEvaluator:
        if self.start_ms is not None:
            return self
        # light-scheduler: without a start, "the current time converted to the next exact TimeUnit".
        unit_ms = self.unit.ms
        start = (active_since_ms // unit_ms + 1) * unit_ms
        return FrequencyEvaluator(self.unit, self.period_ms // unit_ms, start)

    def next_due(self, after_ms: int) -> int | None:
        start = self.start_ms
        if start is None:
            raise ValueError("frequency trigger without a start must be anchored first")
        if after_ms < start:
            return start
        return start + ((after_ms - start) // self.period_ms + 1) * self.period_ms

    def dues_between(self, after_ms: int, until_ms: int, limit: int) -> list[int]:
        first = self.next_due(after_ms)
        if first is None or first > until_ms or limit <= 0:
            return []
        last = first + (until_ms - first) // self.period_ms * self.period_ms
        lo = max(first, last - (limit - 1) * self.period_ms)
        return list(range(lo, last + 1, self.period_ms))

    def count_between(self, after_ms: int, until_ms: int, cap: int) -> int:
        first = self.next_due(after_ms)
        if first is None or first > until_ms:
            return 0
        return min(cap, (until_ms - first) // self.period_ms + 1)
