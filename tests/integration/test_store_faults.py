"""A partition whose local store cannot be read drops nothing (seed 2021 of the fault campaign: Faust closed
a revoked partition's RocksDB while a scan still held it, the reopen failed with "lock hold by current
process", and the punctuator took the failed reads for deleted schedules and dropped their index entries;
when the partition came back to that data dir, those schedules never fired again). Here a worker restarted
on its own data dir fails its first read of a schedule (SCHEDULER_FAILPOINTS) while it catches a partition
up: the partition is given up and assigned again, and every schedule fires on."""

from __future__ import annotations

import asyncio
import re
import time

import httpx
import pytest

from tests.helpers import Api, TopicReader, fires_of

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

NAMES = [f"read-{i}" for i in range(6)]


def _every_second(name: str, topic: str) -> dict[str, object]:
    return {"tenant": "acme", "name": name, "trigger": {"type": "frequency", "timeUnit": "SECONDS", "time": 1},
            "topic": topic, "enabled": True}  # fmt: skip


async def _each_fires_after(reader: TopicReader, after_ms: int, timeout_s: float) -> None:
    await reader.wait_for(
        lambda records: all(any(f.due_at > after_ms for f in fires_of(records, n)) for n in NAMES), timeout_s
    )


@pytest.mark.embedded
async def test_a_schedule_read_that_fails_while_a_partition_is_caught_up_loses_no_schedule(
    broker, start_worker, app_id
):
    topic = f"{app_id}-reads-out"
    first = start_worker()
    async with TopicReader(broker.bootstrap_servers, topic) as reader:
        async with Api(first.url) as api:
            for name in NAMES:
                await api.create(_every_second(name, topic))
        await _each_fires_after(reader, 0, 60)
        first.stop()
        stopped = int(time.time() * 1000)
        await asyncio.sleep(2)  # dues pass: the next assignment catches them up from the index it kept
        again = start_worker(SCHEDULER_FAILPOINTS="schedule-reads=1")  # (its data dir: the index is complete)
        try:
            await _each_fires_after(reader, stopped + 3_000, 60)
        except AssertionError as timed_out:
            names = {f.key.name for f in reader.records if f.due_at > stopped + 3_000}
            raise AssertionError(
                f"never fired again: {sorted(set(NAMES) - names)}\n{again.log_tail(80)}"
            ) from timed_out
    health = again.health()
    assert health is not None and health["partitionsUnreadable"] == 1, health
    assert health.get("dueIndexBuilds", 0) == 0, health  # (caught up from the index it kept, not rebuilt)
    metrics = httpx.get(f"{again.url}/metrics", timeout=10).text
    assert re.search(r"^scheduler_partitions_unreadable_total 1(\.0)?$", metrics, re.M), metrics[-2000:]
    assert "cannot be read" in again.log_tail(2_000)
