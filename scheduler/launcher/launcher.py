"""The launcher: consumes launch requests and runs each program out of the event loop, as a subprocess
(a PySpark pipeline through scheduler.launcher.spark_runner, or a command), reporting every run transition as a
program-status event. It holds no thread per run: each run is an asyncio task waiting on its process.

- A job id it already started is dropped (a replayed launch request).
- Its state (job ids started, runs in flight and their process groups) is journaled to a local file: a
  launcher that restarts after a crash kills what is left of the runs it had in flight and reports them
  FAILED ("launcher died mid-run"), so no run stays RUNNING forever.
- A stop request (control topic, from `POST .../runs/{id}/stop`) moves a run to STOPPING, then KILLED.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer

from scheduler.domain.events import program_key
from scheduler.domain.runs import RunStatus
from scheduler.kafka.config import Settings, isolation
from scheduler.kafka.producer import BatchedProducer, TopicCreator
from scheduler.wire.codec import DecodeError, decode, encode, encode_json
from scheduler.worker.programs import ProgramRegistry, ProgramSpec, program_env

log = logging.getLogger(__name__)

RUNNING_MARKER = "SCHEDULER-RUN-RUNNING"
MAX_STARTED_REMEMBERED = 10_000
ERROR_TAIL_CHARS = 2_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class _Run:
    job_id: str
    program: str
    process: asyncio.subprocess.Process | None = None
    stopping: bool = False
    output: list[str] = field(default_factory=list)


class LauncherJournal:
    """Append-only record of started job ids and in-flight runs (with their process group)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.started: list[str] = []
        self.in_flight: dict[str, dict[str, Any]] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    self._fold(json.loads(line))
        self._rewrite()
        self._file = open(path, "a")  # noqa: SIM115

    def _fold(self, op: dict[str, Any]) -> None:
        job = op["jobId"]
        if op["op"] == "start":
            self.started.append(job)
            self.in_flight[job] = {"program": op["program"], "pgid": None}
        elif op["op"] == "pid" and job in self.in_flight:
            self.in_flight[job]["pgid"] = op["pgid"]
        elif op["op"] == "end":
            self.in_flight.pop(job, None)

    def _rewrite(self) -> None:
        kept = self.started[-MAX_STARTED_REMEMBERED:]
        # Runs still in flight are kept however old: a restart must still find and fail them.
        self.started = [j for j in self.started[:-MAX_STARTED_REMEMBERED] if j in self.in_flight] + kept
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            for job in self.started:
                flight = self.in_flight.get(job)
                f.write(
                    json.dumps({"op": "start", "jobId": job, "program": flight["program"] if flight else ""})
                    + "\n"
                )
                if flight is None:
                    f.write(json.dumps({"op": "end", "jobId": job}) + "\n")
                elif flight["pgid"] is not None:
                    f.write(json.dumps({"op": "pid", "jobId": job, "pgid": flight["pgid"]}) + "\n")
        os.replace(tmp, self.path)

    def record(self, op: dict[str, Any]) -> None:
        self._fold(op)
        self._file.write(json.dumps(op) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class Launcher:
    def __init__(self, settings: Settings, registry: ProgramRegistry | None = None) -> None:
        self.settings = settings
        self.registry = registry or ProgramRegistry(
            settings.bootstrap_servers, settings.programs_topic, settings.programs_file
        )
        self.producer = BatchedProducer(settings.bootstrap_servers)
        self.journal = LauncherJournal(settings.data_dir / "launcher" / f"{settings.app_id}.jsonl")
        self.runs: dict[str, _Run] = {}
        self.stats = {"launched": 0, "duplicates": 0, "completed": 0, "failed": 0, "killed": 0}

    # --- status events ----------------------------------------------------------------------------

    async def publish(self, program: str, run_id: str, status: RunStatus, error: str = "") -> None:
        payload = {"programId": program, "runId": run_id, "status": status.value}
        if error:
            payload["error"] = error[-ERROR_TAIL_CHARS:]
        value = encode(
            "Notification", {"timestamp": now_ms(), "eventType": "program-status", "payload": payload}
        )
        key = program_key_bytes(program)
        fut = await self.producer.send(self.settings.events_topic, key, value)
        await fut

    # --- lifecycle --------------------------------------------------------------------------------

    async def recover(self) -> None:
        """Runs in flight when the previous launcher died: kill their leftovers, report them FAILED."""
        for job_id, flight in list(self.journal.in_flight.items()):
            pgid = flight.get("pgid")
            if pgid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
            await self.publish(flight["program"], job_id, RunStatus.FAILED, "launcher died mid-run")
            self.journal.record({"op": "end", "jobId": job_id})
            self.stats["failed"] += 1

    async def run(self) -> None:
        topics = self.settings.own_topics()
        await TopicCreator(
            self.settings.bootstrap_servers, self.settings.partitions, self.settings.replication_factor
        ).ensure(*topics, configs=topics)
        await self.registry.start()
        await self.recover()
        control = asyncio.create_task(self._follow_control())
        consumer = AIOKafkaConsumer(
            self.settings.launch_topic,
            bootstrap_servers=self.settings.bootstrap_servers,
            group_id=f"{self.settings.app_id}-launcher",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=50,
            **isolation(self.settings.broker_profile),
            session_timeout_ms=10_000,
            heartbeat_interval_ms=1_000,
        )
        await consumer.start()
        try:
            async for msg in consumer:
                await self.handle(msg.value)
                await consumer.commit()
        finally:
            control.cancel()
            await consumer.stop()

    async def stop(self) -> None:
        for run in list(self.runs.values()):
            await self.stop_run(run.job_id)
        await self.producer.stop()
        await self.registry.stop()
        self.journal.close()

    # --- launch requests --------------------------------------------------------------------------

    async def handle(self, value: bytes | None) -> None:
        try:
            request = decode("LaunchRequest", value)
        except DecodeError as exc:
            log.error("undecodable launch request dropped: %s", exc)
            return
        job_id = request["jobId"]
        p = request["program"]
        program = f"{p['namespace']}/{p['application']}/{p['type']}/{p['name']}"
        if job_id in self.journal.started:
            self.stats["duplicates"] += 1
            return
        spec = self.registry.get(program)
        if spec is None and self.registry is not None:
            await self.registry.start(wait_s=2)
            spec = self.registry.get(program)
        if spec is not None and spec.kind == "external":
            return  # another system runs it
        self.journal.record({"op": "start", "jobId": job_id, "program": program})
        self.stats["launched"] += 1
        if spec is None:
            await self.publish(program, job_id, RunStatus.FAILED, f"unknown program {program}")
            self.journal.record({"op": "end", "jobId": job_id})
            return
        run = self.runs[job_id] = _Run(job_id, program)
        asyncio.create_task(self._execute(run, spec, request))

    def _argv(self, spec: ProgramSpec, request: dict[str, Any]) -> list[str]:
        if spec.kind == "command":
            return list(spec.argv)
        return [sys.executable, "-m", "scheduler.launcher.spark_runner", spec.target]

    async def _execute(self, run: _Run, spec: ProgramSpec, request: dict[str, Any]) -> None:
        env = {
            **os.environ,
            **program_env(spec, {}),
            "SCHEDULER_RUN_ID": run.job_id,
            "SCHEDULER_JOB_ID": run.job_id,
            "SCHEDULER_PROGRAM": run.program,
            "SCHEDULER_SCHEDULE": f"{request['schedule']['tenant']}/{request['schedule']['name']}",
            "SCHEDULER_ARGS": json.dumps(request["arguments"]),
            "SCHEDULER_SPARK_MASTER": spec.master or self.settings.spark_master,
            "KAFKA_BOOTSTRAP_SERVERS": self.settings.bootstrap_servers,
            "SCHEDULER_EVENTS_TOPIC": self.settings.events_topic,
            "SCHEDULER_DATASETS_DIR": str(self.settings.datasets_dir),
            "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        }
        try:
            await self.publish(run.program, run.job_id, RunStatus.STARTING)
            run.process = await asyncio.create_subprocess_exec(
                *self._argv(spec, request),
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
            self.journal.record({"op": "pid", "jobId": run.job_id, "pgid": run.process.pid})
            running = spec.kind != "pyspark"
            if running:
                await self.publish(run.program, run.job_id, RunStatus.RUNNING)
            assert run.process.stdout is not None
            async for raw in run.process.stdout:
                line = raw.decode(errors="replace").rstrip()
                if not running and line == RUNNING_MARKER:
                    running = True
                    await self.publish(run.program, run.job_id, RunStatus.RUNNING)
                    continue
                run.output.append(line)
                del run.output[:-50]
            code = await run.process.wait()
            if run.stopping:
                await self.publish(run.program, run.job_id, RunStatus.KILLED, "stopped on request")
                self.stats["killed"] += 1
            elif code == 0:
                if not running:
                    await self.publish(run.program, run.job_id, RunStatus.RUNNING)
                await self.publish(run.program, run.job_id, RunStatus.COMPLETED)
                self.stats["completed"] += 1
            else:
                tail = "\n".join(run.output[-20:])
                await self.publish(run.program, run.job_id, RunStatus.FAILED, f"exit code {code}\n{tail}")
                self.stats["failed"] += 1
        except Exception as exc:
            log.exception("run %s failed to execute", run.job_id)
            with contextlib.suppress(Exception):
                await self.publish(run.program, run.job_id, RunStatus.FAILED, f"{type(exc).__name__}: {exc}")
            self.stats["failed"] += 1
        finally:
            self.journal.record({"op": "end", "jobId": run.job_id})
            self.runs.pop(run.job_id, None)

    # --- stop requests ----------------------------------------------------------------------------

    async def stop_run(self, run_id: str) -> bool:
        run = self.runs.get(run_id)
        if run is None or run.process is None or run.stopping:
            return False
        run.stopping = True
        await self.publish(run.program, run_id, RunStatus.STOPPING)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(run.process.wait(), 10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.process.pid, signal.SIGKILL)
        return True

    async def _follow_control(self) -> None:
        consumer = AIOKafkaConsumer(
            self.settings.launcher_control_topic,
            bootstrap_servers=self.settings.bootstrap_servers,
            auto_offset_reset="latest",
            enable_auto_commit=False,
            fetch_max_wait_ms=50,
            **isolation(self.settings.broker_profile),
        )
        await consumer.start()
        try:
            async for msg in consumer:
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    command = json.loads(msg.value or b"")
                    if command.get("type") == "stop":
                        await self.stop_run(command["runId"])
        finally:
            await consumer.stop()


def program_key_bytes(program: str) -> bytes:
    from scheduler.domain.model import ProgramId

    return program_key(ProgramId.parse(program)).encode()


def stop_request(run_id: str, program: str) -> bytes:
    return encode_json({"type": "stop", "runId": run_id, "program": program})
