"""GatheredSender: the records handed over in one turn of the loop go in one send_batch, in order, each
future resolving to its own offset; a failed hand-over fails each caller; flushes keep their order."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.structs import RecordMetadata, TopicPartition

from scheduler.kafka.gathered import GatheredSender

pytestmark = pytest.mark.unit


class _Producer:
    """BatchedProducer.send_batch as the gatherer uses it: batches of at most `per_batch` records per
    partition, each batch's future resolved by the test to the batch's first offset."""

    def __init__(self, per_batch: int = 1_000) -> None:
        self.per_batch = per_batch
        self.calls: list[list[tuple[bytes, bytes, int, Any]]] = []
        self.batches: list[tuple[int, asyncio.Future[object]]] = []  # (partition, future)
        self.gate: asyncio.Event | None = None  # set: send_batch waits for it
        self.fail: Exception | None = None

    async def send_batch(self, topic: str, records: list[Any], positions: list[int]) -> list[Any]:
        self.calls.append(list(records))
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        out: list[Any] = []
        counts: dict[int, int] = {}
        current: dict[int, asyncio.Future[object]] = {}
        for i, (_, _, partition, _) in enumerate(records):
            n = counts.get(partition, 0)
            if n % self.per_batch == 0:
                current[partition] = asyncio.get_running_loop().create_future()
                self.batches.append((partition, current[partition]))
            positions[i] = n % self.per_batch
            counts[partition] = n + 1
            out.append(current[partition])
        return out

    def acknowledge(self, base_offsets: list[int]) -> None:
        for (partition, fut), base in zip(self.batches, base_offsets, strict=True):
            fut.set_result(RecordMetadata("t", partition, TopicPartition("t", partition), base, 0, 0, 0))


async def test_the_records_of_one_turn_go_in_one_send_batch_each_answering_its_own_offset() -> None:
    producer = _Producer(per_batch=2)
    sender = GatheredSender(producer, "t")  # type: ignore[arg-type]
    futures = [
        sender.send(f"k{i}".encode(), b"v", i % 2, [("h", b"1")] if i == 0 else None) for i in range(5)
    ]
    await asyncio.sleep(0)  # the turn ends: the flush runs
    assert [[(k, p) for k, _, p, _ in call] for call in producer.calls] == [
        [(b"k0", 0), (b"k1", 1), (b"k2", 0), (b"k3", 1), (b"k4", 0)]
    ]
    assert producer.calls[0][0][3] == [("h", b"1")] and producer.calls[0][1][3] == []
    # partition 0: k0 k2 | k4 ; partition 1: k1 k3 (batches in that order)
    producer.acknowledge([100, 200, 102])
    offsets = [(m.partition, m.offset) for m in await asyncio.gather(*futures)]
    assert offsets == [(0, 100), (1, 200), (0, 101), (1, 201), (0, 102)]


async def test_a_failed_hand_over_fails_each_caller_and_the_next_turn_sends_again() -> None:
    producer = _Producer()
    producer.fail = RuntimeError("producer stopped")
    sender = GatheredSender(producer, "t")  # type: ignore[arg-type]
    futures = [sender.send(b"a", b"v", 0), sender.send(b"b", b"v", 1)]
    for fut in futures:
        with pytest.raises(RuntimeError, match="producer stopped"):
            await fut
    producer.fail = None
    again = sender.send(b"c", b"v", 0)
    await asyncio.sleep(0)
    producer.acknowledge([7])
    assert (await again).offset == 7


async def test_records_handed_over_during_a_flush_follow_it_in_order() -> None:
    producer = _Producer()
    producer.gate = asyncio.Event()
    sender = GatheredSender(producer, "t")  # type: ignore[arg-type]
    first = sender.send(b"a", b"v", 0)
    await asyncio.sleep(0)  # the first flush is handing over (waiting at the gate)
    second = [sender.send(b"b", b"v", 0), sender.send(b"c", b"v", 0)]
    for _ in range(3):
        await asyncio.sleep(0)
    assert [[k for k, *_ in call] for call in producer.calls] == [[b"a"]], "the second flush went first"
    producer.gate.set()
    while len(producer.calls) < 2:
        await asyncio.sleep(0)
    assert [[k for k, *_ in call] for call in producer.calls] == [[b"a"], [b"b", b"c"]]
    producer.acknowledge([10, 11])
    assert [m.offset for m in await asyncio.gather(first, *second)] == [10, 11, 12]
