"""The job queue of one program: jobs in (with replay and merge rules), run status in, launches out."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from scheduler.domain.constraints import (
    ConcurrencyConstraint,
    Constraint,
    DelayConstraint,
    LastRunConstraint,
    PendingTimeout,
    RateConstraint,
    TimeoutAction,
    UnmetAction,
)
from scheduler.domain.jobs import (
    MAX_EVENTS_PER_JOB,
    RETRY_BACKOFF,
    Job,
    ProgramQueue,
    add_job,
    apply_status,
    cancel,
    check,
)
from scheduler.domain.leases import lost_runs, next_lease_check
from scheduler.domain.model import TimeUnit
from scheduler.domain.runs import RetryPolicy, Verdict

pytestmark = pytest.mark.unit

T0 = 1_704_067_200_000
MINUTE = 60_000
HOUR = 3_600_000
PROGRAM = "sales/etl/workflow/daily"
SCHEDULE = "acme/daily-etl"


def avro(*constraints: Constraint) -> tuple[Constraint, ...]:
    """Constraints as a job carries them."""
    return constraints


def job(
    job_id: str,
    schedule: str = SCHEDULE,
    version: int = 1,
    triggered_at: int = T0,
    constraints: tuple[Constraint, ...] | None = None,
    timeout: PendingTimeout | None = None,
    events: list[dict[str, Any]] | None = None,
) -> Job:
    return Job(
        job_id=job_id,
        schedule=schedule,
        version=version,
        program=PROGRAM,
        topic="launches",
        arguments={"region": "eu"},
        triggered_at=triggered_at,
        constraints=() if constraints is None else constraints,
        timeout=timeout,
        events=[] if events is None else events,
    )


def event(i: int) -> dict[str, Any]:
    return {"timestamp": T0 + i, "eventType": "partition", "payload": {"datasetId": "sales.orders"}}


def queue() -> ProgramQueue:
    return ProgramQueue(PROGRAM)


# --- jobs in -------------------------------------------------------------------------------------


def test_add_job_appends_to_the_queue() -> None:
    q = queue()
    assert add_job(q, job("j1"))
    assert add_job(q, job("j2", schedule="acme/other"))
    assert [j.job_id for j in q.jobs] == ["j1", "j2"]


def test_a_replayed_pending_job_id_is_ignored() -> None:
    q = queue()
    add_job(q, job("j1", events=[event(1)]))
    assert not add_job(q, job("j1", events=[event(1)]))
    assert len(q.jobs) == 1
    assert q.jobs[0].events == [event(1)]


def test_a_replayed_launched_job_id_is_ignored() -> None:
    q = queue()
    add_job(q, job("j1"))
    assert [launch.job.job_id for launch in check(q, T0)] == ["j1"]
    assert not add_job(q, job("j1"))
    assert q.jobs == []
    assert check(q, T0 + 1) == []


def test_a_second_trigger_while_the_job_waits_is_merged_into_it() -> None:
    q = queue()
    add_job(q, job("j1", constraints=avro(DelayConstraint(HOUR)), events=[event(1)]))
    check(q, T0)  # waiting for the delay
    assert add_job(q, job("j2", triggered_at=T0 + MINUTE, events=[event(2), event(3)]))
    assert [j.job_id for j in q.jobs] == ["j1"]
    assert q.jobs[0].events == [event(1), event(2), event(3)]
    assert q.jobs[0].triggered_at == T0  # the waiting job keeps its own trigger instant


def test_a_trigger_of_another_version_is_not_merged() -> None:
    q = queue()
    add_job(q, job("j1", version=1))
    add_job(q, job("j2", version=2))
    assert [j.job_id for j in q.jobs] == ["j1", "j2"]


def test_merged_events_are_bounded() -> None:
    q = queue()
    add_job(q, job("j1", events=[event(i) for i in range(MAX_EVENTS_PER_JOB - 1)]))
    add_job(q, job("j2", events=[event(1000), event(1001), event(1002)]))
    assert len(q.jobs[0].events) == MAX_EVENTS_PER_JOB
    assert q.jobs[0].events[-1] == event(1000)


def test_a_replayed_job_id_that_was_merged_is_ignored_while_the_job_waits() -> None:
    q = queue()
    add_job(q, job("j1", constraints=avro(DelayConstraint(HOUR)), events=[event(1)]))
    add_job(q, job("j2", events=[event(2)]))
    assert not add_job(q, job("j2", events=[event(2)]))
    assert q.jobs[0].events == [event(1), event(2)]


def test_a_replayed_job_id_that_was_merged_launches_nothing_after_the_launch() -> None:
    q = queue()
    add_job(q, job("j1", constraints=avro(DelayConstraint(HOUR)), events=[event(1)]))
    add_job(q, job("j2", events=[event(2)]))
    assert len(check(q, T0 + HOUR)) == 1
    assert not add_job(q, job("j2", events=[event(2)]))
    assert check(q, T0 + 2 * HOUR) == []


# --- launches ------------------------------------------------------------------------------------


def test_a_job_without_constraints_launches_on_check() -> None:
    q = queue()
    add_job(q, job("j1"))
    launches = check(q, T0 + 5)
    assert len(launches) == 1
    launch = launches[0]
    assert launch.job.job_id == "j1"
    assert launch.job.state == "PENDING_LAUNCH"
    assert launch.job.check_at is None
    assert launch.launched_at == T0 + 5
    assert not launch.forced
    assert q.jobs == []
    assert q.active == {"j1": "PENDING"}
    assert q.launched == ["j1"]
    assert q.last_start == T0 + 5
    assert q.recent_starts == [T0 + 5]


def test_check_of_an_empty_queue_launches_nothing() -> None:
    assert check(queue(), T0) == []


def test_concurrency_one_launches_the_first_and_holds_the_second_until_it_ends() -> None:
    one = avro(ConcurrencyConstraint(1))
    q = queue()
    add_job(q, job("j1", constraints=one))
    add_job(q, job("j2", schedule="acme/other", constraints=one))

    launches = check(q, T0)
    assert [launch.job.job_id for launch in launches] == ["j1"]
    waiting = q.jobs[0]
    assert waiting.job_id == "j2"
    assert waiting.state == "PENDING_CONSTRAINT"
    assert waiting.blocked_by == "ConcurrencyConstraint"
    assert waiting.check_at is None

    apply_status(q, "j1", "STARTING", T0 + MINUTE)
    assert check(q, T0 + MINUTE) == []
    apply_status(q, "j1", "RUNNING", T0 + 2 * MINUTE)
    assert check(q, T0 + 2 * MINUTE) == []
    assert q.active == {"j1": "RUNNING"}
    assert q.recent_starts == [T0]  # our own run's STARTING is not a second start

    apply_status(q, "j1", "COMPLETED", T0 + HOUR)
    assert q.active == {}
    assert q.last_end == T0 + HOUR
    assert [launch.job.job_id for launch in check(q, T0 + HOUR)] == ["j2"]
    assert q.active == {"j2": "PENDING"}


def test_concurrency_two_launches_two_jobs_in_one_check() -> None:
    two = avro(ConcurrencyConstraint(2))
    q = queue()
    for i, schedule in enumerate(["acme/a", "acme/b", "acme/c"]):
        add_job(q, job(f"j{i}", schedule=schedule, constraints=two))
    assert [launch.job.job_id for launch in check(q, T0)] == ["j0", "j1"]
    assert [j.job_id for j in q.jobs] == ["j2"]


@pytest.mark.parametrize("st", ["FAILED", "KILLED"])
def test_any_end_of_the_run_frees_its_slot(st: str) -> None:
    one = avro(ConcurrencyConstraint(1))
    q = queue()
    add_job(q, job("j1", constraints=one))
    add_job(q, job("j2", schedule="acme/other", constraints=one))
    check(q, T0)
    apply_status(q, "j1", st, T0 + MINUTE)
    assert [launch.job.job_id for launch in check(q, T0 + MINUTE)] == ["j2"]


def test_a_manual_run_that_is_starting_counts_against_concurrency() -> None:
    q = queue()
    apply_status(q, "manual-7", "STARTING", T0)
    assert q.active == {"manual-7": "STARTING"}
    assert q.last_start == T0  # a run we did not launch starts now
    assert q.recent_starts == [T0]
    add_job(q, job("j1", constraints=avro(ConcurrencyConstraint(1))))
    assert check(q, T0 + 1) == []
    assert q.jobs[0].blocked_by == "ConcurrencyConstraint"
    apply_status(q, "manual-7", "COMPLETED", T0 + MINUTE)
    assert len(check(q, T0 + MINUTE)) == 1


def test_a_manual_run_counts_against_last_run_and_rate() -> None:
    q = queue()
    apply_status(q, "manual-7", "RUNNING", T0)
    apply_status(q, "manual-7", "COMPLETED", T0 + MINUTE)
    add_job(q, job("j1", constraints=avro(LastRunConstraint(HOUR)), triggered_at=T0 + MINUTE))
    assert check(q, T0 + MINUTE) == []
    assert q.jobs[0].check_at == T0 + HOUR
    assert len(check(q, T0 + HOUR)) == 1


def test_a_manual_run_reported_pending_then_starting_counts_as_one_start_when_first_reported() -> None:
    q = queue()
    apply_status(q, "manual-7", "PENDING", T0)
    apply_status(q, "manual-7", "STARTING", T0 + 1)
    assert q.recent_starts == [T0]
    assert q.last_start == T0


def test_a_manual_pending_run_counts_against_concurrency() -> None:
    q = queue()
    apply_status(q, "manual-7", "PENDING", T0)
    add_job(q, job("j1", constraints=avro(ConcurrencyConstraint(1))))
    assert check(q, T0) == []


def test_statuses_that_are_neither_active_nor_terminal_are_ignored() -> None:
    q = queue()
    apply_status(q, "r", "UNKNOWN", T0)
    assert q.active == {}
    assert q.last_start is None


def test_the_end_of_an_unknown_run_only_moves_last_end() -> None:
    q = queue()
    apply_status(q, "r", "COMPLETED", T0 + 10)
    apply_status(q, "s", "FAILED", T0 + 5)  # out of order: last_end keeps the latest
    assert q.active == {}
    assert q.last_end == T0 + 10


def test_last_run_waits_after_our_own_launch() -> None:
    gap = avro(LastRunConstraint(HOUR))
    q = queue()
    add_job(q, job("j1", constraints=gap))
    check(q, T0)
    add_job(q, job("j2", schedule="acme/other", constraints=gap, triggered_at=T0 + MINUTE))
    assert check(q, T0 + MINUTE) == []
    assert q.jobs[0].check_at == T0 + HOUR
    assert q.next_check == T0 + HOUR
    assert [launch.job.job_id for launch in check(q, T0 + HOUR)] == ["j2"]


def test_rate_counts_our_launches() -> None:
    rate = avro(RateConstraint(2, TimeUnit.HOURS))
    q = queue()
    for i in range(3):
        add_job(q, job(f"j{i}", schedule=f"acme/s{i}", constraints=rate))
    assert [launch.job.job_id for launch in check(q, T0)] == ["j0", "j1"]
    assert q.jobs[0].check_at == T0 + HOUR
    assert [launch.job.job_id for launch in check(q, T0 + HOUR)] == ["j2"]


# --- skips, timeouts, cancels --------------------------------------------------------------------


def test_a_skip_outcome_is_remembered_with_its_reason() -> None:
    q = queue()
    apply_status(q, "manual-7", "RUNNING", T0)
    add_job(q, job("j1", constraints=avro(ConcurrencyConstraint(1, UnmetAction.SKIP))))
    assert check(q, T0 + 1) == []
    assert q.jobs == []
    assert q.outcomes == [
        {
            "jobId": "j1",
            "schedule": SCHEDULE,
            "outcome": "SKIP",
            "reason": "ConcurrencyConstraint: 1 run active, at most 1",
            "at": T0 + 1,
        }
    ]
    assert "j1" not in q.launched


def test_pending_timeout_discard_through_check() -> None:
    q = queue()
    apply_status(q, "manual-7", "RUNNING", T0)
    add_job(
        q,
        job(
            "j1",
            constraints=avro(ConcurrencyConstraint(1)),
            timeout=PendingTimeout(10 * MINUTE, TimeoutAction.DISCARD),
        ),
    )
    assert check(q, T0) == []
    assert q.jobs[0].check_at == T0 + 10 * MINUTE  # a run change or the deadline, whichever comes first
    assert check(q, T0 + 10 * MINUTE) == []
    assert q.jobs == []
    assert [(o["jobId"], o["outcome"], o["at"]) for o in q.outcomes] == [("j1", "DISCARD", T0 + 10 * MINUTE)]
    assert "discarded" in q.outcomes[0]["reason"]


def test_pending_timeout_force_start_through_check() -> None:
    q = queue()
    apply_status(q, "manual-7", "RUNNING", T0)
    add_job(
        q,
        job(
            "j1",
            constraints=avro(ConcurrencyConstraint(1)),
            timeout=PendingTimeout(10 * MINUTE, TimeoutAction.FORCE_START),
        ),
    )
    assert check(q, T0 + 10 * MINUTE - 1) == []
    launches = check(q, T0 + 10 * MINUTE)
    assert len(launches) == 1
    assert launches[0].forced
    assert launches[0].job.state == "PENDING_LAUNCH"
    assert q.active == {"manual-7": "RUNNING", "j1": "PENDING"}
    assert q.outcomes == []


def test_cancel_below_a_version_drops_only_that_schedules_older_jobs() -> None:
    q = queue()
    add_job(q, job("a1", version=1))
    add_job(q, job("a2", version=2))
    add_job(q, job("b1", schedule="acme/other", version=1))
    assert cancel(q, SCHEDULE, 2, "updated", T0) == 1
    assert [j.job_id for j in q.jobs] == ["a2", "b1"]
    assert q.outcomes == [
        {"jobId": "a1", "schedule": SCHEDULE, "outcome": "CANCELLED", "reason": "updated", "at": T0}
    ]


def test_cancel_without_a_version_drops_all_of_that_schedules_jobs() -> None:
    q = queue()
    add_job(q, job("a1", version=1))
    add_job(q, job("a2", version=2))
    add_job(q, job("b1", schedule="acme/other"))
    assert cancel(q, SCHEDULE, None, "deleted", T0) == 2
    assert [j.job_id for j in q.jobs] == ["b1"]
    assert [(o["jobId"], o["outcome"]) for o in q.outcomes] == [("a1", "CANCELLED"), ("a2", "CANCELLED")]


def test_cancel_of_a_schedule_without_jobs_drops_nothing() -> None:
    q = queue()
    add_job(q, job("b1", schedule="acme/other"))
    assert cancel(q, SCHEDULE, None, "deleted", T0) == 0
    assert q.outcomes == []


def test_next_check_is_the_earliest_check_at() -> None:
    q = queue()
    assert q.next_check is None
    add_job(q, job("a", schedule="acme/a", constraints=avro(DelayConstraint(HOUR))))
    add_job(q, job("b", schedule="acme/b", constraints=avro(DelayConstraint(10 * MINUTE))))
    add_job(q, job("c", schedule="acme/c", constraints=avro(ConcurrencyConstraint(1)), triggered_at=T0))
    apply_status(q, "manual-7", "RUNNING", T0)
    check(q, T0)
    assert [j.check_at for j in q.jobs] == [T0 + HOUR, T0 + 10 * MINUTE, None]
    assert q.next_check == T0 + 10 * MINUTE


# --- JSON form -----------------------------------------------------------------------------------


def test_queue_round_trips_through_json() -> None:
    q = queue()
    apply_status(q, "manual-7", "RUNNING", T0)
    add_job(q, job("a", schedule="acme/a", constraints=avro(ConcurrencyConstraint(2)), events=[event(1)]))
    add_job(
        q,
        job(
            "b",
            schedule="acme/b",
            constraints=avro(ConcurrencyConstraint(1), DelayConstraint(HOUR)),
            timeout=PendingTimeout(2 * HOUR, TimeoutAction.FORCE_START),
        ),
    )
    add_job(q, job("c", schedule="acme/c", constraints=avro(ConcurrencyConstraint(1, UnmetAction.SKIP))))
    check(q, T0)
    assert q.jobs and q.launched and q.outcomes  # a waiting job, a launch and a skip to carry

    back = ProgramQueue.from_json(json.loads(json.dumps(q.to_json())))
    assert back.to_json() == json.loads(json.dumps(q.to_json()))
    assert back.jobs[0].blocked_by == "ConcurrencyConstraint"
    # The restored queue decides as the original would.
    apply_status(back, "manual-7", "COMPLETED", T0 + HOUR)
    apply_status(back, "a", "COMPLETED", T0 + HOUR)
    assert [launch.job.job_id for launch in check(back, T0 + HOUR)] == ["b"]


def test_a_group_queue_counts_runs_per_program_and_for_the_whole_group() -> None:
    group = ProgramQueue("group:spark")
    group.active = {"x-run": "RUNNING", "y-run": "RUNNING"}
    group.run_program = {"x-run": "ns/app/spark/x", "y-run": "ns/app/spark/y"}
    runs = group.runs("ns/app/spark/x")
    assert list(runs.active) == ["x-run"] and runs.group_active == 2
    apply_status(group, "y-run", "COMPLETED", T0, "ns/app/spark/y")
    assert group.runs("ns/app/spark/x").group_active == 1 and "y-run" not in group.run_program


# --- run accounting and leases ------------------------------------------------------------------------

LEASE = 30_000
PENDING_TIMEOUT = 10 * MINUTE


def test_a_reordered_running_after_completed_leaves_the_slot_free() -> None:
    q = queue()
    add_job(q, job("j1", constraints=avro(ConcurrencyConstraint(1))))
    [launch] = check(q, T0)
    for at, status in enumerate(["PREPARING", "STARTING", "RUNNING", "COMPLETED"], start=1):
        assert apply_status(q, "j1", status, T0 + at, launcher="l1", lease_ms=LEASE)[0] is Verdict.ACCEPTED
    verdict, why = apply_status(q, "j1", "RUNNING", T0 + 9, launcher="l1")
    assert verdict is Verdict.REFUSED and "already ended" in why
    assert q.active == {}
    add_job(q, job("j2", constraints=avro(ConcurrencyConstraint(1))))
    assert [launch.job.job_id for launch in check(q, T0 + 10)] == ["j2"]


def test_a_report_from_a_launcher_that_does_not_hold_the_run_changes_nothing() -> None:
    q = queue()
    apply_status(q, "r", "PREPARING", T0, launcher="l1", lease_ms=LEASE)
    verdict, why = apply_status(q, "r", "STARTING", T0 + 1, launcher="l2", lease_ms=LEASE)
    assert verdict is Verdict.REFUSED and "held by l1" in why
    assert q.active == {"r": "PREPARING"} and q.holders == {"r": "l1"}


def test_a_held_run_is_lost_when_its_holder_stops_renewing_it() -> None:
    q = queue()
    apply_status(q, "r", "PREPARING", T0, launcher="l1", lease_ms=LEASE)
    apply_status(q, "r", "RUNNING", T0 + 5, launcher="l1")
    renewed = {"r": T0 + 20_000}
    assert next_lease_check(q, renewed, T0, PENDING_TIMEOUT) == T0 + 20_000 + LEASE
    assert lost_runs(q, renewed, T0, T0 + 20_000 + LEASE - 1, PENDING_TIMEOUT) == []
    [(run_id, why)] = lost_runs(q, renewed, T0, T0 + 20_000 + LEASE, PENDING_TIMEOUT)
    assert run_id == "r" and "lease expired: launcher l1" in why


def test_a_new_owner_of_the_queue_gives_every_lease_a_whole_term_from_when_it_took_over() -> None:
    q = queue()
    apply_status(q, "r", "RUNNING", T0, launcher="l1", lease_ms=LEASE)
    taken_at = T0 + HOUR  # (the renewals were in the old owner's memory)
    assert lost_runs(q, {}, taken_at, taken_at + LEASE - 1, PENDING_TIMEOUT) == []
    assert [r for r, _ in lost_runs(q, {}, taken_at, taken_at + LEASE, PENDING_TIMEOUT)] == ["r"]


def test_a_launch_no_launcher_takes_is_lost_after_the_pending_timeout() -> None:
    q = queue()
    add_job(q, job("j1"))
    check(q, T0)
    assert next_lease_check(q, {}, T0, PENDING_TIMEOUT) == T0 + PENDING_TIMEOUT
    [(run_id, why)] = lost_runs(q, {}, T0, T0 + PENDING_TIMEOUT, PENDING_TIMEOUT)
    assert run_id == "j1" and "no launcher took it" in why
    apply_status(q, "j1", "PREPARING", T0 + 1, launcher="l1", lease_ms=LEASE)  # taken: its lease now
    assert next_lease_check(q, {"j1": T0 + 1}, T0, PENDING_TIMEOUT) == T0 + 1 + LEASE


def test_a_run_reported_without_a_lease_is_never_lost() -> None:  # (an external system's)
    q = queue()
    apply_status(q, "ext", "RUNNING", T0)
    assert next_lease_check(q, {}, T0, PENDING_TIMEOUT) is None


def test_a_group_queue_leaves_its_programs_runs_to_their_own_queues() -> None:
    group = ProgramQueue("group:acme/etl")
    apply_status(group, "r", "RUNNING", T0, "acme/app/workflow/a", launcher="l1", lease_ms=LEASE)
    assert group.active == {"r": "RUNNING"}
    assert lost_runs(group, {}, T0, T0 + HOUR, PENDING_TIMEOUT) == []


# --- retries --------------------------------------------------------------------------------------------

POLICY = RetryPolicy(max_attempts=3, initial_delay_ms=1_000, multiplier=2.0, max_delay_ms=1_500)


def test_the_backoff_grows_by_its_multiplier_up_to_its_maximum() -> None:
    assert [POLICY.delay_ms(attempt) for attempt in (2, 3, 4)] == [1_000, 1_500, 1_500]


def _fail(q: ProgramQueue, run_id: str, at: int, status: str = "FAILED") -> None:
    for i, s in enumerate(["PREPARING", "STARTING", "RUNNING", status]):
        apply_status(q, run_id, s, at + i, launcher="l1", lease_ms=LEASE)


def test_a_failed_job_is_retried_with_backoff_as_new_runs_of_the_same_job_then_given_up() -> None:
    q = queue()
    add_job(q, replace(job("j1"), retry=POLICY))
    [first] = check(q, T0)
    assert first.job.run_id == "j1" and first.job.attempt == 1
    _fail(q, "j1", T0 + 10)
    assert check(q, T0 + 13) == []  # waiting for its backoff (1 s from the failure at T0 + 13)
    [waiting] = q.jobs
    assert (waiting.blocked_by, waiting.check_at) == (RETRY_BACKOFF, T0 + 13 + 1_000)
    assert waiting.reason == "attempt 2 of 3 after a backoff of 1 s"
    [second] = check(q, T0 + 13 + 1_000)
    assert (second.job.job_id, second.job.run_id, second.job.attempt) == ("j1", "j1~2", 2)
    _fail(q, "j1~2", T0 + 2_000)
    [third] = check(q, T0 + 2_003 + 1_500)
    assert third.job.run_id == "j1~3"
    _fail(q, "j1~3", T0 + 5_000)
    assert q.jobs == [] and check(q, T0 + HOUR) == []  # three runs in all: given up
    assert q.retries == {}


@pytest.mark.parametrize("end", ["STOPPED", "KILLED", "COMPLETED"])
def test_a_run_that_ends_other_than_failed_is_not_retried(end: str) -> None:
    q = queue()
    add_job(q, replace(job("j1"), retry=POLICY))
    check(q, T0)
    _fail(q, "j1", T0 + 10, status=end)
    assert q.jobs == [] and q.retries == {}


def test_a_new_trigger_does_not_merge_into_a_retry_waiting_for_its_backoff() -> None:
    q = queue()
    add_job(q, replace(job("j1"), retry=POLICY))
    check(q, T0)
    _fail(q, "j1", T0 + 10)
    check(q, T0 + 20)
    assert add_job(q, job("j2")) is True
    assert [(j.job_id, j.attempt) for j in q.jobs] == [("j1", 2), ("j2", 1)]


def test_a_retry_waiting_in_the_queue_round_trips_through_json() -> None:
    q = queue()
    add_job(q, replace(job("j1"), retry=POLICY, time_limit_ms=60_000))
    check(q, T0)
    assert ProgramQueue.from_json(json.loads(json.dumps(q.to_json()))).to_json() == q.to_json()
    _fail(q, "j1", T0 + 10)
    back = ProgramQueue.from_json(json.loads(json.dumps(q.to_json())))
    assert back.jobs == q.jobs and back.jobs[0].retry == POLICY and back.jobs[0].time_limit_ms == 60_000


# --- priority: a pool (concurrency group) launches its highest-priority jobs first ------------------


def test_a_saturated_pool_launches_highest_priority_first_then_oldest_and_says_why_the_rest_wait() -> None:
    pool = (ConcurrencyConstraint(2, group="pool"),)
    q = ProgramQueue("group:acme/pool")
    jobs = [
        replace(job(f"low-{i}", schedule=f"acme/low-{i}", triggered_at=T0 + i, constraints=pool), priority=0)
        for i in range(3)
    ]
    jobs += [
        replace(
            job(f"high-{i}", schedule=f"acme/high-{i}", triggered_at=T0 + 10 + i, constraints=pool),
            priority=9,
        )
        for i in range(2)
    ]
    jobs.append(replace(job("mid", schedule="acme/mid", triggered_at=T0 + 5, constraints=pool), priority=5))
    for j in jobs:
        add_job(q, j)
    first = check(q, T0 + 100)
    assert [x.job.job_id for x in first] == ["high-0", "high-1"]
    waiting = {j.job_id: j for j in q.jobs}
    assert waiting["mid"].reason.endswith("at most 2") and "higher priority" not in waiting["mid"].reason
    assert waiting["low-2"].reason.endswith("deferred: 1 job of higher priority waits before it")
    order = []
    for launch in first:  # one run ends at a time: the next in line takes its slot
        apply_status(q, launch.job.run_id, "COMPLETED", T0 + 200)
        order += [x.job.job_id for x in check(q, T0 + 200)]
    for _ in range(3):
        run = next(iter(q.active))
        apply_status(q, run, "COMPLETED", T0 + 300)
        order += [x.job.job_id for x in check(q, T0 + 300)]
    assert order == ["mid", "low-0", "low-1", "low-2"]  # ties: the oldest trigger first


def test_a_deferred_job_past_its_pending_timeout_runs_anyway_or_is_dropped_as_its_schedule_says() -> None:
    pool = (ConcurrencyConstraint(1, group="pool"),)
    q = ProgramQueue("group:acme/pool")
    add_job(q, replace(job("busy", schedule="acme/busy", constraints=pool), priority=9))
    assert [x.job.job_id for x in check(q, T0)] == ["busy"]
    for name, action in (("anyway", TimeoutAction.FORCE_START), ("dropped", TimeoutAction.DISCARD)):
        low = job(name, schedule=f"acme/{name}", constraints=pool, timeout=PendingTimeout(MINUTE, action))
        add_job(q, low)
    assert check(q, T0 + MINUTE - 1) == []
    launched = check(q, T0 + MINUTE)
    assert [(x.job.job_id, x.forced) for x in launched] == [("anyway", True)]
    assert [(o["jobId"], o["outcome"]) for o in q.outcomes] == [("dropped", "DISCARD")]


# --- SLA: a job's run must complete within its schedule's completeWithinMs ----------------------------


def sla_job(job_id: str, schedule: str = SCHEDULE, **kw: Any) -> Job:
    return replace(job(job_id, schedule=schedule, **kw), deadline_at=T0 + HOUR)


def test_a_run_completed_before_its_deadline_raises_nothing_and_one_not_completed_raises_one_alert() -> None:
    from scheduler.domain.deadlines import missed_deadlines

    q = queue()
    add_job(q, sla_job("on-time"))
    add_job(q, sla_job("late", schedule="acme/other"))
    assert q.next_check == T0 + HOUR
    launched = {x.job.job_id: x.job.run_id for x in check(q, T0)}
    apply_status(q, launched["on-time"], "RUNNING", T0 + 1)
    apply_status(q, launched["on-time"], "COMPLETED", T0 + HOUR - 1)
    apply_status(q, launched["late"], "RUNNING", T0 + 1)
    assert missed_deadlines(q, T0 + HOUR - 1) == []
    [missed] = missed_deadlines(q, T0 + HOUR)
    assert (missed.job_id, missed.schedule, missed.due_by) == ("late", "acme/other", T0 + HOUR)
    assert "its run had not completed" in missed.reason
    assert missed_deadlines(q, T0 + 2 * HOUR) == []  # once
    assert q.outcomes[-1]["outcome"] == "DEADLINE_MISSED" and q.next_check is None


def test_a_job_still_waiting_past_its_deadline_is_a_miss_and_a_skipped_one_is_not() -> None:
    from scheduler.domain.deadlines import missed_deadlines

    q = queue()
    add_job(q, sla_job("held", constraints=(DelayConstraint(2 * HOUR),)))
    add_job(
        q,
        sla_job("skipped", schedule="acme/s", constraints=(LastRunConstraint(HOUR, UnmetAction.SKIP),)),
    )
    q.last_start = T0
    check(q, T0 + 1)
    [missed] = missed_deadlines(q, T0 + HOUR)
    assert missed.job_id == "held" and "still waiting (DelayConstraint)" in missed.reason


def test_a_retried_job_meets_its_deadline_when_a_later_attempt_completes_in_time() -> None:
    from scheduler.domain.deadlines import missed_deadlines

    q = queue()
    add_job(q, replace(sla_job("flaky"), retry=RetryPolicy(3, 1_000, 1.0, 1_000)))
    [first] = check(q, T0)
    apply_status(q, first.job.run_id, "FAILED", T0 + 10)
    [second] = check(q, T0 + 2_000)
    assert second.job.attempt == 2 and second.job.deadline_at == T0 + HOUR
    apply_status(q, second.job.run_id, "COMPLETED", T0 + 3_000)
    assert missed_deadlines(q, T0 + HOUR) == [] and q.deadlines == {}


def test_pause_on_failure_asks_for_a_pause_after_that_many_jobs_in_a_row_failed_their_last_attempt() -> None:
    """A job's retries are one job: only its last attempt's FAILED counts; a COMPLETED job starts again."""
    q = queue()

    def run(job_id: str, end: str, at: int, retry: RetryPolicy | None = None) -> None:
        add_job(q, replace(job(job_id), pause_on_failure=2, retry=retry))
        [launch] = check(q, at)
        _fail(q, launch.job.run_id, at + 1, status=end)

    run("j1", "FAILED", T0)
    run("j2", "COMPLETED", T0 + MINUTE)  # (ends the run of failures)
    run("j3", "FAILED", T0 + 2 * MINUTE)
    assert q.pauses == [] and q.failures == {SCHEDULE: 1}
    run("j4", "STOPPED", T0 + 3 * MINUTE)  # (stopped by someone: not a failure, nor a success)
    run("j5", "FAILED", T0 + 4 * MINUTE, retry=RetryPolicy(2, 1_000, 1.0, 1_000))
    assert q.pauses == []  # (its second attempt is still to come)
    [again] = check(q, T0 + 4 * MINUTE + 10_000)
    _fail(q, again.job.run_id, T0 + 4 * MINUTE + 10_001)
    assert q.pauses == [
        {
            "schedule": SCHEDULE,
            "note": "paused after 2 jobs in a row FAILED (pauseOnFailure; the last run: j5~2)",
        }
    ]
    assert q.failures == {} and q.watched == {}
    assert ProgramQueue.from_json(json.loads(json.dumps(q.to_json()))) == q


def test_what_happens_to_jobs_is_tallied_by_outcome_and_never_stored() -> None:
    q = queue()
    add_job(q, replace(job("j1"), retry=POLICY))
    add_job(q, job("j2", schedule="acme/other", constraints=avro(LastRunConstraint(HOUR, UnmetAction.SKIP))))
    check(q, T0)
    _fail(q, "j1", T0 + 10)  # (retried)
    add_job(q, job("j3", schedule="acme/third", constraints=avro(DelayConstraint(HOUR))))
    check(q, T0 + 20)
    assert cancel(q, "acme/third", None, "by a user", T0 + 30) == 1
    assert q.tally == {"LAUNCHED": 1, "SKIP": 1, "RETRIED": 1, "CANCELLED": 1}
    assert "tally" not in q.to_json() and ProgramQueue.from_json(q.to_json()).tally == {}


# --- weighted slots: a run holds its schedule's `slots` of the group's maxRuns (issue 39 item 7) -------


def test_weighted_runs_hold_their_slots_of_the_pool_and_a_job_waits_until_its_slots_are_free() -> None:
    heavy = (ConcurrencyConstraint(4, group="warehouse", slots=3),)
    light = (ConcurrencyConstraint(4, group="warehouse"),)
    q = ProgramQueue("group:acme/warehouse")
    add_job(q, job("big-1", schedule="acme/big", triggered_at=T0, constraints=heavy))
    add_job(q, job("small-1", schedule="acme/small-1", triggered_at=T0 + 1, constraints=light))
    add_job(q, job("small-2", schedule="acme/small-2", triggered_at=T0 + 2, constraints=light))
    assert [x.job.job_id for x in check(q, T0 + 10)] == ["big-1", "small-1"]  # 3 + 1 of 4
    assert q.runs().group_active == 4 and q.run_slots == {"big-1": 3}
    [waiting] = q.jobs
    assert waiting.reason == "4 slots of 4 held by active runs in group warehouse; this job needs 1 slot"
    add_job(q, job("big-2", schedule="acme/big", triggered_at=T0 + 20, version=2, constraints=heavy))
    apply_status(q, "small-1", "COMPLETED", T0 + 30)  # 1 slot free: the light job, not the heavy one
    assert [x.job.job_id for x in check(q, T0 + 30)] == ["small-2"]
    apply_status(q, "big-1", "COMPLETED", T0 + 40)  # 3 free: the heavy one
    assert [x.job.job_id for x in check(q, T0 + 40)] == ["big-2"]
    assert q.run_slots == {"big-2": 3} and q.runs().group_active == 4
    restored = ProgramQueue.from_json(q.to_json())
    assert restored.run_slots == {"big-2": 3}


def test_slots_are_at_most_max_runs() -> None:
    from scheduler.domain.model import InvalidSchedule

    with pytest.raises(InvalidSchedule) as err:
        ConcurrencyConstraint(2, group="g", slots=3).validate()
    assert err.value.field == "constraints.concurrency.slots"
