"""Avro codec: round trips, light-scheduler compatibility, and what undecodable bytes do."""

from __future__ import annotations

import io
from dataclasses import replace
from typing import Any

import fastavro
import pytest

from scheduler.domain.model import (
    Action,
    CatchUpPolicy,
    CronTrigger,
    FiredTask,
    FrequencyTrigger,
    InvalidSchedule,
    OutputFormat,
    Paused,
    PauseRequest,
    ProgramId,
    Schedule,
    ScheduleCommand,
    ScheduleKey,
    ScheduleState,
    TimeUnit,
    job_id,
)
from scheduler.domain.runs import RetryPolicy
from scheduler.wire import codec, fires, light
from tests.helpers import light_decode, light_encode

pytestmark = pytest.mark.unit

# light-scheduler's own schemas, as seed 001 gives them, are parsed in tests.helpers (LIGHT_SCHEMAS), so the
# compatibility checks do not go through scheduler.wire.codec's copies.

KEY = ScheduleKey("acme", "nightly-report")
T0 = 1_704_067_200_000


def seed_encode(schema: dict, record: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


def task_definition(action: str, **fields: Any) -> bytes:
    record: dict[str, Any] = {
        "host": "acme",
        "name": "nightly-report",
        "action": action,
        "frequency": None,
        "topic": "reports",
        "start": None,
        "data": None,
    }
    record.update(fields)
    return light_encode("TaskDefinition", record)


CRON_SCHEDULE = Schedule(
    KEY,
    CronTrigger("*/5 * * * * *", "Europe/Paris"),
    "reports",
    {"kind": "daily", "ünïcode": "✓"},
    enabled=True,
    catch_up=CatchUpPolicy.EACH,
    catch_up_window_ms=600_000,
)
FREQ_SCHEDULE = Schedule(KEY, FrequencyTrigger(TimeUnit.MINUTES, 5), "reports")
FREQ_SCHEDULE_WITH_START = Schedule(
    KEY, FrequencyTrigger(TimeUnit.MILLISECONDS, 250, T0), "reports", catch_up=CatchUpPolicy.SKIP
)


# --- round trips ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cmd",
    [
        ScheduleCommand(KEY, Action.INSERT, CRON_SCHEDULE),
        ScheduleCommand(KEY, Action.INSERT, FREQ_SCHEDULE),
        ScheduleCommand(KEY, Action.UPDATE, FREQ_SCHEDULE_WITH_START),
        ScheduleCommand(KEY, Action.DELETE),
        ScheduleCommand(KEY, Action.ENABLE),
        ScheduleCommand(KEY, Action.DISABLE),
        ScheduleCommand(KEY, Action.RUN, fire_range=(T0, T0), arguments={"date": "2026-11-26", "é": ""}),
        ScheduleCommand(KEY, Action.BACKFILL, fire_range=(T0, T0 + 1)),
    ],
    ids=[
        "insert-cron",
        "insert-frequency",
        "update-frequency-with-start",
        "delete",
        "enable",
        "disable",
        "run-with-arguments",
        "backfill",
    ],
)
def test_schedule_command_round_trips(cmd: ScheduleCommand) -> None:
    assert codec.decode_command(codec.encode_command(cmd)) == cmd
    assert codec._avro_command_with_schedule(codec.encode_command(cmd))[0] == cmd  # (the Avro reader too)


def test_runtime_arguments_belong_to_run_and_backfill_only() -> None:
    from scheduler.domain.commands import validate_command

    with pytest.raises(InvalidSchedule) as err:
        validate_command(ScheduleCommand(KEY, Action.DELETE, arguments={"a": "b"}))
    assert err.value.field == "arguments"
    too_many = {f"k{i}": "" for i in range(300)}
    with pytest.raises(InvalidSchedule, match="more than 256"):
        validate_command(ScheduleCommand(KEY, Action.RUN, fire_range=(T0, T0), arguments=too_many))


@pytest.mark.parametrize("schedule", [CRON_SCHEDULE, FREQ_SCHEDULE, FREQ_SCHEDULE_WITH_START])
def test_schedule_state_round_trips(schedule: Schedule) -> None:
    state = ScheduleState(schedule, created_at=T0, updated_at=T0 + 5, active_since=T0 + 7, version=42)
    assert codec.decode_state(codec.encode_state(state)) == state


