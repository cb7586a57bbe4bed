"""apply_command: every row of the command semantics, and the validation every command goes through."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from scheduler.domain.commands import CommandRejected, apply_command, validate_command
from scheduler.domain.model import (
    MAX_DATA_BYTES,
    MAX_DATA_ENTRIES,
    MAX_PAUSE_NOTE,
    TOPIC_PATTERN,
    Action,
    CatchUpPolicy,
    CronTrigger,
    FrequencyTrigger,
    InvalidSchedule,
    Paused,
    PauseRequest,
    Schedule,
    ScheduleCommand,
    ScheduleKey,
    ScheduleState,
    TimeUnit,
)
from scheduler.http.messages import MessageIn

pytestmark = pytest.mark.unit

KEY = ScheduleKey("acme", "nightly-report")
T_CREATE = 1_704_067_200_000
T_LATER = T_CREATE + 3_600_000


def schedule(**changes: Any) -> Schedule:
    base = Schedule(KEY, FrequencyTrigger(TimeUnit.MINUTES, 5), "reports", {"kind": "daily"})
    return dataclasses.replace(base, **changes)


def insert(s: Schedule | None = None) -> ScheduleCommand:
    return ScheduleCommand(KEY, Action.INSERT, schedule() if s is None else s)


def command(action: Action, s: Schedule | None = None) -> ScheduleCommand:
    return ScheduleCommand(KEY, action, s)


def existing(enabled: bool = True, version: int = 1) -> ScheduleState:
    return ScheduleState(schedule(enabled=enabled), T_CREATE, T_CREATE, T_CREATE, version)


# --- INSERT -------------------------------------------------------------------------------------


def test_insert_of_a_new_schedule_creates_it_disabled_by_default() -> None:
    state = apply_command(None, insert(), T_CREATE)
    assert state == ScheduleState(schedule(), T_CREATE, T_CREATE, T_CREATE, 1)
    assert state.schedule.enabled is False


def test_insert_with_enabled_true_creates_it_enabled() -> None:
    state = apply_command(None, insert(schedule(enabled=True)), T_CREATE)
    assert state is not None and state.schedule.enabled is True
    assert (state.created_at, state.updated_at, state.active_since, state.version) == (
        T_CREATE,
        T_CREATE,
        T_CREATE,
        1,
    )


def test_insert_identical_to_the_existing_schedule_is_a_no_op_returning_the_same_object() -> None:
    current = apply_command(None, insert(), T_CREATE)
    assert apply_command(current, insert(), T_LATER) is current


def test_insert_that_differs_only_in_the_enabled_flag_is_a_no_op_keeping_the_current_state() -> None:
    # a replayed (enabled) light-scheduler INSERT must not undo a later DISABLE, nor the reverse
    current = existing(enabled=False)
    assert apply_command(current, insert(schedule(enabled=True)), T_LATER) is current


@pytest.mark.parametrize(
    "different",
    [
        schedule(topic="other-topic"),
        schedule(data={"kind": "weekly"}),
        schedule(trigger=CronTrigger("0 2 * * *")),
        schedule(catch_up=CatchUpPolicy.EACH),
    ],
)
def test_insert_of_a_different_definition_under_an_existing_key_is_refused(different: Schedule) -> None:
    current = apply_command(None, insert(), T_CREATE)
    with pytest.raises(CommandRejected, match="already exists"):
        apply_command(current, insert(different), T_LATER)


# --- UPDATE -------------------------------------------------------------------------------------


def test_update_of_a_missing_schedule_is_refused() -> None:
    with pytest.raises(CommandRejected, match="does not exist"):
        apply_command(None, command(Action.UPDATE, schedule()), T_LATER)


@pytest.mark.parametrize("was_enabled", [True, False])
def test_update_replaces_the_definition_keeps_enabled_bumps_version_and_restarts_timing(
    was_enabled: bool,
) -> None:
    current = existing(enabled=was_enabled, version=3)
    new_def = schedule(
        topic="reports-v2", trigger=CronTrigger("0 3 * * *", "Europe/Paris"), enabled=not was_enabled
    )
    state = apply_command(current, command(Action.UPDATE, new_def), T_LATER)
    assert state is not None
    assert state.schedule == dataclasses.replace(new_def, enabled=was_enabled)
    assert state.version == 4
    assert state.active_since == T_LATER
    assert state.updated_at == T_LATER
    assert state.created_at == T_CREATE


def test_update_with_the_same_definition_still_bumps_version_and_restarts_timing() -> None:
    current = existing()
    state = apply_command(current, command(Action.UPDATE, current.schedule), T_LATER)
    assert state is not current
    assert state is not None and state.version == 2 and state.active_since == T_LATER


# --- DELETE -------------------------------------------------------------------------------------


def test_delete_of_an_existing_schedule_returns_none() -> None:
    assert apply_command(existing(), command(Action.DELETE), T_LATER) is None


def test_delete_of_a_missing_schedule_is_refused() -> None:
    with pytest.raises(CommandRejected, match="does not exist"):
        apply_command(None, command(Action.DELETE), T_LATER)


def test_delete_needs_no_schedule_but_accepts_one() -> None:
    assert apply_command(existing(), command(Action.DELETE, schedule()), T_LATER) is None


# --- ENABLE / DISABLE -----------------------------------------------------------------------------


def test_enable_of_a_disabled_schedule_resumes_it_from_now() -> None:
    current = existing(enabled=False)
    state = apply_command(current, command(Action.ENABLE), T_LATER)
    assert state is not None
    assert state.schedule == dataclasses.replace(current.schedule, enabled=True)
    assert state.active_since == T_LATER  # missed fires while disabled are not owed
    assert state.updated_at == T_LATER
    assert state.created_at == T_CREATE
    assert state.version == 2


def test_disable_of_an_enabled_schedule_pauses_it_and_keeps_active_since() -> None:
    current = existing(enabled=True)
    state = apply_command(current, command(Action.DISABLE), T_LATER)
    assert state is not None
    assert state.schedule.enabled is False
    assert state.active_since == T_CREATE
    assert state.updated_at == T_LATER
    assert state.version == 2


@pytest.mark.parametrize(("action", "enabled"), [(Action.ENABLE, True), (Action.DISABLE, False)])
def test_enable_of_enabled_and_disable_of_disabled_are_no_ops(action: Action, enabled: bool) -> None:
    current = existing(enabled=enabled)
    assert apply_command(current, command(action), T_LATER) is current


@pytest.mark.parametrize("action", [Action.ENABLE, Action.DISABLE])
def test_enable_or_disable_of_a_missing_schedule_is_refused(action: Action) -> None:
    with pytest.raises(CommandRejected, match="does not exist"):
        apply_command(None, command(action), T_LATER)


def test_pause_then_resume_round_trip() -> None:
    state = apply_command(None, insert(schedule(enabled=True)), T_CREATE)
    paused = apply_command(state, command(Action.DISABLE), T_CREATE + 10)
    resumed = apply_command(paused, command(Action.ENABLE), T_CREATE + 20)
    assert resumed is not None
    assert resumed.schedule == schedule(enabled=True)
    assert resumed.active_since == T_CREATE + 20
    assert resumed.version == 3


def pause(
    note: str | None = None, until: int | None = None, action: Action = Action.DISABLE
) -> ScheduleCommand:
    return ScheduleCommand(KEY, action, pause=PauseRequest(note, until))


def test_a_disable_keeps_since_when_by_whom_why_and_until_when_and_an_enable_clears_it() -> None:
    paused = apply_command(existing(), pause("db migration", T_LATER + 60_000), T_LATER, by="ops")
    assert paused is not None and not paused.schedule.enabled
    assert paused.paused == Paused(T_LATER, "db migration", "ops", T_LATER + 60_000)
    plain = apply_command(existing(), command(Action.DISABLE), T_LATER, by="ops")
    assert plain is not None and plain.paused == Paused(T_LATER, None, "ops", None)
    resumed = apply_command(paused, command(Action.ENABLE), T_LATER + 5)
    assert resumed is not None and resumed.paused is None and resumed.schedule.enabled


def test_an_update_keeps_the_pause_and_a_disable_of_a_disabled_schedule_changes_only_what_it_says() -> None:
    paused = apply_command(existing(), pause("why", T_LATER + 60_000), T_LATER, by="ops")
    assert paused is not None
    updated = apply_command(paused, command(Action.UPDATE, schedule(data={"x": "y"})), T_LATER + 1)
    assert updated is not None and updated.paused == paused.paused and not updated.schedule.enabled
    assert apply_command(paused, pause("why", T_LATER + 60_000), T_LATER + 2) is paused  # (a replay)
    assert apply_command(paused, command(Action.DISABLE), T_LATER + 2) is paused
    again = apply_command(paused, pause("longer", T_LATER + 120_000), T_LATER + 3, by="dba")
    assert again is not None and again.version == paused.version + 1
    assert again.paused == Paused(T_LATER + 3, "longer", "dba", T_LATER + 120_000)


def test_the_resume_of_a_pause_enables_only_a_schedule_still_in_that_pause() -> None:
    until = T_LATER + 60_000
    paused = apply_command(existing(), pause("why", until), T_LATER)
    resume = pause(None, until, Action.ENABLE)
    resumed = apply_command(paused, resume, until + 3)
    assert resumed is not None and resumed.schedule.enabled and resumed.paused is None
    assert resumed.active_since == until + 3
    # enabled by hand, then paused again without an end: the old resume changes nothing
    again = apply_command(
        apply_command(paused, command(Action.ENABLE), T_LATER + 1), command(Action.DISABLE), T_LATER + 2
    )
    assert apply_command(again, resume, until + 3) is again
    other = apply_command(paused, pause("longer", until + 1), T_LATER + 1)  # (another pause)
    assert apply_command(other, resume, until + 3) is other
    assert apply_command(None, resume, until + 3) is None  # (deleted since: nothing, no refusal)


@pytest.mark.parametrize(
    ("cmd", "field"),
    [
        (pause("x" * (MAX_PAUSE_NOTE + 1)), "note"),
        (pause("bell\a"), "note"),
        (pause(None, -1), "until"),
        (pause(None, 8_000_000_000_000), "until"),
        (pause(None, None, Action.ENABLE), "until"),
        (ScheduleCommand(KEY, Action.DELETE, pause=PauseRequest("x")), "pause"),
    ],
)
def test_a_pause_that_cannot_be_kept_is_refused_naming_its_field(cmd: ScheduleCommand, field: str) -> None:
    with pytest.raises(InvalidSchedule) as exc:
        validate_command(cmd)
    assert exc.value.field == field
    validate_command(pause("two lines\nand\ttabs", T_LATER))


# --- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (schedule(topic="bad topic!"), "topic"),
        (schedule(topic=""), "topic"),
        (schedule(topic="x" * 250), "topic"),
        (schedule(topic="."), "topic"),  # (Kafka refuses both: a fire for one waits for metadata)
        (schedule(topic=".."), "topic"),
        (schedule(data={"k": "v" * MAX_DATA_BYTES}), "data"),
        (schedule(data={f"k{i}": "" for i in range(MAX_DATA_ENTRIES + 1)}), "data"),
        (schedule(catch_up_window_ms=-1), "catchUpWindowMs"),
        (schedule(catch_up_window_ms=8 * 86_400_000), "catchUpWindowMs"),
        (schedule(trigger=FrequencyTrigger(TimeUnit.SECONDS, 0)), "trigger.time"),
        (schedule(trigger=FrequencyTrigger(TimeUnit.SECONDS, 1, -5)), "trigger.start"),
        (schedule(trigger=CronTrigger("61 * * * *")), "trigger.expression"),
        (schedule(trigger=CronTrigger("0 0 30 2 *")), "trigger.expression"),
        (schedule(trigger=CronTrigger("* * * * *", "Nowhere/Zone")), "trigger.timezone"),
    ],
)
@pytest.mark.parametrize("action", [Action.INSERT, Action.UPDATE])
def test_invalid_schedule_fields_are_rejected_with_the_field_name(
    bad: Schedule, field: str, action: Action
) -> None:
    current = None if action is Action.INSERT else existing()
    with pytest.raises(InvalidSchedule) as exc:
        apply_command(current, command(action, bad), T_LATER)
    assert exc.value.field == field


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab._-!", max_size=5) | st.sampled_from([".", "..", "...", "x" * 249, "x" * 250]))
def test_the_topic_pattern_is_kafkas_rule_in_python_and_in_pydantics_engine(topic: str) -> None:
    """Kafka's Topic.validate: 1-249 of [a-zA-Z0-9._-], neither "." nor "..". The pattern has no look-ahead:
    pydantic's engine (the HTTP bodies) has none, and must agree with Python's (the domain)."""
    kafkas = 1 <= len(topic) <= 249 and topic not in (".", "..") and re.fullmatch(r"[a-zA-Z0-9._-]+", topic)
    assert bool(re.fullmatch(TOPIC_PATTERN, topic)) == bool(kafkas)
    try:
        MessageIn(id="m", topic=topic, deliverAt=0)
        pydantics = True
    except ValidationError:
        pydantics = False
    assert pydantics == bool(kafkas)


@pytest.mark.parametrize(
    ("key", "field"),
    [
        (ScheduleKey("", "n"), "tenant"),
        (ScheduleKey("a/b", "n"), "tenant"),
        (ScheduleKey("t" * 129, "n"), "tenant"),
        (ScheduleKey("t", ""), "name"),
        (ScheduleKey("t", "a/b"), "name"),
        (ScheduleKey("t", "bad\nname"), "name"),
        (ScheduleKey("t", "n" * 257), "name"),
    ],
)
@pytest.mark.parametrize("action", list(Action))
def test_invalid_keys_are_rejected_for_every_action(key: ScheduleKey, field: str, action: Action) -> None:
    s = dataclasses.replace(schedule(), key=key)
    cmd = ScheduleCommand(key, action, s)
    with pytest.raises(InvalidSchedule) as exc:
        apply_command(None, cmd, T_LATER)
    assert exc.value.field == field


def test_schedule_key_different_from_the_command_key_is_rejected() -> None:
    other = dataclasses.replace(schedule(), key=ScheduleKey("acme", "someone-else"))
    for action in (Action.INSERT, Action.UPDATE):
        with pytest.raises(InvalidSchedule) as exc:
            apply_command(existing(), command(action, other), T_LATER)
        assert exc.value.field == "schedule"


@pytest.mark.parametrize("action", [Action.INSERT, Action.UPDATE])
def test_insert_or_update_without_a_schedule_is_rejected(action: Action) -> None:
    with pytest.raises(InvalidSchedule) as exc:
        apply_command(existing(), command(action, None), T_LATER)
    assert exc.value.field == "schedule"


def test_validation_happens_before_looking_at_the_current_state() -> None:
    # an identical-looking replay of an invalid INSERT is not a no-op: it is invalid
    bad = schedule(topic="bad topic!")
    current = ScheduleState(bad, T_CREATE, T_CREATE, T_CREATE)
    with pytest.raises(InvalidSchedule):
        apply_command(current, insert(bad), T_LATER)


def test_data_exactly_at_the_size_limit_is_accepted() -> None:
    s = schedule(data={"k": "v" * (MAX_DATA_BYTES - 1)})
    validate_command(insert(s))


def test_a_refused_command_leaves_the_current_state_untouched() -> None:
    current = existing(enabled=False)
    snapshot = dataclasses.replace(current)
    with pytest.raises(CommandRejected):
        apply_command(current, insert(schedule(topic="elsewhere")), T_LATER)
    assert current == snapshot
