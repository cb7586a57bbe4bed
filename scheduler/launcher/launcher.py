"""The launcher: takes launch requests and runs each program out of the event loop, as a subprocess (a
PySpark pipeline through scheduler.launcher.spark_runner, or a command), reporting every run state as a
program-status event. It holds no thread per run: each run is an asyncio task waiting on its process.

Launchers share the launch topic in one consumer group. The run journal is in Kafka, not on a disk: the
job queue of the run's program (scheduler.worker.job_queue) judges every report of a run, so
- a launcher *claims* a launch (PREPARING, naming itself and its lease) and starts the program only once
  the program-status topic shows its claim accepted: a second claim of the same run (a launch read twice
  after a crash or a rebalance, by any launcher) is refused, and that launcher drops it;
- it renews the runs it holds (their status again, every third of the lease); a run whose holder stops
  renewing (dead, cut off, frozen) is FAILED by the job queue, and a holder that sees one of its runs
  ended by somebody else (lease lost, stopped before it started) kills what is left of it;
- runs die with their launcher (a parent-death signal), so nothing runs on that nobody watches.
Stop, suspend and resume requests come from the control topic, read from its beginning (a day is kept)
before any launch: a stop sent while no launcher was up still applies. Suspend and resume pause and wake
the run's process group (SIGSTOP, SIGCONT): on Spark `local[*]` that is the whole run; on a cluster, the
driver (no new tasks are scheduled; running ones finish). A stopping launcher takes no more launches and lets its
runs finish (SCHEDULER_LAUNCHER_DRAIN_S), then leaves what is left to the leases.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from scheduler.domain.events import program_key
from scheduler.domain.runs import RunStatus
from scheduler.kafka.config import Settings
from scheduler.kafka.consumers import consumer_options, started
from scheduler.kafka.producer import BatchedProducer, TopicCreator
from scheduler.launcher.control import RUN_ACTION_NEEDS
from scheduler.launcher.launches import LaunchRequests
from scheduler.launcher.run_logs import RunLogs, log_key
from scheduler.launcher.secrets import SecretMissing, Secrets, masked
from scheduler.launcher.spark_runner import STATE_MARKER
from scheduler.wire.codec import DecodeError, decode, decode_notification, encode
from scheduler.worker.programs import ProgramRegistry, ProgramSpec, child_env

log = logging.getLogger(__name__)

#: the states a run's own output may report (a PySpark run's runner; a command that says `reportsRunning`)
REPORTED_STATES = frozenset({RunStatus.REQUESTING_RESOURCES, RunStatus.INITIALIZING, RunStatus.RUNNING})
ERROR_TAIL_CHARS = 2_000
MAX_STOPS_REMEMBERED = 10_000
STOP_GRACE_S = 10.0  # SIGTERM, then SIGKILL after this
SWEEP_EVERY_S = 10.0  # the run logs' total bound is checked at most this often (as runs end)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class _Run:
    run_id: str
    program: str
    request: dict[str, Any]
    spec: ProgramSpec | None
    status: RunStatus = RunStatus.PREPARING
    claimed_at: int = 0
    process: asyncio.subprocess.Process | None = None
    stopping: bool = False  # a user's stop: it ends STOPPED
    stopped_for: str = ""  # why, when a schedule's overlap policy stopped it (else "stopped on request")
    killed_for: str = (
        ""  # why the scheduler killed it (past its time limit, an overlap policy): it ends KILLED
    )
    abandoned: bool = False  # ended by somebody else (lease lost, stopped before it started): no report
    output: list[str] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)  # the values its env's secretRefs resolved to: masked


def with_parent_death_signal(argv: list[str]) -> list[str]:
    """`argv` run so that it is killed if its launcher dies (util-linux's setpriv, where there is one)."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else argv


class Launcher:
    def __init__(
        self, settings: Settings, registry: ProgramRegistry | None = None, logs_url: str = ""
    ) -> None:
        self.settings = settings
        # runs' output is kept here, read at `logs_url` (reported with every run's status)
        self.logs = RunLogs.from_settings(settings)
        self.logs_url = logs_url
        self._swept_at = 0.0
        self.name = settings.launcher_name
        self.registry = registry or ProgramRegistry(
            settings.bootstrap_servers,
            settings.programs_topic,
            settings.programs_file,
            settings.broker_profile,
        )
        self.producer = BatchedProducer(settings.bootstrap_servers)
        self.secrets = Secrets.from_settings(settings)
        self.claims: dict[str, _Run] = {}  # claimed, not yet seen accepted
        self.runs: dict[str, _Run] = {}  # held: claims accepted
        self.stops: dict[str, int] = {}  # run id -> when a stop of it was asked (the control topic)
        self.stats = {
            "launched": 0,
            "duplicates": 0,
            "completed": 0,
            "failed": 0,
            "stopped": 0,
            "killed": 0,
            "abandoned": 0,
        }
        self._tasks: list[asyncio.Task[None]] = []
        self.launches = LaunchRequests(settings, self.handle)  # (watched: see launches.py)
        self._background: set[asyncio.Task[Any]] = set()  # runs, stops, suspends, time limits
        self._closing = False
        self._control_read = asyncio.Event()
        self._transitions_followed = asyncio.Event()
        if shutil.which("setpriv") is None:
            log.warning("no setpriv: runs will outlive a launcher that dies (their leases still end them)")

    # --- status reports ---------------------------------------------------------------------------

    async def publish(self, run: _Run, status: RunStatus, error: str = "") -> None:
        """Report `run` in `status`, as its holder (a repeat of its status renews its lease)."""
        run.status = status  # first: a renewal sent meanwhile repeats this status, not the one before
        payload = {
            "programId": run.program,
            "runId": run.run_id,
            "status": status.value,
            "launcher": self.name,
            "leaseMs": str(self.settings.run_lease_ms),
            "jobId": run.request["jobId"],
            "attempt": str(run.request.get("attempt") or 1),
        }
        if self.logs_url:
            payload["logsUrl"] = self.logs_url
        if error:
            payload["error"] = error[-ERROR_TAIL_CHARS:]
        value = encode(
            "Notification", {"timestamp": now_ms(), "eventType": "program-status", "payload": payload}
        )
        fut = await self.producer.send(self.settings.events_topic, program_key_bytes(run.program), value)
        await fut

    # --- lifecycle --------------------------------------------------------------------------------

    async def run(self) -> None:
        topics = self.settings.own_topics()
        await TopicCreator(
            self.settings.bootstrap_servers, self.settings.partitions, self.settings.replication_factor
        ).ensure(*topics, configs=topics)
        await self.registry.start()
        self._tasks = [
            asyncio.create_task(self._follow_control()),
            asyncio.create_task(self._follow_transitions()),
            asyncio.create_task(self._renew()),
        ]
        # no launch before every stop asked so far is known and claims can be seen accepted
        await asyncio.gather(self._control_read.wait(), self._transitions_followed.wait())
        if self._closing:
            return
        log.info("launcher %s taking launches", self.name)
        await self.launches.run()

    async def stop(self) -> None:
        """Take no more launches, let the runs held finish, then go: what is left dies with this process
        and ends FAILED when its lease runs out. Never stops a run by itself."""
        self._closing = True
        await self.launches.stop()
        deadline = time.monotonic() + self.settings.launcher_drain_s
        if self.runs:
            log.info(
                "launcher %s stopping: waiting up to %.0f s for %d runs (SCHEDULER_LAUNCHER_DRAIN_S)",
                self.name,
                self.settings.launcher_drain_s,
                len(self.runs),
            )
        while self.runs and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        if self.runs:
            log.warning("launcher %s leaves %d runs to their leases", self.name, len(self.runs))
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.producer.stop()
        await self.registry.stop()

    # --- launch requests: claim, then run once the claim is accepted ------------------------------

    async def handle(self, value: bytes | None) -> None:
        try:
            request = decode("LaunchRequest", value)
        except DecodeError as exc:
            log.error("undecodable launch request dropped: %s", exc)
            return
        run_id = request.get("runId") or request["jobId"]
        p = request["program"]
        program = f"{p['namespace']}/{p['application']}/{p['type']}/{p['name']}"
        claim = self.claims.get(run_id)
        if run_id in self.runs or (claim is not None and now_ms() - claim.claimed_at < self._claim_ttl_ms):
            self.stats["duplicates"] += 1
            return
        if run_id in self.stops:
            log.info("run %s was stopped before it started: not run", run_id)
            return
        spec = self.registry.get(program)
        if spec is None:
            await self.registry.start(wait_s=2)
            spec = self.registry.get(program)
        if spec is not None and spec.kind == "external":
            return  # another system runs it
        if spec is not None and spec.kind == "sensor":
            log.error("launch of %s dropped: a sensor is evaluated by the workers, not launched", program)
            return
        run = self.claims[run_id] = _Run(run_id, program, request, spec, claimed_at=now_ms())
        await self.publish(run, RunStatus.PREPARING)

    @property
    def _claim_ttl_ms(self) -> int:
        """How long a claim may wait to be seen accepted and still start its run: half the lease. Later, the
        lease may have run out meanwhile (this launcher was frozen or cut off) and the run been launched
        again for another launcher; the job queue then relaunches it after the lease (it was never
        started), so dropping a late claim loses nothing."""
        return self.settings.run_lease_ms // 2

    def _accepted(self, run_id: str, status: str, launcher: str, at: int) -> None:
        """An accepted transition of a run (the program-status topic): a claim won or lost, a run ended
        by somebody else."""
        claim = self.claims.get(run_id)
        if claim is not None:
            if status == RunStatus.PENDING and at < claim.claimed_at:
                return  # (its launch again, seen after this launcher claimed the new launch request)
            del self.claims[run_id]
            if status == RunStatus.PREPARING and launcher == self.name:
                if now_ms() - claim.claimed_at > self._claim_ttl_ms:
                    log.warning("claim of run %s accepted too late: left to its lease", run_id)
                    return
                self.runs[run_id] = claim
                self.stats["launched"] += 1
                self._spawn(self._execute(claim))
            else:  # another launcher's claim came first, the run ended, or it is launched again
                self.stats["duplicates"] += 1
            return
        run = self.runs.get(run_id)
        if run is not None and RunStatus(status).terminal and launcher != self.name:
            log.warning("run %s ended %s by somebody else: killing what is left of it", run_id, status)
            run.abandoned = True
            self.stats["abandoned"] += 1
            self._signal(run, signal.SIGKILL)

    def _argv(self, spec: ProgramSpec) -> list[str]:
        if spec.kind == "command":
            return list(spec.argv)
        if spec.kind == "python":
            return [sys.executable, "-m", "scheduler.launcher.python_runner", spec.target]
        master = spec.master or self.settings.spark_master
        if master.startswith("local"):
            return [sys.executable, "-m", "scheduler.launcher.spark_runner", spec.target]
        return spark_submit(master, spec.target)

    def _env(self, run: _Run, spec: ProgramSpec, secrets: dict[str, str]) -> dict[str, str]:
        request = run.request
        return {
            **child_env(spec, secrets),
            "SCHEDULER_RUN_ID": run.run_id,
            "SCHEDULER_JOB_ID": request["jobId"],
            "SCHEDULER_ATTEMPT": str(request.get("attempt") or 1),
            "SCHEDULER_PROGRAM": run.program,
            "SCHEDULER_SCHEDULE": f"{request['schedule']['tenant']}/{request['schedule']['name']}",
            "SCHEDULER_ARGS": json.dumps(request["arguments"]),
            "SCHEDULER_SPARK_MASTER": spec.master or self.settings.spark_master,
            "KAFKA_BOOTSTRAP_SERVERS": self.settings.bootstrap_servers,
            "SCHEDULER_EVENTS_TOPIC": self.settings.events_topic,
            "SCHEDULER_DATASETS_DIR": str(self.settings.datasets_dir),
            "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
            # (spark-submit finds pyspark's jars, and its driver and executors run, with this Python)
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
            "PYSPARK_DRIVER_PYTHON": os.environ.get("PYSPARK_DRIVER_PYTHON", sys.executable),
        }

    async def _execute(self, run: _Run) -> None:
        try:
            await self._run_to_end(run)
        except Exception as exc:
            log.exception("run %s failed to execute", run.run_id)
            with contextlib.suppress(Exception):
                await self.publish(run, RunStatus.FAILED, f"{type(exc).__name__}: {exc}")
            self.stats["failed"] += 1
        finally:
            self.runs.pop(run.run_id, None)
            if run.process is not None:
                with contextlib.suppress(OSError):
                    self.logs.end(log_key(run.program, run.run_id))
            if time.monotonic() - self._swept_at > SWEEP_EVERY_S:
                self._swept_at = time.monotonic()
                with contextlib.suppress(OSError):
                    await asyncio.to_thread(self.logs.sweep)

    async def _run_to_end(self, run: _Run) -> None:
        spec = run.spec or self.registry.get(run.program)
        if spec is None:
            await self.publish(run, RunStatus.FAILED, f"unknown program {run.program}")
            self.stats["failed"] += 1
            return
        if run.stopping or run.run_id in self.stops:
            if run.killed_for:
                await self.publish(run, RunStatus.KILLED, f"{run.killed_for} (before it started)")
                self.stats["killed"] += 1
            else:
                await self.publish(run, RunStatus.STOPPED, "stopped before it started")
                self.stats["stopped"] += 1
            return
        try:
            secrets = self.secrets.resolve(spec)
        except SecretMissing as exc:
            await self.publish(run, RunStatus.FAILED, str(exc))
            self.stats["failed"] += 1
            return
        run.secrets = list(secrets.values())
        with contextlib.suppress(OSError):  # (a full disk loses the log, never the run)
            self.logs.begin(log_key(run.program, run.run_id))
        await self.publish(run, RunStatus.STARTING)
        run.process = await asyncio.create_subprocess_exec(
            *with_parent_death_signal(self._argv(spec)),
            env=self._env(run, spec, secrets),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        if spec.kind in ("command", "python") and not spec.reportsRunning:
            await self.publish(run, RunStatus.RUNNING)
        limit = None
        limit_ms = run.request.get("timeLimitMs") or spec.timeLimitMs  # (the schedule's, else the program's)
        if limit_ms is not None:
            why = f"time limit of {limit_ms / 1000:g} s exceeded"
            limit = asyncio.get_running_loop().call_later(
                limit_ms / 1000, lambda: self._spawn(self._kill(run, why))
            )
        try:
            code = await self._follow_output(run)
        finally:
            if limit is not None:
                limit.cancel()
        if run.abandoned:
            return
        if run.killed_for:
            await self.publish(run, RunStatus.KILLED, run.killed_for)
            self.stats["killed"] += 1
        elif run.stopping:
            await self.publish(run, RunStatus.STOPPED, run.stopped_for or "stopped on request")
            self.stats["stopped"] += 1
        elif code == 0:
            if run.status is not RunStatus.RUNNING:
                await self.publish(run, RunStatus.RUNNING)
            await self.publish(run, RunStatus.COMPLETED)
            self.stats["completed"] += 1
        elif code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
            await self.publish(run, RunStatus.KILLED, f"killed by {name} from outside the scheduler")
            self.stats["killed"] += 1
        else:
            tail = "\n".join(run.output[-20:])
            await self.publish(run, RunStatus.FAILED, f"exit code {code}\n{tail}")
            self.stats["failed"] += 1

    async def _follow_output(self, run: _Run) -> int:
        """The run's output until it ends (its state lines reported, the rest kept in its log and, the last
        lines, for an error); its exit code."""
        assert run.process is not None and run.process.stdout is not None
        key = log_key(run.program, run.run_id)
        async for raw in run.process.stdout:
            line = raw.decode(errors="replace").rstrip()
            state = line.removeprefix(STATE_MARKER)
            if state != line and state in REPORTED_STATES:
                if not run.stopping and not run.abandoned:
                    await self.publish(run, RunStatus(state))
                continue
            line = masked(line, run.secrets) if run.secrets else line
            run.output.append(line)
            del run.output[:-50]
            try:
                self.logs.append(key, line)
            except OSError as exc:  # (a full disk loses the log, never the run)
                log.warning("run %s: its output is not kept: %s", run.run_id, exc)
        return await run.process.wait()

    async def _kill(self, run: _Run, why: str, at_once: bool = False) -> None:
        """The scheduler ends a run (past its time limit; `at_once`: an overlap policy's terminate, no
        grace): STOPPING, its process group ended as for a stop (or SIGKILLed), then KILLED with `why`."""
        if run.stopping or run.abandoned or run.process is None or run.process.returncode is not None:
            return
        run.killed_for, run.stopping = why, True
        await self.publish(run, RunStatus.STOPPING)
        if at_once:
            self._signal(run, signal.SIGKILL)
            self._signal(run, signal.SIGCONT)
        else:
            await self._end_process(run)

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        """`work` as a task of its own, held until it ends (the loop keeps only weak references)."""
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _signal(self, run: _Run, sig: signal.Signals) -> None:
        if run.process is not None and run.process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(run.process.pid, sig)

    # --- stop requests ----------------------------------------------------------------------------

    async def stop_run(self, run_id: str, reason: str = "", kill: bool = False) -> bool:
        """A user's stop: STOPPING, SIGTERM to the run's process group (SIGKILL after a grace), STOPPED
        (`reason`: why, an overlap policy's). `kill` (an overlap policy's terminate): SIGKILL, KILLED."""
        claim = self.claims.get(run_id)
        if claim is not None:
            claim.stopping = True  # it ends STOPPED (KILLED) if the claim is accepted
            claim.killed_for = reason if kill else ""
            return True
        run = self.runs.get(run_id)
        if kill and run is not None and run.process is not None:
            await self._kill(run, reason, at_once=True)
            return True
        if run is None or run.stopping or run.abandoned:
            return False
        run.stopping, run.stopped_for = True, reason
        if kill:
            run.killed_for = reason
        await self.publish(run, RunStatus.STOPPING)
        if run.process is None:
            return True  # not spawned yet: _run_to_end sees the stop
        await self._end_process(run)
        return True

    async def _end_process(self, run: _Run) -> None:
        """SIGTERM to the run's process group (a suspended one woken to hear it), SIGKILL after a grace."""
        assert run.process is not None
        self._signal(run, signal.SIGTERM)
        self._signal(run, signal.SIGCONT)
        try:
            await asyncio.wait_for(run.process.wait(), STOP_GRACE_S)
        except TimeoutError:
            self._signal(run, signal.SIGKILL)

    async def pause_run(self, run_id: str, suspend: bool) -> bool:
        """A user's suspend (SUSPENDING, SIGSTOP to the run's process group, SUSPENDED) or resume
        (RESUMING, SIGCONT, RUNNING). A request that does not fit the run's state is ignored."""
        run = self.runs.get(run_id)
        needed = RUN_ACTION_NEEDS["suspend" if suspend else "resume"]
        if run is None or run.process is None or run.stopping or run.abandoned or run.status is not needed:
            return False
        if suspend:
            await self.publish(run, RunStatus.SUSPENDING)
            self._signal(run, signal.SIGSTOP)
            await self.publish(run, RunStatus.SUSPENDED)
        else:
            await self.publish(run, RunStatus.RESUMING)
            self._signal(run, signal.SIGCONT)
            await self.publish(run, RunStatus.RUNNING)
        return True

    async def _follow_control(self) -> None:
        """Stop requests, from the control topic's beginning: a stop asked while this launcher was away
        still applies to a run it takes later."""
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.bootstrap_servers,
            enable_auto_commit=False,
            **consumer_options(self.settings.broker_profile),
        )
        await started(consumer)
        try:
            ends = await self._assign_all(consumer, self.settings.launcher_control_topic, from_end=False)
            while True:
                batch = await consumer.getmany(timeout_ms=200)
                for records in batch.values():
                    for msg in records:
                        await self._control(msg.value)
                if not self._control_read.is_set():
                    positions = [await consumer.position(tp) for tp in ends]
                    if all(at >= end for at, end in zip(positions, ends.values(), strict=True)):
                        self._control_read.set()
        finally:
            await consumer.stop()

    async def _control(self, value: bytes | None) -> None:
        try:
            command = json.loads(value or b"")
            kind, run_id = command["type"], command["runId"]
        except (ValueError, KeyError, TypeError):
            return
        if not isinstance(run_id, str):
            return
        if kind in ("stop", "terminate"):
            self.stops[run_id] = now_ms()
            while len(self.stops) > MAX_STOPS_REMEMBERED:
                del self.stops[next(iter(self.stops))]
            if run_id in self.runs or run_id in self.claims:
                reason = command.get("reason")
                reason = reason if isinstance(reason, str) else ""
                self._spawn(self.stop_run(run_id, reason, kill=kind == "terminate"))
        elif kind in RUN_ACTION_NEEDS and run_id in self.runs:  # (others' runs, or past ones: not ours)
            self._spawn(self.pause_run(run_id, suspend=kind == "suspend"))

    async def _follow_transitions(self) -> None:
        """The accepted transitions (program-status topic) from now on: claims won or lost, runs ended."""
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.bootstrap_servers,
            enable_auto_commit=False,
            **consumer_options(self.settings.broker_profile),
        )
        await started(consumer)
        try:
            await self._assign_all(consumer, self.settings.program_status_topic, from_end=True)
            self._transitions_followed.set()
            while True:
                batch = await consumer.getmany(timeout_ms=200)
                for records in batch.values():
                    for msg in records:
                        with contextlib.suppress(DecodeError, KeyError):
                            n = decode_notification(msg.value)
                            p = n.payload
                            self._accepted(p["runId"], p["status"], p.get("launcher", ""), n.timestamp)
                self._forget_stale_claims()
        finally:
            await consumer.stop()

    def _forget_stale_claims(self) -> None:
        """A claim not seen accepted in time (refused: the run ended, or another launcher holds it) is
        dropped; were it accepted after all, nobody renews it and the job queue launches it again."""
        too_old = now_ms() - self._claim_ttl_ms
        for run_id in [r for r, c in self.claims.items() if c.claimed_at < too_old]:
            del self.claims[run_id]

    async def _assign_all(self, consumer: AIOKafkaConsumer, topic: str, from_end: bool) -> dict[Any, int]:
        """Read every partition of one of our topics (from its end, or its beginning); its end offsets now."""
        tps = [TopicPartition(topic, p) for p in range(self.settings.partitions)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        if from_end:
            await consumer.seek_to_end(*tps)
        else:
            await consumer.seek_to_beginning(*tps)
        for tp in tps:
            await consumer.position(tp)  # resolved now, not at the first fetch
        return ends

    async def _renew(self) -> None:
        """Renew the lease of every run held: its status again, every third of the lease."""
        while True:
            await asyncio.sleep(self.settings.run_lease_ms / 3000)
            for run in list(self.runs.values()):
                if not run.abandoned and not run.status.terminal:
                    with contextlib.suppress(Exception):
                        await self.publish(run, run.status)


def spark_submit(master: str, target: str) -> list[str]:
    """spark-submit of the runner to a cluster's master (client mode: the driver runs here, under the
    launcher; executors on the cluster's workers, with this Python)."""
    from scheduler.launcher import spark_runner

    submit = shutil.which("spark-submit", path=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    if submit is None:
        raise RuntimeError("spark-submit not found: pip install 'kafka-job-scheduler[spark]'")
    return [
        submit,
        "--master",
        master,
        "--conf",
        f"spark.pyspark.python={sys.executable}",
        "--conf",
        f"spark.pyspark.driver.python={sys.executable}",
        spark_runner.__file__,
        target,
    ]


def program_key_bytes(program: str) -> bytes:
    from scheduler.domain.model import ProgramId

    return program_key(ProgramId.parse(program)).encode()
