"""Encoders written by hand for the hot paths write exactly what the Avro codec writes: the punctuator's\nprebuilt FiredTask, a schedule state from its INSERT's bytes; and Kafka's partitioner hashes as Kafka's."""

from __future__ import annotations

import io
import random
from dataclasses import replace

import fastavro
import pytest
from aiokafka.partitioner import murmur2 as aiokafka_murmur2

from scheduler.domain.constraints import ConcurrencyConstraint, PendingTimeout
from scheduler.domain.model import (
    Action,
    CatchUpPolicy,
    CompositeTrigger,
    CronTrigger,
    FiredTask,
    FrequencyTrigger,
    PartitionTrigger,
    PauseRequest,
    ProgramId,
    Schedule,
    ScheduleCommand,
    ScheduleKey,
    ScheduleState,
    TimeUnit,
    job_id,
)
from scheduler.kafka.partitioner import murmur2
from scheduler.wire.codec import (
    DecodeError,
    _avro_command,
    _avro_command_with_schedule,
    _read_time_command,
    _read_time_state,
    _symbols,
    decode_command,
    decode_command_with_schedule,
    decode_state,
    encode_command,
    encode_state,
    schedule_to_avro,
    schemas,
)
from scheduler.wire.command_writer import write_time_command
from scheduler.wire.fires import decode_fired, encode_fired, fired_task_encoder
from tests import fuzz_inputs

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("data", [{}, {"a": "b"}, {"ü": "✓" * 70, "empty": "", "k" * 200: "v"}])
@pytest.mark.parametrize("due", [0, 1, 63, 64, 1_795_306_941_000, 2**40, -5])
def test_fired_task_encoder_is_byte_identical_to_the_codec(data: dict[str, str], due: int) -> None:
    key = ScheduleKey("acmé", "nightly report")
    encode = fired_task_encoder(key, data)
    for fired_at, missed, catch_up in [(due, 0, False), (due + 123, 3, True), (due + 1, 100_000, False)]:
        value = encode(due, fired_at, missed, catch_up)
        assert value == encode_fired(FiredTask(key, job_id(key, due), due, fired_at, data, missed, catch_up))
        assert decode_fired(value).job_id == f"acmé/nightly report@{due}"


# --- the commands path: schedule state bytes from the command's, Kafka's partitioner ----------------

T0 = 1_795_306_941_000
SCHEDULES = [
    Schedule(ScheduleKey("acmé", "n" * 70), CronTrigger("*/5 * * * * *", "Europe/Paris"), "reports",
             {"ü": "✓" * 70, "k" * 200: ""}, catch_up=CatchUpPolicy.EACH, catch_up_window_ms=600_000),
    Schedule(ScheduleKey("t", "f"), FrequencyTrigger(TimeUnit.MILLISECONDS, 250, T0), "out", enabled=False),
    Schedule(ScheduleKey("t", "p"), CompositeTrigger("AND", (PartitionTrigger("sales", 2), CronTrigger("0 0 * * *"))),
             "out", program=ProgramId("ns", "app", "spark", "etl"), constraints=(ConcurrencyConstraint(2, group="g"),),
             timeout=PendingTimeout(60_000)),
]  # fmt: skip


def _writer_state(state: ScheduleState) -> bytes:
    """ScheduleState as fastavro's writer writes it."""
    buf = io.BytesIO()
    record = {
        "schedule": schedule_to_avro(state.schedule),
        "createdAt": state.created_at,
        "updatedAt": state.updated_at,
        "activeSince": state.active_since,
        "version": state.version,
    }
    fastavro.schemaless_writer(buf, schemas()["ScheduleState"], record)
    return buf.getvalue()


@pytest.mark.parametrize("schedule", SCHEDULES, ids=["cron-unicode", "frequency", "program"])
@pytest.mark.parametrize("action", [Action.INSERT, Action.UPDATE])
def test_a_commands_schedule_bytes_make_the_same_state_as_the_avro_writer(
    schedule: Schedule, action: Action
) -> None:
    data = encode_command(ScheduleCommand(schedule.key, action, schedule))
    for payload in (data, b"\x00\x00\x00\x00\x07" + data):  # with Confluent framing too
        cmd, schedule_avro = decode_command_with_schedule(payload)
        assert cmd == decode_command(data) and cmd.schedule == schedule
        for created, version in [(0, 1), (T0, 2**31 - 1), (-1, 64)]:
            state = ScheduleState(schedule, created, created + 1, created + 2**40, version)
            assert encode_state(state, schedule_avro) == encode_state(state) == _writer_state(state)
            assert decode_state(encode_state(state, schedule_avro)) == state


