"""The recovery scenarios of `make bench` (see tests.bench.run): a worker's start to its first fire from
the changelog, with and without standby, and from a changelog the bench writes itself (1M, 10M)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from scheduler.domain.model import (
    CatchUpPolicy,
    CronTrigger,
    Schedule,
    ScheduleKey,
    ScheduleState,
)
from scheduler.wire.codec import encode_state, key_bytes
from tests.bench.common import (
    Worker,
    cron_of,
    dir_mb,
    hourly_cron_of,
    insert_all,
    now_ms,
    produce_keyed,
    rss_mb,
    wait_applied,
    workload,
)


async def recovery(bootstrap: str, profile: str, n: int, standby: bool) -> dict[str, Any]:
    """The only worker stops; a new one (fresh data dir: everything from the changelog) starts: time from its
    start to its first fire. With standby: a second worker already holds standby replicas and takes over."""
    from tests.helpers import TopicReader

    work = Path(tempfile.mkdtemp(prefix="bench-rec-"))
    app_id = f"bench{uuid.uuid4().hex[:6]}"
    topic = f"{app_id}-out"
    env = {"SCHEDULER_STANDBY_REPLICAS": "1"} if standby else {}
    first = Worker(bootstrap, profile, app_id, work / "a", **env).__enter__()
    helper = Worker(bootstrap, profile, app_id, work / "b", **env) if standby else None
    try:
        await insert_all(bootstrap, app_id, workload(n, topic))
        await asyncio.to_thread(wait_applied, first, n, 900)
        if helper is not None:
            helper.proc.start()
            await asyncio.to_thread(helper.proc.wait_ready, 180, 0)
            await asyncio.sleep(5)  # standbys catch up
        first.proc.stop()  # a clean stop: the group rebalances at once, so this measures recovery
        killed = now_ms()
        if helper is None:
            helper = Worker(bootstrap, profile, app_id, work / "c", **env)
            started = now_ms()
            helper.proc.start()
        else:
            started = killed
        async with TopicReader(bootstrap, topic, read_committed=profile == "kafka") as reader:
            before = len(reader.records)
            await asyncio.sleep(1)
            before = len(reader.records)
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                if any(m.timestamp > killed for m in reader.raw[before:]):
                    await asyncio.sleep(2)  # the reader may still be reading older fires of other partitions
                    first_fire = min(m.timestamp for m in reader.raw[before:] if m.timestamp > killed)
                    return {
                        "schedules": n,
                        "standby": standby,
                        "start_to_first_fire_s": round((first_fire - started) / 1000, 1),
                    }
                await asyncio.sleep(0.1)
        return {"schedules": n, "standby": standby, "start_to_first_fire_s": None}
    finally:
        first.__exit__()
        if helper is not None:
            helper.__exit__()
        shutil.rmtree(work, ignore_errors=True)


async def seed_changelog(
    bootstrap: str, app_id: str, schedules: Iterable[Schedule], topics: set[str]
) -> None:
    """Write the schedules table's changelog directly, as workers write it (ScheduleState by schedule key, on
    the key's partition): a million INSERTs through the commands topic would take this bench ~20 minutes.
    `schedules` may be a generator (10M are not held at once); `topics`: the ones they fire to."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from scheduler.kafka.producer import TopicCreator
    from scheduler.worker.app import SCHEDULES_TABLE

    topic = f"{app_id}-{SCHEDULES_TABLE}-changelog"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:  # compacted, as Faust creates its changelogs
        await admin.create_topics([NewTopic(topic, 8, 1, topic_configs={"cleanup.policy": "compact"})])
    finally:
        await admin.close()
    # the output topics, as the worker creates them when it applies an INSERT
    await TopicCreator(bootstrap, 8, 1).ensure(*sorted(topics))
    now = now_ms()
    await produce_keyed(
        bootstrap,
        topic,
        (
            (
                key_bytes(s.key),
                encode_state(ScheduleState(s, created_at=now, updated_at=now, active_since=now)),
            )
            for s in schedules
        ),
    )


def seeded_schedules(n: int, topic: str, hourly: bool) -> Iterator[Schedule]:
    """The workload of `workload` (or, `hourly`, each schedule once an hour at its own second), one at a
    time."""
    for i in range(n):
        yield Schedule(
            ScheduleKey("bench", f"s{i:07d}"),
            CronTrigger(hourly_cron_of(i) if hourly else cron_of(i)),
            topic,
            enabled=True,
            catch_up=CatchUpPolicy.SKIP,
        )


async def recovery_seeded(
    bootstrap: str, profile: str, n: int, hourly: bool = False, timeout_s: float = 900
) -> dict[str, Any]:
    """A worker starts (fresh data dir) on a changelog of n schedules written by seed_changelog: time from
    its start to ready (every partition restored and assigned) and to its first fire, its RSS then, and
    how many records the bulk restore applied; then it is stopped and started again on the data dir it
    kept: time to ready and to its first fire again. `hourly`: the sparse workload (each schedule once an hour)."""
    from tests.helpers import TopicReader, WorkerProcess

    work = Path(tempfile.mkdtemp(prefix="bench-rec-"))
    app_id = f"bench{uuid.uuid4().hex[:6]}"
    topic = f"{app_id}-out"
    t0 = time.monotonic()
    await seed_changelog(bootstrap, app_id, seeded_schedules(n, topic, hourly), {topic})
    seed_s = time.monotonic() - t0
    worker = Worker(bootstrap, profile, app_id, work / "a")
    proc: WorkerProcess = worker.proc

    async def first_fire(reader: Any, since: int) -> tuple[float | None, float | None]:
        """(s to the first fire produced after `since`, s to ready), from `since`."""
        deadline = time.monotonic() + timeout_s
        ready = None
        while time.monotonic() < deadline:
            h = proc.health() if ready is None else None
            if h is not None and h.get("ready") and len(h.get("partitions", ())) >= proc.partitions:
                ready = (now_ms() - since) / 1000
            fired = [m.timestamp for m in reader.raw if m.timestamp >= since]
            if fired and ready is not None:
                return round((min(fired) - since) / 1000, 1), round(ready, 1)
            await asyncio.sleep(0.1)
        return None, None if ready is None else round(ready, 1)

    try:
        async with TopicReader(bootstrap, topic, start="latest", read_committed=profile == "kafka") as reader:
            started = now_ms()
            proc.start()
            fire_s, ready_s = await first_fire(reader, started)
            rss = rss_mb(proc.proc.pid) if proc.proc else None
            bulk = (proc.health() or {}).get("bulkRestoredRecords")
            disk = dir_mb(work / "a" / "data")
            proc.stop()  # a clean stop (a restart, a deploy): the group does not wait for its session
            restarted = now_ms()
            proc.start()  # the same data dir: its RocksDB state, its index, the changelog's tail
            again_s, again_ready_s = await first_fire(reader, restarted)
        return {
            "schedules": n,
            "workload": "hourly" if hourly else "README",
            "standby": False,
            "seeded_changelog": True,
            "seed_s": round(seed_s, 1),
            "start_to_ready_s": ready_s,
            "start_to_first_fire_s": fire_s,
            "bulk_restored": bulk,
            "rss_mb": round(rss) if rss else None,
            "data_dir_mb": round(disk),
            "restart_to_ready_s": again_ready_s,
            "restart_to_first_fire_s": again_s,
        }
    finally:
        worker.__exit__()
        shutil.rmtree(work, ignore_errors=True)
