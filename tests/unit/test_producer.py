"""BatchedProducer: a record nobody awaits still has its failure retrieved and logged; `delivered` ends at a failure."""

from __future__ import annotations

import asyncio
import gc
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from scheduler.kafka.producer import BatchedProducer, ProducerStopped
from scheduler.kafka.tables import done_offsets

pytestmark = pytest.mark.unit


class _FakeClient:
    """aiokafka's client as far as the producer touches it: the topics its metadata tracks."""

    def __init__(self) -> None:
        self._topics: set[str] = set()

    def add_topic(self, topic: str) -> None:
        self._topics.add(topic)


class _FakeAioProducer:
    def __init__(self) -> None:
        self.futures: list[asyncio.Future[object]] = []
        self.client = _FakeClient()

    async def send(self, topic: str, value: bytes, **kwargs: Any) -> asyncio.Future[object]:
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self.futures.append(fut)
        return fut


async def test_a_failed_record_nobody_awaits_is_logged_with_its_topic_not_left_unretrieved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Acceptance finding 8: "Future exception was never retrieved" was logged 7 times by asyncio, with
    no topic, when changelog and index writes failed with NotLeaderForPartitionError."""
    producer = BatchedProducer("unused:9092")
    fake = _FakeAioProducer()
    producer._producer = fake  # type: ignore[assignment]
    unretrieved: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: unretrieved.append(context))
    try:
        with caplog.at_level(logging.WARNING, logger="scheduler.kafka.producer"):
            await producer.send("t-trigger-index", b"k", b"v")  # the future is dropped
            fake.futures[0].set_exception(RuntimeError("NotLeaderForPartitionError"))
            await asyncio.sleep(0)  # the done callbacks run
            fake.futures.clear()
            gc.collect()
        assert "a record to t-trigger-index was not acknowledged" in caplog.text
        assert not unretrieved
    finally:
        loop.set_exception_handler(None)


async def test_a_stopped_producer_is_never_started_again() -> None:
    """A send that had taken a partition's transactional producer before the partition was revoked must
    not start it again: its transactional id would fence the partition's new owner."""
    producer = BatchedProducer("unused:9092", transactional_id="app-txn-0")
    producer._producer = _FakeAioProducer()  # type: ignore[assignment]
    await producer.stop(1.0)
    with pytest.raises(ProducerStopped):
        await asyncio.wait_for(producer.send("fires", b"k", b"v"), 1)  # (no connection attempted)
    with pytest.raises(ProducerStopped):
        await asyncio.wait_for(producer.send_batch("fires", [(b"k", b"v", 0)]), 1)
    assert producer._producer is None


async def test_a_failed_batch_nobody_awaits_is_logged_not_left_unretrieved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A fenced producer's batches fail; the punctuator drops their futures with the partition."""
    producer = BatchedProducer("unused:9092")
    fake = _LeaderlessPartitionProducer()
    fake._message_accumulator._batches.clear()
    producer._producer = fake  # type: ignore[assignment]
    failing: list[asyncio.Future[object]] = []

    async def send_batch(batch: _Batch, topic: str, *, partition: int) -> asyncio.Future[object]:
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        failing.append(fut)
        return fut

    fake.send_batch = send_batch  # type: ignore[method-assign]
    unretrieved: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: unretrieved.append(context))
    try:
        with caplog.at_level(logging.WARNING, logger="scheduler.kafka.producer"):
            await producer.send_batch("t-fires", [(b"k", b"v", 0)])  # the futures are dropped
            failing[0].set_exception(RuntimeError("ProducerFenced"))
            await asyncio.sleep(0)
            failing.clear()
            gc.collect()
        assert "a record to t-fires was not acknowledged" in caplog.text
        assert not unretrieved
    finally:
        loop.set_exception_handler(None)


async def test_thousands_of_failed_records_log_a_few_lines(caplog: pytest.LogCaptureFixture) -> None:
    """A fenced producer fails every record it held: one line per topic and error every few seconds."""
    producer = BatchedProducer("unused:9092")
    fake = _FakeAioProducer()
    producer._producer = fake  # type: ignore[assignment]
    with caplog.at_level(logging.WARNING, logger="scheduler.kafka.producer"):
        for _ in range(1000):
            await producer.send("t-fenced-out", b"k", b"v")
        for fut in fake.futures:
            fut.set_exception(RuntimeError("ProducerFenced"))
        await asyncio.sleep(0)
    assert caplog.text.count("a record to t-fenced-out was not acknowledged") == 1


