"""Hostile input for the worker's three input topics (commands, light-scheduler, events), next to valid
input, seeded so a failure reproduces: the tests print their seed, and FUZZ_SEED=<seed> replays it.

`hostile(rng, topic, n, known_dataset)` draws one malformed or hostile message (n makes it unique);
`valid_command`, `valid_task_definition` and `valid_partition_event` build good ones. `verdict` is the
oracle: what the pure decode and validate functions say of a message (None: accepted), which the worker
must agree with. Most generators are refused by construction (`Message.certain`); random bytes and
mutations of valid messages only almost always, so callers ask `verdict` about those.
"""

from __future__ import annotations

import io
import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import fastavro

from scheduler.domain.commands import CommandRejected, validate_command
from scheduler.domain.constraints import (
    ConcurrencyConstraint,
    DelayConstraint,
    LastRunConstraint,
    PendingTimeout,
    RateConstraint,
    TimeoutAction,
    TimeWindowConstraint,
)
from scheduler.domain.events import (
    MAX_PAYLOAD_BYTES,
    MAX_TIMESTAMP_MS,
    InvalidEvent,
    Notification,
    parse,
)
from scheduler.domain.model import (
    MAX_CATCH_UP_WINDOW_MS,
    MAX_CRON_LEN,
    MAX_DATA_BYTES,
    MAX_DATA_ENTRIES,
    MAX_FREQUENCY_TIME,
    MAX_NAME_LEN,
    MAX_TENANT_LEN,
    MAX_TRIGGER_LEAVES,
    Action,
    CompositeTrigger,
    CronTrigger,
    DataSizeTrigger,
    ElapsedTrigger,
    FrequencyTrigger,
    InvalidSchedule,
    PartitionTrigger,
    ProgramId,
    ProgramStatusTrigger,
    Schedule,
    ScheduleCommand,
    ScheduleKey,
    TimeUnit,
    Trigger,
)
from scheduler.wire.codec import (
    MAX_MESSAGE_BYTES,
    DecodeError,
    decode_command,
    decode_notification,
    encode,
    encode_command,
    key_bytes,
    notification_to_avro,
    released_schemas,
)
from scheduler.wire.fires import zigzag_long
from scheduler.wire.light import command_from_task_definition

COMMANDS, LIGHT, EVENTS = "commands", "light", "events"
_SCHEMA_OF = {COMMANDS: "ScheduleCommand", LIGHT: "TaskDefinition", EVENTS: "Notification"}


def _a_released_message(topic: str, value: bytes) -> bool:
    """Whether a released version of the topic's schema reads `value` whole."""
    for _, writers in released_schemas():
        buf = io.BytesIO(value)
        try:
            fastavro.schemaless_reader(buf, writers[_SCHEMA_OF[topic]], None)
        except Exception:
            continue
        if buf.tell() == len(value):
            return True
    return False


TOPICS = (COMMANDS, LIGHT, EVENTS)
EVERY_5_S = CronTrigger("*/5 * * * * *")
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_PROGRAM = ProgramId("fz", "app", "spark", "never-registered")


def seed() -> int:
    """FUZZ_SEED if set, else a fresh one (the caller prints it)."""
    env = os.environ.get("FUZZ_SEED")
    return int(env) if env else random.SystemRandom().randrange(2**32)


@dataclass(frozen=True)
class Message:
    topic: str  # COMMANDS, LIGHT or EVENTS
    key: bytes | None
    value: bytes | None
    kind: str  # the generator that made it
    certain: bool = True  # refused by construction; if False, ask `verdict`


@dataclass(frozen=True)
class Refusal:
    reason: str
    downstream: bool = False  # a light-scheduler definition refused later, as a command on the commands topic


