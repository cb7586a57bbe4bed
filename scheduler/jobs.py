"""The job queue of one program and what happens to it: jobs in, run status in, launches out. Pure.

Keyed by the program the jobs launch (DESIGN.md): the program's status events are applied on the same
partition, in order, so a concurrency or last-run check sees every run that started or ended before it
and no launch races another.

A job is created when a schedule's trigger is satisfied (PENDING_TRIGGER is the trigger progress of the
schedule until then) and waits in PENDING_CONSTRAINT until every constraint is met; it is then
PENDING_LAUNCH for the instant its launch request is produced, and leaves the queue as launched.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from scheduler.codec import constraint_from_avro
from scheduler.constraints import (
    ACTIVE_STATUSES,
    MAX_RECENT_STARTS,
    TERMINAL_STATUSES,
    Decision,
    Outcome,
    PendingTimeout,
    RunState,
    TimeoutAction,
    decide,
)

MAX_LAUNCHED_REMEMBERED = 1_000  # recent job ids: a replayed trigger for one of them launches nothing
MAX_OUTCOMES_REMEMBERED = 50
MAX_EVENTS_PER_JOB = 100


@dataclass
class Job:
    job_id: str
    schedule: str  # schedule id (tenant/name)
    version: int  # schedule version that created it: an UPDATE replaces older versions' jobs
    program: str
    topic: str  # where its launch request goes
    arguments: dict[str, str]
    triggered_at: int
    constraints: list[Any]  # Avro form, as in the schedule
    timeout: dict[str, Any] | None
    events: list[dict[str, Any]] = field(default_factory=list)
    state: str = "PENDING_CONSTRAINT"
    blocked_by: str = ""
    reason: str = ""
    check_at: int | None = None
    merged: list[str] = field(default_factory=list)  # ids of later triggers folded into this job

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class ProgramQueue:
    program: str
    jobs: list[Job] = field(default_factory=list)
    active: dict[str, str] = field(default_factory=dict)  # run id -> status of runs not yet ended
    run_program: dict[str, str] = field(default_factory=dict)  # run id -> program, in a group queue
    last_start: int | None = None
    last_end: int | None = None
    recent_starts: list[int] = field(default_factory=list)
    launched: list[str] = field(default_factory=list)
    outcomes: list[dict[str, Any]] = field(default_factory=list)  # recently skipped / discarded jobs

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProgramQueue:
        return cls(**{**d, "jobs": [Job(**j) for j in d["jobs"]]})

    def runs(self, program: str | None = None) -> RunState:
        """Run state as a job of `program` sees it: its program's runs, and the whole queue's (its group)."""
        active = {
            r: s
            for r, s in self.active.items()
            if program is None or self.run_program.get(r, program) == program
        }
        return RunState(active, self.last_start, self.last_end, tuple(self.recent_starts), len(self.active))

    @property
    def next_check(self) -> int | None:
        dues = [j.check_at for j in self.jobs if j.check_at is not None]
        return min(dues) if dues else None


@dataclass(frozen=True)
class Launch:
    job: Job
    launched_at: int
    forced: bool


def add_job(queue: ProgramQueue, job: Job) -> bool:
    """A satisfied trigger. Merges into the schedule's waiting job if it has one (CDAP); False if a replay."""
    if job.job_id in queue.launched or any(
        job.job_id == j.job_id or job.job_id in j.merged for j in queue.jobs
    ):
        return False
    for waiting in queue.jobs:
        if waiting.schedule == job.schedule and waiting.version == job.version:
            room = MAX_EVENTS_PER_JOB - len(waiting.events)
            waiting.events.extend(job.events[: max(room, 0)])
            waiting.merged.append(job.job_id)
            return True
    queue.jobs.append(job)
    return True


def apply_status(queue: ProgramQueue, run_id: str, status: str, at: int, program: str | None = None) -> None:
    """A program-status event of one of the queue's runs (`program`: which one, in a group queue)."""
    if status in TERMINAL_STATUSES:
        queue.active.pop(run_id, None)
        queue.run_program.pop(run_id, None)
        queue.last_end = at if queue.last_end is None else max(queue.last_end, at)
        return
    if status not in ACTIVE_STATUSES:
        return
    if run_id not in queue.active and run_id not in queue.launched:
        _started(queue, at)  # a run we did not launch (manual, another scheduler) counts too
    queue.active[run_id] = status
    if program is not None and program != queue.program:
        queue.run_program[run_id] = program


def cancel(queue: ProgramQueue, schedule: str, below_version: int | None, reason: str, now: int) -> int:
    """Drop the schedule's pending jobs (of versions below `below_version`, or all)."""
    keep: list[Job] = []
    dropped: list[Job] = []
    for j in queue.jobs:
        (
            dropped
            if j.schedule == schedule and (below_version is None or j.version < below_version)
            else keep
        ).append(j)
    queue.jobs = keep
    for j in dropped:
        _remember(queue, j, "CANCELLED", reason, now)
    return len(dropped)


def check(queue: ProgramQueue, now: int) -> list[Launch]:
    """Evaluate every pending job in arrival order; launch, skip or discard what is decided."""
    launches: list[Launch] = []
    keep: list[Job] = []
    for job in queue.jobs:
        timeout = None
        if job.timeout is not None:
            timeout = PendingTimeout(job.timeout["timeoutMs"], TimeoutAction(job.timeout["action"]))
        constraints = tuple(constraint_from_avro((c[0], c[1])) for c in job.constraints)
        d: Decision = decide(constraints, timeout, job.triggered_at, now, queue.runs(job.program))
        if d.outcome is Outcome.LAUNCH:
            job.state, job.blocked_by, job.reason, job.check_at = "PENDING_LAUNCH", "", d.reason, None
            queue.active[job.job_id] = "PENDING"
            if job.program != queue.program:
                queue.run_program[job.job_id] = job.program
            _started(queue, now)
            queue.launched.extend([job.job_id, *job.merged])
            del queue.launched[:-MAX_LAUNCHED_REMEMBERED]
            launches.append(Launch(job, now, d.forced))
        elif d.outcome is Outcome.WAIT:
            job.blocked_by, job.reason, job.check_at = d.blocked_by, d.reason, d.until
            keep.append(job)
        else:
            _remember(
                queue, job, d.outcome.value, f"{d.blocked_by}: {d.reason}" if d.blocked_by else d.reason, now
            )
    queue.jobs = keep
    return launches


def _started(queue: ProgramQueue, at: int) -> None:
    queue.last_start = at if queue.last_start is None else max(queue.last_start, at)
    queue.recent_starts.append(at)
    del queue.recent_starts[:-MAX_RECENT_STARTS]


def _remember(queue: ProgramQueue, job: Job, outcome: str, reason: str, now: int) -> None:
    queue.outcomes.append(
        {"jobId": job.job_id, "schedule": job.schedule, "outcome": outcome, "reason": reason, "at": now}
    )
    del queue.outcomes[:-MAX_OUTCOMES_REMEMBERED]
