"""Benchmarks (`make bench`): they report, never assert. Results go to tests/bench/results/ (results.json, a
Markdown table and a PNG plot) and into the docs site's Benchmarks page (docs/content/benchmarks.md).

Scenarios (each bounded to a minute or two):
- core: the scheduler core in-process — due-time heaps, cron math, schedule state read from RocksDB and
  decoded, fired task encoded — up to the producer call, with a null sink that takes whole batches as a
  worker's producer does; N live cron schedules, active from once they are written (nothing overdue at
  the takeover), measured after their first minute of firing.
- firing: end to end on the broker — one worker process, N schedules inserted through the commands topic,
  lateness measured at a consumer of the output topic.
- commands: INSERTs per second through the commands topic, and the time until all are live (with the
  firing rows); --commands N: N hourly INSERTs produced at once, with and without transactions (the
  commands ceiling).
- ceiling (--ceiling RATES): N schedules each firing every second, N raised in turn until a step is not
  sustained (missed fires, p99 over a second, or lateness drifting): the knee of end-to-end fires/s.
- workers (--workers 1 2 3): that many workers share the README workload of --workers-schedules; fires/s,
  lateness, partitions and RSS per worker; then one stops and the time until its partitions fire again.
- events: event -> launch request latency for a partition trigger without constraints, measured once the
  trigger index holds all N schedules.
- recovery: worker start to first fire with N schedules in the changelog, with and without standby; with
  --recovery-seeded (default 1M) the bench writes the changelog itself instead of INSERTing through commands.
- spread: N daily "anytime" schedules (a daily cron with `spreadMs` a day, seed 003's user story 5): the
  per-second and per-minute histograms of their fire instants over a day, computed by the evaluator the
  punctuator uses. `--only spread` runs it alone (its own JSON, plot and README block).

tests/bench/ceiling.py measures Faust's own per-message cost on the same broker (the ceiling of an agent);
tests/bench/hops.py times each hop of event -> launch.
- peer: APScheduler 3.x (AsyncIOScheduler, memory job store) on the same cron workload, in the same run.

Workload: N cron schedules, 6 fields, UTC; 10 % every 5 s (`*/5 * * * * *`), 90 % once a minute at a
second spread over the minute (`S * * * * *`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from tests.bench.common import expected_fires_per_s, pct, rss_mb
from tests.bench.end_to_end import ceiling, commands, events, firing, http_creates, lists
from tests.bench.in_process import core, peer, spread
from tests.bench.recovery import recovery, recovery_seeded
from tests.bench.report import doc_image, plot, plot_scale, spread_report, table, update_readme


async def isolated(kind: str, n: int, duration_s: float) -> dict[str, Any]:
    """An in-process scenario in a fresh interpreter, so its memory figures are its own."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.bench.run", "--single", f"{kind}:{n}", "--duration", str(duration_s),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    sys.stderr.write(err.decode(errors="replace"))
    line = next((x for x in out.decode().splitlines() if x.startswith("RESULT ")), None)
    if line is None:  # (e.g. a peer's tool missing: its message, not a StopIteration)
        raise RuntimeError(
            f"{kind} {n}: exit {proc.returncode}: {err.decode(errors='replace')[-500:].strip()}"
        )
    return dict(json.loads(line.removeprefix("RESULT ")))


@contextlib.contextmanager
def started_broker(kind: str) -> Iterator[tuple[str, str, str]]:
    """(bootstrap servers, profile, description) of a broker this bench starts and stops: Apache Kafka from
    its jars (1 node, KRaft, the version the tests use) or the embedded Tansu broker."""
    if kind == "kafka":
        from scheduler.kafka.kafka_server import KAFKA_VERSION, KafkaCluster

        with KafkaCluster(Path(tempfile.mkdtemp(prefix="bench-kafka-")), heap_mb=1024) as cluster:
            yield cluster.bootstrap_servers, "kafka", f"Apache Kafka {KAFKA_VERSION} (1 node)"
    else:
        from scheduler.kafka.broker import EmbeddedBroker

        with EmbeddedBroker() as broker:
            yield broker.bootstrap_servers, "tansu", "embedded Tansu"


