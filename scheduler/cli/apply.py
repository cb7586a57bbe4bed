"""`scheduler apply -f DIR|FILE [--prune [--selector S]] [--dry-run]`: make the scheduler hold what the
files say (scheduler/cli/plans.py), a plan printed first."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scheduler.cli.render import print_answer
from scheduler.domain.basics import plural

if TYPE_CHECKING:
    from scheduler.cli.plans import Change
    from scheduler.client.http import HttpClient

_SIGN = {"create": "+", "update": "~", "delete": "-", "register": "*", "unchanged": "="}


def plan_text(changes: Sequence[Change], verbose: bool = False) -> str:
    """`+ create acme/a`, `~ update acme/b` with its differences, `- delete acme/c`, `* register` a
    program; the unchanged counted (listed with verbose)."""
    lines: list[str] = []
    for c in changes:
        if c.verb == "unchanged" and not verbose and not c.note:
            continue
        verb = f"{c.verb} {c.what}" if c.what == "program" else c.verb
        lines.append(f"{_SIGN[c.verb]} {verb} {c.key}" + (f" (over version {c.version})" if c.verb in (
            "update", "delete") else ""))  # fmt: skip
        lines += [f"    {d}" for d in c.diff]
        if c.note:
            lines.append(f"    note: {c.note}")
    counts = {verb: sum(1 for c in changes if c.verb == verb) for verb in _SIGN}
    summary = ", ".join(
        f"{counts[v]} to {v}" if v != "unchanged" else f"{counts[v]} unchanged" for v in _SIGN if counts[v]
    )
    lines.append(f"plan: {summary or 'nothing in the files'}")
    return "\n".join(lines)


async def cmd_apply(client: HttpClient, args: argparse.Namespace) -> int:
    from scheduler.cli.client import UsageError
    from scheduler.cli.plans import SourceError, apply_plan, invalid, plan, read_current, read_sources

    if args.selector and not args.prune:
        raise UsageError("--selector chooses what --prune deletes: give --prune too")
    if args.selector:
        from scheduler.domain.labels import parse_selector

        try:
            parse_selector(args.selector)
        except ValueError as exc:
            raise UsageError(f"--selector {args.selector!r}: {exc}") from None
    if not args.file and not args.module:
        raise UsageError("give files (-f DIR|FILE) or modules (--module pkg.jobs) to apply")
    try:
        sources = read_sources(args.file or [], args.module or [])
    except SourceError as exc:
        raise UsageError(str(exc)) from None
    problems = invalid(sources)
    if problems:
        print_answer(args, {"invalid": problems}, "\n".join(problems) + "\nnothing applied: the files hold "
                     f"{plural(len(problems), 'invalid definition')}")  # fmt: skip
        return 1
    tenants = sources.tenants | set(args.tenant or [])
    if args.prune and not tenants:
        raise UsageError("--prune with no schedule in the files: name the tenant to empty with --tenant")
    current, programs = await read_current(client, tenants, sources.programs)
    changes = plan(sources, current, programs, prune=args.prune, selector=args.selector)
    todo = [c for c in changes if c.verb != "unchanged"]
    answer: dict[str, Any] = {"plan": [c.to_json() for c in changes], "dryRun": args.dry_run}
    text = plan_text(changes, args.verbose)
    if args.dry_run or not todo:
        print_answer(args, answer, text + ("\n(dry run: nothing sent)" if args.dry_run and todo else ""))
        return 0
    if not args.json:
        print(text, flush=True)
    outcome = await apply_plan(client, changes, args.concurrency)
    answer["done"] = outcome.done
    answer["failed"] = [
        {"key": c.key, "verb": c.verb, "status": e.status, "error": e.error, "reason": e.reason}
        for c, e in outcome.failed
    ]
    done = ", ".join(f"{n} {verb}d" if verb != "register" else f"{n} registered"
                     for verb, n in sorted(outcome.done.items())) or "nothing"  # fmt: skip
    if args.json:
        print_answer(args, answer, "")
    else:
        print(f"applied: {done}" + (f"; {len(outcome.failed)} failed" if outcome.failed else ""))
    for c, error in outcome.failed:
        first, *fields = error.lines()  # (the fields: what the scheduler said is wrong, one a line)
        print(f"scheduler: {c.verb} {c.key} failed: {first}", *fields, sep="\n", file=sys.stderr)
        if error.status == 412:
            print("  (it changed since the plan was made: apply again)", file=sys.stderr)
    return 1 if outcome.failed else 0


def cmd_import(args: argparse.Namespace) -> int:
    """`scheduler import crontab|cronjob FILE`: a file `apply` takes, and what maps and what cannot."""
    import yaml

    from scheduler.cli.client import UsageError
    from scheduler.client.importers import from_cronjobs, from_crontab

    if args.kind == "apscheduler":
        from scheduler.client.importers import apscheduler_states, from_apscheduler

        try:
            imported = from_apscheduler(apscheduler_states(args.source, args.table), args.tenant)
        except Exception as exc:  # (a store that cannot be read: said, with what it was)
            raise UsageError(
                f"{args.source}: cannot read its APScheduler jobs: {type(exc).__name__}: {exc}"
            ) from None
        return _write_imported(imported, args)
    try:
        text = sys.stdin.read() if args.source == "-" else Path(args.source).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {args.source}: {exc.strerror or exc}") from None
    if args.kind == "crontab":
        imported = from_crontab(text, args.tenant, args.timezone, args.system)
    else:
        try:
            docs = list(yaml.safe_load_all(text))
        except yaml.YAMLError as exc:
            raise UsageError(f"{args.source}: not valid YAML: {exc}") from None
        imported = from_cronjobs(docs, args.tenant)
    return _write_imported(imported, args)


def _write_imported(imported: Any, args: argparse.Namespace) -> int:
    import yaml

    for line in imported.report:
        print(f"  {line}", file=sys.stderr)
    print(f"scheduler: {plural(len(imported.schedules), 'schedule')} and {plural(len(imported.programs), 'program')}"
          f" from {args.source}" + (f", {imported.skipped} not mapped" if imported.skipped else "")
          + (f" -> {args.output} (next: scheduler apply -f {args.output} --dry-run)" if args.output != "-" else ""),
          file=sys.stderr)  # fmt: skip
    out = yaml.safe_dump(imported.document(), sort_keys=False, allow_unicode=True, width=200)
    if args.output == "-":
        sys.stdout.write(out)
    else:
        Path(args.output).write_text(out, encoding="utf-8")
    return 0 if imported.schedules else 1


def register(sub: Any, leaf: Callable[..., argparse.ArgumentParser]) -> None:
    """The `apply` and `import` commands."""
    importing = sub.add_parser("import", help="another scheduler's definitions as a file apply takes")
    group = importing.add_subparsers(dest="kind", required=True)
    for kind, what in (("crontab", "a crontab (crontab -l, /etc/crontab with --system)"),
                       ("cronjob", "Kubernetes CronJob manifests (one or more YAML documents, or a List)"),
                       ("apscheduler", "the jobs of an APScheduler 3.x SQLAlchemy job store (sqlite:///jobs.sqlite, …)")):  # fmt: skip
        p = group.add_parser(kind, help=what, description=what)
        p.add_argument("source", metavar="FILE", help="'-': standard input")
        p.add_argument("-o", "--output", default="-", help="the file to write (default: standard output)")
        if kind == "crontab":
            p.add_argument("--tenant", required=True, help="the tenant of the schedules and programs")
            p.add_argument(
                "--timezone", default="UTC", help="the lines' time zone until a CRON_TZ= (default UTC)"
            )
            p.add_argument(
                "--system", action="store_true", help="a 6th field names the user (/etc/crontab, cron.d)"
            )
        elif kind == "apscheduler":
            p.add_argument("--tenant", required=True, help="the tenant of the schedules and programs")
            p.add_argument(
                "--table", default="apscheduler_jobs", help="the job store's table (default apscheduler_jobs)"
            )
        else:
            p.add_argument("--tenant", help="the tenant (default: each manifest's namespace, else 'default')")
        p.set_defaults(func=cmd_import)
    p = leaf(
        sub, "apply", cmd_apply, "make the scheduler hold the programs and schedules of files (a plan first)"
    )
    p.add_argument(
        "-f", "--file", action="append", metavar="DIR|FILE",
        help="a YAML/JSON file, or a directory of them (*.yaml, *.yml, *.json, recursively); repeat it",
    )  # fmt: skip
    p.add_argument(
        "--module", action="append", metavar="PKG.MODULE",
        help="a Python module whose @schedule/@on_partitions/@after functions declare programs and schedules "
        "(imported from the current directory too); repeat it",
    )  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument(
        "--prune", action="store_true",
        help="delete the schedules of the files' tenants (and --tenant's) that no file holds",
    )  # fmt: skip
    p.add_argument("--selector", metavar="LABELS", help="with --prune: delete only those these labels match")
    p.add_argument(
        "--tenant",
        action="append",
        metavar="TENANT",
        help="a tenant to sync even if no file names it (--prune)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="list the unchanged too")
    p.add_argument("--concurrency", type=int, default=16, help="writes in flight (default 16)")
