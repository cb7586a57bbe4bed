"""A time fire that reaches the trigger agent after a command replaced the version it was fired as (the
instant came while the update was applied, or its fire was sent ahead of it): a plain time schedule's
instant is kept — its fire or job is made by the definition the agent reads — as the punctuator's fast path
sends the replaced version's fire; an event or a time leaf inside AND/OR belongs to its version."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from scheduler.domain.model import (
    CompositeTrigger,
    CronTrigger,
    ProgramId,
    Schedule,
    ScheduleKey,
    ScheduleState,
)
from scheduler.kafka.config import Settings
from scheduler.wire.codec import encode_state, key_bytes
from scheduler.wire.fires import decode_fired
from scheduler.wire.messages import JobTriggered, TriggerFired, decode_job_queue_message
from scheduler.worker.trigger_agent import TriggerAgent
from tests.unit.test_agents_through_ports import B, FakeWorker, event

pytestmark = pytest.mark.unit

T0 = 1_704_067_200_000
DUE = T0 + 60_000


@pytest.fixture
def worker(tmp_path: Path) -> FakeWorker:
    return FakeWorker(Settings(app_id="replaced", data_dir=tmp_path), now=DUE + 30)


def stored(worker: FakeWorker, schedule: Schedule, version: int, created_at: int = T0) -> bytes:
    schedule.validate()
    kb = key_bytes(schedule.key)
    worker.schedules[kb] = encode_state(
        ScheduleState(schedule, created_at, DUE + 20, DUE + 20, version=version)
    )
    return kb


def fired_as(kb: bytes, version: int, path: str = "0", due: int = DUE) -> bytes:
    return TriggerFired(kb, "acme/nightly", version, path, source=f"t{path}", position=due, at=due,
                        due=due).encode()  # fmt: skip


def jobs(worker: FakeWorker) -> list[str]:
    out = [decode_job_queue_message(v) for _, v in worker.take(worker.settings.jobs_topic)]
    return [j.job["job_id"] for j in out if isinstance(j, JobTriggered)]


def program_schedule(trigger: object = None) -> Schedule:
    return Schedule(ScheduleKey("acme", "nightly"), trigger or CronTrigger("0 * * * * *"), "launches",  # type: ignore[arg-type]
                    enabled=True, program=ProgramId.parse(B))  # fmt: skip


async def test_a_program_schedule_updated_after_its_instant_came_still_makes_its_job(
    worker: FakeWorker,
) -> None:
    kb = stored(worker, program_schedule(), version=2)
    await TriggerAgent(worker)._handle(event(fired_as(kb, version=1)))
    assert jobs(worker) == [f"acme/nightly@{DUE}"]
    assert worker.counts.events["triggersIgnored"] == 0


async def test_a_limited_plain_schedule_updated_after_its_instant_came_still_fires_it_by_its_new_definition(
    worker: FakeWorker,
) -> None:
    schedule = Schedule(ScheduleKey("acme", "nightly"), CronTrigger("0 * * * * *"), "out", {"v": "2"},
                        enabled=True, max_fires=100)  # fmt: skip
    kb = stored(worker, schedule, version=3)
    await TriggerAgent(worker)._handle(event(fired_as(kb, version=2)))
    [(_, value)] = worker.take("out")
    fire = decode_fired(value)
    assert (fire.due_at, fire.job_id, fire.data) == (DUE, f"acme/nightly@{DUE}", {"v": "2"})


async def test_a_time_leaf_inside_and_of_a_replaced_version_is_ignored(worker: FakeWorker) -> None:
    """Its AND counts toward the progress of the version it was fired as: the new one starts from zero."""
    both = CompositeTrigger("AND", (CronTrigger("0 * * * * *"), CronTrigger("30 * * * * *")))
    kb = stored(worker, program_schedule(both), version=2)
    await TriggerAgent(worker)._handle(event(fired_as(kb, version=1, path="0.0")))
    assert jobs(worker) == [] and worker.counts.events["triggersIgnored"] == 1


async def test_an_instant_of_a_schedule_deleted_and_inserted_again_since_is_ignored(
    worker: FakeWorker,
) -> None:
    kb = stored(worker, program_schedule(), version=2, created_at=DUE + 10)
    await TriggerAgent(worker)._handle(event(fired_as(kb, version=1)))
    assert jobs(worker) == [] and worker.counts.events["triggersIgnored"] == 1


async def test_a_time_fire_of_a_newer_version_than_the_stored_one_is_ignored(worker: FakeWorker) -> None:
    kb = stored(worker, program_schedule(), version=1)
    await TriggerAgent(worker)._handle(event(fired_as(kb, version=2)))
    assert jobs(worker) == [] and worker.counts.events["triggersIgnored"] == 1


async def test_a_disabled_schedule_drops_the_instant_of_its_replaced_version(worker: FakeWorker) -> None:
    kb = stored(worker, replace(program_schedule(), enabled=False), version=2)
    await TriggerAgent(worker)._handle(event(fired_as(kb, version=1)))
    assert jobs(worker) == []
