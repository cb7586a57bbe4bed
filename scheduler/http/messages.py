"""HTTP for delayed messages (scheduler/worker/delayed.py): POST /messages puts a record on the delayed topic
as an etf1 producer would (its instant and target in the scheduler-* headers), DELETE /messages/{id} its
tombstone, GET /messages/{id} asks the owner of the id's partition what is pending, GET /messages lists
what is pending on every worker, due first (`dueBefore`, `topic`; paged).

Delayed messages belong to the deployment, not to a tenant: with auth on they need a token for every
tenant ("*")."""

from __future__ import annotations

import base64
import binascii
import heapq
import re
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import Field, model_validator

from scheduler.domain.basics import MAX_INSTANT_MS
from scheduler.domain.delayed import (
    EPOCH_HEADER,
    MAX_ID_BYTES,
    MAX_VALUE_BYTES,
    TARGET_KEY_HEADER,
    TARGET_TOPIC_HEADER,
    DelayedMessage,
    due_key,
)
from scheduler.domain.model import TOPIC_PATTERN
from scheduler.domain.triggers.kinds import In
from scheduler.http import auth
from scheduler.http import responses as out
from scheduler.http.calls import Call, cursor_text
from scheduler.http.cluster import Cluster, Unavailable

if TYPE_CHECKING:
    from faust.web import Response

    from scheduler.worker.ports import WebPort


class Handlers(Protocol):
    """What these handlers use of the HTTP handlers (scheduler.http.web)."""

    worker: WebPort
    cluster: Cluster

    async def forwarded(self, call: Call, key: bytes) -> Response | None:
        """The owner's answer if another worker owns `key` (None: this one does)."""
        ...

    def page_query(
        self, call: Call, default: int, check: Callable[[bytes], Any] = ...
    ) -> tuple[int, bytes | None] | Response: ...


#: an id over HTTP: it goes in a path (/messages/{id}), percent-encoded (aiohttp reads 8,190 bytes of a
#: request line), without control characters
MAX_HTTP_ID = 512
ID_PATTERN = "^[^\\x00-\\x1f\\x7f-\\x9f\u2028\u2029]+$"
_ID = re.compile(ID_PATTERN.replace("$", "\\Z"))
#: headers a caller may not set itself (the scheduler's own: they come from the body's fields)
RESERVED = frozenset({EPOCH_HEADER, TARGET_TOPIC_HEADER, TARGET_KEY_HEADER})


