"""The program registry: what a program is and how to run it.

A program (namespace/application/type/name) is registered over HTTP (`PUT /programs/...`), which produces
its definition to the programs topic (keyed by program id; the latest definition wins), or declared in a
JSON file that workers and launchers load at start (SCHEDULER_PROGRAMS_FILE). Every worker and launcher
reads the whole topic into memory: programs are few, and every partition needs them (schedule validation,
the launcher). A schedule that names a program nobody registered is refused.

Kinds: `pyspark` (a `module:function(spark, args)` or a script, submitted to Spark), `command` (an argv),
`external` (run by another system that consumes the launch requests; the launcher leaves it alone).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from pathlib import Path
from typing import Any, Literal

from aiokafka import AIOKafkaConsumer
from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger(__name__)


class ProgramSpec(BaseModel):
    """How to run a program (the HTTP body of PUT /programs/{namespace}/{application}/{type}/{name})."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["pyspark", "command", "external"]
    target: str = Field("", max_length=1024, description="pyspark: 'package.module:function' or a .py path")
    argv: list[str] = Field(default_factory=list, max_length=256, description="command: the argv to run")
    master: str | None = Field(None, max_length=512, description="pyspark: Spark master (default: config)")
    env: dict[str, str] = Field(default_factory=dict, max_length=128)
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
    description: str = Field("", max_length=1024)

    def problems(self) -> list[tuple[str, str]]:
        if self.kind == "pyspark" and not self.target:
            return [("target", "a pyspark program needs a target: 'module:function' or a script path")]
        if self.kind == "command" and not self.argv:
            return [("argv", "a command program needs an argv")]
        return []


class ProgramRegistry:
    """Programs by id: from a file, then the programs topic, read from the beginning and followed."""

    def __init__(self, bootstrap_servers: str, topic: str, file: Path | None = None) -> None:
        self._bootstrap = bootstrap_servers
        self._topic = topic
        self._programs: dict[str, ProgramSpec] = {}
        self._task: asyncio.Task[None] | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._caught_up = asyncio.Event()
        if file is not None and file.exists():
            for program_id, spec in json.loads(file.read_text()).items():
                self._programs[program_id] = ProgramSpec.model_validate(spec)

    def get(self, program_id: str) -> ProgramSpec | None:
        return self._programs.get(program_id)

    def all(self) -> dict[str, ProgramSpec]:
        return dict(self._programs)

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        program_id = key.decode(errors="replace")
        if value is None:
            self._programs.pop(program_id, None)
            return
        try:
            self._programs[program_id] = ProgramSpec.model_validate_json(value)
        except ValueError:
            log.error("undecodable program definition for %s ignored", program_id)

    async def start(self, wait_s: float = 5.0) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._follow())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._caught_up.wait(), wait_s)

    async def _follow(self) -> None:
        while True:
            try:
                consumer = self._consumer = AIOKafkaConsumer(
                    self._topic,
                    bootstrap_servers=self._bootstrap,
                    auto_offset_reset="earliest",
                    enable_auto_commit=False,
                    fetch_max_wait_ms=100,
                    metadata_max_age_ms=2000,
                )
                await consumer.start()
                try:
                    while True:
                        batch = await consumer.getmany(timeout_ms=200)
                        for records in batch.values():
                            for msg in records:
                                self.apply(msg.key, msg.value)
                        if not batch:
                            self._caught_up.set()
                finally:
                    await consumer.stop()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("program registry consumer failed; retrying")
                await asyncio.sleep(1)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None


def program_env(spec: ProgramSpec, extra: dict[str, Any]) -> dict[str, str]:
    return {**spec.env, **{k: str(v) for k, v in extra.items()}}