def verdict(msg: Message) -> Refusal | None:
    """What the pure functions say: None if the worker must accept the message (given that no schedule
    but the valid ones exists and no program is registered; an event of a dataset nobody watches is
    accepted: counted, not dead-lettered). Any exception but the modules' documented ones escapes: that
    is a bug."""
    try:
        if msg.topic == EVENTS:
            parse(decode_notification(msg.value))
            return None
        cmd = decode_command(msg.value) if msg.topic == COMMANDS else command_from_task_definition(msg.value)
        validate_command(cmd)
    except (DecodeError, InvalidSchedule, CommandRejected, InvalidEvent) as exc:
        return Refusal(str(exc))
    if cmd.action is not Action.INSERT:
        return Refusal(f"{cmd.action.value} of a schedule that does not exist", downstream=msg.topic == LIGHT)
    assert cmd.schedule is not None
    if cmd.schedule.program is not None:
        return Refusal(f"unknown program {cmd.schedule.program.id}")
    return None


# --- valid messages ----------------------------------------------------------------------------------


def schedule(
    tenant: str, name: str, trigger: Trigger = EVERY_5_S, topic: str = "fz-out", **kw: Any
) -> Schedule:
    return Schedule(ScheduleKey(tenant, name), trigger, topic, enabled=True, **kw)


def command(s: Schedule, action: Action = Action.INSERT) -> bytes:
    return encode_command(ScheduleCommand(s.key, action, s))


def valid_command(tenant: str, name: str, topic: str) -> Message:
    s = schedule(tenant, name, topic=topic, data={"n": name})
    return Message(COMMANDS, key_bytes(s.key), command(s), "valid-command")


def task_definition(host: str, name: str, **fields: Any) -> dict[str, Any]:
    return {
        "host": host,
        "name": name,
        "action": "INSERT",
        "frequency": {"timeUnit": "SECONDS", "time": 5},
        "topic": "fz-out",
        "start": None,
        "data": None,
        **fields,
    }


def light(rec: dict[str, Any], kind: str, key: bytes | None = None, certain: bool = True) -> Message:
    if key is None:
        key = encode("TaskDefinitionKey", {"host": rec["host"], "name": rec["name"]})
    return Message(LIGHT, key, encode("TaskDefinition", rec), kind, certain)


def valid_task_definition(host: str, name: str, topic: str) -> Message:
    return light(task_definition(host, name, topic=topic, data={"n": name}), "valid-task-definition")


def notification(event_type: str, payload: dict[str, str], timestamp: int = T0) -> bytes:
    return encode("Notification", notification_to_avro(Notification(timestamp, event_type, payload)))


def partition_payload(dataset: str, *keys: str, size: str = "100") -> dict[str, str]:
    return {"datasetId": dataset, "partitionKeys": json.dumps(list(keys)), "bytes": size}


def valid_partition_event(dataset: str, partition_key: str) -> Message:
    value = notification("partition", partition_payload(dataset, partition_key))
    return Message(EVENTS, f"partition:{dataset}".encode(), value, "valid-event")


# --- Avro by hand: what our encoder refuses to write -------------------------------------------------


zigzag = zigzag_long  # Avro's long


def avro_string(s: str) -> bytes:
    b = s.encode()
    return zigzag(len(b)) + b


_COMPOSITE_BRANCH = 6  # CompositeTrigger's index in every trigger union (avro/Schedule.avsc)


def nested_command(depth: int, tenant: str, name: str) -> bytes:
    """An INSERT whose trigger is AND(AND(...(cron)...)) `depth` levels deep, written byte by byte (our
    writer recurses too): the cron leaf of a plain schedule is spliced out for the nested tree."""
    marker = f"fz-marker-{name}"
    base = command(schedule(tenant, name, CronTrigger(marker), program=_PROGRAM))
    leaf = zigzag(0) + avro_string(marker) + avro_string("UTC")
    assert base.count(leaf) == 1
    level = zigzag(_COMPOSITE_BRANCH) + zigzag(0) + zigzag(1)  # union branch, op AND, one item
    tree = level * depth + zigzag(0) + avro_string("* * * * * *") + avro_string("UTC") + zigzag(0) * depth
    return base.replace(leaf, tree)


# --- building blocks of hostile messages ---------------------------------------------------------------

