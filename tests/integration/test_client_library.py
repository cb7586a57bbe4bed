"""The client library (scheduler.client) against a real worker and broker: typed schedule commands straight
onto the commands topic, on the partition the workers give their key; events published there launch a
program; fires and launch requests read back with RecordReader; the HTTP client sees each write."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import pytest

from scheduler.client import ApiError, CommandProducer, HttpClient, RecordReader
from scheduler.domain.basics import ProgramId, TimeUnit
from scheduler.domain.model import Action, FiredTask, Schedule, ScheduleCommand, ScheduleKey
from scheduler.domain.triggers.kinds import FrequencyTrigger, PartitionTrigger
from scheduler.kafka.partitioner import kafka_partition
from scheduler.wire.codec import key_bytes
from tests.conftest import Broker
from tests.helpers import WorkerProcess, ensure_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

T = TypeVar("T")


async def first(items: AsyncIterator[T], ok: Callable[[T], bool], timeout_s: float = 60) -> T:
    async def find() -> T:
        async for item in items:
            if ok(item):
                return item
        raise AssertionError("the reader ended")

    return await asyncio.wait_for(find(), timeout_s)


async def until(call: Callable[[], Any], ok: Callable[[Any], bool], timeout_s: float = 30) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            got = await call()
        except ApiError as exc:
            got = exc
        if ok(got):
            return got
        assert time.monotonic() < deadline, got
        await asyncio.sleep(0.2)


@pytest.mark.embedded
async def test_typed_commands_events_fires_and_launch_requests_round_trip(
    broker: Broker, worker: WorkerProcess, app_id: str
) -> None:
    bootstrap = broker.bootstrap_servers
    out = f"{app_id}-out"
    launches = f"{app_id}-launches"
    for topic in (out, launches):
        await ensure_topic(bootstrap, topic)
    key = ScheduleKey("acme", "every-second")
    every_second = Schedule(key, FrequencyTrigger(TimeUnit.SECONDS, 1), out, {"job": "ping"}, enabled=True)
    async with (
        CommandProducer(bootstrap, app_id=app_id, partitions=4, by="client-test") as producer,
        HttpClient(worker.url) as api,
        RecordReader(bootstrap, out, profile=broker.profile) as fires,
    ):
        await producer.insert(every_second)
        fire = await first(fires.fires(), lambda f: f.key == key)
        assert isinstance(fire, FiredTask) and fire.data == {"job": "ping"} and fire.due_at <= fire.fired_at

        # the command went to the partition its key has among the workers' 4, and the worker applied it
        async with RecordReader(bootstrap, f"{app_id}-commands", schema="ScheduleCommand",
                                profile=broker.profile, from_beginning=True) as commands:  # fmt: skip
            sent = await first(
                commands.records(), lambda r: r.value is not None and r.value["key"]["name"] == key.name
            )
        assert sent.partition == kafka_partition(key_bytes(key), 4) and sent.value is not None
        assert sent.value["action"] == "INSERT"
        shown = await api.schedule("acme", "every-second")
        assert shown["enabled"] is True and shown["trigger"]["type"] == "frequency", shown

        await producer.disable(key)
        await until(lambda: api.schedule("acme", "every-second"), lambda s: s["enabled"] is False)
        history = await api.request("GET", "/schedules/acme/every-second/history")
        assert any(v.get("by") == "client-test" for v in history["versions"]), history

        # many at once, in batches: every one is listed over HTTP
        many = [
            Schedule(ScheduleKey("bulk", f"s{i:03d}"), FrequencyTrigger(TimeUnit.HOURS, 1), out)
            for i in range(150)
        ]
        assert await producer.send_many(ScheduleCommand(s.key, Action.INSERT, s) for s in many) == 150

        async def listed() -> list[Any]:
            return [s async for s in api.all_schedules("bulk", limit=40)]

        await until(listed, lambda got: len(got) == 150)

        await producer.delete(key)
        await until(
            lambda: api.schedule("acme", "every-second"),
            lambda r: isinstance(r, ApiError) and r.status == 404,
        )

        # an event published by the client launches the program of a partition-triggered schedule
        program = "acme/pipelines/spark/etl"
        await api.register_program(program, {"kind": "external"})
        await until(
            lambda: api.program(program), lambda p: isinstance(p, dict) and p.get("kind") == "external"
        )
        etl = Schedule(ScheduleKey("acme", "etl"), PartitionTrigger("acme.clicks", 1), launches, enabled=True,
                       program=ProgramId.parse(program))  # fmt: skip
        await producer.insert(etl)
        await until(lambda: api.schedule("acme", "etl"), lambda s: isinstance(s, dict))
        async with RecordReader(
            bootstrap, launches, schema="LaunchRequest", profile=broker.profile
        ) as reader:
            event_key = await producer.publish(
                "partition", {"datasetId": "acme.clicks", "partitionKeys": '["2026-11-26"]', "bytes": "10"}
            )
            assert event_key
            launch = await first(reader.records(), lambda r: r.value is not None)
        assert launch.value is not None and "etl" in str(launch.value), launch
