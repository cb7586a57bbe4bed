"""Event routing: the reverse trigger index (event key -> triggers) and the agent that turns an event into
trigger-fired messages for the schedules that care, without scanning schedules.

- The commands ingest sends an index update per event key of a schedule's triggers (re-keyed by event
  key) whenever the schedule changes; the index agent applies it to the trigger-index table.
- The event agent reads an event on the partition of its event key, looks its triggers up, and sends one
  trigger-fired message per trigger, re-keyed by schedule. A program-status event is a report, not yet a
  fact: it goes to the job queue of its program, which judges it by the run state machine; an accepted
  transition comes back on the program-status topic, co-partitioned with the events, and fires the
  triggers there, and goes to the job queue of each concurrency group (of a tenant) whose schedules launch
  the program (run state for constraints).
- Events are never lost to timing: a schedule's index entry comes a hop after its command was applied, so
  an event may come first. Every event routed is kept a while in the recent-events table (per event key:
  SCHEDULER_EVENT_REPLAY_MS, at most SCHEDULER_EVENT_REPLAY_MAX); an index update that adds a trigger (a
  new schedule, an update, an enable) hands it the events recorded since its command was (`since`). Reading
  the index and keeping the event happen with no await between, as do applying an update and reading the
  recent events: each event reaches each trigger once, live or replayed. An event nobody watches is
  counted (`unwatched`), not dead-lettered.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scheduler.domain.events import (
    InvalidEvent,
    Notification,
    ProgramStatusEvent,
    event_key,
    parse,
    program_key,
)
from scheduler.domain.model import (
    ScheduleState,
    group_queue_key,
    trigger_leaves,
)
from scheduler.domain.tenancy import schedule_id_tenant
from scheduler.wire.codec import DecodeError, decode_notification, notification_to_avro
from scheduler.wire.messages import (
    GROUP_PREFIX,
    RUN_DETAILS,
    IndexedTrigger,
    IndexEntry,
    IndexUpdate,
    RecentEvent,
    RunStatusChanged,
    TriggerFired,
    decode_recent,
    encode_job_queue_message,
    encode_recent,
    recent_newest,
)
from scheduler.worker.hops import record_time_ms, safely

if TYPE_CHECKING:
    from faust.types import EventT

    from scheduler.worker.ports import RoutingPort

log = logging.getLogger(__name__)


def event_keys(state: ScheduleState | None) -> dict[str, list[str]]:
    """Event key -> paths of the schedule's triggers that listen to it."""
    out: dict[str, list[str]] = {}
    if state is None:
        return out
    s = state.schedule
    if s.program is not None and s.group is not None:
        # Group membership: the program's status events must also reach the group's job queue.
        out.setdefault(program_key(s.program), []).append(f"{GROUP_PREFIX}{s.group}")
    for path, leaf in trigger_leaves(s.trigger):
        for key in leaf.event_keys():
            out.setdefault(key, []).append(path)
    return out


def run_state_queues(program: str, entries: dict[str, IndexedTrigger]) -> list[str]:
    """The job queues a status event of `program` goes to: the program's, and the group queue of each
    tenant whose schedules put it in a concurrency group (`entries`: the program's trigger-index entries)."""
    groups = {
        group_queue_key(schedule_id_tenant(t.schedule), t.path.removeprefix(GROUP_PREFIX))
        for t in entries.values()
        if t.path.startswith(GROUP_PREFIX)
    }
    return [program, *sorted(groups)]