def test_fired_task_round_trips() -> None:
    fired = FiredTask(KEY, job_id(KEY, T0), T0, T0 + 12, {"a": "1"}, missed=3, catch_up=True)
    assert fires.decode_fired(fires.encode_fired(fired)) == fired
    plain = FiredTask(KEY, job_id(KEY, T0), T0, T0, {})
    assert fires.decode_fired(fires.encode_fired(plain)) == plain


def test_job_id_is_deterministic_per_schedule_and_due_instant() -> None:
    assert job_id(KEY, T0) == f"acme/nightly-report@{T0}"
    assert job_id(KEY, T0) == job_id(ScheduleKey("acme", "nightly-report"), T0)


# --- light-scheduler compatibility -----------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        KEY,
        ScheduleKey("h", "n"),
        ScheduleKey("tenant-ü", "name with spaces ✓"),
        ScheduleKey("x" * 128, "y" * 256),
    ],
)
def test_schedule_key_bytes_are_identical_to_light_scheduler_task_definition_key(key: ScheduleKey) -> None:
    seed = light_encode("TaskDefinitionKey", {"host": key.tenant, "name": key.name})
    assert codec.key_bytes(key) == seed
    assert codec.key_from_bytes(seed) == key


def test_light_scheduler_insert_becomes_an_enabled_insert() -> None:
    cmd = light.command_from_task_definition(
        task_definition(
            "INSERT", frequency={"timeUnit": "SECONDS", "time": 30}, start=T0, data={"customer": "42"}
        )
    )
    assert cmd == ScheduleCommand(
        KEY,
        Action.INSERT,
        Schedule(
            KEY,
            FrequencyTrigger(TimeUnit.SECONDS, 30, T0),
            "reports",
            {"customer": "42"},
            enabled=True,
            output=OutputFormat.TASK_DEFINITION,
        ),
    )


def test_light_scheduler_update_becomes_an_enabled_update_without_start() -> None:
    cmd = light.command_from_task_definition(
        task_definition("UPDATE", frequency={"timeUnit": "HOURS", "time": 2})
    )
    assert cmd.action is Action.UPDATE
    assert cmd.schedule == Schedule(
        KEY,
        FrequencyTrigger(TimeUnit.HOURS, 2, None),
        "reports",
        {},
        enabled=True,
        output=OutputFormat.TASK_DEFINITION,
    )
    assert cmd.schedule.catch_up is CatchUpPolicy.COALESCE


def test_light_scheduler_delete_becomes_a_delete_without_schedule() -> None:
    cmd = light.command_from_task_definition(task_definition("DELETE"))
    assert cmd == ScheduleCommand(KEY, Action.DELETE, None)


@pytest.mark.parametrize("action", ["INSERT", "UPDATE"])
def test_light_scheduler_insert_or_update_without_frequency_is_invalid(action: str) -> None:
    with pytest.raises(InvalidSchedule) as exc:
        light.command_from_task_definition(task_definition(action))
    assert exc.value.field == "frequency"


def test_task_definition_view_of_a_frequency_schedule_is_what_light_scheduler_reads() -> None:
    schedule = Schedule(
        KEY,
        FrequencyTrigger(TimeUnit.SECONDS, 30, T0),
        "reports",
        {"customer": "42"},
        True,
        output=OutputFormat.TASK_DEFINITION,
    )
    view = light.task_definition_from_schedule(schedule)
    assert view == {
        "host": "acme",
        "name": "nightly-report",
        "action": "INSERT",
        "frequency": {"timeUnit": "SECONDS", "time": 30},
        "topic": "reports",
        "start": T0,
        "data": {"customer": "42"},
    }
    # encodable with light-scheduler's schema, and read back as the same schedule
    raw = light_encode("TaskDefinition", view)
    assert light.command_from_task_definition(raw).schedule == schedule


def test_task_definition_view_has_null_data_when_empty() -> None:
    view = light.task_definition_from_schedule(FREQ_SCHEDULE)
    assert view is not None and view["data"] is None and view["start"] is None


def test_task_definition_view_of_a_cron_schedule_is_none() -> None:
    assert light.task_definition_from_schedule(CRON_SCHEDULE) is None


def test_task_definition_with_an_unknown_action_symbol_is_a_decode_error() -> None:
    good = task_definition("DELETE")
    # the action enum is the byte after the two strings; index 7 does not exist
    prefix = seed_encode(
        {
            "type": "record",
            "name": "P",
            "fields": [{"name": "h", "type": "string"}, {"name": "n", "type": "string"}],
        },
        {"h": "acme", "n": "nightly-report"},
    )
    assert good.startswith(prefix)
    bad = prefix + bytes([7 * 2]) + good[len(prefix) + 1 :]
    with pytest.raises(codec.DecodeError):
        light.command_from_task_definition(bad)


