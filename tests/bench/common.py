"""What the benchmarks share (tests.bench.run and the benches beside it): the workloads, a worker process
and its commands, percentiles and the process's memory."""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil

from scheduler.domain.model import (
    Action,
    CatchUpPolicy,
    CronTrigger,
    Schedule,
    ScheduleCommand,
    ScheduleKey,
)
from scheduler.wire.codec import key_bytes

MINUTE_MS = 60_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def cron_of(i: int) -> str:
    return "*/5 * * * * *" if i % 10 == 0 else f"{i % 60} * * * * *"


def workload(n: int, topic: str) -> list[Schedule]:
    return [
        Schedule(
            ScheduleKey("bench", f"s{i:07d}"),
            CronTrigger(cron_of(i)),
            topic,
            enabled=True,
            catch_up=CatchUpPolicy.SKIP,
        )  # fmt: skip
        for i in range(n)
    ]


def hourly_cron_of(i: int) -> str:
    """The sparse workload: each schedule once an hour, at its own second of the hour."""
    return f"{i % 60} {i // 60 % 60} * * * *"


def expected_fires_per_s(n: int) -> float:
    return n * 0.1 / 5 + n * 0.9 / 60


def pct(values: list[int], q: float) -> int | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


def rss_mb(pid: int | None = None) -> float:
    return psutil.Process(pid or os.getpid()).memory_info().rss / 2**20


def dir_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


class Worker:
    def __init__(self, bootstrap: str, profile: str, app_id: str, work: Path, **env: str) -> None:
        from tests.helpers import WorkerProcess

        work.mkdir(parents=True, exist_ok=True)
        self.proc = WorkerProcess(
            {"KAFKA_BOOTSTRAP_SERVERS": bootstrap, "SCHEDULER_BROKER_PROFILE": profile, "SCHEDULER_APP_ID": app_id,
             "SCHEDULER_PARTITIONS": "8", "SCHEDULER_DATA_DIR": str(work / "data"), "SCHEDULER_LOG_LEVEL": "warning", "SCHEDULER_AUTH": "off",
             # one tenant holds every bench schedule: past the default quota of 100,000
             "SCHEDULER_MAX_SCHEDULES_PER_TENANT": "100000000", **env},
            work / f"worker-{uuid.uuid4().hex[:4]}.log",
        )  # fmt: skip

    def __enter__(self) -> Worker:
        self.proc.start()
        self.proc.wait_ready(timeout_s=180)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()


async def produce_keyed(bootstrap: str, topic: str, records: Iterable[tuple[bytes, bytes]]) -> float:
    """Produce (key, value) records in whole batches, each on its key's partition among 8 (the bench's
    partition count, as the workers partition): the client library's batching; seconds it took."""
    from aiokafka import AIOKafkaProducer

    from scheduler.client.kafka import produce_keyed as produce

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, max_batch_size=512 * 1024)
    await producer.start()
    try:
        t0 = time.monotonic()
        await produce(producer, topic, records, 8)  # whole batches: the bench leaves the CPU to the worker
        return time.monotonic() - t0
    finally:
        await producer.stop()


def insert_records(schedules: list[Schedule]) -> list[tuple[bytes, bytes]]:
    """The schedules' INSERT commands, keyed."""
    from scheduler.wire.codec import encode_command

    return [(key_bytes(s.key), encode_command(ScheduleCommand(s.key, Action.INSERT, s))) for s in schedules]


async def send_commands(bootstrap: str, app_id: str, records: Iterable[tuple[bytes, bytes]]) -> float:
    """Encoded commands onto the app's commands topic with the client library; seconds it took."""
    from scheduler.client import CommandProducer

    async with CommandProducer(bootstrap, app_id=app_id, partitions=8) as producer:
        t0 = time.monotonic()
        await producer.send_encoded(records)
        return time.monotonic() - t0


async def insert_all(bootstrap: str, app_id: str, schedules: list[Schedule]) -> float:
    """INSERT the schedules through the app's commands topic (batched); seconds it took."""
    return await send_commands(bootstrap, app_id, insert_records(schedules))


def wait_applied(worker: Worker, n: int, timeout_s: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        h = worker.proc.health() or {}
        if h.get("commandsApplied", 0) >= n:
            return time.monotonic() - t0
        time.sleep(0.2)
    return float("nan")


def readme_period(i: int) -> tuple[int, int]:
    """(step, offset) ms of the README workload's schedule i (`cron_of`)."""
    return (5_000, 0) if i % 10 == 0 else (MINUTE_MS, (i % 60) * 1000)


def every_second(n: int, topic: str) -> list[Schedule]:
    """The ceiling's workload: n schedules that each fire every second (n fires/s, one burst a second)."""
    return [dataclasses.replace(s, trigger=CronTrigger("* * * * * *")) for s in workload(n, topic)]


def expected_in(n: int, period: Any, lo: int, hi: int) -> int:
    """How many fires n schedules of `period` are due in [lo, hi]."""
    expected = 0
    for i in range(n):
        step, offset = period(i)
        first_due = ((lo - offset - 1) // step + 1) * step + offset
        expected += (hi - first_due) // step + 1 if first_due <= hi else 0
    return expected


def wait_all_applied(workers: list[Worker], n: int, timeout_s: float) -> float:
    """Seconds until the workers have applied n commands between them (NaN: not within timeout_s)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if sum((w.proc.health() or {}).get("commandsApplied", 0) for w in workers) >= n:
            return time.monotonic() - t0
        time.sleep(0.2)
    return float("nan")


def wait_spread(workers: list[Worker], timeout_s: float = 180) -> dict[int, list[int]]:
    """Until every worker owns partitions and together they own all 8: {worker index: its partitions}."""
    deadline = time.monotonic() + timeout_s
    owned: dict[int, list[int]] = {}
    while time.monotonic() < deadline:
        owned = {i: list((w.proc.health() or {}).get("partitions", [])) for i, w in enumerate(workers)}
        if all(owned.values()) and sum(len(p) for p in owned.values()) >= 8:
            return owned
        time.sleep(0.5)
    raise TimeoutError(f"partitions not spread over {len(workers)} workers in {timeout_s} s: {owned}")
