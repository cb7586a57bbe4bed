"""What an idle worker costs: one worker (transactions on, 8 partitions) on one Apache Kafka node, nothing
scheduled, its CPU and its voluntary context switches (a wake-up each, about) per second, after a warm-up.

    python -m tests.bench.idle [--warmup 35] [--seconds 40] [--rounds 2] [--out tests/bench/results/idle.json]

A worker's floor: what it spends waiting (its consumers' fetch loops, its timers) is paid by every worker
of a deployment, and by every bench row over its whole window (issue 38's CPU column at 10,000 messages is
mostly this). Each round is a fresh worker on the same broker. Benchmarks report, never assert; compare
only rows of one run.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from tests.bench.delayed import _Ours, one_kafka, results


def measure(bootstrap: str, work: Path, warmup_s: float, seconds: float) -> dict[str, Any]:
    side = _Ours(bootstrap, work)
    process = side.start()
    try:
        time.sleep(warmup_s)
        cpu, switches, t0 = (
            sum(process.cpu_times()[:2]),
            process.num_ctx_switches().voluntary,
            time.monotonic(),
        )
        time.sleep(seconds)
        elapsed = time.monotonic() - t0
        cpu = sum(process.cpu_times()[:2]) - cpu
        switches = process.num_ctx_switches().voluntary - switches
        return {"percent_of_a_core": round(100 * cpu / elapsed, 2), "voluntary_switches_per_s": round(switches / elapsed),
                "threads": process.num_threads(), "rss_mb": round(process.memory_info().rss / 1e6)}  # fmt: skip
    finally:
        side.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warmup", type=float, default=35.0, help="seconds after the worker is ready")
    parser.add_argument("--seconds", type=float, default=40.0, help="seconds measured")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from scheduler.kafka.kafka_server import KAFKA_VERSION

    rows = []
    with one_kafka("idle") as (work, bootstrap):
        for i in range(args.rounds):
            rows.append(measure(bootstrap, work / f"round-{i}", args.warmup, args.seconds))
            print(rows[-1], flush=True)
    command = f"python -m tests.bench.idle --warmup {args.warmup:g} --seconds {args.seconds:g} --rounds {args.rounds}"
    run = results(command, f"Apache Kafka {KAFKA_VERSION} (1 node); a worker with transactions", rows)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(run, indent=2) + "\n")
    print(json.dumps(run, indent=2))


if __name__ == "__main__":
    main()