async def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{psutil.cpu_count()} cores, {round(psutil.virtual_memory().total / 2**30)} GiB, "
        f"Python {platform.python_version()}",
        "command": "make bench"
        if len(sys.argv) == 1
        else " ".join(["python -m tests.bench.run", *sys.argv[1:]]),
        "duration_s": args.duration,
        "brokers": [],
        "firing": [],
    }

    async def scenario(section: str, label: str, measure: Any, broker: str | None = None) -> None:
        """One scenario; a failure is recorded with its reason, and the others still run."""
        print(label, flush=True)
        try:
            got = await measure
            for result in got if isinstance(got, list) else [got]:
                if broker is not None:
                    result = {**result, "broker": broker}
                    if section == "firing":
                        result["layer"] = f"{result['layer']} ({broker})"
                results.setdefault(section, []).append(result)
        except Exception as exc:  # noqa: BLE001 - a benchmark reports what went wrong and goes on
            print(f"{label} failed: {exc!r}", flush=True)
            results.setdefault("failed", []).append({"scenario": label, "error": repr(exc)[:300]})

    kinds = (
        ("core", args.core),
        ("core-hourly", args.core_hourly),
        ("peer", args.peer),
        ("celery", args.celery),
    )
    for kind, sizes in kinds:
        for n in sizes:
            await scenario("firing", f"{kind} {n}", isolated(kind, n, args.duration))
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    brokers = ["external"] if external else args.brokers.split(",")
    for i, kind in enumerate(brokers):
        if kind == "external":
            context: Any = contextlib.nullcontext(
                (
                    external,
                    os.environ.get("SCHEDULER_BROKER_PROFILE", "kafka"),
                    f"KAFKA_BOOTSTRAP_SERVERS={external}",
                )
            )
        else:
            context = started_broker(kind)
        with context as (bootstrap, profile, description):
            results["brokers"].append(description)
            name = "Kafka" if profile == "kafka" else "Tansu"
            for n in args.e2e:
                await scenario(
                    "firing",
                    f"end to end {n} on {description}",
                    firing(bootstrap, profile, n, args.duration),
                    name,
                )
                if profile == "kafka":  # what exactly-once costs: the same without transactions
                    await scenario(
                        "firing",
                        f"end to end {n} on {description}, no transactions",
                        firing(bootstrap, profile, n, args.duration, transactions=False),
                        name,
                    )
            for n in args.lists if i == 0 else []:
                await scenario("lists", f"lists {n} on {description}", lists(bootstrap, profile, n), name)
            for n in args.http if i == 0 else []:
                await scenario(
                    "http", f"HTTP creates {n} on {description}", http_creates(bootstrap, profile, n), name
                )
            for n in args.events:
                await scenario(
                    "events", f"events {n} on {description}", events(bootstrap, profile, n, 100), name
                )
                if profile == "kafka":  # what exactly-once costs the event path
                    await scenario(
                        "events",
                        f"events {n} on {description}, no transactions",
                        events(bootstrap, profile, n, 100, transactions=False),
                        name,
                    )
            for n in args.commands if i == 0 else []:
                for tx in (True, False) if profile == "kafka" else (True,):
                    await scenario(
                        "commands", f"commands {n} (transactions={tx}) on {description}",
                        commands(bootstrap, profile, n, tx), name,
                    )  # fmt: skip
            if args.ceiling and i == 0:
                await scenario(
                    "ceiling", f"ceiling {args.ceiling} on {description}",
                    ceiling(bootstrap, profile, args.ceiling, args.duration), name,
                )  # fmt: skip
            for k in args.workers if i == 0 else []:
                await scenario(
                    "workers", f"{k} workers, {args.workers_schedules} schedules on {description}",
                    firing(bootstrap, profile, args.workers_schedules, args.duration, workers=k), name,
                )  # fmt: skip
            # the 1M changelog is restored on the first broker only (~5 min each)
            for n in args.recovery_seeded if i == 0 else []:
                for hourly in (False, True):
                    await scenario(
                        "recovery", f"recovery {n} (seeded changelog, hourly={hourly}) on {description}",
                        recovery_seeded(bootstrap, profile, n, hourly), name,
                    )  # fmt: skip
            for n in args.recovery:
                for standby in (False, True):
                    await scenario(
                        "recovery", f"recovery {n} standby={standby} on {description}",
                        recovery(bootstrap, profile, n, standby), name,
                    )  # fmt: skip
    results["broker"] = " and ".join(results["brokers"])
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--core", type=int, nargs="*", default=[1_000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--peer", type=int, nargs="*", default=[1_000, 10_000, 100_000])
    parser.add_argument(
        "--core-hourly",
        type=int,
        nargs="*",
        default=[100_000, 1_000_000],
        help="the core on a sparse workload: each schedule once an hour (memory should not grow with N)",
    )
    parser.add_argument(
        "--celery", type=int, nargs="*", default=[1_000, 10_000, 100_000], help="Celery beat + RedBeat"
    )
    parser.add_argument("--e2e", type=int, nargs="*", default=[1_000, 10_000, 100_000])
    parser.add_argument("--events", type=int, nargs="*", default=[1_000, 100_000])
    parser.add_argument("--http", type=int, nargs="*", default=[5_000], help="schedules created over HTTP")
    parser.add_argument(
        "--http-batches-only", action="store_true", help="with --only http: no row of one POST each"
    )
    parser.add_argument(
        "--lists", type=int, nargs="*", default=[1_000, 100_000], help="GET /schedules pages (first broker)"
    )
    parser.add_argument("--recovery", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument(
        "--ceiling",
        type=int,
        nargs="*",
        default=[5_000, 10_000, 20_000, 40_000],
        help="fire rates tried in turn end to end (schedules firing every second; first broker) until one is not sustained",
    )
    parser.add_argument(
        "--commands", type=int, nargs="*", default=[200_000], help="INSERTs produced at once (first broker)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        nargs="*",
        default=[1, 2, 3],
        help="workers sharing the README workload of --workers-schedules (first broker); then one stops",
    )
    parser.add_argument("--workers-schedules", type=int, default=100_000)
    # a changelog written directly (seed_changelog), no standby: 1M INSERTs through commands take ~20 min
    parser.add_argument("--recovery-seeded", type=int, nargs="*", default=[1_000_000])
    parser.add_argument("--duration", type=float, default=60)
    parser.add_argument(
        "--brokers",
        default="kafka,tansu",
        help="the brokers the end-to-end, events and recovery scenarios run on, in order (default: Apache "
        "Kafka from its jars, then the embedded Tansu broker; `--brokers tansu` for Tansu alone); "
        "KAFKA_BOOTSTRAP_SERVERS, when set, replaces them",
    )
    parser.add_argument("--out", type=Path, default=Path("tests/bench/results"))
    parser.add_argument("--readme", type=Path, default=Path("docs/content/benchmarks.md"))
    parser.add_argument("--spread", type=int, default=100_000, help="daily anytime schedules (0: none)")
    parser.add_argument(
        "--only",
        choices=["spread", "http"],
        help="run that scenario alone (http: --http's sizes on Kafka, rows in OUT/http.json)",
    )
    parser.add_argument("--single", help=argparse.SUPPRESS)  # internal: one core/peer scenario, JSON out
    args = parser.parse_args()
    if args.single:
        kind, n = args.single.split(":")
        if kind == "celery":
            from tests.bench import celery_peer

            r = celery_peer.measure(int(n), args.duration, rss_mb, pct, expected_fires_per_s(int(n)))
            print("RESULT " + json.dumps(r))
            return
        if kind == "core-hourly":
            print("RESULT " + json.dumps(asyncio.run(core(int(n), args.duration, hourly=True))))
            return
        scenario = core if kind == "core" else peer
        print("RESULT " + json.dumps(asyncio.run(scenario(int(n), args.duration))))
        return
    if args.spread and (args.only == "spread" or args.only is None):
        r = {
            **spread(args.spread),
            "date": time.strftime("%Y-%m-%d"),
            "machine": f"{psutil.cpu_count()} cores, Python {platform.python_version()}",
            "command": "make bench"
            if len(sys.argv) == 1
            else " ".join(["python -m tests.bench.run", *sys.argv[1:]]),
        }
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "spread.json").write_text(json.dumps(r, indent=2))
        text = spread_report(r, args.out)
        update_readme(args.readme, text, "bench-spread")
        print(text)
    if args.only == "http":
        with started_broker("kafka") as (bootstrap, profile, description):
            rows = [
                row
                for n in args.http
                for row in asyncio.run(http_creates(bootstrap, profile, n, not args.http_batches_only))
            ]
        r = {"rows": rows, "broker": description, "date": time.strftime("%Y-%m-%d"),
             "machine": f"{psutil.cpu_count()} cores, Python {platform.python_version()}",
             "command": " ".join(["python -m tests.bench.run", *sys.argv[1:]])}  # fmt: skip
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "http.json").write_text(json.dumps(r, indent=2))
    if args.only:
        return
    results = asyncio.run(run(args))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2))
    text = table(results)
    plot(results, args.out / "lateness.png")
    plot_scale(results, args.out / "scale.png")
    (args.out / "results.md").write_text(text)
    update_readme(
        args.readme,
        text
        + f"\n![lateness vs schedules]({doc_image(args.out / 'lateness.png')})\n"
        + f"\n![RSS, state on disk and fires/s vs schedules]({doc_image(args.out / 'scale.png')})\n",
    )
    print(text)


if __name__ == "__main__":
    sys.exit(main())
