"""Compaction, for real: on Apache Kafka the changelogs are compacted topics. After many updates and deletes
under an aggressive compaction config (segments rolled every second, any dirt cleanable), the schedules
changelog holds about one record per key, and a worker with an empty data dir restores exactly the live
schedules (deleted ones stay gone: tombstones), their trigger progress, their pending jobs and their
watermarks. It owns its Kafka (the config is the broker's): it runs once, in `make test`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

import pytest

from scheduler.domain.model import (
    Action,
    CatchUpPolicy,
    FrequencyTrigger,
    Schedule,
    ScheduleCommand,
    ScheduleKey,
    TimeUnit,
)
from scheduler.kafka.kafka_server import KafkaCluster, KafkaUnavailable
from tests.helpers import Api, TopicReader, send_commands, started_consumer

pytestmark = [pytest.mark.integration, pytest.mark.own_broker, pytest.mark.timeout(420)]

LIVE, DELETED, REWRITES = 700, 300, 10
COMPACTING = {
    "log.roll.ms": "1000",  # a segment closes after a second, so it can be cleaned
    "log.cleaner.min.cleanable.ratio": "0.01",
    "log.cleaner.backoff.ms": "500",
}


@pytest.fixture(scope="module")
def compacting_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    try:
        cluster = KafkaCluster(tmp_path_factory.mktemp("kafka-compacting"), config=COMPACTING).start()
    except KafkaUnavailable as exc:
        pytest.fail(f"the compaction test needs Apache Kafka from its jars: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop(timeout_s=0)  # (thrown away: no controlled shutdown to wait for)


def hourly(i: int, data: str, topic: str) -> Schedule:
    return Schedule(ScheduleKey("acme", f"s{i:04d}"), FrequencyTrigger(TimeUnit.HOURS, 1), topic, {"v": data})


async def changelog_records(bootstrap: str, topic: str) -> int:
    """How many records a restore of the topic reads, from its first offset to its end."""
    consumer = await started_consumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    try:
        parts = consumer.assignment() or set()
        deadline = time.monotonic() + 10
        while not parts and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            parts = consumer.assignment()
        ends = await consumer.end_offsets(list(parts))
        count = 0
        while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
            batch = await consumer.getmany(timeout_ms=500)
            count += sum(len(records) for records in batch.values())
        return count
    finally:
        await consumer.stop()


async def test_a_worker_with_an_empty_data_dir_restores_exactly_what_compaction_kept(
    compacting_kafka, start_worker, app_id, tmp_path
):
    bootstrap = compacting_kafka.bootstrap_servers
    env = {"KAFKA_BOOTSTRAP_SERVERS": bootstrap, "SCHEDULER_BROKER_PROFILE": "kafka"}
    commands, out = f"{app_id}-commands", f"{app_id}-out"
    first = start_worker(**env)
    # every version of every schedule, then the deletes: 11,300 writes of 1,000 keys
    await send_commands(
        bootstrap,
        commands,
        *(
            ScheduleCommand(s.key, Action.INSERT, s)
            for s in (hourly(i, "0", out) for i in range(LIVE + DELETED))
        ),
    )
    for v in range(1, REWRITES + 1):
        await send_commands(
            bootstrap,
            commands,
            *(
                ScheduleCommand(s.key, Action.UPDATE, s)
                for s in (hourly(i, str(v), out) for i in range(LIVE + DELETED))
            ),
        )
    await send_commands(
        bootstrap,
        commands,
        *(
            ScheduleCommand(ScheduleKey("acme", f"s{i:04d}"), Action.DELETE)
            for i in range(LIVE, LIVE + DELETED)
        ),
    )

    program, dataset = "acme/app/spark/etl", "acme.clicks"
    ticking = Schedule(
        ScheduleKey("acme", "ticking"),
        FrequencyTrigger(TimeUnit.SECONDS, 1),
        out,
        enabled=True,
        catch_up=CatchUpPolicy.EACH,
    )
    async with Api(first.url) as api:
        await api.until(
            "/schedules?tenant=acme&limit=1", lambda r: r.status_code == 200 and r.json()["total"] == LIVE, 60
        )
        await api.register(program)
        half = {"tenant": "acme", "name": "half", "program": program, "topic": f"{app_id}-launches", "enabled": True,
                "trigger": {"type": "partition", "dataset": dataset, "minPartitions": 2}}  # fmt: skip
        waiting = {**half, "name": "waiting", "trigger": {"type": "partition", "dataset": dataset, "minPartitions": 1},
                   "constraints": [{"type": "delay", "delayMs": 3_600_000}]}  # fmt: skip
        await api.create(half)
        await api.create(waiting)
        await api.partitions(dataset, "2026-11-24")
        await api.wait_jobs(lambda j: len(j["jobs"]) == 1, schedule="acme/waiting")
        await api.until(
            "/schedules/acme/half/trigger",
            lambda r: r.status_code == 200 and r.json()["trigger"]["partitions"] == 1,
        )
        progress_before = await api.progress("acme", "half")
    async with TopicReader(bootstrap, out) as reader:
        await send_commands(bootstrap, commands, ScheduleCommand(ticking.key, Action.INSERT, ticking))
        await reader.wait_for(lambda r: len([f for f in r if f.key.name == "ticking"]) >= 8)

    # segments close after a second; a write after that moves each partition's active segment on
    await asyncio.sleep(2)
    await send_commands(
        bootstrap,
        commands,
        *(
            ScheduleCommand(s.key, Action.INSERT, s)
            for s in (hourly(9000 + i, "nudge", out) for i in range(20))
        ),
    )
    changelog = f"{app_id}-schedules-changelog"
    written = (LIVE + DELETED) * (REWRITES + 1) + DELETED
    deadline = time.monotonic() + 90
    while (kept := await changelog_records(bootstrap, changelog)) > 2 * (LIVE + DELETED):
        assert time.monotonic() < deadline, (
            f"the schedules changelog was not compacted: {kept} of {written} records"
        )
        await asyncio.sleep(2)
    first.stop()
    stopped_at = time.time_ns() // 1_000_000

    fresh = start_worker(SCHEDULER_DATA_DIR=str(tmp_path / "fresh"), **env)  # everything from the changelogs
    live = (
        {f"s{i:04d}" for i in range(LIVE)}
        | {f"s{9000 + i:04d}" for i in range(20)}
        | {"half", "waiting", "ticking"}
    )
    async with Api(fresh.url) as api:
        # (commands the first worker had not committed when it stopped are applied again, from the
        # commands topic, a moment after the fresh worker is ready)
        with contextlib.suppress(AssertionError):
            await api.until(
                "/schedules?tenant=acme&limit=2000",
                lambda r: r.status_code == 200 and len(r.json()["schedules"]) >= len(live),
                60,
            )
        r = await api.until("/schedules?tenant=acme&limit=2000", lambda r: r.status_code == 200, 60)
        listed = {s["name"]: s for s in r.json()["schedules"]}
        assert set(listed) == live
        assert {listed[f"s{i:04d}"]["data"]["v"] for i in range(LIVE)} == {str(REWRITES)}
        assert {listed[f"s{i:04d}"]["version"] for i in range(LIVE)} == {REWRITES + 1}
        assert (await api.client.get(f"/schedules/acme/s{LIVE:04d}")).status_code == 404
        assert await api.progress("acme", "half") == progress_before
        jobs = await api.jobs(schedule="acme/waiting")
        assert len(jobs["jobs"]) == 1 and jobs["jobs"][0]["blockedBy"] == "DelayConstraint"
    # the watermark came back: the new owner catches up only what fell due after the old one stopped
    async with TopicReader(bootstrap, out) as reader:
        await reader.wait_for(
            lambda r: any(f.key.name == "ticking" and f.due_at > stopped_at + 3000 for f in r)
        )
        ticks = [f for f in reader.records if f.key.name == "ticking"]
    caught_up = sorted(f.due_at for f in ticks if f.catch_up)
    assert all(due > stopped_at - 3000 for due in caught_up), f"re-fired before the watermark: {caught_up}"
