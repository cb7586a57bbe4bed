"""The in-process scenarios of `make bench` (see tests.bench.run): the scheduler core with a null sink,
the peer (APScheduler 3.x) on the same workload, and the spread of daily "anytime" schedules over a day."""

from __future__ import annotations

import asyncio
import gc
import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from scheduler.domain.model import (
    CatchUpPolicy,
    CronTrigger,
    Schedule,
    ScheduleKey,
    ScheduleState,
)
from scheduler.wire.codec import encode_state, key_bytes
from scheduler.wire.fires import decode_fired
from tests.bench.common import (
    cron_of,
    dir_mb,
    expected_fires_per_s,
    hourly_cron_of,
    now_ms,
    pct,
    rss_mb,
)

#: the core scenario measures after a minute of firing: every schedule of the workload was loaded and
#: compiled once (in the first minute after a takeover the horizon loads them as they come due)
CORE_WARM_UP_S = 62
#: the core's workload is written active from this far ahead (build time: ~25 us a schedule here)
CORE_LEAD_MS, CORE_LEAD_US_PER_SCHEDULE = 2_000, 60


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


# --- spread: daily "anytime" schedules over a day -------------------------------------------------


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
