"""The interface every time trigger implements."""

from __future__ import annotations

from abc import ABC, abstractmethod

from scheduler.domain.basics import TimeUnit


class TimeTrigger(ABC):
    """Due instants of one trigger, as integer epoch milliseconds."""

    #: which per-time-unit punctuator timer drives this trigger
    unit: TimeUnit

    @abstractmethod
    def next_due(self, after_ms: int) -> int | None:
        """The first due instant strictly after `after_ms`, or None if it never fires again."""

    def anchored(self, active_since_ms: int) -> TimeTrigger:
        """This trigger for a schedule that became active at `active_since_ms` (frequency needs it)."""
        return self

    def dues_between(self, after_ms: int, until_ms: int, limit: int) -> list[int]:
        """Due instants in (after_ms, until_ms], the latest `limit` of them, oldest first."""
        dues: list[int] = []
        t = self.next_due(after_ms)
        while t is not None and t <= until_ms:
            dues.append(t)
            if len(dues) > limit:
                del dues[0]
            t = self.next_due(t)
        return dues

    def count_between(self, after_ms: int, until_ms: int, cap: int) -> int:
        """How many due instants lie in (after_ms, until_ms], counting at most `cap`."""
        n, t = 0, self.next_due(after_ms)
        while t is not None and t <= until_ms and n < cap:
            n += 1
            t = self.next_due(t)
        return n
