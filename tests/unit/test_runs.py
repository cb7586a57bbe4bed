"""Run state machine of seed 004 (check_transition, TRANSITIONS, judge) and RunRecord bookkeeping
(apply_transition, keep_records)."""

from __future__ import annotations

import copy
import itertools
import json

import pytest

from scheduler.domain.runs import (
    MAX_RUNS_KEPT,
    TERMINAL,
    TRANSITIONS,
    InvalidTransition,
    RunRecord,
    RunStatus,
    Verdict,
    apply_transition,
    check_transition,
    judge,
    keep_records,
)

pytestmark = pytest.mark.unit

S = RunStatus
LIVE = [
    S.PENDING,
    S.PREPARING,
    S.STARTING,
    S.REQUESTING_RESOURCES,
    S.INITIALIZING,
    S.RUNNING,
    S.SUSPENDING,
    S.SUSPENDED,
    S.RESUMING,
    S.STOPPING,
]
ENDS = [S.COMPLETED, S.FAILED, S.STOPPED, S.KILLED]

# Seed 004's path of a Spark program through suspend/resume and a user's stop, edge by edge.
LIFECYCLE = [
    S.PENDING,
    S.PREPARING,
    S.STARTING,
    S.REQUESTING_RESOURCES,
    S.INITIALIZING,
    S.RUNNING,
    S.SUSPENDING,
    S.SUSPENDED,
    S.RESUMING,
    S.RUNNING,
    S.STOPPING,
    S.STOPPED,
]

VALID = sorted(
    {
        *itertools.pairwise(LIFECYCLE),
        (S.RUNNING, S.COMPLETED),
        (S.STOPPING, S.COMPLETED),  # it ended before the stop bit
        (S.PENDING, S.STOPPED),  # a stop before any launcher took it
        (S.PENDING, S.COMPLETED),  # an external system that reports only the end
        (S.STARTING, S.RUNNING),  # a command: running at once
        *((live, end) for live in LIVE for end in (S.FAILED, S.KILLED)),
    }
)

INVALID = [
    (S.COMPLETED, S.RUNNING),
    *((S.FAILED, new) for new in S),
    (S.PREPARING, S.RUNNING),  # never started
    (S.RUNNING, S.RESUMING),
    (S.RUNNING, S.STOPPED),  # a stop goes through STOPPING
    (S.RUNNING, S.PENDING),
    (S.SUSPENDED, S.COMPLETED),
    (S.STOPPING, S.RUNNING),
    (S.STOPPED, S.RUNNING),
]


def test_every_status_has_a_transition_entry() -> None:
    assert set(TRANSITIONS) == set(RunStatus)


@pytest.mark.parametrize(("current", "new"), VALID, ids=lambda s: s.value)
def test_valid_transition_accepted(current: RunStatus, new: RunStatus) -> None:
    check_transition(current, new)  # does not raise
    assert new in TRANSITIONS[current]


@pytest.mark.parametrize(("current", "new"), INVALID, ids=lambda s: s.value)
def test_invalid_transition_rejected(current: RunStatus, new: RunStatus) -> None:
    with pytest.raises(InvalidTransition, match=f"{current.value} -> {new.value}"):
        check_transition(current, new)


@pytest.mark.parametrize("end", ENDS, ids=lambda s: s.value)
def test_terminal_states_have_no_way_out(end: RunStatus) -> None:
    assert TRANSITIONS[end] == frozenset()
    for new in RunStatus:
        with pytest.raises(InvalidTransition):
            check_transition(end, new)


@pytest.mark.parametrize("state", list(RunStatus), ids=lambda s: s.value)
def test_no_state_transitions_to_itself(state: RunStatus) -> None:
    with pytest.raises(InvalidTransition):
        check_transition(state, state)


@pytest.mark.parametrize(("current", "new"), list(itertools.product(RunStatus, RunStatus)))
def test_check_transition_agrees_with_table(current: RunStatus, new: RunStatus) -> None:
    if new in TRANSITIONS[current]:
        check_transition(current, new)
    else:
        with pytest.raises(InvalidTransition):
            check_transition(current, new)


def test_invalid_transition_is_a_value_error() -> None:
    assert issubclass(InvalidTransition, ValueError)


@pytest.mark.parametrize("new", list(RunStatus), ids=lambda s: s.value)
def test_a_run_first_seen_may_be_in_any_state(new: RunStatus) -> None:
    check_transition(None, new)  # (one started elsewhere is first reported mid-flight)


