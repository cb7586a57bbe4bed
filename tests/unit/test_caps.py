"""Run caps (issue 39 item 7): the cap queue's grants, and a job queue that asks for slots and gives them
back. The two are driven as the agent drives them, the messages between them carried by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.domain.caps import (
    PENDING_CAP,
    RUN_CAP,
    CapQueue,
    InvalidCaps,
    RunCaps,
    ask,
    grant,
    release,
    why_waiting,
)
from scheduler.domain.constraints import ConcurrencyConstraint
from scheduler.domain.jobs import (
    ProgramQueue,
    add_job,
    apply_status,
    cancel,
    check,
    slot_granted,
    slot_queued,
)
from scheduler.domain.overlap import OverlapPolicy
from tests.unit.test_jobs import PROGRAM, SCHEDULE, T0, job

pytestmark = pytest.mark.unit


def test_caps_parse_a_count_per_tenant_and_per_named_tenant() -> None:
    assert RunCaps.parse(0, "") == RunCaps() and not RunCaps().enabled
    assert RunCaps.parse(10, "").total == 10 and RunCaps.parse(10, "").enabled
    caps = RunCaps.parse(0, "acme=200, beta=5, *=20")
    assert (caps.of("acme"), caps.of("beta"), caps.of("other"), caps.total) == (200, 5, 20, None)
    assert RunCaps.parse(0, "7").of("anyone") == 7
    assert RunCaps.parse(0, "acme=2").of("other") is None
    for bad in ("acme=x", "acme=0", "=3", "-1"):
        with pytest.raises(InvalidCaps):
            RunCaps.parse(0, bad)


def test_a_tenant_at_its_cap_holds_back_only_its_own_asks() -> None:
    cq, caps = CapQueue(), RunCaps(None, {"*": 2})
    for i, tenant in enumerate(("a", "a", "a", "b")):
        ask(cq, f"{tenant}/s@{i}", f"q{i}", 0, T0 + i)
    assert [g.run_id for g in grant(cq, caps)] == ["a/s@0", "a/s@1", "b/s@3"]
    assert [a["runId"] for a in cq.waiting] == ["a/s@2"]
    assert (
        why_waiting(cq, caps, "a/s@2")
        == "tenant a has 2 runs active, at most 2 (SCHEDULER_TENANT_MAX_ACTIVE_RUNS)"
    )
    release(cq, "a/s@0")
    assert [(g.run_id, g.queue) for g in grant(cq, caps)] == [("a/s@2", "q2")]


def test_the_deployment_cap_grants_highest_priority_first_then_oldest() -> None:
    cq, caps = CapQueue(), RunCaps(2)
    ask(cq, "a/s@1", "q", 0, T0)
    ask(cq, "a/s@1", "q", 0, T0)  # (a repeat: one ask)
    assert [g.run_id for g in grant(cq, caps)] == ["a/s@1"]
    ask(cq, "a/s@1", "q", 0, T0)  # (an ask for a run that holds a slot: nothing)
    for run, priority, at in (("b/s@2", 0, T0 + 1), ("c/s@3", 5, T0 + 2), ("d/s@4", 5, T0 + 3)):
        ask(cq, run, "q", priority, at)
    assert [g.run_id for g in grant(cq, caps)] == ["c/s@3"]
    assert why_waiting(cq, caps, "b/s@2") == (
        "2 runs active in the deployment, at most 2 (SCHEDULER_MAX_ACTIVE_RUNS); 1 job asked before it"
    )
    release(cq, "b/s@2")  # (an ask withdrawn: its job was cancelled)
    release(cq, "a/s@1")
    assert [g.run_id for g in grant(cq, caps)] == ["d/s@4"] and cq.waiting == []


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from("abc"), st.integers(-2, 2), st.booleans()), min_size=1, max_size=60),
    st.integers(1, 4),
    st.integers(1, 6),
)
def test_the_caps_are_never_exceeded_and_every_ask_is_granted_once_slots_free(
    steps: list[tuple[str, int, bool]], per_tenant: int, total: int
) -> None:
    """Random asks and ends: no more than the caps hold slots at any point; once every run ended, every
    ask was granted exactly once."""
    cq, caps = CapQueue(), RunCaps(total, {"*": per_tenant})
    granted: list[str] = []
    for i, (tenant, priority, end_one) in enumerate(steps):
        ask(cq, f"{tenant}/s@{i}", "q", priority, i)
        if end_one and cq.held:
            release(cq, next(iter(cq.held)))
        granted += [g.run_id for g in grant(cq, caps)]
        assert len(cq.held) <= total
        assert all(cq.tenant_held(t) <= per_tenant for t in "abc")
    while cq.held:
        release(cq, next(iter(cq.held)))
        granted += [g.run_id for g in grant(cq, caps)]
    assert sorted(granted) == sorted(f"{t}/s@{i}" for i, (t, _, _) in enumerate(steps))


# --- a job queue under caps -------------------------------------------------------------------------


def _asking(q: ProgramQueue, job_id: str, at: int = T0, **kw: object) -> str:
    add_job(q, replace(job(job_id, triggered_at=at), **kw))  # type: ignore[arg-type]
    assert check(q, at, capped=True) == []
    [a] = q.asks
    q.asks.clear()  # (sent to the cap queue)
    return str(a["runId"])


def test_a_job_asks_for_a_slot_instead_of_launching_and_launches_when_granted() -> None:
    q = ProgramQueue(PROGRAM)
    run_id = _asking(q, f"{SCHEDULE}@v1.1")
    [waiting] = q.jobs
    assert (waiting.state, waiting.blocked_by) == (PENDING_CAP, RUN_CAP)
    slot_queued(q, run_id, "waits for a run slot: tenant acme has 2 runs active, at most 2")
    assert q.jobs[0].reason.startswith("waits for a run slot: tenant acme")
    assert check(q, T0 + 1, capped=True) == [] and q.asks == [], "asked twice"
    launch = slot_granted(q, run_id, T0 + 2)
    assert launch is not None and launch.job.job_id == f"{SCHEDULE}@v1.1" and q.jobs == []
    assert q.active == {run_id: "PENDING"} and q.capped == [run_id] and q.tally["LAUNCHED"] == 1
    assert slot_granted(q, run_id, T0 + 3) is None and q.releases == []  # (a repeated grant)
    apply_status(q, run_id, "RUNNING", T0 + 4)
    assert q.releases == []
    apply_status(q, run_id, "COMPLETED", T0 + 5)
    assert q.releases == [run_id] and q.capped == []


def test_a_job_asking_holds_its_programs_concurrency_slot() -> None:
    q = ProgramQueue(PROGRAM)
    one = (ConcurrencyConstraint(1),)
    _asking(q, f"{SCHEDULE}@v1.1", constraints=one)
    add_job(q, replace(job("acme/other@v1.1", schedule="acme/other", triggered_at=T0 + 1), constraints=one))
    assert check(q, T0 + 1, capped=True) == [] and q.asks == []
    assert q.jobs[1].blocked_by == "ConcurrencyConstraint"


def test_an_overlap_policy_sees_a_job_asking_as_a_run_of_its_schedule() -> None:
    q = ProgramQueue(PROGRAM)
    _asking(q, f"{SCHEDULE}@v1.1", overlap=OverlapPolicy.CANCEL_OTHER.value)
    add_job(
        q, replace(job(f"{SCHEDULE}@v1.2", triggered_at=T0 + 1), overlap=OverlapPolicy.CANCEL_OTHER.value)
    )
    assert check(q, T0 + 1, capped=True) == [] and q.asks == [] and q.stops == []


def test_a_job_cancelled_while_it_asks_withdraws_its_ask_and_a_late_grant_gives_the_slot_back() -> None:
    q = ProgramQueue(PROGRAM)
    run_id = _asking(q, f"{SCHEDULE}@v1.1")
    assert cancel(q, SCHEDULE, None, "deleted", T0 + 1) == 1
    assert q.releases == [run_id]
    q.releases.clear()
    assert slot_granted(q, run_id, T0 + 2) is None and q.releases == [run_id]


def test_the_queue_round_trips_what_it_owes_the_cap_queue() -> None:
    q = ProgramQueue(PROGRAM)
    run_id = _asking(q, f"{SCHEDULE}@v1.1")
    q.releases.append("x")
    again = ProgramQueue.from_json(q.to_json())
    assert again.jobs[0].state == PENDING_CAP and again.releases == ["x"]
    assert slot_granted(again, run_id, T0 + 1) is not None and again.capped == [run_id]
