"""Delayed messages' pure logic (scheduler/domain/delayed.py): etf1's headers, limits, the storage keys."""

from __future__ import annotations

import pytest

from scheduler.domain.delayed import (
    MAX_VALUE_BYTES,
    DelayedMessage,
    InvalidDelayed,
    due_key,
    due_until,
    from_delayed_record,
    instant_of,
    parse_epoch,
)
from scheduler.worker.delayed import decode_message, encode_message

pytestmark = pytest.mark.unit

TOPIC = [("scheduler-target-topic", b"out")]


@pytest.mark.parametrize(
    ("raw", "ms"),
    [
        (b"1795870100", 1_795_870_100_000),  # etf1: seconds
        (b"1795870100.25", 1_795_870_100_250),
        (b"1795870100250", 1_795_870_100_250),  # ms
        (b" 0 ", 0),
    ],
)
def test_an_epoch_is_seconds_or_milliseconds(raw: bytes, ms: int) -> None:
    assert parse_epoch(raw) == ms


@pytest.mark.parametrize("raw", [b"soon", b"-5", b"nan", b""])
def test_an_epoch_that_is_no_instant_is_refused(raw: bytes) -> None:
    with pytest.raises(InvalidDelayed, match="scheduler-epoch"):
        parse_epoch(raw)


def test_a_record_keeps_its_headers_and_is_delivered_with_its_id_and_when() -> None:
    headers = [("scheduler-epoch", b"1795870100"), *TOPIC, ("scheduler-target-key", b"k"), ("trace", b"t")]
    m = from_delayed_record(b"id-1", b"payload", headers, received_at=7)
    assert m is not None
    assert (m.id, m.deliver_at, m.topic, m.delivered_key, m.value) == (
        b"id-1", 1_795_870_100_000, "out", b"k", b"payload",
    )  # fmt: skip
    assert m.delivered_headers(99)[-3:] == [
        ("trace", b"t"),
        ("scheduler-id", b"id-1"),
        ("scheduler-delivered-at", b"99"),
    ]
    assert decode_message(encode_message(m)) == m


def test_without_a_target_key_the_id_is_the_delivered_key() -> None:
    m = from_delayed_record(b"id-1", b"x", [("scheduler-epoch", b"5"), *TOPIC], 0)
    assert m is not None and m.delivered_key == b"id-1"


def test_a_tombstone_is_a_cancel() -> None:
    assert from_delayed_record(b"id-1", None, [], 0) is None


@pytest.mark.parametrize(
    ("key", "value", "headers", "reason"),
    [
        (b"i", b"v", TOPIC, "no scheduler-epoch"),
        (b"i", b"v", [("scheduler-epoch", b"5")], "no scheduler-target-topic"),
        (b"", b"v", [("scheduler-epoch", b"5"), *TOPIC], "needs an id"),
        (b"i", b"v", [("scheduler-epoch", b"5"), ("scheduler-target-topic", b"a b")], "1-249 characters"),
        (b"i", b"v" * (MAX_VALUE_BYTES + 1), [("scheduler-epoch", b"5"), *TOPIC], "at most"),
        (b"i", b"v", [("scheduler-epoch", b"99999999999999"), *TOPIC], "after 2200"),
    ],
)
def test_what_cannot_be_held_names_why(key: bytes, value: bytes, headers: list, reason: str) -> None:
    with pytest.raises(InvalidDelayed, match=reason):
        from_delayed_record(key, value, headers, 0)


def test_due_keys_sort_by_instant_then_id_and_due_until_bounds_them() -> None:
    keys = sorted([due_key(2_000, b"a"), due_key(1_000, b"z"), due_key(1_000, b"b"), due_key(70_000, b"")])
    assert [instant_of(k) for k in keys] == [1_000, 1_000, 2_000, 70_000]
    assert keys[0].endswith(b"b")
    assert [k for k in keys if k < due_until(2_000)] == keys[:3]
    assert [k for k in keys if k < due_until(1_999)] == keys[:2]


def test_a_message_round_trips_with_null_key_value_and_header() -> None:
    m = DelayedMessage(b"\x00\xff", 5, "t", None, None, (("h", None),), 1)
    assert decode_message(encode_message(m)) == m
