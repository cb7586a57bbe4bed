"""The program registry: what a program is and how to run it.

A program (namespace/application/type/name) is registered over HTTP (`PUT /programs/...`), which produces
its definition to the programs topic (keyed by program id; the latest definition wins), or declared in a
JSON file that workers and launchers load at start (SCHEDULER_PROGRAMS_FILE). Every worker and launcher
reads the whole topic into memory: programs are few, and every partition needs them (schedule validation,
the launcher). A schedule that names a program nobody registered is refused.

Kinds: `pyspark` (a `module:function(spark, args)` or a script, submitted to Spark), `command` (an argv),
`python` (a `module:function(args)` called in a process of the launcher's own Python: what the
`@schedule` decorators of scheduler/client/code.py declare),
`external` (run by another system that consumes the launch requests; the launcher leaves it alone),
`sensor` (a polling check, `module:function(cursor)` or an argv, that the worker owning it runs every
`intervalMs` with the cursor it returned last: schedules fire on what it says, worker/sensors.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Generic, Literal, TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from pydantic import BaseModel, ConfigDict, Field

from scheduler.kafka.config import BrokerProfile
from scheduler.kafka.consumers import FOLLOW_FETCH_MAX_WAIT_MS, started
from scheduler.worker.following import Following
from scheduler.worker.liveness import Work, fetched_to

#: the launcher's environment variables holding secrets (scheduler/launcher/secrets.py)
SECRET_ENV_PREFIX = "SCHEDULER_SECRET_"

log = logging.getLogger(__name__)
T = TypeVar("T")


class SecretRef(BaseModel):
    """An env value kept out of the program's definition: `{"secretRef": "tenant/name"}`, resolved by the
    launcher at each launch from its secret store (launcher/secrets.py); the tenant is the program's
    namespace."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    secretRef: str = Field(pattern=r"^[A-Za-z0-9._-]{1,128}/[A-Za-z0-9._-]{1,128}$")


