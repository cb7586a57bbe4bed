"""Benchmarks (`make bench`): they report, never assert. Results go to tests/bench/results/ (results.json, a
Markdown table and a PNG plot) and into the docs site's Benchmarks page (docs/content/benchmarks.md).

Scenarios (each bounded to a minute or two):
- core: the scheduler core in-process — due-time heaps, cron math, schedule state read from RocksDB and
  decoded, fired task encoded — up to the producer call, with a null sink that takes whole batches as a
  worker's producer does; N live cron schedules, active from once they are written (nothing overdue at
  the takeover), measured after their first minute of firing.
- firing: end to end on the broker — one worker process, N schedules inserted through the commands topic,
  lateness measured at a consumer of the output topic.
- commands: INSERTs per second through the commands topic, and the time until all are live (with the
  firing rows); --commands N: N hourly INSERTs produced at once, with and without transactions (the
  commands ceiling).
- ceiling (--ceiling RATES): N schedules each firing every second, N raised in turn until a step is not
  sustained (missed fires, p99 over a second, or lateness drifting): the knee of end-to-end fires/s.
- workers (--workers 1 2 3): that many workers share the README workload of --workers-schedules; fires/s,
  lateness, partitions and RSS per worker; then one stops and the time until its partitions fire again.
- events: event -> launch request latency for a partition trigger without constraints, measured once the
  trigger index holds all N schedules.
- recovery: worker start to first fire with N schedules in the changelog, with and without standby; with
  --recovery-seeded (default 1M) the bench writes the changelog itself instead of INSERTing through commands.
- spread: N daily "anytime" schedules (a daily cron with `spreadMs` a day, seed 003's user story 5): the
  per-second and per-minute histograms of their fire instants over a day, computed by the evaluator the
  punctuator uses. `--only spread` runs it alone (its own JSON, plot and README block).

tests/bench/ceiling.py measures Faust's own per-message cost on the same broker (the ceiling of an agent);
tests/bench/hops.py times each hop of event -> launch.
- peer: APScheduler 3.x (AsyncIOScheduler, memory job store) on the same cron workload, in the same run.

Workload: N cron schedules, 6 fields, UTC; 10 % every 5 s (`*/5 * * * * *`), 90 % once a minute at a
second spread over the minute (`S * * * * *`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import json
import math
import os
import platform
import re
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import psutil

from scheduler.domain.model import (
    Action,
    CatchUpPolicy,
    CronTrigger,
    PartitionTrigger,
    ProgramId,
    Schedule,
    ScheduleCommand,
    ScheduleKey,
    ScheduleState,
)
from scheduler.wire.codec import encode_state, key_bytes
from scheduler.wire.fires import decode_fired

MINUTE_MS = 60_000
#: the core scenario measures after a minute of firing: every schedule of the workload was loaded and
#: compiled once (in the first minute after a takeover the horizon loads them as they come due)
CORE_WARM_UP_S = 62
#: the core's workload is written active from this far ahead (build time: ~25 us a schedule here)
CORE_LEAD_MS, CORE_LEAD_US_PER_SCHEDULE = 2_000, 60


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


# --- core: in-process, null sink ------------------------------------------------------------------


async def core(n: int, duration_s: float, hourly: bool = False) -> dict[str, Any]:
    """`hourly`: the sparse workload (hourly_cron_of) instead of the README's."""
    from rocksdict import Options, Rdict, WriteBatch

    from scheduler.domain.model import TimeUnit
    from scheduler.kafka.due_index import COMPLETE, DueIndex
    from scheduler.kafka.tables import WRITE_BUFFER_BYTES
    from scheduler.wire.codec import decode_state
    from scheduler.worker.held import index_writes
    from scheduler.worker.punctuator import Punctuator

    work = Path(tempfile.mkdtemp(prefix="bench-core-"))
    partitions = 8
    options = Options(raw_mode=True)
    options.set_write_buffer_size(WRITE_BUFFER_BYTES)  # (as the worker's tables have it)
    # a RocksDB per partition, the schedules and their due-time index in it, as the worker's table has them
    dbs = [Rdict(str(work / f"schedules-{part}.db"), options) for part in range(partitions)]
    # the workload becomes active once it is written: nothing is overdue when the punctuator takes the
    # partitions over (a takeover's backlog is the recovery scenario's), its first dues come after that
    start = now_ms() + CORE_LEAD_MS + n * CORE_LEAD_US_PER_SCHEDULE // 1000
    # written as the commands ingest (or a restore) writes them, a schedule at a time and none held by the
    # bench (10M of them would not fit): each state and its due-time index entries, in write batches
    triggers: dict[str, CronTrigger] = {}
    batches = [WriteBatch(raw_mode=True) for _ in range(partitions)]
    index_s = 0.0
    for i in range(n):
        expression = hourly_cron_of(i) if hourly else cron_of(i)
        trigger = triggers.get(expression) or triggers.setdefault(expression, CronTrigger(expression))
        s = Schedule(
            ScheduleKey("bench", f"s{i:07d}"), trigger, "null", enabled=True, catch_up=CatchUpPolicy.SKIP
        )
        kb, state = key_bytes(s.key), ScheduleState(s, start, start, start)
        batch = batches[i % partitions]
        batch.put(kb, encode_state(state))
        t0 = time.perf_counter()
        for key, value in index_writes(kb, state, lambda unit: None):
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        index_s += time.perf_counter() - t0
        if i % 20_000 == 19_999 or i == n - 1:
            for part, batch in enumerate(batches):
                dbs[part].write(batch)
            batches = [WriteBatch(raw_mode=True) for _ in range(partitions)]
    for db in dbs:
        db[COMPLETE] = b""
    done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    done.set_result(None)

    sunk: list[tuple[bytes, int]] = []  # (FiredTask bytes, when the producer call was made), decoded after

    async def null_send(topic: str, key: bytes, value: bytes) -> asyncio.Future[object]:
        sunk.append((value, now_ms()))
        return done

    async def null_batch(topic: str, records: list[tuple[bytes, bytes, int]]) -> list[asyncio.Future[object]]:
        at = now_ms()
        sunk.extend((value, at) for _, value, _ in records)
        return [done] * len(records)

    index = DueIndex(lambda part: dbs[part])
    # the sink as a worker's producer is: whole batches per topic and partition (`send` for the rest)
    p = Punctuator(
        null_send,
        lambda part, k: decode_state(dbs[part][k]),
        lambda *a: None,
        index=index,
        send_batch=null_batch,
        partition_count=lambda topic: partitions,
    )
    del triggers, batches
    gc.collect()
    rss_before = rss_mb()
    overdue_ms = max(0, now_ms() - start)  # (0 unless the build took longer than CORE_LEAD allows)
    t0 = time.monotonic()
    for part in range(partitions):
        await p.assign(part, None, {})  # a takeover: the entries due by now, not every schedule
    assign_s = time.monotonic() - t0
    gc.freeze()  # long-lived objects: keep the collector off them
    timer = asyncio.create_task(p.run_timer(TimeUnit.SECONDS))
    progress = asyncio.create_task(p.run_progress(1.0))
    # a minute of firing: every schedule of the workload came into memory once
    await asyncio.sleep(max(0, start - now_ms()) / 1000 + CORE_WARM_UP_S)
    sunk.clear()
    measured_from = time.monotonic()
    cpu_from = sum(psutil.Process().cpu_times()[:2])
    await asyncio.sleep(duration_s)
    elapsed = time.monotonic() - measured_from
    cpu_s = sum(psutil.Process().cpu_times()[:2]) - cpu_from
    window = list(sunk)
    fires = len(window)
    timer.cancel()
    progress.cancel()
    gc.unfreeze()
    lateness = [at - decode_fired(value).due_at for value, at in window]
    result = {
        "layer": "core, hourly" if hourly else "core",
        "schedules": n,
        "expected_fires_per_s": round(n / 3600 if hourly else expected_fires_per_s(n)),
        "fires_per_s": round(fires / elapsed),
        "lateness_p50_ms": pct(lateness, 0.5),
        "lateness_p99_ms": pct(lateness, 0.99),
        "lateness_max_ms": max(lateness) if lateness else None,
        "missed": None,
        "cpu_us_per_fire": round(cpu_s * 1e6 / fires, 1) if fires else None,
        "assign_s": round(assign_s, 2),
        "overdue_at_takeover_ms": overdue_ms,
        "index_build_s": round(index_s, 1),
        "in_memory": sum(p.compiled_count(part) for part in range(partitions)),
        "rss_mb": round(rss_mb()),
        "heap_rss_mb": round(rss_mb() - rss_before),
        "state_mb": round(dir_mb(work), 1),
    }
    for db in dbs:
        db.close()
    shutil.rmtree(work, ignore_errors=True)
    return result


