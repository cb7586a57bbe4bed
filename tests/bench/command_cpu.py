"""CPU per command of the command path alone (issue 41 item 3): what an INSERT costs a worker before Kafka.

    python -m tests.bench.command_cpu [--commands 20000] [--rounds 3] [--profile 25] [--transactions]
                                      [--delayed | --deliver]

A worker (scheduler.worker.app.Worker, transactions off unless asked) on a data dir of its own, no broker: N
INSERTs of hourly schedules (the commands ceiling's workload: tests.bench.end_to_end), each a record on its key's
partition, handed to Worker.handle_command one after another as the commands ingest hands a fetch's records,
the held schedule writes put in RocksDB every YIELD_EVERY commands as the ingest does. What goes to Kafka (the
changelog records, through a producer that answers at once here) is built but not sent: the row is the command
path's own CPU — decoding, validation, the next fire, the history, the index and table writes. Each round is a
fresh worker; the row is the round of least process CPU per command (a round after the first finds the
process's cron caches warm, as a worker that has run a while does). `--transactions`: the worker as it runs
with them (its tables staged, its reads and writes inside a partition's work), their producer answering at
once and each partition committed every COMMIT_EVERY commands (what a commit runs after it: RocksDB gets the
writes); their records are built into aiokafka's batches as a worker builds them. `--profile K`: one more
round under cProfile, its K functions of most own time printed (cProfile's overhead makes them ~2x slower).
`--delayed` (issue 38 item 3; transactions on): records of the delayed topic instead, in etf1's shape (the
pending bench's: tests.bench.delayed_pending), due over the day that starts in an hour, each handed to the
worker's delayed messages as the ingest hands its hops' records, the partitions' pending counts followed as a
worker that took them up follows them. `--deliver` (issue 38 item 3): N delayed messages already due, held
first, then delivered by the worker's delayed messages as its turns deliver them (the partitions' transactions
committed after each), the records' batches built and handed to a producer that answers at once: the CPU of
the delivering thread per message, the collector set as a worker sets it.
Benchmarks report, never assert; these machines vary ~2x between runs: compare the rows of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import json
import pstats
import shutil
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.structs import ConsumerRecord

from scheduler.domain.delayed import DUE
from scheduler.domain.model import CronTrigger
from scheduler.kafka.config import Settings
from scheduler.kafka.partitioner import kafka_partition
from scheduler.kafka.producer import BatchedProducer
from scheduler.kafka.tables import partition_items, partition_items_from
from scheduler.kafka.transactions import owned_by
from scheduler.worker.app import Worker
from scheduler.worker.collector import freeze_long_lived, tune_collector
from scheduler.worker.ingest import YIELD_EVERY
from tests.bench import write_result
from tests.bench.common import hourly_cron_of, insert_records, workload

PARTITIONS = 8
COMMIT_EVERY = 1_000  # (transactions: about a fetch of a partition's commands)
WARM_UP = 64  # records applied before the measured ones (every partition's store opened)


class _Producer:
    """Answers every send at once (nothing leaves the process)."""

    def __init__(self) -> None:
        self.sent = 0

    async def send(self, topic: str, key: bytes | None, value: bytes | None, *a: Any, **k: Any) -> Any:
        self.sent += 1
        done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


class _Transactions:
    """What the worker asks of its Transactions, answered at once: every partition owned, every send done,
    what runs after a commit held until `commit`. A batch of records is built as a worker builds it (the
    partition's BatchedProducer, aiokafka's batches) and answered at once."""

    def __init__(self) -> None:
        self.after: list[Any] = []
        self.offsets: dict[tuple[str, int], int] = {}
        self.producer = BatchedProducer("unused:9092")
        aio = AIOKafkaProducer(bootstrap_servers="unused:9092", max_batch_size=256 * 1024)
        aio.client = SimpleNamespace(_topics=set(), add_topic=lambda topic: None)  # type: ignore[assignment]

        async def send_batch(batch: Any, topic: str, *, partition: int) -> asyncio.Future[object]:
            batch._build()
            return self._sent(topic, partition, batch.record_count())

        aio.send_batch = send_batch  # type: ignore[method-assign]
        self.producer._producer = aio

    def patch(self, txns: Any) -> None:
        txns.owns = lambda partition: True
        txns.dirty = lambda partition: None
        txns.after_commit = lambda partition, callback: self.after.append(callback)
        txns.send = self.send
        txns.send_batch = self.send_batch

    def _sent(self, topic: str, partition: int, count: int) -> asyncio.Future[object]:
        offset = self.offsets.get((topic, partition), 0)
        self.offsets[topic, partition] = offset + count
        done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        done.set_result(SimpleNamespace(topic=topic, partition=partition, offset=offset))
        return done

    async def send(self, owner: int, topic: str, key: Any, value: Any, partition: int | None = None,
                   headers: Any = None) -> asyncio.Future[object]:  # fmt: skip
        return self._sent(topic, owner if partition is None else partition, 1)

    async def send_batch(self, owner: int, topic: str, records: list[Any]) -> list[asyncio.Future[object]]:
        return await self.producer.send_batch(topic, records)

    def commit(self) -> None:
        after, self.after = self.after, []
        for callback in after:
            callback()


def commands(n: int, app_id: str) -> list[Any]:
    """The INSERTs as the ingest hands them to the worker: a record on its key's partition."""
    schedules = [
        dataclasses.replace(s, trigger=CronTrigger(hourly_cron_of(i)))
        for i, s in enumerate(workload(n, f"{app_id}-out"))
    ]
    out = []
    for offset, (key, value) in enumerate(insert_records(schedules)):
        partition = kafka_partition(key, PARTITIONS)
        record = ConsumerRecord(
            f"{app_id}-commands", partition, offset, 0, 0, key, value, None, len(key), len(value), []
        )
        out.append(SimpleNamespace(message=record))
    return out


