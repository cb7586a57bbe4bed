"""`scheduler calendars put|list|get|delete`: exclusion calendars (HTTP API)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scheduler.cli.render import print_answer

if TYPE_CHECKING:
    from scheduler.client.http import HttpClient


def _calendar_text(c: dict[str, Any]) -> str:
    days = [*c["dates"], *(f"{r['from']}..{r['to']}" for r in c["ranges"]), *c["weekdays"]]
    return f"{c['tenant']}/{c['name']} ({c['timezone']}): {', '.join(days) or 'no day'}"


async def cmd_calendars_put(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import UsageError, load_document, parse_list, parse_schedule_ref

    tenant, name = parse_schedule_ref(args.ref)
    body: dict[str, Any] = dict(load_document(args.file)) if args.file else {}
    if args.timezone:
        body["timezone"] = args.timezone
    if args.dates:
        body["dates"] = parse_list(args.dates)
    for text in args.ranges:
        start, sep, end = text.partition("..")
        if not sep:
            raise UsageError(f"--range {text!r}: expected FROM..TO")
        body.setdefault("ranges", []).append({"from": start, "to": end})
    if args.weekdays:
        body["weekdays"] = [w.upper() for w in parse_list(args.weekdays)]
    answer = await client.request("PUT", f"/calendars/{tenant}/{name}", body=body)
    print_answer(args, answer, f"{tenant}/{name}: PUT accepted")


async def cmd_calendars_list(client: HttpClient, args: argparse.Namespace) -> None:
    answer = await client.request("GET", "/calendars", params={"tenant": args.tenant})
    print_answer(args, answer, "\n".join(_calendar_text(c) for c in answer["calendars"]) or "no calendars")


def keyed_commands(collection: str, text: Callable[[dict[str, Any]], str]) -> tuple[Any, Any]:
    """`get` and `delete` of a tenant's named thing at /{collection}/{tenant}/{name} (its TENANT/NAME in
    args.ref): calendars, notification rules."""

    async def get(client: HttpClient, args: argparse.Namespace) -> None:
        from scheduler.cli.client import parse_schedule_ref

        tenant, name = parse_schedule_ref(args.ref)
        answer = await client.request("GET", f"/{collection}/{tenant}/{name}")
        print_answer(args, answer, text(answer))

    async def delete(client: HttpClient, args: argparse.Namespace) -> None:
        from scheduler.cli.client import parse_schedule_ref

        tenant, name = parse_schedule_ref(args.ref)
        answer = await client.request("DELETE", f"/{collection}/{tenant}/{name}")
        print_answer(args, answer, f"{tenant}/{name}: DELETE accepted")

    return get, delete


cmd_calendars_get, cmd_calendars_delete = keyed_commands("calendars", _calendar_text)


def register(sub: Any, leaf: Callable[..., argparse.ArgumentParser]) -> None:
    """The command groups of this module."""

    calendars = sub.add_parser(
        "calendars", help="exclusion calendars: holidays, freezes, weekends (HTTP API)"
    )
    group = calendars.add_subparsers(dest="subcommand", required=True)
    p = leaf(
        group, "put", cmd_calendars_put, "create or replace a calendar (schedules that exclude it follow)"
    )
    p.add_argument("ref", metavar="TENANT/NAME")
    p.add_argument("-f", "--file", help="the calendar as YAML/JSON: timezone, dates, ranges, weekdays")
    p.add_argument("--timezone", help="the zone its days are local to (default UTC)")
    p.add_argument("--dates", help="YYYY-MM-DD,YYYY-MM-DD,...")
    p.add_argument(
        "--range",
        dest="ranges",
        action="append",
        default=[],
        metavar="FROM..TO",
        help="days FROM to TO, both included; repeat it",
    )
    p.add_argument("--weekdays", help="MON,...,SUN")
    p = leaf(group, "list", cmd_calendars_list, "the calendars")
    p.add_argument("--tenant")
    for name, command, what in (
        ("get", cmd_calendars_get, "a calendar"),
        ("delete", cmd_calendars_delete, "delete a calendar"),
    ):
        leaf(group, name, command, what).add_argument("ref", metavar="TENANT/NAME")
