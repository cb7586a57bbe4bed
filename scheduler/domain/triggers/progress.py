"""Trigger progress of one schedule: what each trigger of its (possibly composite) tree has seen since
the schedule's last job. Pure; stored as JSON in the trigger-progress table, keyed by schedule.

A leaf is satisfied when its partitions or bytes reach the threshold, or when its program reached the
awaited outcome, or when its time trigger came due; AND needs every child, OR any. When the root is
satisfied the schedule gets a job and its progress starts again from zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler.domain.events import DataEvent, ProgramStatusEvent, SensorEvent
from scheduler.domain.triggers.kinds import CompositeTrigger, ElapsedTrigger, LeafProgress, Reached, Trigger

MAX_EVENTS_KEPT = 100  # events remembered for the job (its launch carries them)


@dataclass
class TriggerProgress:
    version: int  # the schedule version this progress belongs to
    leaves: dict[str, LeafProgress] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    sources: dict[str, int] = field(default_factory=dict)  # source -> highest offset/instant applied
    seq: int = 0  # jobs created so far for this version
    last_job_at: int | None = None
    # the due instant of the time fire that made the last job: a leaf's fire at or before it made no job
    # (two leaves of an OR due at one instant make one job; a leftover of that instant counts for no next)
    last_due: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "leaves": {p: vars(lp) for p, lp in self.leaves.items()},
            "events": self.events,
            "sources": self.sources,
            "seq": self.seq,
            "lastJobAt": self.last_job_at,
            "lastDue": self.last_due,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TriggerProgress:
        return cls(
            d["version"],
            {p: LeafProgress(**lp) for p, lp in d["leaves"].items()},
            d["events"],
            d["sources"],
            d["seq"],
            d.get("lastJobAt"),
            d.get("lastDue"),
        )

    def seen(self, source: str, position: int) -> bool:
        """True if this source already delivered `position` (a replay after a crash)."""
        return self.sources.get(source, -1) >= position

    def mark(self, source: str, position: int) -> None:
        self.sources[source] = max(position, self.sources.get(source, -1))


def find(trigger: Trigger, path: str) -> Trigger | None:
    """The trigger at `path` ("0", "0.1", ...) of a tree."""
    parts = path.split(".")
    if parts[0] != "0":
        return None
    node = trigger
    for part in parts[1:]:
        if not isinstance(node, CompositeTrigger):
            return None
        i = int(part)
        if not 0 <= i < len(node.triggers):
            return None
        node = node.triggers[i]
    return node


def since_job(progress: TriggerProgress, active_since: int) -> int:
    """The instant "since the last job" counts from: the last job, or the schedule's activation."""
    return max(progress.last_job_at or 0, active_since)


def elapsed_due(leaf: ElapsedTrigger, progress: TriggerProgress, path: str, active_since: int) -> int | None:
    """When an elapsed trigger comes due: `ms` after the last job (or activation), or after its last event."""
    return leaf.due(progress.leaves.get(path), since_job(progress, active_since))


def apply(
    trigger: Trigger,
    progress: TriggerProgress,
    path: str,
    event: DataEvent | ProgramStatusEvent | SensorEvent | None,
    summary: dict[str, Any],
    *,
    now: int = 0,
    due: int | None = None,
    active_since: int = 0,
) -> bool:
    """Record what reached the leaf at `path` (event None: its time trigger came due at `due`);
    True if it counted toward the trigger."""
    leaf = find(trigger, path)
    if leaf is None or isinstance(leaf, CompositeTrigger):
        return False
    if event is None and due is not None and progress.last_due is not None and due <= progress.last_due:
        return False  # (its instant made a job already: one instant, one job)
    lp = progress.leaves.setdefault(path, LeafProgress())
    counted = leaf.record(lp, Reached(event, now, due, since_job(progress, active_since)))
    if counted and len(progress.events) < MAX_EVENTS_KEPT:
        progress.events.append(summary)
    return counted


def satisfied(trigger: Trigger, progress: TriggerProgress, path: str = "0") -> bool:
    if isinstance(trigger, CompositeTrigger):
        children = (satisfied(c, progress, f"{path}.{i}") for i, c in enumerate(trigger.triggers))
        return all(children) if trigger.op == "AND" else any(children)
    lp = progress.leaves.get(path)
    return lp is not None and trigger.satisfied(lp)


def describe(trigger: Trigger, progress: TriggerProgress, path: str = "0") -> dict[str, Any]:
    """Progress as a tree for people (HTTP): what each trigger has and what it needs, and in words."""
    out: dict[str, Any] = {"path": path, "satisfied": satisfied(trigger, progress, path)}
    if isinstance(trigger, CompositeTrigger):
        out["op"] = trigger.op
        out["triggers"] = [describe(c, progress, f"{path}.{i}") for i, c in enumerate(trigger.triggers)]
    else:
        out.update(trigger.progress_json(progress.leaves.get(path, LeafProgress()), progress.last_job_at))
    return out


#: the path of a schedule's "fire at least every" watchdog in the punctuator's timers (not a tree path)
SLA_PATH = "sla"


#: a silent schedule's NOT_FIRED alerts back off: at its 1st, 2nd, 4th … late period, then every this many
MAX_ALERT_GAP_PERIODS = 64


def silent_periods(progress: TriggerProgress, active_since: int, every_ms: int, now: int) -> int:
    """How many whole periods of `every_ms` have passed without a job (0: not late)."""
    return max(0, (now - since_job(progress, active_since)) // every_ms)


def alerted_periods(periods: int) -> list[int]:
    """The late periods of a silence of `periods` that raised a NOT_FIRED (1, 2, 4 … 64, 128, 192 …)."""
    out, k = [], 1
    while k <= periods:
        out.append(k)
        k = k * 2 if k < MAX_ALERT_GAP_PERIODS else k + MAX_ALERT_GAP_PERIODS
    return out


def next_alert_due(progress: TriggerProgress, active_since: int, every_ms: int, now: int) -> int:
    """When the watchdog of a schedule silent since its last job (or activation) next raises NOT_FIRED: the
    first period of the back-off after those already passed at `now`."""
    passed = alerted_periods(silent_periods(progress, active_since, every_ms, now))
    k = (
        1
        if not passed
        else passed[-1] * 2
        if passed[-1] < MAX_ALERT_GAP_PERIODS
        else passed[-1] + MAX_ALERT_GAP_PERIODS
    )
    return since_job(progress, active_since) + k * every_ms


def watchdog_due(progress: TriggerProgress, active_since: int, every_ms: int, now: int) -> int:
    """When a watchdog armed at `now` (a start, a takeover, a new job) comes due: the first late period, or,
    in a silence that already raised alerts, the last of them again (raised a second time rather than
    lost, if it was raised before the takeover; never one alert per period missed)."""
    passed = alerted_periods(silent_periods(progress, active_since, every_ms, now))
    return since_job(progress, active_since) + (passed[-1] if passed else 1) * every_ms


def reset(progress: TriggerProgress, now: int = 0, due: int | None = None) -> None:
    """After a job was created (by a time fire due at `due`): everything seen so far belongs to that job."""
    progress.leaves.clear()
    progress.events.clear()
    progress.seq += 1
    progress.last_job_at = now
    if due is not None:
        progress.last_due = max(due, progress.last_due or due)
