"""What a dead letter says: the refused message's original bytes, where its producer put it, and why.

A command produced on a partition that does not own its key is moved to the one that does
(CommandHandler.handle_command); the move carries the command's origin (partition, offset, key as produced) in
record headers, so its dead letter names the record its producer wrote, not the moved copy.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.wire.codec import MAX_MESSAGE_BYTES

#: header of a moved command: JSON {"partition": p, "offset": o}, where its producer put it
ORIGIN_HEADER = "scheduler-origin"
#: header of a moved command: its key as produced (absent when it was produced without a key)
ORIGIN_KEY_HEADER = "scheduler-origin-key"
MAX_REASON_CHARS = 4000


@dataclass(frozen=True)
class Origin:
    """Where a message was produced (in the topic it was read from) and under which key."""

    partition: int
    offset: int
    key: bytes | None


def origin(message: Any, moved_here: bool) -> Origin:
    """Where `message` (topic, partition, offset, key, headers) was produced: the origin a move recorded in
    its headers if it may have been moved (`moved_here`: read from the topic moves write to), else its own
    position."""
    if moved_here:
        recorded = _recorded_origin(message.headers)
        if recorded is not None:
            return recorded
    return Origin(message.partition, message.offset, message.key)


def moved_headers(message: Any) -> list[tuple[str, bytes]]:
    """The headers of `message` re-produced on the partition that owns its key: its origin (the first
    one, if it is moved again)."""
    o = origin(message, moved_here=True)
    headers = [(ORIGIN_HEADER, json.dumps({"partition": o.partition, "offset": o.offset}).encode())]
    if o.key is not None:
        headers.append((ORIGIN_KEY_HEADER, bytes(o.key)))
    return headers


def _recorded_origin(headers: Sequence[tuple[str, bytes]] | None) -> Origin | None:
    """The origin in a moved command's headers; None when there is none (or none that makes sense)."""
    first: dict[str, bytes] = {}
    for name, value in headers or ():
        first.setdefault(name, value)
    raw = first.get(ORIGIN_HEADER)
    if raw is None:
        return None
    try:
        position = json.loads(raw)
        partition, offset = position["partition"], position["offset"]
    except (ValueError, TypeError, KeyError):
        return None
    if not all(type(n) is int and n >= 0 for n in (partition, offset)):
        return None
    return Origin(partition, offset, first.get(ORIGIN_KEY_HEADER))


def dead_letter_record(
    topic: str, where: Origin, value: bytes | None, reason: str, at: int
) -> tuple[bytes | None, dict[str, Any]]:
    """The dead letter's key (the original key) and its DeadLetter record. The original bytes are kept whole
    up to MAX_MESSAGE_BYTES (all an accepted message can be); beyond, their head only, so the dead letter
    stays under the broker's record size limit."""
    key, head = _head(where.key), _head(value)
    cut = [
        f"{name} cut to its first {MAX_MESSAGE_BYTES} of {len(b)} bytes"
        for name, b in (("key", where.key), ("value", value))
        if b is not None and len(b) > MAX_MESSAGE_BYTES
    ]
    record = {
        "topic": topic,
        "partition": where.partition,
        "offset": where.offset,
        "key": key,
        "value": head,
        "reason": reason[:MAX_REASON_CHARS] + (f" ({'; '.join(cut)})" if cut else ""),
        "at": at,
    }
    return key, record


def _head(data: bytes | None) -> bytes | None:
    return data if data is None or len(data) <= MAX_MESSAGE_BYTES else bytes(data[:MAX_MESSAGE_BYTES])
