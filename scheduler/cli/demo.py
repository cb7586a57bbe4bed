"""`scheduler demo` (make demo): the data loop end to end on the embedded broker with Spark local.

A feed ingest writes three daily partitions of demo.clicks; the transform is triggered by those three
partitions; the report is triggered by the transform's success and gated by a time window. The demo prints
what fired, what launched and why, every run transition, and the report, then stops what it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer

from scheduler.kafka.broker import free_port
from scheduler.wire.codec import DecodeError, decode

CRON_COPY = "demo/tools/command/cron-copy"
PROGRAMS = {
    "demo/pipelines/pyspark/ingest": "scheduler.examples.pipelines:feed_ingest",
    "demo/pipelines/pyspark/transform": "scheduler.examples.pipelines:transform",
    "demo/pipelines/pyspark/report": "scheduler.examples.pipelines:report",
}


def say(message: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {message}", flush=True)


def schedules(now: datetime) -> list[dict[str, Any]]:
    window_start = (now - timedelta(hours=1)).strftime("%H:%M")
    window_end = (now + timedelta(hours=1)).strftime("%H:%M")
    return [
        {
            "tenant": "demo",
            "name": "ingest",
            "enabled": True,
            "trigger": {
                "type": "frequency",
                "timeUnit": "HOURS",
                "time": 24,
                "start": int((time.time() + 3) * 1000),
            },
            "program": "demo/pipelines/pyspark/ingest",
            "data": {"days": "3", "dataset": "demo.clicks"},
        },
        {
            # The cron-only way, for comparison: runs every 5 s whether or not new clicks arrived.
            "tenant": "demo",
            "name": "cron-copy",
            "enabled": True,
            "trigger": {"type": "cron", "expression": "*/5 * * * * *"},
            "program": CRON_COPY,
            "data": {"inputs": "demo.clicks"},
        },
        {
            "tenant": "demo",
            "name": "transform",
            "enabled": True,
            "trigger": {"type": "partition", "dataset": "demo.clicks", "minPartitions": 3},
            "program": "demo/pipelines/pyspark/transform",
            "constraints": [{"type": "concurrency", "maxRuns": 1}],
        },
        {
            "tenant": "demo",
            "name": "report",
            "enabled": True,
            "trigger": {
                "type": "programStatus",
                "program": "demo/pipelines/pyspark/transform",
                "on": ["SUCCEEDED"],
            },
            "program": "demo/pipelines/pyspark/report",
            "constraints": [
                {"type": "timeWindow", "start": window_start, "end": window_end, "timezone": "UTC"}
            ],
        },
    ]


async def _watch(bootstrap: str, app_id: str, api: httpx.AsyncClient, deadline: float) -> bool:
    """Print fires, launches and run transitions until the report run ends; True if it COMPLETED."""
    consumer = AIOKafkaConsumer(
        f"{app_id}-events",
        f"{app_id}-launches",
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
        metadata_max_age_ms=1000,
    )
    await consumer.start()
    try:
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for msg in records:
                    if msg.topic.endswith("-launches"):
                        with contextlib.suppress(DecodeError):
                            req = decode("LaunchRequest", msg.value)
                            if req["schedule"]["name"] == "cron-copy":
                                continue
                            why = req["arguments"].get("trigger.eventType", "time")
                            say(f"LAUNCH  {req['jobId']} -> {req['program']['name']} (triggered by {why})")
                        continue
                    with contextlib.suppress(DecodeError):
                        n = decode("Notification", msg.value)
                        p = n["payload"]
                        if n["eventType"] == "partition":
                            say(
                                f"DATA    {p['datasetId']} +{len(json.loads(p['partitionKeys']))} partitions ({p.get('bytes')} bytes)"
                            )
                        elif n["eventType"] == "program-status":
                            if p["programId"] == CRON_COPY:
                                continue  # too chatty for the demo; the run analytics count them
                            error = f" -- {p['error'].splitlines()[0]}" if p.get("error") else ""
                            say(
                                f"RUN     {p['programId'].split('/')[-1]:9} {p['runId']}: {p['status']}{error}"
                            )
                            if p["programId"].endswith("/report") and p["status"] in (
                                "COMPLETED",
                                "FAILED",
                                "KILLED",
                            ):
                                return p["status"] == "COMPLETED"
            jobs = (await api.get("/jobs")).json()
            for job in jobs["jobs"]:
                say(f"WAIT    {job['jobId']}: {job['blockedBy']} {job['reason']}")
        return False
    finally:
        await consumer.stop()


async def run_demo(data_dir: Path, timeout_s: float) -> int:
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    web, broker = free_port(), free_port()
    app_id = "demo"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCHEDULER_", "KAFKA_"))}
    log = open(data_dir / "scheduler.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "scheduler", "run", "--app-id", app_id, "--web-port", str(web),
         "--broker", "tansu", "--broker-port", str(broker), "--data-dir", str(data_dir)],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{web}", timeout=10) as api:
            say(
                f"starting the scheduler (embedded broker :{broker}, HTTP :{web}, log {data_dir}/scheduler.log)"
            )
            deadline = time.monotonic() + 120
            while True:
                with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                    health = (await api.get("/health")).json()
                    if health["ready"] and len(health["partitions"]) == 8:
                        break
                if proc.poll() is not None or time.monotonic() > deadline:
                    say("the scheduler did not start; see its log")
                    return 1
                await asyncio.sleep(0.3)
            for program, target in PROGRAMS.items():
                await api.put(f"/programs/{program}", json={"kind": "pyspark", "target": target})
                while (await api.get(f"/programs/{program}")).status_code != 200:
                    await asyncio.sleep(0.1)
                say(f"PROGRAM {program} = {target}")
            await api.put(
                f"/programs/{CRON_COPY}", json={"kind": "command", "argv": [sys.executable, "-c", "pass"]}
            )
            while (await api.get(f"/programs/{CRON_COPY}")).status_code != 200:
                await asyncio.sleep(0.1)
            for body in schedules(datetime.now(UTC)):
                r = await api.post("/schedules", json=body)
                r.raise_for_status()
                say(f"SCHEDULE {body['tenant']}/{body['name']}: {json.dumps(body['trigger'])}"
                    + (f" if {json.dumps(body['constraints'])}" if body.get("constraints") else ""))  # fmt: skip
            ok = await _watch(f"127.0.0.1:{broker}", app_id, api, time.monotonic() + timeout_s)
            reports = sorted((data_dir / "datasets" / "demo" / "reports").glob("*.csv"))
            if ok and reports:
                say(f"REPORT  {reports[-1]}")
                print(reports[-1].read_text(), end="")
                say("RUN ANALYTICS (scheduler report, on Spark)")
                from scheduler.cli import analytics

                os.environ["SCHEDULER_DATASETS_DIR"] = str(data_dir / "datasets")
                await asyncio.to_thread(
                    analytics.main, f"http://127.0.0.1:{web}", f"127.0.0.1:{broker}", f"{app_id}-events",
                    data_dir / "reports",
                )  # fmt: skip
                return 0
        say("the chain did not complete in time")
        return 1
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def main(data_dir: Path, timeout_s: float = 600) -> int:
    import logging

    logging.getLogger().setLevel(logging.WARNING)
    return asyncio.run(run_demo(data_dir, timeout_s))
