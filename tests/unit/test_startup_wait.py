"""A worker started while no broker answers (a network cut, a broker restarting) waits for one instead of
dying on its first connection attempt (the fault campaign's seed 52 saw a worker started during its own
network cut exit 1), and gives up with exit code 75 (start me again) after SCHEDULER_STARTUP_WAIT_S."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from scheduler.kafka.broker import free_port, wait_for_any
from scheduler.worker.liveness import LEFT_EXIT_CODE

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]


def test_it_returns_once_a_server_listens() -> None:
    port = free_port()
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def listen_later() -> None:
        time.sleep(1.0)
        server.bind(("127.0.0.1", port))
        server.listen()

    said: list[str] = []
    threading.Thread(target=listen_later, daemon=True).start()
    try:
        started = time.monotonic()
        assert wait_for_any(f"127.0.0.1:1,127.0.0.1:{port}", 30, said.append)
        assert time.monotonic() - started < 25
        assert len(said) == 1 and "waiting up to 30 s" in said[0], said
    finally:
        server.close()


def test_it_gives_up_after_its_wait() -> None:
    assert not wait_for_any(f"127.0.0.1:{free_port()}", 1.0)
    assert wait_for_any("not an address", 1.0)  # (Kafka's client says what is wrong with it)


def test_a_worker_with_no_broker_stops_with_exit_code_75_and_says_why(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "SCHEDULER_STARTUP_WAIT_S": "1",
        "SCHEDULER_DATA_DIR": str(tmp_path),
        "SCHEDULER_AUTH": "off",
    }
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    done = subprocess.run(
        [str(Path(sys.executable).with_name("scheduler")), "worker", "--bootstrap", f"127.0.0.1:{port}",
         "--web-port", str(free_port())],
        env=env, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == LEFT_EXIT_CODE, (done.returncode, done.stderr[-2000:])
    assert f"no broker answered at 127.0.0.1:{port} within 1 s" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