# --- undecodable bytes ------------------------------------------------------------------------------

VALID_COMMAND = codec.encode_command(ScheduleCommand(KEY, Action.INSERT, CRON_SCHEDULE))


@pytest.mark.parametrize(
    "data",
    [None, b"", b"\xff", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", b"hello, not avro", bytes(range(256))],
    ids=["none", "empty", "one-byte", "varint-overflow", "text", "all-bytes"],
)
def test_garbage_is_a_decode_error(data: bytes | None) -> None:
    with pytest.raises(codec.DecodeError):
        codec.decode_command(data)


def test_truncated_bytes_are_a_decode_error_or_a_whole_command_of_an_earlier_release() -> None:
    """Cut anywhere, a command does not decode, unless the cut falls where an earlier release's command
    ended (its fields added since were at their defaults): those bytes are that release's whole command
    (records carry no schema id) and read as it. Nothing else reads."""
    decoded = 0
    for cut in range(1, len(VALID_COMMAND)):
        data = VALID_COMMAND[:cut]
        try:
            codec.decode_command(data)
        except codec.DecodeError:
            continue
        decoded += 1
        assert any(
            _whole_record_of(data, schemas["ScheduleCommand"]) for _, schemas in codec.released_schemas()
        ), cut
    assert decoded < 8  # (one per release at most, and the cuts inside a field never)


def _whole_record_of(data: bytes, schema: Any) -> bool:
    """Whether `data` is exactly one record of `schema` (read to its end, and written back the same)."""
    buf = io.BytesIO(data)
    try:
        record = fastavro.schemaless_reader(buf, schema, None)
    except Exception:
        return False
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, record)
    return buf.tell() == len(data) and out.getvalue() == data


def test_commands_and_states_written_by_release_0_3_0_read_without_a_pause_description_or_labels() -> None:
    record = {
        k: v
        for k, v in codec.schedule_to_avro(PROGRAM_SCHEDULE).items()
        if k not in ("description", "labels")
    }
    insert = {"key": codec.key_to_avro(KEY), "action": "INSERT", "schedule": record, "fireRange": None}
    raw = released_encode("0.3.0", "ScheduleCommand", {**insert, "arguments": {}})
    assert codec.decode_command(raw) == ScheduleCommand(KEY, Action.INSERT, PROGRAM_SCHEDULE)
    disable = {**insert, "action": "DISABLE", "schedule": None, "arguments": {}}
    assert codec.decode_command(released_encode("0.3.0", "ScheduleCommand", disable)) == ScheduleCommand(
        KEY, Action.DISABLE
    )
    for schedule in (record, codec.schedule_to_avro(replace(CRON_SCHEDULE, description=None, labels={}))):
        schedule = {k: v for k, v in schedule.items() if k not in ("description", "labels")}
        state = {"schedule": schedule, "createdAt": T0, "updatedAt": T0, "activeSince": T0, "version": 3}
        decoded = codec.decode_state(released_encode("0.3.0", "ScheduleState", state))
        assert decoded.version == 3 and decoded.paused is None
        assert codec.state_version(released_encode("0.3.0", "ScheduleState", state)) == 3


def test_states_written_by_release_0_4_0_read_with_no_fires_counted() -> None:
    for schedule in (PROGRAM_SCHEDULE, CRON_SCHEDULE):
        record = {k: v for k, v in codec.schedule_to_avro(schedule).items() if k != "maxFires"}
        state = {"schedule": record, "createdAt": T0, "updatedAt": T0, "activeSince": T0, "version": 4}
        for paused in (None, {"note": "n", "by": None, "untilMs": None, "atMs": T0}):
            raw = released_encode("0.4.0", "ScheduleState", {**state, "paused": paused})
            decoded = codec.decode_state(raw)
            assert (decoded.schedule, decoded.version, decoded.fires) == (schedule, 4, 0)
            assert codec.state_version(raw) == 4


def test_a_limited_schedule_and_its_count_round_trip() -> None:
    limited = ScheduleState(replace(CRON_SCHEDULE, max_fires=7), T0, T0, T0, 2, fires=300)
    raw = codec.encode_state(limited)
    assert codec.decode_state(raw) == limited and codec.state_version(raw) == 2
    cmd = ScheduleCommand(KEY, Action.INSERT, limited.schedule)
    assert codec.decode_command(codec.encode_command(cmd)) == cmd


