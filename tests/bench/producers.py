"""CPU per record of the producer fires go out through (issue 41 item 1, "what it would take"): aiokafka, as
the worker sends fires, against librdkafka through confluent-kafka.

    python -m tests.bench.producers [--records 400000] [--per-tick 20000] [--value-bytes 170] [--rounds 2]

One Apache Kafka node (started here), a topic of 8 partitions, N records of `--value-bytes` random bytes (a
FiredTask is 150-200 bytes) with 24-byte keys, sent in ticks of `--per-tick` records spread evenly over the
partitions, a tick after the last one's records were acknowledged. Two modes per side:

- `transactions`: one transactional producer per partition, as kafka/transactions.py has; each tick a
  transaction per partition (begin, the partition's records, commit), the partitions' commits at once.
- `plain`: one producer with acks=all; each tick's records sent and their acknowledgements waited for.

aiokafka goes through the worker's own path (BatchedProducer.send_batch: whole batches per partition, its
producer settings). confluent-kafka's Producer gets its own recommended shape (produce() per record,
delivery reports for failures only, commit_transaction() in threads: it blocks; linger as ours: 0 in
transactions, 2 ms plain; batches of up to 1 MB; `--rdkafka` adds settings); librdkafka's threads are the
process's, so their CPU is counted. Reported per row: records/s, the process's CPU per record (user +
system, every thread) and the records a read_committed reader counted afterwards (N, or the row is wrong).
Each side runs in a process of its own (the CPU is that process's); the best of `--rounds` is kept.
Benchmarks report, never assert; compare only rows of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.bench.delayed import one_kafka, results, write

PARTITIONS = 8
SIDES = ("aiokafka", "confluent")
MODES = ("transactions", "plain")


def _records(n: int, value_bytes: int) -> list[tuple[bytes, bytes]]:
    values = [os.urandom(value_bytes) for _ in range(256)]  # (random: no better compressed than a fire)
    return [(f"bench/schedule-{i:09d}".encode(), values[i % len(values)]) for i in range(n)]


def _ticks(n: int, per_tick: int) -> list[range]:
    return [range(first, min(n, first + per_tick)) for first in range(0, n, per_tick)]


def _cpu_s() -> float:
    """The process's CPU, every thread's (librdkafka's too), to the nanosecond (psutil's is in clock ticks:
    a short run read 0)."""
    return time.process_time()


# --- the two sides (each run in a process of its own: python -m tests.bench.producers --side ...) ----------


async def _aiokafka(
    bootstrap: str, topic: str, mode: str, n: int, per_tick: int, value_bytes: int
) -> dict[str, float]:
    from scheduler.kafka.producer import BatchedProducer
    from scheduler.kafka.transactions import begin

    records = _records(n, value_bytes)
    run = uuid.uuid4().hex[:6]
    if mode == "transactions":  # (as Transactions starts them: linger 0, one per partition)
        producers = [
            BatchedProducer(bootstrap, linger_ms=0, transactional_id=f"bench-{run}-p{p}")
            for p in range(PARTITIONS)
        ]
    else:
        producers = [BatchedProducer(bootstrap)]
    for producer in producers:
        await producer.start()
    try:
        cpu0, t0 = _cpu_s(), time.perf_counter()
        for tick in _ticks(n, per_tick):
            if mode == "transactions":
                for producer in producers:
                    await begin(producer.kafka_producer)
                for p, producer in enumerate(producers):
                    # (its records, those with i % PARTITIONS == p: a step through the tick, not a scan of it)
                    mine = tick[(p - tick.start) % PARTITIONS :: PARTITIONS]
                    await producer.send_batch(topic, [(*records[i], p) for i in mine])
                await asyncio.gather(*(_commit(producer) for producer in producers))
            else:
                futures = await producers[0].send_batch(topic, [(*records[i], i % PARTITIONS) for i in tick])
                for fut in {id(f): f for f in futures}.values():
                    await fut
        return {"wall_s": time.perf_counter() - t0, "cpu_s": _cpu_s() - cpu0}
    finally:
        for producer in producers:
            await producer.stop()


async def _commit(producer: Any) -> None:
    await producer.delivered()
    await producer.kafka_producer.commit_transaction()


def _confluent(
    bootstrap: str, topic: str, mode: str, n: int, per_tick: int, value_bytes: int, rdkafka: dict[str, Any]
) -> dict[str, float]:
    from confluent_kafka import Producer

    records = _records(n, value_bytes)
    run = uuid.uuid4().hex[:6]
    config = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0 if mode == "transactions" else 2,
              "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000,
              "delivery.report.only.error": True, **rdkafka}  # fmt: skip
    if mode == "transactions":
        producers = [Producer({**config, "transactional.id": f"bench-{run}-p{p}"}) for p in range(PARTITIONS)]
        for producer in producers:
            producer.init_transactions(30)
    else:
        producers = [Producer(config)]
    failed: list[Any] = []

    def acked(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    def produce(producer: Any, key: bytes, value: bytes, partition: int) -> None:
        while True:
            try:
                producer.produce(topic, value, key, partition, on_delivery=acked)
                return
            except BufferError:  # (its queue is full: serve the callbacks, then again)
                producer.poll(0.01)

    with ThreadPoolExecutor(PARTITIONS) as threads:
        cpu0, t0 = _cpu_s(), time.perf_counter()
        for tick in _ticks(n, per_tick):
            if mode == "transactions":
                for producer in producers:
                    producer.begin_transaction()
                for i in tick:
                    produce(producers[i % PARTITIONS], *records[i], i % PARTITIONS)
                list(threads.map(lambda producer: producer.commit_transaction(30), producers))
            else:
                for i in tick:
                    produce(producers[0], *records[i], i % PARTITIONS)
                producers[0].flush(30)
        out = {"wall_s": time.perf_counter() - t0, "cpu_s": _cpu_s() - cpu0}
    if failed:
        raise RuntimeError(f"{len(failed)} records failed: {failed[0]}")
    return out


def _side_main(args: argparse.Namespace) -> None:
    if args.side == "aiokafka":
        row = asyncio.run(
            _aiokafka(args.bootstrap, args.topic, args.mode, args.records, args.per_tick, args.value_bytes)
        )
    else:
        row = _confluent(
            args.bootstrap,
            args.topic,
            args.mode,
            args.records,
            args.per_tick,
            args.value_bytes,
            json.loads(args.rdkafka),
        )
    print(json.dumps(row))


# --- the run ---------------------------------------------------------------------------------------------


async def count_committed(bootstrap: str, topic: str) -> int:
    """Records a read_committed consumer finds in the topic (up to its end offsets)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)  # (the last stable offsets: every transaction ended)
        counted = 0
        deadline = time.monotonic() + 120
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"counting {topic} did not reach its end within 120 s")
            for batch in (await consumer.getmany(timeout_ms=500, max_records=100_000)).values():
                counted += len(batch)
        return counted
    finally:
        await consumer.stop()


