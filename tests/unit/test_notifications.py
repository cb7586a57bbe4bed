"""Notification rules (scheduler.domain.notifications) and the notifier's reading and delivering
(scheduler.worker.notifier) against an HTTP endpoint played by httpx's MockTransport: which events a rule
takes, each format's body, the signature a receiver verifies, retries with backoff, what ends a delivery."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from scheduler.domain.notifications import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    Delivery,
    Event,
    EventKind,
    Rule,
    RuleIn,
    body_of,
    delay_ms,
    delivery_id,
    signature,
    verify,
)
from scheduler.kafka.config import Settings
from scheduler.launcher.secrets import EnvSecrets, Secrets
from scheduler.wire.codec import encode
from scheduler.worker.notifier import Notifier, events_of

pytestmark = pytest.mark.unit

FAILED = Event(EventKind.RUN_FAILED, "acme", "acme/etl", 1_000, "acme/a/command/p", "acme/etl@5", "acme/etl@5", 1,
               "exit code 3\nboom", "run|acme/etl@5|FAILED")  # fmt: skip


def _rule(**body: Any) -> Rule:
    defaults: dict[str, Any] = {"on": ["RUN_FAILED"], "webhook": {"url": "http://hook.test/x"}}
    return Rule.from_body("acme", "ops", RuleIn.model_validate({**defaults, **body}))


def test_a_rule_takes_its_tenants_events_of_its_kinds_and_schedules():
    rule = _rule(on=["RUN_FAILED", "RETRIES_EXHAUSTED"], schedules=["etl"])
    assert rule.takes(FAILED)
    assert not rule.takes(Event(EventKind.RUN_SUCCEEDED, "acme", "acme/etl", 1))
    assert not rule.takes(Event(EventKind.RUN_FAILED, "acme", "acme/other", 1))
    assert not rule.takes(Event(EventKind.RUN_FAILED, "globex", "globex/etl", 1))
    assert not _rule(enabled=False).takes(FAILED)
    later = Rule.from_body("acme", "ops", RuleIn.model_validate({"on": ["RUN_FAILED"], "webhook": {"url": "http://h/x"}}),
                           since=FAILED.at + 1)  # fmt: skip
    assert not later.takes(FAILED), "what happened before a rule's PUT is not its to send"
    assert Rule.from_json(rule.to_json()) == rule


def test_a_rule_refuses_a_foreign_secret_and_a_pagerduty_hook_without_its_key():
    with pytest.raises(ValueError, match="not of the tenant acme"):
        _rule(webhook={"url": "http://h/x", "secretRef": "globex/k"}).validate()
    with pytest.raises(ValueError, match="routingKey"):
        _rule(webhook={"url": "http://h/x", "format": "pagerduty"}).validate()
    with pytest.raises(ValueError):
        RuleIn.model_validate({"on": ["RUN_FAILED"], "webhook": {"url": "ftp://h/x"}})


def test_each_format_says_what_happened_to_which_schedule():
    generic = body_of(_rule(), FAILED, "d1")
    assert generic["text"] == "acme/etl: run acme/etl@5 failed (attempt 1)" and generic["event"][
        "error"
    ].endswith("boom")
    assert generic["delivery"] == "d1" and generic["rule"] == "acme/ops"
    slack = body_of(_rule(webhook={"url": "http://h/x", "format": "slack"}), FAILED, "d1")
    assert slack["text"] == generic["text"] and "boom" in slack["blocks"][1]["text"]["text"]
    teams = body_of(_rule(webhook={"url": "http://h/x", "format": "teams"}), FAILED, "d1")
    card = teams["attachments"][0]["content"]
    assert card["type"] == "AdaptiveCard" and card["body"][0]["text"] == generic["text"]
    pd = _rule(webhook={"url": "http://h/x", "format": "pagerduty", "routingKey": "R1"})
    trigger = body_of(pd, FAILED, "d1")
    assert trigger["routing_key"] == "R1" and trigger["event_action"] == "trigger"
    assert trigger["payload"]["severity"] == "error" and trigger["dedup_key"] == "acme/etl|acme/etl@5"
    ok = Event(EventKind.RUN_SUCCEEDED, "acme", "acme/etl", 2, job_id="acme/etl@5")
    assert body_of(pd, ok, "d2")["event_action"] == "resolve"  # (the same dedup key: the incident resolves)


def test_a_signature_verifies_with_the_secret_and_only_while_recent():
    header = signature("k3y", b'{"a":1}', 1_000)
    assert verify("k3y", b'{"a":1}', header, 1_100)
    assert not verify("k3y", b'{"a":2}', header, 1_100) and not verify("other", b'{"a":1}', header, 1_100)
    assert not verify("k3y", b'{"a":1}', header, 1_000 + 301)


def test_backoff_doubles_to_fifteen_minutes_and_a_delivery_id_is_stable():
    assert [delay_ms(n) for n in (2, 3, 4)] == [1000, 2000, 4000] and delay_ms(30) == 15 * 60_000
    from dataclasses import replace

    assert delivery_id(_rule(), FAILED) == delivery_id(_rule(), FAILED)  # (the same on a re-read)
    assert delivery_id(_rule(), replace(FAILED, id="run|acme/etl@5|LAST")) != delivery_id(_rule(), FAILED)
    d = Delivery("i", "acme/ops", FAILED.to_json(), "http://h", next_at=5)
    assert Delivery.from_json(d.to_json()) == d


def _status(status: str, retried: bool = False, **extra: str) -> bytes:
    payload = {"programId": "acme/a/command/p", "runId": "acme/etl@5", "status": status, "jobId": "acme/etl@5",
               "attempt": "2", **({"retried": "true"} if retried else {}), **extra}  # fmt: skip
    return encode("Notification", {"timestamp": 7, "eventType": "program-status", "payload": payload})


def test_the_events_of_run_transitions_and_alerts():
    settings = Settings(app_id="app")
    topic = settings.program_status_topic
    assert [e.kind for e in events_of(topic, _status("COMPLETED"), settings)] == [EventKind.RUN_SUCCEEDED]
    last = events_of(topic, _status("FAILED", error="exit code 1"), settings)
    assert [e.kind for e in last] == [EventKind.RUN_FAILED, EventKind.RETRIES_EXHAUSTED]
    assert last[0].schedule == "acme/etl" and last[0].attempt == 2 and last[0].error == "exit code 1"
    assert [e.kind for e in events_of(topic, _status("FAILED", retried=True), settings)] == [
        EventKind.RUN_FAILED
    ]
    assert events_of(topic, _status("RUNNING"), settings) == []
    alert = encode("Alert", {"kind": "NOT_FIRED", "schedule": "acme/etl", "program": None, "jobId": None,
                             "dueBy": 5, "raisedAt": 9, "reason": "no job for 1 h"})  # fmt: skip
    [missed] = events_of(settings.alerts_topic, alert, settings)
    assert missed.kind is EventKind.NOT_FIRED and missed.tenant == "acme" and missed.error == "no job for 1 h"


class _Endpoint:
    """A webhook receiver that answers the statuses it is given, one per call (then 200)."""

    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.calls: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls.append(request)
        return httpx.Response(self.statuses.pop(0) if self.statuses else 200, text="no")


async def _deliver(
    rule: Rule, endpoint: _Endpoint, monkeypatch: pytest.MonkeyPatch
) -> tuple[Delivery, list[dict]]:
    written: list[dict] = []

    async def send(topic: str, key: bytes, value: bytes) -> None:
        written.append(json.loads(value))

    async def no_wait(seconds: float) -> None:
        return None

    secrets = Secrets([EnvSecrets({"SCHEDULER_SECRET_ACME__HOOK": "k3y"})])
    notifier = Notifier(Settings(app_id="app"), None, secrets, send, clock=lambda: 5_000_000,  # type: ignore[arg-type]
                        transport=httpx.MockTransport(endpoint), sleep=no_wait)  # fmt: skip
    delivery = Delivery(delivery_id(rule, FAILED), rule.id, FAILED.to_json(), rule.webhook["url"])
    await notifier._deliver(delivery, rule)  # noqa: SLF001
    await notifier.stop()
    return delivery, written


async def test_a_delivery_is_retried_on_5xx_and_429_signed_each_time_with_one_id(monkeypatch):
    endpoint = _Endpoint(500, 429, 503)
    rule = _rule(
        webhook={"url": "http://hook.test/x", "secretRef": "acme/hook", "headers": {"X-Team": "data"}}
    )
    delivery, written = await _deliver(rule, endpoint, monkeypatch)
    assert delivery.outcome == "DELIVERED" and delivery.attempts == 4 and delivery.status == 200
    assert [w["outcome"] for w in written] == ["RETRYING", "RETRYING", "RETRYING", "DELIVERED"]
    assert {c.headers[DELIVERY_HEADER] for c in endpoint.calls} == {delivery.id}
    for call in endpoint.calls:
        assert (
            verify("k3y", call.content, call.headers[SIGNATURE_HEADER], 5_000)
            and call.headers["X-Team"] == "data"
        )
    assert json.loads(endpoint.calls[0].content)["text"] == "acme/etl: run acme/etl@5 failed (attempt 1)"


async def test_a_4xx_ends_a_delivery_at_once_and_attempts_are_bounded(monkeypatch):
    delivery, _ = await _deliver(_rule(), _Endpoint(404), monkeypatch)
    assert delivery.outcome == "FAILED" and delivery.attempts == 1 and delivery.status == 404
    delivery, written = await _deliver(_rule(maxAttempts=3), _Endpoint(500, 500, 500, 500), monkeypatch)
    assert delivery.outcome == "FAILED" and delivery.attempts == 3 and len(delivery.calls) == 3
    assert written[-1]["outcome"] == "FAILED"


async def test_an_unreachable_endpoint_is_retried_and_a_missing_signing_secret_fails_it(monkeypatch):
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    written: list[str] = []
    delivery, _ = await _deliver(_rule(maxAttempts=2), refuse, monkeypatch)  # type: ignore[arg-type]
    assert delivery.outcome == "FAILED" and delivery.attempts == 2 and "ConnectError" in delivery.error
    rule = _rule(maxAttempts=2, webhook={"url": "http://hook.test/x", "secretRef": "acme/gone"})
    delivery, written = await _deliver(rule, _Endpoint(), monkeypatch)  # type: ignore[assignment]
    assert (
        delivery.outcome == "FAILED" and "secret acme/gone is in none of the secret stores" in delivery.error
    )


def test_a_worker_imports_httpx_only_once_a_webhook_is_called() -> None:
    """httpx and what it imports (~110 modules, ~6 MB of an idle worker's memory) wait for the first call."""
    import subprocess
    import sys

    code = (
        "import sys; import scheduler.worker.app; "
        "print(sorted(m for m in ('httpx', 'rich', 'pygments', 'click') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
