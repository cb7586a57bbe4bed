"""`scheduler events publish` and `scheduler messages send|get|list|stats|cancel`: events and delayed messages (HTTP API)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scheduler.cli.render import print_answer

if TYPE_CHECKING:
    from scheduler.client.http import HttpClient


async def cmd_events_publish(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import (
        UsageError,
        load_document,
        objects_of,
        parse_instant,
        parse_payload,
    )
    from scheduler.cli.render import iso, table
    from scheduler.client.http import ApiError

    if args.file and (args.type or args.payload):
        raise UsageError("give either TYPE key=value... or -f FILE, not both")
    if args.file:
        events = objects_of(load_document(args.file), "events", args.file)
    elif args.type:
        events = [{"eventType": args.type, "payload": parse_payload(args.payload)}]
    else:
        raise UsageError("give TYPE key=value... or -f FILE")
    if args.timestamp:
        at = parse_instant(args.timestamp)
        events = [{**e, "timestamp": e.get("timestamp", at)} for e in events]
    answers = []
    for i, event in enumerate(events):
        try:
            answers.append(await client.publish(event))
        except ApiError as exc:
            if len(events) > 1:
                exc.request += f" (event #{i}; the {i} before it were published)"
            raise
    print_answer(
        args,
        answers if args.file else answers[0],
        table(["EVENT KEY", "TIMESTAMP (UTC)"], [(a["eventKey"], iso(a.get("timestamp"))) for a in answers]),
    )


async def cmd_messages_send(client: HttpClient, args: argparse.Namespace) -> None:
    from pathlib import Path

    from scheduler.cli.client import UsageError, parse_instant, parse_payload
    from scheduler.cli.render import iso

    if args.value is not None and args.file:
        raise UsageError("give either --value or -f FILE, not both")
    value: str | bytes | None = Path(args.file).read_bytes() if args.file else args.value
    at = parse_instant(args.at)
    answer = await client.send_at(
        args.id, args.topic, value, at, key=args.key, headers=parse_payload(args.header)
    )
    print_answer(args, answer, f"{args.id}: delivered to {args.topic} at {iso(at)}")


async def cmd_messages_get(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.render import iso

    m = await client.message(args.id)
    print_answer(
        args, m, f"{m['id']}: pending, to {m['topic']} at {iso(m['deliverAt'])} (key {m['key'] or m['id']})"
    )


async def cmd_messages_list(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import parse_instant
    from scheduler.cli.render import iso, table

    due_before = None if args.due_before is None else parse_instant(args.due_before)
    if args.all:
        answer = {"messages": [m async for m in client.all_messages(due_before, args.topic, args.limit)]}
    else:
        answer = await client.messages(due_before, args.topic, args.limit, args.cursor)
    rows = [(m["id"], iso(m["deliverAt"]), m["topic"], m["key"] or m["id"]) for m in answer["messages"]]
    print_answer(args, answer, table(["ID", "DELIVER AT (UTC)", "TOPIC", "KEY"], rows))
    if not args.json and answer.get("next"):
        print(f"(the next page: --cursor {answer['next']}, all: --all)", file=sys.stderr)


async def cmd_messages_stats(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.render import iso, table

    stats = await client.message_stats(args.limit)
    rows = [(topic, n) for topic, n in stats["byTopic"].items()]
    minutes = [(iso(row["at"]), row["count"]) for row in stats["byMinute"]]
    if stats["beyond"]:
        minutes.append(("later", stats["beyond"]))
    counting = f" (still counting {len(stats['counting'])} partitions)" if stats["counting"] else ""
    text = "\n\n".join(
        [
            f"{stats['pending']} pending{counting}",
            table(["TOPIC", "PENDING"], rows),
            table(["DUE MINUTE (UTC)", "PENDING"], minutes),
        ]
    )
    print_answer(args, stats, text)


async def cmd_messages_cancel(client: HttpClient, args: argparse.Namespace) -> None:
    print_answer(args, await client.cancel(args.id), f"{args.id}: cancelled (if it was pending)")


def register(sub: Any, leaf: Callable[..., argparse.ArgumentParser]) -> None:
    """The command groups of this module."""

    events = sub.add_parser("events", help="publish events (HTTP API)")
    group = events.add_subparsers(dest="subcommand", required=True)
    p = leaf(group, "publish", cmd_events_publish, "publish an event: TYPE key=value..., or -f FILE")
    p.add_argument("type", nargs="?", metavar="TYPE", help="partition, data, program-status")
    p.add_argument("payload", nargs="*", metavar="key=value")
    p.add_argument(
        "-f", "--file", help="one event ({eventType, payload, timestamp?}), a list, or {events: [...]}"
    )
    p.add_argument("--timestamp", help="event time (ISO-8601 or epoch ms; default: the server's now)")

    messages = sub.add_parser(
        "messages", help="delayed messages: a record delivered to a topic later (HTTP API)"
    )
    group = messages.add_subparsers(dest="subcommand", required=True)
    p = leaf(
        group,
        "send",
        cmd_messages_send,
        "deliver a record to a topic at an instant (the same id replaces it)",
    )
    p.add_argument("id", metavar="ID", help="the message id (cancel and replace by it)")
    p.add_argument("topic", metavar="TOPIC", help="where it is delivered")
    p.add_argument(
        "--at", required=True, help="ISO-8601 (naive = UTC), epoch ms, or from now: +30s, +5m, +2h"
    )
    p.add_argument("--key", help="the delivered record's key (default: the id)")
    p.add_argument("--value", help="the value, as text")
    p.add_argument("-f", "--file", help="the value, as the bytes of this file")
    p.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a header delivered with it; repeat it",
    )
    p = leaf(group, "list", cmd_messages_list, "the messages pending, due first")
    p.add_argument(
        "--due-before", metavar="WHEN", help="only those due by then: ISO-8601, epoch ms, +30m, +2h"
    )
    p.add_argument("--topic", help="only those delivered to this topic")
    p.add_argument("--limit", type=int, help="at most this many a page (default 100)")
    p.add_argument("--cursor", help="the page after this one (the `next` of the previous page)")
    p.add_argument("--all", action="store_true", help="every page")
    p = leaf(group, "stats", cmd_messages_stats, "how many are pending, by topic and by due minute")
    p.add_argument("--limit", type=int, help="at most this many due minutes (default 60)")
    for name, command, what in (
        ("get", cmd_messages_get, "a pending message"),
        ("cancel", cmd_messages_cancel, "cancel a pending message"),
    ):
        leaf(group, name, command, what).add_argument("id", metavar="ID")