def test_a_description_and_labels_round_trip() -> None:
    s = replace(
        CRON_SCHEDULE, description="the nightly report — for finance", labels={"team": "data", "x": ""}
    )
    cmd = ScheduleCommand(KEY, Action.INSERT, s)
    assert codec.decode_command(codec.encode_command(cmd)) == cmd
    state = ScheduleState(s, T0, T0, T0, 2)
    assert codec.decode_state(codec.encode_state(state)) == state


@pytest.mark.parametrize("extra", [b"x", b"\x00", b"\x02\x02trailing"])
def test_trailing_bytes_are_a_decode_error(extra: bytes) -> None:
    with pytest.raises(codec.DecodeError, match="trailing"):
        codec.decode_command(VALID_COMMAND + extra)


def test_truncated_fired_task_and_state_are_decode_errors() -> None:
    fired = fires.encode_fired(FiredTask(KEY, job_id(KEY, T0), T0, T0, {"a": "b"}))
    state = codec.encode_state(ScheduleState(FREQ_SCHEDULE, T0, T0, T0))
    with pytest.raises(codec.DecodeError):
        fires.decode_fired(fired[:-2])
    with pytest.raises(codec.DecodeError):
        codec.decode_state(state[:-2])


def test_a_light_scheduler_task_definition_is_not_a_schedule_command() -> None:
    with pytest.raises(codec.DecodeError):
        codec.decode_command(task_definition("INSERT", frequency={"timeUnit": "SECONDS", "time": 1}))


@pytest.mark.parametrize("schema_id", [1, 42, 100_000])
def test_confluent_framed_payload_decodes(schema_id: int) -> None:
    framed = b"\x00" + schema_id.to_bytes(4, "big") + VALID_COMMAND
    assert codec.decode_command(framed) == codec.decode_command(VALID_COMMAND)


def test_confluent_framed_light_scheduler_records_decode() -> None:
    raw = task_definition("DELETE")
    assert light.command_from_task_definition(b"\x00\x00\x00\x00\x07" + raw) == ScheduleCommand(
        KEY, Action.DELETE
    )
    key_raw = light_encode("TaskDefinitionKey", {"host": "acme", "name": "nightly-report"})
    assert codec.key_from_bytes(b"\x00\x00\x00\x00\x07" + key_raw) == KEY


def test_confluent_frame_around_garbage_is_still_a_decode_error() -> None:
    with pytest.raises(codec.DecodeError):
        codec.decode_command(b"\x00\x00\x00\x00\x01" + b"garbage!")


# --- schema evolution: what a released version wrote still reads -----------------------------------


def released_encode(version: str, schema_name: str, record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, dict(codec.released_schemas())[version][schema_name], record)
    return buf.getvalue()


def _as_released(record: dict[str, Any]) -> dict[str, Any]:
    """A Schedule's Avro record as release 0.1.0 had it (without the fields added since)."""
    return {k: v for k, v in record.items() if k not in ("retry", "timeLimitMs")}


PROGRAM_SCHEDULE = Schedule(
    KEY,
    FrequencyTrigger(TimeUnit.MINUTES, 5),
    "launches",
    enabled=True,
    program=ProgramId("acme", "app", "spark", "etl"),
    retry=RetryPolicy(3, 1_000, 2.0, 60_000),
    time_limit_ms=3_600_000,
)


def test_a_command_and_a_state_written_by_release_0_1_0_read_with_the_fields_added_since_at_their_defaults() -> (
    None
):
    old = replace(PROGRAM_SCHEDULE, retry=None, time_limit_ms=None)
    command = {
        "key": codec.key_to_avro(KEY),
        "action": "INSERT",
        "schedule": _as_released(codec.schedule_to_avro(old)),
        "fireRange": None,
    }
    raw = released_encode("0.1.0", "ScheduleCommand", command)
    with pytest.raises(EOFError):  # (not as the current schema: it ends before its new fields)
        codec._read(
            raw, codec._reader_schemas()["ScheduleCommand"], codec._reader_schemas()["ScheduleCommand"]
        )
    cmd, schedule_bytes = codec.decode_command_with_schedule(raw)
    assert cmd.schedule == old and schedule_bytes is None  # (its bytes are not kept: re-encoded)
    state = {
        "schedule": command["schedule"],
        "createdAt": T0,
        "updatedAt": T0,
        "activeSince": T0,
        "version": 3,
    }
    assert codec.decode_state(released_encode("0.1.0", "ScheduleState", state)) == ScheduleState(
        old, T0, T0, T0, 3
    )