# --- end to end on the broker --------------------------------------------------------------------


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


async def firing(
    bootstrap: str,
    profile: str,
    n: int,
    duration_s: float,
    transactions: bool = True,
    rate: bool = False,
    workers: int = 1,
) -> dict[str, Any]:
    """N schedules through the commands topic, then a window of `duration_s` read at a consumer of the output
    topic. `transactions`: the worker's default (on Kafka: exactly-once by transactions); False: at-least-once
    (SCHEDULER_TRANSACTIONS=off), to measure what transactions cost. `rate`: the ceiling's workload (n
    schedules each firing every second) instead of the README's. `workers`: that many workers of one app
    share the partitions; with more than one, one of them is then stopped and the takeover measured."""
    from tests.helpers import TopicReader

    work = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    app_id = f"bench{uuid.uuid4().hex[:6]}"
    topic = f"{app_id}-out"
    schedules, period = (
        (every_second(n, topic), lambda i: (1000, 0)) if rate else (workload(n, topic), readme_period)
    )
    records = insert_records(schedules)  # encoded before the clock starts: the bench's work, not the worker's
    del schedules
    env = {} if transactions else {"SCHEDULER_TRANSACTIONS": "off"}
    group = [Worker(bootstrap, profile, app_id, work / f"w{i}", **env) for i in range(workers)]
    try:
        for i, w in enumerate(group):
            w.proc.start()
            await asyncio.to_thread(w.proc.wait_ready, 180, 8 if i == 0 else 0)
        owned = await asyncio.to_thread(wait_spread, group)
        started = time.monotonic()
        await send_commands(bootstrap, app_id, records)
        del records
        if math.isnan(await asyncio.to_thread(wait_all_applied, group, n, 900)):
            raise TimeoutError(f"{n} INSERTs not all applied in 900 s")
        live_s = time.monotonic() - started  # from the first INSERT produced until all are applied
        # from the end: what fired while the schedules were being inserted is not this measurement's backlog
        async with TopicReader(bootstrap, topic, start="latest", read_committed=profile == "kafka") as reader:
            await asyncio.sleep(3)
            t0 = now_ms()
            first = len(reader.raw)
            # the reader keeps every record it got: the bench's own full collections would walk them all
            # and stamp a burst late (~100 ms at 100,000 schedules), a delay of the measure, not the broker
            gc.freeze()
            gc.disable()
            try:
                await asyncio.sleep(duration_s)
            finally:
                gc.enable()
                gc.unfreeze()
            t1 = now_ms()
            records = reader.records[first:]
            received = reader.received[first : first + len(records)]
            raw = reader.raw[first : first + len(records)]
            rss = [rss_mb(w.proc.proc.pid) if w.proc.proc else 0.0 for w in group]
            takeover = await stop_one(group, reader, owned) if workers > 1 else {}
        lo, hi = t0 + 2_000, t1 - 5_000
        in_window = [(r, got, msg.timestamp) for r, got, msg in zip(records, received, raw, strict=False)
                     if lo <= r.due_at <= hi]  # fmt: skip
        window = [r for r, _, _ in in_window]
        fired = {r.job_id for r in window}
        expected = expected_in(n, period, lo, hi)
        lateness = [got - r.due_at for r, got, _ in in_window]  # at the consumer of the output topic
        produce_lateness = [r.fired_at - r.due_at for r in window]  # the worker's clock when it produced
        # the record's CreateTime (the worker's producer) to its arrival here: what the broker and the
        # reader add (a fire sent ahead of its instant, when the punctuator does: includes the wait for it)
        delivery = [got - created for _, got, created in in_window]
        # lateness running away: the window's last third against its first
        third = (hi - lo) // 3
        early = [got - r.due_at for r, got, _ in in_window if r.due_at < lo + third]
        late = [got - r.due_at for r, got, _ in in_window if r.due_at >= hi - third]
        state = sum(dir_mb(work / f"w{i}" / "data") for i in range(workers))
    finally:
        for w in group:
            w.__exit__()
    shutil.rmtree(work, ignore_errors=True)
    layer = "end to end" if transactions or profile != "kafka" else "end to end, no transactions"
    result: dict[str, Any] = {
        "layer": layer if workers == 1 else f"{layer}, {workers} workers",
        "schedules": n,
        "expected_fires_per_s": n if rate else round(expected_fires_per_s(n)),
        "fires_per_s": round(len(records) / ((t1 - t0) / 1000)),
        "lateness_p50_ms": pct(lateness, 0.5),
        "lateness_p99_ms": pct(lateness, 0.99),
        "lateness_max_ms": max(lateness) if lateness else None,
        "lateness_drift_ms": (pct(late, 0.5) or 0) - (pct(early, 0.5) or 0),
        "produce_lateness_p99_ms": pct(produce_lateness, 0.99),
        "delivery_p50_ms": pct(delivery, 0.5),
        "delivery_p99_ms": pct(delivery, 0.99),
        "missed": max(0, expected - len(fired)),
        "inserts_per_s": round(n / live_s),
        "live_after_s": round(live_s, 1),
        "rss_mb": round(sum(rss)),
        "state_mb": round(state, 1),
    }
    if workers > 1:
        result.update({"workers": workers, "rss_mb_per_worker": [round(r) for r in rss],
                       "partitions_per_worker": [len(p) for p in owned.values()], **takeover})  # fmt: skip
    return result


