"""The end-to-end scenarios of `make bench` on a broker (see tests.bench.run): firing, commands, the
ceiling, lists, HTTP creates and events."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import math
import re
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from scheduler.domain.model import (
    CronTrigger,
    PartitionTrigger,
    ProgramId,
    Schedule,
    ScheduleKey,
)
from scheduler.wire.codec import key_bytes
from tests.bench.common import (
    Worker,
    dir_mb,
    every_second,
    expected_fires_per_s,
    expected_in,
    hourly_cron_of,
    insert_all,
    insert_records,
    now_ms,
    pct,
    readme_period,
    rss_mb,
    send_commands,
    wait_all_applied,
    wait_applied,
    wait_spread,
    workload,
)


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