def delayed_records(n: int, app_id: str, start_s: int | None = None, span_s: int = 86_400) -> list[Any]:
    """N records of the delayed topic as the ingest hands them: key = the id, a 100-byte value, etf1's
    headers, due over `span_s` from `start_s` (default: the day that starts in an hour), on the id's
    partition."""
    start_s, day_s = (int(time.time()) + 3_600 if start_s is None else start_s), span_s
    values = [bytes([i % 256]) * 100 for i in range(256)]
    out = []
    for i in range(n):
        key = f"m{i:09d}".encode()
        headers = [("scheduler-epoch", str(start_s + i * day_s // n).encode()),
                   ("scheduler-target-topic", f"{app_id}-out".encode()), ("scheduler-target-key", key)]  # fmt: skip
        value = values[i % len(values)]
        record = ConsumerRecord(
            f"{app_id}-delayed", kafka_partition(key, PARTITIONS), i, 0, 0, key, value, None, len(key),
            len(value), headers,
        )  # fmt: skip
        out.append(SimpleNamespace(message=record))
    return out


async def one_round(
    n: int, profile: cProfile.Profile | None = None, *, transactions: bool = False, delayed: bool = False
) -> float:
    """CPU seconds per command (`delayed`: per delayed record) of one fresh worker applying n of them."""
    work = Path(tempfile.mkdtemp(prefix="bench-command-cpu-"))
    try:
        settings = Settings(
            app_id="bench",
            data_dir=work,
            auth="off",
            partitions=PARTITIONS,
            transactions="on" if transactions else "off",
            max_schedules_per_tenant=10**9,
        )
        worker = Worker(settings)
        worker.producer = _Producer()  # type: ignore[assignment]
        worker.topics._known.add("bench-out")  # (no broker to ask whether the output topic exists)
        txns = _Transactions()
        if worker.txns is not None:
            txns.patch(worker.txns)
        records = delayed_records(n, "bench") if delayed else commands(n, "bench")
        handle = worker.delayed_messages.handle if delayed else worker.handle_command
        if delayed:  # (the partitions taken up and counted: each write is told the counts, as in a worker)
            counts = worker.delayed_messages.pending_counts
            counts.follow(range(PARTITIONS))
            for partition, _ in counts.to_scan():
                counts.scanned(partition, [], done=True)
        warm = WARM_UP
        await _apply(worker, txns, handle, records[:warm])  # (opens the partitions' stores: not their cost)
        cpu = time.process_time()
        if profile is not None:
            profile.enable()
        await _apply(worker, txns, handle, records[warm:])
        if profile is not None:
            profile.disable()
        spent = time.process_time() - cpu
        if delayed:
            held = worker.counts.events["delayedHeld"]
            stored = sum(1 for p in range(PARTITIONS) for _ in partition_items_from(worker.delayed, p, DUE))
            if held < n or stored < n:
                raise RuntimeError(f"of {n} delayed records {held} were held and {stored} stored")
        else:
            applied = worker.counts.commands_applied
            stored = sum(1 for p in range(PARTITIONS) for _ in partition_items(worker.schedules, p))
            if applied < n or stored < n:
                raise RuntimeError(f"of {n} INSERTs {applied} were applied and {stored} stored")
        return spent / (n - warm)
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def deliver_round(n: int, profile: cProfile.Profile | None = None) -> float:
    """CPU seconds per delivered message of one fresh worker (transactions on) delivering n delayed messages
    already due: held first (not measured), then delivered by DelayedMessages.deliver_due as a turn does,
    the partitions' transactions committed after each (the deletes reach RocksDB, the counts follow them).
    The records' batches are built (partition, headers) and handed to a producer that answers at once. CPU
    of the thread that delivers (the event loop's: a worker's bound), not RocksDB's compactions beside it."""
    work = Path(tempfile.mkdtemp(prefix="bench-deliver-cpu-"))
    try:
        settings = Settings(
            app_id="bench", data_dir=work, auth="off", partitions=PARTITIONS, transactions="on"
        )
        worker = Worker(settings)
        worker.producer = _Producer()  # type: ignore[assignment]
        worker.topics._known.add("bench-out")  # (no broker to ask whether the output topic exists)
        worker.output.partition_count = lambda topic: PARTITIONS  # type: ignore[method-assign]
        txns = _Transactions()
        assert worker.txns is not None
        txns.patch(worker.txns)
        states = {p: object() for p in range(PARTITIONS)}  # (each partition's transaction, as owned)
        worker.txns.current = states.get  # type: ignore[method-assign]
        delayed = worker.delayed_messages
        counts = delayed.pending_counts
        counts.follow(range(PARTITIONS))
        for partition, _ in counts.to_scan():
            counts.scanned(partition, [], done=True)
        records = delayed_records(n, "bench", start_s=int(time.time()) - 60, span_s=30)
        await _apply(worker, txns, delayed.handle, records)
        # (every partition taken up: what a delivery asks of the punctuator)
        worker.punctuator = SimpleNamespace(partitions=set(range(PARTITIONS)), moved=[])  # type: ignore[assignment]
        tune_collector()  # (the collector as a worker runs it: cli.py)
        freeze_long_lived()
        now = worker.clock()
        delivered = 0
        cpu = time.thread_time()
        if profile is not None:
            profile.enable()
        while delivered < n:
            got = await delayed.deliver_due(now)
            txns.commit()
            if not got:
                break
            delivered += got
        if profile is not None:
            profile.disable()
        spent = time.thread_time() - cpu
        left = sum(1 for p in range(PARTITIONS) for _ in partition_items_from(worker.delayed, p, DUE))
        if delivered < n or left:
            raise RuntimeError(f"of {n} delayed messages {delivered} were delivered and {left} are left")
        return spent / n
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def _apply(worker: Worker, txns: _Transactions, handle: Any, records: list[Any]) -> None:
    """The records handed to the worker as its ingest does: without transactions the held writes put in
    RocksDB every YIELD_EVERY; with them each partition's work staged and committed every COMMIT_EVERY."""
    if worker.txns is None:
        for i, record in enumerate(records, 1):
            await handle(record)
            if i % YIELD_EVERY == 0:
                worker.write_local()
        worker.write_local()
        return
    touched: dict[int, int] = {}  # partition -> the offset after its last command applied
    for i, record in enumerate(records, 1):
        partition = record.message.partition
        with owned_by(partition):
            await handle(record)
        touched[partition] = record.message.offset + 1
        if i % COMMIT_EVERY == 0 or i == len(records):
            for p, next_offset in touched.items():
                with owned_by(p):
                    await worker.stage_commit(p, next_offset)
                await worker._before_commit(p)
            touched.clear()
            txns.commit()


async def command_cpu(
    n: int, rounds: int, *, transactions: bool = False, delayed: bool = False, deliver: bool = False
) -> dict[str, Any]:
    transactions = (
        transactions or delayed or deliver
    )  # (the delayed topic is a hop of the ingest with transactions only)
    if deliver:
        spent = [await deliver_round(n) for _ in range(rounds)]
    else:
        spent = [await one_round(n, transactions=transactions, delayed=delayed) for _ in range(rounds)]
    return {
        "records": "delayed delivered" if deliver else "delayed" if delayed else "INSERTs",
        "commands": n,
        "rounds": rounds,
        "transactions": transactions,
        "cpu_us_per_command": round(min(spent) * 1e6, 1),
        "each_round_us": [round(s * 1e6, 1) for s in spent],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--commands", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", type=int, default=0, help="functions of most own time to print")
    parser.add_argument("--transactions", action="store_true", help="the worker as it runs with them")
    parser.add_argument("--delayed", action="store_true", help="delayed records (transactions on)")
    parser.add_argument("--deliver", action="store_true", help="delayed messages delivered (transactions on)")
    parser.add_argument("--out", type=Path, default=None, help="a JSON file for the row")
    args = parser.parse_args()
    row = asyncio.run(
        command_cpu(
            args.commands,
            args.rounds,
            transactions=args.transactions,
            delayed=args.delayed,
            deliver=args.deliver,
        )
    )
    print(json.dumps(row), flush=True)
    if args.profile:
        profile = cProfile.Profile()
        if args.deliver:
            asyncio.run(deliver_round(args.commands, profile))
        else:
            asyncio.run(
                one_round(args.commands, profile, transactions=row["transactions"], delayed=args.delayed)
            )
        pstats.Stats(profile).sort_stats("tottime").print_stats(args.profile)
    if args.out is not None:
        write_result(args.out, "tests.bench.command_cpu", row)


if __name__ == "__main__":
    main()