class _Batch:
    """aiokafka's BatchBuilder as the producer uses it, full at two records: its append, and (aiokafka 0.14)
    its record builder appended to directly with the count then set and the batch closed."""

    def __init__(self) -> None:
        self.records: list[bytes] = []
        self._builder = SimpleNamespace(append=self._append)
        self._relative_offset = 0
        self.closed = False

    def append(self, *, key: bytes, value: bytes, timestamp: None, headers: object = ()) -> object | None:
        return self._append(len(self.records), timestamp, key, value, headers)

    def _append(
        self, offset: int, timestamp: None, key: bytes, value: bytes, headers: object
    ) -> object | None:
        assert offset == len(self.records) and not self.closed
        if len(self.records) == 2:
            return None  # full
        self.records.append(value)
        return object()

    def close(self) -> None:
        self.closed = True


class _LeaderlessPartitionProducer:
    """aiokafka as it behaves while partition 0's leader is away: a batch of partition 0 its sender has not
    taken yet is held, and send_batch of another partition-0 batch waits until the leader is back."""

    def __init__(self) -> None:
        from collections import defaultdict, deque

        from aiokafka import TopicPartition

        self._message_accumulator = SimpleNamespace(_batches=defaultdict(deque))
        self._message_accumulator._batches[TopicPartition("fires", 0)].append("held")
        self.leader_back = asyncio.Event()
        self.added: list[tuple[int, list[bytes]]] = []
        self.client = _FakeClient()

    def create_batch(self) -> _Batch:
        return _Batch()

    async def send_batch(self, batch: _Batch, topic: str, *, partition: int) -> asyncio.Future[object]:
        if partition == 0:
            await self.leader_back.wait()
        self.added.append((partition, batch.records))
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        fut.set_result(SimpleNamespace(partition=partition))
        return fut


async def test_a_partition_whose_leader_is_away_does_not_hold_the_batches_of_the_others() -> None:
    """A burst's fires to partitions 0 and 1: partition 1's are added and acknowledged while partition 0's
    wait for its leader; then partition 0's follow, in their order."""
    producer = BatchedProducer("unused:9092")
    fake = _LeaderlessPartitionProducer()
    producer._producer = fake  # type: ignore[assignment]
    records = [(b"k", f"p{p}-{i}".encode(), p) for i in range(5) for p in (0, 1)]
    futures = await asyncio.wait_for(producer.send_batch("fires", records), 1)  # not held by partition 0
    await asyncio.sleep(0)
    ones = [f for f, (_, _, p) in zip(futures, records, strict=True) if p == 1]
    assert all(f.done() and f.exception() is None for f in ones)
    assert [p for p, _ in fake.added] == [1, 1, 1]  # 5 records, 2 a batch
    zeros = [f for f, (_, _, p) in zip(futures, records, strict=True) if p == 0]
    assert not any(f.done() for f in zeros)
    fake.leader_back.set()
    await asyncio.wait_for(asyncio.gather(*zeros), 1)
    assert [r for p, r in fake.added if p == 0] == [[b"p0-0", b"p0-1"], [b"p0-2", b"p0-3"], [b"p0-4"]]
    assert producer._tails == {}


def _batches_as_aiokafka_fills_them(aio: Any, records: list[Any]) -> list[list[tuple[Any, ...]]]:
    """(key, value, headers) of each batch BatchBuilder.append would fill with these records, in order."""
    batches: list[list[tuple[Any, ...]]] = [[]]
    batch = aio.create_batch()
    for r in records:
        headers = r[3] if len(r) > 3 else []
        if batch.append(key=r[0], value=r[1], timestamp=None, headers=headers) is None:
            batch = aio.create_batch()
            batches.append([])
            batch.append(key=r[0], value=r[1], timestamp=None, headers=headers)
        batches[-1].append((r[0], r[1], headers))
    return batches


