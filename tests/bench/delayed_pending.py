"""Delayed messages held, not yet due: what one worker needs to hold N of them (issue 38 item 3).

    python -m tests.bench.delayed_pending --n 1000000 10000000 [--payload 100] [--preload] [--out DIR]

One worker (transactions on, 8 partitions) on Apache Kafka (one KRaft node it starts itself). N records in
etf1's shape (key = the id; headers `scheduler-epoch`, `scheduler-target-topic`, `scheduler-target-key`;
a value of `--payload` random bytes) are produced in whole batches onto its delayed topic, due over the day that
starts in an hour: none is delivered during the run, so everything stays pending.

Reported per N: load → all held (from the first record produced until GET /stats/messages counts N) and the
ingest rate it means; the worker's CPU over the load, and per message; the worker's RSS (peak while
loading, and once held); disk: the worker's RocksDB directory and, on the broker, the table's changelog and the input topic, each per message; a SIGKILL and
a restart on its data dir (→ ready, → all counted again); a worker on an empty data dir (the changelog
restored: → ready, → all counted). `--preload` (`pending-preload.json`): the records are all produced before
the worker starts, so that no producer shares the cores with it, and the load is timed from the first record
it counts to the last (the rate and the CPU over those): the worker's own ingest. Benchmarks report, never
assert.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path
from typing import Any

import psutil

from tests.bench.common import now_ms
from tests.bench.delayed import PARTITIONS, _Ours, one_kafka, results, write

CHUNK = 100_000  # records built and produced at a time (the bench's own memory stays flat)
#: how long all of them may take to be held, and a restarted worker to count them again
LOAD_TIMEOUT_S = 3_600


def _size(path: Path) -> int:
    """The disk a directory's files take (their blocks: the broker's index files are preallocated, sparse)."""
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file())


def _topic_bytes(kafka_dir: Path, topic: str) -> int:
    """What the broker keeps of a topic: its partitions' log directories."""
    return sum(
        _size(d) for d in kafka_dir.rglob(f"{topic}-*") if d.is_dir() and d.name[len(topic) + 1 :].isdigit()
    )


