"""`scheduler backfills start|list|get|cancel`: backfill objects of a schedule (HTTP API)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scheduler.cli.render import print_answer
from scheduler.domain.basics import plural

if TYPE_CHECKING:
    from scheduler.client.http import HttpClient


async def cmd_start(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import UsageError, parse_instant, parse_schedule_ref
    from scheduler.cli.render import iso

    tenant, name = parse_schedule_ref(args.schedule)
    start, end = parse_instant(args.from_), parse_instant(args.to)
    if end < start:
        raise UsageError(f"--to ({iso(end)}) is before --from ({iso(start)})")
    answer = await client.start_backfill(
        tenant,
        name,
        start,
        end,
        reprocess=args.reprocess,
        max_concurrent=args.max_concurrent,
        order=args.order,
        overlap=args.overlap,
        dry_run=args.dry_run,
    )
    chosen = (
        f"{plural(answer['instants'], 'instant')}, {answer['leftOut']} left out (reprocess {args.reprocess})"
    )
    if args.dry_run:
        listed = "\n".join(f"  {iso(d)}" for d in answer["next"])
        text = f"{args.schedule}: would backfill {chosen}, in this order:\n{listed}"
    else:
        text = f"{args.schedule}: backfill {answer['id']} started: {chosen}, {args.max_concurrent} at a time"
    print_answer(args, answer, text)


def _row(b: dict[str, Any]) -> tuple[Any, ...]:
    from scheduler.cli.render import iso

    return (
        b["id"],
        b["status"],
        f"{iso(b['from'])} .. {iso(b['to'])}",
        f"{b['launched']} of {b['total']}",
        b["completed"],
        b["failed"],
        b["skipped"] + b["cancelled"],
        b["inFlight"],
    )


HEADERS = ["ID", "STATUS", "RANGE (UTC)", "LAUNCHED", "COMPLETED", "FAILED", "SKIPPED/CANCELLED", "IN FLIGHT"]


async def cmd_list(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import parse_schedule_ref
    from scheduler.cli.render import table

    answer = await client.backfills(*parse_schedule_ref(args.schedule))
    rows = [_row(b) for b in answer["backfills"]]
    print_answer(args, answer, table(HEADERS, rows) if rows else f"{args.schedule}: no backfills")


async def cmd_get(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import parse_schedule_ref
    from scheduler.cli.render import table

    answer = await client.backfill(*parse_schedule_ref(args.schedule), args.id)
    text = table(HEADERS, [_row(answer)])
    if answer.get("cancelReason"):
        text += f"\n{answer['cancelReason']}"
    print_answer(args, answer, text)


async def cmd_cancel(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import parse_schedule_ref

    answer = await client.cancel_backfill(*parse_schedule_ref(args.schedule), args.id)
    print_answer(args, answer, f"{args.id}: cancel accepted (no more of its instants launch; its runs go on)")


def register(sub: Any, leaf: Callable[..., argparse.ArgumentParser]) -> None:
    """The `backfills` command group."""
    backfills = sub.add_parser("backfills", help="backfill objects: start, follow, cancel (HTTP API)")
    group = backfills.add_subparsers(dest="subcommand", required=True)
    p = leaf(group, "start", cmd_start, "backfill a range of a program schedule's instants, a few at a time")
    p.add_argument("schedule", metavar="TENANT/NAME")
    p.add_argument("--from", dest="from_", required=True, help="ISO-8601 (naive = UTC) or epoch ms")
    p.add_argument("--to", required=True, help="ISO-8601 (naive = UTC) or epoch ms, included")
    p.add_argument(
        "--reprocess",
        choices=["none", "failed", "all"],
        default="none",
        help="none (default): only instants with no known run; failed: those and those whose last run did not "
        "complete; all: every one",
    )
    p.add_argument("--max-concurrent", type=int, default=1, help="its jobs in flight at once (default 1)")
    p.add_argument("--order", choices=["oldest", "newest"], default="oldest")
    p.add_argument("--overlap", help="its jobs' overlap policy (default: the schedule's)")
    p.add_argument("--dry-run", action="store_true", help="list what it would launch; start nothing")
    p = leaf(group, "list", cmd_list, "a schedule's backfills, newest first")
    p.add_argument("schedule", metavar="TENANT/NAME")
    for name, command, text in (
        ("get", cmd_get, "one backfill's progress"),
        ("cancel", cmd_cancel, "cancel one"),
    ):
        p = leaf(group, name, command, text)
        p.add_argument("schedule", metavar="TENANT/NAME")
        p.add_argument("id", metavar="ID", help="bf-…, as start printed it")