def run_side(bootstrap: str, topic: str, side: str, mode: str, args: argparse.Namespace) -> dict[str, float]:
    command = [sys.executable, "-m", "tests.bench.producers", "--side", side, "--mode", mode, "--bootstrap", bootstrap,
               "--topic", topic, "--records", str(args.records), "--per-tick", str(args.per_tick),
               "--value-bytes", str(args.value_bytes), "--rdkafka", args.rdkafka]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout_s, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{side} {mode} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from scheduler.kafka.kafka_server import KAFKA_VERSION
    from scheduler.kafka.producer import TopicCreator

    rows: list[dict[str, Any]] = []
    with one_kafka("bench-producers-") as (_, bootstrap):
        for mode in args.modes:
            for side in args.sides:
                best: dict[str, Any] | None = None
                for _ in range(args.rounds):
                    topic = f"bench-{side}-{mode}-{uuid.uuid4().hex[:6]}"
                    await TopicCreator(bootstrap, PARTITIONS, 1).ensure(topic)
                    got = await asyncio.to_thread(run_side, bootstrap, topic, side, mode, args)
                    row = {
                        "side": side,
                        "mode": mode,
                        "records": args.records,
                        "per_tick": args.per_tick,
                        "value_bytes": args.value_bytes,
                        "records_per_s": round(args.records / got["wall_s"]),
                        "cpu_us_per_record": round(got["cpu_s"] / args.records * 1e6, 2),
                        "counted": await count_committed(bootstrap, topic),
                    }
                    if best is None or row["cpu_us_per_record"] < best["cpu_us_per_record"]:
                        best = row
                assert best is not None
                rows.append(best)
                print(table([best]).splitlines()[-1], flush=True)
    command = (
        f"python -m tests.bench.producers --records {args.records} --per-tick {args.per_tick} "
        f"--value-bytes {args.value_bytes} --rounds {args.rounds}"
        + (f" --rdkafka '{args.rdkafka}'" if args.rdkafka != "{}" else "")
    )
    return results(command, f"Apache Kafka {KAFKA_VERSION} (1 node)", rows)


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| producer | mode | records | per tick | records/s | CPU µs/record | counted |",
        "|" + " --- |" * 7,
    ]
    for r in rows:
        lines.append(
            f"| {r['side']} | {r['mode']} | {r['records']:,} | {r['per_tick']:,} | {r['records_per_s']:,} "
            f"| {r['cpu_us_per_record']} | {r['counted']:,} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--per-tick", type=int, default=20_000)
    parser.add_argument("--value-bytes", type=int, default=170)
    parser.add_argument("--rounds", type=int, default=2, help="runs per row: the one of least CPU is kept")
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument(
        "--rdkafka", default="{}", help="more librdkafka settings for confluent-kafka, as JSON"
    )
    parser.add_argument("--timeout-s", type=float, default=600, help="the longest one side's run may take")
    parser.add_argument("--out", type=Path, default=Path("tests/bench/results"))
    # (one side's run, in its own process)
    parser.add_argument("--side", choices=SIDES)
    parser.add_argument("--mode", choices=MODES)
    parser.add_argument("--bootstrap")
    parser.add_argument("--topic")
    args = parser.parse_args()
    if args.side is not None:
        _side_main(args)
        return
    write(args.out, "producers", asyncio.run(main_async(args)), table)


if __name__ == "__main__":
    main()
