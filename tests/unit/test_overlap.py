"""Overlap policies in the job queue (issue 39 item 1): what a schedule's job does while a run of its earlier
jobs is active. The queue is driven as the agent drives it: jobs in, run statuses in, check."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.domain.constraints import ConcurrencyConstraint, PendingTimeout, TimeoutAction
from scheduler.domain.jobs import Job, ProgramQueue, add_job, apply_status, check
from scheduler.domain.model import InvalidSchedule, ProgramId, Schedule, ScheduleKey
from scheduler.domain.overlap import MAX_BUFFERED, OVERLAP, OverlapPolicy, schedule_runs
from scheduler.domain.triggers.kinds import FrequencyTrigger, TimeUnit
from tests.unit.test_jobs import PROGRAM, SCHEDULE, T0, job

pytestmark = pytest.mark.unit


def of(policy: OverlapPolicy | None, job_id: str, at: int = T0, **kw: object) -> Job:
    return replace(job(job_id, triggered_at=at), overlap=None if policy is None else policy.value, **kw)  # type: ignore[arg-type]


def running(policy: OverlapPolicy | None) -> ProgramQueue:
    """A queue whose first job of the schedule launched and is RUNNING."""
    q = ProgramQueue(PROGRAM)
    add_job(q, of(policy, f"{SCHEDULE}@v1.1"))
    [launch] = check(q, T0)
    apply_status(q, launch.job.run_id, "RUNNING", T0 + 10)
    return q


def ended(q: ProgramQueue, run_id: str, status: str = "COMPLETED", at: int = T0 + 5_000) -> None:
    apply_status(q, run_id, status, at)


def test_without_a_policy_or_with_allow_all_runs_overlap_as_before() -> None:
    for policy in (None, OverlapPolicy.ALLOW_ALL):
        q = running(policy)
        add_job(q, of(policy, f"{SCHEDULE}@v1.2", T0 + 1_000))
        assert [launch.job.job_id for launch in check(q, T0 + 1_000)] == [f"{SCHEDULE}@v1.2"]
        assert len(schedule_runs(q.active, SCHEDULE)) == 2


def test_skip_drops_a_job_while_a_run_of_the_schedule_is_active_and_counts_it() -> None:
    q = running(OverlapPolicy.SKIP)
    add_job(q, of(OverlapPolicy.SKIP, f"{SCHEDULE}@v1.2", T0 + 1_000))
    assert check(q, T0 + 1_000) == [] and q.jobs == []
    [outcome] = q.outcomes
    assert outcome["outcome"] == "SKIP" and q.tally["SKIP"] == 1
    assert outcome["reason"] == f"overlap SKIP: run {SCHEDULE}@v1.1 of the schedule still active"
    ended(q, f"{SCHEDULE}@v1.1")
    add_job(q, of(OverlapPolicy.SKIP, f"{SCHEDULE}@v1.3", T0 + 6_000))
    assert [launch.job.job_id for launch in check(q, T0 + 6_000)] == [f"{SCHEDULE}@v1.3"]


def test_another_schedules_runs_do_not_hold_a_job_back() -> None:
    q = running(OverlapPolicy.SKIP)
    other = replace(of(OverlapPolicy.SKIP, "acme/daily-etl2@v1.1", T0 + 1_000), schedule="acme/daily-etl2")
    add_job(q, other)
    assert [launch.job.job_id for launch in check(q, T0 + 1_000)] == ["acme/daily-etl2@v1.1"]


def test_buffer_one_waits_for_the_run_and_folds_later_triggers_into_one_job() -> None:
    q = running(OverlapPolicy.BUFFER_ONE)
    for i in (2, 3, 4):
        add_job(q, of(OverlapPolicy.BUFFER_ONE, f"{SCHEDULE}@v1.{i}", T0 + i * 1_000))
        assert check(q, T0 + i * 1_000) == []
    [waiting] = q.jobs
    assert waiting.blocked_by == OVERLAP and waiting.merged == [f"{SCHEDULE}@v1.3", f"{SCHEDULE}@v1.4"]
    assert waiting.reason == f"overlap BUFFER_ONE: waits for run {SCHEDULE}@v1.1 of the schedule to end"
    ended(q, f"{SCHEDULE}@v1.1")
    assert [launch.job.job_id for launch in check(q, T0 + 5_000)] == [f"{SCHEDULE}@v1.2"]


def test_buffer_all_launches_every_trigger_one_after_the_other() -> None:
    q = running(OverlapPolicy.BUFFER_ALL)
    for i in (2, 3, 4):
        add_job(q, of(OverlapPolicy.BUFFER_ALL, f"{SCHEDULE}@v1.{i}", T0 + i))
    launched = []
    run = f"{SCHEDULE}@v1.1"
    for step in range(1, 4):
        assert check(q, T0 + step * 100 - 1) == [], "launched while the last run was active"
        ended(q, run, at=T0 + step * 100)
        [launch] = check(q, T0 + step * 100)  # one at a time: the next waits for this one
        launched.append(launch.job.job_id)
        run = launch.job.run_id
    assert launched == [f"{SCHEDULE}@v1.2", f"{SCHEDULE}@v1.3", f"{SCHEDULE}@v1.4"] and q.jobs == []


def test_buffer_all_keeps_at_most_its_bound_waiting_and_drops_the_rest() -> None:
    q = running(OverlapPolicy.BUFFER_ALL)
    for i in range(MAX_BUFFERED + 2):
        add_job(q, of(OverlapPolicy.BUFFER_ALL, f"{SCHEDULE}@v1.{i + 2}", T0 + i))
    assert len(q.jobs) == MAX_BUFFERED and q.tally["SKIP"] == 2
    assert q.outcomes[-1]["reason"] == (
        f"overlap BUFFER_ALL: 1,000 jobs of the schedule buffered already (at most {MAX_BUFFERED})"
    )


@pytest.mark.parametrize(
    ("policy", "action", "ends_as"),
    [(OverlapPolicy.CANCEL_OTHER, "stop", "STOPPED"), (OverlapPolicy.TERMINATE_OTHER, "terminate", "KILLED")],
)
def test_cancel_and_terminate_other_ask_the_run_to_end_once_then_launch(
    policy: OverlapPolicy, action: str, ends_as: str
) -> None:
    q = running(policy)
    add_job(q, of(policy, f"{SCHEDULE}@v1.2", T0 + 1_000))
    assert check(q, T0 + 1_000) == []
    [stop] = q.stops
    verb = "stopped" if action == "stop" else "killed"
    assert stop == {
        "runId": f"{SCHEDULE}@v1.1",
        "program": PROGRAM,
        "action": action,
        "endsAs": ends_as,
        "reason": f"{verb} by overlap {policy.value}: job {SCHEDULE}@v1.2 of its schedule launches next",
        "started": True,
    }
    q.stops.clear()  # (sent by the agent)
    add_job(q, of(policy, f"{SCHEDULE}@v1.3", T0 + 2_000))  # a later trigger folds in; no second stop
    assert check(q, T0 + 2_000) == [] and q.stops == [] and len(q.jobs) == 1
    apply_status(q, f"{SCHEDULE}@v1.1", "STOPPING", T0 + 2_100)
    ended(q, f"{SCHEDULE}@v1.1", ends_as, T0 + 2_500)
    assert q.stopping == {}
    [launch] = check(q, T0 + 2_500)
    assert launch.job.job_id == f"{SCHEDULE}@v1.2" and launch.job.merged == [f"{SCHEDULE}@v1.3"]


def test_a_run_not_started_yet_is_asked_to_end_as_not_started() -> None:
    q = ProgramQueue(PROGRAM)
    add_job(q, of(OverlapPolicy.CANCEL_OTHER, f"{SCHEDULE}@v1.1"))
    check(q, T0)  # launched: PENDING, no launcher took it
    add_job(q, of(OverlapPolicy.CANCEL_OTHER, f"{SCHEDULE}@v1.2", T0 + 1_000))
    check(q, T0 + 1_000)
    assert [s["started"] for s in q.stops] == [False]


def test_overlap_comes_before_a_concurrency_limit_it_would_otherwise_wait_on() -> None:
    """CANCEL_OTHER with maxRuns 1: the concurrency limit alone would wait for the run forever."""
    limit = (ConcurrencyConstraint(1),)
    q = ProgramQueue(PROGRAM)
    add_job(q, of(OverlapPolicy.CANCEL_OTHER, f"{SCHEDULE}@v1.1", constraints=limit))
    [first] = check(q, T0)
    add_job(q, of(OverlapPolicy.CANCEL_OTHER, f"{SCHEDULE}@v1.2", T0 + 1_000, constraints=limit))
    check(q, T0 + 1_000)
    assert [s["runId"] for s in q.stops] == [first.job.run_id]


def test_a_pending_timeout_decides_a_job_held_by_its_overlap_policy() -> None:
    timeout = PendingTimeout(3_000, TimeoutAction.FORCE_START)
    q = running(OverlapPolicy.BUFFER_ONE)
    add_job(q, of(OverlapPolicy.BUFFER_ONE, f"{SCHEDULE}@v1.2", T0 + 1_000, timeout=timeout))
    assert check(q, T0 + 1_000) == [] and q.jobs[0].check_at == T0 + 4_000
    [forced] = check(q, T0 + 4_000)
    assert forced.forced and len(schedule_runs(q.active, SCHEDULE)) == 2


def test_the_queue_round_trips_its_stops_and_the_job_its_policy() -> None:
    q = running(OverlapPolicy.CANCEL_OTHER)
    add_job(q, of(OverlapPolicy.CANCEL_OTHER, f"{SCHEDULE}@v1.2", T0 + 1_000))
    check(q, T0 + 1_000)
    again = ProgramQueue.from_json(q.to_json())
    assert again.stopping == q.stopping and again.stops == q.stops
    assert again.jobs[0].overlap == "CANCEL_OTHER"
    legacy = q.to_json()
    for name in ("stopping", "stops"):
        del legacy[name]
    del legacy["jobs"][0]["overlap"]
    assert ProgramQueue.from_json(legacy).jobs[0].overlap is None  # (written before policies)


def test_a_plain_schedule_takes_no_overlap_policy() -> None:
    trigger = FrequencyTrigger(TimeUnit.MINUTES, 5)
    plain = Schedule(ScheduleKey("acme", "tick"), trigger, "ticks", overlap=OverlapPolicy.SKIP)
    with pytest.raises(InvalidSchedule) as refused:
        plain.validate()
    assert refused.value.field == "overlap"
    replace(plain, program=ProgramId.parse(PROGRAM)).validate()


def test_a_queue_written_by_a_later_release_reads_without_what_it_added() -> None:
    """A rolling upgrade moves a partition back to a worker not yet upgraded: what it does not know of the
    queue and its jobs is left out, the rest reads."""
    q = running(OverlapPolicy.BUFFER_ONE)
    add_job(q, of(OverlapPolicy.BUFFER_ONE, f"{SCHEDULE}@v1.2", T0 + 1_000))
    later = q.to_json()
    later["addedLater"] = {"x": 1}
    later["jobs"][0]["addedLater"] = [1, 2]
    again = ProgramQueue.from_json(later)
    assert again == ProgramQueue.from_json(q.to_json()) and again.jobs[0].job_id == f"{SCHEDULE}@v1.2"
