"""Delayed messages: a record held, then delivered to a topic at an instant, cancelled or replaced by its id.

What the Kafka message schedulers do (etf1/kafka-message-scheduler, Karafka's scheduled messages), in their
shape: a record on the delayed topic (`<app>-delayed`) whose key is the message id and whose headers name
the instant and the target,

    scheduler-epoch         when: epoch seconds (etf1's unit), or milliseconds (a value of 12 digits or
                            more: seconds that large are past the year 5000), an integer or a decimal
    scheduler-target-topic  where it is delivered
    scheduler-target-key    the delivered record's key (optional: else the id)

and whose value is delivered as it came, with every header it came with and two more: `scheduler-id` (the
message id: a consumer of an at-least-once delivery drops repeats by it) and `scheduler-delivered-at`
(epoch ms). A tombstone (a null value) of the id cancels the message; a new record of the id replaces it.
An instant already past delivers at once, in due order. Pure logic: parsing, limits, and the keys it is
stored under (worker/delayed.py stores and delivers).

Storage, in the partition's `delayed` table (changelogged, so a new owner restores what is pending), two
entries per message: `d` + deliverAt (8 bytes, big-endian) + id -> the message (Avro DelayedMessage), in
due order for a range scan; and `i` + id -> deliverAt, to find it again by id (cancel, replace, GET).
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from scheduler.domain.basics import MAX_INSTANT_MS
from scheduler.domain.model import TOPIC_PATTERN, TOPIC_RULE

EPOCH_HEADER = "scheduler-epoch"
TARGET_TOPIC_HEADER = "scheduler-target-topic"
TARGET_KEY_HEADER = "scheduler-target-key"
ID_HEADER = "scheduler-id"
DELIVERED_AT_HEADER = "scheduler-delivered-at"

#: the largest value held (Kafka's default largest record is 1 MiB, headers and key included)
MAX_VALUE_BYTES = 1_000_000
MAX_ID_BYTES = 1_024
#: an epoch at or above this is in milliseconds (as seconds it would be after the year 5138)
MS_FROM = 100_000_000_000
_TOPIC_RE = re.compile(TOPIC_PATTERN, re.ASCII)
DUE = b"d"
BY_ID = b"i"


class InvalidDelayed(ValueError):
    """A delayed record that cannot be held (dead-lettered with this reason)."""


Header = tuple[str, bytes | None]


class DelayedMessage(NamedTuple):
    """(A named tuple, not a frozen dataclass: as immutable, and built in a third of the time, once a message
    held and once a message delivered.)"""

    id: bytes
    deliver_at: int  # epoch ms
    topic: str
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    received_at: int

    @property
    def delivered_key(self) -> bytes:
        return self.key if self.key is not None else self.id

    def delivered_headers(self, now: int, at: Header | None = None) -> list[tuple[str, bytes]]:
        """The caller's headers (a null value as empty), then the message id and when it was delivered
        (`at`: delivered_at(now), made once for a delivery's messages). The caller's header pairs are
        reused as they are unless one is null (new pairs were a fifth of the objects a delivery made)."""
        headers = self.headers
        out = [*headers, (ID_HEADER, self.id), at or delivered_at(now)]
        for _, value in headers:
            if value is None:
                out[: len(headers)] = [(name, b"" if value is None else value) for name, value in headers]
                break
        return out  # type: ignore[return-value]

    def to_record(self) -> dict[str, Any]:
        return {
            "id": self.id, "deliverAt": self.deliver_at, "topic": self.topic, "key": self.key,
            "value": self.value, "headers": [{"name": n, "value": v} for n, v in self.headers],
            "receivedAt": self.received_at,
        }  # fmt: skip

    @classmethod
    def from_record(cls, r: dict[str, Any]) -> DelayedMessage:
        return cls(
            r["id"], r["deliverAt"], r["topic"], r["key"], r["value"],
            tuple((h["name"], h["value"]) for h in r["headers"]), r["receivedAt"],
        )  # fmt: skip


def delivered_at(now: int) -> tuple[str, bytes]:
    """The header that says when a message was delivered (epoch ms)."""
    return DELIVERED_AT_HEADER, str(now).encode()


def parse_epoch(raw: bytes | str) -> int:
    """An epoch header's instant in ms: seconds (etf1's unit) or ms, an integer or a decimal."""
    if isinstance(raw, bytes) and raw.isdigit():  # (the common case: whole seconds or ms)
        whole = int(raw)
        return whole if whole >= MS_FROM else whole * 1000
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw
    try:
        number = float(text.strip())
    except ValueError:
        raise InvalidDelayed(f"{EPOCH_HEADER} is not a number: {text[:40]!r}") from None
    if number != number or number < 0:  # (NaN)
        raise InvalidDelayed(f"{EPOCH_HEADER} must be a non-negative number: {text[:40]!r}")
    return round(number) if number >= MS_FROM else round(number * 1000)


#: topics found valid (a producer's records name the same few): at most _TOPICS_CACHED, then it starts again
_VALID_TOPICS: set[str] = set()
_TOPICS_CACHED = 4_096


def _valid_topic(topic: str) -> bool:
    if not _TOPIC_RE.fullmatch(topic):
        return False
    if len(_VALID_TOPICS) >= _TOPICS_CACHED:
        _VALID_TOPICS.clear()
    _VALID_TOPICS.add(topic)
    return True


def message(
    id: bytes,
    deliver_at: int,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: tuple[Header, ...],
    received_at: int,
) -> DelayedMessage:
    """A message to hold, checked against the limits (InvalidDelayed names what is wrong)."""
    if not id:
        raise InvalidDelayed("a delayed message needs an id (its record's key)")
    if len(id) > MAX_ID_BYTES:
        raise InvalidDelayed(f"the id is {len(id)} bytes: at most {MAX_ID_BYTES}")
    if topic not in _VALID_TOPICS and not _valid_topic(topic):
        raise InvalidDelayed(f"{TARGET_TOPIC_HEADER} {TOPIC_RULE}: {topic[:60]!r}")
    if value is not None and len(value) > MAX_VALUE_BYTES:
        raise InvalidDelayed(f"the value is {len(value)} bytes: at most {MAX_VALUE_BYTES}")
    if deliver_at > MAX_INSTANT_MS:
        raise InvalidDelayed(f"it is due after 2200-01-01 ({deliver_at} ms)")
    return DelayedMessage(id, deliver_at, topic, key, value, headers, received_at)


def from_delayed_record(
    key: bytes | None, value: bytes | None, headers: Any, received_at: int
) -> DelayedMessage | None:
    """The message a record of the delayed topic holds; None for a tombstone (a cancel)."""
    if value is None:
        return None
    named: dict[str, bytes] = {}
    kept: list[Header] = []
    for name, raw in headers or ():
        if raw is not None:
            if type(raw) is not bytes:  # (aiokafka's are bytes already: a copy only of anything else)
                raw = bytes(raw)
            if name not in named:
                named[name] = raw
        kept.append((name, raw))
    if EPOCH_HEADER not in named:
        raise InvalidDelayed(f"no {EPOCH_HEADER} header: when to deliver it is unknown")
    if TARGET_TOPIC_HEADER not in named:
        raise InvalidDelayed(f"no {TARGET_TOPIC_HEADER} header: where to deliver it is unknown")
    try:
        topic = named[TARGET_TOPIC_HEADER].decode("ascii")
    except UnicodeDecodeError:
        raise InvalidDelayed(f"{TARGET_TOPIC_HEADER} is not ASCII") from None
    return message(
        key or b"",
        parse_epoch(named[EPOCH_HEADER]),
        topic,
        named.get(TARGET_KEY_HEADER),
        bytes(value),
        tuple(kept),
        received_at,
    )


def due_key(deliver_at: int, id: bytes) -> bytes:
    return DUE + max(deliver_at, 0).to_bytes(8, "big") + id


def id_key(id: bytes) -> bytes:
    return BY_ID + id


def due_until(now: int) -> bytes:
    """Every due key below this one is due at or before `now`."""
    return DUE + (max(now, -1) + 1).to_bytes(8, "big")


def instant_of(due: bytes) -> int:
    return int.from_bytes(due[1:9], "big")
