"""The commands topic consumed a fetch at a time (scheduler/worker/ingest.py): where a worker starts reading it,
that a command is applied once across a restart (its offset is stored with the schedules' progress), and
that what the applied commands built is frozen out of the garbage collector's full collections."""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from scheduler.domain.model import Action, CronTrigger, Schedule, ScheduleCommand, ScheduleKey
from tests.helpers import TopicReader, fires_of, send_commands

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

#: 2026-01-01T00:00:00Z
T0 = 1_767_225_600_000
MINUTE = 60_000


def _yearly(name: str, topic: str) -> Schedule:
    """Fires on its own only on Jan 1st: what a test sees of it are its RUN and BACKFILL fires."""
    return Schedule(ScheduleKey("acme", name), CronTrigger("0 0 0 1 1 *"), topic)


async def _applied(url: str, n: int, timeout_s: float = 30) -> None:
    async with httpx.AsyncClient(base_url=url) as client:
        for _ in range(int(timeout_s / 0.1)):
            if (await client.get("/health")).json()["commandsApplied"] >= n:
                return
            await asyncio.sleep(0.1)
    raise AssertionError(f"{url}: fewer than {n} commands applied after {timeout_s}s")


@pytest.mark.embedded
async def test_a_command_is_applied_once_across_a_restart(broker, start_worker, workers, app_id, tmp_path):
    commands, out = f"{app_id}-commands", f"{app_id}-out"
    key = ScheduleKey("acme", "yearly")
    first = start_worker()
    async with TopicReader(broker.bootstrap_servers, out) as reader:
        await send_commands(
            broker.bootstrap_servers,
            commands,
            ScheduleCommand(key, Action.INSERT, _yearly("yearly", out)),
            ScheduleCommand(key, Action.RUN, fire_range=(T0, T0)),
            ScheduleCommand(key, Action.BACKFILL, fire_range=(T0 - MINUTE, T0 + MINUTE)),
        )
        got = await reader.wait_for(lambda r: len(fires_of(r, "yearly")) >= 2)
        assert sorted(f.due_at for f in fires_of(got, "yearly")) == [T0, T0]
        first.stop()  # clean: the fetch's offset is in the progress table's changelog

        # A new worker with an empty data dir: schedules and offsets come back from the changelogs, and
        # the RUN and BACKFILL already applied are not applied again.
        second = start_worker(SCHEDULER_DATA_DIR=str(tmp_path / "second"))
        await send_commands(
            broker.bootstrap_servers, commands, ScheduleCommand(key, Action.RUN, fire_range=(T0 + 1, T0 + 1))
        )
        await _applied(second.url, 1)
        got = await reader.wait_for(lambda r: any(f.due_at == T0 + 1 for f in fires_of(r, "yearly")))
        await asyncio.sleep(2)  # a replay of the earlier commands would land by now
        dues = sorted(f.due_at for f in fires_of(reader.records, "yearly"))
        assert dues.count(T0) == 2 and dues.count(T0 + 1) == 1, dues
        health = second.health()
        assert health is not None and health["commandsApplied"] == 1, health


@pytest.mark.embedded
async def test_a_worker_starts_where_the_apps_consumer_group_left_the_commands(broker, start_worker, app_id):
    """An upgrade from the per-message agent: a partition without a stored offset starts at the offset
    the app's consumer group committed, not at the beginning."""
    commands, out = f"{app_id}-commands", f"{app_id}-out"
    old = ScheduleCommand(ScheduleKey("acme", "old"), Action.INSERT, _yearly("old", out))
    await send_commands(broker.bootstrap_servers, commands, old)
    group = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap_servers, group_id=app_id, enable_auto_commit=False
    )
    await group.start()
    try:
        tps = [TopicPartition(commands, p) for p in range(4)]
        group.assign(tps)
        ends = await group.end_offsets(tps)
        assert sum(ends.values()) == 1
        await group.commit(ends)  # what the old agent would have committed after applying `old`
    finally:
        await group.stop()
    new = ScheduleCommand(ScheduleKey("acme", "new"), Action.INSERT, _yearly("new", out))
    await send_commands(broker.bootstrap_servers, commands, new)

    worker = start_worker()
    await _applied(worker.url, 1)
    async with httpx.AsyncClient(base_url=worker.url) as client:
        for _ in range(100):  # (with transactions a read shows what committed: a commit after the apply)
            if (await client.get("/schedules/acme/new")).status_code == 200:
                break
            await asyncio.sleep(0.1)
        assert (await client.get("/schedules/acme/new")).status_code == 200
        await asyncio.sleep(1)
        assert (await client.get("/schedules/acme/old")).status_code == 404
    health = worker.health()
    assert health is not None and health["commandsApplied"] == 1, health


async def _frozen(client: httpx.AsyncClient) -> float:
    """The commands applied when what they built was last frozen."""
    text = (await client.get("/metrics")).text
    found = re.search(r"^scheduler_gc_frozen_commands (\S+)$", text, re.M)
    assert found, "no scheduler_gc_frozen_commands in /metrics"
    return float(found.group(1))


@pytest.mark.embedded
async def test_what_applied_commands_built_is_frozen_once_the_topic_is_quiet(broker, start_worker, app_id):
    """Without it every full collection walks every schedule (~110 ms at 100,000, fires late behind it).
    (The number of frozen objects is no measure: transient objects frozen with them die meanwhile.)"""
    commands, out, n = f"{app_id}-commands", f"{app_id}-out", 2000
    worker = start_worker()
    async with httpx.AsyncClient(base_url=worker.url) as client:
        await send_commands(
            broker.bootstrap_servers,
            commands,
            *(
                ScheduleCommand(ScheduleKey("acme", f"y{i}"), Action.INSERT, _yearly(f"y{i}", out))
                for i in range(n)
            ),
        )
        await _applied(worker.url, n)
        for _ in range(50):
            if await _frozen(client) >= n:  # the last freeze came after the last command
                break
            await asyncio.sleep(0.1)
        assert await _frozen(client) >= n, await _frozen(client)
