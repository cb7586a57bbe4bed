"""HTTP for delayed messages (scheduler/worker/delayed.py): POST /messages puts a record on the delayed topic
as an etf1 producer would (its instant and target in the scheduler-* headers), DELETE /messages/{id} its
tombstone, GET /messages/{id} asks the owner of the id's partition what is pending.

Delayed messages belong to the deployment, not to a tenant: with auth on they need a token for every
tenant ("*")."""

from __future__ import annotations

import base64
import binascii
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
)
from scheduler.domain.model import TOPIC_PATTERN
from scheduler.domain.triggers.kinds import In
from scheduler.http import auth
from scheduler.http import responses as out
from scheduler.http.calls import Call

if TYPE_CHECKING:
    from faust.web import Response

    from scheduler.worker.ports import WebPort


class Handlers(Protocol):
    """What these handlers use of the HTTP handlers (scheduler.http.web)."""

    worker: WebPort

    async def forwarded(self, call: Call, key: bytes) -> Response | None:
        """The owner's answer if another worker owns `key` (None: this one does)."""
        ...


#: an id over HTTP: it goes in a path (/messages/{id}), percent-encoded (aiohttp reads 8,190 bytes of a
#: request line), without control characters
MAX_HTTP_ID = 512
ID_PATTERN = "^[^\\x00-\\x1f\\x7f-\\x9f\u2028\u2029]+$"
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


async def delete_message(h: Handlers, call: Call) -> Response:
    if denied := _denied(call):
        return denied
    id = call.params["id"].encode()
    topic = h.worker.settings.delayed_topic
    await (await h.worker.produce(topic, id, None, partition=h.worker.partition_of(id)))
    return call.answer(out.MessageAccepted, {"id": call.params["id"], "deliverAt": None}, 202)


async def get_message(h: Handlers, call: Call) -> Response:
    if denied := _denied(call):
        return denied
    id = call.params["id"].encode()
    if (forwarded := await h.forwarded(call, id)) is not None:
        return forwarded
    m = h.worker.delayed_messages.pending(h.worker.partition_of(id), id)
    if m is None:
        reason = "no such message is pending (never sent, delivered, or cancelled: neither is kept)"
        return call.error(404, error="not found", reason=reason)
    return call.answer(out.DelayedMessage, message_json(m))


def message_json(m: DelayedMessage) -> dict[str, Any]:
    def text(raw: bytes | None) -> str | None:
        return None if raw is None else raw.decode("utf-8", "replace")

    return {
        "id": text(m.id), "topic": m.topic, "deliverAt": m.deliver_at, "key": text(m.key),
        "valueBase64": None if m.value is None else base64.b64encode(m.value).decode(),
        "headers": {name: text(value) or "" for name, value in m.headers}, "receivedAt": m.received_at,
        "status": "pending",
    }  # fmt: skip
