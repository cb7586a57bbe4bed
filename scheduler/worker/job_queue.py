"""The job queue agent, on the partition of the program (its constraint checker timer: job_checks.py).

The agent applies, in order, everything that concerns one program: jobs whose trigger was satisfied,
status events of its runs, cancellations (schedule updated, disabled, deleted) and timer checks; after
each it runs the pure check (scheduler.domain.jobs) and produces a launch request for every job it launches.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import TYPE_CHECKING, Any

from scheduler.domain import backfills
from scheduler.domain.caps import CAPS_KEY, CapQueue, ask, grant, release, why_waiting
from scheduler.domain.commands import PAUSE_ON_FAILURE_BY
from scheduler.domain.deadlines import missed_deadlines
from scheduler.domain.jobs import (
    Job,
    Launch,
    ProgramQueue,
    add_job,
    apply_status,
    cancel,
    check,
    note_outcome,
    slot_granted,
    slot_queued,
)
from scheduler.domain.leases import lost_runs, next_lease_check
from scheduler.domain.legacy_groups import adopt, legacy_group, split_legacy_group
from scheduler.domain.model import (
    GROUP_QUEUE_PREFIX,
    Action,
    PauseRequest,
    ProgramId,
    ScheduleCommand,
    ScheduleKey,
)
from scheduler.domain.runs import RunRecord, RunStatus, Verdict, apply_transition, judge, keep_records
from scheduler.launcher.control import control_request
from scheduler.wire.codec import decode_json, encode, encode_json
from scheduler.wire.command_headers import command_headers
from scheduler.wire.messages import (
    RUN_DETAILS,
    AdoptQueue,
    AskSlot,
    CancelBackfill,
    CancelJobs,
    JobQueueMessage,
    JobTriggered,
    NoteOutcome,
    ReleaseSlot,
    RunStatusChanged,
    SlotGranted,
    SlotQueued,
    StartBackfill,
    decode_job_queue_message,
    encode_job_queue_message,
)
from scheduler.worker.hops import safely
from scheduler.worker.job_checks import CheckTimer

if TYPE_CHECKING:
    from faust.types import EventT

    from scheduler.worker.ports import JobQueuePort

log = logging.getLogger(__name__)
CAPS_KEY_BYTES = CAPS_KEY.encode()


def launch_request(launch: Launch) -> bytes:
    job = launch.job
    events = [
        {"timestamp": e.get("timestamp", 0), "eventType": e["eventType"], "payload": e.get("payload") or {}}
        for e in job.events
    ]
    return encode(
        "LaunchRequest",
        {
            **_launched(job.job_id, job.schedule, job.program, job.arguments, job.triggered_at),
            "launchedAt": launch.launched_at,
            "forced": launch.forced,
            "events": events,
            "runId": job.run_id,
            "attempt": job.attempt,
            "timeLimitMs": job.time_limit_ms,
        },
    )


def relaunch_request(record: RunRecord, now: int) -> bytes:
    """The launch request of a run launched again (its claim's launcher was lost before it started it)."""
    job_id = record.job_id or record.run_id
    triggered_at = record.triggered_at or record.created_at
    return encode(
        "LaunchRequest",
        {
            **_launched(job_id, record.schedule, record.program, record.arguments, triggered_at),
            "launchedAt": now,
            "forced": False,
            "events": [],
            "runId": record.run_id,
            "attempt": record.attempt,
            "timeLimitMs": record.time_limit_ms,
        },
    )


def _launched(
    job_id: str, schedule: str, program_id: str, arguments: dict[str, str], triggered_at: int
) -> dict[str, Any]:
    """What a launch request says of the job it launches."""
    tenant, _, name = schedule.partition("/")
    program = ProgramId.parse(program_id)
    return {
        "jobId": job_id,
        "schedule": {"tenant": tenant, "name": name},
        "program": {
            "namespace": program.namespace,
            "application": program.application,
            "type": program.type,
            "name": program.name,
        },
        "arguments": arguments,
        "triggeredAt": triggered_at,
    }


async def raise_alert(
    worker: Any, kind: str, schedule: str, program: str | None, job_id: str | None, due_by: int, reason: str
) -> None:
    """An SLA miss: an Alert on the alerts topic (keyed by schedule), counted, and logged."""
    alert = {
        "kind": kind,
        "schedule": schedule,
        "program": program,
        "jobId": job_id,
        "dueBy": due_by,
        "raisedAt": worker.clock(),
        "reason": reason,
    }
    worker.counts.alerts[kind] += 1
    log.warning("SLA %s of %s%s: %s", kind, schedule, f" (job {job_id})" if job_id else "", reason)
    await worker.send_keyed(
        worker.settings.alerts_topic, schedule.encode(), encode("Alert", alert), partition=None
    )


def _retried(queue: ProgramQueue, status: RunStatusChanged) -> bool:
    """Whether the job of a run that just FAILED waits in the queue for another attempt."""
    job_id = status.details.get("jobId", "")
    attempt = int(status.details["attempt"]) if status.details.get("attempt", "").isdigit() else 1
    return bool(job_id) and any(j.job_id == job_id and j.attempt > attempt for j in queue.jobs)


class JobQueueAgent:
    def __init__(self, worker: JobQueuePort) -> None:
        self.worker = worker
        self.checker = CheckTimer(worker, self._next_check)
        self.caps = worker.settings.run_caps
        # queue key -> run id -> when its holder last renewed it (memory only: a new owner of the
        # partition counts every lease from when it took the partition over)
        self.renewed: dict[bytes, dict[str, int]] = {}

    def local_queues(self, partition: int) -> list[tuple[bytes, ProgramQueue]]:
        from scheduler.kafka.tables import partition_items

        return [
            (k, ProgramQueue.from_json(decode_json(v)))
            for k, v in partition_items(self.worker.job_queue, partition)
            if k != CAPS_KEY_BYTES  # (the cap queue's state: not a job queue)
        ]

    async def handle(self, event: EventT) -> None:
        """A job-queue message: a job, a run's status, a cancellation, a check."""
        await safely(self.worker, event, "a job-queue message", self._handle)

    async def _pause(self, schedule: str, note: str) -> None:
        """Ask for the schedule's pause: a DISABLE with the note, by `pauseOnFailure` (its history shows it),
        on the commands topic (with transactions, in this queue's transaction)."""
        tenant, _, name = schedule.partition("/")
        cmd = ScheduleCommand(ScheduleKey(tenant, name), Action.DISABLE, pause=PauseRequest(note))
        self.worker.counts.events["pausedOnFailure"] += 1
        log.warning("%s: %s", schedule, note)
        await self.worker.send_command(cmd, headers=command_headers(by=PAUSE_ON_FAILURE_BY))

    async def _stop(self, stop: dict[str, Any]) -> None:
        """Stop (or kill) a run an overlap policy has in its way: a request to the launcher that holds it,
        on the control topic; a run not started yet is ended by its program's job queue at once (as a
        user's stop of it is), and a launcher that claims it later sees it ended and does not run it."""
        worker = self.worker
        worker.counts.events["overlapStops"] += 1
        run_id, program = stop["runId"], stop["program"]
        if not stop["started"]:
            ended = RunStatusChanged(
                run_id,
                stop["endsAs"],
                worker.clock(),
                program,
                {"error": f"{stop['reason']} (before it started)"},
            )
            await worker.send_keyed(
                worker.settings.jobs_topic, program.encode(), encode_job_queue_message(ended)
            )
        await worker.send_keyed(
            worker.settings.launcher_control_topic,
            run_id.encode(),
            control_request(stop["action"], run_id, program, stop["reason"]),
            partition=None,
        )

    async def _to_caps(self, key: bytes, queue: ProgramQueue) -> None:
        """The queue's asks for run slots and the slots it gives back, to the cap queue."""
        for a in queue.asks:
            ask_slot = AskSlot(a["runId"], key.decode(), a["priority"], a["at"])
            await self.worker.send_keyed(
                self.worker.settings.jobs_topic, CAPS_KEY_BYTES, encode_job_queue_message(ask_slot)
            )
        for run_id in queue.releases:
            await self.worker.send_keyed(
                self.worker.settings.jobs_topic,
                CAPS_KEY_BYTES,
                encode_job_queue_message(ReleaseSlot(run_id)),
            )
        queue.asks.clear()
        queue.releases.clear()

    async def _caps(self, command: JobQueueMessage | None) -> None:
        """The cap queue (scheduler.domain.caps): an ask or a release, then the grants that fit now, each
        to its job's queue; an ask that must wait is told why."""
        worker = self.worker
        raw = worker.job_queue.get(CAPS_KEY_BYTES)
        cq = CapQueue.from_json(decode_json(raw)) if raw is not None else CapQueue()
        if isinstance(command, AskSlot):
            ask(cq, command.run_id, command.queue, command.priority, command.at)
        elif isinstance(command, ReleaseSlot):
            release(cq, command.run_id)
        else:
            return
        for g in grant(cq, self.caps):
            await worker.send_keyed(
                worker.settings.jobs_topic, g.queue.encode(), encode_job_queue_message(SlotGranted(g.run_id))
            )
        if isinstance(command, AskSlot) and (why := why_waiting(cq, self.caps, command.run_id)):
            queued = SlotQueued(command.run_id, f"waits for a run slot: {why}")
            await worker.send_keyed(
                worker.settings.jobs_topic, command.queue.encode(), encode_job_queue_message(queued)
            )
        worker.counts.events["runCapAsks" if isinstance(command, AskSlot) else "runCapReleases"] += 1
        worker.job_queue[CAPS_KEY_BYTES] = encode_json(cq.to_json())

    async def _handle(self, event: EventT) -> None:
        worker = self.worker
        msg = event.message
        key = bytes(msg.key or b"")
        command = decode_job_queue_message(msg.value)
        if key == CAPS_KEY_BYTES:
            await self._caps(command)
            return
        raw = worker.job_queue.get(key)
        queue = ProgramQueue.from_json(decode_json(raw)) if raw is not None else ProgramQueue(key.decode())
        now = worker.clock()
        granted = None
        if isinstance(command, JobTriggered):
            add_job(queue, Job.from_json(command.job))
        elif isinstance(command, RunStatusChanged):
            if not await self._report(key, queue, command):
                return  # nothing changed (a renewal moves no deadline earlier): no write
        elif isinstance(command, CancelJobs):
            cancel(queue, command.schedule, command.below_version, command.reason, now, command.job_id)
            if command.job_id is None:  # (its backfills go with its waiting jobs)
                backfills.stop_schedules(queue, command.schedule, command.below_version, command.reason, now)
        elif isinstance(command, StartBackfill):
            backfills.start(queue, command.backfill)
        elif isinstance(command, CancelBackfill):
            backfills.stop(queue, command.backfill_id, command.reason, now)
        elif isinstance(command, AdoptQueue):
            adopt(queue, ProgramQueue.from_json(command.queue))
        elif isinstance(command, NoteOutcome):
            note_outcome(queue, command.outcome)
        elif isinstance(command, SlotGranted):
            granted = slot_granted(queue, command.run_id, now)
        elif isinstance(command, SlotQueued):
            slot_queued(queue, command.run_id, command.reason)
        if legacy_group(queue.program) is not None:
            await self._hand_over(msg.partition, key, queue, had_entry=raw is not None)
            return
        for run_id, why in self._lose_runs(msg.partition, key, queue, now):
            await self._lost(key, queue, run_id, why, now)
        launches = [] if granted is None else [granted]
        while True:  # (a backfill's jobs dropped by the check make room for its next ones)
            added = backfills.feed(queue, now)
            launches += check(queue, now, capped=self.caps.enabled)
            if not added:
                break
        for launch in launches:
            worker.counts.events["launches"] += 1
            await worker.send_keyed(launch.job.topic, key, launch_request(launch), partition=None)
            await self._announce(launch)
        for outcome, n in queue.tally.items():
            worker.counts.job_outcomes[outcome] += n
        for pause in queue.pauses:  # (pauseOnFailure: the bound of failed jobs in a row reached)
            await self._pause(pause["schedule"], pause["note"])
        queue.pauses.clear()
        for stop in queue.stops:  # (overlap CANCEL_OTHER / TERMINATE_OTHER: the runs in a new job's way)
            await self._stop(stop)
        queue.stops.clear()
        await self._to_caps(key, queue)
        for missed in missed_deadlines(queue, now):
            await raise_alert(
                worker,
                "DEADLINE_MISSED",
                missed.schedule,
                missed.program,
                missed.job_id,
                missed.due_by,
                missed.reason,
            )
        worker.job_queue[key] = encode_json(queue.to_json())
        worker.counts.job_queue_changed(msg.partition, key, queue)
        self.checker.schedule(msg.partition, key, self._next_check(msg.partition, key, queue))

    async def _hand_over(self, partition: int, key: bytes, queue: ProgramQueue, had_entry: bool) -> None:
        """A group queue shared by every tenant (from before group names were resolved within a tenant):
        hand each tenant its share, then delete it. A repeat (a crash in between) adopts nothing twice."""
        for target, share in split_legacy_group(queue).items():
            await self.worker.send_keyed(
                self.worker.settings.jobs_topic,
                target.encode(),
                encode_job_queue_message(AdoptQueue(share.to_json())),
            )
        if had_entry:
            del self.worker.job_queue[key]
        self.worker.counts.job_queue_changed(partition, key, ProgramQueue(queue.program))
        self.checker.schedule(partition, key, None)

    async def _announce(self, launch: Launch) -> None:
        """The run exists from its launch on: PENDING is its first user-facing status (seed 004)."""
        job = launch.job
        payload = {
            "programId": job.program,
            "runId": job.run_id,
            "status": "PENDING",
            "jobId": job.job_id,
            "schedule": job.schedule,
            "arguments": json.dumps(job.arguments),
            "triggeredAt": str(job.triggered_at),
            "attempt": str(job.attempt),
        }
        if job.time_limit_ms is not None:
            payload["timeLimitMs"] = str(job.time_limit_ms)
        value = encode(
            "Notification",
            {"timestamp": launch.launched_at, "eventType": "program-status", "payload": payload},
        )
        await self.worker.send_keyed(
            self.worker.settings.events_topic, f"program:{job.program}".encode(), value
        )

    # --- run reports: one judge for the run record and the queue's accounting -------------------------

    async def _report(self, key: bytes, queue: ProgramQueue, status: RunStatusChanged) -> bool:
        """A status report of one of the queue's runs; True if it changed the queue. In the program's own
        queue the run's record judges it (a group queue only hears transitions its program's queue
        accepted): an accepted transition is recorded, counted in the queue and published, once, on the
        program-status topic; a repeat from the run's holder renews its lease; the rest is refused."""
        own = (status.program or queue.program) == queue.program and not queue.program.startswith(
            GROUP_QUEUE_PREFIX
        )
        details = status.details
        launcher = details.get("launcher", "")
        lease_ms = int(details["leaseMs"]) if details.get("leaseMs", "").isdigit() else None
        records: list[RunRecord] = []
        record = None
        current: RunStatus | None
        if own:
            raw = self.worker.run_records.get(key)
            records = [RunRecord.from_json(r) for r in decode_json(raw)] if raw is not None else []
            record = next((r for r in records if r.run_id == status.run_id), None)
            if record is not None:
                current, holder = RunStatus(record.status), record.launcher
            else:  # (a run this queue launched is PENDING in it before its first report comes back)
                known = queue.active.get(status.run_id)
                current, holder = (RunStatus(known) if known else None), queue.holders.get(status.run_id, "")
            verdict, why = judge(
                current,
                RunStatus(status.status),
                ended=record is None and status.run_id in queue.ended,
                holder=holder,
                launcher=launcher,
            )
            if verdict is Verdict.REPEAT and record is None:
                verdict = Verdict.ACCEPTED  # its first report: the record begins
            if verdict is Verdict.ACCEPTED:
                apply_status(
                    queue, status.run_id, status.status, status.at, status.program, launcher, lease_ms
                )
        else:
            verdict, why = apply_status(
                queue, status.run_id, status.status, status.at, status.program, launcher, lease_ms
            )
        if verdict is Verdict.REFUSED:
            self.worker.counts.events["invalidTransitions"] += 1
            log.warning("run %s of %s: %s refused", status.run_id, queue.program, why)
            return False
        if launcher and launcher == queue.holders.get(status.run_id):
            self.renewed.setdefault(key, {})[status.run_id] = self.worker.clock()
        if verdict is Verdict.REPEAT:
            return False
        if own:
            self._record(key, records, record, status)
            await self._publish(
                status, retried=status.status == RunStatus.FAILED.value and _retried(queue, status)
            )
        return True

    def _record(
        self, key: bytes, records: list[RunRecord], record: RunRecord | None, status: RunStatusChanged
    ) -> None:
        """Keep the program's run records (newest last): live runs always, the last ended ones."""
        details = status.details
        launcher = details.get("launcher", "")
        if record is None:
            args = {}
            with contextlib.suppress(ValueError, TypeError):
                args = json.loads(details.get("arguments", "{}"))
            record = RunRecord(
                status.run_id,
                key.decode(),
                status.status,
                job_id=details.get("jobId", ""),
                schedule=details.get("schedule", ""),
                arguments=args,
                created_at=status.at,
                triggered_at=int(details["triggeredAt"])
                if details.get("triggeredAt", "").isdigit()
                else None,
                transitions=[[status.status, status.at]],
                launcher=launcher,
                attempt=int(details["attempt"]) if details.get("attempt", "").isdigit() else 1,
                time_limit_ms=int(details["timeLimitMs"])
                if details.get("timeLimitMs", "").isdigit()
                else None,
            )
            if RunStatus(status.status).terminal:
                record.ended_at = status.at
                record.error = details.get("error", "")
            records.append(record)
        else:
            apply_transition(record, status.status, status.at, details.get("error", ""), launcher)
        if details.get("logsUrl") and launcher == record.launcher:
            record.logs_url = details["logsUrl"]
        self.worker.counts.runs[status.status] += 1
        settings = self.worker.settings
        kept = keep_records(records, status.at, settings.run_history_max, settings.run_history_max_age_ms)
        self.worker.run_records[key] = encode_json([r.to_json() for r in kept])

    async def _publish(self, status: RunStatusChanged, retried: bool = False) -> None:
        """An accepted transition, on the program-status topic: what fires program-status triggers and
        feeds the run state of the program's concurrency groups (and the notifier: `retried` says a FAILED
        run's job is tried again, worker/notifier.py)."""
        program = status.program or ""
        payload = {
            "programId": program,
            "runId": status.run_id,
            "status": status.status,
            **{k: v for k, v in status.details.items() if k in RUN_DETAILS},
            **({"retried": "true"} if retried else {}),
        }
        value = encode(
            "Notification", {"timestamp": status.at, "eventType": "program-status", "payload": payload}
        )
        await self.worker.send_keyed(
            self.worker.settings.program_status_topic, f"program:{program}".encode(), value
        )

    # --- leases -------------------------------------------------------------------------------------

    async def _lost(self, key: bytes, queue: ProgramQueue, run_id: str, why: str, now: int) -> None:
        """A run lost its lease (or no launcher took it): FAILED, unless its launcher was lost after its
        claim and before it started the program — then it is launched again, for another launcher."""
        if queue.active.get(run_id) == RunStatus.PREPARING:
            raw = self.worker.run_records.get(key)
            records = [RunRecord.from_json(r) for r in decode_json(raw)] if raw is not None else []
            record = next((r for r in records if r.run_id == run_id), None)
            if record is not None and record.schedule:
                again = RunStatusChanged(
                    run_id, RunStatus.PENDING.value, now, queue.program, {"error": f"launched again: {why}"}
                )
                if await self._report(key, queue, again):
                    await self.worker.send_keyed(
                        self.worker.settings.launch_topic, key, relaunch_request(record, now), partition=None
                    )
                    return
        failed = RunStatusChanged(run_id, RunStatus.FAILED.value, now, queue.program, {"error": why})
        await self._report(key, queue, failed)

    def _lose_runs(self, partition: int, key: bytes, queue: ProgramQueue, now: int) -> list[tuple[str, str]]:
        """The queue's runs lost by now (a lease not renewed, a launch nobody took); reschedules its check."""
        lost = lost_runs(
            queue,
            self.renewed.get(key, {}),
            self.checker.taken_at.get(partition, now),
            now,
            self.worker.settings.run_pending_timeout_ms,
        )
        self.checker.schedule(partition, key, self._next_check(partition, key, queue))
        return lost

    def _next_check(self, partition: int, key: bytes, queue: ProgramQueue) -> int | None:
        """The queue's next check: a waiting job's, or the first instant one of its runs would be lost."""
        renewed = self.renewed.get(key, {})
        for run_id in [r for r in renewed if r not in queue.active]:
            del renewed[run_id]
        lease = next_lease_check(
            queue,
            renewed,
            self.checker.taken_at.get(partition, self.worker.clock()),
            self.worker.settings.run_pending_timeout_ms,
        )
        dues = [at for at in (queue.next_check, lease) if at is not None]
        return min(dues) if dues else None

    async def cancel_jobs(
        self, queue_key: str, schedule: ScheduleKey, below_version: int | None, reason: str
    ) -> None:
        await self.worker.send_keyed(
            self.worker.settings.jobs_topic,
            queue_key.encode(),
            encode_job_queue_message(CancelJobs(schedule.id, below_version, reason)),
        )