BAD_IDENTIFIERS = [
    "",
    "a/b",
    "/",
    "x\x00y",
    "tab\there",
    "new\nline",
    "\x7f",
    "c1\x85control",
    "line\u2028separator",
    "para\u2029separator",
    "\x1b[31mred",
]
BAD_CRONS = [
    "",
    " ",
    "*",
    "* * * *",
    "* * * * * * *",
    "60 * * * *",
    "* 24 * * *",
    "* * 32 * *",
    "* * * 13 *",
    "* * * * 8",
    "-1 * * * *",
    "*/0 * * * *",
    "*/-5 * * * *",
    "5-1/0 * * * *",
    "99999999999999999999 * * * *",
    "1-99999999 * * * *",
    "L * * * *",
    "0 0 15W * *",
    "H * * * *",
    "@reboot",
    "@every 5s",
    "0 0 30 2 *",
    "0 0 0 31 4 *",
    "0 0 31 2,4,6,9,11 *",
    "* * 30-31 2 *",
    "0 0 1 1 * 2099",
    "١ * * * *",  # Arabic-Indic digit one: str.isdigit() takes it, we do not
    "* * * * *\u00a0",
    "*\t*\t*\t*\t*\x00",
    "*/5 * * * * *" + " " * MAX_CRON_LEN,
    ",".join(str(i % 60) for i in range(2_000)) + " * * * *",
    "* * * * * " + "MON," * 100,
]
BAD_ZONES = [
    "",
    "Mars/Olympus_Mons",
    "../../etc/passwd",
    "UTC\x00",
    "Europe/Paris ",
    "utc+25",
    "x" * 300,
    "🕐",
]
BAD_TOPICS = ["", "a b", "x" * 250, "ü", "../etc", "a\x00", "tab\t", "a/b", "a:b"]
BAD_DATASETS = [
    "",
    "nodot",
    ".x",
    "ns.",
    "a..b",
    "../etc.passwd",
    "ns./x",
    "ü.x",
    "a" * 129 + ".x",
    "a.b\x00",
    "a.b c",
    "a.b/../../c",
]
BAD_EVENT_TYPES = ["", "Partition", "partition ", "program_status", "💥", "x" * 2_000, "data\x00"]


def _unique(n: int) -> str:
    return f"fz{n}"


def _padding(rng: random.Random, size: int) -> str:
    return "".join(rng.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=size))


def _rich_schedule(rng: random.Random, n: int) -> Schedule:
    """A valid schedule of a random shape (what truncation and mutation start from)."""
    trigger: Trigger = rng.choice(
        [
            EVERY_5_S,
            CronTrigger("0 */2 * * *", "Europe/Paris"),
            FrequencyTrigger(TimeUnit.SECONDS, rng.randint(1, 3_600), rng.choice([None, T0])),
        ]
    )
    data = {f"k{i}": _padding(rng, rng.randint(0, 40)) for i in range(rng.randint(0, 6))}
    return schedule("fz", _unique(n), trigger, data=data)


# --- generators: (rng, n, known_dataset) -> Message ------------------------------------------------------

Generator = Callable[[random.Random, int, str], Message]


def _valid_base(rng: random.Random, topic: str, n: int, known_dataset: str) -> bytes:
    if topic == COMMANDS:
        return command(_rich_schedule(rng, n))
    if topic == LIGHT:
        rec = task_definition("fz", _unique(n), frequency={"timeUnit": "MINUTES", "time": rng.randint(1, 99)})
        return encode("TaskDefinition", rec)
    return notification("partition", partition_payload(f"fz.d{n}", f"p{n}"))


def _marker_key(topic: str, n: int) -> bytes:
    return f"fuzz-{topic}-{n}".encode()


