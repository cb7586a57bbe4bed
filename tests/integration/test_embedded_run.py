"""`scheduler run` (what `make run` starts): embedded broker + worker + HTTP, and its restart story."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from scheduler.broker import free_port
from tests.helpers import TopicReader

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


class RunProcess:
    def __init__(self, data_dir: Path, log: Path) -> None:
        self.web_port, self.broker_port = free_port(), free_port()
        self.data_dir, self.log = data_dir, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RunProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SCHEDULER_", "KAFKA_"))}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "scheduler",
                    "run",
                    "--web-port",
                    str(self.web_port),
                    "--broker-port",
                    str(self.broker_port),
                    "--data-dir",
                    str(self.data_dir),
                    "--app-id",
                    "demo",
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                health = httpx.get(f"{self.url}/health", timeout=2).json()
                if health["ready"] and len(health["partitions"]) == 8:
                    return self
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.2)
        raise AssertionError(self.log.read_text()[-3000:])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


@pytest.fixture
def runs(tmp_path: Path):  # type: ignore[no-untyped-def]
    started: list[RunProcess] = []
    yield started
    for r in started:
        if r.proc is not None and r.proc.poll() is None:
            os.killpg(r.proc.pid, signal.SIGKILL)
            r.proc.wait(timeout=10)


async def test_schedules_survive_a_restart_of_the_embedded_runner(tmp_path, runs):
    """The embedded broker forgets everything; the journal brings the schedules back, stale state is wiped."""
    data = tmp_path / "data"
    first = RunProcess(data, tmp_path / "run.log")
    runs.append(first)
    first.start()
    body = {
        "tenant": "acme",
        "name": "keep",
        "trigger": {"type": "frequency", "timeUnit": "SECONDS", "time": 1},
        "topic": "fires",
        "enabled": True,
    }
    gone = {**body, "name": "gone"}
    with httpx.Client(base_url=first.url, timeout=10) as client:
        assert client.post("/schedules", json=body).status_code == 202
        assert client.post("/schedules", json=gone).status_code == 202
        deadline = time.monotonic() + 15
        while client.get("/schedules/acme/gone").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert client.delete("/schedules/acme/gone").status_code == 202
        while client.get("/schedules/acme/gone").status_code != 404:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    first.stop()
    assert first.proc is not None and first.proc.returncode == 0, first.log.read_text()[-3000:]

    second = RunProcess(data, tmp_path / "run2.log")
    second.web_port, second.broker_port = first.web_port, first.broker_port
    runs.append(second)
    second.start()
    with httpx.Client(base_url=second.url, timeout=10) as client:
        deadline = time.monotonic() + 20
        while client.get("/schedules/acme/keep").status_code != 200:
            assert time.monotonic() < deadline, second.log.read_text()[-3000:]
            time.sleep(0.2)
        assert client.get("/schedules/acme/gone").status_code == 404
    async with TopicReader(f"127.0.0.1:{second.broker_port}", "fires") as reader:
        await reader.wait_for(lambda r: len(r) >= 2)
    assert {f.key.name for f in reader.records} == {"keep"}
    second.stop()
    assert "Traceback" not in (tmp_path / "run2.log").read_text()