@pytest.mark.parametrize("partitions", [[3], [3, 5]])
async def test_records_go_into_aiokafkas_record_builder_as_its_batches_would_hold_them(
    partitions: list[int],
) -> None:
    """send_batch appends to aiokafka's record builder itself: the batches it hands on hold each
    partition's records, in order, with their headers, as many a batch as BatchBuilder.append puts in one;
    each record's future is its batch's, and its position is its place in that batch. One partition (a
    table's writes) or several (fires to their keys' partitions)."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.record.default_records import DefaultRecordBatch

    aio = AIOKafkaProducer(bootstrap_servers="unused:9092", max_batch_size=1024)
    added: list[tuple[int, Any]] = []

    async def send_batch(batch: Any, topic: str, *, partition: int) -> asyncio.Future[object]:
        added.append((partition, batch))
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        fut.set_result(SimpleNamespace(partition=partition, offset=100 * len(added)))
        return fut

    aio.send_batch = send_batch  # type: ignore[method-assign]
    aio.client = _FakeClient()  # type: ignore[assignment]
    producer = BatchedProducer("unused:9092")
    producer._producer = aio
    records: list[Any] = [
        (f"k{i}".encode(), None if i % 7 == 0 else bytes(60), partitions[i % len(partitions)])
        for i in range(80)
    ]
    records[5] = (b"k5", b"v", records[5][2], [("h", b"x")])
    positions = [-1] * len(records)
    futures = await producer.send_batch("changelog", records, positions)

    for p in partitions:
        mine = [i for i, r in enumerate(records) if r[2] == p]
        expected = _batches_as_aiokafka_fills_them(aio, [records[i] for i in mine])
        assert len(expected) > 1  # (several batches)
        built = [b for q, b in added if q == p]
        got = [[(r.key, r.value, list(r.headers)) for r in DefaultRecordBatch(b._build())] for b in built]
        assert got == expected
        assert [b.record_count() for b in built] == [len(e) for e in expected]
        assert [positions[i] for i in mine] == [n for e in expected for n in range(len(e))]
        offsets = [100 * (k + 1) for k, (q, _) in enumerate(added) if q == p]
        assert [futures[i].result().offset for i in mine] == [
            offsets[b] for b, e in enumerate(expected) for _ in e
        ]
        assert done_offsets([futures[i] for i in mine]) == {p: offsets[-1] + len(expected[-1]) - 1}


def test_the_aiokafka_internals_the_producer_reads_are_there() -> None:
    """_holds_a_batch reads aiokafka 0.14's accumulator: an upgrade that moves it fails here."""
    from aiokafka import AIOKafkaProducer

    from scheduler.kafka.producer import _holds_a_batch

    async def check() -> None:
        p = AIOKafkaProducer(bootstrap_servers="unused:9092")
        assert _holds_a_batch(p, "t", 0) is False

    asyncio.run(check())


class _FlushingAioProducer(_FakeAioProducer):
    """…whose flush waits for every record (aiokafka's, which a record held for ever holds with it)."""

    async def flush(self) -> None:
        await asyncio.wait(self.futures)


async def test_delivered_returns_once_a_record_failed_not_when_the_others_are_delivered() -> None:
    """A transaction's commit waits for `delivered`: a record for a deleted topic failed, and the records
    of the same transaction that aiokafka held behind it (its AddPartitionsToTxn refused for ever) held
    every partition's work until the commit timed out (60 s)."""
    producer = BatchedProducer("unused:9092")
    fake = _FlushingAioProducer()
    producer._producer = fake  # type: ignore[assignment]
    await producer.send("t-out", b"k", b"v")
    await producer.send("t-fire-progress-changelog", b"k", b"v")  # never acknowledged
    waiting = asyncio.ensure_future(producer.delivered())
    await asyncio.sleep(0.01)
    assert not waiting.done()
    fake.futures[0].set_exception(RuntimeError("UnknownTopicOrPartitionError"))
    await asyncio.wait_for(waiting, 1)
    assert isinstance(producer.failure, RuntimeError)
    fake.futures[1].set_result(None)


async def test_delivered_waits_for_every_record_while_none_failed() -> None:
    producer = BatchedProducer("unused:9092")
    fake = _FlushingAioProducer()
    producer._producer = fake  # type: ignore[assignment]
    await producer.send("t-out", b"k", b"v")
    waiting = asyncio.ensure_future(producer.delivered())
    await asyncio.sleep(0.01)
    assert not waiting.done()
    fake.futures[0].set_result(None)
    await asyncio.wait_for(waiting, 1)
    assert producer.failure is None
