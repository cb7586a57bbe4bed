"""What Faust itself costs per message on this machine and broker: the ceiling of any agent's throughput.

    .venv/bin/python -m tests.bench.ceiling 50000

Starts the embedded broker (or uses KAFKA_BOOTSTRAP_SERVERS), then for each mode a one-agent Faust app over
8 partitions (the worker's broker profile, raw bytes) in its own process, produces N 200-byte records batched
and reports the agent's events/s from its first to its last event:
- count: the agent only counts (`async for event in stream.events()`);
- table: it also writes each record to a RocksDB table (a changelog record each), as a schedule INSERT does.
The commands topic of the scheduler goes through this path, so its ingest rate is below both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

MODES = ("count", "table")


def app_main() -> None:
    """The Faust app (run as `python -m tests.bench.ceiling --app`, configured by the environment)."""
    import faust

    from scheduler.kafka.config import broker_profile
    from scheduler.kafka.consumers import apply_consumer_profile

    profile = os.environ["CEILING_PROFILE"]
    apply_consumer_profile(profile)
    mode, out, expect = (
        os.environ["CEILING_MODE"],
        Path(os.environ["CEILING_OUT"]),
        int(os.environ["CEILING_N"]),
    )
    app = faust.App(
        os.environ["CEILING_APP_ID"],
        broker="kafka://" + os.environ["CEILING_BOOTSTRAP"],
        store="rocksdb://",
        datadir=os.environ["CEILING_DATA"],
        topic_partitions=8,
        processing_guarantee="at_least_once",
        web_enabled=False,
        **broker_profile(profile),  # type: ignore[arg-type]
    )
    raw: dict[str, Any] = {
        "key_type": bytes,
        "value_type": bytes,
        "key_serializer": "raw",
        "value_serializer": "raw",
    }
    topic = app.topic(os.environ["CEILING_TOPIC"], partitions=8, internal=True, **raw)
    table: Any = app.Table("ceiling", partitions=8, key_type=bytes, value_type=bytes)
    table.key_serializer = table.value_serializer = "raw"
    seen = {"n": 0, "t0": 0.0}

    @app.agent(topic)
    async def agent(stream: Any) -> None:
        async for event in stream.events():
            if seen["n"] == 0:
                seen["t0"] = time.monotonic()
            if mode == "table":
                table[event.message.key] = event.message.value
            seen["n"] += 1
            if seen["n"] == expect:
                took = time.monotonic() - seen["t0"]
                out.write_text(json.dumps({"mode": mode, "events": expect, "seconds": round(took, 2),
                                           "events_per_s": round((expect - 1) / took)}))  # fmt: skip

    worker = faust.Worker(app, loglevel="warning")
    worker.spinner = None
    worker.execute_from_commandline()


async def measure(bootstrap: str, profile: str, mode: str, n: int, timeout_s: float = 300) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-ceiling-"))
    app_id = f"ceiling{uuid.uuid4().hex[:6]}"
    out = work / "result.json"
    env = {**os.environ, "CEILING_PROFILE": profile, "CEILING_MODE": mode, "CEILING_OUT": str(out),
           "CEILING_N": str(n), "CEILING_APP_ID": app_id, "CEILING_BOOTSTRAP": bootstrap,
           "CEILING_DATA": str(work / "data"), "CEILING_TOPIC": f"{app_id}-in"}  # fmt: skip
    log = (work / "app.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "tests.bench.ceiling", "--app", "worker"], env=env,
                            stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        await asyncio.sleep(20)  # the group join (Tansu holds it for half the session timeout)
        from tests.bench.common import produce_keyed

        await produce_keyed(bootstrap, f"{app_id}-in", ((uuid.uuid4().bytes, b"v" * 200) for _ in range(n)))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not out.exists():
            await asyncio.sleep(0.5)
        if not out.exists():
            return {
                "mode": mode,
                "events": n,
                "events_per_s": None,
                "error": "not all events within the timeout",
            }
        return dict(json.loads(out.read_text()))
    finally:
        proc.kill()
        proc.wait()
        log.close()


async def run(n: int) -> list[dict[str, Any]]:
    from scheduler.kafka.broker import EmbeddedBroker

    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    results = []
    for mode in MODES:  # a fresh embedded broker each
        broker = None if bootstrap else EmbeddedBroker().start()
        try:
            servers = bootstrap or broker.bootstrap_servers  # type: ignore[union-attr]
            results.append(await measure(servers, "kafka" if bootstrap else "tansu", mode, n))
        finally:
            if broker is not None:
                broker.stop()
    return results


def main() -> None:
    if "--app" in sys.argv:
        sys.argv.remove("--app")
        app_main()
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("n", type=int, nargs="?", default=50_000)
    args = parser.parse_args()
    for result in asyncio.run(run(args.n)):
        print(json.dumps(result))


if __name__ == "__main__":
    main()
