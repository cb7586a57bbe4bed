"""TransactionalWatermarks with a real punctuator and a recording fake of the partition transactions: a tick's
watermark goes into the transaction with its fires (one AddPartitionsToTxn for both), once per transaction."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from scheduler.domain.model import FrequencyTrigger, Schedule, ScheduleKey, ScheduleState, TimeUnit
from scheduler.wire.codec import decode, key_bytes
from scheduler.worker.punctuator import Punctuator
from scheduler.worker.watermarks import TransactionalWatermarks

pytestmark = pytest.mark.unit

T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z
S = TimeUnit.SECONDS
PROGRESS = "app-fire-progress-changelog"


@dataclass
class Meta:
    partition: int
    offset: int


class FakeTxns:
    """One partition's transactions: what was sent in which (by serial), commits run the callbacks."""

    def __init__(self) -> None:
        self.serial = 1
        self.open = False
        self.sent: list[tuple[int, str, bytes | None, bytes | None]] = []  # (serial, topic, key, value)
        self.after: list[Any] = []

    def open_serial(self, partition: int) -> int | None:
        return self.serial if self.open else None

    async def send(
        self, partition: int, topic: str, key: bytes | None, value: bytes | None, tp: int | None = None
    ) -> asyncio.Future[object]:
        self.open = True
        self.sent.append((self.serial, topic, key, value))
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        fut.set_result(Meta(tp or 0, len(self.sent)))
        return fut

    def after_commit(self, partition: int, callback: Any) -> None:
        self.after.append(callback)

    def commit(self) -> None:
        for callback in self.after:
            callback()
        self.after, self.open = [], False
        self.serial += 1

    def marks(self, serial: int) -> list[tuple[bytes, int]]:
        return [
            (key, decode("FireProgress", value)["firedUpTo"])
            for s, topic, key, value in self.sent
            if s == serial and topic == PROGRESS and key is not None and value is not None
        ]

    def fires(self, serial: int) -> int:
        return sum(1 for s, topic, _, _ in self.sent if s == serial and topic == "out")


class FakeProgress:
    """The fire-progress table: its changelog topic and its local stores."""

    def __init__(self) -> None:
        self.db: dict[bytes, bytes] = {}
        self.offsets: dict[Any, int] = {}
        outer = self

        class Changelog:
            def get_topic_name(self) -> str:
                return PROGRESS

        class Data:
            def _db_for_partition(self, partition: int) -> dict[bytes, bytes]:
                return outer.db

            def set_persisted_offset(self, tp: Any, offset: int) -> None:
                outer.offsets[tp] = offset

        self.changelog_topic, self.data = Changelog(), Data()


class Harness:
    def __init__(self, now: int) -> None:
        self.now = now
        self.txns = FakeTxns()
        self.progress = FakeProgress()
        self.table: dict[bytes, ScheduleState] = {}
        self.punctuator = Punctuator(
            lambda topic, key, value: self.txns.send(0, topic, key, value),
            lambda partition, key: self.table.get(key),
            lambda *_: None,
            lambda: self.now,
            transactional=True,
            fired=lambda unit, partitions: self.watermarks.fired(unit, partitions),
        )
        self.watermarks = TransactionalWatermarks(self.txns, self.punctuator, self.progress)  # type: ignore[arg-type]

    async def assign(self, fired_up_to: int) -> None:
        schedule = Schedule(ScheduleKey("acme", "a"), FrequencyTrigger(S, 10, T0), "out", {}, enabled=True)
        state = ScheduleState(schedule, T0 - 1_000, T0 - 1_000, T0 - 1_000)
        key = key_bytes(schedule.key)
        self.table[key] = state
        await self.punctuator.assign(0, [(key, state)], {S: fired_up_to})

    async def tick_at(self, now: int) -> None:
        self.now = now
        await self.punctuator.tick(S)


async def test_a_ticks_watermark_goes_into_the_transaction_with_its_fires_and_the_commit_adds_none() -> None:
    h = Harness(T0 + 5_000)
    await h.assign(T0 + 5_000)
    await h.tick_at(T0 + 10_000)
    assert h.txns.fires(1) == 1
    assert h.txns.marks(1) == [(b"0:SECONDS", T0 + 10_000)]  # sent by the tick, before any commit
    await h.watermarks.before_commit(0)
    assert h.txns.marks(1) == [(b"0:SECONDS", T0 + 10_000)]  # not sent twice
    assert h.punctuator.pending_marks(0) == {S: T0 + 10_000}  # (nothing is taken as committed before)
    h.txns.commit()
    assert h.punctuator.pending_marks(0) == {}
    assert decode("FireProgress", h.progress.db[b"0:SECONDS"])["firedUpTo"] == T0 + 10_000


async def test_each_transaction_gets_the_marks_of_its_own_ticks() -> None:
    h = Harness(T0 + 5_000)
    await h.assign(T0 + 5_000)
    await h.tick_at(T0 + 10_000)
    await h.tick_at(T0 + 20_000)  # (no commit between: the same transaction)
    assert h.txns.marks(1) == [(b"0:SECONDS", T0 + 10_000), (b"0:SECONDS", T0 + 20_000)]
    h.txns.commit()
    await h.tick_at(T0 + 30_000)
    await h.watermarks.before_commit(0)
    assert h.txns.fires(2) == 1
    assert h.txns.marks(2) == [(b"0:SECONDS", T0 + 30_000)]
    h.txns.commit()
    assert decode("FireProgress", h.progress.db[b"0:SECONDS"])["firedUpTo"] == T0 + 30_000


async def test_the_commit_sends_the_marks_no_tick_sent() -> None:
    # taken over at T0+25s with a watermark at T0+5s: the catch-up fires at the assignment, not at a tick
    h = Harness(T0 + 25_000)
    await h.assign(T0 + 5_000)
    assert h.txns.fires(1) == 1
    assert h.txns.marks(1) == []
    await h.watermarks.before_commit(0)
    assert h.txns.marks(1) == [(b"0:SECONDS", T0 + 25_000)]
    h.txns.commit()
    assert h.punctuator.pending_marks(0) == {}


async def test_marks_sent_in_a_transaction_that_ended_are_sent_again_in_the_next() -> None:
    h = Harness(T0 + 5_000)
    await h.assign(T0 + 5_000)
    await h.tick_at(T0 + 10_000)
    h.txns.open, h.txns.after = False, []  # that transaction ended without committing its marks
    h.txns.serial += 1
    await h.watermarks.before_commit(0)
    assert h.txns.marks(2) == [(b"0:SECONDS", T0 + 10_000)]