@pytest.mark.parametrize("action", [Action.DELETE, Action.ENABLE, Action.RUN])
def test_a_command_without_a_schedule_has_no_schedule_bytes(action: Action) -> None:
    fire_range = (T0, T0) if action is Action.RUN else None
    data = encode_command(ScheduleCommand(ScheduleKey("t", "x"), action, None, fire_range))
    assert decode_command_with_schedule(data)[1] is None


def test_murmur2_is_kafkas() -> None:
    rng = random.Random(7)
    for n in range(0, 80):
        for _ in range(25):
            data = rng.randbytes(n)
            assert murmur2(data) == aiokafka_murmur2(data), data
    # Kafka's own test vectors (org.apache.kafka.common.utils.UtilsTest.testMurmur2)
    assert murmur2(b"21") == (-973932308) & 0xFFFFFFFF
    assert murmur2(b"foobar") == (-790332482) & 0xFFFFFFFF
    assert murmur2(b"a-little-bit-long-string") == (-985981536) & 0xFFFFFFFF
    assert murmur2(b"a-little-bit-longer-string") == (-1486304829) & 0xFFFFFFFF
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == (-58897971) & 0xFFFFFFFF
    assert murmur2(b"abc") == 479470107


def _mutations(rng: random.Random, value: bytes) -> list[bytes]:
    out = [value[:cut] for cut in range(len(value))] + [value + b"\x00", value + rng.randbytes(3)]
    for _ in range(20):
        b = bytearray(value)
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        out.append(bytes(b))
    return out


def test_the_hand_command_reader_reads_what_the_avro_reader_reads_or_defers_to_it() -> None:
    """Every command the fuzz generators make (valid, hostile) and mutations of valid ones: the hand reader
    returns what fastavro's reader returns (the command, the schedule's bytes), or None where fastavro
    decides — and on every valid cron/frequency command it reads it itself."""
    seed = fuzz_inputs.seed()
    print(f"FUZZ_SEED={seed}")
    rng = random.Random(seed)
    messages = [fuzz_inputs.hostile(rng, fuzz_inputs.COMMANDS, n, "ds").value for n in range(3000)]
    valid = [encode_command(ScheduleCommand(s.key, action, s)) for s in SCHEDULES[:2] for action in Action]
    valid += [
        encode_command(ScheduleCommand(ScheduleKey("t", f"n{i}"), action, None, (T0, T0 + i)))
        for i, action in enumerate(Action)
    ]
    for value in valid:
        messages += [value, *_mutations(rng, value)]
    read = 0
    for value in messages:
        fast = _read_time_command(value)
        try:
            slow = _avro_command_with_schedule(value)
        except DecodeError:
            assert fast is None, value
            continue
        if fast is not None:
            read += 1
            assert fast == slow, value
    assert all(_read_time_command(v) is not None for v in valid)
    assert read > 300, read