def test_commands_and_states_written_by_release_0_2_0_read_with_arguments_and_output_at_their_defaults() -> (
    None
):
    record = {k: v for k, v in codec.schedule_to_avro(PROGRAM_SCHEDULE).items() if k != "output"}
    insert = {"key": codec.key_to_avro(KEY), "action": "INSERT", "schedule": record, "fireRange": None}
    cmd, _ = codec.decode_command_with_schedule(released_encode("0.2.0", "ScheduleCommand", insert))
    assert cmd == ScheduleCommand(KEY, Action.INSERT, PROGRAM_SCHEDULE)
    run = {**insert, "action": "RUN", "schedule": None, "fireRange": {"fromMs": T0, "toMs": T0}}
    assert codec.decode_command(released_encode("0.2.0", "ScheduleCommand", run)) == ScheduleCommand(
        KEY, Action.RUN, fire_range=(T0, T0)
    )
    state = {"schedule": record, "createdAt": T0, "updatedAt": T0, "activeSince": T0, "version": 3}
    assert codec.decode_state(released_encode("0.2.0", "ScheduleState", state)) == ScheduleState(
        PROGRAM_SCHEDULE, T0, T0, T0, 3
    )


def test_a_schedule_with_retries_and_a_time_limit_round_trips() -> None:
    cmd = ScheduleCommand(KEY, Action.INSERT, PROGRAM_SCHEDULE)
    assert codec.decode_command(codec.encode_command(cmd)) == cmd
    state = ScheduleState(PROGRAM_SCHEDULE, T0, T0, T0, 2)
    assert codec.decode_state(codec.encode_state(state)) == state


# --- light-scheduler's output: a TaskDefinition per fire -------------------------------------------


@pytest.mark.parametrize(
    "schedule",
    [
        Schedule(KEY, FrequencyTrigger(TimeUnit.MINUTES, 5), "tasks", {"serviceId": "petstore", "é": "✓"}),
        Schedule(KEY, FrequencyTrigger(TimeUnit.DAYS, 1, T0), "tasks"),
        Schedule(KEY, CronTrigger("0 */5 * * * *"), "tasks", {"a": "b"}),
    ],
    ids=["frequency-with-data", "frequency-without-data", "cron"],
)
def test_a_task_definition_fire_is_what_light_schedulers_own_schema_writes(schedule: Schedule) -> None:
    schedule = replace(schedule, output=OutputFormat.TASK_DEFINITION)
    encoder = fires.fire_bytes(schedule)
    due = T0 + 300_000
    expected = {
        "host": KEY.tenant,
        "name": KEY.name,
        "action": "INSERT",
        "frequency": {"timeUnit": schedule.trigger.unit.value, "time": schedule.trigger.time}
        if isinstance(schedule.trigger, FrequencyTrigger)
        else None,
        "topic": "tasks",
        "start": due,
        "data": dict(schedule.data) or None,
    }
    value = encoder.encode(due, due + 3, 2, True)  # (it has no firedAt, missed nor catchUp)
    assert value == light_encode("TaskDefinition", expected)
    assert light_decode("TaskDefinition", value) == expected
    assert encoder.parts(due) == (value, None)
    assert encoder.head == light_encode("TaskDefinitionKey", {"host": KEY.tenant, "name": KEY.name})
    # and a schedule with this output reads back through both command readers
    cmd = ScheduleCommand(KEY, Action.INSERT, schedule)
    assert codec.decode_command(codec.encode_command(cmd)) == cmd
    assert codec._avro_command_with_schedule(codec.encode_command(cmd))[0] == cmd


def test_a_schedule_with_a_program_sends_launch_requests_not_task_definitions() -> None:
    schedule = Schedule(
        KEY,
        FrequencyTrigger(TimeUnit.MINUTES, 5),
        "launches",
        program=ProgramId.parse("acme/app/spark/p"),
        output=OutputFormat.TASK_DEFINITION,
    )
    with pytest.raises(InvalidSchedule) as err:
        schedule.validate()
    assert err.value.field == "output"


# --- who sent a command, and a schedule's history ---------------------------------------------------


