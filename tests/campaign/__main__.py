"""python -m tests.campaign --seeds N [--first S] [--duration 180] [--out data/campaign.json]
python -m tests.campaign --seed S ...    (replay one seed)

Each seed gets a fresh Apache Kafka from its jars (1 or 3 nodes, as its plan chose) and prints its plan
first, then its figures; the exit code is 1 if any seed missed an instant, fired one twice, or lost an
acknowledged write."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.campaign.plan import START_MODES, choose
from tests.campaign.run import LEAD_S, Campaign
from tests.netns import BROKER_HOST, Lab


def failed(report: dict[str, Any]) -> bool:
    return bool(
        report["missed"]
        or report["duplicates"]
        or report.get("beyondMaxFires")
        or report["schedulesNotShown"]
        or report["workersDied"]
        or report.get("workersNeverReady")
        or report["lostWrites"]
        or report["eventsMissed"]
        or report["eventDuplicates"]
    )


def run_seed(
    seed: int, duration_s: float, brokers: int | None, scale: float, work: Path, **fixed: Any
) -> dict[str, Any]:
    """One seed on a fresh Apache Kafka; `fixed`: what the plan does not choose (see plan.choose)."""
    from scheduler.kafka.kafka_server import KafkaCluster

    plan = choose(seed, duration_s, brokers=brokers, scale=scale, **fixed)
    print(plan.line(), flush=True)
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        # a cut: each worker in a network namespace of its own, the brokers where they reach them
        lab = stack.enter_context(Lab(plan.workers)) if plan.cuts else None
        host = BROKER_HOST if lab is not None else "127.0.0.1"
        cluster = KafkaCluster(work / "kafka", plan.brokers, host=host).start()
        stack.callback(cluster.stop, timeout_s=0)
        report = asyncio.run(Campaign(plan, cluster.bootstrap_servers, work, cluster, lab).run())
    report["seconds"] = round(time.monotonic() - started)
    return report


def summary(report: dict[str, Any]) -> str:
    gaps = ", ".join(f"{k} {v['ms'] / 1000:.1f} s" for k, v in report["longestGapByFault"].items()) or "-"
    stalls = f"{len(report['stalls'])} stalls ({report['stallsHealed']} healed, {len(report['workersLeft'])} left, {len(report['workersDied'])} died, {len(report.get('workersNeverReady', ()))} never ready)"
    return (
        f"seed {report['seed']}: {report['dueInstantsChecked']:,} instants checked, {report['missed']} missed, "
        f"{report['duplicates']} duplicates, {report.get('beyondMaxFires', 0)} past maxFires, "
        f"{report['lostWrites']} lost of {report['writesAcknowledged']} "
        f"writes, {report['eventsChecked']} events ({report['eventsMissed']} missed, "
        f"{report['eventDuplicates']} repeated), {report['schedulesNotShown']} schedules lost, "
        f"{report['appliedPastLead']} applied > {LEAD_S:.0f} s after sent (longest "
        f"{report['longestApplyMs'] / 1000:.1f} s), longest gap {gaps}; {stalls}; listed after "
        f"{report.get('listWaitS', 0):.0f} s; {report['seconds']} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=1, help="how many seeds, from --first")
    parser.add_argument("--first", type=int, default=None, help="the first seed (default: from the clock)")
    parser.add_argument("--seed", type=int, default=None, help="one seed (a replay)")
    parser.add_argument("--duration", type=float, default=180, help="seconds of faults per seed")
    parser.add_argument("--brokers", type=int, choices=(1, 3), default=None, help="fixed (default: chosen)")
    parser.add_argument("--scale", type=float, default=1.0, help="the schedules' number, relative")
    parser.add_argument("--workers", type=int, default=None, help="fixed (default: 2-4, chosen)")
    parser.add_argument("--start", choices=START_MODES, default=None, help="fixed (default: chosen)")
    parser.add_argument("--paths", default=None, help="fixed, comma-separated: topic, http, light")
    parser.add_argument("--kinds", default=None, help="fixed, as frequency=1300,cron_zone=10")
    parser.add_argument("--faults", default=None, help="the fault kinds to choose from, comma-separated")
    parser.add_argument("--out", type=Path, default=Path("data/campaign.json"))
    args = parser.parse_args()
    # the checker's own readers: a broker killed makes them warn for every partition it led (noise here)
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    fixed: dict[str, Any] = {
        "workers": args.workers,
        "start": args.start,
        "paths": tuple(args.paths.split(",")) if args.paths else None,
        "kinds": {k: int(n) for k, n in (kv.split("=") for kv in args.kinds.split(","))}
        if args.kinds
        else None,
        "fault_kinds": tuple(args.faults.split(",")) if args.faults else None,
    }
    first = (
        args.seed if args.seed is not None else (args.first if args.first is not None else int(time.time()))
    )
    seeds = [first] if args.seed is not None else list(range(first, first + args.seeds))
    reports = []
    for seed in seeds:
        work = Path(tempfile.mkdtemp(prefix=f"campaign-{seed}-"))
        report = run_seed(seed, args.duration, args.brokers, args.scale, work, **fixed)
        reports.append(report)
        print(summary(report), flush=True)
        if failed(report):
            print(
                json.dumps(
                    {
                        k: report[k]
                        for k in (
                            "missedExamples",
                            "lostWriteExamples",
                            "eventsMissedExamples",
                            "longestGapByFault",
                            "faults",
                        )
                    },
                    indent=2,
                )
            )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(reports, indent=2))
    print("\n".join(["", "campaign:", *(summary(r) for r in reports)]))
    sys.exit(1 if any(failed(r) for r in reports) else 0)


if __name__ == "__main__":
    main()
