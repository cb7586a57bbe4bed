"""The trigger agent: on the schedule's partition, applies trigger-fired messages (from events and from
the punctuator's time triggers) to the schedule's trigger progress, and creates a job on the job queue of
the schedule's program when the trigger tree is satisfied.

Replays are harmless: progress remembers, per source (an events partition, a time trigger), the last
position it applied, and a job's id comes from (schedule, version, job sequence) or (schedule, due time).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from scheduler.domain.basics import plural
from scheduler.domain.events import InvalidEvent, parse
from scheduler.domain.jobs import Job
from scheduler.domain.model import CompositeTrigger, ElapsedTrigger, ScheduleState, job_id, trigger_leaves
from scheduler.domain.triggers.progress import (
    SLA_PATH,
    TriggerProgress,
    alerted_periods,
    apply,
    elapsed_due,
    next_alert_due,
    reset,
    satisfied,
    silent_periods,
    watchdog_due,
)
from scheduler.wire.codec import decode_json, decode_state, encode_json, encode_state
from scheduler.wire.fires import fire_bytes
from scheduler.wire.messages import JobTriggered, NoteOutcome, TriggerFired, encode_job_queue_message
from scheduler.worker.event_routing import notification_from_json
from scheduler.worker.hops import safely
from scheduler.worker.job_queue import raise_alert

if TYPE_CHECKING:
    from faust.types import EventT

    from scheduler.worker.ports import Outbox, TriggerPort

log = logging.getLogger(__name__)


def progress_record(progress: TriggerProgress, generation: int) -> bytes:
    """A trigger progress as the table holds it, with the group generation of the assignment that wrote it:
    a restore never lets an earlier generation's write replace a later one's (kafka.tables.keep_newest_generation)."""
    return encode_json({**progress.to_json(), "generation": generation})


def progress_generation(raw: bytes) -> int | None:
    """The generation a trigger progress record was written in (None: written before it was recorded)."""
    if b'"generation"' not in raw:
        return None
    try:
        generation = decode_json(raw).get("generation")
    except ValueError:
        return None
    return generation if isinstance(generation, int) else None


def job_arguments(state: ScheduleState, events: list[dict[str, Any]]) -> dict[str, str]:
    """Runtime arguments: the schedule's properties, then what the triggering events said."""
    args = dict(state.schedule.data)
    if events:
        last = events[-1]
        args["trigger.eventType"] = str(last.get("eventType", "time"))
        for k, v in (last.get("payload") or {}).items():
            args[f"trigger.{k}"] = str(v)
        args["trigger.events"] = str(len(events))
    return args


def new_job(
    state: ScheduleState, jid: str, arguments: dict[str, str], now: int, events: list[dict[str, Any]]
) -> Job:
    """A job of the schedule's program, carrying its constraints, timeout, retry policy and time limit."""
    s = state.schedule
    assert s.program is not None
    return Job(
        job_id=jid,
        schedule=s.key.id,
        version=state.version,
        program=s.program.id,
        topic=s.topic,
        arguments=arguments,
        triggered_at=now,
        constraints=s.constraints,
        timeout=s.timeout,
        events=events,
        retry=s.retry,
        time_limit_ms=s.time_limit_ms,
        priority=s.priority,
        deadline_at=None if s.complete_within_ms is None else now + s.complete_within_ms,
        pause_on_failure=s.pause_on_failure,
        overlap=None if s.overlap is None else s.overlap.value,
    )


async def submit_job(worker: Outbox, state: ScheduleState, job: Job) -> None:
    """Put the job on its program's (or concurrency group's) queue."""
    await worker.send_keyed(
        worker.settings.jobs_topic,
        state.schedule.queue_key.encode(),
        encode_job_queue_message(JobTriggered(job.to_json())),
    )