def _bytes_generators(topic: str) -> dict[str, tuple[int, Generator]]:
    """Byte-level damage, the same for every topic: name -> (weight, generator)."""

    def random_bytes(rng: random.Random, n: int, ds: str) -> Message:
        size = rng.choice([1, 2, 3, 4, 7, 16, 64, 512, 4_096])
        return Message(topic, _marker_key(topic, n), rng.randbytes(size), "random-bytes", certain=False)

    def empty(rng: random.Random, n: int, ds: str) -> Message:
        return Message(topic, _marker_key(topic, n), rng.choice([None, b""]), "empty")

    def truncated(rng: random.Random, n: int, ds: str) -> Message:
        base = _valid_base(rng, topic, n, ds)
        value = base[: rng.randrange(1, len(base))]
        # (cut just before the fields added since a release, it is that release's message: valid)
        return Message(
            topic, _marker_key(topic, n), value, "truncated", certain=not _a_released_message(topic, value)
        )

    def mutated(rng: random.Random, n: int, ds: str) -> Message:
        value = bytearray(_valid_base(rng, topic, n, ds))
        for _ in range(rng.randint(1, 4)):
            value[rng.randrange(len(value))] = rng.randrange(256)
        return Message(topic, _marker_key(topic, n), bytes(value), "mutated", certain=False)

    def trailing(rng: random.Random, n: int, ds: str) -> Message:
        value = _valid_base(rng, topic, n, ds) + rng.randbytes(rng.randint(1, 8))
        return Message(topic, _marker_key(topic, n), value, "trailing-bytes")

    def wrong_schema(rng: random.Random, n: int, ds: str) -> Message:
        other = rng.choice([t for t in TOPICS if t != topic])
        value = _valid_base(rng, other, n, ds)
        if rng.random() < 0.3:
            value = encode(
                "FiredTask",
                {
                    "key": {"tenant": "fz", "name": _unique(n)},
                    "jobId": f"fz/{n}@{T0}",
                    "dueAt": T0,
                    "firedAt": T0,
                    "data": {},
                    "missed": 0,
                    "catchUp": False,
                },
            )
        return Message(topic, _marker_key(topic, n), value, "wrong-schema", certain=False)

    def framed_garbage(rng: random.Random, n: int, ds: str) -> Message:
        value = b"\x00" + rng.randbytes(4) + rng.randbytes(rng.randint(1, 64))
        return Message(topic, _marker_key(topic, n), value, "confluent-framed-garbage", certain=False)

    def json_not_avro(rng: random.Random, n: int, ds: str) -> Message:
        value = json.dumps({"tenant": "fz", "name": _unique(n), "trigger": {"type": "cron"}}).encode()
        return Message(topic, _marker_key(topic, n), value, "json-not-avro", certain=False)

    def oversized(rng: random.Random, n: int, ds: str) -> Message:
        size = rng.choice(
            [MAX_MESSAGE_BYTES + 1, MAX_MESSAGE_BYTES + 4_096, 1_048_576, 1_048_576, 4 * 1_048_576]
        )
        head = _valid_base(rng, topic, n, ds)  # unique, so the dead letter's head says which message it was
        return Message(topic, _marker_key(topic, n), head + rng.randbytes(size - len(head)), "oversized")

    return {
        "random-bytes": (6, random_bytes),
        "empty": (1, empty),
        "truncated": (6, truncated),
        "mutated": (5, mutated),
        "trailing-bytes": (2, trailing),
        "wrong-schema": (2, wrong_schema),
        "confluent-framed-garbage": (1, framed_garbage),
        "json-not-avro": (1, json_not_avro),
        "oversized": (1, oversized),
    }


def _cmd(kind: str, s: Schedule, action: Action = Action.INSERT, certain: bool = True) -> Message:
    return Message(COMMANDS, key_bytes(s.key), command(s, action), kind, certain)


