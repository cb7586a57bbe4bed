"""Polling sensors: the worker that owns a sensor runs its check every interval, out of the event loop and
within a time limit, with the cursor it returned last, and fires the schedules watching it when it says so.

A sensor is a program of kind `sensor` (registered like any program: PUT /programs/...). It belongs to the
worker that owns its program id's partition — the partitions move with the group, and so do the sensors.
Each evaluation runs as a process of its own (`package.module:function` through
scheduler.launcher.sensor_runner, or the sensor's argv), its environment the program's (secrets resolved
as the launcher does) plus SCHEDULER_SENSOR and SCHEDULER_SENSOR_CURSOR; past its time limit it is killed
and the evaluation FAILED. Its answer (domain/sensors.py) makes

- a `sensor` event on the events topic (key `sensor:<program>`) when it fires: the event path fires every
  schedule whose trigger is `{"type": "sensor", "sensor": "<program>"}`, as it fires data triggers;
- the sensor's new state — cursor, outcome, counts — on the compacted `<app>-sensors` topic, which every
  worker follows (so the next owner, after a failover or a rebalance, reads it to its end and resumes from
  the cursor, at the interval after the last evaluation).

With Kafka transactions both records go in the transaction of the sensor's partition: an evaluation's fire
and its cursor commit together or not at all, and a worker that lost the partition meanwhile is fenced
(exactly once per evaluation). Without them (Tansu) the fire is sent first: a worker lost between the two
makes the next owner evaluate again from the previous cursor (at least once).
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
from typing import TYPE_CHECKING

from scheduler.domain.basics import ProgramId
from scheduler.domain.events import EventType, Notification, sensor_key
from scheduler.domain.sensors import (
    DEFAULT_INTERVAL_MS,
    DEFAULT_TIME_LIMIT_MS,
    Answer,
    BadAnswer,
    SensorState,
    answer_in,
)
from scheduler.kafka.transactions import PartitionGone, owned_by
from scheduler.launcher.secrets import SecretMissing, Secrets, masked
from scheduler.wire.codec import encode, notification_to_avro
from scheduler.worker.programs import ProgramSpec, TopicMap, child_env

if TYPE_CHECKING:
    from scheduler.worker.ports import SensorsPort

log = logging.getLogger(__name__)

TICK_S = 0.5
OUTPUT_LINES_KEPT = 40  # of an evaluation's output, for the reason of a failure


class SensorStates(TopicMap[SensorState]):
    """Every sensor's state by program id (the `<app>-sensors` topic, followed by every worker)."""

    what = "sensor state"

    def parse(self, key: str, value: bytes) -> SensorState:
        try:
            return SensorState.from_json(json.loads(value))
        except (TypeError, json.JSONDecodeError) as exc:
            raise ValueError(str(exc)) from None


class Failed(Exception):
    """An evaluation that gave no answer: why."""


def interval_ms(spec: ProgramSpec) -> int:
    return spec.intervalMs or DEFAULT_INTERVAL_MS