async def produce_pending(bootstrap: str, topic: str, target: str, n: int, payload: int) -> None:
    """N delayed records, due evenly over the day that starts in an hour, in whole batches per partition
    (the workers' partitioner)."""
    from aiokafka import AIOKafkaProducer

    from scheduler.kafka.partitioner import kafka_partition

    start_s, day_s = now_ms() // 1000 + 3_600, 86_400
    values = [os.urandom(payload) for _ in range(1_024)]  # (random: they compress no better than real ones)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, max_batch_size=1024 * 1024)
    await producer.start()
    try:
        for first in range(0, n, CHUNK):
            batches: dict[int, Any] = {}
            futures = []
            for i in range(first, min(n, first + CHUNK)):
                key = f"m{i:09d}".encode()
                headers = [("scheduler-epoch", str(start_s + i * day_s // n).encode()),
                           ("scheduler-target-topic", target.encode()), ("scheduler-target-key", key)]  # fmt: skip
                partition = kafka_partition(key, PARTITIONS)
                batch = batches.get(partition) or batches.setdefault(partition, producer.create_batch())
                value = values[i % len(values)]
                if batch.append(key=key, value=value, timestamp=None, headers=headers) is None:
                    futures.append(await producer.send_batch(batch, topic, partition=partition))
                    batch = batches[partition] = producer.create_batch()
                    batch.append(key=key, value=value, timestamp=None, headers=headers)
            for partition, batch in batches.items():
                futures.append(await producer.send_batch(batch, topic, partition=partition))
            await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def _until_held(side: _Ours, n: int, process: psutil.Process | None = None) -> tuple[float, int]:
    """Seconds until the worker counts n pending, and its peak RSS meanwhile."""
    t0, peak = time.monotonic(), 0
    while await asyncio.to_thread(side.held) < n:
        if time.monotonic() - t0 > LOAD_TIMEOUT_S:
            raise TimeoutError(f"the worker did not hold {n} messages within {LOAD_TIMEOUT_S} s")
        if process is not None:
            peak = max(peak, process.memory_info().rss)
        await asyncio.sleep(0.5)
    return time.monotonic() - t0, peak


async def _restarted(side: _Ours, n: int) -> dict[str, Any]:
    """Kill, start again; seconds to ready and to all counted, and the RSS then."""
    side.kill()
    t0 = time.monotonic()
    process = await asyncio.to_thread(side.start, LOAD_TIMEOUT_S)
    ready = time.monotonic() - t0
    held, _ = await _until_held(side, n)
    return {
        "ready_s": round(ready, 1),
        "counted_s": round(ready + held, 1),
        "rss_mb": round(process.memory_info().rss / 1e6),
    }


async def _ingested(side: _Ours, n: int, process: psutil.Process) -> tuple[float, float, int, int]:
    """A worker started on records produced before it: from the first it counts to the last, the seconds,
    the worker's CPU seconds and the records counted meanwhile; and its peak RSS."""
    first: tuple[float, float, int] | None = None
    peak = 0
    t0 = time.monotonic()
    while True:
        held = await asyncio.to_thread(side.held)
        now, cpu = time.monotonic(), sum(process.cpu_times()[:2])
        peak = max(peak, process.memory_info().rss)
        if first is None and held > 0:
            first = (now, cpu, held)
        if held >= n and first is not None:
            return now - first[0], cpu - first[1], n - first[2], peak
        if now - t0 > LOAD_TIMEOUT_S:
            raise TimeoutError(f"the worker did not hold {n} messages within {LOAD_TIMEOUT_S} s")
        await asyncio.sleep(0.25)


async def pending_run(
    bootstrap: str, kafka_dir: Path, work: Path, n: int, payload: int, preload: bool = False
) -> dict[str, Any]:
    from scheduler.kafka.producer import TopicCreator

    side = _Ours(bootstrap, work)
    target = f"{side.input}-out"
    await TopicCreator(bootstrap, PARTITIONS, 1).ensure(target)
    if preload:  # (the worker's own ingest alone: no producer beside it on these cores)
        await TopicCreator(bootstrap, PARTITIONS, 1).ensure(side.input)
        await produce_pending(bootstrap, side.input, target, n, payload)
        process = side.start()
        load_s, cpu_s, counted, rss_peak = await _ingested(side, n, process)
    else:
        process = side.start()
        cpu_before = sum(process.cpu_times()[:2])
        t0 = time.monotonic()
        producing = asyncio.ensure_future(produce_pending(bootstrap, side.input, target, n, payload))
        held_s, rss_peak = await _until_held(side, n, process)
        await producing
        load_s, counted = time.monotonic() - t0, n
        cpu_s = sum(process.cpu_times()[:2]) - cpu_before
    await asyncio.sleep(10)  # (settled: RocksDB's memtables flushed or not, the RSS once idle)
    data_dir = work / "ours" / "data"
    row: dict[str, Any] = {
        "n": n,
        "payload_bytes": payload,
        "load_to_held_s": round(load_s, 1),
        "ingest_per_s": round(counted / load_s),
        "load_cpu_s": round(cpu_s, 1),
        "cpu_us_per_msg": round(cpu_s * 1e6 / counted, 1),
        "rss_peak_mb": round(max(rss_peak, process.memory_info().rss) / 1e6),
        "rss_held_mb": round(process.memory_info().rss / 1e6),
        "rocksdb_bytes_per_msg": round(_size(data_dir) / n, 1),
        "changelog_bytes_per_msg": round(_topic_bytes(kafka_dir, f"{side.app_id}-delayed-changelog") / n, 1),
        "input_bytes_per_msg": round(_topic_bytes(kafka_dir, side.input) / n, 1),
    }
    row["restart"] = await _restarted(side, n)
    side.kill()
    # a worker on an empty data dir: the table restored from its changelog
    fresh = _Ours(bootstrap, work / "fresh", app_id=side.app_id)
    row["empty_data_dir"] = await _restarted(fresh, n)
    fresh.kill()
    return row


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| N pending | load → held s (ingest/s) | load CPU s | RSS peak / held MB | disk B/msg: RocksDB · changelog · input "
            "| restart → ready / counted s, RSS MB | empty data dir → ready / counted s, RSS MB |")  # fmt: skip
    lines = [head, "|" + " --- |" * 7]
    for r in rows:
        restart, fresh = r["restart"], r["empty_data_dir"]
        lines.append(
            f"| {r['n']:,} | {r['load_to_held_s']} ({r['ingest_per_s']:,}) | {r['load_cpu_s']} | {r['rss_peak_mb']} / {r['rss_held_mb']} "
            f"| {r['rocksdb_bytes_per_msg']} · {r['changelog_bytes_per_msg']} · {r['input_bytes_per_msg']} "
            f"| {restart['ready_s']} / {restart['counted_s']}, {restart['rss_mb']} "
            f"| {fresh['ready_s']} / {fresh['counted_s']}, {fresh['rss_mb']} |"
        )
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from scheduler.kafka.kafka_server import KAFKA_VERSION

    rows: list[dict[str, Any]] = []
    with one_kafka("delayed-pending-") as (work, bootstrap):
        for n in args.n:
            rows.append(
                await pending_run(bootstrap, work / "kafka", work / str(n), n, args.payload, args.preload)
            )
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    command = (
        f"python -m tests.bench.delayed_pending --n {' '.join(map(str, args.n))} --payload {args.payload}"
        + (" --preload" if args.preload else "")
    )
    return results(command, f"Apache Kafka {KAFKA_VERSION} (1 node); transactions on", rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--payload", type=int, default=100, help="bytes of each message's value")
    parser.add_argument(
        "--preload",
        action="store_true",
        help="produce them all first, then start the worker: its ingest alone",
    )
    parser.add_argument("--out", type=Path, default=Path("tests/bench/results/delayed"))
    args = parser.parse_args()
    write(args.out, "pending-preload" if args.preload else "pending", asyncio.run(main_async(args)), table)


if __name__ == "__main__":
    main()
