"""Chaos: several workers, many every-second schedules, faults at random — a worker SIGKILLed and restarted,
frozen (SIGSTOP) for longer than its session timeout and woken (SIGCONT), cut off from the network
(its namespace's link down, tests.netns) for as long and reconnected, or a broker of a 3-node cluster
SIGKILLed and started again — while a second set of schedules is updated over HTTP; then every due instant
is checked against the output topic.

    python -m tests.chaos --workers 3 --schedules 2000 --duration 180      (make chaos)

On KAFKA_BOOTSTRAP_SERVERS if set (SCHEDULER_BROKER_PROFILE says which broker it is), else on Apache Kafka
from its jars (3 nodes when broker faults are asked for, else 1) where java and mvn are, else on the
embedded broker. Schedules use the EACH catch-up policy, so every due instant must appear (late is
allowed, missing is not). The reader reads committed records (on Kafka): a due instant seen twice there
is a duplicate the exactly-once guarantee forbids; on Tansu (at-least-once) repeats carry the job id of
the first and are counted. Every update acknowledged (202) must be what the schedule shows at the end,
and what its last fires carry. Writes a JSON report.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

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
from tests.netns import BROKER_HOST, Lab

if TYPE_CHECKING:
    from scheduler.kafka.kafka_server import KafkaCluster


def _now() -> int:
    return time.time_ns() // 1_000_000


def worker_processes(
    env: dict[str, str], work: Path, count: int, lab: Lab | None = None
) -> list[WorkerProcess]:
    """`count` workers of one app, each with a data dir and a log under `work`; with `lab`, each in its
    own network namespace (serving HTTP on its address there)."""
    return [
        WorkerProcess(
            {**env, "SCHEDULER_DATA_DIR": str(work / f"w{i}")},
            work / f"worker-{i}.log",
            host="127.0.0.1" if lab is None else lab.namespaces[i].address,
            prefix=() if lab is None else lab.namespaces[i].prefix,
        )
        for i in range(count)
    ]


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
    faults: tuple[str, ...] = ("kill",),
    pause_s: float = 14,
    updated: int = 0,
    lab: Lab | None = None,
    cluster: KafkaCluster | None = None,
    standby: int = 0,
) -> dict[str, Any]:
    """`faults`: the kinds taken in turn ("kill": SIGKILL, restart after `down_s`; "pause": SIGSTOP for
    `pause_s`, then SIGCONT; "cut": the worker's network cut for `pause_s`, then healed: it needs `lab`, the
    workers' namespaces, and a broker on netns.BROKER_HOST; "broker": a node of `cluster`, a 3-node Kafka,
    SIGKILLed and started again after `pause_s`: the next broker fault waits until every partition is in
    sync again). `updated`: schedules updated over HTTP throughout, one request at a time. `standby`: the
    workers' standby replicas (SCHEDULER_STANDBY_REPLICAS)."""
    if "cut" in faults and (lab is None or len(lab.namespaces) < workers):
        raise ValueError("network cuts need a netns.Lab with a namespace per worker")
    if "broker" in faults and (cluster is None or len(cluster.nodes) < 3):
        raise ValueError("broker faults need the 3-node KafkaCluster the workers use")
    rnd = random.Random(seed)
    work = work_dir or Path(tempfile.mkdtemp(prefix="chaos-"))
    app_id = f"chaos{uuid.uuid4().hex[:8]}"
    out = f"{app_id}-out"
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "SCHEDULER_BROKER_PROFILE": profile,
        "SCHEDULER_APP_ID": app_id,
        "SCHEDULER_PARTITIONS": str(partitions),
        "SCHEDULER_LOG_LEVEL": os.environ.get("CHAOS_LOG_LEVEL", "warning"),
        "SCHEDULER_AUTH": "off",
        "SCHEDULER_PROGRESS_INTERVAL_MS": "500",
        "SCHEDULER_STANDBY_REPLICAS": str(standby),
    }
    if cluster is not None and len(cluster.nodes) == 3:
        env["SCHEDULER_REPLICATION_FACTOR"] = "3"
    procs = worker_processes(env, work, workers, lab)
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
        for i in range(updated):
            s = Schedule(ScheduleKey("chaos", f"u{i:03d}"), FrequencyTrigger(TimeUnit.SECONDS, 1), out,
                         {"v": "0"}, enabled=True)  # fmt: skip
            commands.append(ScheduleCommand(s.key, Action.INSERT, s))
        acked: dict[str, str] = {}
        stop_updates = asyncio.Event()
        # the output topic outlives a broker's loss, as the worker's own topics do
        replication = 3 if cluster is not None and len(cluster.nodes) == 3 else 1
        async with TopicReader(
            bootstrap, out, read_committed=profile == "kafka", replication=replication
        ) as reader:
            await send_commands(bootstrap, f"{app_id}-commands", *commands)
            names = {c.key.name for c in commands}
            try:
                await reader.wait_for(lambda r: len({x.key.name for x in r}) == len(names), timeout_s=120)
            except AssertionError:
                silent = sorted(names - {x.key.name for x in reader.records})
                raise AssertionError(f"{len(silent)} schedules never fired, e.g. {silent[:10]}") from None
            updating = asyncio.ensure_future(_update(procs, updated, out, acked, stop_updates, rnd))
            window_start = _now() + 2_000
            end = time.monotonic() + duration_s
            turn = 0
            while time.monotonic() + kill_every_s < end:
                kind = faults[turn % len(faults)]
                turn += 1
                await asyncio.sleep(kill_every_s - (down_s if kind == "kill" else pause_s))
                victim = rnd.randrange(workers)
                if kind == "broker":
                    assert cluster is not None
                    await asyncio.to_thread(cluster.wait_fully_replicated, 120)  # (the last one caught up)
                    victim = rnd.choice([n.node_id for n in cluster.nodes])
                    cluster.kill(victim)
                    at = _now()
                    await asyncio.sleep(pause_s)
                    cluster.start_node(victim)
                elif kind == "pause":
                    procs[victim].pause()
                    at = _now()
                    await asyncio.sleep(pause_s)
                    procs[victim].resume()
                elif kind == "cut":
                    assert lab is not None
                    lab.namespaces[victim].cut()
                    at = _now()
                    await asyncio.sleep(pause_s)
                    lab.namespaces[victim].heal()
                else:
                    procs[victim].kill()
                    at = _now()
                    await asyncio.sleep(down_s)
                    procs[victim].start()  # same data dir: restores from local state and the changelog tail
                kills.append({"kind": kind, "worker": victim, "killedAt": at, "restartedAt": _now()})
            await asyncio.sleep(max(0.0, end - time.monotonic()))
            stop_updates.set()
            acknowledged = await updating
            window_end = _now()
            # late fires of the last takeover arrive: until every due instant of the window is there (or
            # settle_s), then a moment more for a repeat
            settled = time.monotonic() + settle_s
            while time.monotonic() < settled and not all_fired(
                reader.records, schedules, window_start, window_end
            ):
                await asyncio.sleep(0.5)
            await asyncio.sleep(min(REPEAT_GRACE_S, max(0.0, settled - time.monotonic())))
            records = list(reader.records)
            final = await _final_data(procs, updated)
    finally:
        for p in procs:
            p.kill()
        for ns in lab.namespaces if lab is not None else ():
            if ns.is_cut:
                ns.heal()
    lost = {name: (acked[name], final.get(name)) for name in acked if final.get(name) != {"v": acked[name]}}
    last_fired = {}
    for r in sorted(records, key=lambda r: r.due_at):
        if r.key.name.startswith("u"):
            last_fired[r.key.name] = r.data
    stale_fires = {n: d for n, d in last_fired.items() if n in acked and d != {"v": acked[n]}}
    checked = [r for r in records if r.key.name.startswith("s")]
    return analyse(checked, schedules, window_start, window_end, kills) | {
        "workers": workers,
        "schedules": schedules,
        "duration_s": duration_s,
        "kills": kills,
        "updatesAcknowledged": acknowledged,
        "lostUpdates": len(lost),
        "lostUpdateExamples": dict(list(lost.items())[:5]),
        "lastFiresNotCarryingTheLastUpdate": len(stale_fires),
        "logs": str(work),
    }


