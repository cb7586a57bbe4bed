"""Notifications: a tenant's rules that turn what happens to its schedules into webhook calls. Pure: the
rule, which events it takes, the body each format sends (generic JSON, Slack, Microsoft Teams, PagerDuty
Events v2), the HMAC signature and the backoff. The worker's notifier (scheduler.worker.notifier) reads
the events, delivers and records each delivery.

Events: RUN_SUCCEEDED and RUN_FAILED (a run of a schedule's job ended COMPLETED / FAILED, each attempt),
RETRIES_EXHAUSTED (a FAILED run after which the job is not tried again: its retry policy's last attempt,
or a job without one), DEADLINE_MISSED and NOT_FIRED (the SLA alerts of the alerts topic)."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from scheduler.domain.basics import InvalidSchedule

RULE_NAME = r"[A-Za-z0-9._-]{1,128}"
RULE_NAME_RE = re.compile(RULE_NAME, re.ASCII)
MAX_ATTEMPTS = 20
MAX_DELAY_MS = 15 * 60_000
SIGNATURE_HEADER = "X-Scheduler-Signature"  # "t=<epoch s>,v1=<hex HMAC-SHA256 of f'{t}.{body}'>"
DELIVERY_HEADER = "X-Scheduler-Delivery"  # the delivery's id: the same on each attempt (deduplicate on it)


class EventKind(StrEnum):
    RUN_SUCCEEDED = "RUN_SUCCEEDED"
    RUN_FAILED = "RUN_FAILED"
    RETRIES_EXHAUSTED = "RETRIES_EXHAUSTED"
    DEADLINE_MISSED = "DEADLINE_MISSED"
    NOT_FIRED = "NOT_FIRED"


Format = Literal["json", "slack", "teams", "pagerduty"]


class WebhookIn(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(max_length=2048, pattern=r"^https?://", description="where each event is POSTed")
    format: Format = Field("json", description="json (ours), slack, teams, pagerduty (Events API v2)")
    secretRef: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9._-]{1,128}/[A-Za-z0-9._-]{1,128}$",
        description=f"a secret of the tenant: the key of the HMAC-SHA256 in {SIGNATURE_HEADER}",
    )
    routingKey: str | None = Field(
        None, max_length=256, description="pagerduty: the integration's routing key"
    )
    headers: dict[str, str] = Field(default_factory=dict, max_length=16, description="sent with each call")


class RuleIn(BaseModel):
    """Body of PUT /notifications/{tenant}/{name}."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    on: list[EventKind] = Field(min_length=1, max_length=len(EventKind), description="the events it sends")
    schedules: list[str] = Field(
        default_factory=list, max_length=1000, description="only these schedules' (names); empty: every one"
    )
    webhook: WebhookIn
    maxAttempts: int = Field(8, ge=1, le=MAX_ATTEMPTS, description="calls of one delivery in all")
    enabled: bool = True
    description: str = Field("", max_length=1024)


@dataclass(frozen=True, slots=True)
class Event:
    kind: EventKind
    tenant: str
    schedule: str  # tenant/name
    at: int  # epoch ms: when it happened
    program: str | None = None
    run_id: str | None = None
    job_id: str | None = None
    attempt: int | None = None
    error: str = ""  # a failed run's error (its output's tail), an alert's reason
    id: str = ""  # stable across re-reads: the delivery ids derive from it

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "tenant": self.tenant, "schedule": self.schedule, "at": self.at,
                "program": self.program, "runId": self.run_id, "jobId": self.job_id, "attempt": self.attempt,
                "error": self.error, "id": self.id}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Rule:
    tenant: str
    name: str
    on: frozenset[EventKind]
    webhook: dict[str, Any]
    schedules: frozenset[str] = frozenset()
    max_attempts: int = 8
    enabled: bool = True
    description: str = ""
    since: int = 0  # epoch ms: its PUT's; what happened before it is not its to send

    @property
    def id(self) -> str:
        return f"{self.tenant}/{self.name}"

    @classmethod
    def from_body(cls, tenant: str, name: str, body: RuleIn, since: int = 0) -> Rule:
        return cls(tenant, name, frozenset(body.on), body.webhook.model_dump(), frozenset(body.schedules),
                   body.maxAttempts, body.enabled, body.description, since)  # fmt: skip

    def validate(self) -> None:
        if not RULE_NAME_RE.fullmatch(self.name):
            raise InvalidSchedule("name", f"a rule's name is 1-128 of [A-Za-z0-9._-], not {self.name!r}")
        ref = self.webhook.get("secretRef")
        if ref and ref.split("/", 1)[0] != self.tenant:
            raise InvalidSchedule("webhook.secretRef", f"secret {ref} is not of the tenant {self.tenant}")
        if self.webhook.get("format") == "pagerduty" and not self.webhook.get("routingKey"):
            raise InvalidSchedule(
                "webhook.routingKey", "a pagerduty webhook needs the integration's routingKey"
            )

    def takes(self, event: Event) -> bool:
        if (
            not self.enabled
            or event.tenant != self.tenant
            or event.kind not in self.on
            or event.at < self.since
        ):
            return False
        return not self.schedules or event.schedule.partition("/")[2] in self.schedules

    def to_json(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "name": self.name, "on": sorted(k.value for k in self.on),
                "schedules": sorted(self.schedules), "webhook": self.webhook, "maxAttempts": self.max_attempts,
                "enabled": self.enabled, "description": self.description, "since": self.since}  # fmt: skip

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Rule:
        return cls(d["tenant"], d["name"], frozenset(EventKind(k) for k in d["on"]), dict(d["webhook"]),
                   frozenset(d.get("schedules") or ()), int(d.get("maxAttempts", 8)), bool(d.get("enabled", True)),
                   d.get("description", ""), int(d.get("since", 0)))  # fmt: skip


