"""Apache Kafka from its Maven Central jars: a KRaft cluster of 1 node (broker + controller) or 3, started
and stopped by pid. The tests, the benchmarks and `scheduler run --broker kafka` use it.

The version is the one pom.xml beside this file pins; `mvn` fetches its runtime classpath once into a
cache outside git (SCHEDULER_KAFKA_CACHE, default ~/.cache/kafka-job-scheduler), reused offline after.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
POM = Path(__file__).with_name("pom.xml")
KAFKA_VERSION = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", POM.read_text()).group(1)  # type: ignore[union-attr]
MAIN_CLASS = "kafka.Kafka"
#: what a node's JVM gets: a fixed heap (no resizing pauses) small enough for three nodes on a laptop
DEFAULT_HEAP_MB = 512
JVM_FLAGS = [
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
]
#: the collector flags above, left out when JDK_JAVA_OPTIONS (which every `java` reads) chose a collector:
#: a JVM given two refuses to start ("Conflicting collector combinations")
G1_FLAGS = ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20")


def jvm_flags(environ: Mapping[str, str] = os.environ) -> list[str]:
    """JVM_FLAGS, without its collector where the environment's JDK_JAVA_OPTIONS names one."""
    chosen = re.search(r"-XX:\+Use\w+GC\b", environ.get("JDK_JAVA_OPTIONS", ""))
    return [f for f in JVM_FLAGS if not (chosen and f in G1_FLAGS)]


#: Broker settings every cluster started here gets, each for a reason:
BASE_CONFIG = {
    # a group's first member is not held back 3 s waiting for others (workers join one at a time)
    "group.initial.rebalance.delay.ms": "0",
    # the internal topics are created on first use: 50 partitions each is seconds of work on 2 cores
    "offsets.topic.num.partitions": "8",
    "transaction.state.log.num.partitions": "8",
    # a topic the scheduler forgets to create must fail loudly, as on a production cluster
    "auto.create.topics.enable": "false",
    # a compacted topic is cleaned soon after it becomes dirty (the default checks every 15 s)
    "log.cleaner.backoff.ms": "1000",
}
#: a single node can hold no more than one replica of anything
SINGLE_NODE_CONFIG = {
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
}
#: three nodes: every partition on all three, a write acknowledged once two have it
THREE_NODE_CONFIG = {"default.replication.factor": "3", "min.insync.replicas": "2"}

LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
# every config object dumps all its settings at INFO: thousands of lines a start
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = WARN
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.storage.name = org.apache.kafka.storage.internals
logger.storage.level = WARN
logger.log.name = kafka.log
logger.log.level = WARN
"""


class KafkaUnavailable(RuntimeError):
    """Apache Kafka cannot be started here; the message names what is missing."""


def cache_dir() -> Path:
    env = os.environ.get("SCHEDULER_KAFKA_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kafka-job-scheduler"


def missing_tools() -> list[str]:
    """What starting Kafka from its jars needs and this machine lacks."""
    return [tool for tool in ("java", "mvn") if shutil.which(tool) is None]


def jars_dir(cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / f"kafka-{KAFKA_VERSION}" / "lib"


def jars_cached(cache: Path | None = None) -> bool:
    return (jars_dir(cache) / ".complete").exists()


def classpath(cache: Path | None = None, timeout_s: float = 600) -> Path:
    """The directory holding the pinned Kafka server's jars, fetched with mvn the first time."""
    lib = jars_dir(cache)
    done = lib / ".complete"
    if done.exists():
        return lib
    missing = missing_tools()
    if missing:
        raise KafkaUnavailable(
            f"Apache Kafka {KAFKA_VERSION} runs from its jars and needs {' and '.join(missing)} on PATH "
            "(Debian: apt-get install openjdk-17-jre-headless maven)"
        )
    lib.parent.mkdir(parents=True, exist_ok=True)
    with open(lib.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two processes fetching at once share one download
        if done.exists():
            return lib
        shutil.rmtree(lib, ignore_errors=True)
        cmd = [
            "mvn", "-B", "-q", "-f", str(POM), "dependency:copy-dependencies",
            "-DincludeScope=runtime", f"-DoutputDirectory={lib}",
        ]  # fmt: skip
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise KafkaUnavailable(
                f"fetching Kafka {KAFKA_VERSION}'s jars with mvn took over {timeout_s:.0f} s"
            ) from exc
        jar = lib / f"kafka_2.13-{KAFKA_VERSION}.jar"
        if out.returncode != 0 or not jar.exists():
            tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-15:])
            raise KafkaUnavailable(
                f"mvn could not fetch Apache Kafka {KAFKA_VERSION} (org.apache.kafka:kafka_2.13) from Maven "
                f"Central (exit {out.returncode}):\n{tail}"
            )
        done.touch()
    return lib


