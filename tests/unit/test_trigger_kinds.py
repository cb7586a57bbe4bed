"""Trigger kinds: each registered once, each its own JSON, Avro, validation, event keys, tenants and words;
and seed 000's repeated trigger ("program P succeeded N times") and lifecycle trigger ("P started")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from scheduler.domain.events import DataEvent, ProgramStatusEvent
from scheduler.domain.model import (
    Action,
    InvalidSchedule,
    ProgramId,
    Schedule,
    ScheduleCommand,
    ScheduleKey,
    ScheduleState,
    TimeUnit,
)
from scheduler.domain.tenancy import schedule_tenants
from scheduler.domain.triggers.kinds import (
    AVRO_KINDS,
    TRIGGER_KINDS,
    CompositeTrigger,
    FrequencyTrigger,
    OnceTrigger,
    ProgramRunsTrigger,
    ProgramStartedTrigger,
    Trigger,
    trigger_from_json,
)
from scheduler.domain.triggers.progress import TriggerProgress, apply, describe, reset, satisfied
from scheduler.http.api import ScheduleIn, schedule_json, state_from_json, validation_errors
from scheduler.wire import codec
from scheduler.worker.event_routing import event_keys

pytestmark = pytest.mark.unit

A = "beta/pipes/workflow/A"
B = "acme/pipes/workflow/B"

#: one trigger of each kind, as HTTP carries it
EXAMPLES: dict[str, dict[str, Any]] = {
    "cron": {"type": "cron", "expression": "*/5 * * * *", "timezone": "Europe/Paris"},
    "frequency": {"type": "frequency", "timeUnit": "MINUTES", "time": 5, "start": 1_795_341_600_000},
    "once": {"type": "once", "at": 1_795_341_600_000},
    "partition": {"type": "partition", "dataset": "sales.orders", "minPartitions": 4},
    "dataSize": {"type": "dataSize", "dataset": "sales.orders", "minBytes": 1_000_000},
    "programStatus": {"type": "programStatus", "program": A, "on": ["SUCCEEDED", "FAILED"]},
    "elapsed": {"type": "elapsed", "ms": 60_000, "dataset": None, "program": A},
    "programRuns": {"type": "programRuns", "program": A, "runs": 3, "on": ["SUCCEEDED"]},
    "programStarted": {"type": "programStarted", "program": A},
    "sensor": {"type": "sensor", "sensor": A},
    "and": {"type": "and", "triggers": [{"type": "programStarted", "program": A}]},
    "or": {"type": "or", "triggers": [{"type": "partition", "dataset": "sales.x", "minPartitions": 1}]},
}


def state(trigger: dict[str, Any], program: str | None = B) -> ScheduleState:
    body = ScheduleIn.model_validate(
        {"tenant": "acme", "name": "s", "trigger": trigger, "topic": "out", "program": program}
    )
    schedule = body.to_schedule(body.key())
    schedule.validate()
    return ScheduleState(schedule, 1, 1, 1)


def test_every_kind_is_registered_once_under_its_tags_and_its_avro_record() -> None:
    assert set(TRIGGER_KINDS) == set(EXAMPLES)
    kinds = set(TRIGGER_KINDS.values())
    assert set(AVRO_KINDS.values()) == kinds
    for kind in kinds:
        assert AVRO_KINDS[kind.avro_name] is kind and all(TRIGGER_KINDS[t] is kind for t in kind.tags)


def test_the_avro_trigger_unions_name_every_kind_and_no_other() -> None:
    avro = Path(codec.avro_dir())
    for schema, path in (("Schedule", ["trigger"]), ("CompositeTrigger", ["triggers", "items"])):
        fields = {f["name"]: f for f in json.loads((avro / f"{schema}.avsc").read_text())["fields"]}
        union = fields[path[0]]["type"]
        for step in path[1:]:
            union = union[step]
        assert set(union) == set(AVRO_KINDS), schema


@pytest.mark.parametrize("tag", sorted(EXAMPLES))
def test_a_kind_round_trips_through_http_avro_and_another_workers_answer(tag: str) -> None:
    program = None if tag in ("cron", "frequency", "once") else B
    s = state(EXAMPLES[tag], program)
    assert schedule_json(s, None)["trigger"] == EXAMPLES[tag]
    assert state_from_json(schedule_json(s, None)) == s
    cmd = ScheduleCommand(s.schedule.key, Action.INSERT, s.schedule)
    assert codec.decode_command(codec.encode_command(cmd)) == cmd
    assert codec.decode_state(codec.encode_state(s)) == s
    assert s.schedule.trigger.describe()


def test_each_kind_describes_itself_in_words() -> None:
    words = {tag: trigger_from_json(t).describe() for tag, t in EXAMPLES.items()}
    assert words == {
        "cron": "cron */5 * * * * (Europe/Paris)",
        "frequency": "every 5 min from 2026-11-22T10:00:00Z",
        "once": "once at 2026-11-22T10:00:00Z",
        "partition": "4 new partitions of sales.orders",
        "dataSize": "1000000 new bytes of sales.orders",
        "programStatus": f"{A} SUCCEEDED or FAILED",
        "elapsed": f"1 min since the last event of {A}",
        "programRuns": f"{A} SUCCEEDED 3 times",
        "programStarted": f"{A} started",
        "sensor": f"when sensor {A} says so",
        "and": f"({A} started)",
        "or": "(1 new partition of sales.x)",
    }


def test_a_sensor_trigger_listens_to_its_sensors_fires_touches_its_tenant_and_fires_on_each() -> None:
    from scheduler.domain.events import Notification, parse
    from scheduler.domain.triggers.kinds import LeafProgress, Reached

    s = state(EXAMPLES["sensor"])
    assert event_keys(s) == {f"sensor:{A}": ["0"]}
    assert schedule_tenants(s.schedule) == {"acme", "beta"}
    fire = parse(Notification(1, "sensor", {"sensorId": A, "runKeys": '["a.csv", "b.csv"]'}))
    other = parse(Notification(1, "sensor", {"sensorId": B}))
    lp = LeafProgress()
    assert not s.schedule.trigger.record(lp, Reached(other, 1, None, 0)) and not lp.fired
    assert s.schedule.trigger.record(lp, Reached(fire, 1, None, 0)) and s.schedule.trigger.satisfied(lp)


@pytest.mark.parametrize(
    ("payload", "why"),
    [({"sensorId": "x"}, "sensorId"), ({"sensorId": A, "runKeys": "[1]"}, "runKeys must be a JSON list of strings"),
     ({"sensorId": A, "runKeys": "no"}, "runKeys is not a JSON list")],
)  # fmt: skip
def test_a_sensor_event_that_is_not_one_says_why(payload: dict[str, str], why: str) -> None:
    from scheduler.domain.events import InvalidEvent, Notification, parse

    with pytest.raises(InvalidEvent, match=why):
        parse(Notification(1, "sensor", payload))


@pytest.mark.parametrize("tag", ["programRuns", "programStarted"])
def test_the_program_kinds_listen_to_the_programs_events_and_touch_its_tenant(tag: str) -> None:
    s = state(EXAMPLES[tag])
    assert event_keys(s) == {f"program:{A}": ["0"]}
    assert schedule_tenants(s.schedule) == {"acme", "beta"}


@pytest.mark.parametrize("tag", ["programRuns", "programStarted", "programStatus"])
def test_a_program_never_triggers_itself(tag: str) -> None:
    with pytest.raises(InvalidSchedule, match="never triggers itself"):
        state(EXAMPLES[tag], program=A)


@pytest.mark.parametrize(
    ("trigger", "field"),
    [
        ({"type": "programRuns", "program": A, "runs": 0}, "trigger.runs"),
        ({"type": "programRuns", "program": A, "runs": 1001}, "trigger.runs"),
        ({"type": "programRuns", "program": A}, "trigger.runs"),
        ({"type": "programRuns", "program": A, "runs": 2, "on": []}, "trigger.on"),
        ({"type": "programRuns", "program": "a/b", "runs": 2}, "trigger.program"),
        ({"type": "programStarted", "program": "a/b/c"}, "trigger.program"),
        ({"type": "programStarted", "program": A, "on": ["SUCCEEDED"]}, "trigger.on"),
        ({"type": "and", "triggers": [{"type": "programStarted"}]}, "trigger.triggers.0.program"),
        ({"type": "once", "at": 916_000_000_000_000}, "trigger.at"),  # (year 31,000: schemathesis found it)
        ({"type": "frequency", "timeUnit": "SECONDS", "time": 1, "start": 2**62}, "trigger.start"),
    ],
)
def test_an_invalid_trigger_body_names_its_field(trigger: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as exc:
        ScheduleIn.model_validate(
            {"tenant": "acme", "name": "s", "trigger": trigger, "topic": "o", "program": B}
        )
    assert field in [e["field"] for e in validation_errors(exc.value)]


def test_the_record_validates_what_arrives_without_http() -> None:
    program = ProgramId.parse(A)
    for trigger, field in (
        (ProgramRunsTrigger(program, 0), "trigger.runs"),
        (ProgramRunsTrigger(program, 2, ()), "trigger.on"),
    ):
        schedule = Schedule(ScheduleKey("acme", "s"), trigger, "out", program=ProgramId.parse(B))
        with pytest.raises(InvalidSchedule) as exc:
            schedule.validate()
        assert exc.value.field == field


def test_an_instant_past_2200_is_refused_without_http_and_one_stored_before_is_still_described() -> None:
    for trigger, field in (
        (OnceTrigger(916_000_000_000_000), "trigger.at"),
        (FrequencyTrigger(TimeUnit.SECONDS, 1, 2**62), "trigger.start"),
    ):
        schedule = Schedule(ScheduleKey("acme", "s"), trigger, "out")
        with pytest.raises(InvalidSchedule) as exc:
            schedule.validate()
        assert exc.value.field == field
        assert "epoch ms" in trigger.describe()  # (no date holds it: a list or GET still answers)
    assert OnceTrigger(1_795_000_000_000).describe() == "once at 2026-11-18T11:06:40Z"


def status(run_id: str, s: str, program: str = A) -> ProgramStatusEvent:
    return ProgramStatusEvent(ProgramId.parse(program), run_id, s)


# --- program P succeeded N times ----------------------------------------------------------------------


def test_n_successes_satisfy_it_each_run_counting_once() -> None:
    trigger = ProgramRunsTrigger(ProgramId.parse(A), 3)
    p = TriggerProgress(1)
    counted = [
        apply(trigger, p, "0", event, {})
        for event in (
            status("r1", "RUNNING"),
            status("r1", "COMPLETED"),
            status("r1", "COMPLETED"),  # reported twice: one run
            status("r2", "FAILED"),
            status("r3", "COMPLETED"),
        )
    ]
    assert counted == [False, True, False, False, True]
    assert not satisfied(trigger, p)
    assert describe(trigger, p)["text"] == f"2 of 3 runs of {A} SUCCEEDED"
    assert apply(trigger, p, "0", status("r4", "COMPLETED"), {}) and satisfied(trigger, p)
    reset(p)
    assert not satisfied(trigger, p) and describe(trigger, p)["runs"] == 0


def test_runs_of_any_named_outcome_count_and_other_events_do_not() -> None:
    trigger = trigger_from_json({"type": "programRuns", "program": A, "runs": 2, "on": ["FAILED", "KILLED"]})
    p = TriggerProgress(1)
    apply(trigger, p, "0", DataEvent("beta.x", 1, 10), {})
    apply(trigger, p, "0", status("r1", "COMPLETED"), {})
    apply(trigger, p, "0", status("r2", "KILLED"), {})
    assert not satisfied(trigger, p)
    apply(trigger, p, "0", status("r3", "FAILED"), {})
    assert satisfied(trigger, p)


def test_the_progress_survives_its_json_form() -> None:
    trigger = ProgramRunsTrigger(ProgramId.parse(A), 2)
    p = TriggerProgress(1)
    apply(trigger, p, "0", status("r1", "COMPLETED"), {})
    p = TriggerProgress.from_json(json.loads(json.dumps(p.to_json())))
    assert not apply(trigger, p, "0", status("r1", "COMPLETED"), {})
    assert apply(trigger, p, "0", status("r2", "COMPLETED"), {}) and satisfied(trigger, p)


# --- program P started ---------------------------------------------------------------------------------


def test_a_run_reaching_running_satisfies_it_and_nothing_before() -> None:
    trigger = ProgramStartedTrigger(ProgramId.parse(A))
    p = TriggerProgress(1)
    for s in ("PENDING", "STARTING"):
        assert not apply(trigger, p, "0", status("r1", s), {})
    assert not satisfied(trigger, p)
    assert describe(trigger, p)["text"] == f"{A} starting a run: not seen yet"
    assert apply(trigger, p, "0", status("r1", "RUNNING"), {}) and satisfied(trigger, p)
    assert describe(trigger, p)["text"] == f"{A} starting a run: seen"


def test_started_and_n_successes_compose_with_and() -> None:
    program = ProgramId.parse(A)
    tree: Trigger = CompositeTrigger("AND", (ProgramStartedTrigger(program), ProgramRunsTrigger(program, 2)))
    p = TriggerProgress(1)
    for run in ("r1", "r2"):
        for s in ("STARTING", "RUNNING", "COMPLETED"):
            for path in ("0.0", "0.1"):  # the event routing sends the event to each leaf that listens
                apply(tree, p, path, status(run, s), {})
        if run == "r1":
            assert not satisfied(tree, p)
    assert satisfied(tree, p)
