"""Events that fire triggers: partitions and bytes added to a dataset, program status changes, a polling
sensor saying "now". Pure.

An event is a CDAP-style notification (timestamp, event type, payload). Its event key says which
triggers can care: `partition:<namespace>.<dataset>` for data events (partition triggers and data-size
triggers both listen there), `program:<namespace>/<application>/<type>/<name>` for program status,
`sensor:<namespace>/<application>/<type>/<name>` for a sensor's fires (worker/sensors.py sends them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from scheduler.domain.basics import DATASET_RE, ProgramId
from scheduler.domain.basics import validate_dataset as validate_dataset  # (it lives with the ids)
from scheduler.domain.runs import RunStatus


class EventType(StrEnum):
    PARTITION = "partition"  # payload: datasetId, partitionKeys (JSON list), bytes (optional)
    DATA = "data"  # payload: datasetId, bytes
    PROGRAM_STATUS = "program-status"  # payload: programId, runId, status
    SENSOR = "sensor"  # payload: sensorId (a program of kind sensor), runKeys (JSON list, optional)


class InvalidEvent(ValueError):
    pass


PROGRAM_STATUSES = tuple(s.value for s in RunStatus)
MAX_PAYLOAD_ENTRIES = 64
MAX_PAYLOAD_BYTES = 64 * 1024  # keys and values, UTF-8
MAX_TIMESTAMP_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


@dataclass(frozen=True, slots=True)
class Notification:
    timestamp: int
    event_type: str
    payload: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DataEvent:
    dataset: str
    partitions: int  # partitions added by this event
    bytes: int


@dataclass(frozen=True, slots=True)
class ProgramStatusEvent:
    program: ProgramId
    run_id: str
    status: str


@dataclass(frozen=True, slots=True)
class SensorEvent:
    sensor: ProgramId
    run_keys: int  # what it said is new (1 when it named nothing)


def sensor_key(sensor: ProgramId) -> str:
    return f"sensor:{sensor.id}"


def dataset_key(dataset: str) -> str:
    return f"partition:{dataset}"


def program_key(program: ProgramId) -> str:
    return f"program:{program.id}"


def parse(n: Notification) -> DataEvent | ProgramStatusEvent | SensorEvent:
    """The event a notification carries; InvalidEvent says what is wrong with it."""
    p = n.payload
    if len(p) > MAX_PAYLOAD_ENTRIES:
        raise InvalidEvent("payload too large")
    try:
        size = sum(len(k.encode()) + len(v.encode()) for k, v in p.items())
    except UnicodeEncodeError:
        raise InvalidEvent("payload is not valid Unicode (a lone surrogate)") from None
    if size > MAX_PAYLOAD_BYTES:
        raise InvalidEvent("payload too large")
    if not 0 <= n.timestamp <= MAX_TIMESTAMP_MS:
        raise InvalidEvent(f"timestamp {n.timestamp} is not epoch milliseconds between 1970 and 9999")
    if n.event_type in (EventType.PARTITION, EventType.DATA):
        dataset = p.get("datasetId", "")
        if not DATASET_RE.fullmatch(dataset):
            raise InvalidEvent(f"datasetId {dataset!r} is not '<namespace>.<dataset>'")
        size = _non_negative_int(p.get("bytes", "0"), "bytes")
        partitions = 0
        if n.event_type == EventType.PARTITION:
            try:
                keys = json.loads(p.get("partitionKeys", "[]"))
            except (json.JSONDecodeError, RecursionError):
                raise InvalidEvent("partitionKeys is not a JSON list") from None
            if not isinstance(keys, list) or not keys:
                raise InvalidEvent("partitionKeys must be a non-empty JSON list")
            if _depth(keys) > MAX_KEY_DEPTH:  # (Python 3.13's parser takes what 3.11's recursion refused)
                raise InvalidEvent(f"partitionKeys nests deeper than {MAX_KEY_DEPTH} levels")
            partitions = len(keys)
        return DataEvent(dataset, partitions, size)
    if n.event_type == EventType.PROGRAM_STATUS:
        try:
            program = ProgramId.parse(p.get("programId", ""))
        except ValueError as exc:
            raise InvalidEvent(str(exc)) from None
        status = p.get("status", "")
        if status not in PROGRAM_STATUSES:
            raise InvalidEvent(f"unknown program status {status!r}")
        run_id = p.get("runId", "")
        if not run_id or len(run_id) > 256:
            raise InvalidEvent("runId missing or too long")
        return ProgramStatusEvent(program, run_id, status)
    if n.event_type == EventType.SENSOR:
        try:
            sensor = ProgramId.parse(p.get("sensorId", ""))
        except ValueError as exc:
            raise InvalidEvent(str(exc).replace("program id", "sensorId")) from None
        try:
            keys = json.loads(p.get("runKeys", "[]"))
        except (json.JSONDecodeError, RecursionError):
            raise InvalidEvent("runKeys is not a JSON list") from None
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise InvalidEvent("runKeys must be a JSON list of strings")
        return SensorEvent(sensor, max(len(keys), 1))
    raise InvalidEvent(f"unknown event type {n.event_type[:64]!r}")


def event_key(event: DataEvent | ProgramStatusEvent | SensorEvent) -> str:
    if isinstance(event, DataEvent):
        return dataset_key(event.dataset)
    if isinstance(event, SensorEvent):
        return sensor_key(event.sensor)
    return program_key(event.program)


def _non_negative_int(value: str, name: str) -> int:
    # ASCII digits only: int() would also take " 12", "1_000" and other scripts' digits
    digits = value.removeprefix("-")
    if not (digits.isascii() and digits.isdigit()):
        raise InvalidEvent(f"{name} is not an integer: {value[:40]!r}")
    if digits != value:
        raise InvalidEvent(f"{name} out of range")
    if len(value) > 19 or int(value) >= 2**63:
        raise InvalidEvent(f"{name} out of range")
    return int(value)


#: how deep a partition key may nest its lists and objects
MAX_KEY_DEPTH = 32


def _depth(value: Any) -> int:
    """How deep a parsed JSON value nests (a scalar: 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, list | dict):
            deepest = max(deepest, depth)
            if depth <= MAX_KEY_DEPTH:  # (past the limit the answer is known)
                stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest
