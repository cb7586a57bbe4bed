"""Backfill objects (issue 39 item 4): which instants a backfill takes (reprocess), and a job queue that
feeds them at most maxConcurrent at a time, counts how each ended, completes, and is cancelled."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.domain import backfills
from scheduler.domain.jobs import Job, ProgramQueue, add_job, apply_status, cancel, check
from scheduler.domain.runs import RetryPolicy
from tests.unit.test_jobs import PROGRAM, SCHEDULE, T0, job

pytestmark = pytest.mark.unit

HOUR = 3_600_000
INSTANTS = [T0 + i * HOUR for i in range(6)]


def test_the_instant_of_a_run_is_read_from_its_id() -> None:
    of = backfills.instant_of_run
    assert of(f"{SCHEDULE}@{T0}", SCHEDULE) == T0
    assert of(f"{SCHEDULE}@run.{T0}", SCHEDULE) == T0
    assert of(f"{SCHEDULE}@backfill.{T0}~2", SCHEDULE) == T0
    assert of(f"{SCHEDULE}@backfill.{T0}.bf-1a2b3c4d", SCHEDULE) == T0
    assert of(f"{SCHEDULE}@v3.17", SCHEDULE) is None
    assert of(f"acme/other@{T0}", SCHEDULE) is None


def test_reprocess_chooses_the_missing_or_also_the_failed_instants() -> None:
    runs = [
        {"run_id": f"{SCHEDULE}@{INSTANTS[0]}", "status": "COMPLETED"},
        {"run_id": f"{SCHEDULE}@{INSTANTS[1]}", "status": "FAILED"},
        {"run_id": f"{SCHEDULE}@backfill.{INSTANTS[1]}.bf-1", "status": "COMPLETED"},  # (its last run)
        {"run_id": f"{SCHEDULE}@{INSTANTS[2]}", "status": "KILLED"},
        {"run_id": f"{SCHEDULE}@{INSTANTS[3]}", "status": "RUNNING"},
        {"run_id": f"acme/other@{INSTANTS[4]}", "status": "COMPLETED"},
    ]
    assert backfills.choose(INSTANTS, runs, SCHEDULE, "all") == (INSTANTS, 0)
    assert backfills.choose(INSTANTS, runs, SCHEDULE, "none") == (INSTANTS[4:], 4)
    assert backfills.choose(INSTANTS, runs, SCHEDULE, "failed") == ([INSTANTS[2], *INSTANTS[4:]], 3)


def _started(
    q: ProgramQueue, order: str = "oldest", max_concurrent: int = 2, template: Job | None = None
) -> str:
    bf = backfills.new_backfill(
        "bf-1",
        template or job(""),
        INSTANTS,
        span=(INSTANTS[0], INSTANTS[-1]),
        reprocess="all",
        order=order,
        max_concurrent=max_concurrent,
        overlap=None,
        by="alice",
        now=T0,
    )
    assert backfills.start(q, bf) and not backfills.start(q, dict(bf))  # (a repeat starts nothing)
    return "bf-1"


def _launch(q: ProgramQueue, now: int) -> list[str]:
    backfills.feed(q, now)
    return [launch.job.run_id for launch in check(q, now)]


def test_a_backfill_launches_at_most_max_concurrent_newest_first_and_completes() -> None:
    q = ProgramQueue(PROGRAM)
    bid = _started(q, order="newest")
    first = _launch(q, T0)
    assert first == [f"{SCHEDULE}@backfill.{d}.bf-1" for d in (INSTANTS[5], INSTANTS[4])]
    assert _launch(q, T0 + 1) == []  # two in flight: no more
    done = 0
    while (bf := q.backfills[bid])["status"] == "RUNNING":
        run = bf["running"][0]
        apply_status(q, run, "COMPLETED" if done % 3 else "FAILED", T0 + 10 + done)
        done += 1
        _launch(q, T0 + 10 + done)
        assert backfills.in_flight(q, bf) <= 2
    shown = backfills.progress(bf, q)
    assert shown["status"] == "COMPLETED" and shown["endedAt"] is not None
    assert (shown["launched"], shown["completed"], shown["failed"], shown["pending"]) == (6, 4, 2, 0)
    assert bf["template"] is None  # (an ended backfill keeps its counts, not its job)


def test_a_backfills_jobs_are_never_folded_into_a_waiting_job_nor_one_into_them() -> None:
    q = ProgramQueue(PROGRAM)
    _started(q, max_concurrent=3)
    backfills.feed(q, T0)
    add_job(q, job(f"{SCHEDULE}@v1.1", triggered_at=T0 + 1))
    assert len(q.jobs) == 4 and all(j.merged == [] for j in q.jobs)
    arguments = q.jobs[0].arguments
    assert arguments["trigger.eventType"] == "backfill" and arguments["trigger.due"] == str(INSTANTS[0])


def test_cancel_stops_the_instants_left_and_its_waiting_jobs_not_its_runs() -> None:
    q = ProgramQueue(PROGRAM)
    bid = _started(q, max_concurrent=3)
    [running, *_] = _launch(q, T0)
    backfills.feed(q, T0)
    add_job(q, replace(job("x"), job_id="waiting", backfill=bid))  # (one waiting, as if held by a limit)
    assert backfills.stop(q, bid, "cancelled by alice", T0 + 5)
    bf = q.backfills[bid]
    assert bf["status"] == "CANCELLED" and bf["instants"] == [] and bf["counts"]["cancelled"] == 3 + 1
    assert not any(j.backfill == bid for j in q.jobs) and running in q.active
    assert not backfills.stop(q, bid, "again", T0 + 6)
    apply_status(q, running, "COMPLETED", T0 + 7)
    assert backfills.progress(bf, q)["completed"] == 1


def test_an_update_of_the_schedule_cancels_its_older_backfills_and_a_delete_every_one() -> None:
    q = ProgramQueue(PROGRAM)
    bid = _started(q)
    backfills.stop_schedules(q, SCHEDULE, 1, "updated", T0)  # (version 1 is not below 1)
    assert q.backfills[bid]["status"] == "RUNNING"
    backfills.stop_schedules(q, SCHEDULE, None, "deleted", T0)
    assert q.backfills[bid]["status"] == "CANCELLED" and q.backfills[bid]["cancelReason"] == "deleted"


def test_a_retried_run_counts_once_by_how_its_last_attempt_ended() -> None:
    q = ProgramQueue(PROGRAM)
    retry = RetryPolicy(max_attempts=2, initial_delay_ms=1_000)
    bid = _started(q, max_concurrent=1, template=replace(job(""), retry=retry))
    [first] = _launch(q, T0)
    apply_status(q, first, "FAILED", T0 + 1)
    assert q.backfills[bid]["counts"]["failed"] == 0 and backfills.in_flight(q, q.backfills[bid]) == 1
    [again] = _launch(q, T0 + 2_000)
    assert again == f"{first}~2"
    apply_status(q, again, "FAILED", T0 + 3_000)
    counts = q.backfills[bid]["counts"]
    assert (counts["launched"], counts["failed"]) == (1, 1)


def test_a_job_dropped_by_the_check_makes_room_and_counts_skipped() -> None:
    """A job that DISCARDs at once (timeout 0) is counted skipped; feeding again launches the next."""
    from scheduler.domain.constraints import PendingTimeout, TimeoutAction

    q = ProgramQueue(PROGRAM)
    late = replace(job(""), timeout=PendingTimeout(1, TimeoutAction.DISCARD))
    bid = _started(q, max_concurrent=1, template=late)
    for _ in range(len(INSTANTS) + 1):
        backfills.feed(q, T0)
        check(q, T0 + 5)
    bf = q.backfills[bid]
    assert bf["status"] == "COMPLETED" and bf["counts"]["skipped"] == len(INSTANTS)


def test_the_queue_round_trips_its_backfills_and_old_queues_read_without_them() -> None:
    q = ProgramQueue(PROGRAM)
    bid = _started(q)
    backfills.feed(q, T0)
    again = ProgramQueue.from_json(q.to_json())
    assert again.backfills == q.backfills and again.jobs[0].backfill == bid
    legacy = q.to_json()
    del legacy["backfills"]
    for j in legacy["jobs"]:
        del j["backfill"]
    assert ProgramQueue.from_json(legacy).backfills == {}
    assert cancel(again, SCHEDULE, None, "deleted", T0) == 2