async def stop_one(group: list[Worker], reader: Any, owned: dict[int, list[int]]) -> dict[str, Any]:
    """Stop the last worker cleanly (a deploy, a scale-in): seconds from the stop until every one of its
    partitions fired again (the fire's CreateTime, by the schedule's partition), and until all 8 did."""
    from scheduler.worker.app import partition_for

    gone = set(owned[len(group) - 1])
    first = len(reader.raw)
    group[-1].proc.stop()
    stopped = now_ms()
    resumed: dict[int, int] = {}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(resumed) < 8:
        await asyncio.sleep(0.5)
        for msg, r in zip(reader.raw[first:], reader.records[first:], strict=False):
            partition = partition_for(key_bytes(r.key), 8)
            if msg.timestamp > stopped and partition not in resumed:
                resumed[partition] = msg.timestamp
        first = len(reader.records)

    def after(parts: set[int]) -> float | None:
        return (
            round((max(resumed[p] for p in parts) - stopped) / 1000, 1) if parts <= resumed.keys() else None
        )

    return {"takeover_s": after(gone), "all_partitions_firing_s": after(set(range(8)))}


async def commands(bootstrap: str, profile: str, n: int, transactions: bool = True) -> dict[str, Any]:
    """The commands ceiling: n INSERTs of hourly schedules (few fires meanwhile) produced at once as fast
    as the bench can; INSERTs/s from the first produced to the last applied."""
    work = Path(tempfile.mkdtemp(prefix="bench-cmd-"))
    app_id = f"bench{uuid.uuid4().hex[:6]}"
    schedules = [dataclasses.replace(s, trigger=CronTrigger(hourly_cron_of(i)))
                 for i, s in enumerate(workload(n, f"{app_id}-out"))]  # fmt: skip
    records = insert_records(schedules)
    del schedules
    env = {} if transactions else {"SCHEDULER_TRANSACTIONS": "off"}
    try:
        with Worker(bootstrap, profile, app_id, work, **env) as w:
            assert w.proc.proc is not None
            worker = psutil.Process(w.proc.proc.pid)
            cpu_from = sum(worker.cpu_times()[:2])  # (the worker's own, every thread: its µs per command)
            started = time.monotonic()
            produced_s = await send_commands(bootstrap, app_id, records)
            if math.isnan(await asyncio.to_thread(wait_applied, w, n, 900)):
                raise TimeoutError(f"{n} INSERTs not all applied in 900 s")
            took = time.monotonic() - started
            cpu_s = sum(worker.cpu_times()[:2]) - cpu_from
            rss = rss_mb(w.proc.proc.pid)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"inserts": n, "transactions": transactions and profile == "kafka",
            "produced_in_s": round(produced_s, 1), "applied_in_s": round(took, 1),
            "inserts_per_s": round(n / took), "rss_mb": round(rss),
            "worker_cpu_s": round(cpu_s, 1), "worker_cpu_us_per_insert": round(cpu_s / n * 1e6, 1)}  # fmt: skip


async def ceiling(bootstrap: str, profile: str, rates: list[int], duration_s: float) -> list[dict[str, Any]]:
    """Raise the fire rate (n schedules each firing every second) until lateness runs away: a step is
    sustained when nothing is missed, p99 stays under a second and the window's last third is not later
    than its first by more than 250 ms at p50. Stops after the first step that is not."""
    steps = []
    for n in sorted(rates):
        r = await firing(bootstrap, profile, n, duration_s, rate=True)
        r["sustained"] = (
            r["missed"] == 0 and (r["lateness_p99_ms"] or 0) <= 1000 and r["lateness_drift_ms"] <= 250
        )
        r["layer"] = "ceiling (every second)"
        steps.append(r)
        print(json.dumps(r), flush=True)
        if not r["sustained"]:
            break
    return steps


