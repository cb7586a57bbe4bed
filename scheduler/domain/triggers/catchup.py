"""What a new owner does about fires that came due while nobody fired them."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.domain.basics import CatchUpPolicy
from scheduler.domain.triggers.base import TimeTrigger

#: EACH never emits more than this many catch-up fires per schedule; older ones are skipped.
MAX_EACH_FIRES = 1_000
#: COALESCE counts the fires it stands for up to this number.
MAX_COUNTED = 100_000


@dataclass(frozen=True, slots=True)
class CatchUpPlan:
    fires: list[tuple[int, int]]  # (due_at, number of other missed dues this fire stands for)
    skipped: int  # missed dues that will never fire (policy, window or EACH cap)
    next_due: int | None  # first due strictly after now and after fired_up_to_ms
    outside_window: int = 0  # of the skipped: older than the catch-up window (for /metrics)


def plan_catch_up(
    trigger: TimeTrigger,
    policy: CatchUpPolicy,
    fired_up_to_ms: int,
    now_ms: int,
    window_ms: int,
) -> CatchUpPlan:
    """Missed dues are those in (fired_up_to_ms, now_ms]; only the ones within `window_ms` of now count."""
    # never before what was fired: the wall clock may have stepped back below the watermark
    next_due = trigger.next_due(max(now_ms, fired_up_to_ms))
    if fired_up_to_ms >= now_ms:
        return CatchUpPlan([], 0, next_due)
    lower = max(fired_up_to_ms, now_ms - window_ms)
    outside = trigger.count_between(fired_up_to_ms, lower, MAX_COUNTED) if lower > fired_up_to_ms else 0
    if policy is CatchUpPolicy.SKIP:
        return CatchUpPlan([], outside + trigger.count_between(lower, now_ms, MAX_COUNTED), next_due, outside)
    if policy is CatchUpPolicy.COALESCE:
        last = trigger.dues_between(lower, now_ms, 1)
        if not last:
            return CatchUpPlan([], outside, next_due, outside)
        within = trigger.count_between(lower, now_ms, MAX_COUNTED)
        return CatchUpPlan([(last[0], within - 1)], outside, next_due, outside)
    dues = trigger.dues_between(lower, now_ms, MAX_EACH_FIRES)
    within = trigger.count_between(lower, now_ms, MAX_COUNTED)
    return CatchUpPlan([(d, 0) for d in dues], outside + within - len(dues), next_due, outside)