def rule_key(tenant: str, name: str) -> str:
    return f"{tenant}/{name}"


def delay_ms(attempt: int) -> int:
    """The backoff before call `attempt` (2 and on): 1 s, 2 s, 4 s … at most 15 minutes."""
    return min(1000 * 2 ** max(attempt - 2, 0), MAX_DELAY_MS)


def delivery_id(rule: Rule, event: Event) -> str:
    return hashlib.sha256(f"{rule.id}|{event.id}".encode()).hexdigest()[:24]


_SEVERITY = {EventKind.RUN_SUCCEEDED: "info", EventKind.RUN_FAILED: "error", EventKind.RETRIES_EXHAUSTED: "critical",
             EventKind.DEADLINE_MISSED: "warning", EventKind.NOT_FIRED: "warning"}  # fmt: skip


def headline(event: Event) -> str:
    """One line for people: what happened to which schedule."""
    words = {
        EventKind.RUN_SUCCEEDED: f"run {event.run_id} succeeded",
        EventKind.RUN_FAILED: f"run {event.run_id} failed (attempt {event.attempt or 1})",
        EventKind.RETRIES_EXHAUSTED: f"run {event.run_id} failed, no attempt left (attempt {event.attempt or 1})",
        EventKind.DEADLINE_MISSED: "missed its completion deadline",
        EventKind.NOT_FIRED: "has not fired within its bound",
    }[event.kind]
    return f"{event.schedule}: {words}"


def body_of(rule: Rule, event: Event, delivery: str) -> dict[str, Any]:
    """What the rule's webhook is sent for the event, in its format."""
    text = headline(event)
    detail = event.error[-1500:] if event.error else ""
    fmt = rule.webhook.get("format", "json")
    if fmt == "slack":
        blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": f"*{text}*"}}]
        if detail:
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": f"```{detail}```"}})
        return {"text": text, "blocks": blocks}
    if fmt == "teams":
        facts = [{"title": k, "value": str(v)} for k, v in (("schedule", event.schedule), ("program", event.program),
                 ("run", event.run_id), ("event", event.kind.value)) if v]  # fmt: skip
        body: list[dict[str, Any]] = [{"type": "TextBlock", "text": text, "weight": "Bolder", "wrap": True},
                                      {"type": "FactSet", "facts": facts}]  # fmt: skip
        if detail:
            body.append({"type": "TextBlock", "text": detail, "wrap": True, "fontType": "Monospace"})
        card = {"type": "AdaptiveCard", "version": "1.4", "body": body}
        return {"type": "message", "attachments": [
            {"contentType": "application/vnd.microsoft.card.adaptive", "content": card}]}  # fmt: skip
    if fmt == "pagerduty":
        resolve = event.kind is EventKind.RUN_SUCCEEDED
        return {"routing_key": rule.webhook.get("routingKey"), "event_action": "resolve" if resolve else "trigger",
                "dedup_key": f"{event.schedule}|{event.job_id or event.kind.value}",
                "payload": {"summary": text[:1024], "source": event.schedule, "severity": _SEVERITY[event.kind],
                            "custom_details": event.to_json()}}  # fmt: skip
    return {"delivery": delivery, "rule": rule.id, "text": text, "event": event.to_json()}


def signature(secret: str, body: bytes, at_s: int) -> str:
    digest = hmac.new(secret.encode(), f"{at_s}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={at_s},v1={digest}"


def verify(secret: str, body: bytes, header: str, now_s: int, tolerance_s: int = 300) -> bool:
    """What a receiver checks (documented; used by the tests): the signature, and that it is recent."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    if not parts.get("t", "").isdigit() or abs(now_s - int(parts["t"])) > tolerance_s:
        return False
    return hmac.compare_digest(signature(secret, body, int(parts["t"])), header)


@dataclass
class Delivery:
    """One rule's call(s) for one event, and how they went (a record of the deliveries topic)."""

    id: str
    rule: str
    event: dict[str, Any]
    url: str
    attempts: int = 0
    outcome: Literal["PENDING", "RETRYING", "DELIVERED", "FAILED", "DROPPED"] = "PENDING"
    status: int | None = None  # the last call's HTTP status (None: no answer)
    error: str = ""
    at: int = 0  # the last call's instant
    next_at: int | None = None  # RETRYING: the next call's
    calls: list[dict[str, Any]] = field(default_factory=list)  # [{at, status, error, ms}] of each call

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["nextAt"] = d.pop("next_at")
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Delivery:
        d = dict(d)
        d["next_at"] = d.pop("nextAt", None)
        return cls(**d)


def encode_delivery(delivery: Delivery) -> bytes:
    return json.dumps(delivery.to_json(), separators=(",", ":")).encode()
