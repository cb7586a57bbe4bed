"""The job queue of one program and what happens to it: jobs in, run status in, launches out. Pure.

Keyed by the program the jobs launch (DESIGN.md), or by a tenant's concurrency group: the status events
of its programs are applied on the same partition, in order, so a concurrency or last-run check sees every
run that started or ended before it and no launch races another.

A job is created when a schedule's trigger is satisfied (PENDING_TRIGGER is the trigger progress of the
schedule until then) and waits in PENDING_CONSTRAINT until every constraint is met; it is then
PENDING_LAUNCH for the instant its launch request is produced, and leaves the queue as launched.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from scheduler.domain.basics import plural
from scheduler.domain.caps import PENDING_CAP, RUN_CAP
from scheduler.domain.constraints import (
    MAX_RECENT_STARTS,
    ConcurrencyConstraint,
    Constraint,
    Decision,
    Outcome,
    PendingTimeout,
    RunState,
    decide,
)
from scheduler.domain.overlap import (
    NOT_STARTED,
    OVERLAP,
    Hold,
    buffer_full,
    overlap_hold,
    parse_policy,
    stop_reason,
)
from scheduler.domain.runs import RetryPolicy, RunStatus, Verdict, judge, run_id_of

MAX_LAUNCHED_REMEMBERED = 1_000  # recent job ids: a replayed trigger for one of them launches nothing
MAX_OUTCOMES_REMEMBERED = 50
MAX_EVENTS_PER_JOB = 100
MAX_ENDED_REMEMBERED = 1_000  # recently ended run ids: a late status of one of them is stale
RETRY_BACKOFF = "RetryBackoff"  # what a retry waiting for its backoff is blocked by


@dataclass
class Job:
    job_id: str
    schedule: str  # schedule id (tenant/name)
    version: int  # schedule version that created it: an UPDATE replaces older versions' jobs
    program: str
    topic: str  # where its launch request goes
    arguments: dict[str, str]
    triggered_at: int
    constraints: tuple[Constraint, ...]
    timeout: PendingTimeout | None
    events: list[dict[str, Any]] = field(default_factory=list)
    state: str = "PENDING_CONSTRAINT"
    blocked_by: str = ""
    reason: str = ""
    check_at: int | None = None
    merged: list[str] = field(default_factory=list)  # ids of later triggers folded into this job
    attempt: int = 1  # 2 and on: a retry of the job (a run of it FAILED)
    retry: RetryPolicy | None = None
    time_limit_ms: int | None = None  # its run is stopped this long after it started
    not_before: int | None = None  # a retry waits for its backoff until then
    priority: int = 0  # its schedule's: the queue checks higher first, then older first
    deadline_at: int | None = None  # SLA: its run must complete by then (its trigger + completeWithinMs)
    pause_on_failure: int | None = None  # its schedule's: paused after this many jobs in a row FAILED
    overlap: str | None = None  # its schedule's overlap policy (scheduler.domain.overlap; None: ALLOW_ALL)
    forced: bool = False  # waiting for a run cap's slot (PENDING_CAP) after its pending timeout forced it
    backfill: str | None = None  # the backfill that made it (scheduler.domain.backfills): never folded

    @property
    def run_id(self) -> str:
        return run_id_of(self.job_id, self.attempt)

    def to_json(self) -> dict[str, Any]:
        """Its JSON in the job-queue table and on the jobs topic: the constraints in their Avro form."""
        d = dataclasses.asdict(dataclasses.replace(self, constraints=(), timeout=None, retry=None))
        d["constraints"] = [list(c.to_avro()) for c in self.constraints]
        d["timeout"] = None if self.timeout is None else self.timeout.to_json()
        d["retry"] = None if self.retry is None else self.retry.to_json()
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Job:
        timeout, retry = d.get("timeout"), d.get("retry")
        return cls(
            **{
                **_known(cls, d),
                "constraints": tuple(Constraint.from_avro(c) for c in d.get("constraints") or ()),
                "timeout": None if timeout is None else PendingTimeout.from_json(timeout),
                "retry": None if retry is None else RetryPolicy.from_json(retry),
            }
        )


@dataclass
class ProgramQueue:
    program: str
    jobs: list[Job] = field(default_factory=list)
    active: dict[str, str] = field(default_factory=dict)  # run id -> status of runs not yet ended
    run_program: dict[str, str] = field(default_factory=dict)  # run id -> program, in a group queue
    run_slots: dict[str, int] = field(default_factory=dict)  # run id -> the slots it holds, where not 1
    last_start: int | None = None
    last_end: int | None = None
    recent_starts: list[int] = field(default_factory=list)
    launched: list[str] = field(default_factory=list)
    outcomes: list[dict[str, Any]] = field(default_factory=list)  # recently skipped / discarded jobs
    since: dict[str, int] = field(default_factory=dict)  # run id -> when it was launched or first seen
    holders: dict[str, str] = field(default_factory=dict)  # run id -> the launcher whose claim was accepted
    leases: dict[str, int] = field(default_factory=dict)  # run id -> its holder's lease (ms)
    ended: list[str] = field(default_factory=list)  # recently ended run ids, newest last
    retries: dict[str, dict[str, Any]] = field(
        default_factory=dict
    )  # run id -> its job, to retry if it fails
    # job id -> its SLA deadline, until a run of it COMPLETED: {"at", "schedule", "program"}
    deadlines: dict[str, dict[str, Any]] = field(default_factory=dict)
    # pauseOnFailure: run id -> [its schedule, how many failed jobs in a row pause it], while it runs;
    # schedule -> its jobs that FAILED in a row; the pauses to ask for ({"schedule", "note"}), sent then
    # dropped by the job queue agent (a DISABLE on the commands topic)
    watched: dict[str, list[Any]] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    pauses: list[dict[str, str]] = field(default_factory=list)
    # overlap policies: run id -> the policy that asked it to stop, until it ended; the stops to send
    # ({"runId", "program", "action", "reason", "started"}), sent then dropped by the job queue agent
    stopping: dict[str, str] = field(default_factory=dict)
    stops: list[dict[str, Any]] = field(default_factory=list)
    # run caps (scheduler.domain.caps): runs holding a slot, until they end; the asks ({"runId", "priority",
    # "at"}) and releases (run ids) to send the cap queue, sent then dropped by the job queue agent
    capped: list[str] = field(default_factory=list)
    backfills: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> a backfill of a schedule's
    asks: list[dict[str, Any]] = field(default_factory=list)
    releases: list[str] = field(default_factory=list)
    # what happened to jobs while one message was handled, by outcome (JOB_OUTCOMES): counted, never stored
    tally: Counter[str] = field(default_factory=Counter, compare=False)

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(dataclasses.replace(self, jobs=[], tally=Counter()))
        d["jobs"] = [j.to_json() for j in self.jobs]
        del d["tally"]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProgramQueue:
        return cls(**{**_known(cls, d), "jobs": [Job.from_json(j) for j in d["jobs"]]})

    def asking(self) -> list[Job]:
        """The jobs asking a run cap for a slot (PENDING_CAP: their constraints were met, so they count)."""
        return [j for j in self.jobs if j.state == PENDING_CAP]

    def holding(self, asking: list[Job] | None = None) -> dict[str, str]:
        """Run id -> status of the runs that hold their slots: those not yet ended, and those of the jobs
        asking a run cap for a slot (`asking`: them, if the caller has them at hand)."""
        asking = self.asking() if asking is None else asking
        return {**self.active, **{j.run_id: PENDING_CAP for j in asking}} if asking else self.active

    def runs(self, program: str | None = None, asking: list[Job] | None = None) -> RunState:
        """Run state as a job of `program` sees it: its program's runs, and the whole queue's (its group)."""
        asking = self.asking() if asking is None else asking
        holding, slots, programs = self.holding(asking), self.run_slots, self.run_program
        if asking:
            slots = {**slots, **{j.run_id: job_slots(j) for j in asking if job_slots(j) != 1}}
            programs = {**programs, **{j.run_id: j.program for j in asking}}
        active = {r: s for r, s in holding.items() if program is None or programs.get(r, program) == program}
        held = sum(slots.get(r, 1) for r in holding) if slots else len(holding)
        return RunState(
            active,
            self.last_start,
            self.last_end,
            tuple(self.recent_starts),
            held,
            {r: slots[r] for r in active if r in slots},
            bool(slots),
        )

    @property
    def next_check(self) -> int | None:
        dues = [j.check_at for j in self.jobs if j.check_at is not None]
        dues += [d["at"] for d in self.deadlines.values()]
        return min(dues) if dues else None


#: what happens to a job, as counted (scheduler_job_outcomes_total{outcome}): launched (FORCED: by its
#: pending timeout's FORCE_START, whatever its constraints), SKIP and DISCARD (by its constraints or timeout),
#: CANCELLED (an update, disable or delete of its schedule, or a user), RETRIED (a new attempt after FAILED)
JOB_OUTCOMES = ("LAUNCHED", "FORCED", "SKIP", "DISCARD", "CANCELLED", "RETRIED")


def _known(cls: type[Any], d: dict[str, Any]) -> dict[str, Any]:
    """The fields of `d` this version knows: a queue written by a later one (in a rolling upgrade, its
    partition moving back to a worker not yet upgraded) reads without what was added since."""
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = frozenset(f.name for f in dataclasses.fields(cls))
    return d if names.issuperset(d) else {k: v for k, v in d.items() if k in names}


_FIELDS: dict[type[Any], frozenset[str]] = {}


@dataclass(frozen=True)
class Launch:
    job: Job
    launched_at: int
    forced: bool


def add_job(queue: ProgramQueue, job: Job) -> bool:
    """A satisfied trigger. Merges into the schedule's waiting job if it has one (CDAP); False if a replay.
    A job with an SLA deadline has it watched from now on, until a run of it COMPLETED."""
    if job.job_id in queue.launched or any(
        job.job_id == j.job_id or job.job_id in j.merged for j in queue.jobs
    ):
        return False
    policy = parse_policy(job.overlap)
    full = buffer_full(policy, sum(j.schedule == job.schedule for j in queue.jobs))
    if full is not None:
        _remember(queue, job, "SKIP", full, job.triggered_at)
        return True
    for waiting in queue.jobs if job.backfill is None and (policy is None or policy.merges) else ():
        if (
            waiting.schedule == job.schedule
            and waiting.version == job.version
            and waiting.attempt == 1
            and waiting.backfill is None
        ):
            room = MAX_EVENTS_PER_JOB - len(waiting.events)
            waiting.events.extend(job.events[: max(room, 0)])
            waiting.merged.append(job.job_id)
            return True
    queue.jobs.append(job)
    if job.deadline_at is not None and job.attempt == 1:
        queue.deadlines[job.job_id] = {
            "at": job.deadline_at,
            "withinMs": job.deadline_at - job.triggered_at,
            "schedule": job.schedule,
            "program": job.program,
        }
    return True


def apply_status(
    queue: ProgramQueue,
    run_id: str,
    status: str,
    at: int,
    program: str | None = None,
    launcher: str = "",
    lease_ms: int | None = None,
) -> tuple[Verdict, str]:
    """A transition of one of the queue's runs (`program`: which one, in a group queue), already judged
    by the run state machine against the run's record (scheduler.domain.runs.judge, in the job queue of
    its program): counted here unless it is stale (the run ended), a repeat, or from a launcher that
    does not hold the run."""
    if status not in RunStatus.__members__:
        return Verdict.REFUSED, f"unknown run status {status!r}"
    new = RunStatus(status)
    current = queue.active.get(run_id)
    verdict, why = judge(
        None if current is None else RunStatus(current),
        new,
        ended=run_id in queue.ended,
        holder=queue.holders.get(run_id, ""),
        launcher=launcher,
        judged=True,
    )
    if verdict is not Verdict.ACCEPTED:
        return verdict, why
    if new is RunStatus.COMPLETED:
        queue.deadlines.pop(job_of_run(run_id), None)  # its SLA is met
    if new.terminal:
        for runs in (
            queue.active,
            queue.run_program,
            queue.run_slots,
            queue.stopping,
            queue.since,
            queue.holders,
            queue.leases,
        ):
            runs.pop(run_id, None)  # type: ignore[attr-defined]
        queue.ended.append(run_id)
        del queue.ended[:-MAX_ENDED_REMEMBERED]
        if run_id in queue.capped:  # (its run cap's slot goes back)
            queue.capped.remove(run_id)
            queue.releases.append(run_id)
        queue.last_end = at if queue.last_end is None else max(queue.last_end, at)
        retried = queue.retries.pop(run_id, None)
        again = retried is not None and _retry(queue, Job.from_json(retried), new, at)
        _count_failure(queue, run_id, new, again)
        _backfill_run_ended(queue, run_id, new, again)
        return Verdict.ACCEPTED, ""
    if current is None:
        queue.since[run_id] = at
        if run_id not in queue.launched:
            _started(queue, at)  # a run we did not launch (manual, another scheduler) counts too
    queue.active[run_id] = new.value
    if new is RunStatus.PENDING:  # launched again: nobody holds it, and it waits from now
        queue.holders.pop(run_id, None)
        queue.leases.pop(run_id, None)
        queue.since[run_id] = at
    if launcher:
        queue.holders[run_id] = launcher
        if lease_ms:
            queue.leases[run_id] = lease_ms
    if program is not None and program != queue.program:
        queue.run_program[run_id] = program
    return Verdict.ACCEPTED, ""


def job_slots(job: Job) -> int:
    """The slots of its concurrency limit a run of the job holds (its schedule's `slots`; 1 by default)."""
    for c in job.constraints:
        if isinstance(c, ConcurrencyConstraint):
            return c.slots
    return 1


def job_of_run(run_id: str) -> str:
    """The job a run is an attempt of (run ids: the job id, `~<attempt>` from the second attempt on)."""
    return run_id.split("~", 1)[0]


def _count_failure(queue: ProgramQueue, run_id: str, ended: RunStatus, retried: bool) -> None:
    """pauseOnFailure: a watched run ended. A job that COMPLETED ends its schedule's run of failures; one
    that FAILED with no attempt left adds to it, and the run reaching its bound asks for a pause."""
    watched = queue.watched.pop(run_id, None)
    if watched is None or retried:
        return
    schedule, bound = watched
    if ended is RunStatus.COMPLETED:
        queue.failures.pop(schedule, None)
    elif ended is RunStatus.FAILED:
        failed = queue.failures[schedule] = queue.failures.get(schedule, 0) + 1
        if failed >= bound:
            del queue.failures[schedule]
            note = f"paused after {plural(failed, 'job')} in a row FAILED (pauseOnFailure; the last run: {run_id})"
            queue.pauses.append({"schedule": schedule, "note": note})


def _retry(queue: ProgramQueue, job: Job, ended: RunStatus, at: int) -> bool:
    """A run of `job` ended: if it FAILED and its retry policy allows, its next attempt waits in the queue
    for its backoff, then for the schedule's constraints like any job (True)."""
    if job.retry is None or not job.retry.retries(job.attempt, ended):
        return False
    attempt = job.attempt + 1
    not_before = at + job.retry.delay_ms(attempt)
    queue.jobs.append(
        dataclasses.replace(
            job,
            attempt=attempt,
            not_before=not_before,
            triggered_at=not_before,  # (its constraints count from the end of its backoff)
            state="PENDING_CONSTRAINT",
            blocked_by="",
            reason="",
            check_at=None,
            merged=[],
        )
    )
    queue.tally["RETRIED"] += 1
    return True


def cancel(
    queue: ProgramQueue,
    schedule: str,
    below_version: int | None,
    reason: str,
    now: int,
    job_id: str | None = None,
) -> int:
    """Drop the schedule's pending jobs (of versions below `below_version`, or all; or the one `job_id`)."""
    keep: list[Job] = []
    dropped: list[Job] = []
    for j in queue.jobs:
        (
            dropped
            if j.schedule == schedule
            and (below_version is None or j.version < below_version)
            and (job_id is None or j.job_id == job_id)
            else keep
        ).append(j)
    queue.jobs = keep
    for j in dropped:
        _remember(queue, j, "CANCELLED", reason, now)
        if j.state == PENDING_CAP:
            queue.releases.append(j.run_id)  # (its ask withdrawn, or the slot granted meanwhile back)
    return len(dropped)


def priority_order(priority: int, triggered_at: int) -> tuple[int, int]:
    """A job's place in the order its queue checks jobs in: highest priority first, then oldest trigger."""
    return (-priority, triggered_at)


def by_priority(jobs: list[Job]) -> list[Job]:
    """The order a queue checks its jobs in: highest priority first; ties, oldest trigger first, then
    arrival."""
    return sorted(jobs, key=lambda j: priority_order(j.priority, j.triggered_at))


def check(queue: ProgramQueue, now: int, capped: bool = False) -> list[Launch]:
    """Evaluate every pending job, highest priority first (ties: oldest first); launch, skip or discard
    what is decided. A job held by a concurrency limit says how many jobs of higher priority wait too.
    `capped` (run caps are set: scheduler.domain.caps): a job to launch asks the cap queue for a slot
    instead, and launches when it is granted (slot_granted)."""
    launches: list[Launch] = []
    keep: list[Job] = []
    ahead: Counter[int] = Counter()  # priority -> jobs of it still waiting, as the walk goes
    asking = queue.asking()  # (once a walk, kept up as it goes: not again for each job)
    for job in by_priority(queue.jobs):
        if job.state == PENDING_CAP:
            keep.append(job)  # (its constraints were met: it waits for its grant alone)
            continue
        if job.not_before is not None and now < job.not_before:
            assert job.retry is not None
            job.blocked_by, job.check_at = RETRY_BACKOFF, job.not_before
            job.reason = (
                f"attempt {job.attempt} of {job.retry.max_attempts} after a backoff of "
                f"{job.retry.delay_ms(job.attempt) / 1000:g} s"
            )
            keep.append(job)
            continue
        if (held := _held_by_overlap(queue, job, now, asking)) is not None:
            if not held.skip:
                keep.append(job)
            continue
        runs = queue.runs(job.program, asking)
        d: Decision = decide(job.constraints, job.timeout, job.triggered_at, now, runs)
        if d.outcome is Outcome.LAUNCH and capped:
            job.state, job.blocked_by, job.check_at = PENDING_CAP, RUN_CAP, None
            job.reason, job.forced = "asked the run caps for a slot", d.forced
            queue.asks.append({"runId": job.run_id, "priority": job.priority, "at": now})
            asking.append(job)
            keep.append(job)
        elif d.outcome is Outcome.LAUNCH:
            launches.append(_launch(queue, job, now, d.forced))
        elif d.outcome is Outcome.WAIT:
            job.blocked_by, job.reason, job.check_at = d.blocked_by, d.reason, d.until
            higher = sum(n for p, n in ahead.items() if p > job.priority)
            if higher and d.blocked_by == "ConcurrencyConstraint":
                job.reason += f"; deferred: {plural(higher, 'job')} of higher priority {'waits' if higher == 1 else 'wait'} before it"
            ahead[job.priority] += 1
            keep.append(job)
        else:
            _remember(
                queue, job, d.outcome.value, f"{d.blocked_by}: {d.reason}" if d.blocked_by else d.reason, now
            )
    queue.jobs = keep
    return launches


def _launch(queue: ProgramQueue, job: Job, now: int, forced: bool) -> Launch:
    """The job leaves the queue, launched: its run is PENDING (holding its slots) from now."""
    job.state, job.blocked_by, job.check_at = "PENDING_LAUNCH", "", None
    job.reason = "pending timeout: forced start" if forced else ""
    run_id = job.run_id
    queue.active[run_id] = "PENDING"
    queue.since[run_id] = now
    if job.program != queue.program:
        queue.run_program[run_id] = job.program
    if (slots := job_slots(job)) != 1:
        queue.run_slots[run_id] = slots
    if job.retry is not None and job.attempt < job.retry.max_attempts:
        queue.retries[run_id] = job.to_json()
    if job.pause_on_failure is not None:
        queue.watched[run_id] = [job.schedule, job.pause_on_failure]
    _started(queue, now)
    queue.launched.extend([job.job_id, *job.merged])
    del queue.launched[:-MAX_LAUNCHED_REMEMBERED]
    queue.tally["FORCED" if forced else "LAUNCHED"] += 1
    if job.backfill is not None and (bf := queue.backfills.get(job.backfill)) is not None:
        bf["running"].append(run_id)
        bf["counts"]["launched"] += job.attempt == 1
    return Launch(job, now, forced)


def _backfill_run_ended(queue: ProgramQueue, run_id: str, ended: RunStatus, retried: bool) -> None:
    """A backfill's run ended: counted completed, or failed (unless it is tried again: its next attempt's
    end counts)."""
    for bf in queue.backfills.values():
        if run_id in bf["running"]:
            bf["running"].remove(run_id)
            if ended is RunStatus.COMPLETED:
                bf["counts"]["completed"] += 1
            elif not retried:
                bf["counts"]["failed"] += 1
            return


def slot_granted(queue: ProgramQueue, run_id: str, now: int) -> Launch | None:
    """The cap queue granted the slot a job asked for: it launches (its run holds the slot until it ends).
    A grant for no job asking (cancelled meanwhile, or a repeat) gives the slot back."""
    job = next((j for j in queue.jobs if j.state == PENDING_CAP and j.run_id == run_id), None)
    if job is None:
        if run_id not in queue.capped:
            queue.releases.append(run_id)
        return None
    queue.jobs.remove(job)
    queue.capped.append(run_id)
    return _launch(queue, job, now, job.forced)


def slot_queued(queue: ProgramQueue, run_id: str, reason: str) -> None:
    """The cap queue keeps a job's ask waiting: why, as the job says it (GET /jobs, `jobs why`)."""
    for j in queue.jobs:
        if j.state == PENDING_CAP and j.run_id == run_id:
            j.reason = reason


def _held_by_overlap(queue: ProgramQueue, job: Job, now: int, asking: list[Job]) -> Hold | None:
    """How the job's overlap policy holds it back (dropped, or waiting with the runs in its way asked to
    stop), unless its pending timeout is up (then its timeout decides, as for its constraints)."""
    policy = parse_policy(job.overlap)
    if policy is None or (job.timeout is not None and now >= job.triggered_at + job.timeout.timeout_ms):
        return None
    hold = overlap_hold(policy, job.schedule, queue.holding(asking), queue.stopping)
    if hold is None or hold.skip:
        if hold is not None:
            _remember(queue, job, "SKIP", hold.reason, now)
        return hold
    job.blocked_by, job.reason = OVERLAP, hold.reason
    job.check_at = None if job.timeout is None else job.triggered_at + job.timeout.timeout_ms
    for run_id in hold.stop:
        if run_id not in queue.active:
            continue  # (a job asking a run cap for its slot: no run to stop yet; this job waits for it)
        queue.stopping[run_id] = policy.value
        queue.stops.append(
            {
                "runId": run_id,
                "program": queue.run_program.get(run_id, queue.program),
                "action": policy.stop_action,
                "endsAs": policy.ends_as,
                "reason": stop_reason(policy, job.job_id),
                "started": queue.active[run_id] not in NOT_STARTED,
            }
        )
    return hold


def _started(queue: ProgramQueue, at: int) -> None:
    queue.last_start = at if queue.last_start is None else max(queue.last_start, at)
    queue.recent_starts.append(at)
    del queue.recent_starts[:-MAX_RECENT_STARTS]


def note_outcome(queue: ProgramQueue, outcome: dict[str, Any]) -> None:
    """Keep something that happened to one of the queue's schedules among its recent outcomes (once)."""
    if outcome in queue.outcomes:
        return  # (a message handled again)
    queue.outcomes.append(outcome)
    del queue.outcomes[:-MAX_OUTCOMES_REMEMBERED]


def _remember(queue: ProgramQueue, job: Job, outcome: str, reason: str, now: int) -> None:
    queue.tally[outcome] += 1
    if job.backfill is not None and (bf := queue.backfills.get(job.backfill)) is not None:
        bf["counts"]["cancelled" if outcome == "CANCELLED" else "skipped"] += 1
    queue.deadlines.pop(job.job_id, None)  # dropped on purpose (skipped, discarded, cancelled): not a miss
    queue.outcomes.append(
        {"jobId": job.job_id, "schedule": job.schedule, "outcome": outcome, "reason": reason, "at": now}
    )
    del queue.outcomes[:-MAX_OUTCOMES_REMEMBERED]
