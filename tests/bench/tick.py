"""CPU per fire of the punctuator's tick alone (issue 41 item 1): what a fire costs before the producer.

    python -m tests.bench.tick [--schedules 20000] [--ticks 20] [--rounds 3] [--collector tuned default off]

N every-second schedules in 8 partitions, their states and due-time index in a RocksDB per partition (as
the worker's table has them), fired by the punctuator tick after tick on a clock the bench moves a second a
tick (no waiting: every tick has N fires), into a batched sink that answers at once (no broker, no
encoding past the FiredTask bytes); after each tick the fire progress is flushed, as a worker without
transactions does every second (the watermark moves, the fired index entries are deleted). Each round is `--ticks` ticks; the row is the round of least process CPU
per fire, and with it the share of that CPU the cyclic garbage collector took (gc.callbacks), by
generation. `--collector`: `default` (Python's thresholds), `tuned` (what a worker sets:
scheduler/worker/collector.py), `off` (gc disabled: the floor). The long-lived state is frozen first, as the
worker does after a load. Benchmarks report, never assert; these machines vary ~2× between runs: compare
the rows of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from rocksdict import Options, Rdict, WriteBatch

from scheduler.domain.model import CatchUpPolicy, CronTrigger, Schedule, ScheduleKey, ScheduleState, TimeUnit
from scheduler.kafka.due_index import COMPLETE, DueIndex
from scheduler.wire.codec import decode_state, encode_state, key_bytes
from scheduler.worker.held import index_writes
from scheduler.worker.punctuator import Punctuator
from tests.bench import write_result

PARTITIONS = 8
T0 = 1_800_000_000_000
WARM_UP_TICKS = 3  # every schedule comes into memory (compiled, on its heap) in the first ticks


async def tick_cpu(n: int, ticks: int, rounds: int, collector: str) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-tick-"))
    try:
        return await _run(work, n, ticks, rounds, collector)
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def _run(work: Path, n: int, ticks: int, rounds: int, collector: str) -> dict[str, Any]:
    dbs = [Rdict(str(work / f"schedules-{p}.db"), Options(raw_mode=True)) for p in range(PARTITIONS)]
    clock = [T0]
    every_second = CronTrigger("* * * * * *")
    batches = [WriteBatch(raw_mode=True) for _ in range(PARTITIONS)]
    for i in range(n):
        s = Schedule(
            ScheduleKey("bench", f"s{i:07d}"), every_second, "out", enabled=True, catch_up=CatchUpPolicy.SKIP
        )
        kb, state = key_bytes(s.key), ScheduleState(s, T0, T0, T0)
        batch = batches[i % PARTITIONS]
        batch.put(kb, encode_state(state))
        for key, value in index_writes(kb, state, lambda unit: None):
            batch.put(key, value) if value is not None else batch.delete(key)
    for p, db in enumerate(dbs):
        db.write(batches[p])
        db[COMPLETE] = b""
    done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    done.set_result(None)
    fires = [0]

    async def send(topic: str, key: bytes, value: bytes) -> asyncio.Future[object]:
        fires[0] += 1
        return done

    async def send_batch(topic: str, records: list[tuple[bytes, bytes, int]]) -> list[asyncio.Future[object]]:
        fires[0] += len(records)
        return [done] * len(records)

    punctuator = Punctuator(
        send,
        lambda p, k: decode_state(dbs[p][k]),
        lambda *a: None,
        clock=lambda: clock[0],
        send_batch=send_batch,
        partition_count=lambda topic: PARTITIONS,
        index=DueIndex(lambda p: dbs[p]),
    )
    for p in range(PARTITIONS):
        await punctuator.assign(p, None, {})
    second = 1

    async def tick() -> None:
        nonlocal second
        clock[0] = T0 + second * 1000 + 5
        second += 1
        await punctuator.tick(TimeUnit.SECONDS)
        await punctuator.flush_progress()  # (acknowledged at once: the watermark moves, the fired entries go)

    for _ in range(WARM_UP_TICKS):
        await tick()
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    if collector == "tuned":
        from scheduler.worker.collector import tune_collector  # (here: the bench runs on trees before it too)

        tune_collector()
    elif collector == "off":
        gc.disable()
    spent = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
    started = [0.0]

    def observe(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            gen = spent[info["generation"]]
            gen[0] += 1
            gen[1] += time.perf_counter() - started[0]

    gc.callbacks.append(observe)
    best: dict[str, Any] | None = None
    try:
        for _ in range(rounds):
            fires[0] = 0
            for gen in spent.values():
                gen[:] = [0, 0.0]
            cpu = time.process_time()
            for _ in range(ticks):
                await tick()
            us = (time.process_time() - cpu) / fires[0] * 1e6
            gc_us = sum(g[1] for g in spent.values()) / fires[0] * 1e6
            row = {
                "schedules": n,
                "collector": collector,
                "fires": fires[0],
                "cpu_us_per_fire": round(us, 2),
                "gc_us_per_fire": round(gc_us, 2),
                "collections": {str(g): {"count": c, "ms": round(s * 1e3, 1)} for g, (c, s) in spent.items()},
            }
            if best is None or us < best["cpu_us_per_fire"]:
                best = row
    finally:
        gc.callbacks.remove(observe)
        gc.enable()
        gc.set_threshold(*thresholds)
        gc.unfreeze()
        for db in dbs:
            db.close()
    assert best is not None
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--schedules", type=int, default=20_000)
    parser.add_argument("--ticks", type=int, default=20, help="ticks per round (each fires every schedule)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--collector", nargs="+", choices=("tuned", "default", "off"), default=["tuned", "default", "off"]
    )
    parser.add_argument("--out", type=Path, default=None, help="a JSON file for the rows")
    args = parser.parse_args()
    rows = []
    for collector in args.collector:
        row = asyncio.run(tick_cpu(args.schedules, args.ticks, args.rounds, collector))
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(
        "\n| collector | schedules | fires | CPU µs per fire | of it the collector | collections (gen 0 / 1 / 2) |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        c = r["collections"]
        print(
            f"| {r['collector']} | {r['schedules']:,} | {r['fires']:,} | {r['cpu_us_per_fire']} | "
            f"{r['gc_us_per_fire']} | {c['0']['count']} / {c['1']['count']} / {c['2']['count']} |"
        )
    if args.out is not None:
        write_result(args.out, "tests.bench.tick", {"rows": rows})


if __name__ == "__main__":
    main()
