"""The scale-out harness (issue 41 item 5): how fires/s, lateness and CPU go as workers are added.

    python -m tests.bench.scaleout --workers 1 2 4 8 --per-worker 50000 [--partitions 32] [--nodes 1|3]
        [--window 30] [--ingest N] [--out tests/bench/results/scaleout]

For each worker count k it starts k workers of one app (on an Apache Kafka it starts itself: 1 or 3 KRaft
nodes from the jars, transactions on), loads k × N every-second schedules through the commands topic
*before* the window — it waits until all are applied and every worker has caught up with its commands —,
then measures a window of `--window` seconds with one reader process per partition of the output topic
(read_committed; so the readers are not the bottleneck): fires/s, fires expected, missed and repeated (by
schedule and due second), lateness at the readers (p50/p99/max), and per worker its partitions, CPU (cores
over the window, µs per fire) and RSS. JSON and a plot (fires/s and p99 against workers; CPU per worker) go
to --out. Benchmarks report, never assert.

`--ingest N` (issue 41 item 2, commands while firing): at the window's start N INSERTs more are produced to
the commands topic at once (daily schedules, to a topic of their own: none fires in the window); the row
adds how fast they were applied while the workers fired (INSERTs/s from the first produced to the last
applied) — the window's fires and lateness are then those of a worker taking a bulk load meanwhile.

Partitions are the unit of scale-out: a worker count above the partition count idles the rest. Size the
partitions from the largest worker count you plan (4× it: `--partitions`, SCHEDULER_PARTITIONS): the count
cannot change once the app's topics exist (docs/content/design/scale-out.md says how to move to a new one).

On this 2-core machine it runs 1–2 workers of a few thousand schedules (the workers, the readers and the
broker share two cores: the figures say what the machine could give, not a worker's ceiling); on a bigger
machine run the command above.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing as mp
import platform
import shutil
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from scheduler.domain.model import CronTrigger, Schedule, ScheduleKey
from tests.bench.common import Worker, every_second, insert_records, now_ms, send_commands

LATENESS_CAP_MS = 120_000


def _read_partition(bootstrap: str, topic: str, partition: int, window: Any, ready: Any, queue: Any) -> None:
    """A reader process: one partition of the output topic from its end (it says when it is there), until
    the window (set once every reader is ready) ended and its stragglers came in; its counts by (schedule,
    due) and a histogram of lateness (receive − due, ms)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from scheduler.wire.fires import decode_fired

    async def read() -> dict[str, Any]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed",
            fetch_max_wait_ms=50, max_partition_fetch_bytes=8 << 20,
        )  # fmt: skip
        await consumer.start()
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        await consumer.seek_to_end(tp)
        await consumer.position(tp)
        ready.put(partition)
        while window[1] == 0:
            await consumer.getmany(tp, timeout_ms=50)  # (before the window: not counted)
        t0, t1 = window[0], window[1]
        seen: dict[tuple[str, int], int] = {}
        lateness: dict[int, int] = {}
        worst: dict[int, int] = {}  # the window's second -> its latest fire
        try:
            while now_ms() < t1 + 5_000:
                batch = await consumer.getmany(tp, timeout_ms=200)
                at = now_ms()
                for msg in batch.get(tp, []):
                    fire = decode_fired(msg.value)
                    if not t0 <= fire.due_at < t1:
                        continue
                    k = (fire.key.id, fire.due_at)
                    seen[k] = seen.get(k, 0) + 1
                    late = min(max(at - fire.due_at, 0), LATENESS_CAP_MS)
                    lateness[late] = lateness.get(late, 0) + 1
                    second = (fire.due_at - t0) // 1000
                    worst[second] = max(worst.get(second, 0), late)
        finally:
            await consumer.stop()
        return {"fires": sum(seen.values()), "distinct": len(seen), "lateness": lateness, "worst": worst}

    queue.put((partition, asyncio.run(read())))


def _percentile(histogram: dict[int, int], q: float) -> int | None:
    total = sum(histogram.values())
    if total == 0:
        return None
    rank, running = math.ceil(q * total), 0
    for value in sorted(histogram):
        running += histogram[value]
        if running >= rank:
            return value
    return max(histogram)


def _idle(workers: list[Worker], settle_s: float = 3.0, timeout_s: float = 600) -> None:
    """Until no worker's applied-commands count moved for `settle_s` (each has caught up with its commands)."""
    deadline = time.monotonic() + timeout_s
    last: list[int] = []
    since = time.monotonic()
    while time.monotonic() < deadline:
        now = [int((w.proc.health() or {}).get("commandsApplied", 0)) for w in workers]
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= settle_s:
            return
        time.sleep(0.3)


def _applied(workers: list[Worker]) -> int:
    return sum(int((w.proc.health() or {}).get("commandsApplied", 0)) for w in workers)


