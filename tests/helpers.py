"""Test helpers that talk to the real thing: worker processes, topics, HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import fastavro
import httpx
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from scheduler.domain.model import FiredTask, ScheduleCommand
from scheduler.kafka.consumers import PREFETCH_BACKOFF_S
from scheduler.kafka.kafka_server import child_setup, spawn
from scheduler.kafka.producer import TopicCreator
from scheduler.wire.codec import DecodeError, decode, encode_command, key_bytes
from scheduler.wire.fires import decode_fired


def free_port(host: str = "127.0.0.1") -> int:
    """A port for a process the tests start to listen on: below the kernel's ephemeral range, apart per
    xdist worker. (A port bound and released inside that range can be taken by any outgoing connection —
    the tests' Kafka clients make many — before the process binds it: "address already in use".)"""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    slot = int(worker) if worker.isdigit() else 0
    width = max(100, (low - 10_000) // 8)
    start = 10_000 + (slot % 8) * width
    for _ in range(200):
        port = random.randrange(start, start + width)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in [{start}, {start + width}) on {host}")


class WorkerProcess:
    """`scheduler worker` in a subprocess of its own session, stopped by pid."""

    def __init__(
        self,
        env: dict[str, str],
        log_path: Path,
        port: int | None = None,
        *,
        host: str = "127.0.0.1",
        prefix: Sequence[str] = (),
        python: str = sys.executable,
        cwd: Path | None = None,
    ) -> None:
        """`host`: the address it serves HTTP on; `prefix`: what runs the command (tests.netns: inside a
        network namespace); `python`, `cwd`: another installation's interpreter, and where it runs."""
        self.python, self.cwd = python, cwd
        self.port = port or free_port()
        self.host = host
        self.prefix = list(prefix)
        self.env = {**os.environ, **env, "SCHEDULER_WEB_HOST": host, "SCHEDULER_WEB_PORT": str(self.port)}
        self.partitions = int(self.env.get("SCHEDULER_PARTITIONS", "8"))
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def topic(self, name: str) -> str:
        """One of its app's own topics by its suffix: "commands", "events", "dead-letters" …"""
        return f"{self.env['SCHEDULER_APP_ID']}-{name}"

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115
        self.proc = spawn(  # its own session (killed as a group), and dies with the test runner
            lambda: subprocess.Popen(
                [*self.prefix, self.python, "-m", "scheduler", "worker"],
                cwd=self.cwd,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=child_setup(),
            )
        )
        log.close()

    def health(self) -> dict[str, Any] | None:
        try:
            r = httpx.get(f"{self.url}/health", timeout=2)
            return r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def wait_ready(self, timeout_s: float = 90, partitions: int | None = None) -> None:
        """Until the worker serves HTTP and owns `partitions` partitions (default: all)."""
        want = self.partitions if partitions is None else partitions
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"worker exited with {self.proc.returncode}:\n{self.log_tail()}")
            h = self.health()
            if h is not None and h["ready"] and len(h["partitions"]) >= want:
                return
            time.sleep(0.2)
        raise AssertionError(f"worker not ready after {timeout_s}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def log_problems(self, lines: int = 60) -> str:
        """The last warnings and errors of its log (a failure's cause is often long before its tail)."""
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        found = [line for line in text if "[WARNING]" in line or "[ERROR]" in line or "Traceback" in line]
        return "\n".join(found[-lines:]) or "(none)"

    def kill(self) -> None:
        """SIGKILL the whole process group: no clean shutdown, as a crash."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP the process group: frozen as by a long GC pause or a suspended VM (a zombie owner)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self, timeout_s: float = 20) -> None:
        """SIGTERM, the clean shutdown; SIGKILL if it does not end in time."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            os.killpg(self.proc.pid, signal.SIGCONT)  # (a paused one would never see its SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()


def owned(w: WorkerProcess) -> set[int]:
    h = w.health()
    return set(h["partitions"]) if h and h["ready"] else set()


def wait_split(
    *workers: WorkerProcess, total: int = 4, timeout_s: float = 60, every_one: bool = True
) -> None:
    """Until the workers own disjoint sets of partitions covering all of them (each non-empty, unless
    not `every_one`: with standby replicas Faust may leave a worker only standbys)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sets = [owned(w) for w in workers]
        if (
            (all(sets) or not every_one)
            and all(w.health() is not None for w in workers)
            and sum(len(s) for s in sets) == total
            and set().union(*sets) == set(range(total))
        ):
            return
        time.sleep(0.3)
    raise AssertionError(f"partitions not split: {[owned(w) for w in workers]}")


async def started_consumer(*topics: str, attempts: int = 5, **config: Any) -> AIOKafkaConsumer:
    """An AIOKafkaConsumer started, tried again (a few times) when its start fails: the broker it asks may
    not know a topic created a moment ago. A failed start is stopped: aiokafka leaves a fetcher task
    behind otherwise, one that can outlive its cancellation and hang the event loop's close."""
    for attempt in range(1, attempts + 1):
        consumer = AIOKafkaConsumer(*topics, **config)
        try:
            await consumer.start()
            return consumer
        except Exception:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(consumer.stop(), 10)
            if attempt == attempts:
                raise
            await asyncio.sleep(0.5 * attempt)
    raise AssertionError("unreachable")


def on_kafka() -> bool:
    """Whether the tests run on Apache Kafka (transactions) rather than the embedded Tansu broker."""
    return os.environ.get("SCHEDULER_BROKER_PROFILE", "kafka") != "tansu"  # (set by the broker fixture)


# light-scheduler's schemas exactly as its documentation gives them (seed 001), parsed here on their own:
# a plain fastavro producer, not our codec.
LIGHT_SCHEMAS = {}
for _schema in [
    {
        "namespace": "com.networknt.scheduler",
        "type": "enum",
        "name": "TimeUnit",
        "symbols": ["MILLISECONDS", "SECONDS", "MINUTES", "HOURS", "DAYS"],
    },
    {
        "namespace": "com.networknt.scheduler",
        "type": "record",
        "name": "TaskFrequency",
        "fields": [{"name": "timeUnit", "type": "TimeUnit"}, {"name": "time", "type": "int"}],
    },
    {
        "namespace": "com.networknt.scheduler",
        "type": "enum",
        "name": "DefinitionAction",
        "symbols": ["INSERT", "UPDATE", "DELETE"],
    },
    {
        "namespace": "com.networknt.scheduler",
        "type": "record",
        "name": "TaskDefinitionKey",
        "fields": [{"name": "host", "type": "string"}, {"name": "name", "type": "string"}],
    },
    {
        "namespace": "com.networknt.scheduler",
        "type": "record",
        "name": "TaskDefinition",
        "fields": [
            {"name": "host", "type": "string"},
            {"name": "name", "type": "string"},
            {"name": "action", "type": "DefinitionAction"},
            {"name": "frequency", "type": ["null", "TaskFrequency"], "default": None},
            {"name": "topic", "type": "string"},
            {"name": "start", "type": ["null", "long"], "default": None},
            {"name": "data", "type": ["null", {"type": "map", "values": "string"}], "default": None},
        ],
    },
]:
    LIGHT_SCHEMAS[_schema["name"]] = fastavro.parse_schema(_schema, named_schemas=LIGHT_SCHEMAS)


def light_encode(name: str, record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, LIGHT_SCHEMAS[name], record)
    return buf.getvalue()


def light_decode(name: str, value: bytes) -> dict[str, Any]:
    record = fastavro.schemaless_reader(io.BytesIO(value), LIGHT_SCHEMAS[name], None)
    assert isinstance(record, dict)
    return record


class TopicReader:
    """Reads a topic from the beginning (or the end) in the background; `records` grows as they arrive."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        decoder: Callable[[bytes], Any] = decode_fired,
        start: str = "earliest",
        read_committed: bool | None = None,
        replication: int = 1,
    ) -> None:
        """`read_committed`: what a consumer of our topics sets on Kafka (the default there; None: by the
        broker the tests run on). `replication`: the topic's replication factor, if this creates it (a
        topic that must outlive a broker's loss needs the cluster's: 3)."""
        self.replication = replication
        self.read_committed = on_kafka() if read_committed is None else read_committed
        self.bootstrap = bootstrap
        self.start = start  # "latest": only what is produced from now on
        self.topic = topic
        self.decoder = decoder
        self._decoded: list[Any] = []
        self.raw: list[Any] = []
        self.received: list[int] = []  # epoch ms at which each record reached this consumer
        self._task: asyncio.Task[None] | None = None
        self._consumer: AIOKafkaConsumer | None = None

    async def __aenter__(self) -> TopicReader:
        await ensure_topic(self.bootstrap, self.topic, replication=self.replication)
        self._consumer = await started_consumer(
            self.topic,
            bootstrap_servers=self.bootstrap,
            auto_offset_reset=self.start,
            enable_auto_commit=False,
            metadata_max_age_ms=1000,
            fetch_max_wait_ms=10,  # the embedded broker holds a waiting fetch for its whole max wait
            isolation_level="read_committed" if self.read_committed else "read_uncommitted",
        )
        # one broker leads every partition: aiokafka would wait up to 100 ms before fetching again while
        # records of another partition sit in its buffer (the worker does the same, see scheduler/kafka/consumers.py)
        self._consumer._fetcher._prefetch_backoff = PREFETCH_BACKOFF_S
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        assert self._consumer is not None
        while True:
            batches = await self._consumer.getmany(timeout_ms=100)
            at = time.time_ns() // 1_000_000  # when they reached this consumer: stamped before decoding
            for messages in batches.values():
                for msg in messages:
                    self.raw.append(msg)
                    self.received.append(at)

    @property
    def records(self) -> list[Any]:
        """The records decoded, in arrival order (decoded on access: a reader busy decoding a burst would
        stamp the rest of it late)."""
        for msg in self.raw[len(self._decoded) :]:
            self._decoded.append(self.decoder(msg.value))
        return self._decoded

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()

    async def wait_for(self, predicate: Callable[[list[Any]], bool], timeout_s: float = 30) -> list[Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate(self.records):
                return self.records
            if self._task is not None and self._task.done():
                self._task.result()
            await asyncio.sleep(0.05)
        raise AssertionError(
            f"timed out after {timeout_s}s on {self.topic}; have {len(self.records)}: {self.records[-5:]}"
        )


def fires_of(records: list[FiredTask], name: str) -> list[FiredTask]:
    return [r for r in records if r.key.name == name]


def dead_letter(value: bytes) -> dict[str, Any]:
    return decode("DeadLetter", value)


#: partitions of a topic a test creates before the worker would (conftest's worker_env: 4)
TEST_TOPIC_PARTITIONS = 4

#: the environment of a worker whose SIGKILL a test waits out: the shortest group session Apache Kafka
#: allows (its group.min.session.timeout.ms) and Tansu's profile's, instead of the Kafka profile's 10 s
SHORT_SESSION = {"SCHEDULER_SESSION_TIMEOUT_S": "6"}


async def ensure_topic(
    bootstrap: str, topic: str, partitions: int = TEST_TOPIC_PARTITIONS, replication: int = 1
) -> None:
    """Create the topic unless it exists, as a producer or consumer does on a cluster that does not
    create topics on first use (Apache Kafka as the tests run it)."""
    await TopicCreator(bootstrap, partitions, replication).ensure(topic)


async def delete_topics_of(bootstrap: str, *app_ids: str, timeout_s: float = 15) -> None:
    """Delete every topic of these app ids (their workers' and the tests' own, all named `<app id>-…`), so
    that the session's broker does not grow with every test: with thousands of topics on one node, topic
    creation, metadata and a worker's start slow down for every test after."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000))
    await admin.start()
    try:
        prefixes = tuple(f"{app}-" for app in app_ids)
        mine = [t for t in await admin.list_topics() if t in app_ids or t.startswith(prefixes)]
        if mine:
            await admin.delete_topics(mine, timeout_ms=int(timeout_s * 1000))
    finally:
        await admin.close()


async def produce(
    bootstrap: str,
    topic: str,
    records: list[tuple[bytes | None, bytes]],
    headers: list[tuple[str, bytes]] | None = None,
) -> None:
    await ensure_topic(bootstrap, topic)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for key, value in records:
            await producer.send_and_wait(topic, value, key=key, headers=headers)
    finally:
        await producer.stop()


async def send_commands(bootstrap: str, topic: str, *commands: ScheduleCommand) -> None:
    await produce(bootstrap, topic, [(key_bytes(c.key), encode_command(c)) for c in commands])


__all__ = [
    "DecodeError",
    "TopicReader",
    "WorkerProcess",
    "dead_letter",
    "fires_of",
    "produce",
    "send_commands",
]


def decode_launch(value: bytes) -> dict[str, Any]:
    return decode("LaunchRequest", value)


class Api:
    """The HTTP API as a test uses it: writes, then waits until the owner shows them."""

    def __init__(self, url: str, token: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.AsyncClient(base_url=url, timeout=10, headers=headers)

    async def __aenter__(self) -> Api:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()

    async def until(
        self, path: str, predicate: Callable[[httpx.Response], bool], timeout_s: float = 15
    ) -> httpx.Response:
        deadline = time.monotonic() + timeout_s
        while True:
            r = await self.client.get(path)
            if predicate(r):
                return r
            if time.monotonic() > deadline:
                raise AssertionError(f"{path}: {r.status_code} {r.text}")
            await asyncio.sleep(0.05)

    async def register(self, program: str, spec: dict[str, Any] | None = None) -> None:
        """Register a program (by default `external`: launch requests only, nobody runs it here)."""
        r = await self.client.put(f"/programs/{program}", json=spec or {"kind": "external"})
        assert r.status_code == 202, r.text
        await self.until(
            f"/programs/{program}",
            lambda r: r.status_code == 200 and (spec is None or r.json()["kind"] == spec["kind"]),
        )

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("program") and (await self.client.get(f"/programs/{body['program']}")).status_code == 404:
            await self.register(body["program"])
        r = await self.client.post("/schedules", json={"enabled": True, **body})
        assert r.status_code == 202, r.text
        path = f"/schedules/{body['tenant']}/{body['name']}"
        created = (await self.until(path, lambda r: r.status_code == 200)).json()
        await self.indexed(created)
        return created

    async def indexed(self, schedule: dict[str, Any], timeout_s: float = 15) -> None:
        """Until the trigger index points every event key of the schedule at this version of it."""
        for key in _event_keys(schedule["trigger"]):
            await self.until(
                f"/triggers?eventKey={quote(key)}",
                lambda r: any(
                    t["schedule"] == schedule["key"] and t["version"] == schedule["version"]
                    for t in r.json()["triggers"]
                ),
                timeout_s,
            )

    async def update(self, tenant: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        version = (await self.client.get(f"/schedules/{tenant}/{name}")).json()["version"]
        r = await self.client.put(f"/schedules/{tenant}/{name}", json=body)
        assert r.status_code == 202, r.text
        path = f"/schedules/{tenant}/{name}"
        updated = (
            await self.until(path, lambda r: r.status_code == 200 and r.json()["version"] > version)
        ).json()
        await self.indexed(updated)
        return updated

    async def delete(self, tenant: str, name: str) -> None:
        r = await self.client.delete(f"/schedules/{tenant}/{name}")
        assert r.status_code == 202, r.text
        await self.until(f"/schedules/{tenant}/{name}", lambda r: r.status_code == 404)

    async def event(self, event_type: str, **payload: str) -> None:
        r = await self.client.post("/events", json={"eventType": event_type, "payload": payload})
        assert r.status_code == 202, r.text

    async def partitions(self, dataset: str, *keys: str, size: int = 100) -> None:
        import json

        await self.event(
            "partition", datasetId=dataset, partitionKeys=json.dumps(list(keys)), bytes=str(size)
        )

    async def status(self, program: str, run_id: str, status: str) -> None:
        await self.event("program-status", programId=program, runId=run_id, status=status)

    async def run(self, program: str, run_id: str, *statuses: str) -> None:
        for s in statuses:
            await self.status(program, run_id, s)

    async def jobs(self, **query: str) -> dict[str, Any]:
        r = await self.client.get("/jobs", params=query)
        assert r.status_code == 200, r.text
        return r.json()

    async def progress(self, tenant: str, name: str) -> dict[str, Any]:
        r = await self.client.get(f"/schedules/{tenant}/{name}/trigger")
        assert r.status_code == 200, r.text
        return r.json()

    async def wait_jobs(
        self, predicate: Callable[[dict[str, Any]], bool], timeout_s: float = 15, **query: str
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            j = await self.jobs(**query)
            if predicate(j):
                return j
            if time.monotonic() > deadline:
                raise AssertionError(f"jobs: {j}")
            await asyncio.sleep(0.05)


def _event_keys(trigger: dict[str, Any]) -> list[str]:
    """The event keys a trigger (its JSON) is indexed under: those of the datasets and programs it names."""
    if trigger["type"] in ("and", "or"):
        return [k for t in trigger["triggers"] for k in _event_keys(t)]
    if trigger.get("dataset"):
        return [f"partition:{trigger['dataset']}"]
    if trigger.get("program"):
        return [f"program:{trigger['program']}"]
    if trigger.get("sensor"):
        return [f"sensor:{trigger['sensor']}"]
    return []


class RunProcess:
    """`scheduler run` (what `make run` starts) on ports of its own; `app_id` None: its default app id."""

    def __init__(self, data_dir: Path, log: Path, broker: str = "tansu", app_id: str | None = "demo") -> None:
        self.web_port, self.broker_port = free_port(), free_port()
        self.data_dir, self.log, self.broker, self.app_id = data_dir, log, broker, app_id
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
                    "--broker",
                    self.broker,
                    "--broker-port",
                    str(self.broker_port),
                    "--data-dir",
                    str(self.data_dir),
                    *(["--app-id", self.app_id] if self.app_id else []),
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 180
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


def metric(text: str, name: str) -> float:
    """A sample without labels from a /metrics page, failing if the page has none."""
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert found, f"no {name} in /metrics"
    return float(found.group(1))


def scheduler_cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`scheduler ARGS…` as a user runs it against the worker at `url` (SCHEDULER_URL), its output as text."""
    return subprocess.run(
        [sys.executable, "-m", "scheduler", *args],
        env={"SCHEDULER_URL": url, "PATH": "/usr/bin:/bin"},
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=60,
    )
