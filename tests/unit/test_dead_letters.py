"""A dead letter names the message as its producer wrote it: for a command moved to the partition that owns
its key, the original key, partition and offset, not the moved copy's."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.structs import ConsumerRecord

from scheduler.domain.model import Action, ScheduleCommand, ScheduleKey
from scheduler.kafka.config import Settings
from scheduler.kafka.partitioner import kafka_partition
from scheduler.wire.codec import MAX_MESSAGE_BYTES, decode, encode_command, key_bytes
from scheduler.wire.dead_letters import ORIGIN_HEADER, Origin, dead_letter_record, moved_headers, origin
from scheduler.worker.app import Worker

pytestmark = pytest.mark.unit

PARTITIONS = 4
KEY = ScheduleKey("acme", "never-inserted")
OWNER = kafka_partition(key_bytes(KEY), PARTITIONS)
WRONG = (OWNER + 1) % PARTITIONS


def _record(
    topic: str, partition: int, offset: int, key: bytes | None, value: bytes, headers: Any = ()
) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(
        topic, partition, offset, 0, 0, key, value, None, len(key or b""), len(value), list(headers or ())
    )


def _moved(
    original: ConsumerRecord[bytes, bytes], partition: int, offset: int
) -> ConsumerRecord[bytes, bytes]:
    """The copy a move produces: the schedule key, on the partition that owns it, with the move's headers."""
    return _record(
        original.topic, partition, offset, key_bytes(KEY), original.value or b"", moved_headers(original)
    )


def test_a_moved_command_is_dead_lettered_with_the_key_partition_and_offset_its_producer_gave_it() -> None:
    original = _record("app-commands", WRONG, 7, b"a plain string key", b"the command")
    moved = _moved(original, OWNER, 0)
    assert origin(moved, moved_here=True) == Origin(WRONG, 7, b"a plain string key")
    key, record = dead_letter_record(moved.topic, origin(moved, moved_here=True), moved.value, "why", 5)
    assert key == b"a plain string key"
    assert record == {
        "topic": "app-commands",
        "partition": WRONG,
        "offset": 7,
        "key": b"a plain string key",
        "value": b"the command",
        "reason": "why",
        "at": 5,
    }


def test_a_command_produced_without_a_key_is_dead_lettered_without_one() -> None:
    moved = _moved(_record("app-commands", WRONG, 3, None, b"the command"), OWNER, 0)
    assert origin(moved, moved_here=True) == Origin(WRONG, 3, None)
    assert dead_letter_record(moved.topic, origin(moved, moved_here=True), moved.value, "why", 5)[0] is None


def test_a_command_moved_twice_keeps_its_first_origin() -> None:
    original = _record("app-commands", 2, 9, b"k", b"v")
    twice = _moved(_moved(original, 1, 4), 0, 1)
    assert origin(twice, moved_here=True) == Origin(2, 9, b"k")


def test_origin_headers_count_only_where_moves_write_and_only_when_they_make_sense() -> None:
    moved = _moved(_record("app-commands", WRONG, 7, b"k", b"v"), OWNER, 0)
    assert origin(moved, moved_here=False) == Origin(OWNER, 0, key_bytes(KEY))  # e.g. the events topic
    for bad in (
        b"not json",
        b"[]",
        b'{"partition": 1}',
        b'{"partition": -1, "offset": 2}',
        b'{"partition": 1.5, "offset": 2}',
    ):
        message = _record("app-commands", 1, 2, b"own", b"v", [(ORIGIN_HEADER, bad)])
        assert origin(message, moved_here=True) == Origin(1, 2, b"own"), bad


def test_an_oversized_original_key_is_cut_in_the_dead_letter_and_the_reason_says_so() -> None:
    big = b"k" * (MAX_MESSAGE_BYTES + 10)
    moved = _moved(_record("app-commands", WRONG, 7, big, b"v"), OWNER, 0)
    key, record = dead_letter_record(moved.topic, origin(moved, moved_here=True), moved.value, "why", 5)
    assert key == big[:MAX_MESSAGE_BYTES] and record["key"] == key
    assert record["reason"] == f"why (key cut to its first {MAX_MESSAGE_BYTES} of {len(big)} bytes)"


class _Producer:
    """Records what the worker produces."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, bytes, int | None, Any]] = []

    async def send(
        self, topic: str, key: bytes | None, value: bytes, partition: int | None = None, headers: Any = None
    ) -> asyncio.Future[object]:
        self.sent.append((topic, key, value, partition, headers))
        done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


async def test_the_worker_moves_a_command_with_its_origin_and_dead_letters_the_original(
    tmp_path: Path,
) -> None:
    worker = Worker(
        Settings(app_id="app", data_dir=tmp_path, auth="off", partitions=PARTITIONS), clock=lambda: 5
    )
    producer = worker.output._producer = _Producer()  # type: ignore[assignment]
    value = encode_command(ScheduleCommand(KEY, Action.DELETE))
    await worker.handle_command(
        SimpleNamespace(message=_record("app-commands", WRONG, 7, b"a plain string key", value))
    )
    [(topic, key, moved_value, partition, headers)] = producer.sent
    assert (topic, key, moved_value, partition) == ("app-commands", key_bytes(KEY), value, OWNER)
    moved = _record(topic, OWNER, 0, key, moved_value, headers)
    await worker.dead_letter(SimpleNamespace(message=moved), "DELETE of a schedule that does not exist")
    topic, key, letter, _, _ = producer.sent[-1]
    record = decode("DeadLetter", letter)
    assert (topic, key) == ("app-dead-letters", b"a plain string key")
    assert (record["topic"], record["partition"], record["offset"], record["key"], record["value"]) == (
        "app-commands",
        WRONG,
        7,
        b"a plain string key",
        value,
    )