class MessageIn(In):
    """Body of POST /messages: a record delivered to `topic` at `deliverAt`; a later one of the same id
    replaces it."""

    id: str = Field(min_length=1, max_length=MAX_HTTP_ID, pattern=ID_PATTERN)
    topic: str = Field(pattern=f"^{TOPIC_PATTERN}$")
    deliverAt: int = Field(ge=0, le=MAX_INSTANT_MS)
    key: str | None = Field(None, max_length=MAX_ID_BYTES)
    value: str | None = Field(None, max_length=MAX_VALUE_BYTES)
    valueBase64: str | None = Field(None, max_length=MAX_VALUE_BYTES * 4 // 3 + 4)
    headers: dict[str, str] = Field(default_factory=dict, max_length=64)

    @model_validator(mode="after")
    def _one_value(self) -> MessageIn:
        if self.value is not None and self.valueBase64 is not None:
            raise ValueError("value and valueBase64 are exclusive")
        if self.valueBase64 is not None:
            try:
                base64.b64decode(self.valueBase64, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("valueBase64 is not base64") from None
        reserved = sorted(RESERVED & set(self.headers))
        if reserved:
            raise ValueError(f"headers {reserved} come from deliverAt, topic and key: not set here")
        return self

    def value_bytes(self) -> bytes:
        if self.valueBase64 is not None:
            return base64.b64decode(self.valueBase64)
        return (self.value or "").encode()

    def record_headers(self) -> list[tuple[str, bytes]]:
        headers = [(EPOCH_HEADER, str(self.deliverAt).encode()), (TARGET_TOPIC_HEADER, self.topic.encode())]
        if self.key is not None:
            headers.append((TARGET_KEY_HEADER, self.key.encode()))
        return headers + [(name, value.encode()) for name, value in self.headers.items()]


def _denied(call: Call) -> Response | None:
    if auth.principal_of(call.request).all_tenants:
        return None
    reason = "delayed messages need a token for every tenant"
    return call.view.json({"error": "forbidden", "reason": reason}, status=403)


async def post_message(h: Handlers, call: Call) -> Response:
    if denied := _denied(call):
        return denied
    body: MessageIn = call.body
    id = body.id.encode()
    settings = h.worker.settings
    sent = await h.worker.produce(
        settings.delayed_topic,
        id,
        body.value_bytes(),
        partition=h.worker.partition_of(id),
        headers=body.record_headers(),
    )
    await sent  # (the broker has it)
    return call.answer(out.MessageAccepted, {"id": body.id, "deliverAt": body.deliverAt}, 202)


def _path_id(call: Call) -> bytes | Response:
    """The id in /messages/{id}, or the 400 saying why it cannot be one (the same rule as a POST's `id`)."""
    id = call.params["id"]
    if len(id) > MAX_HTTP_ID or not _ID.match(id):
        return call.field_error("id", f"1 to {MAX_HTTP_ID} characters, none of them a control character")
    return id.encode()


async def delete_message(h: Handlers, call: Call) -> Response:
    if denied := _denied(call):
        return denied
    if not isinstance(id := _path_id(call), bytes):
        return id
    topic = h.worker.settings.delayed_topic
    await (await h.worker.produce(topic, id, None, partition=h.worker.partition_of(id)))
    return call.answer(out.MessageAccepted, {"id": call.params["id"], "deliverAt": None}, 202)


async def get_message(h: Handlers, call: Call) -> Response:
    if denied := _denied(call):
        return denied
    if not isinstance(id := _path_id(call), bytes):
        return id
    if (forwarded := await h.forwarded(call, id)) is not None:
        return forwarded
    m = h.worker.delayed_messages.pending(h.worker.partition_of(id), id)
    if m is None:
        reason = "no such message is pending (never sent, delivered, or cancelled: neither is kept)"
        return call.error(404, error="not found", reason=reason)
    return call.answer(out.DelayedMessage, message_json(m))


def _list_cursor(raw: bytes) -> bytes:
    """A page cursor of GET /messages: the due-order key (d + instant + id) of the last message shown."""
    if not raw.startswith(b"d") or len(raw) < 10:
        raise ValueError("not a cursor of the messages list")
    return raw


async def list_messages(h: Handlers, call: Call) -> Response:
    """What is pending on every worker, due first (ties: by id), at most `limit` a page: those due at or
    before `dueBefore` (epoch ms), to `topic`. Each worker reads a RocksDB seek per partition and the
    page's entries, from the cursor: the cost is the page's, not the number pending."""
    if denied := _denied(call):
        return denied
    query = call.request.query
    try:
        due_before = int(query["dueBefore"]) if query.get("dueBefore") else None
    except ValueError:
        return call.field_error("dueBefore", "must be an instant in epoch milliseconds")
    topic = query.get("topic") or None
    paging = h.page_query(call, 100, _list_cursor)
    if not isinstance(paging, tuple):
        return paging
    limit, after = paging
    found: list[tuple[bytes, dict[str, Any]]] = []
    for partition in sorted(h.worker.active_partitions()):
        n = 0
        for key, m in h.worker.delayed_messages.pending_from(partition, after):
            if due_before is not None and m.deliver_at > due_before:
                break
            if topic is None or m.topic == topic:
                found.append((key, message_json(m)))
                n += 1
                if n > limit:
                    break
    local = [m for _, m in heapq.nsmallest(limit + 1, found, key=lambda f: f[0])]
    if query.get("local"):  # (a fan-out: limit + 1, so the asking worker sees there are more)
        return call.answer(out.DelayedMessages, {"messages": local, "next": None})
    asked = {k: v for k in ("dueBefore", "topic", "limit", "cursor") if (v := query.get(k))}
    try:
        bodies = await h.cluster.fan_out_bodies(call.request, "/messages", asked, {"messages": local})
    except Unavailable as exc:
        return call.unavailable(str(exc))
    merged = heapq.nsmallest(limit + 1, (m for b in bodies for m in b["messages"]), key=_order)
    more = len(merged) > limit
    page = merged[:limit]
    return call.answer(
        out.DelayedMessages,
        {"messages": page, "next": cursor_text(_order(page[-1])) if more and page else None},
    )


def _order(m: dict[str, Any]) -> bytes:
    """A listed message's place in due order (its key in the delayed table)."""
    return due_key(m["deliverAt"], m["id"].encode())


def message_json(m: DelayedMessage) -> dict[str, Any]:
    def text(raw: bytes | None) -> str | None:
        return None if raw is None else raw.decode("utf-8", "replace")

    return {
        "id": text(m.id), "topic": m.topic, "deliverAt": m.deliver_at, "key": text(m.key),
        "valueBase64": None if m.value is None else base64.b64encode(m.value).decode(),
        "headers": {name: text(value) or "" for name, value in m.headers}, "receivedAt": m.received_at,
        "status": "pending",
    }  # fmt: skip


MAX_STATS_MINUTES = 1_440


async def message_stats(h: Handlers, call: Call) -> Response:
    """Delayed messages pending, from every worker: by target topic, and by due minute (the earliest
    `limit`, then how many are due later)."""
    if denied := _denied(call):
        return denied
    try:
        limit = int(call.request.query.get("limit", "60"))
        if not 1 <= limit <= MAX_STATS_MINUTES:
            raise ValueError
    except ValueError:
        return call.field_error("limit", f"must be an integer between 1 and {MAX_STATS_MINUTES}")
    pending = h.worker.counts.delayed_pending
    local = {
        "byTopic": dict(pending.by_topic()),
        "byMinute": [{"at": at, "count": n} for at, n in heapq.nsmallest(limit, pending.by_minute().items())],
        "pending": sum(pending.by_topic().values()),
        "counting": pending.counting(),
    }
    try:
        bodies = await h.cluster.fan_out_bodies(call.request, "/stats/messages", {"limit": str(limit)}, local)
    except Unavailable as exc:
        return call.unavailable(str(exc))
    by_topic: Counter[str] = Counter()
    by_minute: Counter[int] = Counter()
    for body in bodies:
        by_topic.update(body["byTopic"])
        by_minute.update({row["at"]: row["count"] for row in body["byMinute"]})
    rows = [{"at": at, "count": n} for at, n in heapq.nsmallest(limit, by_minute.items())]
    total = sum(body["pending"] for body in bodies)
    answer = {
        "byTopic": dict(sorted(by_topic.items())),
        "byMinute": rows,
        "beyond": total - sum(row["count"] for row in rows),
        "pending": total,
        "counting": sorted({p for body in bodies for p in body["counting"]}),
    }
    return call.answer(out.MessageStats, answer)