def instant_kept(state: ScheduleState, fired: TriggerFired) -> bool:
    """A plain time schedule's instant fired as the version a command replaced since (the instant came
    while the update was applied, or it was sent ahead of it: punctuator.py) is kept: it makes its fire or
    job, by the definition the agent reads now, as the punctuator's fast path sends the replaced version's
    fire. An event, or a time leaf inside AND/OR, belongs to its version's progress: ignored."""
    return (
        fired.event is None
        and fired.due is not None
        and fired.path == "0"
        and fired.version < state.version
        and fired.due >= state.created_at  # (not one of a schedule deleted and inserted again since)
        and any(path == "0" for path, _ in state.time_leaves())
    )


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class TriggerAgent:
    def __init__(self, worker: TriggerPort) -> None:
        self.worker = worker

    def load_progress(self, key: bytes, state: ScheduleState) -> TriggerProgress:
        raw = self.worker.trigger_progress.get(key)
        progress = TriggerProgress.from_json(decode_json(raw)) if raw is not None else None
        if progress is None or progress.version != state.version:
            return TriggerProgress(state.version)  # an update (or enable) starts from zero
        return progress

    async def handle(self, event: EventT) -> None:
        """A trigger-fired message (from the event agent or the punctuator)."""
        await safely(self.worker, event, "a trigger", self._handle)

    async def _handle(self, event: EventT) -> None:
        worker = self.worker
        fired = TriggerFired.decode(event.message.value)
        key = fired.schedule_key
        raw = worker.schedule_bytes(event.message.partition, key)
        state = decode_state(raw) if raw is not None else None
        if state is None or not state.firing:
            worker.counts.events["triggersIgnored"] += 1  # deleted, disabled or made its maxFires since
            return
        parsed = None
        if fired.event is not None:
            notification = notification_from_json(fired.event)
            try:
                parsed = parse(notification)
            except InvalidEvent:
                return
        if fired.path == SLA_PATH:
            if state.version == fired.version and fired.due is not None:
                await self._watchdog(event.message.partition, key, state, fired.due)
            return
        if state.version != fired.version and not instant_kept(state, fired):
            # routed by another version: one that is gone, or the one before this (the index had not caught
            # up with it yet: the index update of this version hands it the event again, event_routing)
            worker.counts.events["triggersIgnored"] += 1
            return
        if state.schedule.program is None:
            await self._plain_fire(event.message.partition, key, state, fired)
            return
        now = worker.clock()
        if fired.event is not None and not state.schedule.within_bounds(now):
            worker.counts.events["triggersIgnored"] += 1  # before its notBefore or after its notAfter
            return
        progress = self.load_progress(key, state)
        if progress.seen(fired.source, fired.position):
            return
        progress.mark(fired.source, fired.position)
        if fired.event is not None:
            summary = fired.event
        else:
            summary = {"eventType": "time", "payload": {"due": str(fired.due)}}
        apply(
            state.schedule.trigger,
            progress,
            fired.path,
            parsed,
            summary,
            now=now,
            due=fired.due,
            active_since=state.active_since,
        )
        if satisfied(state.schedule.trigger, progress):
            s = state.schedule
            assert s.program is not None
            if parsed is None and fired.path == "0":
                assert fired.due is not None
                jid = job_id(s.key, fired.due)  # a plain time schedule: one job per due instant
            else:
                jid = f"{s.key.id}@v{state.version}.{progress.seq + 1}"  # (URL-safe: no "#")
            job = new_job(state, jid, job_arguments(state, progress.events), now, list(progress.events))
            reset(progress, now, None if parsed is not None else fired.due)
            await submit_job(worker, state, job)
            if s.max_fires is not None:
                self._count_fire(event.message.partition, key)
        worker.trigger_progress[key] = progress_record(progress, worker.generation())
        self.arm_elapsed(event.message.partition, key, state, progress)

    async def _plain_fire(
        self, partition: int, key: bytes, state: ScheduleState, fired: TriggerFired
    ) -> None:
        """A time fire of a schedule without a program: only a limited one's (maxFires) comes this way, so
        that it is counted (with transactions in the fire's transaction). Its FiredTask, as the punctuator's
        fast path would have sent it, with the punctuator's firedAt."""
        worker = self.worker
        progress = self.load_progress(key, state)
        if fired.due is None or progress.seen(fired.source, fired.position):
            return
        progress.mark(fired.source, fired.position)
        encode = fire_bytes(state.schedule, key).encode
        await worker.send_fire(
            state.schedule.topic, key, encode(fired.due, fired.at, fired.missed, fired.catch_up)
        )
        self._count_fire(partition, key)
        worker.trigger_progress[key] = progress_record(progress, worker.generation())

    def _count_fire(self, partition: int, key: bytes) -> None:
        """One more fire toward the schedule's maxFires, in its state (read again: a command may have
        written it while the fire was sent). The one that makes it finished takes it out of the punctuator."""
        raw = self.worker.schedule_bytes(partition, key)
        state = decode_state(raw) if raw is not None else None
        if state is None or state.schedule.max_fires is None:
            return
        counted = replace(state, fires=state.fires + 1)
        self.worker.write_schedule(partition, key, encode_state(counted))
        if counted.exhausted:
            log.info("%s made its %d fires: finished", counted.schedule.key.id, counted.fires)
            self.worker.punctuator.upsert(partition, key, counted)

    async def _watchdog(self, partition: int, key: bytes, state: ScheduleState, due: int) -> None:
        """The schedule's "fire at least every" timer came due: an alert if it made no job since, and the
        timer armed again, backing off: alerts at the 1st, 2nd, 4th … 64th late period, then every 64th
        (after a restart one may come twice)."""
        every = state.schedule.fire_at_least_every_ms
        if every is None:
            return
        progress = self.load_progress(key, state)
        periods = silent_periods(progress, state.active_since, every, due)
        alerted = alerted_periods(periods)
        if alerted and alerted[-1] == periods:  # (a late period of the back-off)
            since = progress.last_job_at
            reason = (
                f"no job for {periods * every / 1000:g} s ({plural(periods, 'period')} of fireAtLeastEveryMs "
                f"{every / 1000:g} s; alert {len(alerted)} of this silence, the next after "
                f"{(next_alert_due(progress, state.active_since, every, due) - due) / 1000:g} s): "
                + (f"the last at {_iso(since)}" if since else "none since it became active")
            )
            s = state.schedule
            assert s.program is not None  # (an SLA needs a program)
            await raise_alert(self.worker, "NOT_FIRED", s.key.id, s.program.id, None, due, reason)
            # kept among its queue's recent outcomes: `jobs why` and the admin page show it
            outcome = {
                "jobId": "",
                "schedule": s.key.id,
                "outcome": "NOT_FIRED",
                "reason": reason,
                "at": due,
            }
            await self.worker.send_keyed(
                self.worker.settings.jobs_topic,
                s.queue_key.encode(),
                encode_job_queue_message(NoteOutcome(outcome)),
            )
        self.worker.punctuator.arm(
            partition, key, SLA_PATH, next_alert_due(progress, state.active_since, every, due)
        )

    def arm_elapsed(
        self, partition: int, key: bytes, state: ScheduleState, progress: TriggerProgress | None = None
    ) -> None:
        """Tell the punctuator when each elapsed trigger of the schedule comes due now, and its "fire at
        least every" watchdog."""
        every = state.schedule.fire_at_least_every_ms
        if every is not None and state.firing:
            if progress is None:
                progress = self.load_progress(key, state)
            late_at = watchdog_due(progress, state.active_since, every, self.worker.clock())
            self.worker.punctuator.arm(partition, key, SLA_PATH, late_at)
        if not isinstance(state.schedule.trigger, ElapsedTrigger | CompositeTrigger):
            return  # (the common case, without the walk)
        leaves = [(p, t) for p, t in trigger_leaves(state.schedule.trigger) if isinstance(t, ElapsedTrigger)]
        if not leaves or not state.firing:
            return
        if progress is None:
            progress = self.load_progress(key, state)
        for path, leaf in leaves:
            lp = progress.leaves.get(path)
            due = elapsed_due(leaf, progress, path, state.active_since)
            if due is not None and not (lp is not None and lp.fired):
                self.worker.punctuator.arm(partition, key, path, due)
