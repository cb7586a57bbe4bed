"""What the HTTP handlers answer about jobs, programs, runs, sensors and backfills: one pydantic model per
response body, as scheduler.http.responses (whose `Answer` they share) does for the rest."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, RootModel

from scheduler.domain.runs import RunStatus
from scheduler.http.responses import Answer, Ms
from scheduler.worker.programs import ProgramSpec


class Job(Answer):
    jobId: str
    schedule: str
    program: str
    queue: str | None = Field(
        None, description="the job queue it waits in: its program's, or its concurrency group's (group:…)"
    )
    state: str = Field(
        description="PENDING_CONSTRAINT, PENDING_CAP (waiting for a run caps' slot) or PENDING_LAUNCH"
    )
    triggeredAt: Ms | None = None
    arguments: dict[str, str] | None = None
    events: int | None = Field(None, description="how many events fired it")
    blockedBy: str | None = Field(None, description="the constraint holding it")
    reason: str | None = None
    checkAt: Ms | None = Field(None, description="next check; null: when a run of the program changes")
    attempt: int | None = Field(None, description="1; 2 and on: a retry of a job whose run FAILED")
    runId: str | None = Field(None, description="the run it will be: its job id, `~<attempt>` for a retry")
    priority: int | None = Field(None, description="its schedule's: its queue checks higher first")
    deadlineAt: Ms | None = Field(None, description="SLA: its run must complete by then (completeWithinMs)")


class Jobs(Answer):
    jobs: list[Job] | None = None
    recent: list[dict[str, Any]] | None = Field(
        None, description="SKIP, DISCARD, CANCELLED outcomes (a bounded list per program; first page only)"
    )
    next: str | None = Field(None, description="the cursor of the next page of jobs (null: the last page)")


class Programs(RootModel[dict[str, ProgramSpec]]):
    pass


class ProgramAccepted(Answer):
    program: str


class Run(Answer):
    run_id: str
    program: str
    status: RunStatus
    job_id: str | None = None
    schedule: str | None = None
    arguments: dict[str, str] | None = None
    created_at: int | None = None
    triggered_at: Ms | None = None
    started_at: Ms | None = None
    running_at: Ms | None = None
    ended_at: Ms | None = None
    error: str | None = None
    transitions: list[list[Any]] | None = None
    launcher: str | None = Field(None, description="the launcher that holds (held) it")
    attempt: int | None = Field(
        None, description="1 for the first run of its job, 2 for its first retry, ..."
    )
    program_status: str | None = Field(None, description="seed 004's user-facing status of its state")
    logs_url: str | None = Field(
        None, description="where its launcher serves its output (GET .../runs/{id}/logs reads it there)"
    )


class RunLogs(Answer):
    runId: str
    program: str
    status: RunStatus = Field(description="the run's state as its record says")
    launcher: str | None = Field(None, description="the launcher that ran it (keeps its output)")
    text: str = Field(description="its output from `offset` on (stdout and stderr, secrets masked)")
    offset: int = Field(description="where `text` begins in all the run printed (>= the offset asked)")
    next: int = Field(description="the offset to ask next")
    dropped: int = Field(description="bytes after the offset asked that are no longer kept (rotated out)")
    size: int = Field(description="bytes the run printed so far")
    complete: bool = Field(description="the run ended: no more output will come")
    reason: str | None = Field(None, description="why there is no output to show, when there is none")


class SensorStatus(Answer):
    sensor: str = Field(description="the sensor's program id")
    intervalMs: int
    cursor: str | None = Field(None, description="what its last answer kept for the next evaluation")
    evaluatedAt: Ms | None = Field(None, description="when its last evaluation began")
    nextAt: Ms | None = Field(None, description="when the next one is due")
    tookMs: int
    outcome: str = Field(description="FIRED, NOTHING_NEW, FAILED, or NEVER_EVALUATED")
    reason: str = Field(description="why it failed, or the sensor's own reason")
    runKeys: list[str] = Field(description="what its last fire named")
    evaluations: int
    fires: int
    failures: int


class SensorList(Answer):
    sensors: list[SensorStatus]


class Runs(Answer):
    program: str
    runs: list[Run]


class ActiveRun(Answer):
    runId: str
    status: str


class ProgramStatus(Answer):
    program: str
    status: str = Field(
        description="the user-facing status (seed 004) of its newest active run, else its last run's end, "
        "or NEVER_RUN (a program registered but never run; an unknown program is a 404)"
    )
    activeRuns: list[ActiveRun]
    lastRun: Run | None


class JobCancelAccepted(Answer):
    jobId: str = Field(description="the job cancelled (the one an id merged into, for a merged trigger)")
    queue: str = Field(description="its job queue: its program's, or its concurrency group's")
    action: Literal["CANCEL"]


class Backfill(Answer):
    """A backfill object: what it was asked (`from`, `to`: its range, epoch ms), its status, its progress."""

    id: str
    key: str = Field(description="its schedule")
    status: Literal["RUNNING", "COMPLETED", "CANCELLED"]
    reprocess: str
    order: str
    maxConcurrent: int
    overlap: str | None = None
    by: str = Field(description="who started it")
    createdAt: Ms
    endedAt: Ms | None = None
    total: int = Field(description="instants chosen")
    pending: int = Field(description="instants not launched yet")
    inFlight: int = Field(description="its jobs waiting and runs not ended")
    launched: int
    completed: int = Field(description="instants whose run COMPLETED")
    failed: int = Field(description="instants whose run ended otherwise (after its retries)")
    skipped: int = Field(description="jobs dropped by a constraint, the overlap policy or a timeout")
    cancelled: int = Field(description="instants and jobs cancelled")
    next: Ms | None = Field(None, description="the instant it launches next")
    cancelReason: str | None = None


class Backfills(Answer):
    backfills: list[Backfill] = Field(description="newest first; the last 20 ended ones are kept")


class BackfillStarted(Answer):
    id: str | None = Field(description="null for a dry run")
    key: str
    dryRun: bool
    instants: int = Field(description="chosen to launch")
    leftOut: int = Field(description="in the range, left out by `reprocess` (they ran already)")
    first: Ms | None
    last: Ms | None
    next: list[Ms] = Field(description="the first instants, in launch order (at most 100)")


class RunActionAccepted(Answer):
    runId: str
    action: Literal["stop", "suspend", "resume"]


#: every response model here, under the name the OpenAPI document gives its schema
MODELS: tuple[type[BaseModel], ...] = (
    JobCancelAccepted,
    Backfill,
    Backfills,
    BackfillStarted,
    Job,
    Jobs,
    Programs,
    ProgramAccepted,
    Run,
    RunLogs,
    SensorStatus,
    SensorList,
    Runs,
    ProgramStatus,
    RunActionAccepted,
)