class Sensors:
    def __init__(self, worker: SensorsPort) -> None:
        self.worker = worker
        settings = worker.settings
        self.states = SensorStates(
            settings.bootstrap_servers,
            settings.sensors_topic,
            read_committed=settings.transactional,
            profile=settings.broker_profile,
            following=worker.following,
        )
        self.secrets = Secrets.from_settings(settings)
        self.due: dict[str, int] = {}  # sensor -> its next evaluation (ms), for the sensors owned here
        self.latest: dict[str, SensorState] = {}  # what this owner wrote last (before its follower reads it)
        self.running: dict[str, asyncio.Task[None]] = {}
        self._slots = asyncio.Semaphore(settings.sensor_concurrency)
        self._task: asyncio.Task[None] | None = None

    def state(self, sensor: str) -> SensorState | None:
        return self.latest.get(sensor) or self.states.get(sensor)

    async def start(self) -> None:
        await self.states.start()
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        for task in [self._task, *self.running.values()]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._task = None
        await self.states.stop()

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("sensors: a tick failed")
            await asyncio.sleep(TICK_S)

    def _owned(self, sensor: str) -> bool:
        return self.worker.partition_of(sensor.encode()) in self.worker.punctuator.partitions

    async def tick(self) -> None:
        """Start the evaluations that are due among the sensors owned here."""
        sensors = {pid: spec for pid, spec in self.worker.registry.all().items() if spec.kind == "sensor"}
        for gone in [s for s in self.due if s not in sensors or not self._owned(s)]:
            self.due.pop(gone, None)  # (moved elsewhere: its next owner goes on; here it starts over)
            self.latest.pop(gone, None)
        now = self.worker.clock()
        for sensor, spec in sensors.items():
            if sensor in self.running or not self._owned(sensor):
                continue
            if sensor not in self.due:  # taken up here: resume where its last owner was
                if not await self.states.read_to_end(wait_s=5.0):
                    continue  # (the next tick tries again: never evaluate from a state not read whole)
                last = self.states.get(sensor)
                evaluated = None if last is None else last.evaluated_at
                self.due[sensor] = now if evaluated is None else evaluated + interval_ms(spec)
            if now >= self.due[sensor]:
                self.running[sensor] = asyncio.create_task(self._evaluate(sensor, spec))

    async def _evaluate(self, sensor: str, spec: ProgramSpec) -> None:
        try:
            async with self._slots:
                before = self.state(sensor) or SensorState()
                began = self.worker.clock()
                answer: Answer | None = None
                failure = ""
                try:
                    answer = await self.check(sensor, spec, before.cursor)
                except Failed as exc:
                    failure = str(exc)
                took = max(self.worker.clock() - began, 0)
                after = before.after(answer, began, took, failure)
                if sensor in self.due:  # (not, if it moved away meanwhile: its next owner goes on)
                    self.due[sensor] = began + interval_ms(spec)
                if await self._publish(sensor, answer, after):
                    self.latest[sensor] = after
                    self.worker.counts.events[f"sensor{after.outcome}"] += 1
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("sensor %s: its evaluation failed", sensor)
        finally:
            self.running.pop(sensor, None)

    async def _publish(self, sensor: str, answer: Answer | None, after: SensorState) -> bool:
        """Its fire (if it fired) and its new state; False if not (the partition left this worker)."""
        worker = self.worker
        if not self._owned(sensor):
            return False  # (its next owner evaluates it)
        records: list[tuple[str, bytes, bytes, int | None | str]] = []
        if answer is not None and answer.fire:
            event = Notification(
                after.evaluated_at or worker.clock(),
                EventType.SENSOR.value,
                {"sensorId": sensor, "runKeys": json.dumps(list(answer.run_keys))},
            )
            key = sensor_key(ProgramId.parse(sensor)).encode()
            value = encode("Notification", notification_to_avro(event))
            records.append((worker.settings.events_topic, key, value, "auto"))
        state = json.dumps(after.to_json()).encode()
        records.append((worker.settings.sensors_topic, sensor.encode(), state, None))
        partition = worker.partition_of(sensor.encode())
        if worker.txns is None:
            if not await worker.may_work():  # frozen past the session and a rebalance followed
                return False
            for topic, key, value, where in records:
                await worker.send_keyed(topic, key, value, partition=where)
            return True
        try:
            async with worker.txns.work():
                with owned_by(partition):
                    for topic, key, value, where in records:
                        await worker.send_keyed(topic, key, value, partition=where)
        except PartitionGone:
            return False
        return True

    async def check(self, sensor: str, spec: ProgramSpec, cursor: str | None) -> Answer:
        """One evaluation: the check run in a process of its own, within its time limit."""
        argv = list(spec.argv) or [sys.executable, "-m", "scheduler.launcher.sensor_runner", spec.target]
        try:
            secrets = self.secrets.resolve(spec)
        except SecretMissing as exc:
            raise Failed(str(exc)) from None
        env = {
            **child_env(spec, secrets),
            "SCHEDULER_SENSOR": sensor,
        }
        if cursor is not None:
            env["SCHEDULER_SENSOR_CURSOR"] = cursor
        limit_s = (spec.timeLimitMs or DEFAULT_TIME_LIMIT_MS) / 1000
        started = time.monotonic()
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise Failed(f"could not start {argv[0]}: {exc}") from None
        try:
            out, _ = await asyncio.wait_for(process.communicate(), limit_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            raise Failed(f"time limit of {limit_s:g} s exceeded (killed)") from None
        except asyncio.CancelledError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            raise
        lines = [masked(line, list(secrets.values())) for line in out.decode(errors="replace").splitlines()]
        if process.returncode != 0:
            tail = "\n".join(lines[-OUTPUT_LINES_KEPT:])
            raise Failed(f"exit code {process.returncode} after {time.monotonic() - started:.1f} s\n{tail}")
        try:
            return answer_in(lines)
        except BadAnswer as exc:
            raise Failed(str(exc)) from None


__all__ = ["SensorStates", "Sensors", "interval_ms"]