# --- judge: what a report does ---------------------------------------------------------------------


def test_a_reordered_running_after_completed_is_refused() -> None:
    assert judge(S.COMPLETED, S.RUNNING)[0] is Verdict.REFUSED


def test_a_report_of_a_run_known_to_have_ended_is_refused() -> None:
    verdict, why = judge(None, S.RUNNING, ended=True)
    assert verdict is Verdict.REFUSED and "already ended" in why


def test_a_second_launchers_claim_is_refused_and_the_holders_repeat_is_a_renewal() -> None:
    verdict, why = judge(S.PREPARING, S.PREPARING, holder="l1", launcher="l2")
    assert verdict is Verdict.REFUSED and "held by l1" in why
    assert judge(S.RUNNING, S.RUNNING, holder="l1", launcher="l1") == (Verdict.REPEAT, "")
    assert judge(S.RUNNING, S.COMPLETED, holder="l1", launcher="l1") == (Verdict.ACCEPTED, "")


def test_the_scheduler_itself_may_end_a_held_run() -> None:  # a lost lease, a stop before it started
    assert judge(S.RUNNING, S.FAILED, holder="l1")[0] is Verdict.ACCEPTED
    assert judge(S.PREPARING, S.STOPPED, holder="l1")[0] is Verdict.ACCEPTED


@pytest.mark.parametrize(
    ("state", "user_facing"),
    [
        (S.STOPPING, "RUNNING"),
        (S.SUSPENDING, "RUNNING"),
        (S.RESUMING, "SUSPENDED"),
        (S.PREPARING, "PREPARING"),
    ],
)
def test_internal_states_show_as_seed_004s_user_facing_status(state: RunStatus, user_facing: str) -> None:
    assert state.program_status == user_facing


@pytest.mark.parametrize("status", list(RunStatus), ids=lambda s: s.value)
def test_terminal_property(status: RunStatus) -> None:
    assert status.terminal is (status in ENDS)
    assert (status in TERMINAL) is status.terminal


def test_status_values_are_their_names() -> None:
    for status in RunStatus:
        assert status.value == status.name
        assert RunStatus(status.name) is status


# --- apply_transition ------------------------------------------------------------------------------


def record(status: RunStatus = S.PENDING, **kw: object) -> RunRecord:
    return RunRecord(run_id="r1", program="ns/app/type/name", status=status.value, created_at=1, **kw)  # type: ignore[arg-type]


def test_apply_full_lifecycle_records_every_transition_and_timestamps() -> None:
    r = record()
    for at, status in enumerate(LIFECYCLE[1:], start=1):
        assert apply_transition(r, status.value, at * 10) is True
        assert r.status == status.value

    assert r.transitions == [[status.value, at * 10] for at, status in enumerate(LIFECYCLE[1:], start=1)]
    assert r.created_at == 1
    assert r.started_at == 20
    assert r.running_at == 50  # the first time it ran; resuming does not move it
    assert r.ended_at == 110
    assert r.error == ""


def test_apply_sets_started_and_running_at() -> None:
    r = record()
    assert r.started_at is None and r.running_at is None and r.ended_at is None
    apply_transition(r, "STARTING", 100)
    assert (r.started_at, r.running_at, r.ended_at) == (100, None, None)
    apply_transition(r, "RUNNING", 200)
    assert (r.started_at, r.running_at, r.ended_at) == (100, 200, None)


def test_apply_completed_sets_ended_at_without_error() -> None:
    r = record(S.RUNNING, started_at=5, running_at=6)
    assert apply_transition(r, "COMPLETED", 300) is True
    assert r.status == "COMPLETED"
    assert r.ended_at == 300
    assert r.error == ""
    assert r.transitions == [["COMPLETED", 300]]


@pytest.mark.parametrize("end", [S.FAILED, S.KILLED], ids=lambda s: s.value)  # (STOPPED: via STOPPING)
def test_apply_failure_records_error_and_end(end: RunStatus) -> None:
    r = record(S.STARTING, started_at=5)
    assert apply_transition(r, end.value, 400, error="exit code 1\nboom") is True
    assert r.status == end.value
    assert r.ended_at == 400
    assert r.error == "exit code 1\nboom"
    assert r.running_at is None


def test_apply_accepts_enum_members_too() -> None:
    r = record()
    assert apply_transition(r, RunStatus.STARTING, 7) is True
    assert r.status == "STARTING"
    assert r.transitions == [["STARTING", 7]]


