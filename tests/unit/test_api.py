"""HTTP edge models: the trigger discriminator, field names in errors, and the JSON view round trip."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from scheduler.domain.model import (
    Action,
    CatchUpPolicy,
    CronTrigger,
    FrequencyTrigger,
    OutputFormat,
    Paused,
    Schedule,
    ScheduleKey,
    ScheduleState,
    TimeUnit,
)
from scheduler.domain.triggers.kinds import CronTriggerIn, FrequencyTriggerIn
from scheduler.http.api import (
    ScheduleBody,
    ScheduleIn,
    TaskDefinitionIn,
    schedule_json,
    state_from_json,
    validation_errors,
)
from scheduler.wire.light import command_from_task_definition_record

pytestmark = pytest.mark.unit

T0 = 1_704_067_200_000
KEY = ScheduleKey("acme", "nightly-report")


def body(trigger: Any, **extra: Any) -> dict[str, Any]:
    return {"tenant": "acme", "name": "nightly-report", "topic": "reports", "trigger": trigger, **extra}


def errors_of(payload: dict[str, Any]) -> list[dict[str, str]]:
    with pytest.raises(ValidationError) as exc:
        ScheduleIn.model_validate(payload)
    return validation_errors(exc.value)


# --- trigger discriminator ------------------------------------------------------------------------


def test_cron_trigger_is_selected_by_type_cron_with_utc_by_default() -> None:
    parsed = ScheduleIn.model_validate(body({"type": "cron", "expression": "*/5 * * * * *"}))
    assert isinstance(parsed.trigger, CronTriggerIn)
    assert parsed.trigger.timezone == "UTC"
    assert parsed.to_schedule(parsed.key()) == Schedule(KEY, CronTrigger("*/5 * * * * *", "UTC"), "reports")


def test_frequency_trigger_is_selected_by_type_frequency() -> None:
    parsed = ScheduleIn.model_validate(
        body(
            {"type": "frequency", "timeUnit": "SECONDS", "time": 30, "start": T0},
            enabled=True,
            catchUp="EACH",
        )
    )
    assert isinstance(parsed.trigger, FrequencyTriggerIn)
    assert parsed.to_schedule(parsed.key()) == Schedule(
        KEY, FrequencyTrigger(TimeUnit.SECONDS, 30, T0), "reports", enabled=True, catch_up=CatchUpPolicy.EACH
    )


def test_defaults_of_a_schedule_body() -> None:
    parsed = ScheduleBody.model_validate(
        {"topic": "t", "trigger": {"type": "frequency", "timeUnit": "DAYS", "time": 1}}
    )
    s = parsed.to_schedule(KEY)
    assert (s.enabled, s.catch_up, s.catch_up_window_ms, s.data) == (
        False,
        CatchUpPolicy.COALESCE,
        3_600_000,
        {},
    )
    assert s.trigger == FrequencyTrigger(TimeUnit.DAYS, 1, None)


def test_a_trigger_without_type_is_rejected_on_the_trigger_field() -> None:
    assert [e["field"] for e in errors_of(body({"expression": "* * * * *"}))] == ["trigger"]


def test_an_unknown_trigger_type_is_rejected_on_the_trigger_field() -> None:
    [error] = errors_of(body({"type": "event", "expression": "* * * * *"}))
    assert error["field"] == "trigger"
    assert "event" in error["message"]


def test_fields_of_the_other_trigger_type_are_rejected() -> None:
    fields = {e["field"] for e in errors_of(body({"type": "cron", "timeUnit": "SECONDS", "time": 1}))}
    assert fields == {"trigger.expression", "trigger.timeUnit", "trigger.time"}
    [error] = errors_of(body({"type": "frequency", "timeUnit": "SECONDS", "time": 1, "expression": "x"}))
    assert error["field"] == "trigger.expression"


@pytest.mark.parametrize(
    ("trigger", "field"),
    [
        ({"type": "frequency", "timeUnit": "SECONDS", "time": 0}, "trigger.time"),
        ({"type": "frequency", "timeUnit": "SECONDS", "time": 1_000_000_001}, "trigger.time"),
        ({"type": "frequency", "timeUnit": "WEEKS", "time": 1}, "trigger.timeUnit"),
        ({"type": "frequency", "timeUnit": "SECONDS", "time": 1, "start": -1}, "trigger.start"),
        ({"type": "cron"}, "trigger.expression"),
    ],
)
def test_invalid_trigger_fields_are_named_without_the_union_tag(trigger: dict[str, Any], field: str) -> None:
    assert [e["field"] for e in errors_of(body(trigger))] == [field]


def test_unknown_top_level_fields_are_rejected() -> None:
    [error] = errors_of(body({"type": "cron", "expression": "* * * * *"}, colour="blue"))
    assert error["field"] == "colour"


def test_a_data_key_named_like_a_trigger_type_keeps_its_name_in_errors() -> None:
    [error] = errors_of(body({"type": "cron", "expression": "* * * * *"}, data={"frequency": 5}))
    assert error["field"] == "data.frequency"


# --- JSON view round trip ---------------------------------------------------------------------------

STATES = [
    ScheduleState(
        Schedule(
            KEY,
            CronTrigger("0 30 2 * * *", "Europe/Paris"),
            "reports",
            {"a": "1", "ü": "✓"},
            enabled=True,
            catch_up=CatchUpPolicy.SKIP,
            catch_up_window_ms=0,
        ),
        created_at=T0,
        updated_at=T0 + 1,
        active_since=T0 + 2,
        version=7,
    ),
    ScheduleState(Schedule(KEY, FrequencyTrigger(TimeUnit.MINUTES, 5), "reports"), T0, T0, T0),
    ScheduleState(
        Schedule(KEY, FrequencyTrigger(TimeUnit.SECONDS, 5), "tasks", output=OutputFormat.TASK_DEFINITION),
        T0,
        T0,
        T0,
    ),
    ScheduleState(
        Schedule(
            KEY, FrequencyTrigger(TimeUnit.MILLISECONDS, 250, T0 - 5), "reports", catch_up=CatchUpPolicy.EACH
        ),
        T0,
        T0,
        T0,
        2,
    ),
    ScheduleState(
        Schedule(KEY, CronTrigger("0 0 3 * * *"), "reports"),
        T0,
        T0,
        T0,
        3,
        Paused(T0 + 5, "why", "ops", T0 + 9),
    ),
    ScheduleState(Schedule(KEY, CronTrigger("* * * * *"), "reports", max_fires=5), T0, T0, T0, 4, fires=3),
]


@pytest.mark.parametrize(
    "state",
    STATES,
    ids=[
        "cron",
        "frequency-without-start",
        "task-definition-output",
        "frequency-with-start",
        "paused",
        "limited",
    ],
)
@pytest.mark.parametrize("next_fire_at", [None, T0 + 60_000])
def test_schedule_json_round_trips_through_state_from_json(
    state: ScheduleState, next_fire_at: int | None
) -> None:
    as_json = schedule_json(state, next_fire_at)
    assert state_from_json(as_json) == state
    # and through real JSON text, as another worker would receive it
    assert state_from_json(json.loads(json.dumps(as_json))) == state
    assert as_json["nextFireAt"] == next_fire_at


def test_schedule_json_shape() -> None:
    assert schedule_json(STATES[0], T0 + 60_000) == {
        "key": "acme/nightly-report",
        "tenant": "acme",
        "name": "nightly-report",
        "trigger": {"type": "cron", "expression": "0 30 2 * * *", "timezone": "Europe/Paris"},
        "triggerText": "cron 0 30 2 * * * (Europe/Paris)",
        "topic": "reports",
        "data": {"a": "1", "ü": "✓"},
        "enabled": True,
        "catchUp": "SKIP",
        "catchUpWindowMs": 0,
        "createdAt": T0,
        "updatedAt": T0 + 1,
        "activeSince": T0 + 2,
        "version": 7,
        "program": None,
        "constraints": [],
        "timeout": None,
        "retry": None,
        "timeLimitMs": None,
        "output": "FIRED_TASK",
        "notBefore": None,
        "notAfter": None,
        "spreadMs": None,
        "jitterMs": None,
        "priority": 0,
        "completeWithinMs": None,
        "fireAtLeastEveryMs": None,
        "excludeCalendars": [],
        "description": None,
        "labels": {},
        "pauseOnFailure": None,
        "maxFires": None,
        "overlap": None,
        "finished": False,
        "fires": 0,
        "firesLeft": None,
        "nextFireAt": T0 + 60_000,
        "paused": None,
    }
    assert schedule_json(STATES[1], None)["trigger"] == {
        "type": "frequency",
        "timeUnit": "MINUTES",
        "time": 5,
        "start": None,
    }


def test_light_scheduler_json_becomes_an_enabled_insert() -> None:
    parsed = TaskDefinitionIn.model_validate(
        {
            "host": "acme",
            "name": "nightly-report",
            "action": "INSERT",
            "frequency": {"timeUnit": "SECONDS", "time": 10},
            "topic": "reports",
            "data": {"k": "v"},
        }
    )
    cmd = command_from_task_definition_record(parsed.to_record())
    assert cmd.action is Action.INSERT
    assert cmd.schedule == Schedule(
        KEY,
        FrequencyTrigger(TimeUnit.SECONDS, 10),
        "reports",
        {"k": "v"},
        enabled=True,
        output=OutputFormat.TASK_DEFINITION,
    )
