"""Backfills as objects (Airflow 3's backfills, Dagster's): the instants of a range, chosen by what ran
before (reprocess), fed to the schedule's job queue at most `maxConcurrent` at a time, oldest or newest
first, with a status and progress, cancellable. Pure.

A backfill lives in its schedule's job queue (ProgramQueue.backfills: its JSON), the partition that sees every
job and run it makes: its counts are exact. Each instant becomes a job of its own (never folded into another,
nor another into it), made from the schedule's job as it was when the backfill started; the job goes through
the schedule's overlap policy (or the backfill's) and constraints like any. A run that FAILED and is retried
counts once, by how its last attempt ended.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from scheduler.domain.jobs import Job, ProgramQueue, add_job, cancel

#: how many ended backfills a job queue keeps to show (the oldest go)
MAX_ENDED_BACKFILLS = 20
MAX_CONCURRENT = 100
REPROCESS = ("none", "failed", "all")
ORDERS = ("oldest", "newest")
#: the statuses of an instant's last run that `failed` runs again
NOT_COMPLETED = frozenset({"FAILED", "KILLED", "STOPPED"})
COUNTS = ("launched", "completed", "failed", "skipped", "cancelled")


def instant_of_run(run_id: str, schedule: str) -> int | None:
    """The instant a run of the schedule was made for: a time fire's (`<schedule>@<due>`), a RUN's, a
    BACKFILL's or a backfill's (`@run.<due>`, `@backfill.<due>…`); None for another schedule's run or one
    an event made (`@v<version>.<n>`)."""
    head, at, rest = run_id.split("~", 1)[0].partition("@")
    if not at or head != schedule:
        return None
    parts = rest.split(".")
    if parts[0] in ("run", "backfill") and len(parts) > 1:
        parts = parts[1:]
    return int(parts[0]) if parts[0].isdigit() else None


def choose(
    instants: Iterable[int], runs: Iterable[Mapping[str, Any]], schedule: str, reprocess: str
) -> tuple[list[int], int]:
    """The instants to backfill, and how many were left out: `all` every one; `none` those with no known
    run of the schedule; `failed` those too, and those whose last run did not complete (FAILED, KILLED,
    STOPPED). `runs`: the program's run records (oldest first), what is known of past runs."""
    wanted = list(instants)
    if reprocess == "all":
        return wanted, 0
    last: dict[int, str] = {}
    for r in runs:
        due = instant_of_run(str(r["run_id"]), schedule)
        if due is not None:
            last[due] = str(r["status"])
    kept = [d for d in wanted if d not in last or (reprocess == "failed" and last[d] in NOT_COMPLETED)]
    return kept, len(wanted) - len(kept)


def new_backfill(
    backfill_id: str,
    template: Job,
    instants: list[int],
    *,
    span: tuple[int, int],
    reprocess: str,
    order: str,
    max_concurrent: int,
    overlap: str | None,
    by: str,
    now: int,
) -> dict[str, Any]:
    """A backfill as its job queue keeps it (JSON): its instants in the order they launch."""
    return {
        "id": backfill_id,
        "schedule": template.schedule,
        "version": template.version,
        "status": "RUNNING",
        "from": span[0],
        "to": span[1],
        "reprocess": reprocess,
        "order": order,
        "maxConcurrent": max_concurrent,
        "overlap": overlap,
        "by": by,
        "createdAt": now,
        "endedAt": None,
        "total": len(instants),
        "instants": sorted(instants, reverse=order == "newest"),
        "template": template.to_json(),
        "running": [],
        "counts": dict.fromkeys(COUNTS, 0),
    }


def start(queue: ProgramQueue, backfill: dict[str, Any]) -> bool:
    """A backfill begins (False: one of that id is there already, a repeat)."""
    if backfill["id"] in queue.backfills:
        return False
    queue.backfills[backfill["id"]] = backfill
    return True


def in_flight(queue: ProgramQueue, bf: dict[str, Any]) -> int:
    """Its jobs waiting in the queue and its runs not yet ended."""
    return len(bf["running"]) + sum(j.backfill == bf["id"] for j in queue.jobs)


def feed(queue: ProgramQueue, now: int) -> int:
    """Each running backfill's next instants become jobs, up to its maxConcurrent in flight (how many);
    one with none left and none in flight is COMPLETED."""
    added = 0
    for bf in list(queue.backfills.values()):
        if bf["status"] != "RUNNING":
            continue
        flying = in_flight(queue, bf)
        while bf["instants"] and flying < bf["maxConcurrent"]:
            due = bf["instants"].pop(0)
            add_job(queue, _job(bf, due, now))
            flying += 1
            added += 1
        if not bf["instants"] and flying == 0:
            _end(queue, bf, "COMPLETED", now)
    return added


def _job(bf: dict[str, Any], due: int, now: int) -> Job:
    template = Job.from_json(bf["template"])
    arguments = {
        **template.arguments,
        "trigger.eventType": "backfill",
        "trigger.due": str(due),
        "trigger.backfill": bf["id"],
    }
    return replace(
        template,
        job_id=f"{bf['schedule']}@backfill.{due}.{bf['id']}",
        arguments=arguments,
        triggered_at=now,
        deadline_at=None,
        backfill=bf["id"],
        overlap=bf["overlap"] or template.overlap,
    )


def stop(queue: ProgramQueue, backfill_id: str, reason: str, now: int) -> bool:
    """Cancel a running backfill: no more of its instants launch (counted cancelled), its waiting jobs are
    cancelled; its runs go on to their end. False if it is not running."""
    bf = queue.backfills.get(backfill_id)
    if bf is None or bf["status"] != "RUNNING":
        return False
    bf["counts"]["cancelled"] += len(bf["instants"])
    bf["instants"] = []
    for job in [j for j in queue.jobs if j.backfill == backfill_id]:
        cancel(queue, job.schedule, None, reason, now, job.job_id)
    bf["cancelReason"] = reason
    _end(queue, bf, "CANCELLED", now)
    return True


def stop_schedules(
    queue: ProgramQueue, schedule: str, below_version: int | None, reason: str, now: int
) -> None:
    """The schedule was updated (its backfills of older versions), disabled or deleted (all of them)."""
    for bf in list(queue.backfills.values()):
        if bf["schedule"] == schedule and (below_version is None or bf["version"] < below_version):
            stop(queue, bf["id"], reason, now)


def _end(queue: ProgramQueue, bf: dict[str, Any], status: str, now: int) -> None:
    bf["status"], bf["endedAt"], bf["template"] = status, now, None
    ended = [b for b in queue.backfills.values() if b["status"] != "RUNNING"]
    for old in sorted(ended, key=lambda b: b["endedAt"])[:-MAX_ENDED_BACKFILLS]:
        del queue.backfills[old["id"]]


def progress(bf: dict[str, Any], queue: ProgramQueue) -> dict[str, Any]:
    """A backfill as GET shows it: what it was asked, its status, and its counts."""
    shown = {k: v for k, v in bf.items() if k not in ("instants", "template", "running", "counts", "version")}
    return {
        **shown,
        "key": bf["schedule"],
        **bf["counts"],
        "pending": len(bf["instants"]),
        "inFlight": in_flight(queue, bf) if bf["status"] == "RUNNING" else len(bf["running"]),
        "next": bf["instants"][0] if bf["instants"] else None,
    }
