"""The event path's agents through their ports (scheduler.worker.ports), with no broker: a fake worker holds the
tables as dicts and records what is sent. The integration tests run the same path on a real broker."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from scheduler.domain.events import Notification
from scheduler.domain.model import ProgramId, Schedule, ScheduleKey, ScheduleState
from scheduler.domain.triggers.kinds import PartitionTrigger, ProgramRunsTrigger
from scheduler.kafka.config import Settings
from scheduler.wire.codec import encode, encode_state, key_bytes, notification_to_avro
from scheduler.wire.messages import (
    IndexUpdate,
    JobTriggered,
    TriggerFired,
    decode_job_queue_message,
    decode_recent,
)
from scheduler.worker.counters import WorkerCounts
from scheduler.worker.event_routing import EventRouting
from scheduler.worker.hops import agent
from scheduler.worker.job_queue import JobQueueAgent
from scheduler.worker.ports import RoutingPort, TriggerPort
from scheduler.worker.trigger_agent import TriggerAgent

pytestmark = pytest.mark.unit

A = "acme/pipes/workflow/A"
B = "acme/pipes/workflow/B"


@dataclass
class FakeWorker:
    """Every member the routing and trigger ports name, in memory; one partition owns every key."""

    settings: Settings
    counts: WorkerCounts = field(default_factory=WorkerCounts)
    sent: list[tuple[str, bytes, bytes]] = field(default_factory=list)
    dead: list[str] = field(default_factory=list)
    trigger_index: dict[bytes, bytes] = field(default_factory=dict)
    trigger_progress: dict[bytes, bytes] = field(default_factory=dict)
    schedules: dict[bytes, bytes] = field(default_factory=dict)
    job_queue: dict[bytes, bytes] = field(default_factory=dict)
    run_records: dict[bytes, bytes] = field(default_factory=dict)
    recent_events: dict[bytes, bytes] = field(default_factory=dict)
    armed: list[tuple[bytes, str, int]] = field(default_factory=list)
    upserted: list[ScheduleState] = field(default_factory=list)
    now: int = 1_000

    def clock(self) -> int:
        return self.now

    def partition_of(self, key: bytes) -> int:
        return 0

    async def send_keyed(
        self, topic: str, key: bytes, value: bytes, partition: int | None | str = "auto"
    ) -> None:
        self.sent.append((topic, key, value))

    async def dead_letter(self, event: Any, reason: str) -> None:
        self.dead.append(reason)

    def generation(self) -> int:
        return 1

    def stored_items(self, table: dict[bytes, bytes], partition: int) -> Any:
        return iter(list(table.items()))

    def schedule_bytes(self, partition: int, key: bytes) -> bytes | None:
        return self.schedules.get(key)

    @property
    def punctuator(self) -> FakeWorker:
        return self

    def arm(self, partition: int, key: bytes, path: str, due: int) -> None:
        self.armed.append((key, path, due))

    def upsert(self, partition: int, key: bytes, state: ScheduleState) -> None:
        self.upserted.append(state)

    def write_schedule(self, partition: int, key: bytes, value: bytes | None) -> None:
        if value is None:
            self.schedules.pop(key, None)
        else:
            self.schedules[key] = value

    async def send_fire(self, topic: str, key: bytes, value: bytes) -> Any:
        self.sent.append((topic, key, value))

    def take(self, topic: str) -> list[tuple[bytes, bytes]]:
        out = [(k, v) for t, k, v in self.sent if t == topic]
        self.sent = [s for s in self.sent if s[0] != topic]
        return out


async def _go_on() -> bool:
    return True  # (never frozen: see test_freeze_guard.py)


def event(value: bytes, offset: int = 0, key: bytes = b"", topic: str = "", timestamp: int = 0) -> Any:
    return SimpleNamespace(
        message=SimpleNamespace(
            value=value, partition=0, offset=offset, key=key, topic=topic, timestamp=timestamp
        )
    )


def status_event(run_id: str, status: str) -> bytes:
    n = Notification(1_000, "program-status", {"programId": A, "runId": run_id, "status": status})
    return encode("Notification", notification_to_avro(n))


@pytest.fixture
def worker(tmp_path: Path) -> FakeWorker:
    return FakeWorker(Settings(app_id="ports", data_dir=tmp_path))


def runs_state(n: int) -> ScheduleState:
    schedule = Schedule(
        ScheduleKey("acme", "after-n"),
        ProgramRunsTrigger(ProgramId.parse(A), n),
        "launches",
        enabled=True,
        program=ProgramId.parse(B),
    )
    schedule.validate()
    return ScheduleState(schedule, 1, 1, 1)


async def test_a_schedule_is_indexed_and_an_event_reaches_it_then_its_job_is_queued(
    worker: FakeWorker,
) -> None:
    routing_port: RoutingPort = worker
    trigger_port: TriggerPort = worker
    routing, triggers = EventRouting(routing_port), TriggerAgent(trigger_port)
    state = runs_state(2)
    kb = key_bytes(state.schedule.key)
    worker.schedules[kb] = encode_state(state)

    await routing.schedule_changed(kb, None, state)
    [(index_key, update)] = worker.take(worker.settings.index_topic)
    assert index_key == f"program:{A}".encode() and IndexUpdate.decode(update).paths == ("0",)
    await agent(routing.handle_index_update, _go_on)(_stream([event(update)]))  # as the Faust agent does
    assert worker.trigger_index  # the index now points the program's events at the schedule

    runs = JobQueueAgent(worker)
    status_topic = worker.settings.program_status_topic
    for offset, (run, status) in enumerate([("r1", "COMPLETED"), ("r1", "COMPLETED"), ("r2", "COMPLETED")]):
        await routing._handle_event(event(status_event(run, status), offset))
        [(queue_key, report)] = worker.take(worker.settings.jobs_topic)  # to its program's queue, the judge
        assert queue_key == A.encode()
        await runs._handle(event(report, offset, key=queue_key))
        accepted = worker.take(status_topic)
        assert len(accepted) == (0 if offset == 1 else 1), (run, offset)  # a replay is no transition
        for transition_key, transition in accepted:
            await routing._handle_transition(
                event(transition, offset, key=transition_key, topic=status_topic)
            )
        fired = worker.take(worker.settings.trigger_topic)
        assert len(fired) == len(accepted) and all(key == kb for key, _ in fired)
        for _, f in fired:
            await triggers._handle(event(f, offset))
        jobs = [decode_job_queue_message(v) for _, v in worker.take(worker.settings.jobs_topic)]
        jobs = [j for j in jobs if isinstance(j, JobTriggered)]
        assert len(jobs) == (1 if run == "r2" else 0), (run, offset)
    assert jobs[0].job["job_id"] == "acme/after-n@v1.1"
    assert worker.dead == []


def _older_version_fired(kb: bytes, at: int) -> TriggerFired:
    n = Notification(at, "program-status", {"programId": A, "runId": "r1", "status": "COMPLETED"})
    return TriggerFired(
        kb, "acme/after-n", 1, "0", source="e0", position=0, at=at, event=notification_to_avro(n)
    )


async def test_an_event_for_an_older_version_of_the_schedule_is_ignored(worker: FakeWorker) -> None:
    """It happened before the current version became active (updated at 2,000): it belonged to the old one."""
    triggers = TriggerAgent(worker)
    state = runs_state(1)
    kb = key_bytes(state.schedule.key)
    worker.schedules[kb] = encode_state(ScheduleState(state.schedule, 1, 2_000, 2_000, version=2))
    await triggers._handle(event(_older_version_fired(kb, 1_000).encode()))
    assert worker.take(worker.settings.jobs_topic) == [] and worker.counts.events["triggersIgnored"] == 1


async def test_an_event_routed_before_the_index_caught_up_is_ignored_by_the_trigger_agent(
    worker: FakeWorker,
) -> None:
    """Enabled (or updated) at 2,000, the event came at 3,000 but the index still said version 1: the
    trigger agent leaves it to the index update of version 2, which hands it the event again (below)."""
    triggers = TriggerAgent(worker)
    state = runs_state(1)
    kb = key_bytes(state.schedule.key)
    worker.schedules[kb] = encode_state(ScheduleState(state.schedule, 1, 2_000, 2_000, version=2))
    await triggers._handle(event(_older_version_fired(kb, 3_000).encode()))
    assert worker.take(worker.settings.jobs_topic) == [] and worker.counts.events["triggersIgnored"] == 1


def feed_state(version: int = 1) -> ScheduleState:
    schedule = Schedule(
        ScheduleKey("acme", "feed"),
        PartitionTrigger("acme.feed", 1),
        "launches",
        enabled=True,
        program=ProgramId.parse(B),
    )
    schedule.validate()
    return ScheduleState(schedule, 1, 1, 1, version=version)


def partition_event(key: str, at: int) -> bytes:
    n = Notification(at, "partition", {"datasetId": "acme.feed", "partitionKeys": f'["{key}"]'})
    return encode("Notification", notification_to_avro(n))


async def _index(routing: EventRouting, worker: FakeWorker, updates: list[tuple[bytes, bytes]]) -> None:
    for _, update in updates:
        await routing._apply_index_update(event(update))


async def test_an_event_that_comes_before_the_index_entry_of_its_schedule_reaches_it_once(
    worker: FakeWorker,
) -> None:
    """The schedule was asked for at 5,000 (its command's record time); an event recorded at 6,000 comes
    before its index entry: counted as unwatched, kept, and handed to the trigger when the entry comes. One
    recorded at 4,000 (before the schedule was asked for) is not; one after the entry goes live, once."""
    routing, triggers = EventRouting(worker), TriggerAgent(worker)
    state = feed_state()
    kb = key_bytes(state.schedule.key)
    worker.schedules[kb] = encode_state(state)
    worker.now = 7_000
    await routing._handle_event(event(partition_event("old", 4_000), 0, timestamp=4_000))
    await routing._handle_event(event(partition_event("new", 6_000), 1, timestamp=6_000))
    assert worker.take(worker.settings.trigger_topic) == [] and worker.dead == []
    assert worker.counts.events["unwatched"] == 2 and len(worker.recent_events) == 1

    await routing.schedule_changed(kb, None, state, since=5_000)
    await _index(routing, worker, worker.take(worker.settings.index_topic))
    replayed = [TriggerFired.decode(v) for _, v in worker.take(worker.settings.trigger_topic)]
    assert [(f.source, f.position) for f in replayed] == [("re0/partition:acme.feed", 1)]

    await routing._handle_event(event(partition_event("live", 8_000), 2, timestamp=8_000))
    live = [TriggerFired.decode(v) for _, v in worker.take(worker.settings.trigger_topic)]
    assert [(f.source, f.position) for f in live] == [("e0", 2)]
    for f in replayed + live + replayed:  # (a replay of the replay: harmless)
        await triggers._handle(event(f.encode()))
    jobs = [decode_job_queue_message(v) for _, v in worker.take(worker.settings.jobs_topic)]
    assert len([j for j in jobs if isinstance(j, JobTriggered)]) == 2


async def test_an_update_hands_its_new_version_the_events_routed_with_the_old_one(worker: FakeWorker) -> None:
    routing, triggers = EventRouting(worker), TriggerAgent(worker)
    v1 = feed_state()
    kb = key_bytes(v1.schedule.key)
    await routing.schedule_changed(kb, None, v1, since=1)
    await _index(routing, worker, worker.take(worker.settings.index_topic))
    worker.take(worker.settings.trigger_topic)
    v2 = feed_state(version=2)
    worker.schedules[kb] = encode_state(v2)  # the update is in the table, its index update not yet applied
    worker.now = 3_000
    await routing._handle_event(event(partition_event("a", 2_500), 7, timestamp=2_500))
    [(_, routed)] = worker.take(worker.settings.trigger_topic)
    assert TriggerFired.decode(routed).version == 1
    await triggers._handle(event(routed))  # ignored: version 1 is gone
    await routing.schedule_changed(kb, v1, v2, since=2_000)
    await _index(routing, worker, worker.take(worker.settings.index_topic))
    [(_, replayed)] = worker.take(worker.settings.trigger_topic)
    assert TriggerFired.decode(replayed).version == 2
    await triggers._handle(event(replayed))
    jobs = [decode_job_queue_message(v) for _, v in worker.take(worker.settings.jobs_topic)]
    assert [j.job["job_id"] for j in jobs if isinstance(j, JobTriggered)] == ["acme/feed@v2.1"]


async def test_recent_events_are_bounded_per_key_and_swept_once_they_are_old(worker: FakeWorker) -> None:
    worker.settings = Settings(app_id="ports", event_replay_max=3, event_replay_ms=10_000)
    routing = EventRouting(worker)
    worker.now = 20_000
    for i in range(5):
        await routing._handle_event(event(partition_event(str(i), 20_000), i, timestamp=20_000))
    [value] = worker.recent_events.values()
    assert [e.position for e in decode_recent(value)] == [2, 3, 4]
    await routing._handle_event(event(partition_event("4", 20_000), 4, timestamp=20_000))  # again: kept once
    assert [e.position for e in decode_recent(next(iter(worker.recent_events.values())))] == [2, 3, 4]
    worker.now = 40_001  # a window later: the next event sweeps the old key away
    other = Notification(1, "partition", {"datasetId": "acme.other", "partitionKeys": '["x"]'})
    await routing._handle_event(
        event(encode("Notification", notification_to_avro(other)), 9, timestamp=40_001)
    )
    assert list(worker.recent_events) == [b"partition:acme.other"]


async def test_an_event_routed_by_an_older_definition_that_no_longer_listens_to_it_is_ignored(
    worker: FakeWorker,
) -> None:
    triggers = TriggerAgent(worker)
    state = runs_state(1)
    other = replace(state.schedule, trigger=ProgramRunsTrigger(ProgramId.parse("acme/pipes/workflow/C"), 1))
    kb = key_bytes(state.schedule.key)
    worker.schedules[kb] = encode_state(ScheduleState(other, 1, 2_000, 2_000, version=2))
    await triggers._handle(event(_older_version_fired(kb, 3_000).encode()))
    assert worker.take(worker.settings.jobs_topic) == [] and worker.counts.events["triggersIgnored"] == 1


def _stream(events: list[Any]) -> Any:
    return SimpleNamespace(events=lambda: _aiter(events))


async def _aiter(items: list[Any]) -> Any:
    for item in items:
        yield item
