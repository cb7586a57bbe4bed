"""Tenant lines in the pure logic: concurrency groups resolved within a tenant, the job queues a run's
status reaches, the hand-over of group queues shared by every tenant (written before), and which tenants
a filtered job list asks about."""

from __future__ import annotations

import pytest

from scheduler.domain.constraints import ConcurrencyConstraint
from scheduler.domain.events import program_key
from scheduler.domain.jobs import (
    MAX_LAUNCHED_REMEMBERED,
    Job,
    ProgramQueue,
    add_job,
    apply_status,
    check,
)
from scheduler.domain.legacy_groups import adopt, legacy_group, split_legacy_group
from scheduler.domain.model import PartitionTrigger, ProgramId, Schedule, ScheduleKey, ScheduleState
from scheduler.domain.tenancy import job_filter_tenants
from scheduler.wire.messages import IndexedTrigger, IndexEntry, IndexUpdate
from scheduler.worker.event_routing import event_keys, run_state_queues

pytestmark = pytest.mark.unit

T0 = 1_704_067_200_000
ETL = ConcurrencyConstraint(1, group="etl")


def grouped(tenant: str, name: str, program: str, group: str | None = "etl") -> Schedule:
    """A schedule of `tenant` launching `program`, at most one run at a time in `group`."""
    return Schedule(
        ScheduleKey(tenant, name),
        PartitionTrigger(f"{tenant}.raw"),
        topic="launches",
        program=ProgramId.parse(program),
        constraints=(ConcurrencyConstraint(1, group=group),),
    )


def job_of(schedule: Schedule, job_id: str, at: int = T0) -> Job:
    assert schedule.program is not None
    return Job(
        job_id=job_id,
        schedule=schedule.key.id,
        version=1,
        program=schedule.program.id,
        topic=schedule.topic,
        arguments={},
        triggered_at=at,
        constraints=schedule.constraints,
        timeout=None,
    )


def index_entries(*schedules: Schedule) -> dict[str, IndexedTrigger]:
    """A program's trigger-index entries as the index agent writes them, for `schedules` launching it."""
    entry = IndexEntry()
    for s in schedules:
        assert s.program is not None
        paths = event_keys(ScheduleState(s, T0, T0, T0)).get(program_key(s.program), [])
        entry = entry.applied(IndexUpdate(program_key(s.program), s.key.id, b"\x00", 1, tuple(paths)))
    return entry.triggers


# --- concurrency groups are resolved within the schedule's tenant --------------------------------------


def test_two_tenants_naming_the_same_group_wait_in_two_queues() -> None:
    acme = grouped("acme", "nightly", "acme/app/workflow/load")
    beta = grouped("beta", "nightly", "beta/app/workflow/load")
    assert acme.queue_key == "group:acme/etl"
    assert beta.queue_key == "group:beta/etl"
    assert grouped("acme", "other", "acme/app/workflow/clean").queue_key == acme.queue_key
    assert grouped("acme", "solo", "acme/app/workflow/load", group=None).queue_key == "acme/app/workflow/load"


def test_a_job_is_not_held_by_another_tenants_runs_in_a_group_of_the_same_name() -> None:
    acme = grouped("acme", "nightly", "acme/app/workflow/load")
    beta = grouped("beta", "nightly", "beta/app/workflow/load")
    queues: dict[str, ProgramQueue] = {}

    def submit(s: Schedule, job_id: str, at: int) -> list[str]:
        q = queues.setdefault(s.queue_key, ProgramQueue(s.queue_key))
        add_job(q, job_of(s, job_id, at))
        return [launch.job.job_id for launch in check(q, at)]

    assert submit(acme, "acme/nightly@v1.1", T0) == ["acme/nightly@v1.1"]  # acme's run is active
    assert submit(beta, "beta/nightly@v1.1", T0 + 1) == ["beta/nightly@v1.1"]  # beta's group is empty
    assert submit(beta, "beta/nightly@v1.2", T0 + 2) == []  # held by beta's own run
    assert submit(acme, "acme/nightly@v1.2", T0 + 3) == []  # held by acme's own run
    held = queues[beta.queue_key].jobs[0]
    assert held.reason == "1 run active in group etl, at most 1"  # beta's run only: nothing of acme's


def test_a_run_status_reaches_the_group_queue_of_each_tenant_that_groups_the_program() -> None:
    shared = "data/app/workflow/load"  # a program both tenants may launch (their tokens hold `data`)
    acme = grouped("acme", "a", shared)
    beta = grouped("beta", "b", shared)
    solo = grouped("gamma", "c", shared, group=None)
    assert run_state_queues(shared, index_entries(acme, beta, solo)) == [
        shared,
        "group:acme/etl",
        "group:beta/etl",
    ]
    assert run_state_queues(shared, index_entries(acme)) == [shared, "group:acme/etl"]
    assert run_state_queues(shared, {}) == [shared]


