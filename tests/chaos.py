"""Chaos: several workers, many every-second schedules, workers SIGKILLed and restarted at random; then
every due instant is checked against the output topic.

    python -m tests.chaos --workers 3 --schedules 2000 --duration 180      (make chaos)

On KAFKA_BOOTSTRAP_SERVERS if set, else on an embedded broker it starts. Schedules use the EACH catch-up
policy, so every due instant must appear (late is allowed, missing is not); a repeated job id is a
duplicate that consumers drop and is counted, not failed. Writes a JSON report.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from scheduler.domain.model import (
    Action,
    CatchUpPolicy,
    FrequencyTrigger,
    Schedule,
    ScheduleCommand,
    ScheduleKey,
    TimeUnit,
)
from tests.helpers import TopicReader, WorkerProcess, send_commands


def _now() -> int:
    return time.time_ns() // 1_000_000


async def run_chaos(
    bootstrap: str,
    profile: str,
    *,
    workers: int = 3,
    schedules: int = 300,
    duration_s: float = 60,
    kill_every_s: float = 15,
    down_s: float = 3,
    partitions: int = 8,
    settle_s: float = 30,
    seed: int = 7,
    work_dir: Path | None = None,
) -> dict[str, Any]:
    rnd = random.Random(seed)
    work = work_dir or Path(tempfile.mkdtemp(prefix="chaos-"))
    app_id = f"chaos{uuid.uuid4().hex[:8]}"
    out = f"{app_id}-out"
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "SCHEDULER_BROKER_PROFILE": profile,
        "SCHEDULER_APP_ID": app_id,
        "SCHEDULER_PARTITIONS": str(partitions),
        "SCHEDULER_LOG_LEVEL": "warning",
        "SCHEDULER_AUTH": "off",
        "SCHEDULER_PROGRESS_INTERVAL_MS": "500",
    }
    procs = [
        WorkerProcess({**env, "SCHEDULER_DATA_DIR": str(work / f"w{i}")}, work / f"worker-{i}.log")
        for i in range(workers)
    ]
    kills: list[dict[str, Any]] = []
    try:
        procs[0].start()
        await asyncio.to_thread(procs[0].wait_ready, 120)
        for p in procs[1:]:
            p.start()
        for p in procs[1:]:
            await asyncio.to_thread(p.wait_ready, 120, 0)
        commands = []
        for i in range(schedules):
            s = Schedule(ScheduleKey("chaos", f"s{i:05d}"), FrequencyTrigger(TimeUnit.SECONDS, 1), out, enabled=True,
                         catch_up=CatchUpPolicy.EACH)  # fmt: skip
            commands.append(ScheduleCommand(s.key, Action.INSERT, s))
        async with TopicReader(bootstrap, out) as reader:
            await send_commands(bootstrap, f"{app_id}-commands", *commands)
            await reader.wait_for(lambda r: len({x.key.name for x in r}) == schedules, timeout_s=120)
            window_start = _now() + 2_000
            end = time.monotonic() + duration_s
            while time.monotonic() + kill_every_s < end:
                await asyncio.sleep(kill_every_s - down_s)
                victim = rnd.randrange(workers)
                procs[victim].kill()
                killed_at = _now()
                await asyncio.sleep(down_s)
                procs[victim].start()  # same data dir: restores from local state and the changelog tail
                kills.append({"worker": victim, "killedAt": killed_at, "restartedAt": _now()})
            await asyncio.sleep(max(0.0, end - time.monotonic()))
            window_end = _now()
            await asyncio.sleep(settle_s)  # late fires of the last takeover arrive
            records = list(reader.records)
    finally:
        for p in procs:
            p.kill()
    return analyse(records, schedules, window_start, window_end, kills) | {
        "workers": workers,
        "schedules": schedules,
        "duration_s": duration_s,
        "kills": kills,
        "logs": str(work),
    }


def analyse(
    records: list[Any], schedules: int, start: int, end: int, kills: list[dict[str, Any]]
) -> dict[str, Any]:
    due_first = (start // 1000 + 1) * 1000
    expected = set(range(due_first, end - 1000, 1000))  # every whole second in the window
    fired: dict[str, set[int]] = {}
    for r in records:
        fired.setdefault(r.key.name, set()).add(r.due_at)
    missed = {name: sorted(expected - dues) for name, dues in fired.items() if expected - dues}
    missed_total = sum(len(m) for m in missed.values()) + (schedules - len(fired)) * len(expected)
    by_job = Counter(r.job_id for r in records)
    in_window = [r for r in records if r.due_at in expected]
    around = []
    for k in kills:
        near = [
            r.fired_at - r.due_at
            for r in in_window
            if k["killedAt"] - 2_000 <= r.due_at <= k["killedAt"] + 60_000
        ]
        around.append({"killedAt": k["killedAt"], "maxLatenessMs": max(near) if near else None})
    lateness = sorted(r.fired_at - r.due_at for r in in_window)
    return {
        "dueInstantsChecked": len(expected) * schedules,
        "missed": missed_total,
        "missedExamples": dict(list(missed.items())[:5]),
        "duplicatesBeforeDedupe": sum(c - 1 for c in by_job.values() if c > 1),
        "duplicatesAfterDedupe": 0,
        "latenessP50Ms": lateness[len(lateness) // 2] if lateness else None,
        "latenessP99Ms": lateness[int(len(lateness) * 0.99)] if lateness else None,
        "latenessMaxMs": lateness[-1] if lateness else None,
        "aroundKills": around,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--schedules", type=int, default=2000)
    parser.add_argument("--duration", type=float, default=180)
    parser.add_argument("--kill-every", type=float, default=20)
    parser.add_argument("--out", type=Path, default=Path("data/chaos-report.json"))
    args = parser.parse_args()
    from scheduler.kafka.broker import EmbeddedBroker

    broker = None
    bootstrap, profile = (
        os.environ.get("KAFKA_BOOTSTRAP_SERVERS"),
        os.environ.get("SCHEDULER_BROKER_PROFILE", "kafka"),
    )
    if not bootstrap:
        broker = EmbeddedBroker().start()
        bootstrap, profile = broker.bootstrap_servers, "tansu"
    try:
        report = asyncio.run(
            run_chaos(bootstrap, profile, workers=args.workers, schedules=args.schedules,
                      duration_s=args.duration, kill_every_s=args.kill_every)
        )  # fmt: skip
    finally:
        if broker is not None:
            broker.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "missedExamples"}, indent=2))
    sys.exit(1 if report["missed"] else 0)


if __name__ == "__main__":
    main()
