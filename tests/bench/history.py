"""What appending to a schedule's history costs (wire/messages.add_history), by how many entries it holds.

    python -m tests.bench.history [--appends 5000] [--out tests/bench/results/history.json]

Each command a worker applies appends an entry to its schedule's history (the newest MAX_HISTORY are kept):
an INSERT to an empty one, an UPDATE, a pause, a resume or a run to one that may be full. The row is the
CPU µs per append in steady state (appended to again and again from the size given), with the value's mean
size. Benchmarks report, never assert; compare the rows of one run.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from scheduler.domain.model import CronTrigger, Schedule, ScheduleKey
from scheduler.wire.codec import encode_schedule
from scheduler.wire.messages import MAX_HISTORY, HistoryEntry, add_history

T0 = 1_795_000_000_000


def measure(held: int, entry: HistoryEntry, appends: int) -> dict[str, object]:
    schedule = encode_schedule(Schedule(ScheduleKey("acme", "nightly"), CronTrigger("0 5 * * * *"), "out"))
    value = None
    for v in range(held):
        value = add_history(value, HistoryEntry(v, T0 + v, "deployer", "UPDATE", schedule))
    start, sizes = time.process_time(), 0
    for _ in range(appends):
        grown = add_history(value, entry)
        if held:
            value = grown
        sizes += len(grown)
    us = (time.process_time() - start) / appends * 1e6
    return {"entries_held": held, "entry": entry.action, "us_per_append": round(us, 2),
            "mean_value_bytes": sizes // appends}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=5_000)
    parser.add_argument("--out", type=Path, help="also write the rows there, as JSON")
    args = parser.parse_args()
    schedule = encode_schedule(Schedule(ScheduleKey("acme", "nightly"), CronTrigger("0 6 * * * *"), "out"))
    update = HistoryEntry(7, T0, "deployer", "UPDATE", schedule)
    run = HistoryEntry(7, T0, "deployer", "RUN", fires=1)
    rows = []
    for held, entry in ((0, update), (MAX_HISTORY, update), (MAX_HISTORY, run)):
        rows.append(measure(held, entry, args.appends))
        print(json.dumps(rows[-1]), flush=True)
    if args.out is not None:
        meta = {"date": time.strftime("%Y-%m-%d"), "python": platform.python_version(),
                "command": f"python -m tests.bench.history --appends {args.appends}"}  # fmt: skip
        args.out.write_text(json.dumps({"rows": rows, **meta}, indent=2) + "\n")


if __name__ == "__main__":
    main()
