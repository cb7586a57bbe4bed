"""The conditions a command may carry in its Kafka record headers (its Avro value stays as it was, so any
producer's commands decode as before):

- `scheduler-deadline-ms`: epoch ms after which the command must not be produced any more — its client
  has given up on it (an HTTP write's deadline). A record whose timestamp is later is refused.
- `scheduler-if-version`: the schedule's version the command means to replace (HTTP `If-Match`); refused
  when the schedule is at another version by the time it is applied (optimistic concurrency).
- `scheduler-by`: who sent it, for the schedule's history (HTTP: the token's name; a producer may set it;
  without it the history says "topic").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scheduler.wire.codec import DecodeError

DEADLINE_HEADER = "scheduler-deadline-ms"
IF_VERSION_HEADER = "scheduler-if-version"
BY_HEADER = "scheduler-by"
CONDITION_HEADERS = (DEADLINE_HEADER, IF_VERSION_HEADER)
MAX_BY_LEN = 128


def command_headers(
    *, deadline_ms: int | None = None, if_version: int | None = None, by: str | None = None
) -> list[tuple[str, bytes]]:
    headers = [] if by is None else [(BY_HEADER, by[:MAX_BY_LEN].encode())]
    if deadline_ms is not None:
        headers.append((DEADLINE_HEADER, str(deadline_ms).encode()))
    if if_version is not None:
        headers.append((IF_VERSION_HEADER, str(if_version).encode()))
    return headers


Headers = Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None


def _pairs(headers: Headers) -> list[tuple[str, Any]]:
    if not headers:  # (most commands: none; no abc isinstance for them)
        return []
    return list(headers.items()) if isinstance(headers, Mapping) else list(headers)


def command_conditions(headers: Headers) -> tuple[int | None, int | None]:
    """(deadline_ms, if_version) from a command's headers (None: not given); DecodeError when one of
    them is not an integer."""
    found: dict[str, int] = {}
    for name, value in _pairs(headers):
        if name in CONDITION_HEADERS and name not in found:
            try:
                found[name] = int(bytes(value).decode("ascii"))
            except (UnicodeDecodeError, ValueError):
                raise DecodeError(f"header {name}: not an integer: {bytes(value)[:40]!r}") from None
    return found.get(DEADLINE_HEADER), found.get(IF_VERSION_HEADER)


def condition_headers(headers: Headers) -> list[tuple[str, bytes]]:
    """The condition headers among `headers`, and who sent it (a command moved to its partition keeps them)."""
    return [(n, bytes(v)) for n, v in _pairs(headers) if n in CONDITION_HEADERS or n == BY_HEADER]


def command_by(headers: Headers) -> str | None:
    """Who sent the command (its `scheduler-by` header), printable and at most MAX_BY_LEN characters;
    None when it says nothing readable."""
    for name, value in _pairs(headers):
        if name == BY_HEADER:
            text = bytes(value).decode("utf-8", "replace")[:MAX_BY_LEN]
            text = "".join(c if c.isprintable() else "?" for c in text).strip()
            return text or None
    return None