def test_the_hand_command_writer_writes_what_the_avro_writer_writes_or_leaves_it_to_it() -> None:
    """Commands of every action with the fixed schedules, the valid commands the fuzz generators make, and
    variants of them (a fire range, arguments, a pause, a field past `output` set, a disabled or unusual
    time schedule): the hand writer writes fastavro's bytes, or says None — and it writes every cron and
    frequency schedule's command the hand reader reads, and every command without a schedule or pause."""
    seed = fuzz_inputs.seed()
    print(f"FUZZ_SEED={seed}")
    rng = random.Random(seed)
    commands = [ScheduleCommand(s.key, action, s) for s in SCHEDULES for action in Action]
    for n in range(1500):
        try:
            cmd = _avro_command_with_schedule(fuzz_inputs.hostile(rng, fuzz_inputs.COMMANDS, n, "ds").value)[
                0
            ]
        except (DecodeError, ValueError):
            continue
        commands.append(cmd)
    variants = []
    for cmd in commands[:300]:
        variants += [replace(cmd, fire_range=(T0, T0 + rng.randint(0, 2**40))), replace(cmd, arguments={"é": "x" * 70}),
                     replace(cmd, pause=PauseRequest("why", T0))]  # fmt: skip
        s = cmd.schedule
        if s is not None:
            variants += [replace(cmd, schedule=replace(s, **change)) for change in (
                {"priority": rng.randint(-5, 5)}, {"labels": {"a": "b"}}, {"description": "d"}, {"max_fires": 3},
                {"enabled": not s.enabled}, {"catch_up": rng.choice(list(CatchUpPolicy))},
                {"catch_up_window_ms": rng.choice([0, 1, 63, 64, 2**40])}, {"data": {"ü" * 40: "✓"}},
            )]  # fmt: skip
    freq = [FrequencyTrigger(unit, time, start) for unit in TimeUnit for time in (1, 2**31 - 1, 2**31)
            for start in (None, 0, T0)]  # fmt: skip
    variants += [ScheduleCommand(ScheduleKey("t", "f"), Action.INSERT, Schedule(ScheduleKey("t", "f"), f, "out"))
                 for f in freq]  # fmt: skip
    written = 0
    for cmd in commands + variants:
        fast = write_time_command(cmd, _symbols())
        try:
            slow = _avro_command(cmd)
        except Exception:  # (fastavro refuses it: so does the hand writer)
            assert fast is None, cmd
            continue
        if fast is not None:
            written += 1
            assert fast == slow, cmd
            assert encode_command(cmd) == slow
    # what the hand reader reads, the hand writer writes (the shape both keep off fastavro)
    read = [c for c in commands + variants if _read_time_command(_avro_command(c)) is not None]
    assert len(read) > 300 and all(write_time_command(c, _symbols()) is not None for c in read)
    assert all(
        write_time_command(ScheduleCommand(ScheduleKey("t", "x"), action), _symbols()) is not None
        for action in Action
    )
    assert written > 300, written


def _avro_state(value: bytes) -> ScheduleState:
    rec = fastavro.schemaless_reader(io.BytesIO(value), schemas()["ScheduleState"], None)
    assert isinstance(rec, dict)
    return ScheduleState(decode_state(value).schedule, rec["createdAt"], rec["updatedAt"], rec["activeSince"],
                         rec["version"], fires=rec["fires"])  # fmt: skip


def test_the_hand_state_reader_reads_what_the_avro_reader_reads_or_defers_to_it() -> None:
    """States of every schedule the fuzz generators make valid, and mutations of time schedules' states:
    the hand reader returns what the Avro reader returns, or None where the Avro reader decides — and it
    reads every cron/frequency state itself."""
    seed = fuzz_inputs.seed()
    print(f"FUZZ_SEED={seed}")
    rng = random.Random(seed)
    schedules = list(SCHEDULES)
    for n in range(1500):
        try:
            cmd = _avro_command_with_schedule(fuzz_inputs.hostile(rng, fuzz_inputs.COMMANDS, n, "ds").value)[
                0
            ]
        except (DecodeError, ValueError):
            continue
        if cmd.schedule is not None:
            schedules.append(cmd.schedule)
    states = [ScheduleState(s, T0 + i, T0 + 2 * i, T0 - i, i + 1) for i, s in enumerate(schedules)]
    valid = [encode_state(st) for st in states]
    messages = list(valid)
    for value in [v for v in valid if len(v) < 2_000][:40]:
        messages += _mutations(rng, value)
    read = 0
    for value in messages:
        fast = _read_time_state(value)
        try:
            slow = decode_state(value) if fast is None else _avro_state(value)
        except (DecodeError, ValueError):
            assert fast is None, value
            continue
        if fast is not None:
            read += 1
            assert fast == slow, value
    for st, value in zip(states, valid):
        command = encode_command(ScheduleCommand(st.schedule.key, Action.INSERT, st.schedule))
        assert (_read_time_state(value) is not None) == (_read_time_command(command) is not None)
        assert decode_state(value) == st
    assert read > 300, read