def _free_port(host: str) -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _cluster_id() -> str:
    """Kafka's Uuid: 16 random bytes, URL-safe base64 without padding, never starting with '-' (the
    storage tool would read it as an option), as Kafka's own Uuid.randomUuid ensures."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _listening(host: str, port: int) -> bool:
    import socket

    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


#: the thread that starts a child for any other thread: it lasts as long as the process
SPAWNER_THREAD = "lasting-spawner"
_spawner: ThreadPoolExecutor | None = None
_spawner_lock = threading.Lock()


def _lasting_thread() -> bool:
    current = threading.current_thread()
    return current is threading.main_thread() or current.name.startswith(SPAWNER_THREAD)


def spawn(start: Callable[[], T]) -> T:
    """Run `start` (which starts a child process) on a thread that lasts as long as this process: the main
    thread when called from it, else one spawner thread. Linux sends the parent-death signal when the
    *thread* that started the child ends, so a node restarted from asyncio.to_thread's worker would be
    killed with that thread, or, without the signal, outlive a killed test runner."""
    global _spawner
    if _lasting_thread():
        return start()
    with _spawner_lock:
        if _spawner is None:
            _spawner = ThreadPoolExecutor(1, thread_name_prefix=SPAWNER_THREAD)
    return _spawner.submit(start).result()


def child_setup(tied_to_parent: bool = True) -> Callable[[], None]:
    """What a broker's child process runs before exec: its own session, and (tied, when started from a
    lasting thread: see spawn) the parent-death signal."""
    if tied_to_parent and _lasting_thread():
        return die_with_parent
    return os.setsid


def die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the process that started it dies (Linux prctl)."""
    os.setsid()
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _run_coroutine(coro: Any) -> Any:
    """Run a coroutine to completion from sync code, also when the caller is inside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    result: list[Any] = []

    def target() -> None:
        result.append(asyncio.run(coro))

    t = threading.Thread(target=target)
    t.start()
    t.join()
    return result[0] if result else None


async def _broker_ids(bootstrap_servers: str, timeout_s: float = 3.0) -> set[int]:
    """The broker ids a metadata request lists (empty when it fails)."""
    import logging

    from aiokafka.client import AIOKafkaClient

    # while a node starts, aiokafka logs every refused connection as an error
    quiet = logging.getLogger("aiokafka")
    level, quiet.level = quiet.level, logging.CRITICAL
    client = AIOKafkaClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=int(timeout_s * 1000))
    try:
        await asyncio.wait_for(client.bootstrap(), timeout_s)
        metadata = await asyncio.wait_for(client.fetch_all_metadata(), timeout_s)
        return {b.nodeId for b in metadata.brokers()}
    except Exception:
        return set()
    finally:
        with contextlib.suppress(Exception):
            await client.close()
        quiet.setLevel(level)


async def _under_replicated(bootstrap_servers: str, timeout_s: float = 5.0) -> int | None:
    """How many partitions have fewer in-sync replicas than replicas (None when the cluster does not answer)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=int(timeout_s * 1000))
    try:
        await asyncio.wait_for(admin.start(), timeout_s)
        topics = await asyncio.wait_for(admin.describe_topics(), timeout_s)
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            await admin.close()
    return sum(
        1
        for t in topics
        for p in t["partitions"]
        if len(p.get("isr_nodes", p.get("isr", []))) < len(p.get("replica_nodes", p.get("replicas", [])))
    )


@dataclass
class KafkaNode:
    node_id: int
    port: int
    controller_port: int
    dir: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def log_dir(self) -> Path:
        return self.dir / "data"

    @property
    def log_path(self) -> Path:
        return self.dir / "server.log"

    @property
    def properties_path(self) -> Path:
        return self.dir / "node.properties"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None and self.process.poll() is None else None


