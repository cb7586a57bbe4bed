"""`scheduler schedules create|list|get|update|delete|enable|disable|next|history|rollback|run|backfill`
(HTTP API)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from scheduler.cli.render import print_answer
from scheduler.domain.basics import plural

if TYPE_CHECKING:
    from scheduler.client.http import HttpClient

ClientCommand = Callable[["HttpClient", argparse.Namespace], Awaitable[int | None]]


def _instant(text: str | None) -> int | None:
    from scheduler.cli.client import parse_instant

    return None if text is None else parse_instant(text)


def _accepted(answer: Any, what: str) -> str:
    action = answer.get("action") if isinstance(answer, dict) else None
    if isinstance(answer, dict) and answer.get("applied"):
        version = answer.get("version") if action not in ("RUN", "BACKFILL") else None
        return f"{what}: {action} applied" + (f" (version {version})" if version is not None else "")
    return f"{what}: {action or 'request'} accepted"


async def cmd_schedules_create(client: HttpClient, args: argparse.Namespace) -> int:
    from scheduler.cli.client import (
        UsageError,
        load_document,
        objects_of,
        schedule_body,
        validate_locally,
    )
    from scheduler.cli.render import ProgressLine
    from scheduler.client.http import schedule_label

    if args.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    bodies = [schedule_body(o) for o in objects_of(load_document(args.file), "schedules", args.file)]
    if args.dry_run:
        invalid: list[dict[str, Any]] = [
            {"index": i, "key": schedule_label(b), "fields": problems}
            for i, b in enumerate(bodies)
            if (problems := validate_locally(b))
        ]
        print_answer(
            args,
            {"total": len(bodies), "valid": len(bodies) - len(invalid), "invalid": invalid},
            f"{len(bodies) - len(invalid)} of {plural(len(bodies), 'schedule')} valid (nothing sent)",
        )
        for bad in invalid:
            print(f"  #{bad['index']} {bad['key']}:", file=sys.stderr)
            for f in bad["fields"]:
                print(f"    {f['field']}: {f['message']}", file=sys.stderr)
        return 1 if invalid else 0
    progress = ProgressLine(sys.stderr.write, sys.stderr.isatty()) if len(bodies) > 1 else None
    result = await client.create_many(bodies, args.concurrency, progress)
    if progress is not None:
        progress(result, final=True)
    failed = [
        {
            "index": i,
            "key": key,
            "status": exc.status,
            "error": exc.error,
            "reason": exc.reason,
            "fields": exc.fields,
        }
        for i, key, exc in result.failures
    ]
    print_answer(
        args,
        {"total": result.total, "accepted": result.accepted, "applied": result.applied, "failed": failed,
         "seconds": result.seconds},
        f"accepted {result.accepted} of {plural(result.total, 'schedule')} in {result.seconds:.1f} s "
        f"({result.rate:,.0f}/s)"
        + {True: ", all applied", False: f", not all applied within {args.timeout:g} s", None: ""}[result.applied]
        + (f", {len(failed)} failed" if failed else ""),
    )  # fmt: skip
    if result.applied is False:
        print("scheduler: the writes are accepted and will be applied; reads may not show them yet",
              file=sys.stderr)  # fmt: skip
    if result.failures:
        print(f"scheduler: {len(result.failures)} of {result.total} failed:", file=sys.stderr)
        for i, key, exc in result.failures:
            lines = exc.lines()
            print(f"  #{i} {key}: {lines[0]}", file=sys.stderr)
            for line in lines[1:]:
                print(f"  {line}", file=sys.stderr)
    return 1 if result.failures or result.applied is False else 0


async def cmd_schedules_list(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.render import iso, paused_text, table, trigger_summary

    filters = {
        "label": args.label,
        "trigger": args.trigger,
        "program": args.program,
        "topic": args.topic,
        "paused": "true" if args.paused else None,
        "finished": "true" if args.finished else None,
        "enabled": {True: "true", False: "false", None: None}[args.enabled],
        "nextBefore": None if args.next_before is None else str(_instant(args.next_before)),
        "nextAfter": None if args.next_after is None else str(_instant(args.next_after)),
    }
    if args.all:
        answer = {"schedules": [s async for s in client.all_schedules(args.tenant, args.limit, **filters)]}
    else:
        answer = await client.schedules(args.tenant, args.limit, args.cursor, **filters)
    schedules = answer["schedules"]
    rows = [
        (
            s["key"],
            _enabled_text(s, paused_text),
            trigger_summary(s),
            iso(s.get("nextFireAt")),
            s.get("program") or s["topic"],
        )
        for s in schedules
    ]
    print_answer(
        args, answer, table(["KEY", "ENABLED", "TRIGGER", "NEXT FIRE (UTC)", "PROGRAM / TOPIC"], rows)
    )
    if not args.json and answer.get("next"):
        print(
            f"({len(schedules)} of {answer['total']}; the next page: --cursor {answer['next']}, all: --all)",
            file=sys.stderr,
        )


def _enabled_text(s: dict[str, Any], paused_text: Callable[..., str]) -> Any:
    """A list's ENABLED cell: finished, paused (why), or enabled (yes/no), with the fires a limited one
    has left."""
    if s.get("finished"):
        return "finished"
    if s.get("paused") is not None:
        return paused_text(s["paused"], short=True)
    left = s.get("firesLeft")
    return s["enabled"] if left is None else f"{'yes' if s['enabled'] else 'no'} ({left} fires left)"


async def cmd_schedules_get(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import parse_schedule_ref
    from scheduler.cli.render import fields_table, paused_text

    answer = await client.schedule(*parse_schedule_ref(args.schedule))
    times = ("createdAt", "updatedAt", "activeSince", "nextFireAt")
    shown = {**answer, "paused": None if answer.get("paused") is None else paused_text(answer["paused"])}
    print_answer(args, answer, fields_table(shown, times))


async def cmd_schedules_update(client: HttpClient, args: argparse.Namespace) -> int:
    from scheduler.cli.client import (
        UsageError,
        load_document,
        objects_of,
        parse_schedule_ref,
        schedule_body,
        validate_locally,
    )

    tenant, name = parse_schedule_ref(args.schedule)
    items = objects_of(load_document(args.file), "schedules", args.file)
    if len(items) != 1:
        raise UsageError(f"{args.file}: update takes one schedule, the file holds {len(items)}")
    body = schedule_body(items[0])
    for field, value in (("tenant", tenant), ("name", name)):
        if body.pop(field, value) != value:
            raise UsageError(
                f"{args.file}: {field} {items[0][field]!r} is not the {field} of {args.schedule}"
            )
    if args.dry_run:
        problems = validate_locally(body, with_key=False)
        print_answer(
            args,
            {"valid": not problems, "fields": problems},
            "valid (nothing sent)" if not problems else "invalid",
        )
        for f in problems:
            print(f"  {f['field']}: {f['message']}", file=sys.stderr)
        return 1 if problems else 0
    answer = await client.update(tenant, name, body)
    print_answer(args, answer, _accepted(answer, args.schedule))
    return 0


def _schedule_action(action: str) -> ClientCommand:
    async def command(client: HttpClient, args: argparse.Namespace) -> None:
        from scheduler.cli.client import parse_schedule_ref

        tenant, name = parse_schedule_ref(args.schedule)
        if action == "delete":
            answer = await client.delete(tenant, name)
        elif action == "disable":
            answer = await client.disable(tenant, name, args.note, _instant(args.until))
        else:
            answer = await client.action(tenant, name, action)
        print_answer(args, answer, _accepted(answer, args.schedule))

    return command


async def cmd_schedules_next(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import UsageError, parse_schedule_ref
    from scheduler.cli.render import iso, table

    if args.n < 1:
        raise UsageError("-n must be at least 1")
    tenant, name = parse_schedule_ref(args.schedule)
    answer = await client.schedule(tenant, name, "next", n=args.n)
    if not answer["next"]:
        text = f"{args.schedule} has no time trigger: it fires on events only"
    elif answer.get("specs"):  # (an AND/OR: which of its time triggers each instant comes from)
        words = answer.get("specTexts") or {}
        rows = [
            (i + 1, iso(t), t, "; ".join(f"{p} {words.get(p, '')}".strip() for p in specs))
            for i, (t, specs) in enumerate(zip(answer["next"], answer["specs"], strict=False))
        ]
        text = table(["#", "FIRE TIME (UTC)", "EPOCH MS", "FROM"], rows)
    else:
        text = table(
            ["#", "FIRE TIME (UTC)", "EPOCH MS"], [(i + 1, iso(t), t) for i, t in enumerate(answer["next"])]
        )
    if answer["next"] and not answer.get("enabled", True):
        text = f"{args.schedule} is disabled; when enabled it would fire at:\n{text}"
    print_answer(args, {**answer, "nextIso": [iso(t) for t in answer["next"]]}, text)


async def cmd_schedules_history(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import parse_schedule_ref
    from scheduler.cli.render import iso, table

    tenant, name = parse_schedule_ref(args.schedule)
    answer = await client.schedule(tenant, name, "history")

    def changed(v: dict[str, Any]) -> str:
        text = ", ".join(v["changed"]) or "-"
        if v.get("until") is not None:  # (a pause's end; an ENABLE: the pause it ended)
            text += f"; until {iso(v['until'])}"
        return text + (f"; note: {v['note']}" if v.get("note") else "")

    rows = [(v["version"], iso(v["at"]), v["by"], v["action"], changed(v)) for v in answer["versions"]]
    print_answer(args, answer, table(["VERSION", "AT (UTC)", "BY", "ACTION", "CHANGED"], rows))


async def cmd_schedules_rollback(client: HttpClient, args: argparse.Namespace) -> None:
    """PUT the definition a version of the schedule had, over the version it is at now (If-Match)."""
    from scheduler.cli.client import UsageError, parse_schedule_ref

    tenant, name = parse_schedule_ref(args.schedule)
    versions = (await client.schedule(tenant, name, "history"))["versions"]
    target = next((v for v in versions if v["version"] == args.to and v["schedule"] is not None), None)
    if target is None:
        known = sorted({v["version"] for v in versions if v["schedule"] is not None})
        raise UsageError(f"{args.schedule} has no version {args.to} in its history (it has {known})")
    current = await client.schedule(tenant, name)
    answer = await client.update(tenant, name, target["schedule"], if_version=current["version"])
    text = (
        f"{args.schedule}: back to the definition of version {args.to} (as version {current['version'] + 1})"
    )
    print_answer(args, answer, text)


async def cmd_schedules_run(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import parse_instant, parse_payload, parse_schedule_ref

    tenant, name = parse_schedule_ref(args.schedule)
    body: dict[str, Any] = {"at": parse_instant(args.at)} if args.at else {}
    if args.arguments:
        body["arguments"] = parse_payload(args.arguments)
    answer = await client.action(tenant, name, "run", body or None)
    print_answer(args, answer, _accepted(answer, args.schedule))


async def cmd_schedules_backfill(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import UsageError, parse_instant, parse_schedule_ref
    from scheduler.cli.render import iso

    tenant, name = parse_schedule_ref(args.schedule)
    start, end = parse_instant(args.from_), parse_instant(args.to)
    if end < start:
        raise UsageError(f"--to ({iso(end)}) is before --from ({iso(start)})")
    answer = await client.action(tenant, name, "backfill", {"from": start, "to": end})
    fires = answer.get("fires") if isinstance(answer, dict) else None
    text = _accepted(answer, args.schedule) + (
        f": {plural(fires, 'fire')} from {iso(start)} to {iso(end)}" if fires is not None else ""
    )
    print_answer(args, answer, text)


def register(sub: Any, leaf: Callable[..., argparse.ArgumentParser]) -> None:
    """The `schedules` command group."""

    def ref(p: argparse.ArgumentParser) -> None:
        p.add_argument("schedule", metavar="TENANT/NAME")

    schedules = sub.add_parser("schedules", help="create, list, change and fire schedules (HTTP API)")
    group = schedules.add_subparsers(dest="subcommand", required=True)
    p = leaf(group, "create", cmd_schedules_create, "create schedules from a YAML/JSON file (bulk import)")
    p.add_argument(
        "-f", "--file", required=True, help="one schedule, a list, or {schedules: [...]}; '-': stdin"
    )
    p.add_argument("--dry-run", action="store_true", help="validate locally, send nothing")
    p.add_argument("--concurrency", type=int, default=16, help="requests in flight (default 16)")
    p = leaf(group, "list", cmd_schedules_list, "list schedules")
    p.add_argument("--tenant")
    p.add_argument("--limit", type=int, help="at most this many (server default 1000, max 10000)")
    p.add_argument("--cursor", help="the page after this cursor (the `next` of the page before)")
    p.add_argument("--all", action="store_true", help="every page, one after the other (--limit: per page)")
    p.add_argument(
        "--label",
        metavar="SELECTOR",
        help="only those whose labels match: team=data,tier!=bronze,critical,!old",
    )
    p.add_argument(
        "--trigger", metavar="KIND", help="only those whose trigger is of this kind (cron, frequency, and, …)"
    )
    p.add_argument("--program", help="only those that launch this program")
    p.add_argument("--topic", help="only those that fire to this topic")
    p.add_argument("--paused", action="store_true", help="only those paused by a disable")
    p.add_argument(
        "--finished", action="store_true", help="only the finished ones (notAfter, maxFires, once)"
    )
    when = "ISO-8601, epoch ms, or +30m, +2h, +1d"
    p.add_argument(
        "--next-before", metavar="WHEN", help=f"only those whose next fire is at or before it: {when}"
    )
    p.add_argument(
        "--next-after", metavar="WHEN", help=f"only those whose next fire is at or after it: {when}"
    )
    on = p.add_mutually_exclusive_group()
    on.add_argument(
        "--enabled", dest="enabled", action="store_const", const=True, help="only the enabled ones"
    )
    on.add_argument(
        "--disabled", dest="enabled", action="store_const", const=False, help="only the disabled ones"
    )
    ref(leaf(group, "get", cmd_schedules_get, "show one schedule"))
    p = leaf(group, "update", cmd_schedules_update, "replace a schedule's definition (PUT)")
    ref(p)
    p.add_argument("-f", "--file", required=True, help="the schedule (tenant/name may be omitted)")
    p.add_argument("--dry-run", action="store_true", help="validate locally, send nothing")
    for action in ("delete", "enable"):
        ref(leaf(group, action, _schedule_action(action), f"{action} a schedule"))
    p = leaf(group, "disable", _schedule_action("disable"), "disable (pause) a schedule, with a note")
    ref(p)
    p.add_argument("--note", help="why it is paused (shown by get, list, history and the admin page)")
    p.add_argument("--until", help="enable it again then, by itself: ISO-8601, epoch ms, or +30m, +2h, +1d")
    p = leaf(group, "next", cmd_schedules_next, "the next fire times (ISO-8601 UTC and epoch ms)")
    ref(p)
    p.add_argument("-n", type=int, default=10, help="how many (default 10)")
    p = leaf(group, "history", cmd_schedules_history, "every change of a schedule: who, when, what")
    ref(p)
    p = leaf(group, "rollback", cmd_schedules_rollback, "put back the definition of an earlier version")
    ref(p)
    p.add_argument("--to", type=int, required=True, metavar="VERSION", help="the version to go back to")
    p = leaf(group, "run", cmd_schedules_run, "fire a schedule now (or at --at), with runtime arguments")
    ref(p)
    p.add_argument("--at", help="the instant to fire it as (ISO-8601 or epoch ms; default now)")
    p.add_argument(
        "--arg",
        dest="arguments",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a runtime argument, over the schedule's data (a program's job arguments, a fire's data); repeat it",
    )
    p = leaf(group, "backfill", cmd_schedules_backfill, "fire every due instant in a range")
    ref(p)
    p.add_argument("--from", dest="from_", required=True, help="ISO-8601 (naive = UTC) or epoch ms")
    p.add_argument("--to", required=True, help="ISO-8601 (naive = UTC) or epoch ms, included")
