"""The command path: one command of the commands topic applied to its schedule (conditions, the tenant's
quota, the program and calendars it names), what follows from it (the schedule's changelog write, its
history, the trigger index and progress, its pending jobs, the punctuator's heap), and light-scheduler's
TaskDefinitions translated into commands. The commands ingest (ingest.py) hands it each command of a fetch.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

from faust.types import EventT

from scheduler.domain.calendars import calendar_key
from scheduler.domain.commands import (
    RESUME_BY,
    CommandRejected,
    apply_command,
    check_conditions,
    manual_fires_yielding,
    resume_id,
    validate_command,
)
from scheduler.domain.delayed import EPOCH_HEADER, TARGET_KEY_HEADER, TARGET_TOPIC_HEADER
from scheduler.domain.model import (
    Action,
    InvalidSchedule,
    PauseRequest,
    ScheduleCommand,
    ScheduleKey,
    ScheduleState,
)
from scheduler.domain.tenancy import partition_share
from scheduler.kafka.partitioner import kafka_partition as partition_for
from scheduler.kafka.tables import partition_db, partition_items
from scheduler.wire.codec import (
    DecodeError,
    decode_command_with_schedule,
    decode_state,
    encode_command,
    encode_schedule,
    encode_state,
    key_bytes,
    key_from_bytes,
)
from scheduler.wire.command_headers import (
    BY_HEADER,
    command_by,
    command_conditions,
    command_headers,
    condition_headers,
)
from scheduler.wire.dead_letters import moved_headers
from scheduler.wire.fires import fire_bytes
from scheduler.wire.light import command_from_task_definition
from scheduler.wire.messages import HistoryEntry, add_history
from scheduler.worker.hops import record_time_ms, safely
from scheduler.worker.ports import CommandPort
from scheduler.worker.trigger_agent import job_arguments, new_job, submit_job
from scheduler.worker.vouched import Vouched

log = logging.getLogger(__name__)


class CommandHandler:
    """Applies commands (see the module's doc); counts each tenant's schedules per partition (the quota)."""

    def __init__(self, worker: CommandPort, vouched: Vouched) -> None:
        self.worker = worker
        self._vouched = vouched  # this worker's HTTP writes, validated: not decoded nor validated again
        self._tenant_counts: dict[int, Counter[str]] = {}  # partition -> schedules per tenant (lazy)
        # the schedules deleted in this millisecond that were created in it: an INSERT of one of them again
        # in it is created a millisecond later (a schedule's creation tells its due-time index entries from
        # those of the one deleted: due_index)
        self._deleted_new: tuple[int, set[bytes]] = (0, set())

    def forget_tenant_counts(self) -> None:
        """Counted again when next asked (a new assignment)."""
        self._tenant_counts.clear()

    async def handle_task_definition(self, event: EventT) -> None:
        """light-scheduler's TaskDefinition, translated into a command on our commands topic."""
        await safely(self.worker, event, "a light-scheduler task definition", self._translate_task_definition)

    async def _translate_task_definition(self, event: EventT) -> None:
        try:
            cmd = command_from_task_definition(event.message.value)
            validate_command(cmd)  # refused here, with the original bytes, not on the commands topic
        except (DecodeError, InvalidSchedule, CommandRejected) as exc:
            await self.worker.dead_letter(event, str(exc))
            return
        await self.worker.send_command(cmd, headers=command_headers(by="light-scheduler"))

    async def handle_command(self, event: EventT) -> None:
        """One command of the commands topic (see ingest.CommandIngest); its schedule write is collected
        for the changelog (take_writes, write_changelog)."""
        msg = event.message
        vouched = self._vouched.take(msg.value)
        try:
            cmd, schedule_avro = vouched or decode_command_with_schedule(msg.value)
        except DecodeError as exc:
            self.worker.counts.command("unknown", "dead_lettered")
            await self.worker.dead_letter(event, str(exc))
            return
        try:
            deadline, if_version = command_conditions(getattr(msg, "headers", None))
        except DecodeError as exc:
            self.worker.counts.command(cmd.action.value, "dead_lettered")
            await self.worker.dead_letter(event, str(exc))
            return
        kb = key_bytes(cmd.key)
        partition = partition_for(kb, self.worker.settings.partitions)
        if partition != msg.partition:
            # Keyed or partitioned otherwise by its producer: move it to the partition that owns the key,
            # with where it came from (a dead letter names the original) and its conditions.
            headers = moved_headers(msg) + condition_headers(msg.headers)
            await self.worker.send_command(cmd, value=msg.value, headers=headers)
            return
        raw = self.worker.store.read(partition, kb)  # this event's partition: no key search
        current = decode_state(raw) if raw is not None else None
        try:
            check_conditions(
                current,
                produced_at=getattr(msg, "timestamp", None),
                deadline_ms=deadline,
                if_version=if_version,
            )
            if (
                current is None
                and cmd.action is Action.INSERT
                and self.tenant_full(partition, cmd.key.tenant)
            ):
                raise CommandRejected(
                    f"tenant {cmd.key.tenant!r} holds its maximum of schedules "
                    f"({self.worker.settings.max_schedules_per_tenant}, SCHEDULER_MAX_SCHEDULES_PER_TENANT)"
                )
            by = command_by(getattr(msg, "headers", None)) or "topic"
            applied_at = self.worker.clock()
            new = apply_command(current, cmd, applied_at, by, validated=vouched is not None)
            if cmd.schedule is not None and cmd.schedule.program is not None:
                await self.worker.registry.start()
                if self.worker.registry.get(cmd.schedule.program.id) is None:
                    raise InvalidSchedule(
                        "program", f"unknown program {cmd.schedule.program.id} (register it first)"
                    )
            if cmd.schedule is not None and cmd.schedule.exclude_calendars:
                await self.worker.calendars.start()
                for name in cmd.schedule.exclude_calendars:
                    if self.worker.calendars.get(calendar_key(cmd.key.tenant, name)) is None:
                        raise InvalidSchedule(
                            "excludeCalendars",
                            f"unknown calendar {name} of {cmd.key.tenant} (create it first)",
                        )
            if new is not None and (why := await self.worker.topics.refusal(new.schedule.topic)):
                raise InvalidSchedule("topic", why)
        except (InvalidSchedule, CommandRejected) as exc:
            self.worker.counts.command(cmd.action.value, "rejected")
            await self.worker.dead_letter(event, f"{cmd.action.value} {cmd.key.id}: {exc}")
            return
        asked_at = record_time_ms(msg) or self.worker.clock()  # when it was asked for: its record's time
        if cmd.action in (Action.RUN, Action.BACKFILL):
            assert current is not None
            fired = await self._manual_fires(event, kb, current, cmd)
            self.worker.counts.command(cmd.action.value, "applied" if fired else "rejected")
            if fired:
                self._record_history(
                    partition, kb, HistoryEntry(current.version, asked_at, by, cmd.action.value)
                )
            return
        self.worker.counts.command(cmd.action.value, "applied")
        if new is current:
            return
        # an INSERT's or UPDATE's schedule as it came, when its bytes are known: encoded once
        known = schedule_avro if new is not None and new.schedule is cmd.schedule else None
        self._record_history(
            partition,
            kb,
            HistoryEntry(
                current.version if new is None else new.version,  # type: ignore[union-attr]
                asked_at,
                by,
                cmd.action.value,
                None if new is None else known or encode_schedule(new.schedule),
                note=None if cmd.pause is None else cmd.pause.note,
                until=None if cmd.pause is None else cmd.pause.until_ms,
            ),
        )
        paused = None if new is None else new.paused
        if cmd.action is Action.DISABLE and paused is not None and paused.until_ms is not None:
            await self._hold_resume(cmd.key, kb, paused.until_ms)
        counts = self._tenant_counts.get(partition)
        if counts is not None and (current is None) != (new is None):
            counts[cmd.key.tenant] += 1 if current is None else -1
        if new is not None and new.active_since == applied_at and (now := self.worker.clock()) > applied_at:
            # Active from when it is written, not from when the checks above began: they awaited, an instant
            # may have come and been fired meanwhile, and its first fire is the first instant after this.
            new = replace(new, active_since=now)
        deleted_at, deleted = self._deleted_new
        if new is not None and current is None and new.created_at == deleted_at and kb in deleted:
            new = replace(new, created_at=new.created_at + 1)  # (inserted, deleted, inserted again in 1 ms)
        if new is None:
            if current is not None and current.created_at == applied_at:
                at, keys = self._deleted_new
                if at != applied_at:
                    self._deleted_new = at, keys = applied_at, set()
                keys.add(kb)
            self.worker.store.write(partition, kb, None)
            self.worker.punctuator.remove(partition, kb, current)
        else:
            self.worker.store.write(partition, kb, encode_state(new, known))
            self.worker.punctuator.upsert(partition, kb, new, current)
        # an event recorded after the command reaches the triggers of the version it made
        await self._lifecycle(partition, kb, cmd, current, new, asked_at)
        if new is not None:
            self.worker.triggers.arm_elapsed(partition, kb, new)
        if self.worker.journal is not None:
            self.worker.journal.append(kb, bytes(msg.value or b""))

    async def _hold_resume(self, key: ScheduleKey, kb: bytes, until: int) -> None:
        """A pause with an end: its resume (an ENABLE carrying the pause) is held as a delayed message
        for the commands topic, delivered at `until` (with transactions, in this command's transaction). Its
        id is the schedule's, so a later pause's resume replaces it; one that outlived its pause (enabled
        by hand, paused again, deleted) is a no-op when delivered (commands.apply_command)."""
        w = self.worker
        resume = ScheduleCommand(key, Action.ENABLE, pause=PauseRequest(until_ms=until))
        headers = [
            (EPOCH_HEADER, str(until).encode()),
            (TARGET_TOPIC_HEADER, w.settings.commands_topic.encode()),
            (TARGET_KEY_HEADER, kb),
            (BY_HEADER, RESUME_BY.encode()),
        ]
        await w.produce(w.settings.delayed_topic, resume_id(key), encode_command(resume), headers=headers)

    async def _lifecycle(
        self,
        partition: int,
        kb: bytes,
        cmd: ScheduleCommand,
        old: ScheduleState | None,
        new: ScheduleState | None,
        asked_at: int,
    ) -> None:
        """Index, trigger progress and pending jobs follow the schedule (CDAP's update/delete semantics)."""
        await self.worker.routing.schedule_changed(kb, old, new, asked_at)
        if old is None:
            return
        if cmd.action in (Action.UPDATE, Action.DELETE, Action.DISABLE):
            self._drop_trigger_progress(partition, kb)
        program = old.schedule.program
        if program is None:
            return
        if cmd.action is Action.DELETE:
            await self.worker.jobs.cancel_jobs(old.schedule.queue_key, cmd.key, None, "schedule deleted")
        elif cmd.action is Action.DISABLE:
            await self.worker.jobs.cancel_jobs(old.schedule.queue_key, cmd.key, None, "schedule disabled")
        elif cmd.action is Action.UPDATE and new is not None:
            await self.worker.jobs.cancel_jobs(
                old.schedule.queue_key, cmd.key, new.version, "schedule updated"
            )

    def _drop_trigger_progress(self, partition: int, kb: bytes) -> None:
        """An update resets trigger progress; delete and disable drop it. With transactions in the command's
        (the trigger hop's writes of the key are staged the same way); without, through Faust's producer,
        as the trigger agent's writes of the same key, so the changelog keeps their order."""
        if self.worker.txns is not None:
            if self.worker.trigger_progress.get(kb) is not None:
                del self.worker.trigger_progress[kb]
            return
        progress = partition_db(self.worker.trigger_progress, partition)
        if progress.get(kb) is not None:
            del progress[kb]
            self.worker.trigger_progress.send_changelog(partition, kb, None)

    def _record_history(self, partition: int, kb: bytes, entry: HistoryEntry) -> None:
        """Append an applied command to the schedule's history: with transactions in the command's, without
        through Faust's producer (as _drop_trigger_progress)."""
        if self.worker.txns is not None:
            self.worker.schedule_history[kb] = add_history(self.worker.schedule_history.get(kb), entry)
            return
        db = partition_db(self.worker.schedule_history, partition)
        value = add_history(db.get(kb), entry)
        db[kb] = value
        self.worker.schedule_history.send_changelog(partition, kb, value)

    def tenant_full(self, partition: int, tenant: str) -> bool:
        """Whether the partition holds its share of the tenant's schedule limit (see tenancy.partition_share)."""
        counts = self._tenant_counts.get(partition)
        if counts is None:  # counted once per assignment, from the keys alone
            self.worker.store.write_local()
            counts = Counter(
                key_from_bytes(key).tenant for key, _ in partition_items(self.worker.schedules, partition)
            )
            self._tenant_counts[partition] = counts
        share = partition_share(
            self.worker.settings.max_schedules_per_tenant, self.worker.settings.partitions
        )
        return counts[tenant] >= share

    async def _manual_fires(
        self, event: EventT, kb: bytes, state: ScheduleState, cmd: ScheduleCommand
    ) -> bool:
        """RUN / BACKFILL: a FiredTask per instant (a job of the program for a program schedule); False when
        refused (dead-lettered: too many instants)."""
        s = state.schedule
        now = self.worker.clock()
        backfill = cmd.action is Action.BACKFILL
        try:
            instants = await manual_fires_yielding(state, cmd)
        except CommandRejected as exc:
            await self.worker.dead_letter(event, f"{cmd.action.value} {cmd.key.id}: {exc}")
            return False
        if backfill and s.exclude_calendars:  # (a RUN fires at its instant, whatever the calendars say)
            instants = [
                d
                for d in instants
                if self.worker.calendars.excluding(s.key.tenant, s.exclude_calendars, d) is None
            ]
        if s.program is None:
            encode_fired = fire_bytes(replace(s, data={**s.data, **cmd.arguments})).encode
            for due in instants:
                await self.worker.send_fire(s.topic, kb, encode_fired(due, now, 0, backfill))
        else:
            kind = cmd.action.value.lower()
            for due in instants:
                arguments = {
                    **job_arguments(state, []),
                    **cmd.arguments,  # the RUN's own, over the schedule's data
                    "trigger.eventType": kind,
                    "trigger.due": str(due),
                }
                await submit_job(
                    self.worker, state, new_job(state, f"{s.key.id}@{kind}.{due}", arguments, now, [])
                )
        self.worker.counts.events["manualFires"] += len(instants)
        log.info("%s %s: %d fire(s)", cmd.action.value, s.key.id, len(instants))
        return True

    def schedule_count(self, partition: int, tenants: Iterable[str] | None) -> int:
        """How many schedules the partition holds (of `tenants`): the tenant quota's counts."""
        self.tenant_full(partition, "")  # (counts them once per assignment)
        counts = self._tenant_counts[partition]
        return sum(counts.values()) if tenants is None else sum(counts[t] for t in tenants)
