"""Event-driven schedules: what Schedule.validate refuses, Avro round trips of every trigger and
constraint kind, and the HTTP form (ScheduleIn, schedule_json, state_from_json, error field names)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from scheduler.domain.constraints import (
    ConcurrencyConstraint,
    Constraint,
    DelayConstraint,
    LastRunConstraint,
    PendingTimeout,
    RateConstraint,
    TimeoutAction,
    TimeWindowConstraint,
    UnmetAction,
)
from scheduler.domain.model import (
    MAX_CONSTRAINTS,
    MAX_TRIGGER_DEPTH,
    MAX_TRIGGER_LEAVES,
    Action,
    CompositeTrigger,
    CronTrigger,
    DataSizeTrigger,
    FrequencyTrigger,
    InvalidSchedule,
    PartitionTrigger,
    ProgramId,
    ProgramOutcome,
    ProgramStatusTrigger,
    Schedule,
    ScheduleCommand,
    ScheduleKey,
    ScheduleState,
    TimeUnit,
    Trigger,
)
from scheduler.http.api import EventIn, ScheduleIn, schedule_json, state_from_json, validation_errors
from scheduler.wire import codec

pytestmark = pytest.mark.unit

T0 = 1_704_067_200_000
KEY = ScheduleKey("acme", "daily-etl")
ETL = ProgramId("sales", "etl", "workflow", "daily")
INGEST = ProgramId("sales", "ingest", "spark", "load")
ORDERS = PartitionTrigger("sales.orders", 2)

ALL_TRIGGERS: list[Trigger] = [
    CronTrigger("0 6 * * *", "Europe/Paris"),
    FrequencyTrigger(TimeUnit.MINUTES, 15),
    FrequencyTrigger(TimeUnit.HOURS, 2, T0),
    PartitionTrigger("sales.orders"),
    PartitionTrigger("sales.orders", 12),
    DataSizeTrigger("sales.raw-events_v2", 1 << 30),
    ProgramStatusTrigger(INGEST),
    ProgramStatusTrigger(INGEST, (ProgramOutcome.FAILED, ProgramOutcome.KILLED, ProgramOutcome.FINISHED)),
    CompositeTrigger("OR", (ORDERS,)),
    CompositeTrigger(
        "AND",
        (
            ProgramStatusTrigger(INGEST, (ProgramOutcome.SUCCEEDED,)),
            CompositeTrigger(
                "OR",
                (
                    ORDERS,
                    DataSizeTrigger("sales.returns", 1000),
                    CompositeTrigger(
                        "AND", (CronTrigger("*/5 * * * * *"), FrequencyTrigger(TimeUnit.DAYS, 1))
                    ),
                ),
            ),
        ),
    ),
]

ALL_CONSTRAINTS: tuple[Constraint, ...] = (
    ConcurrencyConstraint(1),
    ConcurrencyConstraint(3, UnmetAction.SKIP),
    DelayConstraint(5 * 60_000),
    TimeWindowConstraint("22:00", "06:00", "Europe/Paris"),
    TimeWindowConstraint("09:00", "17:00", "America/New_York", UnmetAction.SKIP),
    LastRunConstraint(3_600_000),
    LastRunConstraint(0, UnmetAction.SKIP),
    RateConstraint(10, TimeUnit.DAYS),
    RateConstraint(2, TimeUnit.HOURS, UnmetAction.SKIP),
)


def event_schedule(trigger: Trigger = ORDERS, **changes: Any) -> Schedule:
    fields: dict[str, Any] = {"key": KEY, "trigger": trigger, "topic": "launches", "program": ETL}
    fields.update(changes)
    return Schedule(**fields)


def refused_field(s: Schedule) -> str:
    with pytest.raises(InvalidSchedule) as exc:
        s.validate()
    return exc.value.field


def nested(depth: int, leaf: Trigger = ORDERS) -> Trigger:
    """`depth` levels of trigger: depth - 1 composites around one leaf."""
    t = leaf
    for _ in range(depth - 1):
        t = CompositeTrigger("AND", (t,))
    return t


# --- Schedule.validate ----------------------------------------------------------------------------


@pytest.mark.parametrize("trigger", ALL_TRIGGERS)
def test_a_schedule_with_a_program_accepts_every_trigger_kind(trigger: Trigger) -> None:
    event_schedule(trigger, constraints=ALL_CONSTRAINTS, timeout=PendingTimeout(3_600_000)).validate()


@pytest.mark.parametrize(
    "trigger",
    [
        ORDERS,
        DataSizeTrigger("sales.orders", 1),
        ProgramStatusTrigger(INGEST),
        CompositeTrigger("AND", (CronTrigger("0 * * * *"), FrequencyTrigger(TimeUnit.HOURS, 1))),
    ],
)
def test_an_event_or_composite_trigger_without_a_program_is_refused(trigger: Trigger) -> None:
    assert refused_field(event_schedule(trigger, program=None)) == "program"


def test_a_time_trigger_without_a_program_is_still_a_plain_schedule() -> None:
    event_schedule(CronTrigger("0 * * * *"), program=None).validate()


@pytest.mark.parametrize(
    "changes",
    [
        {"constraints": (ConcurrencyConstraint(1),)},
        {"timeout": PendingTimeout(60_000)},
    ],
)
def test_constraints_or_timeout_without_a_program_are_refused(changes: dict[str, Any]) -> None:
    s = event_schedule(CronTrigger("0 * * * *"), program=None, **changes)
    assert refused_field(s) == "program"


def test_a_program_status_trigger_on_the_schedules_own_program_is_refused() -> None:
    assert refused_field(event_schedule(ProgramStatusTrigger(ETL))) == "trigger.program"


def test_a_self_trigger_nested_in_a_composite_is_refused() -> None:
    tree = CompositeTrigger(
        "OR", (ORDERS, CompositeTrigger("AND", (ProgramStatusTrigger(ETL, (ProgramOutcome.FAILED,)),)))
    )
    assert refused_field(event_schedule(tree)) == "trigger.program"


def test_another_program_of_the_same_application_may_trigger() -> None:
    event_schedule(ProgramStatusTrigger(ProgramId("sales", "etl", "workflow", "other"))).validate()


def test_nesting_up_to_max_trigger_depth_is_accepted() -> None:
    event_schedule(nested(MAX_TRIGGER_DEPTH)).validate()


def test_nesting_deeper_than_max_trigger_depth_is_refused() -> None:
    field = refused_field(event_schedule(nested(MAX_TRIGGER_DEPTH + 1)))
    assert field == "trigger" + ".triggers.0" * MAX_TRIGGER_DEPTH


def test_more_than_max_trigger_leaves_are_refused() -> None:
    tree = CompositeTrigger(
        "OR", tuple(PartitionTrigger(f"sales.t{i}") for i in range(MAX_TRIGGER_LEAVES + 1))
    )
    assert refused_field(event_schedule(tree)) == "trigger"
    event_schedule(CompositeTrigger("OR", tree.triggers[:MAX_TRIGGER_LEAVES])).validate()


@pytest.mark.parametrize(
    ("trigger", "field"),
    [
        (PartitionTrigger("orders"), "trigger.dataset"),
        (DataSizeTrigger("sales orders.x", 5), "trigger.dataset"),
        (CompositeTrigger("AND", (PartitionTrigger("no-dot"), ORDERS)), "trigger.triggers.0.dataset"),
        (CompositeTrigger("AND", (ORDERS, DataSizeTrigger("", 5))), "trigger.triggers.1.dataset"),
        (
            CompositeTrigger("OR", (ORDERS, CompositeTrigger("AND", (ORDERS, PartitionTrigger("x"))))),
            "trigger.triggers.1.triggers.1.dataset",
        ),
        (CompositeTrigger("XOR", (ORDERS,)), "trigger.op"),
        (CompositeTrigger("and", (ORDERS,)), "trigger.op"),
        (CompositeTrigger("AND", ()), "trigger.triggers"),
        (CompositeTrigger("OR", (CompositeTrigger("AND", ()),)), "trigger.triggers.0.triggers"),
        (ProgramStatusTrigger(INGEST, ()), "trigger.on"),
        (CompositeTrigger("OR", (ORDERS, FrequencyTrigger(TimeUnit.HOURS, 0))), "trigger.triggers.1.time"),
        (CompositeTrigger("OR", (ORDERS, CronTrigger("61 * * * *"))), "trigger.triggers.1.expression"),
        (
            CompositeTrigger("OR", (ORDERS, CronTrigger("0 * * * *", "Nowhere/City"))),
            "trigger.triggers.1.timezone",
        ),
    ],
)
def test_a_bad_trigger_is_refused_naming_its_field(trigger: Trigger, field: str) -> None:
    assert refused_field(event_schedule(trigger)) == field


@pytest.mark.parametrize(
    "trigger",
    [
        PartitionTrigger("sales.orders", 0),
        DataSizeTrigger("sales.orders", 0),
        DataSizeTrigger("sales.orders", 2**62),
    ],
)
def test_an_amount_out_of_range_is_refused(trigger: Trigger) -> None:
    refused_field(event_schedule(trigger))


@pytest.mark.parametrize(
    ("trigger", "field"),
    [
        (PartitionTrigger("sales.orders", 0), "trigger.minPartitions"),
        (
            CompositeTrigger("AND", (ORDERS, DataSizeTrigger("sales.orders", 0))),
            "trigger.triggers.1.minBytes",
        ),
    ],
)
def test_an_amount_out_of_range_names_the_amount_field(trigger: Trigger, field: str) -> None:
    assert refused_field(event_schedule(trigger)) == field


@pytest.mark.parametrize(
    ("trigger", "field"),
    [
        (ProgramStatusTrigger(ProgramId("sales", "etl", "", "x")), "trigger.program"),
        (
            CompositeTrigger("OR", (ORDERS, ProgramStatusTrigger(ProgramId("a/b", "c", "d", "e")))),
            "trigger.triggers.1.program",
        ),
    ],
)
def test_a_bad_program_in_a_program_status_trigger_names_the_trigger_field(
    trigger: Trigger, field: str
) -> None:
    assert refused_field(event_schedule(trigger)) == field


def test_a_bad_schedule_program_is_refused() -> None:
    assert refused_field(event_schedule(program=ProgramId("sales", "etl", "workflow", ""))) == "program"


@pytest.mark.parametrize(
    ("constraint", "field"),
    [
        (ConcurrencyConstraint(0), "constraints.concurrency.maxRuns"),
        (DelayConstraint(-5), "constraints.delay.delayMs"),
        (LastRunConstraint(-1), "constraints.lastRun.minMs"),
        (RateConstraint(0, TimeUnit.MINUTES), "constraints.rate.maxRuns"),
        (TimeWindowConstraint("25:00", "06:00"), "constraints.timeWindow.start"),
        (TimeWindowConstraint("22:00", "6:00"), "constraints.timeWindow.end"),
        (TimeWindowConstraint("22:00", "06:00", "Europe/Pariss"), "constraints.timeWindow.timezone"),
    ],
)
def test_a_bad_constraint_is_refused_by_schedule_validate(constraint: Constraint, field: str) -> None:
    s = event_schedule(constraints=(ConcurrencyConstraint(1), constraint))
    assert refused_field(s) == field


def test_more_than_max_constraints_are_refused() -> None:
    s = event_schedule(constraints=(ConcurrencyConstraint(1),) * (MAX_CONSTRAINTS + 1))
    assert refused_field(s) == "constraints"


@pytest.mark.parametrize("timeout_ms", [0, -1, 7 * 86_400_000 + 1])
def test_a_timeout_out_of_range_is_refused(timeout_ms: int) -> None:
    assert refused_field(event_schedule(timeout=PendingTimeout(timeout_ms))) == "timeout.timeoutMs"


# --- Avro ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("trigger", ALL_TRIGGERS)
def test_every_trigger_kind_round_trips_through_its_avro_form(trigger: Trigger) -> None:
    assert codec.trigger_from_avro(codec.trigger_to_avro(trigger)) == trigger


@pytest.mark.parametrize("constraint", ALL_CONSTRAINTS)
def test_every_constraint_kind_round_trips_through_its_avro_form(constraint: Constraint) -> None:
    assert Constraint.from_avro(constraint.to_avro()) == constraint
    assert Constraint.from_avro(list(constraint.to_avro())) == constraint  # as a job's JSON holds it


def test_every_constraint_kind_is_registered_once_by_its_avro_name() -> None:
    from scheduler.domain.constraints import CONSTRAINT_KINDS

    assert sorted(CONSTRAINT_KINDS) == sorted({c.to_avro()[0] for c in ALL_CONSTRAINTS})
    assert all(CONSTRAINT_KINDS[c.to_avro()[0]] is type(c) for c in ALL_CONSTRAINTS)
    with pytest.raises(ValueError, match="unknown constraint"):
        Constraint.from_avro(("scheduler.NoSuchConstraint", {}))


@pytest.mark.parametrize("trigger", ALL_TRIGGERS)
@pytest.mark.parametrize("action", [TimeoutAction.DISCARD, TimeoutAction.FORCE_START])
def test_an_event_schedule_round_trips_through_a_command(trigger: Trigger, action: TimeoutAction) -> None:
    s = event_schedule(
        trigger,
        data={"region": "eu"},
        enabled=True,
        constraints=ALL_CONSTRAINTS,
        timeout=PendingTimeout(30 * 60_000, action),
    )
    s.validate()
    cmd = ScheduleCommand(KEY, Action.INSERT, s)
    assert codec.decode_command(codec.encode_command(cmd)) == cmd


def test_a_schedule_without_program_constraints_or_timeout_round_trips() -> None:
    s = Schedule(KEY, FrequencyTrigger(TimeUnit.MINUTES, 5), "fires")
    cmd = ScheduleCommand(KEY, Action.UPDATE, s)
    back = codec.decode_command(codec.encode_command(cmd))
    assert back == cmd
    assert back.schedule is not None
    assert (back.schedule.program, back.schedule.constraints, back.schedule.timeout) == (None, (), None)


def test_an_event_schedule_state_round_trips() -> None:
    s = event_schedule(ALL_TRIGGERS[-1], constraints=ALL_CONSTRAINTS, timeout=PendingTimeout(60_000))
    st = ScheduleState(s, created_at=T0, updated_at=T0 + 1, active_since=T0 + 2, version=4)
    assert codec.decode_state(codec.encode_state(st)) == st


# --- HTTP form -----------------------------------------------------------------------------------


def http_body(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "tenant": "acme",
        "name": "daily-etl",
        "topic": "launches",
        "program": ETL.id,
        "trigger": {
            "type": "and",
            "triggers": [
                {"type": "programStatus", "program": INGEST.id},
                {
                    "type": "or",
                    "triggers": [
                        {"type": "partition", "dataset": "sales.orders", "minPartitions": 2},
                        {"type": "dataSize", "dataset": "sales.returns", "minBytes": 1000},
                        {"type": "cron", "expression": "0 6 * * *", "timezone": "Europe/Paris"},
                        {"type": "frequency", "timeUnit": "HOURS", "time": 2, "start": T0},
                    ],
                },
            ],
        },
        "constraints": [
            {"type": "concurrency", "maxRuns": 1},
            {"type": "delay", "delayMs": 60_000},
            {
                "type": "timeWindow",
                "start": "22:00",
                "end": "06:00",
                "timezone": "Europe/Paris",
                "onUnmet": "SKIP",
            },
            {"type": "lastRun", "minMs": 3_600_000},
            {"type": "rate", "maxRuns": 4, "unit": "DAYS"},
        ],
        "timeout": {"timeoutMs": 7_200_000, "action": "FORCE_START"},
    }
    body.update(extra)
    return body


EXPECTED = Schedule(
    key=KEY,
    trigger=CompositeTrigger(
        "AND",
        (
            ProgramStatusTrigger(INGEST, (ProgramOutcome.SUCCEEDED,)),
            CompositeTrigger(
                "OR",
                (
                    PartitionTrigger("sales.orders", 2),
                    DataSizeTrigger("sales.returns", 1000),
                    CronTrigger("0 6 * * *", "Europe/Paris"),
                    FrequencyTrigger(TimeUnit.HOURS, 2, T0),
                ),
            ),
        ),
    ),
    topic="launches",
    program=ETL,
    constraints=(
        ConcurrencyConstraint(1),
        DelayConstraint(60_000),
        TimeWindowConstraint("22:00", "06:00", "Europe/Paris", UnmetAction.SKIP),
        LastRunConstraint(3_600_000),
        RateConstraint(4, TimeUnit.DAYS),
    ),
    timeout=PendingTimeout(7_200_000, TimeoutAction.FORCE_START),
)


def test_schedule_in_with_program_constraints_and_timeout_becomes_the_schedule() -> None:
    parsed = ScheduleIn.model_validate(http_body())
    s = parsed.to_schedule(parsed.key())
    assert s == EXPECTED
    s.validate()


def test_schedule_in_defaults_for_event_fields() -> None:
    parsed = ScheduleIn.model_validate(
        {
            "tenant": "acme",
            "name": "n",
            "topic": "t",
            "trigger": {"type": "partition", "dataset": "sales.orders"},
        }
    )
    s = parsed.to_schedule(parsed.key())
    assert s.trigger == PartitionTrigger("sales.orders", 1)
    assert (s.program, s.constraints, s.timeout) == (None, (), None)
    timeout = ScheduleIn.model_validate(http_body(timeout={"timeoutMs": 5})).timeout
    assert timeout is not None and timeout.action is TimeoutAction.DISCARD


def test_schedule_json_round_trips_an_event_schedule_through_state_from_json() -> None:
    parsed = ScheduleIn.model_validate(http_body(enabled=True, data={"region": "eu"}))
    state = ScheduleState(parsed.to_schedule(parsed.key()), T0, T0 + 1, T0 + 2, version=3)
    wire = json.loads(json.dumps(schedule_json(state, None)))
    assert state_from_json(wire) == state


def test_schedule_json_of_an_event_schedule() -> None:
    state = ScheduleState(EXPECTED, T0, T0, T0)
    out = schedule_json(state, None)
    assert out["program"] == "sales/etl/workflow/daily"
    assert out["trigger"]["type"] == "and"
    assert out["trigger"]["triggers"][0] == {
        "type": "programStatus",
        "program": INGEST.id,
        "on": ["SUCCEEDED"],
    }
    assert [t["type"] for t in out["trigger"]["triggers"][1]["triggers"]] == [
        "partition",
        "dataSize",
        "cron",
        "frequency",
    ]
    assert out["constraints"] == [
        {"type": "concurrency", "maxRuns": 1, "onUnmet": "WAIT", "group": None, "slots": 1},
        {"type": "delay", "delayMs": 60_000},
        {
            "type": "timeWindow",
            "start": "22:00",
            "end": "06:00",
            "timezone": "Europe/Paris",
            "onUnmet": "SKIP",
        },
        {"type": "lastRun", "minMs": 3_600_000, "onUnmet": "WAIT"},
        {"type": "rate", "maxRuns": 4, "unit": "DAYS", "onUnmet": "WAIT"},
    ]
    assert out["timeout"] == {"timeoutMs": 7_200_000, "action": "FORCE_START"}


ORDERS_IN = {"type": "partition", "dataset": "sales.orders"}


def errors_of(body: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as exc:
        ScheduleIn.model_validate(body)
    return [e["field"] for e in validation_errors(exc.value)]


@pytest.mark.parametrize(
    ("trigger", "field"),
    [
        (
            {
                "type": "and",
                "triggers": [{"type": "partition", "dataset": "sales.orders", "minPartitions": 0}],
            },
            "trigger.triggers.0.minPartitions",
        ),
        (
            {"type": "or", "triggers": [ORDERS_IN, {"type": "dataSize", "dataset": "sales.x"}]},
            "trigger.triggers.1.minBytes",
        ),
        (
            {
                "type": "and",
                "triggers": [
                    ORDERS_IN,
                    {"type": "or", "triggers": [{"type": "frequency", "timeUnit": "HOURS", "time": 0}]},
                ],
            },
            "trigger.triggers.1.triggers.0.time",
        ),
        (
            {"type": "and", "triggers": [{"type": "programStatus", "program": "not-a-program"}]},
            "trigger.triggers.0.program",
        ),
        ({"type": "programStatus", "program": INGEST.id, "on": ["SOMETIMES"]}, "trigger.on.0"),
        ({"type": "programStatus", "program": INGEST.id, "on": []}, "trigger.on"),
        ({"type": "and", "triggers": []}, "trigger.triggers"),
        ({"type": "and", "triggers": [{"type": "nope"}]}, "trigger.triggers.0"),
        ({"type": "partition", "dataset": "sales.orders", "minBytes": 5}, "trigger.minBytes"),
    ],
)
def test_validation_errors_name_nested_trigger_fields_without_union_tags(
    trigger: dict[str, Any], field: str
) -> None:
    assert errors_of(http_body(trigger=trigger)) == [field]


@pytest.mark.parametrize(
    ("constraints", "field"),
    [
        ([{"type": "concurrency", "maxRuns": 0}], "constraints.0.maxRuns"),
        ([{"type": "concurrency", "maxRuns": 2, "slots": 0}], "constraints.0.slots"),
        ([{"type": "delay", "delayMs": 1}, {"type": "delay", "delayMs": -1}], "constraints.1.delayMs"),
        ([{"type": "timeWindow", "start": "24:00", "end": "06:00"}], "constraints.0.start"),
        ([{"type": "rate", "maxRuns": 1, "unit": "WEEKS"}], "constraints.0.unit"),
        ([{"type": "lastRun", "minMs": 1, "onUnmet": "MAYBE"}], "constraints.0.onUnmet"),
        ([{"type": "sometimes"}], "constraints.0"),
    ],
)
def test_validation_errors_name_constraint_fields_without_union_tags(
    constraints: list[Any], field: str
) -> None:
    assert errors_of(http_body(constraints=constraints)) == [field]


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"program": "sales/etl/workflow"}, "program"),
        ({"timeout": {"timeoutMs": 0}}, "timeout.timeoutMs"),
        ({"timeout": {"timeoutMs": 5, "action": "LATER"}}, "timeout.action"),
        ({"constraints": [{"type": "concurrency", "maxRuns": 1}] * (MAX_CONSTRAINTS + 1)}, "constraints"),
    ],
)
def test_validation_errors_for_program_timeout_and_constraint_count(
    extra: dict[str, Any], field: str
) -> None:
    assert errors_of(http_body(**extra)) == [field]


def test_a_bad_dataset_passes_the_http_model_and_is_refused_by_validate() -> None:
    parsed = ScheduleIn.model_validate(
        http_body(trigger={"type": "and", "triggers": [{"type": "partition", "dataset": "orders"}]})
    )
    assert refused_field(parsed.to_schedule(parsed.key())) == "trigger.triggers.0.dataset"


def test_event_in_defaults_and_limits() -> None:
    e = EventIn.model_validate({"eventType": "partition"})
    assert (e.payload, e.timestamp) == ({}, None)
    e = EventIn.model_validate(
        {"eventType": "data", "payload": {"datasetId": "sales.orders"}, "timestamp": T0}
    )
    assert e.timestamp == T0
    for bad in (
        {"eventType": "data", "timestamp": -1},
        {"eventType": "data", "payload": {"bytes": 5}},
        {"eventType": "data", "extra": 1},
        {"payload": {}},
    ):
        with pytest.raises(ValidationError):
            EventIn.model_validate(bad)
