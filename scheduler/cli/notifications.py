"""`scheduler notifications put|list|get|delete|deliveries`: rules that send schedules' events to webhooks
(HTTP API)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scheduler.cli.calendars import keyed_commands
from scheduler.cli.render import print_answer

if TYPE_CHECKING:
    from scheduler.client.http import HttpClient


def _rule_text(r: dict[str, Any]) -> str:
    only = f" of {', '.join(r['schedules'])}" if r["schedules"] else ""
    state = "" if r["enabled"] else " (disabled)"
    return f"{r['tenant']}/{r['name']}{state}: {', '.join(r['on'])}{only} -> {r['webhook']['format']} {r['webhook']['url']}"


async def cmd_put(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import load_document, parse_list, parse_schedule_ref

    tenant, name = parse_schedule_ref(args.ref)
    body: dict[str, Any] = dict(load_document(args.file)) if args.file else {}
    webhook = dict(body.get("webhook") or {})
    for field, value in (("url", args.webhook_url), ("format", args.format), ("secretRef", args.secret_ref),
                         ("routingKey", args.routing_key)):  # fmt: skip
        if value:
            webhook[field] = value
    if webhook:
        body["webhook"] = webhook
    if args.on:
        body["on"] = [e.upper() for e in parse_list(args.on)]
    if args.schedules:
        body["schedules"] = parse_list(args.schedules)
    if args.max_attempts is not None:
        body["maxAttempts"] = args.max_attempts
    answer = await client.request("PUT", f"/notifications/{tenant}/{name}", body=body)
    print_answer(args, answer, f"{tenant}/{name}: PUT accepted")


async def cmd_list(client: HttpClient, args: argparse.Namespace) -> None:
    answer = await client.request("GET", "/notifications", params={"tenant": args.tenant})
    print_answer(args, answer, "\n".join(_rule_text(r) for r in answer["rules"]) or "no notification rules")


cmd_get, cmd_delete = keyed_commands("notifications", _rule_text)


async def cmd_deliveries(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import parse_schedule_ref
    from scheduler.cli.render import iso, table

    tenant, name = parse_schedule_ref(args.ref)
    answer = await client.request("GET", f"/notifications/{tenant}/{name}/deliveries")
    rows = [(iso(d["at"]), d["event"]["kind"], d["event"]["schedule"], d["outcome"], d["attempts"],
             d["status"] if d["status"] is not None else "-", (d["error"] or "")[:60])
            for d in answer["deliveries"]]  # fmt: skip
    print_answer(
        args,
        answer,
        table(["LAST CALL (UTC)", "EVENT", "SCHEDULE", "OUTCOME", "CALLS", "STATUS", "ERROR"], rows),
    )


def register(sub: Any, leaf: Callable[..., argparse.ArgumentParser]) -> None:
    """The `notifications` command group."""
    group = sub.add_parser("notifications", help="send schedules' events to webhooks (HTTP API)")
    commands = group.add_subparsers(dest="subcommand", required=True)
    p = leaf(commands, "put", cmd_put, "create or replace a notification rule")
    p.add_argument("ref", metavar="TENANT/NAME")
    p.add_argument("-f", "--file", help="the rule as YAML/JSON: on, schedules, webhook, maxAttempts")
    p.add_argument("--on", help="RUN_FAILED,RETRIES_EXHAUSTED,RUN_SUCCEEDED,DEADLINE_MISSED,NOT_FIRED")
    p.add_argument("--webhook", dest="webhook_url", help="the webhook's URL")
    p.add_argument("--format", choices=["json", "slack", "teams", "pagerduty"], help="the body's format")
    p.add_argument("--secret-ref", help="TENANT/NAME: the secret that signs each call (HMAC-SHA256)")
    p.add_argument("--routing-key", help="pagerduty: the integration's routing key")
    p.add_argument("--schedules", help="only these schedules' events: NAME,NAME (default: every one)")
    p.add_argument("--max-attempts", type=int, help="calls of one delivery in all (default 8)")
    p = leaf(commands, "list", cmd_list, "the notification rules")
    p.add_argument("--tenant")
    for name, command, what in (("get", cmd_get, "a notification rule"), ("delete", cmd_delete, "delete a rule"),
                                ("deliveries", cmd_deliveries, "a rule's last deliveries, newest first")):  # fmt: skip
        leaf(commands, name, command, what).add_argument("ref", metavar="TENANT/NAME")
