"""What a schedule does to the due instants of its time triggers, whatever their kind: bounds (`notBefore`,
`notAfter`), a stable spread (each schedule's instants moved by an offset in [0, spreadMs) derived from its
key: "once a day, at no particular time" without everyone at midnight) and jitter (each instant moved by
[0, jitterMs] derived from the key and the instant: a replay moves it the same way, so its job id holds).

`Shaped` wraps a trigger's evaluator; nothing else changes: the punctuator, catch-up, `/next` and BACKFILL
all read the shaped instants.
"""

from __future__ import annotations

import hashlib

from scheduler.domain.triggers.base import TimeTrigger

MAX_SPREAD_MS = 31 * 86_400_000
MAX_JITTER_MS = 3_600_000


def stable_hash(text: str) -> int:
    """A 64-bit hash that is the same on every worker and after every restart (Python's hash() is not)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def spread_offset(schedule_id: str, spread_ms: int) -> int:
    """The schedule's offset in [0, spread_ms)."""
    return stable_hash(schedule_id) % spread_ms if spread_ms > 0 else 0


def jitter_of(schedule_id: str, nominal_ms: int, jitter_ms: int) -> int:
    """The jitter of one instant of the schedule, in [0, jitter_ms]."""
    return stable_hash(f"{schedule_id}@{nominal_ms}") % (jitter_ms + 1) if jitter_ms > 0 else 0


class Shaped(TimeTrigger):
    """`inner`'s instants, each moved by the spread offset and its jitter, kept within [not_before,
    not_after]. Jitter may reorder two instants closer than it: next_due still returns the first moved
    instant after `after_ms` (it looks at every instant whose moved time may come first)."""

    __slots__ = ("inner", "unit", "schedule_id", "offset", "jitter_ms", "not_before", "not_after")

    def __init__(
        self,
        inner: TimeTrigger,
        schedule_id: str,
        offset: int = 0,
        jitter_ms: int = 0,
        not_before: int | None = None,
        not_after: int | None = None,
    ) -> None:
        self.inner = inner
        self.unit = inner.unit
        self.schedule_id = schedule_id
        self.offset = offset
        self.jitter_ms = jitter_ms
        self.not_before = not_before
        self.not_after = not_after

    def anchored(self, active_since_ms: int) -> Shaped:
        return Shaped(
            self.inner.anchored(active_since_ms),
            self.schedule_id,
            self.offset,
            self.jitter_ms,
            self.not_before,
            self.not_after,
        )

    def moved(self, nominal_ms: int) -> int:
        return nominal_ms + self.offset + jitter_of(self.schedule_id, nominal_ms, self.jitter_ms)

    def next_due(self, after_ms: int) -> int | None:
        if self.not_before is not None:
            after_ms = max(after_ms, self.not_before - 1)
        due = self._next_moved(after_ms)
        if due is None or (self.not_after is not None and due > self.not_after):
            return None
        return due

    def _next_moved(self, after_ms: int) -> int | None:
        inner, offset = self.inner, self.offset
        if not self.jitter_ms:
            nominal = inner.next_due(after_ms - offset)
            return None if nominal is None else nominal + offset
        # an instant may come after `after_ms` once moved if nominal + offset + jitter_ms > after_ms
        best = None
        nominal = inner.next_due(after_ms - offset - self.jitter_ms)
        while nominal is not None and (best is None or nominal + offset < best):
            due = self.moved(nominal)
            if due > after_ms and (best is None or due < best):
                best = due
            nominal = inner.next_due(nominal)
        return best


class Once(TimeTrigger):
    """A single instant."""

    __slots__ = ("unit", "at_ms")

    def __init__(self, at_ms: int) -> None:
        from scheduler.domain.basics import TimeUnit

        self.unit = TimeUnit.SECONDS
        self.at_ms = at_ms

    def next_due(self, after_ms: int) -> int | None:
        return self.at_ms if after_ms < self.at_ms else None
