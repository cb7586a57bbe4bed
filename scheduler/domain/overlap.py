"""Overlap policies: what a job of a schedule does while a run of the schedule's earlier jobs is still
active (Temporal's ScheduleOverlapPolicy, Kubernetes' concurrencyPolicy). Pure.

The runs of a schedule are the runs its job queue holds whose id starts with `<tenant>/<name>@` (every job
id of a schedule does, its RUN and BACKFILL jobs' too): the queue is the one partition that hears every
run of the schedule's program (or group), so the check is exact, as the concurrency limit's is.

- ALLOW_ALL (the default, as before policies): launch, whatever runs.
- SKIP: the job is dropped (outcome SKIP, counted), with the run it met.
- BUFFER_ONE: it waits for the runs to end; later triggers fold into it (one job waits at most).
- BUFFER_ALL: each trigger is a job of its own, launched one after the other; at most MAX_BUFFERED wait,
  a trigger past them is dropped (SKIP).
- CANCEL_OTHER: the active runs are asked to stop (a user's stop: SIGTERM, a grace, they end STOPPED);
  the job launches once they ended. Later triggers fold into it meanwhile.
- TERMINATE_OTHER: the same, killed at once (SIGKILL: they end KILLED).

A run that has not started (PENDING: no launcher took it; PREPARING: claimed, not yet running) is ended by
its job queue at once (STOPPED or KILLED "before it started"), as a user's stop of it is. A schedule
without a program has no runs: its fires are messages and never overlap, so it takes no policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from scheduler.domain.basics import plural

#: BUFFER_ALL: at most this many jobs of one schedule wait (Temporal keeps 1,000 buffered starts too)
MAX_BUFFERED = 1_000
#: what a job held by its schedule's overlap policy is blocked by (GET /jobs, `jobs why`)
OVERLAP = "OverlapPolicy"
#: run statuses in which no program runs yet: the job queue ends such a run itself
NOT_STARTED = frozenset({"PENDING", "PREPARING"})


class OverlapPolicy(StrEnum):
    ALLOW_ALL = "ALLOW_ALL"
    SKIP = "SKIP"
    BUFFER_ONE = "BUFFER_ONE"
    BUFFER_ALL = "BUFFER_ALL"
    CANCEL_OTHER = "CANCEL_OTHER"
    TERMINATE_OTHER = "TERMINATE_OTHER"

    @property
    def merges(self) -> bool:
        """Whether a later trigger folds into the schedule's waiting job (all but BUFFER_ALL)."""
        return self is not OverlapPolicy.BUFFER_ALL

    @property
    def stop_action(self) -> str | None:
        """The launcher control request it sends the runs in its way: stop, terminate, or none."""
        return _STOP_ACTIONS.get(self)

    @property
    def ends_as(self) -> str:
        """What a run it stops before it started ends as."""
        return "KILLED" if self is OverlapPolicy.TERMINATE_OTHER else "STOPPED"


_STOP_ACTIONS = {OverlapPolicy.CANCEL_OTHER: "stop", OverlapPolicy.TERMINATE_OTHER: "terminate"}


def parse_policy(value: str | None) -> OverlapPolicy | None:
    return None if value is None else OverlapPolicy(value)


def schedule_runs(active: Mapping[str, str], schedule: str) -> list[str]:
    """The runs of `active` (run id -> status) that are runs of the schedule's jobs, oldest first."""
    prefix = f"{schedule}@"
    return [r for r in active if r.startswith(prefix)]


@dataclass(frozen=True, slots=True)
class Hold:
    """A job its schedule's overlap policy holds back: dropped (skip) or waiting, and the runs to stop."""

    skip: bool
    reason: str
    stop: tuple[str, ...] = ()


def overlap_hold(
    policy: OverlapPolicy | None, schedule: str, active: Mapping[str, str], stopping: Mapping[str, str]
) -> Hold | None:
    """What the policy does with a job of `schedule` now, given the queue's active runs and those already
    asked to stop (run id -> the policy that asked); None: nothing holds it."""
    if policy is None or policy is OverlapPolicy.ALLOW_ALL:
        return None
    runs = schedule_runs(active, schedule)
    if not runs:
        return None
    which = f"run {runs[0]}" if len(runs) == 1 else f"{plural(len(runs), 'run')} ({runs[0]} first)"
    if policy is OverlapPolicy.SKIP:
        return Hold(True, f"overlap SKIP: {which} of the schedule still active")
    if policy.stop_action is None:
        return Hold(False, f"overlap {policy.value}: waits for {which} of the schedule to end")
    asked = "stop" if policy is OverlapPolicy.CANCEL_OTHER else "be killed"
    return Hold(
        False,
        f"overlap {policy.value}: {which} of the schedule asked to {asked}; launches once it ended",
        tuple(r for r in runs if r not in stopping),
    )


def buffer_full(policy: OverlapPolicy | None, waiting: int) -> str | None:
    """BUFFER_ALL: why a new job is dropped when `waiting` jobs of its schedule wait already (None: room)."""
    if policy is OverlapPolicy.BUFFER_ALL and waiting >= MAX_BUFFERED:
        return f"overlap BUFFER_ALL: {plural(waiting, 'job')} of the schedule buffered already (at most {MAX_BUFFERED})"
    return None


def stop_reason(policy: OverlapPolicy, job_id: str) -> str:
    """Why a run was stopped or killed: the policy, and the job that asked."""
    verb = "stopped" if policy is OverlapPolicy.CANCEL_OTHER else "killed"
    return f"{verb} by overlap {policy.value}: job {job_id} of its schedule launches next"