async def _update(
    procs: list[WorkerProcess],
    updated: int,
    out: str,
    acked: dict[str, str],
    stop: asyncio.Event,
    rnd: random.Random,
) -> int:
    """PUT the `updated` schedules in turn, one request at a time, through a random worker (one that is
    paused or down answers nothing: the request times out and the next goes elsewhere). `acked`: the value
    each schedule's last acknowledged (202) update carries. Returns how many were acknowledged."""
    if not updated:
        return 0
    n = acks = 0
    async with httpx.AsyncClient(timeout=3) as client:
        while not stop.is_set():
            n += 1
            name = f"u{n % updated:03d}"
            body = {"topic": out, "enabled": True, "data": {"v": str(n)},
                    "trigger": {"type": "frequency", "timeUnit": "SECONDS", "time": 1}}  # fmt: skip
            url = f"{rnd.choice(procs).url}/schedules/chaos/{name}"
            try:
                r = await client.put(url, json=body, headers={"X-Request-Deadline": str(_now() + 2_000)})
            except httpx.HTTPError:
                continue
            if r.status_code == 202:
                acked[name] = str(n)
                acks += 1
            await asyncio.sleep(0.05)
    return acks


async def _final_data(procs: list[WorkerProcess], updated: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=5) as client:
        for i in range(updated):
            name = f"u{i:03d}"
            for _ in range(60):
                try:
                    r = await client.get(f"{procs[i % len(procs)].url}/schedules/chaos/{name}")
                    if r.status_code == 200:
                        out[name] = r.json()["data"]
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.5)
    return out