async def _ingest(bootstrap: str, app_id: str, records: list[tuple[bytes, bytes]], workers: list[Worker],
                  before: int, timeout_s: float) -> float | None:  # fmt: skip
    """Produce the records at once; seconds until the workers applied them all (None: not within timeout_s)."""
    t0 = time.monotonic()
    await send_commands(bootstrap, app_id, records)
    while _applied(workers) < before + len(records):
        if time.monotonic() - t0 > timeout_s:
            return None
        await asyncio.sleep(0.1)
    return time.monotonic() - t0


async def step(
    bootstrap: str, k: int, per_worker: int, partitions: int, window_s: float, work: Path, ingest: int = 0
) -> dict[str, Any]:
    """One worker count: its workers, its schedules loaded, its window measured (with `ingest` INSERTs
    produced at its start)."""
    from scheduler.kafka.producer import TopicCreator

    app_id = f"scale{uuid.uuid4().hex[:6]}"
    topic = f"{app_id}-out"
    n = k * per_worker
    await TopicCreator(bootstrap, partitions, 1).ensure(topic)
    if ingest:  # (created before: a topic a command names first is created while it is applied)
        await TopicCreator(bootstrap, partitions, 1).ensure(f"{app_id}-ingest-out")
    records = insert_records(every_second(n, topic))
    group = [Worker(bootstrap, "kafka", app_id, work / f"k{k}-w{i}", SCHEDULER_PARTITIONS=str(partitions))
             for i in range(k)]  # fmt: skip
    try:
        for i, w in enumerate(group):
            w.proc.start()
            await asyncio.to_thread(w.proc.wait_ready, 240, partitions if i == 0 else 0)
        owned = await asyncio.to_thread(_spread, group, partitions)
        t_load = time.monotonic()
        await send_commands(bootstrap, app_id, records)
        del records
        while sum((w.proc.health() or {}).get("commandsApplied", 0) for w in group) < n:
            if time.monotonic() - t_load > 1_800:
                raise TimeoutError(f"{n} INSERTs not applied in 30 min")
            await asyncio.sleep(0.3)
        load_s = time.monotonic() - t_load
        await asyncio.to_thread(_idle, group)
        daily = CronTrigger("0 0 3 * * *")  # (none fires in the window)
        bulk = insert_records([Schedule(ScheduleKey("ingest", f"i{i:07d}"), daily, f"{app_id}-ingest-out")
                               for i in range(ingest)])  # fmt: skip
        ctx = mp.get_context("spawn")
        queue, ready, window = ctx.Queue(), ctx.Queue(), ctx.Array("q", [0, 0])
        readers = [ctx.Process(target=_read_partition, args=(bootstrap, topic, p, window, ready, queue))
                   for p in range(partitions)]  # fmt: skip
        for r in readers:
            r.start()
        for _ in readers:
            await asyncio.to_thread(ready.get, True, 120)
        t0 = (now_ms() // 1000 + 2) * 1000
        t1 = t0 + int(window_s * 1000)
        window[0], window[1] = t0, t1
        procs = [psutil.Process(w.proc.proc.pid) for w in group if w.proc.proc]
        while now_ms() < t0:
            await asyncio.sleep(0.05)
        cpu0 = [sum(p.cpu_times()[:2]) for p in procs]
        loading = (
            asyncio.ensure_future(_ingest(bootstrap, app_id, bulk, group, n, window_s + 600))
            if bulk
            else None
        )
        while now_ms() < t1:
            await asyncio.sleep(0.1)
        cpu1 = [sum(p.cpu_times()[:2]) for p in procs]
        ingest_s = await loading if loading is not None else None
        rss = [p.memory_info().rss / 1e6 for p in procs]
        got = [await asyncio.to_thread(queue.get, True, window_s + 120) for _ in readers]
        for r in readers:
            r.join(timeout=30)
    finally:
        for w in group:
            w.__exit__()
    fires = sum(g["fires"] for _, g in got)
    distinct = sum(g["distinct"] for _, g in got)
    histogram: dict[int, int] = {}
    for _, g in got:
        for late, count in g["lateness"].items():
            histogram[int(late)] = histogram.get(int(late), 0) + count
    expected = n * int(window_s)
    worst = [max(g["worst"].get(i, 0) for _, g in got) for i in range(int(window_s))]
    cores = [(b - a) / window_s for a, b in zip(cpu0, cpu1, strict=True)]
    return {
        "workers": k,
        "schedules": n,
        "partitions": partitions,
        "partitions_per_worker": [len(owned.get(i, [])) for i in range(k)],
        "expected_fires_per_s": n,
        "fires_per_s": round(fires / window_s),
        "missed": max(0, expected - distinct),
        "repeated": fires - distinct,
        "lateness_p50_ms": _percentile(histogram, 0.5),
        "lateness_p99_ms": _percentile(histogram, 0.99),
        "lateness_max_ms": max(histogram) if histogram else None,
        "cores_per_worker": [round(c, 2) for c in cores],
        "cpu_us_per_fire": round(sum(cores) * 1e6 / max(fires / window_s, 1), 1),
        "rss_mb_per_worker": [round(r) for r in rss],
        "load_s": round(load_s, 1),
        "ingest": ingest,
        "ingest_per_s": round(ingest / ingest_s) if ingest and ingest_s else None,
        "ingest_s": round(ingest_s, 1) if ingest_s else None,
        "latest_ms_by_second": worst,  # (the window's seconds: the latest fire due in each)
    }


def _spread(workers: list[Worker], partitions: int, timeout_s: float = 240) -> dict[int, list[int]]:
    """Until the workers own every partition between them, each some (or all it can): {worker: partitions}."""
    deadline = time.monotonic() + timeout_s
    owned: dict[int, list[int]] = {}
    while time.monotonic() < deadline:
        owned = {i: list((w.proc.health() or {}).get("partitions", [])) for i, w in enumerate(workers)}
        busy = min(len(workers), partitions)
        if sum(bool(p) for p in owned.values()) >= busy and sum(len(p) for p in owned.values()) >= partitions:
            return owned
        time.sleep(0.5)
    raise TimeoutError(f"{partitions} partitions not spread over {len(workers)} workers: {owned}")


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = [r["workers"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    axes[0].plot(ks, [r["fires_per_s"] for r in rows], marker="o", label="fires/s")
    axes[0].plot(ks, [r["expected_fires_per_s"] for r in rows], linestyle="--", label="due/s")
    axes[0].set_ylabel("fires/s")
    axes[1].plot(ks, [r["lateness_p99_ms"] or 0 for r in rows], marker="o", color="C3")
    axes[1].set_ylabel("lateness p99, ms")
    axes[2].plot(ks, [max(r["cores_per_worker"] or [0]) for r in rows], marker="o", color="C2", label="max")
    axes[2].set_ylabel("cores per worker")
    for ax in axes:
        ax.set_ylim(bottom=0)
        ax.set_xlabel("workers")
        ax.set_xticks(ks)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def table(rows: list[dict[str, Any]]) -> str:
    head = "| workers | schedules | partitions each | fires/s (due/s) | missed | repeated | lateness p50 / p99 / max ms | cores per worker | µs CPU per fire | RSS MB per worker | load s | INSERTs while firing (/s) |"
    lines = [head, "|" + " --- |" * 12]
    for r in rows:
        lines.append(
            f"| {r['workers']} | {r['schedules']:,} | {r['partitions_per_worker']} | {r['fires_per_s']:,} "
            f"({r['expected_fires_per_s']:,}) | {r['missed']:,} | {r['repeated']:,} | {r['lateness_p50_ms']} / "
            f"{r['lateness_p99_ms']} / {r['lateness_max_ms']} | {r['cores_per_worker']} | {r['cpu_us_per_fire']} | "
            f"{r['rss_mb_per_worker']} | {r['load_s']} | "
            + (f"{r['ingest']:,} ({r['ingest_per_s'] or 'not all applied'}) |" if r.get("ingest") else "– |")
        )
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from scheduler.kafka.kafka_server import KAFKA_VERSION, KafkaCluster

    work = Path(tempfile.mkdtemp(prefix="scaleout-"))
    rows = []
    try:
        with KafkaCluster(work / "kafka", nodes=args.nodes, heap_mb=1024) as cluster:
            for k in args.workers:
                rows.append(await step(cluster.bootstrap_servers, k, args.per_worker, args.partitions,
                                       args.window, work, args.ingest))  # fmt: skip
                print(table(rows[-1:]).splitlines()[-1], flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "command": "python -m tests.bench.scaleout "
        + " ".join(
            [
                f"--workers {' '.join(map(str, args.workers))}",
                f"--per-worker {args.per_worker}",
                f"--partitions {args.partitions}",
                f"--nodes {args.nodes}",
                f"--window {args.window:g}",
                *([f"--ingest {args.ingest}"] if args.ingest else []),
            ]
        ),  # fmt: skip
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {psutil.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB, "
        f"Python {platform.python_version()}",
        "broker": f"Apache Kafka {KAFKA_VERSION} ({args.nodes} node{'s' if args.nodes > 1 else ''}), transactions on",
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--per-worker", type=int, default=5_000, help="every-second schedules per worker")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--nodes", type=int, choices=(1, 3), default=1)
    parser.add_argument("--window", type=float, default=20.0, help="seconds measured per step")
    parser.add_argument("--ingest", type=int, default=0, help="INSERTs produced at the window's start")
    parser.add_argument("--out", type=Path, default=Path("tests/bench/results/scaleout"))
    args = parser.parse_args()
    results = asyncio.run(main_async(args))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scaleout.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "scaleout.md").write_text(
        f"{results['command']} — {results['date']}, {results['machine']}, {results['broker']}\n\n"
        + table(results["rows"]) + "\n"
    )  # fmt: skip
    plot(results["rows"], args.out / "scaleout.png")
    print((args.out / "scaleout.md").read_text())


if __name__ == "__main__":
    main()
