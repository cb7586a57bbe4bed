"""Programs end to end: the launcher runs PySpark pipelines and commands, run states flow back as
program-status events into run records and program-status triggers, Spark writes fire partition triggers."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from scheduler.domain.model import Action, PartitionTrigger, ProgramId, Schedule, ScheduleCommand, ScheduleKey
from scheduler.wire.codec import decode, encode_command, key_bytes
from tests.helpers import Api, TopicReader, WorkerProcess, dead_letter, decode_launch, produce
from tests.spark_cluster import SparkCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

INGEST = "demo/pipelines/pyspark/ingest"
SH_OK = "demo/tools/command/ok"
SH_FAIL = "demo/tools/command/fail"
SLEEPER = "demo/tools/command/sleep"
AFTER = "demo/tools/workflow/after"


def soon(seconds: float = 2.0) -> dict[str, Any]:
    """A frequency trigger whose first fire is `seconds` from now, then hourly. (A schedule is active from
    when a worker applies it: a start already past by then fires an hour later. With 0.5 s, a loaded
    machine's apply came after it and the test waited in vain.)"""
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


TERMINAL = ("COMPLETED", "FAILED", "STOPPED", "KILLED")


def ended(runs: list[dict[str, Any]]) -> bool:
    return bool(runs) and runs[-1]["status"] in TERMINAL


def launcher_process(env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """A standalone launcher (`scheduler launcher`), in a process group of its own."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "scheduler", "launcher"],
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def kill_group(*processes: subprocess.Popen[bytes] | None) -> None:
    for p in processes:
        if p is not None and p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)


@pytest.fixture
def launching_worker(start_worker):  # type: ignore[no-untyped-def]
    return start_worker(SCHEDULER_LAUNCHER="embedded")


async def test_user_story_5_a_spark_job_launched_by_a_schedule_is_running_only_after_requesting_resources(
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
    assert [t[0] for t in run["transitions"]] == [
        "PENDING",  # launched by its job queue
        "PREPARING",  # a launcher's claim, accepted
        "STARTING",  # its process spawned
        "REQUESTING_RESOURCES",  # its Spark session starting
        "INITIALIZING",  # the program's code loading
        "RUNNING",
        "COMPLETED",
    ], run
    assert run["schedule"] == "demo/ingest" and run["arguments"]["days"] == "1"
    assert run["created_at"] <= run["started_at"] <= run["running_at"] <= run["ended_at"]
    assert status["status"] == "COMPLETED" and status["lastRun"]["run_id"] == run["run_id"]
    written = list(
        (Path(launching_worker.env["SCHEDULER_DATA_DIR"]) / "datasets" / app_id / "clicks").glob("day=*")
    )
    assert len(written) == 1


@pytest.mark.embedded
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


@pytest.mark.embedded
async def test_user_story_2_a_run_stopped_by_a_user_ends_stopped_not_killed_or_failed(
    launching_worker, app_id
):
    async with Api(launching_worker.url) as api:
        await api.register(SLEEPER, command(sys.executable, "-c", "import time; time.sleep(60)"))
        await api.create({"tenant": "demo", "name": "long", "trigger": soon(), "program": SLEEPER})
        runs = await wait_run(api, SLEEPER, lambda runs: bool(runs) and runs[-1]["status"] == "RUNNING")
        run_id = runs[-1]["run_id"]
        r = await api.client.post(f"/programs/{SLEEPER}/runs/{run_id}/stop")
        assert r.status_code == 202, r.text
        runs = await wait_run(api, SLEEPER, ended)
        again = await api.client.post(f"/programs/{SLEEPER}/runs/{run_id}/stop")
        missing = await api.client.post(f"/programs/{SLEEPER}/runs/nope/stop")
        status = (await api.client.get(f"/programs/{SLEEPER}/status")).json()
    assert [t[0] for t in runs[-1]["transitions"]][-2:] == ["STOPPING", "STOPPED"]
    assert runs[-1]["error"] == "stopped on request" and status["status"] == "STOPPED"
    assert again.status_code == 409 and missing.status_code == 404


async def test_user_story_4_a_run_killed_from_outside_the_scheduler_shows_killed(launching_worker, tmp_path):
    """Seed 004: killed through the resource manager (here: a signal to its process, not from us)."""
    pid_file = tmp_path / "pid"
    program = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    async with Api(launching_worker.url) as api:
        await api.register(SLEEPER, command(sys.executable, "-c", program))
        await api.create({"tenant": "demo", "name": "long", "trigger": soon(), "program": SLEEPER})
        await wait_run(api, SLEEPER, lambda runs: bool(runs) and runs[-1]["status"] == "RUNNING")
        deadline = time.monotonic() + 30
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline, "the program never wrote its pid"
            await asyncio.sleep(0.1)
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        runs = await wait_run(api, SLEEPER, ended)
    assert runs[-1]["status"] == "KILLED", runs[-1]
    assert runs[-1]["error"] == "killed by SIGKILL from outside the scheduler"


async def test_a_reordered_running_after_completed_leaves_the_slot_free(launching_worker, broker, app_id):
    """The run record and the job queue judge the late RUNNING alike: refused, counted, and the next job
    of the one-at-a-time program still launches (before, the queue counted the run active again)."""
    async with Api(launching_worker.url) as api:
        await api.register(SH_OK, command(sys.executable, "-c", "print('fine')"))
        await api.create(
            {
                "tenant": "demo",
                "name": "one-at-a-time",
                "program": SH_OK,
                "trigger": {"type": "partition", "dataset": f"{app_id}.in", "minPartitions": 1},
                "constraints": [{"type": "concurrency", "maxRuns": 1}],
            }
        )
        await api.partitions(f"{app_id}.in", "a")
        [first] = await wait_run(api, SH_OK, ended)
        await api.status(SH_OK, first["run_id"], "RUNNING")  # a replayed, reordered report
        await api.until("/health", lambda r: r.json().get("invalidTransitions", 0) >= 1, timeout_s=30)
        await api.partitions(f"{app_id}.in", "b")
        runs = await wait_run(api, SH_OK, lambda runs: len(runs) == 2 and ended(runs), timeout_s=60)
    assert [r["status"] for r in runs] == ["COMPLETED", "COMPLETED"]
    assert launching_worker.health()["invalidTransitions"] == 1


@pytest.mark.serial
async def test_a_run_whose_only_launcher_is_sigkilled_ends_failed_by_its_lease_and_the_next_run_starts(
    start_worker, worker_env, tmp_path
):
    lease_ms = 3_000
    worker = start_worker(SCHEDULER_RUN_LEASE_MS=str(lease_ms))
    env = {**worker_env, "SCHEDULER_RUN_LEASE_MS": str(lease_ms), "SCHEDULER_DATA_DIR": str(tmp_path / "l")}
    log_path = tmp_path / "launcher.log"
    first = launcher_process(env, log_path)
    second = None
    try:
        async with Api(worker.url) as api:
            await api.register(SLEEPER, command(sys.executable, "-c", "import time; time.sleep(120)"))
            await api.create(
                {
                    "tenant": "demo",
                    "name": "orphan",
                    "program": SLEEPER,
                    "trigger": {"type": "frequency", "timeUnit": "SECONDS", "time": 2},
                    "constraints": [{"type": "concurrency", "maxRuns": 1}],
                    "enabled": True,
                }
            )
            runs = await wait_run(api, SLEEPER, lambda runs: bool(runs) and runs[-1]["status"] == "RUNNING")
            os.killpg(first.pid, signal.SIGKILL)
            killed_at = time.time() * 1000
            first.wait(timeout=10)
            lost = await wait_run(api, SLEEPER, lambda runs: runs[0]["status"] == "FAILED", timeout_s=60)
            second = launcher_process(env, log_path)  # the next run needs a launcher to run on
            runs = await wait_run(
                api, SLEEPER, lambda runs: len(runs) >= 2 and runs[1]["status"] == "RUNNING", timeout_s=60
            )
    finally:
        kill_group(first, second)
    failed = lost[0]
    assert failed["error"].startswith("lease expired: launcher"), failed
    assert failed["ended_at"] - killed_at <= lease_ms + 2_000, "not ended within its lease"
    assert runs[1]["created_at"] >= failed["ended_at"]  # its slot was freed by the lease, not before


async def test_a_stop_of_a_pending_run_cancels_it_and_no_launcher_that_comes_later_runs_it(
    start_worker, worker_env, tmp_path
):
    """No launcher is up: the run stays PENDING; its stop ends it STOPPED at once (its slot freed), and
    the stop, kept on the control topic, keeps the launcher started afterwards from running it."""
    worker = start_worker()
    ran = tmp_path / "ran"
    program = f"import os; open({str(ran)!r}, 'a').write(os.environ['SCHEDULER_RUN_ID'] + chr(10))"
    launcher = None
    try:
        async with Api(worker.url) as api:
            await api.register(SH_OK, command(sys.executable, "-c", program))
            await api.create({"tenant": "demo", "name": "first", "trigger": soon(), "program": SH_OK})
            [pending] = await wait_run(api, SH_OK, lambda runs: bool(runs))
            assert pending["status"] == "PENDING"
            r = await api.client.post(f"/programs/{SH_OK}/runs/{pending['run_id']}/stop")
            assert r.status_code == 202, r.text
            [stopped] = await wait_run(api, SH_OK, ended, timeout_s=30)
            launcher = launcher_process(
                {**worker_env, "SCHEDULER_DATA_DIR": str(tmp_path / "l")}, tmp_path / "l.log"
            )
            await api.create({"tenant": "demo", "name": "second", "trigger": soon(), "program": SH_OK})
            runs = await wait_run(api, SH_OK, lambda runs: len(runs) == 2 and ended(runs), timeout_s=90)
    finally:
        kill_group(launcher)
    assert stopped["status"] == "STOPPED" and stopped["error"] == "stopped before it started"
    assert runs[1]["status"] == "COMPLETED"
    assert ran.read_text().split() == [runs[1]["run_id"]]  # the stopped one never ran


async def test_the_status_of_an_unknown_program_is_a_404_and_of_one_never_run_never_run(worker):
    async with Api(worker.url) as api:
        unknown = await api.client.get("/programs/no/such/command/program/status")
        await api.register(SH_OK, command("true"))
        never = await api.client.get(f"/programs/{SH_OK}/status")
    assert unknown.status_code == 404
    assert never.status_code == 200 and never.json()["status"] == "NEVER_RUN"


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
        await api.run(SH_OK, "manual-1", "STARTING", "RUNNING", "COMPLETED")  # an external system's run
        await wait_run(api, SH_OK, ended)
        await api.run(SH_OK, "manual-1", "RUNNING")  # after COMPLETED: refused
        await asyncio.sleep(1)
        runs = (await api.client.get(f"/programs/{SH_OK}/runs")).json()["runs"]
    assert runs[-1]["status"] == "COMPLETED"
    assert launching_worker.health()["invalidTransitions"] == 1


__all__ = ["WorkerProcess"]


def transition(value: bytes) -> dict[str, Any]:
    n = decode("Notification", value)
    return {**n["payload"], "timestamp": n["timestamp"]}


@pytest.mark.serial
async def test_two_launchers_and_one_killed_between_receiving_and_starting_every_launch_runs_exactly_once(
    start_worker, worker_env, broker, app_id, tmp_path
):
    """Launchers share the launch topic; one is SIGKILLed the moment its first claim is accepted, with
    launches received and claims in flight. No launch runs twice (a claim is judged by the run's job
    queue, once); none is lost: a claim whose launcher died before it started the program is launched
    again for the other launcher; a run that was running on it ends FAILED by its lease."""
    lease_ms = 3_000
    worker = start_worker(SCHEDULER_RUN_LEASE_MS=str(lease_ms))
    ran = tmp_path / "ran"
    program = f"import os, time; open({str(ran)!r}, 'a').write(os.environ['SCHEDULER_RUN_ID'] + chr(10)); time.sleep(1)"
    programs = [f"demo/tools/command/p{i}" for i in range(4)]  # (launches are keyed by program: spread)
    env = {**worker_env, "SCHEDULER_RUN_LEASE_MS": str(lease_ms)}
    launchers = {
        name: launcher_process(
            {**env, "SCHEDULER_LAUNCHER_ID": name, "SCHEDULER_DATA_DIR": str(tmp_path / name)},
            tmp_path / f"{name}.log",
        )
        for name in ("l1", "l2")
    }
    try:
        async with (
            Api(worker.url) as api,
            TopicReader(broker.bootstrap_servers, f"{app_id}-program-status", transition) as accepted,
        ):
            for i, p in enumerate(programs):
                await api.register(p, command(sys.executable, "-c", program))
                await api.create(
                    {
                        "tenant": "demo",
                        "name": f"s{i}",
                        "program": p,
                        "trigger": {"type": "partition", "dataset": f"{app_id}.in", "minPartitions": 1},
                        "enabled": True,
                    }
                )
            await asyncio.sleep(5)  # both launchers in their group
            for key in "abcde":
                await api.partitions(f"{app_id}.in", key)
            claims = await accepted.wait_for(
                lambda t: any(x["status"] == "PREPARING" for x in t), timeout_s=60
            )
            victim = next(x["launcher"] for x in claims if x["status"] == "PREPARING")
            os.killpg(launchers[victim].pid, signal.SIGKILL)
            launchers[victim].wait(timeout=10)
            runs: list[dict[str, Any]] = []
            for p in programs:
                runs += await wait_run(
                    api, p, lambda r: len(r) == 5 and all(x["status"] in TERMINAL for x in r), timeout_s=120
                )
    finally:
        kill_group(*launchers.values())
    started = ran.read_text().split()
    assert len(started) == len(set(started)), "a launch ran twice"
    assert len(runs) == 20
    for run in runs:
        states = [t[0] for t in run["transitions"]]
        if run["status"] == "COMPLETED":
            assert started.count(run["run_id"]) == 1, run
        else:  # it was running on the launcher that died
            assert run["status"] == "FAILED" and run["error"].startswith("lease expired"), run
            assert "STARTING" in states and run["launcher"] == victim, run
    relaunched = [r for r in runs if "PENDING" in [t[0] for t in r["transitions"]][1:]]
    print(
        f"{len(relaunched)} claims of {victim} launched again, {sum(r['status'] == 'FAILED' for r in runs)} lost mid-run"
    )


@pytest.mark.serial
async def test_sigterm_of_a_standalone_launcher_lets_its_run_finish_and_takes_no_more_launches(
    start_worker, worker_env, tmp_path
):
    """A clean stop never stops a run: the launcher leaves the launch group at once and exits once its run
    COMPLETED (before, a stop killed every run and recorded it KILLED, firing triggers downstream)."""
    worker = start_worker()
    launcher = launcher_process(
        {**worker_env, "SCHEDULER_LAUNCHER_DRAIN_S": "60", "SCHEDULER_DATA_DIR": str(tmp_path / "l")},
        tmp_path / "l.log",
    )
    try:
        async with Api(worker.url) as api:
            await api.register(SLEEPER, command(sys.executable, "-c", "import time; time.sleep(4)"))
            await api.create({"tenant": "demo", "name": "long", "trigger": soon(), "program": SLEEPER})
            await wait_run(api, SLEEPER, lambda runs: bool(runs) and runs[-1]["status"] == "RUNNING")
            launcher.send_signal(signal.SIGTERM)
            runs = await wait_run(api, SLEEPER, ended, timeout_s=60)
            code = await asyncio.to_thread(launcher.wait, 30)
    finally:
        kill_group(launcher)
    assert runs[-1]["status"] == "COMPLETED", runs[-1]
    assert code == 0, (tmp_path / "l.log").read_text()[-2000:]


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler", *args, "--url", url],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "SCHEDULER_TOKEN"},
    )


async def test_a_pyspark_run_suspended_over_http_makes_no_progress_until_resumed_with_the_cli(
    launching_worker, tmp_path
):
    """Seed 004's SUSPENDING -> SUSPENDED -> RESUMING -> RUNNING: the run's process group is paused (its
    Spark driver and local executors), and goes on where it was."""
    ticks = tmp_path / "ticks"
    script = tmp_path / "ticking.py"
    script.write_text(
        "import time\n"
        "for _ in range(25):\n"
        "    with open(args['out'], 'a') as f:\n"
        "        f.write('x')\n"
        "    time.sleep(0.2)\n"
    )
    async with Api(launching_worker.url) as api:
        await api.register(INGEST, {"kind": "pyspark", "target": str(script)})
        await api.create(
            {
                "tenant": "demo",
                "name": "tick",
                "trigger": soon(),
                "program": INGEST,
                "data": {"out": str(ticks)},
            }
        )
        [run] = await wait_run(api, INGEST, lambda runs: bool(runs) and runs[-1]["status"] == "RUNNING", 120)
        path = f"/programs/{INGEST}/runs/{run['run_id']}"
        early = await api.client.post(f"{path}/resume")  # not suspended
        while not ticks.exists() or len(ticks.read_text()) < 3:
            await asyncio.sleep(0.1)
        r = await api.client.post(f"{path}/suspend")
        assert r.status_code == 202, r.text
        await wait_run(api, INGEST, lambda runs: runs[-1]["status"] == "SUSPENDED", 30)
        paused_at = len(ticks.read_text())
        await asyncio.sleep(2.5)  # (a tick every 0.2 s while it runs)
        paused_for = len(ticks.read_text()) - paused_at
        again = await api.client.post(f"{path}/suspend")  # already suspended
        resumed = await asyncio.to_thread(cli, launching_worker.url, "runs", "resume", INGEST, run["run_id"])
        [run] = await wait_run(api, INGEST, ended, 120)
    assert early.status_code == 409 and again.status_code == 409
    assert paused_for == 0, "the run went on while SUSPENDED"
    assert resumed.returncode == 0 and "resume requested" in resumed.stdout, resumed.stderr
    states = [t[0] for t in run["transitions"]]
    assert states[states.index("SUSPENDING") :] == [
        "SUSPENDING",
        "SUSPENDED",
        "RESUMING",
        "RUNNING",
        "COMPLETED",
    ]
    assert len(ticks.read_text()) == 25


async def test_a_run_over_its_time_limit_is_stopped_and_ends_killed(launching_worker):
    """The limit of the run's schedule, else of its program: STOPPING, then KILLED with why."""
    sleep = command(sys.executable, "-c", "import time; time.sleep(60)")
    async with Api(launching_worker.url) as api:
        await api.register(SLEEPER, {**sleep, "timeLimitMs": 2_000})
        await api.register(SH_OK, {**sleep, "timeLimitMs": 600_000})
        await api.create({"tenant": "demo", "name": "long", "trigger": soon(), "program": SLEEPER})
        await api.create(
            {"tenant": "demo", "name": "capped", "trigger": soon(), "program": SH_OK, "timeLimitMs": 3_000}
        )
        [by_program] = await wait_run(api, SLEEPER, ended, timeout_s=60)
        [by_schedule] = await wait_run(api, SH_OK, ended, timeout_s=60)
    for run, limit_s in ((by_program, 2), (by_schedule, 3)):
        assert run["status"] == "KILLED" and run["error"] == f"time limit of {limit_s} s exceeded", run
        assert [t[0] for t in run["transitions"]][-3:] == ["RUNNING", "STOPPING", "KILLED"]
        assert limit_s * 1000 <= run["ended_at"] - run["started_at"] < 15_000


async def test_a_failing_program_is_retried_with_backoff_then_given_up(launching_worker):
    """Each attempt a run of the same job (`<job id>~<attempt>`), after 1 s, then 2 s; three runs in all."""
    async with Api(launching_worker.url) as api:
        await api.register(SH_FAIL, command(sys.executable, "-c", "import sys; sys.exit(3)"))
        await api.create(
            {
                "tenant": "demo",
                "name": "flaky",
                "trigger": soon(),
                "program": SH_FAIL,
                "retry": {"maxAttempts": 3, "initialDelayMs": 1_000, "multiplier": 2},
            }
        )
        runs = await wait_run(api, SH_FAIL, lambda r: len(r) == 3 and ended(r), timeout_s=90)
        await asyncio.sleep(5)  # (a fourth would have come 4 s after the third)
        after = (await api.client.get(f"/programs/{SH_FAIL}/runs")).json()["runs"]
        pending = await api.jobs(schedule="demo/flaky")
    job_id = runs[0]["job_id"]
    assert [(r["run_id"], r["job_id"], r["attempt"], r["status"]) for r in runs] == [
        (job_id, job_id, 1, "FAILED"),
        (f"{job_id}~2", job_id, 2, "FAILED"),
        (f"{job_id}~3", job_id, 3, "FAILED"),
    ]
    for before, retry, backoff_ms in ((runs[0], runs[1], 1_000), (runs[1], runs[2], 2_000)):
        assert retry["created_at"] - before["ended_at"] >= backoff_ms, (before, retry)
    assert len(after) == 3 and pending["jobs"] == []


@pytest.fixture
def spark_cluster(tmp_path):  # type: ignore[no-untyped-def]
    cluster = SparkCluster(tmp_path / "spark")
    cluster.directory.mkdir()
    yield cluster
    cluster.stop()


async def test_user_story_1_a_run_on_a_small_spark_cluster_shows_it_requests_resources_until_a_worker_has_some(
    launching_worker, spark_cluster, app_id
):
    """On a Spark standalone master + worker (pyspark's own jars), submitted with spark-submit: while the
    cluster has no worker the run shows REQUESTING_RESOURCES (user story 1); it is RUNNING only once an
    executor was granted (5), and its work ran in the worker's executors."""
    spark_cluster.start_master()
    dataset = f"{app_id}.clicks"
    async with Api(launching_worker.url) as api:
        await api.register(
            INGEST,
            {
                "kind": "pyspark",
                "target": "scheduler.examples.pipelines:feed_ingest",
                "master": spark_cluster.url,
            },
        )
        await api.create(
            {
                "tenant": "demo",
                "name": "ingest",
                "trigger": soon(),
                "program": INGEST,
                "data": {"days": "2", "dataset": dataset},
            }
        )
        await wait_run(api, INGEST, lambda r: bool(r) and r[-1]["status"] == "REQUESTING_RESOURCES", 120)
        await asyncio.sleep(5)
        [waiting] = (await api.client.get(f"/programs/{INGEST}/runs")).json()["runs"]
        status = (await api.client.get(f"/programs/{INGEST}/status")).json()
        work = await asyncio.to_thread(spark_cluster.start_worker)
        granted_at = time.time() * 1000
        [run] = await wait_run(api, INGEST, ended, timeout_s=180)
    assert waiting["status"] == "REQUESTING_RESOURCES" and status["status"] == "REQUESTING_RESOURCES"
    assert run["status"] == "COMPLETED", run
    states = [t[0] for t in run["transitions"]]
    assert states[states.index("REQUESTING_RESOURCES") :] == [
        "REQUESTING_RESOURCES",
        "INITIALIZING",
        "RUNNING",
        "COMPLETED",
    ]
    assert run["running_at"] >= granted_at - 1_000
    assert list(work.glob("app-*/*/stderr")), "no executor ran on the worker"
    written = Path(launching_worker.env["SCHEDULER_DATA_DIR"]) / "datasets" / app_id / "clicks"
    assert len(list(written.glob("day=*"))) == 2


async def test_user_story_3_a_service_is_running_only_once_it_answers_requests(launching_worker):
    """A command that says `reportsRunning` is STARTING until it prints that it is ready: a request sent
    the moment its run shows RUNNING is answered."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    service = (
        "import http.server, time\n"
        "time.sleep(3)  # (warming up)\n"
        f"server = http.server.HTTPServer(('127.0.0.1', {port}), http.server.SimpleHTTPRequestHandler)\n"
        "print('SCHEDULER-RUN-STATE RUNNING', flush=True)\n"
        "server.serve_forever()\n"
    )
    async with Api(launching_worker.url) as api:
        await api.register(SLEEPER, {**command(sys.executable, "-c", service), "reportsRunning": True})
        await api.create({"tenant": "demo", "name": "svc", "trigger": soon(), "program": SLEEPER})
        [starting] = await wait_run(api, SLEEPER, lambda r: bool(r) and r[-1]["status"] == "STARTING", 60)
        [running] = await wait_run(api, SLEEPER, lambda r: r[-1]["status"] == "RUNNING", 60)
        async with httpx.AsyncClient() as client:
            answer = await client.get(f"http://127.0.0.1:{port}/")
        await api.client.post(f"/programs/{SLEEPER}/runs/{running['run_id']}/stop")
        [stopped] = await wait_run(api, SLEEPER, ended, 60)
    assert answer.status_code == 200
    assert running["running_at"] - running["started_at"] >= 3_000  # not RUNNING while it warmed up
    assert stopped["status"] == "STOPPED"