def test_who_sent_a_command_is_read_from_its_header_cleaned_and_carried_when_it_moves() -> None:
    from scheduler.wire.command_headers import MAX_BY_LEN, command_by, command_headers, condition_headers

    assert command_by(None) is None and command_by([("other", b"x")]) is None
    assert command_by(command_headers(by="deployer")) == "deployer"
    assert command_by([("scheduler-by", b"ops\nscript\xff")]) == "ops?script\ufffd"
    assert command_by([("scheduler-by", b"  ")]) is None
    assert len(command_by([("scheduler-by", b"x" * 500)]) or "") == MAX_BY_LEN
    moved = condition_headers(command_headers(deadline_ms=5, by="deployer") + [("other", b"y")])
    assert moved == [("scheduler-by", b"deployer"), ("scheduler-deadline-ms", b"5")]


def test_a_schedules_history_keeps_its_newest_entries_and_each_definition() -> None:
    from scheduler.wire.messages import MAX_HISTORY, HistoryEntry, add_history, decode_history

    value = None
    for v in range(1, MAX_HISTORY + 6):
        value = add_history(
            value, HistoryEntry(v, T0 + v, "deployer", "UPDATE", codec.encode_schedule(CRON_SCHEDULE))
        )
    entries = decode_history(value)
    assert [e.version for e in entries] == list(range(6, MAX_HISTORY + 6))
    assert codec.decode_schedule(entries[-1].schedule or b"") == CRON_SCHEDULE
    deleted = decode_history(add_history(None, HistoryEntry(3, T0, "topic", "DELETE")))
    assert deleted == [HistoryEntry(3, T0, "topic", "DELETE")]


def test_a_history_is_appended_to_without_reading_it_and_cut_back_past_its_slack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from scheduler.wire import messages
    from scheduler.wire.messages import HISTORY_SLACK, HistoryEntry, add_history, decode_history

    reads = [0]
    decode = messages.decode_json

    def counted(value: bytes | None) -> Any:
        reads[0] += 1
        return decode(value)

    monkeypatch.setattr(messages, "decode_json", counted)
    schedule = codec.encode_schedule(CRON_SCHEDULE)
    notes = ['{"v":1}', "]", "ünï ✓", 'a "quoted" }{ note', None]
    value, most = None, 0
    for v in range(1, 1_001):
        note = notes[v % len(notes)]
        entry = HistoryEntry(v, T0 + v, "deployer", "DISABLE" if note else "UPDATE", None if note else schedule,
                             note=note)  # fmt: skip
        value = add_history(value, entry)
        most = max(most, len(decode(value)))
    assert reads[0] <= 50  # (it was read at every append; a brace in a note makes it cut a little sooner)
    assert most <= HISTORY_SLACK + messages.COUNT_EVERY_BYTES // 30
    entries = decode_history(value)
    assert [e.version for e in entries] == list(range(901, 1_001))
    assert [e.note for e in entries[:5]] == [notes[v % len(notes)] for v in range(901, 906)]
    assert codec.decode_schedule(next(e.schedule for e in reversed(entries) if e.schedule)) == CRON_SCHEDULE


@pytest.mark.parametrize(
    "pause",
    [PauseRequest(), PauseRequest("db migration — back at noon", T0 + 60_000), PauseRequest(None, T0)],
)
def test_a_command_with_a_pause_round_trips(pause: PauseRequest) -> None:
    for action in (Action.DISABLE, Action.ENABLE):
        cmd = ScheduleCommand(KEY, action, pause=pause)
        assert codec.decode_command(codec.encode_command(cmd)) == cmd


@pytest.mark.parametrize(
    "paused",
    [None, Paused(T0), Paused(T0, "why", "ops", T0 + 1), Paused(T0, "", None, None), Paused(1, None, "é", 0)],
)
def test_a_state_with_a_pause_round_trips_and_the_hand_encoding_is_the_avro_one(
    paused: Paused | None,
) -> None:
    st = ScheduleState(CRON_SCHEDULE, T0, T0 + 5, T0 + 5, 3, paused)
    raw = codec.encode_state(st)
    assert codec.decode_state(raw) == st
    assert raw == codec.encode("ScheduleState", fastavro_record(st))


def fastavro_record(st: ScheduleState) -> dict[str, Any]:
    p = st.paused
    return {
        "schedule": codec.schedule_to_avro(st.schedule),
        "createdAt": st.created_at,
        "updatedAt": st.updated_at,
        "activeSince": st.active_since,
        "version": st.version,
        "paused": None if p is None else {"note": p.note, "by": p.by, "untilMs": p.until_ms, "atMs": p.at_ms},
    }
