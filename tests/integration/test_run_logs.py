"""Run logs end to end on a real broker: a run's output (stdout and stderr, secrets masked) is kept by the
launcher that ran it and read through any worker's HTTP (`GET /programs/.../runs/{id}/logs`) and the CLI
(`scheduler runs logs PROGRAM RUN_ID [-f]`): followed while the run goes on, complete once it ended, its head
and latest tail kept past the per-run bound (what was dropped said). With a standalone launcher the worker
reads it from the launcher's log server."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import Api, scheduler_cli
from tests.integration.test_programs import kill_group, launcher_process

pytestmark = [pytest.mark.integration, pytest.mark.embedded, pytest.mark.timeout(240)]

PROGRAM = "acme/etl/command/talker"
SECRET = "pw-9931-never-in-a-log"
# prints 5 lines, waits for a file to exist (so the test follows a live run), then 5 more and its secret
TALKER = """
import os, sys, time
for i in range(5):
    print(f"line {i}", flush=True)
print("to stderr", file=sys.stderr, flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.1)
for i in range(5, 10):
    print(f"line {i}", flush=True)
print("password is", os.environ["DB_PASSWORD"], flush=True)
"""
EXPECTED = "".join(f"line {i}\n" for i in range(5)) + "to stderr\n" + "".join(
    f"line {i}\n" for i in range(5, 10)
) + "password is ***\n"  # fmt: skip


async def _start_run(api: Api, url: str, name: str, spec: dict[str, Any]) -> str:
    await api.register(PROGRAM, spec)
    await api.create({"tenant": "acme", "name": name, "program": PROGRAM,
                      "trigger": {"type": "cron", "expression": "0 0 1 1 *"}})  # fmt: skip
    assert scheduler_cli(url, "schedules", "run", f"acme/{name}").returncode == 0
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        runs = (await api.client.get(f"/programs/{PROGRAM}/runs")).json()["runs"]
        if runs and runs[-1]["status"] == "RUNNING":
            return str(runs[-1]["run_id"])
        await asyncio.sleep(0.2)
    raise AssertionError(f"no run of {PROGRAM} is RUNNING: {runs}")


def _follow(url: str, run_id: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "scheduler", "runs", "logs", PROGRAM, run_id, "-f"],
        env={"SCHEDULER_URL": url, "PATH": "/usr/bin:/bin"},
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def _follows_a_live_run_to_its_end(url: str, spec: dict[str, Any], go: Path, name: str) -> str:
    async with Api(url) as api:
        run_id = await _start_run(api, url, name, spec)
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            path = f"/programs/{PROGRAM}/runs/{run_id}/logs"
            deadline = time.monotonic() + 30
            while (first := (await client.get(path)).json()).get(
                "size", 0
            ) < 40 and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            assert first["text"].startswith("line 0\nline 1\n") and not first["complete"], first
            follower = _follow(url, run_id)
            try:
                await asyncio.sleep(1.0)
                assert follower.poll() is None, "the follower ended while the run goes on"
                go.touch()
                out, err = await asyncio.to_thread(follower.communicate, timeout=60)
            finally:
                if follower.poll() is None:
                    follower.kill()
            assert follower.returncode == 0, err
            assert out == EXPECTED, (out, err)
            assert "COMPLETED" in err or "RUNNING" in err, err
            whole = (await client.get(path)).json()
            assert whole["text"] == EXPECTED and whole["complete"] and whole["dropped"] == 0, whole
            page = (await client.get(path, params={"offset": 7, "limit": 7})).json()
            assert (page["text"], page["offset"], page["next"]) == ("line 1\n", 7, 14), page
            bad = await client.get(path, params={"offset": "-1"})
            assert bad.status_code == 400 and "offset" in bad.text, bad.text
            missing = await client.get(f"/programs/{PROGRAM}/runs/acme/none@1/logs")
            assert missing.status_code == 404, missing.text
    return run_id


def _spec(go: Path, *extra: str) -> dict[str, Any]:
    return {"kind": "command", "argv": [sys.executable, "-c", TALKER, str(go), *extra],
            "env": {"DB_PASSWORD": {"secretRef": "acme/db"}}}  # fmt: skip


def _secrets(tmp_path: Path) -> str:
    store = tmp_path / "secrets"
    (store / "acme").mkdir(parents=True, exist_ok=True)
    (store / "acme" / "db").write_text(SECRET)
    return str(store)


async def test_a_runs_output_is_followed_while_it_runs_and_kept_head_and_tail_past_its_bound(
    start_worker, tmp_path: Path
):
    worker = start_worker(SCHEDULER_LAUNCHER="embedded", SCHEDULER_SECRETS_DIR=_secrets(tmp_path),
                          SCHEDULER_RUN_LOG_BYTES="8192")  # fmt: skip
    await _follows_a_live_run_to_its_end(worker.url, _spec(tmp_path / "go"), tmp_path / "go", "talk")
    # a chatty run: 2,000 lines of 21 bytes, past its 8 KiB: its first 2 KiB and latest ~6 KiB are kept
    chatty = "import sys\nfor i in range(2000): print(f'chatty line {i:08d}')"
    async with Api(worker.url) as api:
        await api.register(
            "acme/etl/command/chatty", {"kind": "command", "argv": [sys.executable, "-c", chatty]}
        )
        await api.create({"tenant": "acme", "name": "chatty", "program": "acme/etl/command/chatty",
                          "trigger": {"type": "cron", "expression": "0 0 1 1 *"}})  # fmt: skip
        assert scheduler_cli(worker.url, "schedules", "run", "acme/chatty").returncode == 0
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            runs = (await api.client.get("/programs/acme/etl/command/chatty/runs")).json()["runs"]
            if runs and runs[-1]["status"] == "COMPLETED":
                break
            await asyncio.sleep(0.3)
        else:
            raise AssertionError(f"the chatty run did not complete: {runs}")
        # (a job's run id alone: its schedule names the program)
        got = scheduler_cli(worker.url, "runs", "logs", runs[-1]["run_id"])
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    assert lines[0] == "chatty line 00000000" and lines[-1] == "chatty line 00001999", lines[:2] + lines[-2:]
    assert len(got.stdout) <= 8192 + 21, len(got.stdout)
    assert "bytes of its output not kept here]" in got.stderr, got.stderr
    log = worker.log_path.read_text(errors="replace")
    assert SECRET not in log


async def test_a_standalone_launchers_run_logs_are_read_through_any_worker(
    start_worker, worker_env, tmp_path: Path
):
    worker = start_worker()  # (no launcher of its own)
    env = {
        **worker_env,
        "SCHEDULER_DATA_DIR": str(tmp_path / "l"),
        "SCHEDULER_SECRETS_DIR": _secrets(tmp_path),
    }
    launcher = launcher_process(env, tmp_path / "launcher.log")
    try:
        run_id = await _follows_a_live_run_to_its_end(
            worker.url, _spec(tmp_path / "go"), tmp_path / "go", "talk"
        )
        async with httpx.AsyncClient(base_url=worker.url, timeout=30) as client:
            record = (await client.get(f"/programs/{PROGRAM}/runs/{run_id}")).json()
            assert record["logs_url"] and record["logs_url"] != worker.url, record
            kill_group(launcher)
            gone = await client.get(f"/programs/{PROGRAM}/runs/{run_id}/logs")
            assert gone.status_code == 503 and "does not answer" in gone.text, gone.text
    finally:
        kill_group(launcher)
    assert SECRET not in (tmp_path / "launcher.log").read_text(errors="replace")
