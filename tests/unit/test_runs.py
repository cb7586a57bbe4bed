"""Run state machine of seed 004 (check_transition, TRANSITIONS) and RunRecord bookkeeping (apply_transition)."""

from __future__ import annotations

import copy
import itertools
import json

import pytest

from scheduler.domain.runs import (
    TERMINAL,
    TRANSITIONS,
    InvalidTransition,
    RunRecord,
    RunStatus,
    apply_transition,
    check_transition,
)

pytestmark = pytest.mark.unit

S = RunStatus
LIVE = [S.PENDING, S.STARTING, S.RUNNING, S.SUSPENDED, S.RESUMING, S.STOPPING]
ENDS = [S.COMPLETED, S.FAILED, S.KILLED]

# The happy path through suspend/resume and a stop request, edge by edge.
LIFECYCLE = [S.PENDING, S.STARTING, S.RUNNING, S.SUSPENDED, S.RESUMING, S.RUNNING, S.STOPPING, S.KILLED]

VALID = sorted(
    {
        *itertools.pairwise(LIFECYCLE),
        (S.RUNNING, S.COMPLETED),
        *((live, end) for live in LIVE for end in (S.FAILED, S.KILLED)),
    }
)

INVALID = [
    (S.COMPLETED, S.RUNNING),
    *((S.FAILED, new) for new in S),
    (S.PENDING, S.COMPLETED),
    (S.RUNNING, S.RESUMING),
    (S.SUSPENDED, S.COMPLETED),
    (S.STOPPING, S.RUNNING),
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


@pytest.mark.parametrize("new", [S.PENDING, S.STARTING, *ENDS], ids=lambda s: s.value)
def test_first_seen_run_may_begin_pending_starting_or_ended(new: RunStatus) -> None:
    check_transition(None, new)


@pytest.mark.parametrize("new", [S.RUNNING, S.SUSPENDED, S.RESUMING, S.STOPPING], ids=lambda s: s.value)
def test_first_seen_run_cannot_begin_mid_flight(new: RunStatus) -> None:
    with pytest.raises(InvalidTransition, match=new.value):
        check_transition(None, new)


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

    assert r.transitions == [
        ["STARTING", 10],
        ["RUNNING", 20],
        ["SUSPENDED", 30],
        ["RESUMING", 40],
        ["RUNNING", 50],
        ["STOPPING", 60],
        ["KILLED", 70],
    ]
    assert r.created_at == 1
    assert r.started_at == 10
    assert r.running_at == 20  # the first time it ran; resuming does not move it
    assert r.ended_at == 70
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


@pytest.mark.parametrize("end", [S.FAILED, S.KILLED], ids=lambda s: s.value)
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
    }
    assert {k: out[k] for k in expected} == expected
    out["transitions"].append(["RUNNING", 20])  # a copy, not the record's own list
    assert r.transitions == [["STARTING", 10]]