class ProgramSpec(BaseModel):
    """How to run a program (the HTTP body of PUT /programs/{namespace}/{application}/{type}/{name})."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["pyspark", "command", "python", "external", "sensor"]
    target: str = Field(
        "",
        max_length=1024,
        description="pyspark: 'package.module:function' (called with spark, args) or a .py path; python: "
        "'package.module:function' (called with args), run by the launcher's Python; sensor: "
        "'package.module:function' (called with the cursor), run by the worker's Python (or an argv)",
    )
    argv: list[str] = Field(default_factory=list, max_length=256, description="command: the argv to run")
    master: str | None = Field(None, max_length=512, description="pyspark: Spark master (default: config)")
    env: dict[str, str | SecretRef] = Field(
        default_factory=dict,
        max_length=128,
        description='values, or {"secretRef": "tenant/name"}: a secret of the program\'s namespace, resolved at '
        "launch by the launcher (never on a topic, in an answer or in a run's output)",
    )
    reportsRunning: bool = Field(
        False,
        description="command: RUNNING only once it prints the line `SCHEDULER-RUN-STATE RUNNING` (a "
        "service that is ready to answer); STARTING until then",
    )
    timeLimitMs: int | None = Field(
        None,
        ge=1_000,
        le=7 * 86_400_000,
        description="a run still going this long after it started is stopped and ends KILLED",
    )
    intervalMs: int | None = Field(
        None,
        ge=1_000,
        le=86_400_000,
        description="sensor: how often the worker owning it evaluates it (default 30 s)",
    )
    description: str = Field("", max_length=1024)

    def secret_refs(self) -> dict[str, str]:
        """env name -> the secret it names ("tenant/name")."""
        return {k: v.secretRef for k, v in self.env.items() if isinstance(v, SecretRef)}

    def problems(self, program_id: str | None = None) -> list[tuple[str, str]]:
        namespace = None if program_id is None else program_id.split("/", 1)[0]
        for name, ref in self.secret_refs().items():
            if namespace is not None and ref.split("/", 1)[0] != namespace:
                return [(f"env.{name}", f"secret {ref} is not of the program's namespace {namespace}")]
        if self.kind == "pyspark" and not self.target:
            return [("target", "a pyspark program needs a target: 'module:function' or a script path")]
        if self.kind == "python" and ":" not in self.target:
            return [("target", "a python program needs a target 'package.module:function'")]
        if self.kind == "sensor" and (
            bool(self.argv) == bool(self.target) or (self.target and ":" not in self.target)
        ):
            return [("target", "a sensor needs a target 'package.module:function' or an argv (one of them)")]
        if self.intervalMs is not None and self.kind != "sensor":
            return [("intervalMs", "only a sensor has an interval (a schedule says when the others run)")]
        if self.kind == "command" and not self.argv:
            return [("argv", "a command program needs an argv")]
        return []


class TopicMap(Generic[T]):
    """A compacted topic read from the beginning into memory and followed: key -> the latest value (a
    null value deletes its key). Every worker (and launcher) holds the whole map: for what is small and
    needed on every partition (programs, calendars)."""

    what = "entry"

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        read_committed: bool = False,
        profile: BrokerProfile = "tansu",
        fetch_max_wait_ms: int | None = None,
        following: Following | None = None,
    ) -> None:
        """`profile`: the broker's (kafka.consumers: FOLLOW_FETCH_MAX_WAIT_MS), for how long a fetch waits
        (or `fetch_max_wait_ms`). `following`: the process's consumer of the topics it follows whole
        (following.py), else one of this map's own."""
        self._bootstrap = bootstrap_servers
        self.topic = topic
        self._following = following or Following(
            bootstrap_servers, fetch_max_wait_ms or FOLLOW_FETCH_MAX_WAIT_MS[profile], read_committed
        )
        self._items: dict[str, T] = {}
        self._started = False
        self._ends: AIOKafkaConsumer | None = None  # (see _end_offsets)
        self._ends_lock = asyncio.Lock()
        self._caught_up = asyncio.Event()
        self.name = f"{self.what}s"  # (liveness.Watched)
        self.applied = 0  # records applied: what the watchdog sees move

    @property
    def _consumer(self) -> AIOKafkaConsumer | None:
        """The consumer that reads the topic (shared with the process's other followers)."""
        return self._following.consumer if self._started else None

    def parse(self, key: str, value: bytes) -> T:
        raise NotImplementedError

    def get(self, key: str) -> T | None:
        return self._items.get(key)

    def all(self) -> dict[str, T]:
        return dict(self._items)

    async def lookup(self, key: str, wait_s: float = 3.0) -> T | None:
        """The entry, read-your-writes: if absent, first read the topic up to its end as of now, so a
        definition produced a moment ago (a PUT that answered 202, then a schedule naming it) is there.
        At most `wait_s` more for an entry that does not exist."""
        found = self._items.get(key)
        if found is not None:
            return found
        await self.read_to_end(wait_s)
        return self._items.get(key)

    async def read_to_end(self, wait_s: float = 3.0) -> bool:
        """Read the topic up to its end as of now (at most `wait_s`); False if that could not be done."""
        consumer = self._consumer
        if consumer is None:
            return False
        deadline = time.monotonic() + wait_s
        with contextlib.suppress(KafkaError, TimeoutError):
            ends = await asyncio.wait_for(self._end_offsets(self._following.partitions(self.topic)), wait_s)
            for tp, end in ends.items():
                while time.monotonic() < deadline:
                    remaining = deadline - time.monotonic()
                    if await asyncio.wait_for(consumer.position(tp), remaining) >= end:
                        break  # records are applied as soon as a fetch returns them: they are in
                    await asyncio.sleep(0.02)
                else:
                    return False
            return True
        return False

    async def _end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The partitions' end offsets, asked on a connection of their own: a broker answers a connection's
        requests one at a time, so on the follower's they waited behind its fetch, held up to its whole
        fetch_max_wait when nothing comes (~500 ms on Kafka: every 404 of a program, calendar or rule
        and every read-your-writes miss took that long)."""
        async with self._ends_lock:
            reader = self._ends
            if reader is None:
                reader = AIOKafkaConsumer(
                    bootstrap_servers=self._bootstrap,
                    enable_auto_commit=False,
                    isolation_level=self._following.isolation,  # (read_committed: the last stable offset)
                )
                self._ends = await started(reader)
        ends: dict[TopicPartition, int] = await reader.end_offsets(partitions)
        return ends

    async def work(self) -> Work:
        """Records of the topic behind its end (liveness.py): a follower that stopped fetching is stalled."""
        consumer = self._consumer
        what = f"{self.what} records behind the end of {self.topic}"
        if consumer is None:
            return Work(0, self.applied, what)
        tps = self._following.partitions(self.topic)
        ends = await consumer.end_offsets(tps) if tps else {}
        behind = sum(max(0, end - (fetched_to(consumer, tp) or 0)) for tp, end in ends.items())
        return Work(behind, self.applied, what)

    async def heal(self) -> bool:
        """Follow the topic again with a new consumer (from its beginning: the map is rebuilt whole; the
        process's other followers are read again too, on the same new consumer)."""
        if not self._started:
            return False
        await self._following.heal()
        return True

    def caught_up(self) -> None:
        """The consumer found nothing more to read (following.Following)."""
        self._caught_up.set()

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        self.applied += 1
        if key is None:
            return
        name = key.decode(errors="replace")
        if value is None:
            self._items.pop(name, None)
            return
        try:
            self._items[name] = self.parse(name, value)
        except ValueError:
            log.error("undecodable %s definition for %s ignored", self.what, name)

    async def start(self, wait_s: float = 5.0) -> None:
        if not self._started:
            self._started = True
            await self._following.add(self)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._caught_up.wait(), wait_s)

    async def stop(self) -> None:
        if self._started:
            self._started = False
            await self._following.remove(self)
        reader, self._ends = self._ends, None
        if reader is not None:
            with contextlib.suppress(Exception):
                await reader.stop()


class ProgramRegistry(TopicMap[ProgramSpec]):
    """Programs by id: from a file, then the programs topic, read from the beginning and followed."""

    what = "program"

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        file: Path | None = None,
        profile: BrokerProfile = "tansu",
        following: Following | None = None,
    ) -> None:
        super().__init__(bootstrap_servers, topic, profile=profile, following=following)
        if file is not None and file.exists():
            for program_id, spec in json.loads(file.read_text()).items():
                self._items[program_id] = ProgramSpec.model_validate(spec)

    def parse(self, key: str, value: bytes) -> ProgramSpec:
        return ProgramSpec.model_validate_json(value)


def program_env(spec: ProgramSpec, secrets: dict[str, str]) -> dict[str, str]:
    """The program's environment: its values, and `secrets` (env name -> the resolved secret) in place of
    its references."""
    return {k: v if isinstance(v, str) else secrets[k] for k, v in spec.env.items()}


def child_env(spec: ProgramSpec, secrets: dict[str, str]) -> dict[str, str]:
    """What a program's process (a run, a sensor's check) starts with: this process's environment minus
    every `SCHEDULER_SECRET_*` (a program sees only the secrets it names), plus the program's own."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(SECRET_ENV_PREFIX)}
    return {**inherited, **program_env(spec, secrets)}