def _command_generators() -> dict[str, tuple[int, Generator]]:
    def unknown_key(rng: random.Random, n: int, ds: str) -> Message:
        action = rng.choice([a for a in Action if a is not Action.INSERT])
        s = schedule("fz", _unique(n))
        value = encode_command(ScheduleCommand(s.key, action, s if action is Action.UPDATE else None))
        return Message(COMMANDS, key_bytes(s.key), value, "no-such-schedule")

    def no_schedule(rng: random.Random, n: int, ds: str) -> Message:
        key = ScheduleKey("fz", _unique(n))
        value = encode_command(ScheduleCommand(key, rng.choice([Action.INSERT, Action.UPDATE])))
        return Message(COMMANDS, key_bytes(key), value, "no-schedule")

    def key_mismatch(rng: random.Random, n: int, ds: str) -> Message:
        s = schedule("fz", _unique(n))
        value = encode_command(ScheduleCommand(ScheduleKey("fz", f"other{n}"), Action.INSERT, s))
        return Message(COMMANDS, key_bytes(s.key), value, "key-mismatch")

    def bad_action(rng: random.Random, n: int, ds: str) -> Message:
        key = ScheduleKey("fz", _unique(n))
        value = encode_command(ScheduleCommand(key, Action.DELETE))
        at = len(avro_string(key.tenant) + avro_string(key.name))
        value = (
            value[:at] + zigzag(rng.choice([len(Action), len(Action) + 1, 99, _INT_MAX])) + value[at + 1 :]
        )
        return Message(COMMANDS, key_bytes(key), value, "unknown-action")

    def bad_name(rng: random.Random, n: int, ds: str) -> Message:
        bad = rng.choice([*BAD_IDENTIFIERS, "too-long"])
        if rng.random() < 0.5:
            tenant = "t" * (MAX_TENANT_LEN + 1) if bad == "too-long" else bad
            s = schedule(tenant, _unique(n))
        else:
            name = _unique(n) + "n" * MAX_NAME_LEN if bad == "too-long" else bad and f"{_unique(n)}{bad}"
            s = schedule("fz", name)
        return _cmd("bad-name", s)

    def invalid_utf8(rng: random.Random, n: int, ds: str) -> Message:
        s = schedule("fz", f"{_unique(n)}SURR")
        value = command(s).replace(
            b"SURR", rng.choice([b"\xed\xa0\x80X", b"\xff\xfe\xfd\xfc", b"\xc0\xafXY"])
        )
        return Message(COMMANDS, key_bytes(s.key), value, "invalid-utf8")

    def bad_cron(rng: random.Random, n: int, ds: str) -> Message:
        if rng.random() < 0.75:
            trigger = CronTrigger(rng.choice(BAD_CRONS), rng.choice(["UTC", "Europe/Paris"]))
            return _cmd("bad-cron", schedule("fz", _unique(n), trigger))
        if rng.random() < 0.5:
            return _cmd(
                "bad-time-zone", schedule("fz", _unique(n), CronTrigger("* * * * *", rng.choice(BAD_ZONES)))
            )
        tokens = ["*", "*/0", "61", "-1", "a", "1-", ",", "?", "L", "W", "#", "9" * 12, "١", "*/5", "0"]
        expression = " ".join(rng.choice(tokens) for _ in range(rng.choice([4, 5, 6, 7])))
        return _cmd("random-cron", schedule("fz", _unique(n), CronTrigger(expression)), certain=False)

    def bad_number(rng: random.Random, n: int, ds: str) -> Message:
        name = _unique(n)
        big = [-1, _LONG_MIN, _LONG_MAX]
        shapes: list[Callable[[], Schedule]] = [
            lambda: schedule(
                "fz",
                name,
                FrequencyTrigger(
                    TimeUnit.SECONDS, rng.choice([0, -1, _INT_MIN, _INT_MAX, MAX_FREQUENCY_TIME + 1])
                ),
            ),
            lambda: schedule("fz", name, FrequencyTrigger(TimeUnit.SECONDS, 5, rng.choice([-1, _LONG_MIN]))),
            lambda: schedule("fz", name, catch_up_window_ms=rng.choice([*big, MAX_CATCH_UP_WINDOW_MS + 1])),
            lambda: schedule(
                "fz", name, PartitionTrigger("fz.data", rng.choice([0, *big, 2**62])), program=_PROGRAM
            ),
            lambda: schedule("fz", name, DataSizeTrigger("fz.data", rng.choice([0, *big])), program=_PROGRAM),
            lambda: schedule("fz", name, ElapsedTrigger(rng.choice([0, 999, *big])), program=_PROGRAM),
            lambda: schedule(
                "fz",
                name,
                program=_PROGRAM,
                constraints=(
                    rng.choice(
                        [
                            ConcurrencyConstraint(rng.choice([0, -1, _INT_MIN, _INT_MAX])),
                            DelayConstraint(rng.choice(big)),
                            LastRunConstraint(rng.choice(big)),
                            RateConstraint(rng.choice([0, -1, _INT_MAX]), TimeUnit.HOURS),
                        ]
                    ),
                ),
            ),
            lambda: schedule(
                "fz",
                name,
                program=_PROGRAM,
                timeout=PendingTimeout(rng.choice([0, *big]), TimeoutAction.DISCARD),
            ),
        ]
        return _cmd("bad-number", rng.choice(shapes)())

    def big_data(rng: random.Random, n: int, ds: str) -> Message:
        if rng.random() < 0.5:
            data = {f"k{i}": "v" for i in range(MAX_DATA_ENTRIES + rng.randint(1, 100))}
        else:
            data = {"big": "é" * (MAX_DATA_BYTES // 2 + rng.randint(1, 1_000))}  # 2 bytes a character
        return _cmd("big-data", schedule("fz", _unique(n), data=data))

    def deep(rng: random.Random, n: int, ds: str) -> Message:
        depth = rng.choice([9, 12, 16, 17, 18, 64, 1_000, 4_000, 10_000, 10_000, 60_000, 100_000])
        s = ScheduleKey("fz", _unique(n))
        return Message(COMMANDS, key_bytes(s), nested_command(depth, s.tenant, s.name), f"nested-{depth}")

    def wide(rng: random.Random, n: int, ds: str) -> Message:
        leaves = rng.choice([MAX_TRIGGER_LEAVES + 1, 1_000, 10_000])
        tree = CompositeTrigger("OR", (EVERY_5_S,) * leaves)
        return _cmd(f"wide-{leaves}", schedule("fz", _unique(n), tree, program=_PROGRAM))

    def bad_trigger(rng: random.Random, n: int, ds: str) -> Message:
        name = _unique(n)
        other = ProgramId("fz", "app", "spark", "other")
        shapes: list[Callable[[], Schedule]] = [
            lambda: schedule("fz", name, PartitionTrigger(rng.choice(BAD_DATASETS)), program=_PROGRAM),
            lambda: schedule("fz", name, PartitionTrigger("fz.data")),  # an event trigger needs a program
            lambda: schedule("fz", name, CompositeTrigger("AND", ()), program=_PROGRAM),
            lambda: schedule("fz", name, ProgramStatusTrigger(_PROGRAM), program=_PROGRAM),  # itself
            lambda: schedule("fz", name, ProgramStatusTrigger(other, ()), program=_PROGRAM),
            lambda: schedule(
                "fz", name, ProgramStatusTrigger(ProgramId("fz", "a", "b", "c" * 200)), program=_PROGRAM
            ),
            lambda: schedule("fz", name, ElapsedTrigger(5_000, "fz.data", other), program=_PROGRAM),
            lambda: schedule("fz", name, constraints=(DelayConstraint(1_000),)),  # constraints need a program
            lambda: schedule(
                "fz", name, program=_PROGRAM, constraints=(DelayConstraint(1),) * 17
            ),  # more than MAX_CONSTRAINTS
            lambda: schedule(
                "fz",
                name,
                program=_PROGRAM,
                constraints=(ConcurrencyConstraint(1, group=rng.choice(["", "a b", "g" * 200, "ü"])),),
            ),
            lambda: schedule(
                "fz",
                name,
                program=_PROGRAM,
                constraints=(TimeWindowConstraint(rng.choice(["24:00", "9:00", "", "١٢:00"]), "06:00"),),
            ),
            lambda: schedule(
                "fz",
                name,
                program=_PROGRAM,
                constraints=(TimeWindowConstraint("22:00", "06:00", "Mars/Base"),),
            ),
            lambda: schedule("fz", name, program=ProgramId("fz", "", "spark", "x")),
        ]
        return _cmd("bad-trigger", rng.choice(shapes)())

    def bad_topic(rng: random.Random, n: int, ds: str) -> Message:
        return _cmd("bad-topic", schedule("fz", _unique(n), topic=rng.choice(BAD_TOPICS)))

    def unknown_program(rng: random.Random, n: int, ds: str) -> Message:
        return _cmd(
            "unknown-program", schedule("fz", _unique(n), PartitionTrigger("fz.data"), program=_PROGRAM)
        )

    return {
        "no-such-schedule": (4, unknown_key),
        "no-schedule": (1, no_schedule),
        "key-mismatch": (1, key_mismatch),
        "unknown-action": (1, bad_action),
        "bad-name": (4, bad_name),
        "invalid-utf8": (1, invalid_utf8),
        "bad-cron": (8, bad_cron),
        "bad-number": (6, bad_number),
        "big-data": (2, big_data),
        "nested": (3, deep),
        "wide": (1, wide),
        "bad-trigger": (4, bad_trigger),
        "bad-topic": (2, bad_topic),
        "unknown-program": (1, unknown_program),
    }


def _light_generators() -> dict[str, tuple[int, Generator]]:
    def no_frequency(rng: random.Random, n: int, ds: str) -> Message:
        action = rng.choice(["INSERT", "UPDATE"])
        return light(task_definition("fz", _unique(n), action=action, frequency=None), "no-frequency")

    def bad_frequency(rng: random.Random, n: int, ds: str) -> Message:
        time = rng.choice([0, -1, _INT_MIN, _INT_MAX, MAX_FREQUENCY_TIME + 1])
        rec = task_definition(
            "fz", _unique(n), frequency={"timeUnit": rng.choice(list(TimeUnit)), "time": time}
        )
        return light(rec, "bad-frequency")

    def bad_start(rng: random.Random, n: int, ds: str) -> Message:
        return light(task_definition("fz", _unique(n), start=rng.choice([-1, _LONG_MIN])), "bad-start")

    def bad_name(rng: random.Random, n: int, ds: str) -> Message:
        bad = rng.choice([*BAD_IDENTIFIERS, "too-long"])
        if rng.random() < 0.5:
            rec = task_definition("h" * (MAX_TENANT_LEN + 1) if bad == "too-long" else bad, _unique(n))
        else:
            rec = task_definition(
                "fz", _unique(n) + "n" * MAX_NAME_LEN if bad == "too-long" else bad and _unique(n) + bad
            )
        return light(rec, "bad-name")

    def bad_topic(rng: random.Random, n: int, ds: str) -> Message:
        return light(task_definition("fz", _unique(n), topic=rng.choice(BAD_TOPICS)), "bad-topic")

    def big_data(rng: random.Random, n: int, ds: str) -> Message:
        if rng.random() < 0.5:
            data = {f"k{i}": "" for i in range(MAX_DATA_ENTRIES + rng.randint(1, 50))}
        else:
            data = {"big": "x" * (MAX_DATA_BYTES + rng.randint(1, 1_000))}
        return light(task_definition("fz", _unique(n), data=data), "big-data")

    def unknown_key(rng: random.Random, n: int, ds: str) -> Message:
        rec = task_definition("fz", _unique(n), action=rng.choice(["UPDATE", "DELETE"]))
        return light(rec, "no-such-schedule")  # refused on the commands topic, as a command

    return {
        "no-frequency": (2, no_frequency),
        "bad-frequency": (3, bad_frequency),
        "bad-start": (1, bad_start),
        "bad-name": (3, bad_name),
        "bad-topic": (2, bad_topic),
        "big-data": (1, big_data),
        "no-such-schedule": (3, unknown_key),
    }


def _event_generators() -> dict[str, tuple[int, Generator]]:
    """Malformed payloads name the known dataset: if the worker took one, the valid events' job would
    count it."""

    def ev(kind: str, n: int, event_type: str, payload: dict[str, str], timestamp: int = T0) -> Message:
        return Message(EVENTS, _marker_key(EVENTS, n), notification(event_type, payload, timestamp), kind)

    def bad_type(rng: random.Random, n: int, ds: str) -> Message:
        return ev("bad-event-type", n, rng.choice(BAD_EVENT_TYPES), partition_payload(ds, f"p{n}"))

    def bad_dataset(rng: random.Random, n: int, ds: str) -> Message:
        bad = rng.choice(BAD_DATASETS)
        # a unique suffix where it cannot make the name valid ("ns." + "84" would be a dataset nobody watches)
        payload = partition_payload(bad + f"{n}" * rng.randint(0, int(not bad.endswith("."))), f"p{n}")
        if rng.random() < 0.2:
            del payload["datasetId"]
            payload["n"] = str(n)
        return ev("bad-dataset", n, rng.choice(["partition", "data"]), payload)

    def bad_partition_keys(rng: random.Random, n: int, ds: str) -> Message:
        keys = rng.choice(
            [
                None,
                "[]",
                "{}",
                "null",
                "1",
                '"p"',
                "not json",
                "[1, 2",
                "[" * 10_000,
                "[" * 5_000 + "]" * 5_000,
                "{" * 3_000,
            ]
        )
        payload = {"datasetId": ds, "bytes": "1", "n": str(n)}
        if keys is not None:
            payload["partitionKeys"] = keys
        return ev("bad-partition-keys", n, "partition", payload)

    def bad_bytes(rng: random.Random, n: int, ds: str) -> Message:
        size = rng.choice(
            ["-1", "x", "", "1e3", "0x10", " 12", "12 ", "1_000", "١٢", "9" * 20, "9" * 5_000, "+5"]
        )
        return ev(
            "bad-bytes", n, rng.choice(["partition", "data"]), partition_payload(ds, f"p{n}", size=size)
        )

    def big_payload(rng: random.Random, n: int, ds: str) -> Message:
        payload = partition_payload(ds, f"p{n}")
        if rng.random() < 0.5:
            payload.update({f"extra{i}": "" for i in range(70)})
        else:
            payload["extra"] = "é" * (
                MAX_PAYLOAD_BYTES // 2 + 100
            )  # under the limit in characters, not bytes
        return ev("big-payload", n, "partition", payload)

    def bad_program_status(rng: random.Random, n: int, ds: str) -> Message:
        payload = {"programId": "fz/app/spark/p", "runId": f"r{n}", "status": "COMPLETED"}
        field, value = rng.choice(
            [
                ("programId", "fz/app/spark"),
                ("programId", "fz/app/spark/p/q"),
                ("programId", "/app/spark/p"),
                ("programId", "f" * 129 + "/app/spark/p"),
                ("programId", "fz/app/spark/p\x00"),
                ("status", "DONE"),
                ("status", "completed"),
                ("status", ""),
                ("runId", ""),
                ("runId", "r" * 257),
            ]
        )
        payload[field] = value
        return ev("bad-program-status", n, "program-status", payload)

    def bad_timestamp(rng: random.Random, n: int, ds: str) -> Message:
        timestamp = rng.choice([-1, _LONG_MIN, MAX_TIMESTAMP_MS + 1, _LONG_MAX])
        return ev("bad-timestamp", n, "partition", partition_payload(ds, f"p{n}"), timestamp)

    return {
        "bad-event-type": (2, bad_type),
        "bad-dataset": (3, bad_dataset),
        "bad-partition-keys": (3, bad_partition_keys),
        "bad-bytes": (3, bad_bytes),
        "big-payload": (1, big_payload),
        "bad-program-status": (2, bad_program_status),
        "bad-timestamp": (2, bad_timestamp),
    }


GENERATORS: dict[str, dict[str, tuple[int, Generator]]] = {
    COMMANDS: {**_bytes_generators(COMMANDS), **_command_generators()},
    LIGHT: {**_bytes_generators(LIGHT), **_light_generators()},
    EVENTS: {**_bytes_generators(EVENTS), **_event_generators()},
}


def hostile(rng: random.Random, topic: str, n: int, known_dataset: str, kind: str | None = None) -> Message:
    """One hostile message for `topic` (of generator `kind`, or a weighted random one); `n` makes it unique."""
    generators = GENERATORS[topic]
    if kind is None:
        kind = rng.choices(list(generators), weights=[w for w, _ in generators.values()])[0]
    msg = generators[kind][1](rng, n, known_dataset)
    return replace(msg, kind=f"{topic}/{msg.kind}")