#: once every due instant of the window arrived, how long a repeat of one is still waited for
REPEAT_GRACE_S = 5.0


def _due_instants(start: int, end: int) -> set[int]:
    """Every whole second in the window [start, end) that the schedules must fire."""
    return set(range((start // 1000 + 1) * 1000, end - 1000, 1000))


def all_fired(records: list[Any], schedules: int, start: int, end: int) -> bool:
    """Whether each of the checked schedules (named "s…") fired every due instant of the window [start,
    end): what a test waits for, with a deadline, before it analyses (late fires of a takeover)."""
    expected = _due_instants(start, end)
    fired: dict[str, set[int]] = {}
    for r in records:
        if r.key.name.startswith("s") and r.due_at in expected:
            fired.setdefault(r.key.name, set()).add(r.due_at)
    return len(fired) >= schedules and all(len(dues) == len(expected) for dues in fired.values())


def analyse(
    records: list[Any], schedules: int, start: int, end: int, kills: list[dict[str, Any]]
) -> dict[str, Any]:
    expected = _due_instants(start, end)
    fired: dict[str, set[int]] = {}
    for r in records:
        fired.setdefault(r.key.name, set()).add(r.due_at)
    missed = {name: sorted(expected - dues) for name, dues in fired.items() if expected - dues}
    missed_total = sum(len(m) for m in missed.values()) + (schedules - len(fired)) * len(expected)
    by_job = Counter(r.job_id for r in records)
    seen = Counter((r.key.name, r.due_at) for r in records if r.due_at in expected)
    in_window = [r for r in records if r.due_at in expected]
    around = []
    starts = sorted(k["killedAt"] for k in kills)
    for k in kills:
        # a fault owns the due instants from just before it to just before the next one (60 s at most)
        later = [t for t in starts if t > k["killedAt"]]
        until = min([k["killedAt"] + 60_000, *(t - 2_000 for t in later[:1])])
        near = [r.fired_at - r.due_at for r in in_window if k["killedAt"] - 2_000 <= r.due_at < until]
        around.append(
            {"kind": k.get("kind", "kill"), "at": k["killedAt"], "maxLatenessMs": max(near) if near else None}
        )
    by_kind: dict[str, int] = {}
    for a in around:
        if a["maxLatenessMs"] is not None:
            by_kind[a["kind"]] = max(by_kind.get(a["kind"], 0), a["maxLatenessMs"])
    lateness = sorted(r.fired_at - r.due_at for r in in_window)
    return {
        "dueInstantsChecked": len(expected) * schedules,
        "missed": missed_total,
        "missedExamples": dict(list(missed.items())[:5]),
        # a due instant the reader (read_committed on Kafka) saw more than once; each carried one job id
        "duplicates": sum(c - 1 for c in seen.values() if c > 1),
        "duplicatesBeforeDedupe": sum(c - 1 for c in by_job.values() if c > 1),
        "duplicatesAfterDedupe": 0,
        "longestGapMsByFault": by_kind,
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
    parser.add_argument(
        "--faults",
        default="kill,pause,cut,broker",
        help="kinds taken in turn: kill, pause, cut (needs root and ip), broker (a node of a 3-node Kafka "
        "from its jars)",
    )
    parser.add_argument("--updated", type=int, default=200, help="schedules updated over HTTP throughout")
    parser.add_argument("--standby", type=int, default=0, help="standby replicas of each partition's tables")
    parser.add_argument("--out", type=Path, default=Path("data/chaos-report.json"))
    args = parser.parse_args()
    from scheduler.kafka.broker import EmbeddedBroker
    from scheduler.kafka.kafka_server import KafkaCluster, missing_tools

    faults = tuple(args.faults.split(","))
    broker: Any = None
    bootstrap, profile = (
        os.environ.get("KAFKA_BOOTSTRAP_SERVERS"),
        os.environ.get("SCHEDULER_BROKER_PROFILE", "kafka"),
    )
    with contextlib.ExitStack() as stack:
        # cuts: the workers in namespaces of their own, the broker where they reach it (netns.BROKER_HOST;
        # a broker of KAFKA_BOOTSTRAP_SERVERS must listen there)
        lab = stack.enter_context(Lab(args.workers)) if "cut" in faults else None
        if "broker" in faults and bootstrap:
            raise SystemExit("broker faults need the Kafka this starts: unset KAFKA_BOOTSTRAP_SERVERS")
        if not bootstrap and not missing_tools():  # Apache Kafka from its jars, as `make test`
            host = BROKER_HOST if lab is not None else "127.0.0.1"
            nodes = 3 if "broker" in faults else 1
            broker = KafkaCluster(Path(tempfile.mkdtemp(prefix="chaos-kafka-")), nodes, host=host).start()
            stack.callback(broker.stop)
            bootstrap, profile = broker.bootstrap_servers, "kafka"
        elif not bootstrap:
            if lab is not None or "broker" in faults:
                raise SystemExit(f"network cuts and broker faults need Apache Kafka ({missing_tools()})")
            broker = EmbeddedBroker().start()
            stack.callback(broker.stop)
            bootstrap, profile = broker.bootstrap_servers, "tansu"
        print(f"chaos on {profile} at {bootstrap}, faults {', '.join(faults)}", flush=True)
        report = asyncio.run(
            run_chaos(bootstrap, profile, workers=args.workers, schedules=args.schedules,
                      duration_s=args.duration, kill_every_s=args.kill_every, faults=faults,
                      updated=args.updated, lab=lab, cluster=broker if "broker" in faults else None,
                      standby=args.standby)
        )  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "missedExamples"}, indent=2))
    exactly_once = profile == "kafka"
    failed = report["missed"] or report["lostUpdates"] or (exactly_once and report["duplicates"])
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
