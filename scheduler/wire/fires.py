"""What a fire sends: a schedule's FiredTask (or light-scheduler's TaskDefinition) with everything but its
instants encoded once per schedule (the punctuator's hot path), and a fire read back."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from scheduler.domain.model import FiredTask, FrequencyTrigger, OutputFormat, Schedule, ScheduleKey
from scheduler.wire.avro_writer import ONE_BYTE as _ONE_BYTE
from scheduler.wire.avro_writer import avro_map
from scheduler.wire.avro_writer import avro_string as _avro_string
from scheduler.wire.avro_writer import zigzag as _zigzag
from scheduler.wire.codec import _symbols, decode, encode, key_bytes, key_to_avro


def encode_fired(f: FiredTask) -> bytes:
    return encode(
        "FiredTask",
        {
            "key": key_to_avro(f.key),
            "jobId": f.job_id,
            "dueAt": f.due_at,
            "firedAt": f.fired_at,
            "data": f.data,
            "missed": f.missed,
            "catchUp": f.catch_up,
        },
    )


class FiredTaskBytes:
    """One schedule's FiredTask with everything but the instants encoded once (the punctuator's hot path;
    one small object per schedule: at 1M schedules every byte here counts). Byte-identical to encode_fired
    (unit-tested)."""

    __slots__ = ("head", "job_prefix", "tail")

    def __init__(self, key: ScheduleKey, data: dict[str, str], head: bytes | None = None) -> None:
        self.head = key_bytes(key) if head is None else head  # head: key_bytes(key), when known already
        self.job_prefix = f"{key.id}@".encode()
        # what follows firedAt in a scheduled fire: data, then missed 0 and catchUp false
        self.tail = avro_map(data) + b"\x00\x00" if data else _NO_DATA_TAIL

    def encode(self, due_at: int, fired_at: int, missed: int = 0, catch_up: bool = False) -> bytes:
        job = self.job_prefix + str(due_at).encode()
        return b"".join(
            (
                self.head,
                _zigzag(len(job)),
                job,
                _zigzag(due_at),
                _zigzag(fired_at),
                self.tail[:-2],  # (data)
                _zigzag(missed),
                b"\x01" if catch_up else b"\x00",
            )
        )

    def parts(self, due_at: int) -> tuple[bytes, bytes]:
        """A scheduled fire split around `firedAt`: (head, tail), the value being head + zigzag(firedAt) +
        tail (missed 0, catchUp false). The punctuator builds them before the due instant, for many
        schedules of one instant in a row: the instant's own bytes are made once (_due_bytes)."""
        text, varint = _due_bytes(due_at)
        prefix = self.job_prefix
        n = len(prefix) + len(text)
        return b"".join(
            (self.head, _ONE_BYTE[n << 1] if n < 64 else _zigzag(n), prefix, text, varint)
        ), self.tail


#: a scheduled fire's bytes after firedAt when it has no data (one object for every such schedule)
_NO_DATA_TAIL = b"\x00\x00\x00"


@lru_cache(maxsize=64)
def _due_bytes(due_at: int) -> tuple[bytes, bytes]:
    """An instant as a job id ends with it (its decimal digits) and as an Avro long."""
    return str(due_at).encode(), _zigzag(due_at)


class TaskDefinitionBytes:
    """What light-scheduler sends to a definition's topic when it fires: the TaskDefinition (seed 001's
    schema, schemaless Avro) with `start` = the due instant, keyed by its TaskDefinitionKey (the same bytes
    as our ScheduleKey). Everything but `start` is encoded once. The same interface as FiredTaskBytes; it
    has no firedAt, missed nor catchUp (a catch-up fire is a TaskDefinition like any other)."""

    __slots__ = ("head", "value_head", "value_tail")

    def __init__(self, schedule: Schedule, head: bytes | None = None) -> None:
        self.head = key_bytes(schedule.key) if head is None else head
        trigger = schedule.trigger
        if isinstance(trigger, FrequencyTrigger):  # TaskFrequency: the unit's index, the time (int)
            frequency = b"\x02" + _zigzag(_symbols().units.index(trigger.unit)) + _zigzag(trigger.time)
        else:
            frequency = b"\x00"  # a cron schedule: light-scheduler has no word for it
        data = schedule.data
        self.value_head = b"".join(
            (self.head, b"\x00", frequency, _avro_string(schedule.topic), b"\x02")  # action INSERT; start:
        )
        self.value_tail = b"\x02" + avro_map(data) if data else b"\x00"  # (data: null when empty)

    def encode(self, due_at: int, fired_at: int = 0, missed: int = 0, catch_up: bool = False) -> bytes:
        return self.value_head + _zigzag(due_at) + self.value_tail

    def parts(self, due_at: int) -> tuple[bytes, None]:
        """The whole value (it has no firedAt to put in later)."""
        return self.encode(due_at), None


FireBytes = FiredTaskBytes | TaskDefinitionBytes


def fire_bytes(schedule: Schedule, head: bytes | None = None) -> FireBytes:
    """The encoder of a schedule's fires, as its output format says (head: its key bytes, when known)."""
    if schedule.output is OutputFormat.TASK_DEFINITION:
        return TaskDefinitionBytes(schedule, head)
    return FiredTaskBytes(schedule.key, schedule.data, head)


def fired_task_encoder(key: ScheduleKey, data: dict[str, str]) -> Callable[[int, int, int, bool], bytes]:
    """encode_fired for one schedule (see FiredTaskBytes)."""
    return FiredTaskBytes(key, data).encode


#: Avro's encoding of a long (the writer's own function, not a call around it: the fire path writes one a fire)
zigzag_long = _zigzag


def decode_fired(data: bytes) -> FiredTask:
    rec = decode("FiredTask", data)
    return FiredTask(
        key=ScheduleKey(rec["key"]["tenant"], rec["key"]["name"]),
        job_id=rec["jobId"],
        due_at=rec["dueAt"],
        fired_at=rec["firedAt"],
        data=dict(rec["data"]),
        missed=rec["missed"],
        catch_up=rec["catchUp"],
    )