def test_apply_repeat_is_ignored() -> None:
    r = record()
    apply_transition(r, "STARTING", 10)
    apply_transition(r, "RUNNING", 20)
    before = copy.deepcopy(r)
    assert apply_transition(r, "RUNNING", 99) is False
    assert r == before


def test_apply_repeat_of_terminal_keeps_first_end_and_error() -> None:
    r = record(S.RUNNING)
    apply_transition(r, "FAILED", 10, error="first")
    before = copy.deepcopy(r)
    assert apply_transition(r, "FAILED", 20, error="second") is False
    assert r == before
    assert (r.ended_at, r.error) == (10, "first")


@pytest.mark.parametrize(
    ("current", "new"), [(c, n) for c, n in INVALID if c is not n], ids=lambda s: s.value
)
def test_apply_invalid_transition_leaves_record_unchanged(current: RunStatus, new: RunStatus) -> None:
    r = record(current, started_at=1, running_at=2)
    before = copy.deepcopy(r)
    assert apply_transition(r, new.value, 500, error="late") is False
    assert r == before


def test_apply_late_event_after_end_is_ignored() -> None:
    r = record(S.RUNNING)
    apply_transition(r, "COMPLETED", 10)
    before = copy.deepcopy(r)
    for status in ("RUNNING", "FAILED", "KILLED", "STOPPING"):
        assert apply_transition(r, status, 20, error="late") is False
    assert r == before


def test_to_json_is_a_plain_json_dict() -> None:
    r = record(job_id="j1", schedule="acme/nightly", arguments={"day": "2026-11-20"})
    apply_transition(r, "STARTING", 10)
    out = r.to_json()
    assert json.loads(json.dumps(out)) == out
    expected = {
        "run_id": "r1",
        "program": "ns/app/type/name",
        "status": "STARTING",
        "job_id": "j1",
        "schedule": "acme/nightly",
        "arguments": {"day": "2026-11-20"},
        "created_at": 1,
        "started_at": 10,
        "running_at": None,
        "ended_at": None,
        "error": "",
        "transitions": [["STARTING", 10]],
        "launcher": "",
        "program_status": "STARTING",
    }
    assert {k: out[k] for k in expected} == expected
    out["transitions"].append(["RUNNING", 20])  # a copy, not the record's own list
    assert r.transitions == [["STARTING", 10]]


def test_a_claim_names_the_records_holder_and_another_launcher_cannot_move_it() -> None:
    r = record()
    assert apply_transition(r, "PREPARING", 10, launcher="l1") is True
    assert r.launcher == "l1"
    assert apply_transition(r, "STARTING", 20, launcher="l2") is False
    assert apply_transition(r, "STARTING", 20, launcher="l1") is True


def test_records_kept_are_every_live_run_and_the_newest_ended_ones() -> None:
    live = record(S.RUNNING)
    ended = [
        RunRecord(run_id=f"e{i}", program="p", status="COMPLETED", created_at=i, ended_at=i)
        for i in range(MAX_RUNS_KEPT + 5)
    ]
    kept = keep_records([live, *ended], now=1_000)
    assert kept[0] is live  # however old, a live run's record stays
    assert [r.run_id for r in kept[1:]] == [f"e{i}" for i in range(5, MAX_RUNS_KEPT + 5)]


def test_ended_records_older_than_the_age_limit_go_and_a_count_of_zero_keeps_live_runs_only() -> None:
    live = record(S.RUNNING)
    old, young = (
        RunRecord(run_id=i, program="p", status="FAILED", ended_at=at) for i, at in (("o", 10), ("y", 90))
    )
    assert keep_records([old, live, young], now=100, max_runs=10, max_age_ms=50) == [live, young]
    assert keep_records([old, live, young], now=100, max_runs=0) == [live]


def test_a_record_round_trips_through_json_and_ignores_what_it_does_not_know() -> None:
    r = record(launcher="l1")
    d = r.to_json()
    assert RunRecord.from_json({**d, "later_field": 1}) == r


def test_a_claim_launched_again_may_be_taken_by_another_launcher() -> None:
    r = record()
    apply_transition(r, "PREPARING", 10, launcher="l1")
    assert apply_transition(r, "PENDING", 20) is True  # l1 was lost before it started it
    assert r.launcher == ""
    assert apply_transition(r, "PREPARING", 30, launcher="l2") is True and r.launcher == "l2"
