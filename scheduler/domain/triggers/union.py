"""Several time specs in one schedule (issue 39 item 5; Temporal's ScheduleSpec): a schedule without a
program whose trigger is an OR of time triggers (crons, frequencies, one-shots, nested ORs of them) fires
at the union of their instants, each instant once, however many of its specs fall due at it. Calendars
the schedule excludes remove instants of the union as of any spec.

The punctuator sees a union as the schedule's one time trigger (path "0"), so such a schedule fires on the
fast path like a single cron, and catch-up, BACKFILL and `/next` read its instants as they read a cron's.
"""

from __future__ import annotations

from scheduler.domain.triggers.base import TimeTrigger


class Union(TimeTrigger):
    """The instants of several time triggers, in order, each once. `parts`: (path in the tree, evaluator)."""

    __slots__ = ("unit", "parts")

    def __init__(self, parts: tuple[tuple[str, TimeTrigger], ...]) -> None:
        assert parts, "a union of no triggers"
        self.parts = parts
        # driven by the finest unit of its specs (a minute cron with a 10 s frequency ticks by the second)
        self.unit = min((t.unit for _, t in parts), key=lambda u: u.ms)

    def next_due(self, after_ms: int) -> int | None:
        best = None
        for _, t in self.parts:
            due = t.next_due(after_ms)
            if due is not None and (best is None or due < best):
                best = due
        return best

    def anchored(self, active_since_ms: int) -> TimeTrigger:
        return Union(tuple((p, t.anchored(active_since_ms)) for p, t in self.parts))