async def lists(bootstrap: str, profile: str, n: int, requests: int = 200) -> dict[str, Any]:
    """GET /schedules?tenant=bench&limit=50 with N schedules on the worker, 1,000 of them the tenant's: the
    latency of the first page and of each page after it (following `next`), one request at a time, then
    requests/s with 8 in flight. A page costs what it holds, so the figures should not grow with N."""
    import httpx

    work = Path(tempfile.mkdtemp(prefix="bench-lists-"))
    app_id = f"bench{uuid.uuid4().hex[:6]}"
    daily = CronTrigger("0 0 3 * * *")  # (nothing fires meanwhile)
    schedules = [
        Schedule(ScheduleKey("bench" if i < 1_000 else "other", f"s{i:07d}"), daily, f"{app_id}-out")
        for i in range(n)
    ]
    records = insert_records(schedules)
    with Worker(bootstrap, profile, app_id, work) as w:
        await send_commands(bootstrap, app_id, records)
        if math.isnan(await asyncio.to_thread(wait_applied, w, n, 900)):
            raise TimeoutError(f"{n} INSERTs not all applied in 900 s")
        async with httpx.AsyncClient(base_url=w.proc.url, timeout=30) as client:
            params = {"tenant": "bench", "limit": "50"}
            await client.get("/schedules", params=params)  # (the tenant counts, once per assignment)
            first, after = [], []
            for _ in range(requests // 20):
                cursor = None
                for page in range(20):
                    t0 = time.perf_counter()
                    r = await client.get(
                        "/schedules", params={**params, **({"cursor": cursor} if cursor else {})}
                    )
                    (first if page == 0 else after).append(round((time.perf_counter() - t0) * 1000, 1))
                    r.raise_for_status()
                    cursor = r.json()["next"]
            done = [0]

            async def load(until: float) -> None:
                while time.monotonic() < until:
                    (await client.get("/schedules", params=params)).raise_for_status()
                    done[0] += 1

            until = time.monotonic() + 5
            await asyncio.gather(*(load(until) for _ in range(8)))
    shutil.rmtree(work, ignore_errors=True)
    return {
        "schedules": n,
        "tenant_schedules": 1_000,
        "first_page_p50_ms": pct(first, 0.5),  # type: ignore[arg-type]
        "first_page_p99_ms": pct(first, 0.99),  # type: ignore[arg-type]
        "next_pages_p50_ms": pct(after, 0.5),  # type: ignore[arg-type]
        "next_pages_p99_ms": pct(after, 0.99),  # type: ignore[arg-type]
        "requests_per_s_8_in_flight": round(done[0] / 5),
    }


async def http_creates(
    bootstrap: str, profile: str, size: int, one_each: bool = True
) -> list[dict[str, Any]]:
    """Schedules created over HTTP by one client (scheduler.client.HttpClient.create_many, as `scheduler
    schedules create -f` does), to all applied, on a worker warmed by 2,000 such schedules: one POST
    /schedules each with 16 in flight (as before the batch endpoint; unless not `one_each`), then POST
    /schedules:batch, 500 a request; each `size` schedules of its own tenant. A row's worker CPU per schedule
    is its HTTP side and its applying."""
    from scheduler.client.http import HttpClient

    work = Path(tempfile.mkdtemp(prefix="bench-http-"))
    app_id = f"bench{uuid.uuid4().hex[:6]}"
    rows = []
    try:
        with Worker(bootstrap, profile, app_id, work) as w:
            worker = psutil.Process(w.proc.proc.pid)
            ways = (("warm-up", 500), ("one POST each, 16 in flight", 1), ("batches of 500", 500))
            for how, batch_size in ways if one_each else (ways[0], ways[2]):
                tenant = f"http{batch_size}" if how != "warm-up" else "warm"
                n = 2_000 if how == "warm-up" else size
                bodies = [{"tenant": tenant, "name": f"s{i:07d}", "topic": f"{app_id}-out",
                           "trigger": {"type": "cron", "expression": hourly_cron_of(i)}} for i in range(n)]  # fmt: skip
                cpu_from = sum(worker.cpu_times()[:2])
                async with HttpClient(w.proc.url, timeout_s=120) as client:
                    result = await client.create_many(bodies, 16, batch_size=batch_size)
                if result.failures or not result.applied:
                    raise RuntimeError(f"{how}: {len(result.failures)} failed, applied {result.applied}")
                cpu_us = (sum(worker.cpu_times()[:2]) - cpu_from) * 1e6 / n  # (HTTP side and applying)
                if how == "warm-up":
                    continue
                rows.append({"how": how, "schedules": n, "seconds": round(result.seconds, 1),
                             "schedules_per_s": round(n / result.seconds),
                             "worker_cpu_us_per_schedule": round(cpu_us)})  # fmt: skip
                print(json.dumps(rows[-1]), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def partition_schedules(n: int, out: str) -> list[Schedule]:
    """n schedules of bench/apps/workflow/etl, each triggered by a partition of its own dataset
    bench.dNNNNNN, launching to `out`."""
    program = ProgramId.parse("bench/apps/workflow/etl")
    return [
        Schedule(ScheduleKey("bench", f"e{i:06d}"), PartitionTrigger(f"bench.d{i:06d}"), out,
                 enabled=True, program=program)
        for i in range(n)
    ]  # fmt: skip


async def events(
    bootstrap: str, profile: str, n: int, count: int, transactions: bool = True
) -> dict[str, Any]:
    """Event -> launch request, from the event's produce time to the launch request's timestamp (`p50_ms`...:
    when the job hop produced it) and to its arrival at a consumer (`arrival_*`: with transactions it is
    visible once the job hop's transaction committed). `transactions` as for firing."""
    from tests.helpers import Api, TopicReader, decode_launch

    work = Path(tempfile.mkdtemp(prefix="bench-events-"))
    app_id = f"bench{uuid.uuid4().hex[:6]}"
    out = f"{app_id}-launches"
    env = {} if transactions else {"SCHEDULER_TRANSACTIONS": "off"}
    with Worker(bootstrap, profile, app_id, work, **env) as w:
        async with Api(w.proc.url) as api:
            await api.register("bench/apps/workflow/etl")
            schedules = partition_schedules(n, out)
            t0 = time.monotonic()
            await insert_all(bootstrap, app_id, schedules)  # through the commands topic
            await asyncio.to_thread(wait_applied, w, n, 900)
            # measured once the trigger index holds every schedule: events, not index writes, are measured
            indexed_s = await index_complete(api, n, t0, 900)
            await api.indexed((await api.client.get("/schedules/bench/e000000")).json())
            latencies, arrivals = [], []
            async with TopicReader(
                bootstrap, out, decode_launch, read_committed=profile == "kafka"
            ) as launches:
                for k in range(count):
                    i = (k * 7919) % n
                    # its index entry is written a hop after the schedule: wait for it, outside the measurement
                    await api.indexed((await api.client.get(f"/schedules/bench/e{i:06d}")).json(), 900)
                    sent = now_ms()
                    await api.partitions(f"bench.d{i:06d}", f"p{k}")
                    await launches.wait_for(lambda r, k=k: len(r) > k, timeout_s=30)
                    latencies.append(launches.raw[k].timestamp - sent)
                    arrivals.append(launches.received[k] - sent)
                    await asyncio.sleep(0.02)
    shutil.rmtree(work, ignore_errors=True)
    return {"schedules": n, "events": count, "transactions": transactions and profile == "kafka",
            "p50_ms": pct(latencies, 0.5), "p99_ms": pct(latencies, 0.99), "max_ms": max(latencies),
            "arrival_p50_ms": pct(arrivals, 0.5), "arrival_p99_ms": pct(arrivals, 0.99),
            "index_complete_s": indexed_s}  # fmt: skip


async def index_complete(api: Any, n: int, t0: float, timeout_s: float) -> float | None:
    """Seconds from t0 until /metrics counts n trigger-index entries (None: not within timeout_s)."""
    pattern = re.compile(r'^scheduler_table_entries\{table="trigger-index"\} (\S+)$', re.M)
    while time.monotonic() - t0 < timeout_s:
        found = pattern.search((await api.client.get("/metrics")).text)
        if found and float(found.group(1)) >= n:
            return round(time.monotonic() - t0, 1)
        await asyncio.sleep(2)
    return None


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


# --- the peer: APScheduler 3.x --------------------------------------------------------------------


async def peer(n: int, duration_s: float) -> dict[str, Any]:
    """The same workload in APScheduler 3.x: AsyncIOScheduler, memory job store, default misfire grace (1 s).
    Lateness = submission time - scheduled run time, from its own events; misses from EVENT_JOB_MISSED."""
    import logging

    from apscheduler.events import EVENT_JOB_MISSED, EVENT_JOB_SUBMITTED
    from apscheduler.schedulers.asyncio import AsyncIOScheduler
    from apscheduler.triggers.cron import CronTrigger as APCron

    logging.getLogger("apscheduler").setLevel(logging.ERROR)  # it logs every missed run
    lateness: list[int] = []
    missed = [0]
    scheduler = AsyncIOScheduler(timezone="UTC")

    def on_event(event: Any) -> None:
        if event.code == EVENT_JOB_MISSED:
            missed[0] += 1
            return
        now = now_ms()
        for due in event.scheduled_run_times:
            lateness.append(now - int(due.timestamp() * 1000))

    scheduler.add_listener(on_event, EVENT_JOB_MISSED | EVENT_JOB_SUBMITTED)
    rss_before = rss_mb()
    for i in range(n):
        second, minute, hour, day, month, _ = cron_of(i).split()
        trigger = APCron(second=second, minute=minute, hour=hour, day=day, month=month, timezone="UTC")
        scheduler.add_job(_noop, trigger, id=f"s{i}")
    scheduler.start()
    await asyncio.sleep(2)
    lateness.clear()
    missed[0] = 0
    await asyncio.sleep(duration_s)
    measured = list(lateness)
    scheduler.shutdown(wait=False)
    expected = round(expected_fires_per_s(n) * duration_s)
    return {
        "layer": "APScheduler 3.x",
        "schedules": n,
        "expected_fires_per_s": round(expected_fires_per_s(n)),
        "fires_per_s": round(len(measured) / duration_s),
        "lateness_p50_ms": pct(measured, 0.5),
        "lateness_p99_ms": pct(measured, 0.99),
        "lateness_max_ms": max(measured) if measured else None,
        "missed": missed[0],
        "missed_share": round(missed[0] / expected, 3) if expected else None,
        "rss_mb": round(rss_mb()),
        "heap_rss_mb": round(rss_mb() - rss_before),
    }


async def _noop() -> None:
    return None


def spread(n: int) -> dict[str, Any]:
    """Where N daily schedules with `spreadMs` a day fire in a day: flat, or bunched."""
    import statistics

    day = 86_400_000
    start = 1_795_305_600_000  # a midnight (UTC)
    per_second = [0] * 86_400
    t0 = time.perf_counter()
    for i in range(n):
        s = Schedule(
            ScheduleKey(f"tenant-{i % 97}", f"feed-{i}"), CronTrigger("0 0 0 * * *"), "out", spread_ms=day
        )
        due = ScheduleState(s, start - 1, start - 1, start - 1).evaluator().next_due(start - 1)
        assert due is not None and start <= due < start + day
        per_second[(due - start) // 1000] += 1
    elapsed = time.perf_counter() - t0
    per_minute = [sum(per_second[m * 60 : m * 60 + 60]) for m in range(1440)]
    return {
        "schedules": n,
        "mean_per_s": round(n / 86_400, 3),
        "max_per_s": max(per_second),
        "seconds_with_none": per_second.count(0),
        "mean_per_min": round(n / 1440, 1),
        "min_per_min": min(per_minute),
        "max_per_min": max(per_minute),
        "stdev_per_min": round(statistics.pstdev(per_minute), 1),
        "poisson_stdev_per_min": round(math.sqrt(n / 1440), 1),  # what uniform random slots would give
        "unspread_max_per_s": n,  # the same schedules without spreadMs: every one at midnight
        "computed_in_s": round(elapsed, 2),
        "per_minute": per_minute,
    }


def spread_report(r: dict[str, Any], out: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3))
    ax.bar(range(1440), r["per_minute"], width=1.0)
    ax.axhline(r["mean_per_min"], color="black", linewidth=0.8)
    ax.set_xlabel("minute of the day (UTC)")
    ax.set_ylabel("fires")
    ax.set_title(f"{r['schedules']:,} daily schedules with spreadMs = 1 day")
    fig.tight_layout()
    fig.savefig(out / "spread.png", dpi=100)
    plt.close(fig)
    return (
        f'Measured {r["date"]} on {r["machine"]} with `{r["command"]}`: {r["schedules"]:,} daily "anytime" '
        f"schedules (a daily cron, `spreadMs` 86400000). Per second: mean {r['mean_per_s']}, max "
        f"{r['max_per_s']} (without spread: {r['unspread_max_per_s']:,} at midnight). Per minute: mean "
        f"{r['mean_per_min']}, min {r['min_per_min']}, max {r['max_per_min']}, standard deviation "
        f"{r['stdev_per_min']} (uniformly random slots: {r['poisson_stdev_per_min']}). Their instants were "
        f"computed in {r['computed_in_s']} s by the punctuator's evaluator.\n\n"
        f"![fires per minute of the day]({doc_image(out / 'spread.png')})\n"
    )


# --- report ---------------------------------------------------------------------------------------


def table(results: dict[str, Any]) -> str:
    rows = results["firing"]
    lines = [
        f"Measured {results['date']} on {results['machine']} with `{results['command']}` "
        f"({results.get('duration_s', '?')} s per firing scenario); broker: {results['broker']}.",
        "",
        "| layer | schedules | expected fires/s | fires/s | lateness p50 ms | p99 ms | max ms | missed | RSS MB | state on disk MB | assign s | CPU µs/fire |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['layer']} | {r['schedules']:,} | {r['expected_fires_per_s']:,} | {r['fires_per_s']:,} | "
            f"{r['lateness_p50_ms']} | {r['lateness_p99_ms']} | {r['lateness_max_ms']} | {r.get('missed', '')} | "
            f"{r.get('rss_mb', '')} | {r.get('state_mb', '')} | {r.get('assign_s', r.get('rebuild_s', ''))} | "
            f"{r.get('cpu_us_per_fire', '')} |"
        )
    lines.append("")
    for r in rows:
        if "inserts_per_s" in r:
            on = f" ({r['broker']})" if "broker" in r else ""
            lines.append(
                f"- commands{on}: {r['schedules']:,} INSERTs through the commands topic, {r['inserts_per_s']:,}/s, "
                f"all live after {r['live_after_s']} s"
            )
    if results.get("ceiling"):
        lines += [
            "",
            "The ceiling, end to end (N schedules each firing every second: a burst of N a second; each step "
            "a fresh worker; sustained: nothing missed, p99 ≤ 1 s, the window's last third not later than its "
            "first by more than 250 ms at p50):",
            "",
            "| fires/s asked | fires/s | lateness p50 ms | p99 ms | max ms | drift ms | missed | produce p99 ms | delivery p99 ms | RSS MB | sustained |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in results["ceiling"]:
            lines.append(
                f"| {r['expected_fires_per_s']:,} | {r['fires_per_s']:,} | {r['lateness_p50_ms']} | "
                f"{r['lateness_p99_ms']} | {r['lateness_max_ms']} | {r['lateness_drift_ms']} | {r['missed']} | "
                f"{r['produce_lateness_p99_ms']} | {r['delivery_p99_ms']} | {r['rss_mb']} | "
                f"{'yes' if r['sustained'] else 'no'} |"
            )
    if results.get("workers"):
        lines += [
            "",
            "Workers sharing one app's schedules (the README workload; all on this machine's 2 cores with the "
            "broker; then the last worker stops cleanly and the others take its partitions over):",
            "",
            "| workers | schedules | fires/s | lateness p50 ms | p99 ms | missed | partitions per worker | RSS MB per worker | takeover s | all partitions firing s |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in results["workers"]:
            lines.append(
                f"| {r.get('workers', 1)} | {r['schedules']:,} | {r['fires_per_s']:,} | {r['lateness_p50_ms']} | "
                f"{r['lateness_p99_ms']} | {r['missed']} | {r.get('partitions_per_worker', [8])} | "
                f"{r.get('rss_mb_per_worker', [r['rss_mb']])} | {r.get('takeover_s', '')} | "
                f"{r.get('all_partitions_firing_s', '')} |"
            )
    lines.append("")
    for r in results.get("commands", []):
        lines.append(
            f"- commands ceiling ({r.get('broker', '')}, transactions {'on' if r['transactions'] else 'off'}): "
            f"{r['inserts']:,} INSERTs produced at once in {r['produced_in_s']} s, all applied after "
            f"{r['applied_in_s']} s: {r['inserts_per_s']:,}/s (RSS {r['rss_mb']} MB"
            + (f", worker CPU {r['worker_cpu_us_per_insert']} µs an INSERT)" if "worker_cpu_s" in r else ")")
        )
    for r in results.get("http", []):
        lines.append(
            f"- schedules created over HTTP ({r.get('broker', '')}), {r['how']}: {r['schedules']:,} in "
            f"{r['seconds']} s to all applied, {r['schedules_per_s']:,}/s"
        )
    for name in ("events", "lists", "recovery", "failed"):
        for r in results.get(name, []):
            lines.append(f"- {name}: " + ", ".join(f"{k} {v}" for k, v in r.items()))
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for layer in sorted({r["layer"] for r in results["firing"]}):
        rows = sorted((r for r in results["firing"] if r["layer"] == layer and r["lateness_p99_ms"] is not None),
                      key=lambda r: r["schedules"])  # fmt: skip
        if rows:
            ax.plot(
                [r["schedules"] for r in rows],
                [max(r["lateness_p99_ms"], 1) for r in rows],
                marker="o",
                label=layer,
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("live cron schedules")
    ax.set_ylabel("fire lateness p99, ms")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_scale(results: dict[str, Any], path: Path) -> None:
    """RSS, state on disk and fires/s against the number of schedules, per layer that reports them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    panels = (("rss_mb", "RSS, MB"), ("state_mb", "state on disk, MB"), ("fires_per_s", "fires/s"))
    layers = sorted({r["layer"] for r in results["firing"]})
    for ax, (field, label) in zip(axes, panels, strict=True):
        for i, layer in enumerate(layers):
            rows = sorted((r for r in results["firing"] if r["layer"] == layer and r.get(field)),
                          key=lambda r: r["schedules"])  # fmt: skip
            if len(rows) > 1 or (rows and field != "fires_per_s"):
                xs, ys = [r["schedules"] for r in rows], [r[field] for r in rows]
                ax.plot(xs, ys, marker="o", label=layer, color=f"C{i % 10}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("live schedules")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def update_readme(readme: Path, text: str, block: str = "bench") -> None:
    begin, end = f"<!-- {block}:begin -->", f"<!-- {block}:end -->"
    if not readme.exists():
        return
    s = readme.read_text()
    if begin in s and end in s:
        s = s[: s.index(begin) + len(begin)] + "\n" + text + s[s.index(end) :]
        readme.write_text(s)


def doc_image(path: Path) -> str:
    """A plot's link on the docs site: the site serves the repository's result folders under assets/
    (docs/hooks.py); a folder outside the repository keeps its own path."""
    return str(path) if path.is_absolute() else f"assets/{path}"


async def isolated(kind: str, n: int, duration_s: float) -> dict[str, Any]:
    """An in-process scenario in a fresh interpreter, so its memory figures are its own."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.bench.run", "--single", f"{kind}:{n}", "--duration", str(duration_s),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    sys.stderr.write(err.decode(errors="replace"))
    line = next((x for x in out.decode().splitlines() if x.startswith("RESULT ")), None)
    if line is None:  # (e.g. a peer's tool missing: its message, not a StopIteration)
        raise RuntimeError(
            f"{kind} {n}: exit {proc.returncode}: {err.decode(errors='replace')[-500:].strip()}"
        )
    return dict(json.loads(line.removeprefix("RESULT ")))


@contextlib.contextmanager
def started_broker(kind: str) -> Iterator[tuple[str, str, str]]:
    """(bootstrap servers, profile, description) of a broker this bench starts and stops: Apache Kafka from
    its jars (1 node, KRaft, the version the tests use) or the embedded Tansu broker."""
    if kind == "kafka":
        from scheduler.kafka.kafka_server import KAFKA_VERSION, KafkaCluster

        with KafkaCluster(Path(tempfile.mkdtemp(prefix="bench-kafka-")), heap_mb=1024) as cluster:
            yield cluster.bootstrap_servers, "kafka", f"Apache Kafka {KAFKA_VERSION} (1 node)"
    else:
        from scheduler.kafka.broker import EmbeddedBroker

        with EmbeddedBroker() as broker:
            yield broker.bootstrap_servers, "tansu", "embedded Tansu"


async def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{psutil.cpu_count()} cores, {round(psutil.virtual_memory().total / 2**30)} GiB, "
        f"Python {platform.python_version()}",
        "command": "make bench"
        if len(sys.argv) == 1
        else " ".join(["python -m tests.bench.run", *sys.argv[1:]]),
        "duration_s": args.duration,
        "brokers": [],
        "firing": [],
    }

    async def scenario(section: str, label: str, measure: Any, broker: str | None = None) -> None:
        """One scenario; a failure is recorded with its reason, and the others still run."""
        print(label, flush=True)
        try:
            got = await measure
            for result in got if isinstance(got, list) else [got]:
                if broker is not None:
                    result = {**result, "broker": broker}
                    if section == "firing":
                        result["layer"] = f"{result['layer']} ({broker})"
                results.setdefault(section, []).append(result)
        except Exception as exc:  # noqa: BLE001 - a benchmark reports what went wrong and goes on
            print(f"{label} failed: {exc!r}", flush=True)
            results.setdefault("failed", []).append({"scenario": label, "error": repr(exc)[:300]})

    kinds = (
        ("core", args.core),
        ("core-hourly", args.core_hourly),
        ("peer", args.peer),
        ("celery", args.celery),
    )
    for kind, sizes in kinds:
        for n in sizes:
            await scenario("firing", f"{kind} {n}", isolated(kind, n, args.duration))
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    brokers = ["external"] if external else args.brokers.split(",")
    for i, kind in enumerate(brokers):
        if kind == "external":
            context: Any = contextlib.nullcontext(
                (
                    external,
                    os.environ.get("SCHEDULER_BROKER_PROFILE", "kafka"),
                    f"KAFKA_BOOTSTRAP_SERVERS={external}",
                )
            )
        else:
            context = started_broker(kind)
        with context as (bootstrap, profile, description):
            results["brokers"].append(description)
            name = "Kafka" if profile == "kafka" else "Tansu"
            for n in args.e2e:
                await scenario(
                    "firing",
                    f"end to end {n} on {description}",
                    firing(bootstrap, profile, n, args.duration),
                    name,
                )
                if profile == "kafka":  # what exactly-once costs: the same without transactions
                    await scenario(
                        "firing",
                        f"end to end {n} on {description}, no transactions",
                        firing(bootstrap, profile, n, args.duration, transactions=False),
                        name,
                    )
            for n in args.lists if i == 0 else []:
                await scenario("lists", f"lists {n} on {description}", lists(bootstrap, profile, n), name)
            for n in args.http if i == 0 else []:
                await scenario(
                    "http", f"HTTP creates {n} on {description}", http_creates(bootstrap, profile, n), name
                )
            for n in args.events:
                await scenario(
                    "events", f"events {n} on {description}", events(bootstrap, profile, n, 100), name
                )
                if profile == "kafka":  # what exactly-once costs the event path
                    await scenario(
                        "events",
                        f"events {n} on {description}, no transactions",
                        events(bootstrap, profile, n, 100, transactions=False),
                        name,
                    )
            for n in args.commands if i == 0 else []:
                for tx in (True, False) if profile == "kafka" else (True,):
                    await scenario(
                        "commands", f"commands {n} (transactions={tx}) on {description}",
                        commands(bootstrap, profile, n, tx), name,
                    )  # fmt: skip
            if args.ceiling and i == 0:
                await scenario(
                    "ceiling", f"ceiling {args.ceiling} on {description}",
                    ceiling(bootstrap, profile, args.ceiling, args.duration), name,
                )  # fmt: skip
            for k in args.workers if i == 0 else []:
                await scenario(
                    "workers", f"{k} workers, {args.workers_schedules} schedules on {description}",
                    firing(bootstrap, profile, args.workers_schedules, args.duration, workers=k), name,
                )  # fmt: skip
            # the 1M changelog is restored on the first broker only (~5 min each)
            for n in args.recovery_seeded if i == 0 else []:
                for hourly in (False, True):
                    await scenario(
                        "recovery", f"recovery {n} (seeded changelog, hourly={hourly}) on {description}",
                        recovery_seeded(bootstrap, profile, n, hourly), name,
                    )  # fmt: skip
            for n in args.recovery:
                for standby in (False, True):
                    await scenario(
                        "recovery", f"recovery {n} standby={standby} on {description}",
                        recovery(bootstrap, profile, n, standby), name,
                    )  # fmt: skip
    results["broker"] = " and ".join(results["brokers"])
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--core", type=int, nargs="*", default=[1_000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--peer", type=int, nargs="*", default=[1_000, 10_000, 100_000])
    parser.add_argument(
        "--core-hourly",
        type=int,
        nargs="*",
        default=[100_000, 1_000_000],
        help="the core on a sparse workload: each schedule once an hour (memory should not grow with N)",
    )
    parser.add_argument(
        "--celery", type=int, nargs="*", default=[1_000, 10_000, 100_000], help="Celery beat + RedBeat"
    )
    parser.add_argument("--e2e", type=int, nargs="*", default=[1_000, 10_000, 100_000])
    parser.add_argument("--events", type=int, nargs="*", default=[1_000, 100_000])
    parser.add_argument("--http", type=int, nargs="*", default=[5_000], help="schedules created over HTTP")
    parser.add_argument(
        "--http-batches-only", action="store_true", help="with --only http: no row of one POST each"
    )
    parser.add_argument(
        "--lists", type=int, nargs="*", default=[1_000, 100_000], help="GET /schedules pages (first broker)"
    )
    parser.add_argument("--recovery", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument(
        "--ceiling",
        type=int,
        nargs="*",
        default=[5_000, 10_000, 20_000, 40_000],
        help="fire rates tried in turn end to end (schedules firing every second; first broker) until one is not sustained",
    )
    parser.add_argument(
        "--commands", type=int, nargs="*", default=[200_000], help="INSERTs produced at once (first broker)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        nargs="*",
        default=[1, 2, 3],
        help="workers sharing the README workload of --workers-schedules (first broker); then one stops",
    )
    parser.add_argument("--workers-schedules", type=int, default=100_000)
    # a changelog written directly (seed_changelog), no standby: 1M INSERTs through commands take ~20 min
    parser.add_argument("--recovery-seeded", type=int, nargs="*", default=[1_000_000])
    parser.add_argument("--duration", type=float, default=60)
    parser.add_argument(
        "--brokers",
        default="kafka,tansu",
        help="the brokers the end-to-end, events and recovery scenarios run on, in order (default: Apache "
        "Kafka from its jars, then the embedded Tansu broker; `--brokers tansu` for Tansu alone); "
        "KAFKA_BOOTSTRAP_SERVERS, when set, replaces them",
    )
    parser.add_argument("--out", type=Path, default=Path("tests/bench/results"))
    parser.add_argument("--readme", type=Path, default=Path("docs/content/benchmarks.md"))
    parser.add_argument("--spread", type=int, default=100_000, help="daily anytime schedules (0: none)")
    parser.add_argument(
        "--only",
        choices=["spread", "http"],
        help="run that scenario alone (http: --http's sizes on Kafka, rows in OUT/http.json)",
    )
    parser.add_argument("--single", help=argparse.SUPPRESS)  # internal: one core/peer scenario, JSON out
    args = parser.parse_args()
    if args.single:
        kind, n = args.single.split(":")
        if kind == "celery":
            from tests.bench import celery_peer

            r = celery_peer.measure(int(n), args.duration, rss_mb, pct, expected_fires_per_s(int(n)))
            print("RESULT " + json.dumps(r))
            return
        if kind == "core-hourly":
            print("RESULT " + json.dumps(asyncio.run(core(int(n), args.duration, hourly=True))))
            return
        scenario = core if kind == "core" else peer
        print("RESULT " + json.dumps(asyncio.run(scenario(int(n), args.duration))))
        return
    if args.spread and (args.only == "spread" or args.only is None):
        r = {
            **spread(args.spread),
            "date": time.strftime("%Y-%m-%d"),
            "machine": f"{psutil.cpu_count()} cores, Python {platform.python_version()}",
            "command": "make bench"
            if len(sys.argv) == 1
            else " ".join(["python -m tests.bench.run", *sys.argv[1:]]),
        }
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "spread.json").write_text(json.dumps(r, indent=2))
        text = spread_report(r, args.out)
        update_readme(args.readme, text, "bench-spread")
        print(text)
    if args.only == "http":
        with started_broker("kafka") as (bootstrap, profile, description):
            rows = [
                row
                for n in args.http
                for row in asyncio.run(http_creates(bootstrap, profile, n, not args.http_batches_only))
            ]
        r = {"rows": rows, "broker": description, "date": time.strftime("%Y-%m-%d"),
             "machine": f"{psutil.cpu_count()} cores, Python {platform.python_version()}",
             "command": " ".join(["python -m tests.bench.run", *sys.argv[1:]])}  # fmt: skip
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "http.json").write_text(json.dumps(r, indent=2))
    if args.only:
        return
    results = asyncio.run(run(args))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    text = table(results)
    plot(results, args.out / "lateness.png")
    plot_scale(results, args.out / "scale.png")
    (args.out / "results.md").write_text(text)
    update_readme(
        args.readme,
        text
        + f"\n![lateness vs schedules]({doc_image(args.out / 'lateness.png')})\n"
        + f"\n![RSS, state on disk and fires/s vs schedules]({doc_image(args.out / 'scale.png')})\n",
    )
    print(text)


if __name__ == "__main__":
    sys.exit(main())
