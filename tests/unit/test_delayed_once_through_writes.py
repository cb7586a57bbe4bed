"""Randomized: delayed messages written, replaced and cancelled at random around their instants — between
deliveries, while one is sent (the ingest runs between the delivery's awaits), after an instant was read
ahead (prepare) or sent ahead, before and after commits — are each delivered at most once, a message replaced or
cancelled before its delivery began never, and the last message of each id exactly once. With transactions
(the staged table and fake producers of test_staged_tables) and without; every interleaving reproducible
from its seed."""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from scheduler.kafka.transactions import owned_by
from scheduler.worker.delayed import SEND_AHEAD_MS, DelayedMessages
from tests.unit.test_delayed import _event, _Table, _TxWorker, _Worker

pytestmark = pytest.mark.unit

SEEDS = 150


class _Hooked:
    """A worker whose sends run `during` first: what the ingest does while a delivery awaits its producer."""

    during: Any = None

    async def produce(self, topic, key, value, partition=None, headers=None):  # type: ignore[no-untyped-def]
        if self.during is not None:
            await self.during()
        return await super().produce(topic, key, value, partition, headers)  # type: ignore[misc]


class _HookedTx(_Hooked, _TxWorker):
    pass


class _HookedPlain(_Hooked, _Worker):
    pass


async def _run(seed: int, base: Path) -> list[str]:
    """One interleaving; what went wrong (nothing: [])."""
    rng = random.Random(seed)
    transactions = rng.random() < 0.75
    worker: Any = _HookedTx(base) if transactions else _HookedPlain(_Table(base / "db"))
    service = DelayedMessages(worker)
    ids = [f"m{i}".encode() for i in range(rng.randint(1, 5))]
    current: dict[bytes, bytes | None] = {}
    decided: dict[bytes, int] = {}  # a message replaced or cancelled -> how many were delivered by then
    written = 0
    in_delivery = False

    async def write() -> None:
        nonlocal written
        id = rng.choice(ids)
        written += 1
        old = current.get(id)
        if old is not None and rng.random() < 0.25:
            value, event = None, _event(id, None)  # a cancel
        else:
            value = b"%s:%d" % (id, written)
            event = _event(id, value, worker.now + rng.randint(-300, 600))
        if old is not None and not in_delivery:  # (one being sent when it was replaced may go out)
            decided[old] = len(worker.sent)
        current[id] = value
        with owned_by(0):
            await service.handle(event)

    async def during() -> None:
        if rng.random() < 0.3:
            await write()

    worker.during = during

    async def deliver() -> None:
        nonlocal in_delivery
        in_delivery = True
        try:
            await service.deliver_due()
        finally:
            in_delivery = False

    async def commit() -> None:
        if transactions:
            await worker.txns.commit()

    for _ in range(rng.randint(10, 60)):
        op = rng.random()
        if op < 0.35:
            await write()
        elif op < 0.55:
            worker.now += rng.randint(0, 300)
        elif op < 0.75:
            await deliver()
        elif op < 0.85 and transactions:
            first = service.next_due()
            if first is not None:
                await service.prepare(first)
                if rng.random() < 0.5 and first - worker.now <= SEND_AHEAD_MS:  # (sent ahead of it)
                    in_delivery = True
                    try:
                        await service.deliver_due(first, release=time.monotonic())
                    finally:
                        in_delivery = False
        else:
            await commit()
    worker.during = None
    worker.now += 10_000
    for _ in range(5):
        await deliver()
        await commit()
    delivered = Counter(value for _, _, value, _ in worker.sent)
    wrong = [f"{value!r} delivered {n} times" for value, n in delivered.items() if n > 1]
    wrong += [
        f"{value!r} (the last of {id!r}) delivered {delivered[value]} times"
        for id, value in current.items()
        if value is not None and delivered[value] != 1
    ]
    for value, by in decided.items():
        if value is not None and value in {v for _, _, v, _ in worker.sent[by:]}:
            wrong.append(f"{value!r} delivered after it was replaced or cancelled")
    return wrong


async def test_delayed_messages_written_around_their_instants_are_delivered_once(tmp_path: Path) -> None:
    failed = {}
    for seed in range(SEEDS):
        wrong = await _run(seed, tmp_path / str(seed))
        if wrong:
            failed[seed] = wrong
    assert not failed, f"{len(failed)} of {SEEDS} seeds went wrong, e.g. " + "; ".join(
        f"seed {seed}: {wrong[:2]}" for seed, wrong in list(failed.items())[:3]
    )
