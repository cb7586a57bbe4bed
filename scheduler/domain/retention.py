"""When a finished schedule goes: past SCHEDULER_FINISHED_RETENTION_MS after it finished. Pure.

A schedule finishes when its time is over: a one-shot whose instant passed, any schedule of time triggers
none of which comes due again (its `notAfter`, its last instant), or its `notAfter` passed. It is kept — shown
`finished`, its fires and runs readable, counted against its tenant's cap — for the retention period after
that, then deleted by its owner (a DELETE command, `by: retention`, on the version it judged: a schedule
changed meanwhile is not deleted). A schedule that only made its `maxFires` (its triggers would still come due)
and an event-triggered one without `notAfter` are never finished by time: they stay until deleted.
"""

from __future__ import annotations

from scheduler.domain.model import ScheduleState, trigger_leaves


def past_retention(state: ScheduleState, now: int, retention_ms: int) -> bool:
    """Whether `state` finished at least `retention_ms` ago (0: keep finished schedules forever)."""
    if retention_ms <= 0 or not state.finished(now):
        return False
    horizon = now - retention_ms
    s = state.schedule
    if state.updated_at > horizon:
        return False  # (changed within the period: the retention counts from its last change too)
    if s.not_after is not None and s.not_after < now:
        return s.not_after <= horizon
    leaves = trigger_leaves(s.trigger)
    if not leaves or any(leaf.evaluator() is None for _, leaf in leaves):
        return False  # (an event may still come: only notAfter finishes it)
    # finished by time: no instant of its time triggers within the period (its last one is older)
    after = max(horizon, state.active_since - 1)
    return all(not t.dues_between(after, now, 1) for _, t in state.time_leaves())