class KafkaCluster:
    """A KRaft cluster under `base_dir` (each node's config, log dirs and server.log). A directory from
    an earlier start is reused as it is, ports included: its topics are still there."""

    def __init__(
        self,
        base_dir: Path,
        nodes: int = 1,
        host: str = "127.0.0.1",
        port: int | None = None,
        config: Mapping[str, str] | None = None,
        heap_mb: int = DEFAULT_HEAP_MB,
        tied_to_parent: bool = True,
    ) -> None:
        if nodes not in (1, 3):
            raise ValueError("a cluster here has 1 node or 3")
        self.base_dir = base_dir.absolute()
        self.host = host
        self.heap_mb = heap_mb
        self.tied_to_parent = tied_to_parent
        self.config = {
            **BASE_CONFIG,
            **(SINGLE_NODE_CONFIG if nodes == 1 else THREE_NODE_CONFIG),
            **(config or {}),
        }
        self.nodes = self._layout(nodes, port)

    def _layout(self, count: int, port: int | None) -> list[KafkaNode]:
        """Ports and directories, kept in cluster.json so a restart finds its cluster where it left it."""
        state_path = self.base_dir / "cluster.json"
        if state_path.exists():
            state = json.loads(state_path.read_text())
            if len(state["nodes"]) == count and (port is None or state["nodes"][0]["port"] == port):
                self.cluster_id: str = state["cluster_id"]
                return [
                    KafkaNode(n["id"], n["port"], n["controller_port"], self.base_dir / f"node-{n['id']}")
                    for n in state["nodes"]
                ]
        self.cluster_id = _cluster_id()
        taken: set[int] = {port} if port else set()

        def fresh() -> int:  # (a port just released can come back from the next ask: never twice here)
            while (p := _free_port(self.host)) in taken:
                pass
            taken.add(p)
            return p

        nodes = [
            KafkaNode(i, port if (port and i == 1) else fresh(), fresh(), self.base_dir / f"node-{i}")
            for i in range(1, count + 1)
        ]
        self.base_dir.mkdir(parents=True, exist_ok=True)
        state_path.write_text(
            json.dumps(
                {
                    "cluster_id": self.cluster_id,
                    "nodes": [
                        {"id": n.node_id, "port": n.port, "controller_port": n.controller_port} for n in nodes
                    ],
                }
            )
        )
        return nodes

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{self.host}:{n.port}" for n in self.nodes)

    def node(self, node_id: int) -> KafkaNode:
        return next(n for n in self.nodes if n.node_id == node_id)

    # -- start and stop --------------------------------------------------------------------------

    def start(self, timeout_s: float = 120.0) -> KafkaCluster:
        lib = classpath()
        for n in self.nodes:
            self._write_config(n)
            self._format(n, lib)
        for n in self.nodes:
            self._spawn(n, lib)
        try:
            self.wait_ready(timeout_s)
        except KafkaUnavailable:
            self.stop()
            raise
        return self

    def _write_config(self, n: KafkaNode) -> None:
        n.dir.mkdir(parents=True, exist_ok=True)
        voters = ",".join(f"{m.node_id}@{self.host}:{m.controller_port}" for m in self.nodes)
        props = {
            "process.roles": "broker,controller",
            "node.id": str(n.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{self.host}:{n.port},CONTROLLER://{self.host}:{n.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{n.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(n.log_dir),
            **self.config,
        }
        n.properties_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.base_dir / "log4j2.properties").write_text(LOG4J2)

    def _java(self, lib: Path, main: str, *args: str, heap: bool = False) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise KafkaUnavailable(
                "Apache Kafka needs java on PATH (Debian: apt-get install openjdk-17-jre-headless)"
            )
        memory = [f"-Xms{self.heap_mb}m", f"-Xmx{self.heap_mb}m", *jvm_flags()] if heap else ["-Xmx256m"]
        log4j = f"-Dlog4j2.configurationFile={self.base_dir / 'log4j2.properties'}"
        return [java, *memory, log4j, "-cp", f"{lib}/*", main, *args]

    def _format(self, n: KafkaNode, lib: Path) -> None:
        if (n.log_dir / "meta.properties").exists():
            return
        cmd = self._java(
            lib,
            "kafka.tools.StorageTool",
            "format",
            "-t",
            self.cluster_id,
            "-c",
            str(n.properties_path),
            "--ignore-formatted",
        )
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise KafkaUnavailable(
                f"formatting Kafka node {n.node_id}'s storage failed: {out.stdout[-2000:]}{out.stderr[-2000:]}"
            )

    def _spawn(self, n: KafkaNode, lib: Path | None = None) -> None:
        cmd = self._java(lib or classpath(), MAIN_CLASS, str(n.properties_path), heap=True)
        with open(n.log_path, "ab") as log:
            n.process = spawn(
                lambda: subprocess.Popen(
                    cmd,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    # its own session (a signal to the test runner's group does not reach it), and killed
                    # with the process that started it: a SIGKILLed parent leaves no broker holding the port
                    preexec_fn=child_setup(self.tied_to_parent),
                )
            )
        (n.dir / "pid").write_text(str(n.process.pid))

    def wait_ready(self, timeout_s: float = 120.0, nodes: int | None = None) -> None:
        """Until a metadata request lists every node as a broker (an open port is not enough), and every
        node accepts clients on its port (a restarted node is listed from its registration on, seconds
        before it opens its port to clients)."""
        want = {n.node_id for n in self.nodes} if nodes is None else None
        deadline = time.monotonic() + timeout_s
        while True:
            for n in self.nodes:
                if n.process is not None and n.process.poll() is not None:
                    raise KafkaUnavailable(
                        f"Kafka node {n.node_id} exited with {n.process.returncode}; its log "
                        f"({n.log_path}) ends:\n{self.log_tail(n.node_id, 20)}"
                    )
            listening = [n for n in self.nodes if _listening(self.host, n.port)]
            ids = _run_coroutine(_broker_ids(self.bootstrap_servers)) if listening else set()
            if (want is not None and want <= ids and len(listening) == len(self.nodes)) or (
                nodes is not None and len(ids) >= nodes
            ):
                return
            if time.monotonic() > deadline:
                raise KafkaUnavailable(
                    f"Kafka at {self.bootstrap_servers} did not list its brokers within {timeout_s:.0f} s "
                    f"(listed {sorted(ids)}); see {self.base_dir}/node-*/server.log"
                )
            time.sleep(0.2)

    def wait_fully_replicated(self, timeout_s: float = 120.0) -> None:
        """Until every partition has all its replicas in sync again (after a node came back)."""
        deadline = time.monotonic() + timeout_s
        while True:
            behind = _run_coroutine(_under_replicated(self.bootstrap_servers))
            if behind == 0:
                return
            if time.monotonic() > deadline:
                raise KafkaUnavailable(f"{behind} partitions still under-replicated after {timeout_s:.0f} s")
            time.sleep(0.5)

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM every node (a controlled shutdown), SIGKILL what is left after timeout_s."""
        running = [n for n in self.nodes if n.pid is not None]
        for n in running:
            n.process.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        deadline = time.monotonic() + timeout_s
        for n in running:
            proc = n.process
            assert proc is not None
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def stop_stale(self, timeout_s: float = 30.0) -> list[int]:
        """Stop the nodes an earlier start of this cluster left running (its parent was SIGKILLed before
        the parent-death signal was set, or it ran without one): found by pid file and command line."""
        stopped = []
        for n in self.nodes:
            try:
                pid = int((n.dir / "pid").read_text())
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except (OSError, ValueError):
                continue
            if str(n.properties_path) not in cmdline:
                continue  # the pid was reused by another process
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            stopped.append(pid)
        return stopped

    def kill(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        n = self.node(node_id)
        if n.process is not None and n.process.poll() is None:
            n.process.send_signal(sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                n.process.wait(timeout=60)

    def start_node(self, node_id: int) -> None:
        self._spawn(self.node(node_id))

    def active_controller(self) -> int | None:
        """The KRaft quorum's leader, from the quorum-state file each node keeps (highest epoch wins)."""
        best: tuple[int, int] | None = None
        for n in self.nodes:
            path = n.log_dir / "__cluster_metadata-0" / "quorum-state"
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            leader, epoch = state.get("leaderId", -1), state.get("leaderEpoch", -1)
            if leader >= 0 and (best is None or epoch > best[1]):
                best = (leader, epoch)
        return best[0] if best else None

    def log_tail(self, node_id: int, lines: int = 40) -> str:
        try:
            return "\n".join(self.node(node_id).log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
