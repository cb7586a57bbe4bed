"""Limited actions (issue 39 item 6): `maxFires: N` — the trigger agent counts a limited schedule's fires
(a program's: the jobs its triggers make) in its state and makes no more once it made N; the schedule is
then finished, takes no index entries, and `/next` lists no more than it has left."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from scheduler.domain.events import Notification
from scheduler.domain.model import CronTrigger, ProgramId, Schedule, ScheduleKey, ScheduleState
from scheduler.domain.triggers.instants import upcoming
from scheduler.domain.triggers.kinds import ProgramRunsTrigger
from scheduler.kafka.config import Settings
from scheduler.wire.codec import decode_state, encode_state, key_bytes, notification_to_avro
from scheduler.wire.fires import decode_fired
from scheduler.wire.messages import TriggerFired
from scheduler.worker.held import compile_schedule, index_writes
from scheduler.worker.trigger_agent import TriggerAgent
from tests.unit.test_agents_through_ports import A, B, FakeWorker, event

pytestmark = pytest.mark.unit

T0 = 1_704_067_200_000


@pytest.fixture
def worker(tmp_path: Path) -> FakeWorker:
    return FakeWorker(Settings(app_id="limited", data_dir=tmp_path), now=T0)


def limited(max_fires: int = 3, **extra: object) -> ScheduleState:
    schedule = Schedule(
        ScheduleKey("acme", "three"),
        CronTrigger("* * * * * *"),
        "out",
        enabled=True,
        max_fires=max_fires,
        **extra,  # type: ignore[arg-type]
    )
    schedule.validate()
    return ScheduleState(schedule, T0, T0, T0)


def time_fire(kb: bytes, due: int) -> bytes:
    return TriggerFired(kb, "acme/three", 1, "0", source="t0", position=due, at=due + 5, due=due).encode()


async def test_a_limited_plain_schedule_fires_its_max_then_is_finished(worker: FakeWorker) -> None:
    state = limited(3)
    kb = key_bytes(state.schedule.key)
    worker.schedules[kb] = encode_state(state)
    assert compile_schedule(state, kb).encode is None  # (its fires go through its trigger agent)
    agent = TriggerAgent(worker)
    dues = [T0 + i * 1000 for i in range(5)]
    for due in (dues[0], dues[1], dues[1], dues[2], dues[3], dues[4]):  # (a replay of the second)
        await agent._handle(event(time_fire(kb, due)))
    fired = [decode_fired(v) for _, v in worker.take("out")]
    assert [(f.due_at, f.fired_at, f.job_id) for f in fired] == [
        (d, d + 5, f"acme/three@{d}") for d in dues[:3]
    ]
    after = decode_state(worker.schedules[kb])
    assert (after.fires, after.fires_left, after.exhausted, after.finished(T0)) == (3, 0, True, True)
    assert [s.fires for s in worker.upserted] == [3]  # (the third took it out of the punctuator)
    assert worker.counts.events["triggersIgnored"] == 2
    assert [k for k, v in index_writes(kb, after, lambda _: None) if v is not None] == []
    assert upcoming(after, T0, 10)[0] == []
    assert len(upcoming(replace(after, fires=1), T0, 10)[0]) == 2


async def test_the_count_survives_an_update_and_a_pause_and_a_higher_max_fires_more(
    worker: FakeWorker,
) -> None:
    from scheduler.domain.commands import apply_command
    from scheduler.domain.model import Action, ScheduleCommand

    state = replace(limited(2), fires=2)
    key = state.schedule.key
    paused = apply_command(state, ScheduleCommand(key, Action.DISABLE), T0 + 1)
    resumed = apply_command(paused, ScheduleCommand(key, Action.ENABLE), T0 + 2)
    assert resumed is not None and resumed.fires == 2 and resumed.exhausted
    more = replace(state.schedule, max_fires=5)
    updated = apply_command(resumed, ScheduleCommand(key, Action.UPDATE, more), T0 + 3)
    assert updated is not None and updated.fires == 2 and updated.fires_left == 3 and updated.firing


async def test_a_limited_program_schedule_makes_its_max_jobs(worker: FakeWorker) -> None:
    schedule = Schedule(ScheduleKey("acme", "after-a"), ProgramRunsTrigger(ProgramId.parse(A), 1), "launches",
                        enabled=True, program=ProgramId.parse(B), max_fires=2)  # fmt: skip
    schedule.validate()
    kb = key_bytes(schedule.key)
    worker.schedules[kb] = encode_state(ScheduleState(schedule, 1, 1, 1))
    agent = TriggerAgent(worker)
    for offset in range(4):
        n = Notification(T0, "program-status", {"programId": A, "runId": f"r{offset}", "status": "COMPLETED"})
        fired = TriggerFired(kb, "acme/after-a", 1, "0", source="e0", position=offset, at=T0,
                             event=notification_to_avro(n))  # fmt: skip
        await agent._handle(event(fired.encode()))
    assert len(worker.take(worker.settings.jobs_topic)) == 2
    assert decode_state(worker.schedules[kb]).fires == 2
