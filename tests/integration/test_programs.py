"""Programs end to end: the launcher runs PySpark pipelines and commands, run states flow back as
program-status events into run records and program-status triggers, Spark writes fire partition triggers."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from scheduler.domain.model import Action, PartitionTrigger, ProgramId, Schedule, ScheduleCommand, ScheduleKey
from scheduler.wire.codec import encode_command, key_bytes
from tests.helpers import Api, TopicReader, WorkerProcess, dead_letter, decode_launch, produce

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

INGEST = "demo/pipelines/pyspark/ingest"
SH_OK = "demo/tools/command/ok"
SH_FAIL = "demo/tools/command/fail"
SLEEPER = "demo/tools/command/sleep"
AFTER = "demo/tools/workflow/after"


def soon(seconds: float = 1.5) -> dict[str, Any]:
    """A frequency trigger whose first fire is `seconds` from now, then hourly."""
    return {"type": "frequency", "timeUnit": "HOURS", "time": 1, "start": int((time.time() + seconds) * 1000)}


def command(*argv: str) -> dict[str, Any]:
    return {"kind": "command", "argv": list(argv)}


async def wait_run(api: Api, program: str, predicate, timeout_s: float = 90) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while True:
        r = await api.client.get(f"/programs/{program}/runs")
        runs = r.json()["runs"] if r.status_code == 200 else []
        if predicate(runs):
            return runs
        if time.monotonic() > deadline:
            raise AssertionError(f"runs of {program}: {runs}")
        await asyncio.sleep(0.2)


def ended(runs: list[dict[str, Any]]) -> bool:
    return bool(runs) and runs[-1]["status"] in ("COMPLETED", "FAILED", "KILLED")


@pytest.fixture
def launching_worker(start_worker):  # type: ignore[no-untyped-def]
    return start_worker(SCHEDULER_LAUNCHER="embedded")


async def test_a_pyspark_job_launched_by_a_schedule_runs_and_its_states_arrive_in_order(
    launching_worker, app_id
):
    dataset = f"{app_id}.clicks"
    async with Api(launching_worker.url) as api:
        await api.register(INGEST, {"kind": "pyspark", "target": "scheduler.examples.pipelines:feed_ingest"})
        await api.create(
            {
                "tenant": "demo",
                "name": "ingest",
                "trigger": soon(),
                "program": INGEST,
                "data": {"days": "1", "dataset": dataset},
            }
        )
        runs = await wait_run(api, INGEST, ended, timeout_s=120)
        status = (await api.client.get(f"/programs/{INGEST}/status")).json()
    run = runs[-1]
    assert [t[0] for t in run["transitions"]] == ["PENDING", "STARTING", "RUNNING", "COMPLETED"], run
    assert run["schedule"] == "demo/ingest" and run["arguments"]["days"] == "1"
    assert run["created_at"] <= run["started_at"] <= run["running_at"] <= run["ended_at"]
    assert status["status"] == "COMPLETED" and status["lastRun"]["run_id"] == run["run_id"]
    written = list(
        (Path(launching_worker.env["SCHEDULER_DATA_DIR"]) / "datasets" / app_id / "clicks").glob("day=*")
    )
    assert len(written) == 1


async def test_a_failing_job_ends_failed_and_fires_the_failed_schedule_not_the_succeeded_one(
    launching_worker, broker, app_id
):
    """Seed 002 scenarios 1-4 with real runs: B on A's success, C on A's failure."""
    out = f"{app_id}-launches"
    async with (
        Api(launching_worker.url) as api,
        TopicReader(broker.bootstrap_servers, out, decode_launch) as launches,
    ):
        await api.register(SH_FAIL, command(sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"))
        await api.register(SH_OK, command(sys.executable, "-c", "print('fine')"))
        await api.create({"tenant": "demo", "name": "fails", "trigger": soon(), "program": SH_FAIL})
        await api.create({"tenant": "demo", "name": "works", "trigger": soon(), "program": SH_OK})
        await api.create(
            {
                "tenant": "demo",
                "name": "on-success",
                "program": AFTER,
                "topic": out,
                "trigger": {"type": "programStatus", "program": SH_FAIL, "on": ["SUCCEEDED"]},
            }
        )
        await api.create(
            {
                "tenant": "demo",
                "name": "on-failure",
                "program": AFTER,
                "topic": out,
                "trigger": {"type": "programStatus", "program": SH_FAIL, "on": ["FAILED"]},
            }
        )
        await api.create(
            {
                "tenant": "demo",
                "name": "after-ok",
                "program": AFTER,
                "topic": out,
                "trigger": {"type": "programStatus", "program": SH_OK, "on": ["SUCCEEDED"]},
            }
        )
        failed = await wait_run(api, SH_FAIL, ended)
        ok = await wait_run(api, SH_OK, ended)
        await launches.wait_for(lambda r: {x["schedule"]["name"] for x in r} >= {"on-failure", "after-ok"})
        await asyncio.sleep(1.5)
    assert (
        failed[-1]["status"] == "FAILED"
        and "exit code 3" in failed[-1]["error"]
        and "boom" in failed[-1]["error"]
    )
    assert ok[-1]["status"] == "COMPLETED"
    assert "on-success" not in {x["schedule"]["name"] for x in launches.records}


async def test_concurrency_counts_runs_that_are_starting_or_running(launching_worker, app_id):
    async with Api(launching_worker.url) as api:
        await api.register(SLEEPER, command(sys.executable, "-c", "import time; time.sleep(3)"))
        await api.create(
            {
                "tenant": "demo",
                "name": "one-at-a-time",
                "program": SLEEPER,
                "trigger": {"type": "partition", "dataset": f"{app_id}.in", "minPartitions": 1},
                "constraints": [{"type": "concurrency", "maxRuns": 1}],
            }
        )
        await api.partitions(f"{app_id}.in", "a")
        await wait_run(
            api, SLEEPER, lambda runs: bool(runs) and runs[-1]["status"] in ("STARTING", "RUNNING")
        )
        await api.partitions(f"{app_id}.in", "b")
        held = await api.wait_jobs(lambda j: len(j["jobs"]) == 1, schedule="demo/one-at-a-time")
        runs = await wait_run(api, SLEEPER, lambda runs: len(runs) == 2 and ended(runs), timeout_s=60)
    assert held["jobs"][0]["blockedBy"] == "ConcurrencyConstraint"
    first, second = runs
    assert second["created_at"] >= first["ended_at"], "the second run started while the first was active"


async def test_a_spark_write_of_three_partitions_fires_a_three_partition_schedule_once(
    launching_worker, broker, app_id
):
    out = f"{app_id}-launches"
    dataset = f"{app_id}.clicks"
    async with (
        Api(launching_worker.url) as api,
        TopicReader(broker.bootstrap_servers, out, decode_launch) as launches,
    ):
        await api.register(INGEST, {"kind": "pyspark", "target": "scheduler.examples.pipelines:feed_ingest"})
        await api.create(
            {
                "tenant": "demo",
                "name": "three",
                "program": AFTER,
                "topic": out,
                "trigger": {"type": "partition", "dataset": dataset, "minPartitions": 3},
            }
        )
        await api.create(
            {
                "tenant": "demo",
                "name": "ingest",
                "trigger": soon(),
                "program": INGEST,
                "data": {"days": "3", "dataset": dataset},
            }
        )
        await wait_run(api, INGEST, ended, timeout_s=120)
        await launches.wait_for(lambda r: any(x["schedule"]["name"] == "three" for x in r))
        await asyncio.sleep(1.5)
    three = [x for x in launches.records if x["schedule"]["name"] == "three"]  # ingest launches here too
    assert len(three) == 1
    keys = three[0]["arguments"]["trigger.partitionKeys"]
    assert keys.count("day=") == 3


async def test_a_stopped_run_ends_killed(launching_worker, app_id):
    async with Api(launching_worker.url) as api:
        await api.register(SLEEPER, command(sys.executable, "-c", "import time; time.sleep(60)"))
        await api.create({"tenant": "demo", "name": "long", "trigger": soon(0.5), "program": SLEEPER})
        runs = await wait_run(api, SLEEPER, lambda runs: bool(runs) and runs[-1]["status"] == "RUNNING")
        run_id = runs[-1]["run_id"]
        r = await api.client.post(f"/programs/{SLEEPER}/runs/{run_id}/stop")
        assert r.status_code == 202, r.text
        runs = await wait_run(api, SLEEPER, ended)
        again = await api.client.post(f"/programs/{SLEEPER}/runs/{run_id}/stop")
        missing = await api.client.post(f"/programs/{SLEEPER}/runs/nope/stop")
    assert [t[0] for t in runs[-1]["transitions"]][-2:] == ["STOPPING", "KILLED"]
    assert again.status_code == 409 and missing.status_code == 404


async def test_killing_the_launcher_mid_run_marks_the_run_failed(start_worker, worker_env, app_id, tmp_path):
    worker = start_worker()
    env = {**os.environ, **worker_env, "SCHEDULER_DATA_DIR": str(tmp_path / "launcher")}
    log_path = tmp_path / "launcher.log"

    def launcher() -> subprocess.Popen[bytes]:
        with open(log_path, "ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "scheduler", "launcher"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    first = launcher()
    second = None
    try:
        async with Api(worker.url) as api:
            await api.register(SLEEPER, command(sys.executable, "-c", "import time; time.sleep(120)"))
            await api.create({"tenant": "demo", "name": "orphan", "trigger": soon(0.5), "program": SLEEPER})
            runs = await wait_run(api, SLEEPER, lambda runs: bool(runs) and runs[-1]["status"] == "RUNNING")
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(timeout=10)
            second = launcher()
            runs = await wait_run(api, SLEEPER, ended, timeout_s=60)
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
    assert runs[-1]["status"] == "FAILED" and runs[-1]["error"] == "launcher died mid-run", (
        log_path.read_text()[-2000:]
    )


async def test_unknown_programs_and_invalid_transitions_are_refused(launching_worker, broker, app_id):
    unknown = "nobody/knows/this/program"
    async with (
        Api(launching_worker.url) as api,
        TopicReader(broker.bootstrap_servers, f"{app_id}-dead-letters", dead_letter) as dlq,
    ):
        r = await api.client.post(
            "/schedules",
            json={"tenant": "demo", "name": "x", "trigger": soon(), "program": unknown, "enabled": True},
        )
        assert r.status_code == 400 and r.json()["fields"][0]["field"] == "program"
        s = Schedule(
            ScheduleKey("demo", "y"),
            PartitionTrigger(f"{app_id}.d", 1),
            "t",
            enabled=True,
            program=ProgramId.parse(unknown),
        )
        await produce(
            broker.bootstrap_servers,
            f"{app_id}-commands",
            [(key_bytes(s.key), encode_command(ScheduleCommand(s.key, Action.INSERT, s)))],
        )
        await dlq.wait_for(lambda d: len(d) >= 1)
        assert "unknown program" in dlq.records[0]["reason"]
        await api.register(SH_OK, {"kind": "external"})
        await api.run(SH_OK, "manual-1", "STARTING", "RUNNING", "COMPLETED")
        await wait_run(api, SH_OK, ended)
        await api.run(SH_OK, "manual-1", "RUNNING")  # after COMPLETED: refused
        await asyncio.sleep(1)
        runs = (await api.client.get(f"/programs/{SH_OK}/runs")).json()["runs"]
    assert runs[-1]["status"] == "COMPLETED"
    assert launching_worker.health()["invalidTransitions"] == 1


__all__ = ["WorkerProcess"]
