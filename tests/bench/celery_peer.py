"""The second peer: Celery beat with RedBeat (the Redis-backed beat scheduler), on the bench's workload.

`make bench` starts a Redis (Debian's `redis-server`, no persistence) and a beat process (`celery beat -S
redbeat.RedBeatScheduler`) and stops both by pid; the bench itself reads what beat sends from the broker's
queue (a Redis list: kombu's Redis transport), as the end-to-end rows read the output topic, and takes the
lateness of each task at its arrival there.

Celery's schedules cannot say "second 17 of every minute" (`crontab` has minutes, not seconds): the
workload's crons are interval schedules here — every 5 s, and every 60 s from its second of the minute —
started on those instants. An interval schedule counts its next run from when beat sent the last one, so
a late send makes every later run late too: lateness is measured against the instants the workload asks
for (the k-th task of a schedule against its k-th instant), which is what a user asked for.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from celery import Celery

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6399/0")
QUEUE = "celery"

app = Celery("bench", broker=REDIS_URL)
app.conf.update(
    redbeat_redis_url=REDIS_URL,
    beat_max_loop_interval=1,  # beat looks at least every second (RedBeat's default is 5 min)
    redbeat_lock_timeout=30,
    timezone="UTC",
    broker_connection_retry_on_startup=True,
)


@app.task(name="bench.noop")
def noop(i: int) -> None:
    return None


def period_and_phase(i: int) -> tuple[int, int]:
    """The workload's cron of schedule i (tests.bench.common.cron_of) as (period s, second of the minute)."""
    return (5, 0) if i % 10 == 0 else (60, i % 60)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Redis:
    """A redis-server of the bench's own (no persistence), stopped by pid."""

    def __init__(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise SystemExit("the Celery beat peer needs Debian's redis-server: apt-get install redis-server")
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="bench-redis-"))
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.dir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.url = f"redis://127.0.0.1:{self.port}/0"
        import redis

        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 30
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise
                time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def load_schedules(url: str, n: int, start: datetime) -> None:
    """N RedBeat entries, as RedBeatSchedulerEntry.save writes them, each last run at its instant before
    `start` (so its next run is its first instant after it), a pipeline per 1,000."""
    import redis
    from celery.schedules import schedule
    from redbeat import RedBeatSchedulerEntry
    from redbeat.decoder import RedBeatJSONEncoder

    app.conf.redbeat_redis_url = url
    client = redis.Redis.from_url(url)
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        period, phase = period_and_phase(i)
        base = start.replace(second=phase, microsecond=0) if period == 60 else start.replace(microsecond=0)
        if period == 5:
            base = base.replace(second=base.second - base.second % 5)  # (the 5 s grid of the minute)
        last = base if base < start else base - timedelta(seconds=period)
        entry = RedBeatSchedulerEntry(
            f"s{i}", "bench.noop", schedule(timedelta(seconds=period)), args=[i], app=app, last_run_at=last
        )
        definition = {
            "name": entry.name, "task": entry.task, "args": entry.args, "kwargs": entry.kwargs,
            "options": entry.options, "schedule": entry.schedule, "enabled": True,
        }  # fmt: skip
        pipe.hset(entry.key, "definition", json.dumps(definition, cls=RedBeatJSONEncoder))
        pipe.hset(entry.key, "meta", json.dumps({"last_run_at": last}, cls=RedBeatJSONEncoder))
        pipe.zadd(app.redbeat_conf.schedule_key, {entry.key: entry.score})
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()


class Reader(threading.Thread):
    """Takes every task message off the broker's queue as it arrives: (schedule index, arrival ms)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        import redis

        self.client = redis.Redis.from_url(url)
        self.arrivals: list[tuple[int, int]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            got = self.client.brpop([QUEUE], timeout=0.2)
            if got is None:
                continue
            batch = [got[1]]
            while (more := self.client.rpop(QUEUE, 1000)) and not self.stopped.is_set():
                batch.extend(more)
            now = time.time_ns() // 1_000_000
            for raw in batch:
                headers = json.loads(raw)["headers"]
                self.arrivals.append((int(headers["argsrepr"].strip("[](),")), now))


def measure(n: int, duration_s: float, rss_mb: Any, pct: Any, expected_fires_per_s: float) -> dict[str, Any]:
    """Redis, N schedules, a beat process and the reader; lateness of the tasks that arrive in the
    `duration_s` after a 5 s warm-up, against the instants asked for."""
    redis_server = Redis()
    beat = None
    reader = Reader(redis_server.url)
    reader.start()
    try:
        start = (datetime.now(UTC) + timedelta(seconds=5)).replace(microsecond=0)
        load_schedules(redis_server.url, n, start)
        env = {**os.environ, "BENCH_REDIS_URL": redis_server.url}
        beat = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.bench.celery_peer", "beat", "-S",
             "redbeat.RedBeatScheduler", "--loglevel", "WARNING", "--max-interval", "1"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        t0 = start.timestamp() * 1000
        time.sleep(max(0.0, (t0 - time.time() * 1000) / 1000) + 5)  # its first runs, then measure
        measured_from = time.time_ns() // 1_000_000
        time.sleep(duration_s)
        measured_to = time.time_ns() // 1_000_000
        beat_rss = rss_mb(beat.pid)
    finally:
        if beat is not None:
            beat.terminate()
            try:
                beat.wait(10)
            except subprocess.TimeoutExpired:
                beat.kill()
        reader.stopped.set()
        reader.join(5)
        redis_server.stop()
    # each task against the schedule's latest instant at or before its arrival; the missed ones counted
    lateness = []
    for i, at in reader.arrivals:
        if measured_from <= at <= measured_to:
            period, phase = period_and_phase(i)
            lateness.append((at - phase * 1000) % (period * 1000))
    expected = sum(_instants(*period_and_phase(i), measured_from, measured_to) for i in range(n))
    return {
        "layer": "Celery beat + RedBeat",
        "schedules": n,
        "expected_fires_per_s": round(expected_fires_per_s),
        "fires_per_s": round(len(lateness) / duration_s),
        "lateness_p50_ms": pct(lateness, 0.5),
        "lateness_p99_ms": pct(lateness, 0.99),
        "lateness_max_ms": max(lateness) if lateness else None,
        "missed": max(0, expected - len(lateness)),
        "rss_mb": round(beat_rss),
    }


def _instants(period: int, phase: int, from_ms: int, to_ms: int) -> int:
    """How many instants phase + k * period (seconds) fall in [from_ms, to_ms]."""
    step, offset = period * 1000, phase * 1000
    return (to_ms - offset) // step - (from_ms - offset - 1) // step
