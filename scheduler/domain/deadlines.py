"""SLA deadlines of a program's job queue (domain/jobs.py): a job whose run has not COMPLETED by its
schedule's `completeWithinMs` after its trigger is reported missed, once. Pure.

A job's deadline is watched from the moment it joins the queue (add_job) until a run of it COMPLETED
(apply_status) or it was dropped on purpose (skipped, discarded, cancelled); the worker asks at each
check of the queue (worker/job_queue.py) and alerts on what this answers."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.domain.jobs import MAX_OUTCOMES_REMEMBERED, ProgramQueue


@dataclass(frozen=True)
class DeadlineMissed:
    """A job whose run had not completed by its SLA deadline."""

    job_id: str
    schedule: str
    program: str
    due_by: int
    reason: str


def missed_deadlines(queue: ProgramQueue, now: int) -> list[DeadlineMissed]:
    """The jobs of the queue past their SLA deadline (launched, or still waiting) with no run COMPLETED:
    each once — its deadline is dropped, and the miss is kept among the queue's recent outcomes."""
    missed = []
    for job_id, d in list(queue.deadlines.items()):
        if d["at"] > now:
            continue
        del queue.deadlines[job_id]
        waiting = next((j for j in queue.jobs if j.job_id == job_id), None)
        where = (
            f"still waiting ({waiting.blocked_by or 'to launch'})"
            if waiting is not None
            else "its run had not completed"
        )
        reason = f"not completed by its deadline ({d['withinMs'] / 1000:g} s after its trigger): {where}"
        missed.append(DeadlineMissed(job_id, d["schedule"], d["program"], d["at"], reason))
        queue.outcomes.append(
            {
                "jobId": job_id,
                "schedule": d["schedule"],
                "outcome": "DEADLINE_MISSED",
                "reason": reason,
                "at": now,
            }
        )
        del queue.outcomes[:-MAX_OUTCOMES_REMEMBERED]
    return missed
