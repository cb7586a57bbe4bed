"""The job queue agent and the constraint checker timer, on the partition of the program.

The agent applies, in order, everything that concerns one program: jobs whose trigger was satisfied,
status events of its runs, cancellations (schedule updated, disabled, deleted) and timer checks; after
each it runs the pure check (scheduler.domain.jobs) and produces a launch request for every job it launches.

The checker is a next-check heap per owned partition (the earliest instant a waiting job may pass: a
delay ending, a window opening, a timeout): when one comes due it sends a check to the agent. Like the
punctuator's heaps it is rebuilt from the table on assignment and dropped on revocation.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import json
import logging
from typing import TYPE_CHECKING

from scheduler.domain.jobs import (
    Job,
    Launch,
    ProgramQueue,
    add_job,
    adopt,
    apply_status,
    cancel,
    check,
    legacy_group,
    split_legacy_group,
)
from scheduler.domain.model import ProgramId, ScheduleKey
from scheduler.domain.runs import MAX_RUNS_KEPT, RunRecord, RunStatus, apply_transition
from scheduler.wire.codec import decode_json, encode, encode_json
from scheduler.wire.messages import (
    AdoptQueue,
    CancelJobs,
    CheckConstraints,
    JobTriggered,
    RunStatusChanged,
    decode_job_queue_message,
    encode_job_queue_message,
)
from scheduler.worker.hops import safely

if TYPE_CHECKING:
    from faust.types import EventT

    from scheduler.worker.ports import JobQueuePort

log = logging.getLogger(__name__)


def launch_request(launch: Launch) -> bytes:
    job = launch.job
    tenant, _, name = job.schedule.partition("/")
    program = ProgramId.parse(job.program)
    return encode(
        "LaunchRequest",
        {
            "jobId": job.job_id,
            "schedule": {"tenant": tenant, "name": name},
            "program": {
                "namespace": program.namespace,
                "application": program.application,
                "type": program.type,
                "name": program.name,
            },
            "arguments": job.arguments,
            "triggeredAt": job.triggered_at,
            "launchedAt": launch.launched_at,
            "forced": launch.forced,
            "events": [
                {
                    "timestamp": e.get("timestamp", 0),
                    "eventType": e["eventType"],
                    "payload": e.get("payload") or {},
                }
                for e in job.events
            ],
        },
    )


class CheckTimer:
    """Next-check heap per owned partition; sends a check for a program when its instant comes."""

    def __init__(self, worker: JobQueuePort) -> None:
        self.worker = worker
        self._heaps: dict[int, list[tuple[int, int, bytes]]] = {}
        self._live: dict[int, dict[bytes, int]] = {}
        self._seq = itertools.count()
        self._wakeup = asyncio.Event()

    def assign(self, partition: int, queues: list[tuple[bytes, ProgramQueue]]) -> None:
        self._heaps[partition], self._live[partition] = [], {}
        for key, queue in queues:
            # a shared group queue is checked at once: the agent hands it over to its tenants' queues
            self.schedule(partition, key, 0 if legacy_group(queue.program) is not None else queue.next_check)
        self.worker.counts.jobs_assigned(partition, queues)

    def revoke(self, partition: int) -> None:
        self._heaps.pop(partition, None)
        self._live.pop(partition, None)
        self.worker.counts.jobs_revoked(partition)

    def schedule(self, partition: int, key: bytes, at: int | None) -> None:
        live = self._live.get(partition)
        if live is None:
            return
        if at is None:
            live.pop(key, None)
            return
        seq = next(self._seq)
        live[key] = seq
        heapq.heappush(self._heaps[partition], (at, seq, key))
        self._wakeup.set()

    async def run(self, idle_s: float = 1.0) -> None:
        while True:
            now = self.worker.clock()
            earliest: int | None = None
            for partition, heap in list(self._heaps.items()):
                live = self._live[partition]
                while heap and heap[0][0] <= now:
                    _, seq, key = heapq.heappop(heap)
                    if live.get(key) == seq:
                        del live[key]
                        try:
                            await self.worker.send_keyed(
                                self.worker.settings.jobs_topic,
                                key,
                                encode_job_queue_message(CheckConstraints()),
                                partition,
                            )
                        except Exception:
                            log.exception("could not send a constraint check")
                            live[key] = seq
                            heapq.heappush(heap, (now + 1000, seq, key))
                if heap:
                    earliest = heap[0][0] if earliest is None else min(earliest, heap[0][0])
            self._wakeup.clear()
            timeout = idle_s if earliest is None else max(0.0, min(idle_s, (earliest - now) / 1000))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)


class JobQueueAgent:
    def __init__(self, worker: JobQueuePort) -> None:
        self.worker = worker
        self.checker = CheckTimer(worker)

    def local_queues(self, partition: int) -> list[tuple[bytes, ProgramQueue]]:
        from scheduler.kafka.tables import partition_items

        return [
            (k, ProgramQueue.from_json(decode_json(v)))
            for k, v in partition_items(self.worker.job_queue, partition)
        ]

    async def handle(self, event: EventT) -> None:
        """A job-queue message: a job, a run's status, a cancellation, a check."""
        await safely(self.worker, event, "a job-queue message", self._handle)

    async def _handle(self, event: EventT) -> None:
        worker = self.worker
        msg = event.message
        key = bytes(msg.key or b"")
        command = decode_job_queue_message(msg.value)
        raw = worker.job_queue.get(key)
        queue = ProgramQueue.from_json(decode_json(raw)) if raw is not None else ProgramQueue(key.decode())
        now = worker.clock()
        if isinstance(command, JobTriggered):
            add_job(queue, Job.from_json(command.job))
        elif isinstance(command, RunStatusChanged):
            apply_status(queue, command.run_id, command.status, command.at, command.program)
            if (command.program or queue.program) == queue.program:
                self._record_run(key, command)
        elif isinstance(command, CancelJobs):
            cancel(queue, command.schedule, command.below_version, command.reason, now)
        elif isinstance(command, AdoptQueue):
            adopt(queue, ProgramQueue.from_json(command.queue))
        if legacy_group(queue.program) is not None:
            await self._hand_over(msg.partition, key, queue, had_entry=raw is not None)
            return
        launches = check(queue, now)
        for launch in launches:
            worker.counts.events["launches"] += 1
            await worker.send_keyed(launch.job.topic, key, launch_request(launch), partition=None)
            await self._announce(launch)
        worker.job_queue[key] = encode_json(queue.to_json())
        worker.counts.job_queue_changed(msg.partition, key, queue)
        self.checker.schedule(msg.partition, key, queue.next_check)

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
            "runId": job.job_id,
            "status": "PENDING",
            "jobId": job.job_id,
            "schedule": job.schedule,
            "arguments": json.dumps(job.arguments),
            "triggeredAt": str(job.triggered_at),
        }
        value = encode(
            "Notification",
            {"timestamp": launch.launched_at, "eventType": "program-status", "payload": payload},
        )
        await self.worker.send_keyed(
            self.worker.settings.events_topic, f"program:{job.program}".encode(), value
        )

    def _record_run(self, key: bytes, status: RunStatusChanged) -> None:
        """Keep the program's run records (newest last) from its status events; invalid transitions are refused."""
        table = self.worker.run_records
        raw = table.get(key)
        records = [RunRecord(**r) for r in decode_json(raw)] if raw is not None else []
        record = next((r for r in records if r.run_id == status.run_id), None)
        details = status.details
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
            )
            if RunStatus(status.status).terminal:
                record.ended_at = status.at
                record.error = details.get("error", "")
            records.append(record)
            del records[:-MAX_RUNS_KEPT]
        elif not apply_transition(record, status.status, status.at, details.get("error", "")):
            if record.status != status.status:
                self.worker.counts.events["invalidTransitions"] += 1
                log.warning("run %s: %s -> %s refused", record.run_id, record.status, status.status)
            return
        self.worker.counts.runs[status.status] += 1
        table[key] = encode_json([r.to_json() for r in records])

    async def cancel_jobs(
        self, queue_key: str, schedule: ScheduleKey, below_version: int | None, reason: str
    ) -> None:
        await self.worker.send_keyed(
            self.worker.settings.jobs_topic,
            queue_key.encode(),
            encode_job_queue_message(CancelJobs(schedule.id, below_version, reason)),
        )
