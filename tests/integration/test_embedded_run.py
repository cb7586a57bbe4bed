"""`scheduler run` (what `make run` starts): a broker + worker + HTTP, and its restart story on each broker:
the embedded Tansu broker (memory only, the journal keeps the schedules) and Apache Kafka from its jars
(durable: everything is kept, and fires due while it was down are caught up)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers import RunProcess, TopicReader, dead_letter, free_port, produce

pytestmark = [pytest.mark.integration, pytest.mark.own_broker, pytest.mark.timeout(240)]


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


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


async def test_a_kafka_run_keeps_everything_and_catches_up_what_fell_due_while_it_was_down(tmp_path, runs):
    """`scheduler run --broker kafka`, SIGKILLed (its broker dies with it) and started again on the same data
    dir: the schedule, its fires, the dead letters and the watermark are all still there, and every second
    that fell due while it was down is fired on restart (EACH), marked as catch-up."""
    data = tmp_path / "data"
    first = RunProcess(data, tmp_path / "run.log", broker="kafka")
    runs.append(first)
    first.start()
    body = {
        "tenant": "acme",
        "name": "each",
        "trigger": {"type": "frequency", "timeUnit": "SECONDS", "time": 1},
        "topic": "fires",
        "catchUp": "EACH",
        "enabled": True,
    }
    bootstrap = f"127.0.0.1:{first.broker_port}"
    with httpx.Client(base_url=first.url, timeout=10) as client:
        assert client.post("/schedules", json=body).status_code == 202
    await produce(bootstrap, "demo-commands", [(b"not a key", b"not a command")])
    async with TopicReader(bootstrap, "fires") as reader:
        await reader.wait_for(lambda r: len(r) >= 3)
    async with TopicReader(bootstrap, "demo-dead-letters", decoder=dead_letter) as letters:
        await letters.wait_for(lambda r: len(r) >= 1)
    await asyncio.sleep(1.5)  # a watermark past the first fires is persisted (progress interval: 1 s)

    assert first.proc is not None
    os.killpg(first.proc.pid, signal.SIGKILL)
    first.proc.wait(timeout=10)
    killed_at = time.time()
    deadline = time.monotonic() + 30
    while _listening(first.broker_port):  # the broker died with its parent: the port is free again
        assert time.monotonic() < deadline, "Kafka outlived `scheduler run` after a SIGKILL"
        time.sleep(0.2)
    time.sleep(4)  # seconds fall due while nothing runs

    second = RunProcess(data, tmp_path / "run2.log", broker="kafka")
    second.web_port, second.broker_port = first.web_port, first.broker_port
    runs.append(second)
    second.start()
    restarted_at = time.time()
    with httpx.Client(base_url=second.url, timeout=10) as client:
        assert client.get("/schedules/acme/each").status_code == 200
    async with TopicReader(bootstrap, "demo-dead-letters", decoder=dead_letter) as letters:
        await letters.wait_for(lambda r: len(r) >= 1)
    assert letters.records[0]["value"] == b"not a command"
    async with TopicReader(bootstrap, "fires") as reader:
        records = await reader.wait_for(
            lambda r: max((f.due_at for f in r), default=0) / 1000 > restarted_at + 2
        )
    dues = sorted({f.due_at for f in records})
    down = [d for d in dues if killed_at * 1000 < d < restarted_at * 1000]
    assert len(down) >= 4, f"no catch-up of the seconds it was down: {dues}"
    assert dues == list(range(dues[0], dues[-1] + 1000, 1000)), f"a due instant is missing: {dues}"
    assert any(f.catch_up for f in records if f.due_at in down)
    second.stop()
    assert second.proc is not None and second.proc.returncode == 0, second.log.read_text()[-3000:]


async def test_scheduler_run_owns_its_broker_it_dies_with_it_and_a_held_port_is_refused(tmp_path, runs):
    """SIGKILL of `scheduler run` takes its embedded broker down (no orphan keeps the port), and a port
    someone else holds is refused with a message instead of being used."""
    import socket

    first = RunProcess(tmp_path / "data", tmp_path / "run.log")
    runs.append(first)
    first.start()
    assert first.proc is not None
    os.killpg(first.proc.pid, signal.SIGKILL)
    first.proc.wait(timeout=10)
    deadline = time.monotonic() + 15
    while _listening(first.broker_port):
        assert time.monotonic() < deadline, "the embedded broker outlived `scheduler run`"
        time.sleep(0.2)

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SCHEDULER_", "KAFKA_"))}
        for broker in ("tansu", "kafka"):
            out = subprocess.run(
                [sys.executable, "-m", "scheduler", "run", "--broker", broker, "--broker-port", str(port),
                 "--web-port", str(free_port()), "--data-dir", str(tmp_path / f"held-{broker}")],
                env=env, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert out.returncode == 2, out.stdout + out.stderr
            assert f"port {port} is held by another process" in out.stderr
