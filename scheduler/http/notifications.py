"""HTTP for notification rules (scheduler.domain.notifications): PUT and DELETE on the rules topic
(compacted; every worker follows it), GET and list from the rules every worker holds, and a rule's last
deliveries from the deliveries topic every worker follows (scheduler.worker.notifier)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Protocol

from scheduler.domain.model import InvalidSchedule, ScheduleKey
from scheduler.domain.notifications import Rule, RuleIn, rule_key
from scheduler.http import auth
from scheduler.http import responses as out
from scheduler.http.calls import Call

if TYPE_CHECKING:
    from faust.web import Response

    from scheduler.worker.ports import WebPort


class Handlers(Protocol):
    worker: WebPort


async def put_rule(h: Handlers, call: Call) -> Response:
    """Create or replace a rule: on the rules topic, which every worker (and its notifier) follows."""
    body: RuleIn = call.body
    rule = Rule.from_body(call.params["tenant"], call.params["name"], body, since=call.received_at)
    try:
        ScheduleKey(rule.tenant, "x").validate()
        rule.validate()
    except InvalidSchedule as exc:
        return call.field_error(exc.field, exc.message)
    topic = h.worker.settings.notification_rules_topic
    await h.worker.publish(topic, rule.id.encode(), json.dumps(rule.to_json()).encode(), partition=None)
    return call.answer(out.RuleAccepted, {"rule": rule.id, "action": "PUT"}, 202)


async def delete_rule(h: Handlers, call: Call) -> Response:
    key = rule_key(call.params["tenant"], call.params["name"])
    rules = h.worker.notifications.rules
    await rules.start()
    if await rules.lookup(key) is None:
        return call.error(404, error="not found", rule=key)
    await h.worker.publish(h.worker.settings.notification_rules_topic, key.encode(), None, partition=None)
    return call.answer(out.RuleAccepted, {"rule": key, "action": "DELETE"}, 202)


async def get_rule(h: Handlers, call: Call) -> Response:
    rules = h.worker.notifications.rules
    await rules.start()
    rule = await rules.lookup(rule_key(call.params["tenant"], call.params["name"]))
    if rule is None:
        return call.error(404, error="not found")
    return call.answer(out.RuleOut, rule.to_json())


async def list_rules(h: Handlers, call: Call) -> Response:
    rules = h.worker.notifications.rules
    await rules.start()
    who = auth.principal_of(call.request)
    tenant = call.request.query.get("tenant")
    listed = [r.to_json() for _, r in sorted(rules.all().items())
              if who.sees(r.tenant) and (tenant is None or r.tenant == tenant)]  # fmt: skip
    return call.answer(out.Rules, {"rules": listed})


async def rule_deliveries(h: Handlers, call: Call) -> Response:
    """The rule's last deliveries, newest first: each event's calls and how they went."""
    key = rule_key(call.params["tenant"], call.params["name"])
    service = h.worker.notifications
    await service.rules.start()
    await service.deliveries.start()
    if await service.rules.lookup(key) is None:
        return call.error(404, error="not found", rule=key)
    deliveries = [d.to_json() for d in reversed(service.deliveries.of_rule(key))]
    return call.answer(out.Deliveries, {"rule": key, "deliveries": deliveries})
