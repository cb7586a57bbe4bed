"""`scheduler jobs list|why|cancel` and `scheduler runs list|status|logs|stop|suspend|resume` (HTTP API)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scheduler.cli.render import print_answer
from scheduler.domain.basics import plural

if TYPE_CHECKING:
    from scheduler.client.http import HttpClient

RUN_ACTION_WORDS = {
    "stop": "stop requested (STOPPING, then STOPPED)",
    "suspend": "suspend requested (SUSPENDING, then SUSPENDED)",
    "resume": "resume requested (RESUMING, then RUNNING)",
}


async def cmd_jobs_cancel(client: HttpClient, args: argparse.Namespace) -> None:
    answer = await client.cancel_job(args.job_id)
    print_answer(args, answer, f"{answer['jobId']}: cancel accepted (its outcome: CANCELLED, in jobs list)")


async def cmd_jobs_list(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.render import iso, table

    limit = None if args.limit is None else str(args.limit)
    answer = await client.jobs(
        schedule=args.schedule, program=args.program, state=args.state, limit=limit, cursor=args.cursor
    )
    jobs, recent = answer.get("jobs", []), answer.get("recent", [])
    text = (
        table(
            ["JOB", "STATE", "PROGRAM", "BLOCKED BY", "CHECK AT (UTC)", "REASON"],
            [
                (
                    j["jobId"],
                    j["state"],
                    j["program"],
                    j.get("blockedBy") or None,
                    iso(j["checkAt"]) if j.get("checkAt") else None,
                    j.get("reason") or None,
                )
                for j in jobs
            ],
        )
        if jobs
        else "no pending jobs"
    )
    if recent:
        text += "\n\nrecent outcomes:\n" + table(
            ["AT (UTC)", "JOB", "OUTCOME", "REASON"],
            [(iso(o.get("at")), o.get("jobId"), o.get("outcome"), o.get("reason")) for o in recent],
        )
    print_answer(args, answer, text)
    if not args.json and answer.get("next"):
        print(f"({plural(len(jobs), 'job')}; the next page: --cursor {answer['next']})", file=sys.stderr)


async def cmd_jobs_why(client: HttpClient, args: argparse.Namespace) -> None:
    """Why a schedule's program has not launched: its trigger's progress and its pending jobs, in words."""
    import time

    from scheduler.cli.client import parse_schedule_ref
    from scheduler.cli.render import explain_job, explain_trigger, iso

    tenant, name = parse_schedule_ref(args.schedule)
    key = f"{tenant}/{name}"
    schedule = await client.schedule(tenant, name)
    progress = await client.schedule(tenant, name, "trigger")
    jobs = await client.jobs(schedule=key)
    pending, recent = jobs.get("jobs", []), jobs.get("recent", [])
    now = time.time_ns() // 1_000_000
    lines: list[str] = []
    if not schedule.get("program"):
        lines.append(
            f"{key} has no program: it fires tasks to topic {schedule['topic']} and never has jobs"
            + (f"; next fire {iso(schedule['nextFireAt'])}" if schedule.get("nextFireAt") else "")
        )
    elif not schedule["enabled"]:
        lines.append(
            f"{key} is disabled: events do not count toward its trigger and nothing launches until it is enabled"
        )
    else:
        lines.append(
            f"{key} launches {schedule['program']}; {plural(progress.get('jobsCreated', 0), 'job')} created "
            f"by its current definition (version {progress.get('version')})"
        )
    trigger = progress.get("trigger") or {}
    state = "satisfied" if trigger.get("satisfied") else "waiting (PENDING_TRIGGER)"
    lines.append(f"trigger: {state}")
    lines += ["  " + line for line in explain_trigger(trigger)]
    if pending:
        lines.append(f"pending jobs: {len(pending)}")
        lines += ["  " + explain_job(j, now) for j in pending]
    elif schedule.get("program"):
        lines.append("pending jobs: none (nothing waits on a constraint)")
    if recent:
        lines.append("recent outcomes:")
        lines += [
            f"  {iso(o.get('at'))} {o.get('jobId')} {o.get('outcome')}: {o.get('reason')}" for o in recent
        ]
    print_answer(
        args, {"schedule": schedule, "trigger": progress, "jobs": pending, "recent": recent}, "\n".join(lines)
    )


async def cmd_runs_list(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import parse_program
    from scheduler.cli.render import iso, table

    answer = await client.runs(parse_program(args.program), args.status)
    rows = [
        (
            r["run_id"],
            r["status"],
            r.get("schedule") or None,
            iso(r.get("created_at")),
            iso(r.get("started_at")),
            iso(r.get("ended_at")),
            (r.get("error") or "")[-80:] or None,
        )
        for r in answer["runs"]
    ]
    headers = ["RUN", "STATUS", "SCHEDULE", "CREATED (UTC)", "STARTED", "ENDED", "ERROR"]
    print_answer(args, answer, table(headers, rows) if rows else f"no runs of {args.program}")


async def cmd_runs_status(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import parse_program
    from scheduler.cli.render import iso

    answer = await client.program_status(parse_program(args.program))
    lines = [f"{args.program}: {answer['status']}"]
    for run in answer.get("activeRuns", []):
        lines.append(f"  active: {run['runId']} {run['status']}")
    last = answer.get("lastRun")
    if last:
        ended = f", ended {iso(last['ended_at'])}" if last.get("ended_at") else ""
        lines.append(f"  last run: {last['run_id']} {last['status']}{ended}")
        if last.get("error"):
            lines.append(f"  error: {last['error'][-200:]}")
    print_answer(args, answer, "\n".join(lines))


async def cmd_runs_logs(client: HttpClient, args: argparse.Namespace) -> None:
    """A run's output as it is kept, or (-f) as it comes until the run ends; what was rotated out is said
    on stderr where it was."""
    from scheduler.cli.client import UsageError, parse_program

    if args.run_id is None:  # `runs logs RUN_ID`: a job's run id names its schedule, which names the program
        args.run_id = args.program
        schedule, at, _ = args.run_id.partition("@")
        if not at or schedule.count("/") != 1:
            raise UsageError(f"give PROGRAM RUN_ID, or a job's run id (tenant/name@…), got {args.run_id!r}")
        tenant, name = schedule.split("/")
        found = await client.schedule(tenant, name)
        if not found.get("program"):
            raise UsageError(f"schedule {schedule} launches no program: give PROGRAM RUN_ID")
        args.program = found["program"]
    program = parse_program(args.program)
    last: dict[str, Any] = {}
    async for page in client.log_pages(program, args.run_id, args.offset, follow=args.follow):
        if page["dropped"]:
            sys.stdout.flush()
            print(f"[{page['dropped']:,} bytes of its output not kept here]", file=sys.stderr, flush=True)
        if args.json:
            print(json.dumps(page), flush=True)
        else:
            sys.stdout.write(page["text"])
            sys.stdout.flush()
        last = page
    if not args.json and last.get("reason"):
        print(f"{args.run_id}: {last['reason']}", file=sys.stderr)
    elif not args.json and args.follow:
        print(f"[{args.run_id}: {last.get('status')}]", file=sys.stderr)


async def cmd_runs_control(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import parse_program

    answer = await client.control_run(parse_program(args.program), args.run_id, args.subcommand)
    print_answer(args, answer, f"{args.run_id}: {RUN_ACTION_WORDS[args.subcommand]}")


def register(sub: Any, leaf: Callable[..., argparse.ArgumentParser]) -> None:
    """The command groups of this module."""

    def ref(p: argparse.ArgumentParser) -> None:
        p.add_argument("schedule", metavar="TENANT/NAME")

    def program(p: argparse.ArgumentParser) -> None:
        p.add_argument("program", metavar="PROGRAM", help="namespace/application/type/name")

    jobs = sub.add_parser("jobs", help="pending jobs and why they wait (HTTP API)")
    group = jobs.add_subparsers(dest="subcommand", required=True)
    p = leaf(group, "list", cmd_jobs_list, "pending jobs and recent outcomes")
    p.add_argument("--schedule", metavar="TENANT/NAME")
    p.add_argument("--program", metavar="PROGRAM")
    p.add_argument(
        "--state", help="PENDING_CONSTRAINT, PENDING_CAP, PENDING_LAUNCH, or an outcome (SKIP, DISCARD, ...)"
    )
    p.add_argument("--limit", type=int, help="at most this many jobs (the API's default: 1,000)")
    p.add_argument("--cursor", help="the page after this one (as the previous page printed it)")
    ref(leaf(group, "why", cmd_jobs_why, "why a schedule's program has not launched"))
    p = leaf(group, "cancel", cmd_jobs_cancel, "cancel a pending job (a launched one is a run: runs stop)")
    p.add_argument("job_id", metavar="JOB_ID", help="as jobs list shows it (tenant/name@...)")

    runs = sub.add_parser("runs", help="a program's runs (HTTP API)")
    group = runs.add_subparsers(dest="subcommand", required=True)
    p = leaf(group, "list", cmd_runs_list, "a program's run records (the last 100)")
    program(p)
    p.add_argument("--status", help="only runs in this status (RUNNING, COMPLETED, FAILED, ...)")
    program(leaf(group, "status", cmd_runs_status, "a program's status: its active runs or its last run"))
    p = leaf(group, "logs", cmd_runs_logs, "a run's output (stdout and stderr, secrets masked)")
    p.add_argument(
        "program",
        metavar="PROGRAM",
        help="namespace/application/type/name; or a job's run id alone (its schedule names the program)",
    )
    p.add_argument("run_id", metavar="RUN_ID", nargs="?")
    p.add_argument(
        "-f", "--follow", action="store_true", help="print new output as it comes, until the run ends"
    )
    p.add_argument("--offset", type=int, default=0, help="from this byte of all it printed (default: 0)")
    for action, what in (
        ("stop", "stop a run"),
        ("suspend", "suspend a RUNNING run"),
        ("resume", "resume a SUSPENDED run"),
    ):
        p = leaf(group, action, cmd_runs_control, what)
        program(p)
        p.add_argument("run_id", metavar="RUN_ID")