def test_an_ended_run_of_one_tenant_does_not_release_another_tenants_group() -> None:
    acme = grouped("acme", "a", "acme/app/workflow/load")
    beta = grouped("beta", "b", "beta/app/workflow/load")
    acme_q, beta_q = ProgramQueue(acme.queue_key), ProgramQueue(beta.queue_key)
    add_job(beta_q, job_of(beta, "beta/b@v1.1"))
    check(beta_q, T0)  # beta's run is active
    add_job(beta_q, job_of(beta, "beta/b@v1.2", T0 + 1))
    assert check(beta_q, T0 + 1) == []
    for queue in run_state_queues("acme/app/workflow/load", index_entries(acme)):
        assert queue != beta.queue_key  # acme's run status never reaches beta's group
        if queue == acme.queue_key:
            apply_status(acme_q, "acme/a@v1.1", "COMPLETED", T0 + 2, "acme/app/workflow/load")
    assert check(beta_q, T0 + 3) == []
    apply_status(beta_q, "beta/b@v1.1", "COMPLETED", T0 + 4, "beta/app/workflow/load")
    assert [launch.job.job_id for launch in check(beta_q, T0 + 5)] == ["beta/b@v1.2"]


# --- a group queue shared by every tenant, written before groups were resolved within a tenant -------


def test_a_shared_group_queue_is_told_apart_from_tenant_and_program_queues() -> None:
    assert legacy_group("group:etl") == "etl"
    assert legacy_group("group:acme/etl") is None
    assert legacy_group("acme/app/workflow/load") is None
    assert legacy_group("group:x/app/workflow/load") is None  # a program of a tenant named "group:x"


def _shared_queue() -> ProgramQueue:
    acme = grouped("acme", "a", "acme/app/workflow/load")
    beta = grouped("beta", "b", "beta/app/workflow/load")
    q = ProgramQueue("group:etl")
    add_job(q, job_of(acme, "acme/a@v1.1"))
    check(q, T0)  # launched: acme's run is active
    add_job(q, job_of(acme, "acme/a@v1.2", T0 + 1))
    add_job(q, job_of(beta, "beta/b@v1.1", T0 + 2))
    apply_status(q, "manual-7", "RUNNING", T0 + 3, "beta/app/workflow/load")  # started by hand
    check(q, T0 + 4)  # both wait: 2 runs active in group etl
    return q


def test_a_shared_group_queue_is_split_into_its_tenants_queues() -> None:
    q = _shared_queue()
    shares = split_legacy_group(q)
    assert sorted(shares) == ["group:acme/etl", "group:beta/etl"]
    acme, beta = shares["group:acme/etl"], shares["group:beta/etl"]
    assert acme.program == "group:acme/etl" and beta.program == "group:beta/etl"
    assert [j.job_id for j in acme.jobs] == ["acme/a@v1.2"]
    assert [j.job_id for j in beta.jobs] == ["beta/b@v1.1"]
    assert acme.launched == ["acme/a@v1.1"] and beta.launched == []
    # a run goes to the tenant of its run id; one started elsewhere to every tenant (hold, never overrun)
    assert set(acme.active) == {"acme/a@v1.1", "manual-7"}
    assert set(beta.active) == {"manual-7"}
    assert beta.run_program == {"manual-7": "beta/app/workflow/load"}
    assert acme.recent_starts == beta.recent_starts == q.recent_starts
    assert split_legacy_group(ProgramQueue("group:etl")) == {}  # nobody used it: nothing to hand over


def test_a_tenants_share_is_adopted_once_even_when_handed_over_twice() -> None:
    own = grouped("beta", "own", "beta/app/workflow/other")
    target = ProgramQueue("group:beta/etl")
    add_job(target, job_of(own, "beta/own@v1.1", T0 + 10))
    check(target, T0 + 10)  # its own run is active
    share = split_legacy_group(_shared_queue())["group:beta/etl"]
    adopt(target, share)
    once = target.to_json()
    adopt(target, split_legacy_group(_shared_queue())["group:beta/etl"])
    assert target.to_json() == once
    assert [j.job_id for j in target.jobs] == ["beta/b@v1.1"]
    assert set(target.active) == {"beta/own@v1.1", "manual-7"}
    assert target.launched == ["beta/own@v1.1"]
    assert target.last_start == T0 + 10
    assert sorted(target.recent_starts) == sorted([*share.recent_starts, T0 + 10])
    assert check(target, T0 + 11) == []  # held by 2 runs of its own tenant
    assert target.jobs[0].reason == "2 runs active in group etl, at most 1"


def test_an_adopted_launched_job_is_not_launched_again_on_a_replay() -> None:
    acme = grouped("acme", "a", "acme/app/workflow/load")
    target = ProgramQueue("group:acme/etl")
    adopt(target, split_legacy_group(_shared_queue())["group:acme/etl"])
    assert not add_job(target, job_of(acme, "acme/a@v1.1"))  # launched by the shared queue
    target.launched = [f"x{i}" for i in range(MAX_LAUNCHED_REMEMBERED)]
    adopt(target, split_legacy_group(_shared_queue())["group:acme/etl"])
    assert len(target.launched) == MAX_LAUNCHED_REMEMBERED and target.launched[-1] == "acme/a@v1.1"


# --- a job list filtered by another tenant's schedule, program or job is refused ---------------------


def test_a_job_list_filter_names_the_tenants_it_asks_about() -> None:
    assert job_filter_tenants(None, None, None) == set()
    assert job_filter_tenants("beta/nightly", None, None) == {"beta"}
    assert job_filter_tenants(None, "gamma/app/workflow/load", None) == {"gamma"}
    assert job_filter_tenants(None, None, "delta/nightly@1795307000000") == {"delta"}
    assert job_filter_tenants("acme/a", "acme/app/workflow/p", "beta/b@v1.1") == {"acme", "beta"}
