"""The instants a schedule's time triggers make it fire: `/next`, dry runs, the admin page and backfills.

A plain time trigger fires at each of its dues. An AND/OR tree fires when it is satisfied, as the trigger
agent evaluates it: a leaf counts once it came due after the tree's last job, AND needs every child, OR
any, and the job starts everything again from zero. So, from the last job at L, the tree next fires at
the first instant its children allow: a leaf at its first due after L, an AND at the latest of its
children's, an OR at the earliest. One instant makes one job, however many leaves fall due at it (the
agent ignores a leaf's fire at or before the instant of its last time job: trigger progress `lastDue`).

A leaf that waits for events (data, a program's runs, quiet after an event) counts only if the schedule's
trigger progress says it already did: an AND that waits for one lists nothing until then; an OR lists
what its time leaves make it fire. A leaf "quiet for ms" with nothing to watch comes due `ms` after the
last job. Calendars a schedule excludes remove a leaf's due (the punctuator does not fire it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from scheduler.domain.model import ScheduleState, trigger_leaves
from scheduler.domain.triggers.base import TimeTrigger
from scheduler.domain.triggers.kinds import CompositeTrigger, ElapsedTrigger, Trigger
from scheduler.domain.triggers.progress import TriggerProgress, find, since_job

#: dues one call looks past because calendars exclude them (beyond it: no more instants listed)
MAX_EXCLUDED_LOOKAHEAD = 10_000
#: excluded instants one walk lists (the first ones)
MAX_SKIPPED = 1000
#: an excluded instant, and the calendar that holds its day
Skipped = tuple[int, str]


@dataclass
class _Walk:
    """One walk of a schedule's instants: its time leaves by path, what excludes a due, what it skipped."""

    leaves: dict[str, TimeTrigger]
    excluded: Callable[[int], str | None] | None
    skipped: list[Skipped]
    budget: int = MAX_EXCLUDED_LOOKAHEAD
    ignore_events: bool = False
    seen: set[int] = field(default_factory=set)

    def leaf_due(self, path: str, after: int) -> int | None:
        """The leaf's first due after `after` that no calendar excludes."""
        evaluator = self.leaves[path]
        due = evaluator.next_due(after)
        while due is not None and self.excluded is not None:
            calendar = self.excluded(due)
            if calendar is None:
                break
            if due not in self.seen and len(self.seen) < MAX_SKIPPED:
                self.seen.add(due)
                self.skipped.append((due, calendar))
            self.budget -= 1
            if self.budget <= 0:
                return None
            due = evaluator.next_due(due)
        return due


#: a leaf a backfill leaves out (it waits for events): neither satisfies an OR nor holds an AND
_IGNORED = -1


def _next(
    walk: _Walk, trigger: Trigger, path: str, last: int, after: int, counted: frozenset[str]
) -> int | None:
    """When the (sub)tree at `path` is first satisfied after the job at `last`, after `after` (`counted`:
    the leaves that already counted since that job; None: never, as far as time tells; _IGNORED: left out)."""
    if path in walk.leaves and path not in counted:  # (a time leaf; or a plain schedule's union at "0")
        return walk.leaf_due(path, after)
    if isinstance(trigger, CompositeTrigger):
        dues = [
            _next(walk, child, f"{path}.{i}", last, after, counted)
            for i, child in enumerate(trigger.triggers)
        ]
        known = [d for d in dues if d != _IGNORED]
        if not known:
            return _IGNORED
        if trigger.op == "AND":
            return None if None in known else max(d for d in known if d is not None)
        times = [d for d in known if d is not None]
        return min(times) if times else None
    if path in counted:
        return after  # (it already counted: no later than any due of the others)
    if isinstance(trigger, ElapsedTrigger) and trigger.dataset is None and trigger.program is None:
        return max(last + trigger.ms, after + 1)
    return _IGNORED if walk.ignore_events else None  # (it waits for events)


def fire_instants(
    state: ScheduleState,
    after: int,
    *,
    excluded: Callable[[int], str | None] | None = None,
    skipped: list[Skipped] | None = None,
    counted: frozenset[str] = frozenset(),
    last_job: int | None = None,
    ignore_events: bool = False,
) -> Iterator[int]:
    """The instants after `after` the schedule's time triggers make it fire, in order, as long as there are
    (an iterator: take what you need). `counted`: the leaves of a tree that already counted since its last
    job (at `last_job`, default: `after`); `excluded`: instant -> the calendar that removes it (those
    instants are appended to `skipped`); `ignore_events`: a leaf waiting for events is left out (a backfill:
    AND(a cron, new data) backfills the cron's instants) rather than never satisfied."""
    walk = _Walk(
        dict(state.time_leaves()),
        excluded,
        skipped if skipped is not None else [],
        ignore_events=ignore_events,
    )
    trigger = state.schedule.trigger
    last = after if last_job is None else last_job
    while True:
        due = _next(walk, trigger, "0", last, after, counted)
        if due is None or due == _IGNORED or walk.budget <= 0:
            return
        if due > after:  # (at or before it: what already counted satisfies it, the agent makes that job)
            yield due
        last = after = max(due, after)
        counted = frozenset()


def upcoming(
    state: ScheduleState,
    now: int,
    n: int,
    *,
    excluded: Callable[[int], str | None] | None = None,
    progress: TriggerProgress | None = None,
) -> tuple[list[int], list[Skipped]]:
    """The next `n` instants the schedule fires at from now (as its trigger progress stands, when known: a
    tree's leaves that already counted; no more than a limited schedule has fires left), and the instants
    calendars removed on the way."""
    skipped: list[Skipped] = []
    left = state.fires_left
    if left is not None:
        n = min(n, left)  # (a limited schedule: no more than it has fires left)
    after = max(now, state.active_since) - 1
    counted: frozenset[str] = frozenset()
    last_job = None
    if progress is not None and isinstance(state.schedule.trigger, CompositeTrigger):
        tree = state.schedule.trigger
        counted = frozenset(
            path
            for path, lp in progress.leaves.items()
            if (leaf := find(tree, path)) is not None
            and not isinstance(leaf, CompositeTrigger)
            and leaf.satisfied(lp)
        )
        last_job = since_job(progress, state.active_since)
    walk = fire_instants(state, after, excluded=excluded, skipped=skipped, counted=counted, last_job=last_job)
    return list(islice(walk, n)), skipped


def spec_texts(state: ScheduleState, instants: list[int]) -> dict[str, Any]:
    """An AND/OR's `/next` extras: `specs`, per instant the paths of the time triggers due at it (which spec
    an instant comes from; two specs due at one instant are both named, and it still fires once), and
    `specTexts`, each time trigger's path -> its words."""
    leaves = state.spec_leaves()
    words = {path: leaf.describe() for path, leaf in trigger_leaves(state.schedule.trigger)}
    return {
        "specs": [[path for path, t in leaves if t.next_due(at - 1) == at] for at in instants],
        "specTexts": {path: words[path] for path, _ in leaves},
    }
