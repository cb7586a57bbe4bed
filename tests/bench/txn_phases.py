"""Where a transactional record's visibility goes (issue 41 item 4): why fires are sent ahead of their
instant and committed at it.

    python -m tests.bench.txn_phases [--rounds 60] [--out tests/bench/results/txn-phases.json]

One Apache Kafka node (started here), 8 transactional producers (one per partition, as kafka/transactions.py
has) and a read_committed reader of their topic. Each round, ms from the start of the step:

- `plain`: one record, acks=all, no transaction → the reader has it (the floor: a produce and a fetch).
- `at the instant`: every producer begins, sends a record and commits at once (what a tick did before
  2026-12-05) → `acked` (the records acknowledged: AddPartitionsToTxn, the produce), `committed` (EndTxn
  answered), `seen` (the reader has all 8).
- `sent ahead`: every producer begins and sends its record, acknowledged, 50 ms before the step; at it only
  the commits → `committed`, `seen` (what a tick does now: Transactions.hold).

Reported per phase: p50, p90 and max. Benchmarks report, never assert.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

from tests.bench import write_result

PARTITIONS = 8


def _ms() -> float:
    return time.monotonic() * 1000


async def measure(bootstrap: str, rounds: int) -> dict[str, dict[str, float]]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic("txn", PARTITIONS, 1), NewTopic("plain", PARTITIONS, 1)])
    await admin.close()
    reader = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", fetch_max_wait_ms=50,
        enable_auto_commit=False,
    )  # fmt: skip
    await reader.start()
    reader.assign([TopicPartition(t, p) for t in ("txn", "plain") for p in range(PARTITIONS)])
    await reader.seek_to_end()
    producers = [
        AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"phases-{p}", linger_ms=0)
        for p in range(PARTITIONS)
    ]
    plain = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks="all")
    for producer in [*producers, plain]:
        await producer.start()
    seen: dict[bytes, float] = {}

    async def read() -> None:
        while True:
            for records in (await reader.getmany(timeout_ms=1000)).values():
                at = _ms()
                for record in records:
                    seen[record.value] = at

    async def until_seen(values: list[bytes]) -> float:
        while any(v not in seen for v in values):
            await asyncio.sleep(0.001)
        return max(seen[v] for v in values)

    phases: dict[str, list[float]] = {}

    def note(name: str, value: float) -> None:
        phases.setdefault(name, []).append(value)

    reading = asyncio.create_task(read())
    try:
        await asyncio.sleep(2)
        for i in range(rounds):
            value, t0 = f"plain-{i}".encode(), _ms()
            await (await plain.send("plain", value, partition=i % PARTITIONS))
            note("plain: seen", await until_seen([value]) - t0)

            values, t0 = [f"now-{i}-{p}".encode() for p in range(PARTITIONS)], _ms()

            async def at_once(p: int, value: bytes, t0: float = t0) -> tuple[float, float]:
                await producers[p].begin_transaction()
                await (await producers[p].send("txn", value, partition=p))
                acked = _ms()
                await producers[p].commit_transaction()
                return acked - t0, _ms() - t0

            done = await asyncio.gather(*(at_once(p, v) for p, v in enumerate(values)))
            note("at the instant: acked", max(a for a, _ in done))
            note("at the instant: committed", max(c for _, c in done))
            note("at the instant: seen", await until_seen(values) - t0)

            values = [f"ahead-{i}-{p}".encode() for p in range(PARTITIONS)]
            for producer in producers:
                await producer.begin_transaction()
            sent = [await producers[p].send("txn", v, partition=p) for p, v in enumerate(values)]
            await asyncio.gather(*sent)
            await asyncio.sleep(0.05)
            t0 = _ms()
            await asyncio.gather(*(producer.commit_transaction() for producer in producers))
            note("sent ahead: committed", _ms() - t0)
            note("sent ahead: seen", await until_seen(values) - t0)
            await asyncio.sleep(0.1)
    finally:
        reading.cancel()
        for producer in [*producers, plain]:
            await producer.stop()
        await reader.stop()
    return {
        name: {
            "p50_ms": round(statistics.median(xs), 1),
            "p90_ms": round(sorted(xs)[int(0.9 * len(xs))], 1),
            "max_ms": round(max(xs), 1),
        }
        for name, xs in phases.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--out", type=Path, default=Path("tests/bench/results/txn-phases.json"))
    args = parser.parse_args()
    from tests.bench.delayed import one_kafka

    with one_kafka("txn-phases-") as (_, bootstrap):
        phases: dict[str, Any] = asyncio.run(measure(bootstrap, args.rounds))
    write_result(args.out, "tests.bench.txn_phases", {"rounds": args.rounds, "phases": phases})
    for name, row in phases.items():
        print(f"{name:28s} p50 {row['p50_ms']:6.1f}  p90 {row['p90_ms']:6.1f}  max {row['max_ms']:6.1f} ms")


if __name__ == "__main__":
    main()