class EventRouting:
    def __init__(self, worker: RoutingPort) -> None:
        self.worker = worker
        self._swept: dict[int, int] = {}  # partition -> when its recent events were last swept

    async def schedule_changed(
        self, key: bytes, old: ScheduleState | None, new: ScheduleState | None, since: int = 0
    ) -> None:
        """Point the index at the new definition (every change bumps the version). `since`: when the change
        was asked for (its command's record timestamp)."""
        new_keys = event_keys(new)  # disabled schedules stay indexed; the trigger agent ignores them
        changed = set(event_keys(old)) | set(new_keys)
        if not changed:  # time triggers only: nothing indexed
            return
        schedule = (new or old).schedule.key.id  # type: ignore[union-attr]
        for ek in changed:
            update = IndexUpdate(
                ek,
                schedule,
                key,
                new.version if new is not None else 0,
                tuple(new_keys.get(ek, [])),
                since if new is not None else 0,
            )
            await self.worker.send_keyed(self.worker.settings.index_topic, ek.encode(), update.encode())

    # --- agents ---------------------------------------------------------------------------------

    async def handle_index_update(self, event: EventT) -> None:
        """An index update of the trigger-index topic (internal: a bad one should not happen)."""
        await safely(self.worker, event, "a trigger-index update", self._apply_index_update)

    async def _apply_index_update(self, event: EventT) -> None:
        update = IndexUpdate.decode(event.message.value)
        kb = update.event_key.encode()
        table = self.worker.trigger_index
        raw = table.get(kb)
        old = IndexEntry.decode(raw)
        entry = old.applied(update)
        if entry.triggers:
            table[kb] = entry.encode()
        elif raw is not None:
            del table[kb]
        added = old.added_by(update) if update.since else []
        if added:  # (no await since the index was written: an event routed from now on finds it)
            recent = [
                e for e in decode_recent(self.worker.recent_events.get(kb)) if e.recorded_at >= update.since
            ]
            for e in recent:
                notification = notification_from_json(e.notification)
                self.worker.counts.events["eventsReplayed"] += len(added)
                for t in added:
                    await self._send_fired(t, f"r{e.source}/{update.event_key}", e.position, notification)

    async def handle_event(self, event: EventT) -> None:
        """An event of the events topic."""
        await safely(self.worker, event, "an event", self._handle_event)

    async def _handle_event(self, event: EventT) -> None:
        msg = event.message
        worker = self.worker
        try:
            notification = decode_notification(msg.value)
            parsed = parse(notification)
        except (DecodeError, InvalidEvent) as exc:
            await worker.dead_letter(event, str(exc))
            return
        key = event_key(parsed)
        kb = key.encode()
        if worker.partition_of(kb) != msg.partition:
            # Keyed otherwise by its producer: move it to the partition of its event key.
            await worker.send_keyed(worker.settings.events_topic, kb, bytes(msg.value or b""))
            return
        if isinstance(parsed, ProgramStatusEvent):
            # First to its program's job queue, the judge of its runs: what it accepts comes back on the
            # program-status topic (handle_transition) to fire triggers, once.
            await worker.send_keyed(
                worker.settings.jobs_topic,
                parsed.program.id.encode(),
                encode_job_queue_message(status_changed(parsed, notification)),
            )
            return
        worker.counts.events["events"] += 1
        raw = worker.trigger_index.get(kb)
        triggers = {
            k: t for k, t in IndexEntry.decode(raw).triggers.items() if not t.path.startswith(GROUP_PREFIX)
        }
        self._keep(kb, f"e{msg.partition}", msg, notification)  # (with the read above: no await between)
        if not triggers:
            worker.counts.events["unwatched"] += 1  # nobody watches it (yet): kept, counted, not an error
            return
        await self._fire(triggers, msg, notification)

    def _keep(self, kb: bytes, source: str, msg: Any, notification: Notification) -> None:
        """Keep the event among its key's recent events (see the module's words)."""
        settings = self.worker.settings
        if settings.event_replay_max == 0 or settings.event_replay_ms == 0:
            return
        now = self.worker.clock()
        table = self.worker.recent_events
        self._sweep(msg.partition, now)
        recorded = record_time_ms(msg) or now
        horizon = now - settings.event_replay_ms
        kept = [e for e in decode_recent(table.get(kb)) if e.recorded_at >= horizon]
        if any(e.source == source and e.position == msg.offset for e in kept):
            return  # a record handled again (at-least-once, without transactions)
        kept.append(RecentEvent(source, msg.offset, recorded, notification_to_avro(notification)))
        table[kb] = encode_recent(kept[-settings.event_replay_max :])

    def _sweep(self, partition: int, now: int) -> None:
        """Once per SCHEDULER_EVENT_REPLAY_MS on each partition: drop the keys with no event that recent."""
        window = self.worker.settings.event_replay_ms
        if now - self._swept.get(partition, now - window) < window:
            return
        self._swept[partition] = now
        table = self.worker.recent_events
        for key, _ in list(self.worker.stored_items(table, partition)):
            value = table.get(key)  # (what this partition's transaction wrote, if it did)
            if value is not None and recent_newest(value) < now - window:
                del table[key]

    async def handle_transition(self, event: EventT) -> None:
        """An accepted run transition of the program-status topic (see job_queue.JobQueueAgent._report)."""
        await safely(self.worker, event, "a run transition", self._handle_transition)

    async def _handle_transition(self, event: EventT) -> None:
        msg = event.message
        worker = self.worker
        notification = decode_notification(msg.value)
        parsed = parse(notification)
        assert isinstance(parsed, ProgramStatusEvent)
        entries = IndexEntry.decode(worker.trigger_index.get(bytes(msg.key or b""))).triggers
        # run state for constraints: to the queue of each concurrency group whose schedules launch it
        status = encode_job_queue_message(status_changed(parsed, notification))
        for queue in run_state_queues(parsed.program.id, entries)[1:]:
            await worker.send_keyed(worker.settings.jobs_topic, queue.encode(), status)
        triggers = {k: t for k, t in entries.items() if not t.path.startswith(GROUP_PREFIX)}
        self._keep(bytes(msg.key or b""), f"s{msg.partition}", msg, notification)  # (no await since the read)
        await self._fire(triggers, msg, notification)

    async def _fire(self, triggers: dict[str, IndexedTrigger], msg: Any, notification: Notification) -> None:
        source = f"{'s' if msg.topic == self.worker.settings.program_status_topic else 'e'}{msg.partition}"
        for t in triggers.values():
            await self._send_fired(t, source, msg.offset, notification)

    async def _send_fired(
        self, t: IndexedTrigger, source: str, position: int, notification: Notification
    ) -> None:
        fired = TriggerFired(
            t.schedule_key,
            t.schedule,
            t.version,
            t.path,
            source=source,
            position=position,
            at=notification.timestamp,
            event=notification_to_avro(notification),
        )
        await self.worker.send_keyed(self.worker.settings.trigger_topic, t.schedule_key, fired.encode())


def status_changed(event: ProgramStatusEvent, notification: Notification) -> RunStatusChanged:
    """A status report of a run, for the job queue of its program (or of one of its groups)."""
    return RunStatusChanged(
        event.run_id,
        event.status,
        notification.timestamp,
        event.program.id,
        {k: notification.payload[k] for k in RUN_DETAILS if k in notification.payload},
    )


def notification_from_json(d: dict[str, Any]) -> Notification:
    return Notification(d["timestamp"], d["eventType"], dict(d["payload"]))
