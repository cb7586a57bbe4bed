"""The launcher's consumer of launch requests (scheduler/launcher/launches.py): a turn that fails replaces
the consumer after a backoff, heal replaces a deaf one, and every request taken is handled and committed
once, in order."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import ConsumerStoppedError, KafkaError

from scheduler.kafka.config import Settings
from scheduler.launcher import launches as launches_module
from scheduler.launcher.launches import LaunchRequests

pytestmark = pytest.mark.unit

TP = TopicPartition("app-launches", 0)


class FakeConsumer:
    """Hands out `records` once (offsets from 0), then nothing; `fails`: every fetch raises that."""

    def __init__(self, records: list[bytes], fails: BaseException | None = None, deaf: bool = False) -> None:
        self.records, self.fails, self.deaf = records, fails, deaf
        self.committed: list[int] = []
        self.stopped = False

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        self.stopped = True

    async def getmany(self, timeout_ms: int = 0) -> dict[Any, list[Any]]:
        await asyncio.sleep(0.001)
        if self.stopped:
            raise ConsumerStoppedError()
        if self.fails is not None:
            raise self.fails
        if self.deaf or not self.records:
            return {}
        out = [SimpleNamespace(offset=i, value=v) for i, v in enumerate(self.records)]
        self.records = []
        return {TP: out}

    async def commit(self, offsets: dict[Any, int]) -> None:
        self.committed.append(offsets[TP])


async def _until(predicate: Any, timeout_s: float = 5) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.005)


async def test_a_failing_consumer_is_replaced_and_the_next_one_takes_the_launches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(launches_module, "FIRST_BACKOFF_S", 0.01)
    handled: list[bytes | None] = []

    async def handle(value: bytes | None) -> None:
        handled.append(value)

    broken = FakeConsumer([], fails=KafkaError("Unexpected error during coordination AssertionError()"))
    working = FakeConsumer([b"a", b"b"])
    made = iter([broken, working])
    launches = LaunchRequests(Settings(app_id="app", auth="off"), handle)
    monkeypatch.setattr(launches, "_new_consumer", lambda: next(made))
    task = asyncio.ensure_future(launches.run())
    await _until(lambda: launches.taken == 2)
    await launches.stop()
    await asyncio.wait_for(task, 5)
    assert handled == [b"a", b"b"] and working.committed == [1, 2]
    assert broken.stopped and launches.replaced == 1


async def test_heal_replaces_a_deaf_consumer(monkeypatch: pytest.MonkeyPatch) -> None:
    handled: list[bytes | None] = []

    async def handle(value: bytes | None) -> None:
        handled.append(value)

    deaf, working = FakeConsumer([b"x"], deaf=True), FakeConsumer([b"x"])
    made = iter([deaf, working])
    launches = LaunchRequests(Settings(app_id="app", auth="off"), handle)
    monkeypatch.setattr(launches, "_new_consumer", lambda: next(made))
    task = asyncio.ensure_future(launches.run())
    await _until(lambda: launches.started.is_set())
    await asyncio.sleep(0.05)
    assert handled == [] and launches.taken == 0  # (deaf: nothing taken)
    assert await launches.heal()
    await _until(lambda: launches.taken == 1)
    await launches.stop()
    await asyncio.wait_for(task, 5)
    assert handled == [b"x"] and deaf.stopped and launches.replaced == 1
    assert not await launches.heal()  # (stopping: nothing to replace)
