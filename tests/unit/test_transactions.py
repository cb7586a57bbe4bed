"""Transactions without a broker: fake producers stand in for the partitions' transactional producers."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiokafka.errors import InvalidProducerEpoch, ProducerFenced, TransactionalIdAuthorizationFailed

from scheduler.kafka.transactions import (
    HOLD_MAX_S,
    OWNER,
    PartitionGone,
    Transactions,
    Undelivered,
    _Txn,
    fenced,
    owned_by,
    transactional_id,
)

pytestmark = pytest.mark.unit

# what aiokafka's transaction manager asserts once it is in its fatal state (after being fenced)
FATAL = AssertionError(
    "Invalid state transition TransactionState.FATAL_ERROR -> TransactionState.COMMITTING_TRANSACTION"
)


class FakeKafkaProducer:
    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.commit_error: BaseException | None = None
        self.commit_gate: asyncio.Event | None = None  # commit_transaction blocks until it is set

    async def begin_transaction(self) -> None:
        await asyncio.sleep(0)  # (lets a concurrent sender in)
        self.log.append("begin")

    async def commit_transaction(self) -> None:
        self.log.append("committing")
        if self.commit_gate is not None:
            await self.commit_gate.wait()
        if self.commit_error is not None:
            raise self.commit_error
        self.log.append("commit")


class FakeBatchedProducer:
    def __init__(self, log: list[str]) -> None:
        self.kafka_producer = FakeKafkaProducer(log)
        self.sent: list[tuple[Any, ...]] = []
        self.stopped = False
        self.failure: BaseException | None = None

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future[object]:
        self.sent.append((topic, key, value))
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    async def send_batch(self, topic: str, records: list[tuple[bytes, bytes | None, int]]) -> list[Any]:
        return [await self.send(topic, k, v, p) for k, v, p in records]

    async def settle(self) -> None:
        pass

    async def delivered(self) -> None:
        pass

    async def stop(self, timeout_s: float | None = None) -> None:
        self.stopped = True

    def partition_count(self, topic: str) -> int | None:
        return 8


class Harness:
    def __init__(self, *partitions: int) -> None:
        self.log: list[str] = []
        self.failed: list[tuple[int, BaseException, bool]] = []
        self.t = Transactions("unused:9092", "app", before_commit=self.before, on_failed=self.on_failed)
        self.producers = {p: FakeBatchedProducer(self.log) for p in partitions}
        for p, producer in self.producers.items():
            self.t._txns[p] = _Txn(producer)  # type: ignore[arg-type]

    async def before(self, partition: int) -> None:
        await asyncio.sleep(0)
        self.log.append(f"before:{partition}")

    async def on_failed(self, partition: int, exc: BaseException, was_fenced: bool) -> None:
        self.failed.append((partition, exc, was_fenced))


async def spin(n: int = 20) -> None:
    """Let every other task run as far as it can."""
    for _ in range(n):
        await asyncio.sleep(0)


# --- sending and committing -----------------------------------------------------------------------


async def test_sends_begin_the_transaction_once_and_a_commit_commits_it_then_runs_after_commit() -> None:
    h = Harness(0)
    await asyncio.gather(h.t.send(0, "fires", b"k1", b"v1"), h.t.send_batch(0, "fires", [(b"k2", b"v2", 0)]))
    assert h.log == ["begin"]
    assert h.producers[0].sent == [("fires", b"k1", b"v1"), ("fires", b"k2", b"v2")]
    assert 0 in h.t._dirty
    h.t.after_commit(0, lambda: h.log.append("after"))

    await h.t.commit()
    assert h.log == ["begin", "before:0", "committing", "commit", "after"]
    assert h.t.commits == 1 and not h.t._dirty

    await h.t.commit()  # nothing new: nothing committed, the callback ran once
    assert h.log == ["begin", "before:0", "committing", "commit", "after"]

    await h.t.send(0, "fires", b"k3", b"v3")  # the next transaction
    assert h.log[-1] == "begin"


async def test_commit_commits_only_the_partitions_asked_for() -> None:
    h = Harness(0, 1)
    await h.t.send(0, "fires", b"k", b"v")
    await h.t.send(1, "fires", b"k", b"v")
    await h.t.commit([1])
    assert h.log.count("commit") == 1 and "before:1" in h.log and "before:0" not in h.log
    assert h.t._dirty == {0}


async def test_a_commit_waits_for_the_work_in_progress() -> None:
    h = Harness(0)
    release = asyncio.Event()

    async def unit() -> None:
        async with h.t.work():
            await h.t.send(0, "fires", b"k", b"v")
            await release.wait()

    working = asyncio.create_task(unit())
    await spin()
    committing = asyncio.create_task(h.t.commit())
    await spin()
    assert h.log == ["begin"]  # not even before_commit: the work is not over

    release.set()
    await asyncio.gather(working, committing)
    assert h.log == ["begin", "before:0", "committing", "commit"]


async def test_a_held_partition_is_committed_by_the_committer_at_its_release_not_before() -> None:
    h = Harness(0, 1)
    committer = asyncio.create_task(h.t.run())
    try:
        async with h.t.work():
            await h.t.send(0, "deliveries", b"k", b"v")
            await h.t.send(1, "fires", b"k", b"v")
            release = time.monotonic() + 0.15
            h.t.hold(0, release)
        while h.log.count("commit") < 1:
            await asyncio.sleep(0.005)
        assert "before:1" in h.log and "before:0" not in h.log  # the partition not held commits at once
        while h.log.count("commit") < 2:
            await asyncio.sleep(0.005)
        assert time.monotonic() >= release
        assert h.log.count("before:0") == 1 and not h.t._dirty
        assert h.t._txns[0].release == 0.0  # (the next transaction is not held)
    finally:
        committer.cancel()


async def test_a_held_commit_says_how_long_after_its_release_it_landed_and_no_other_commit_does() -> None:
    h = Harness(0, 1)
    lags: list[int] = []
    h.t.released = lags.append
    await h.t.send(0, "deliveries", b"k", b"v")
    await h.t.send(1, "fires", b"k", b"v")
    h.t.hold(0, time.monotonic() + 0.05)
    await h.t.commit()  # partition 1 only: not held
    assert lags == [] and h.t._dirty == {0}
    await asyncio.sleep(0.06)
    await h.t.commit()
    assert len(lags) == 1 and 0 <= lags[0] < 1_000


async def test_a_hold_lasts_at_most_hold_max_s_and_needs_an_open_transaction() -> None:
    h = Harness(0, 1)
    h.t.hold(1, time.monotonic() + 60)  # nothing open: nothing held
    assert h.t._txns[1].release == 0.0
    await h.t.send(0, "deliveries", b"k", b"v")
    h.t.hold(0, time.monotonic() + 3600)  # (a wall clock jumped: still bounded)
    assert h.t._txns[0].release <= time.monotonic() + HOLD_MAX_S


async def test_a_revocation_of_a_held_partition_commits_it_at_its_release_not_before() -> None:
    h = Harness(0)
    await h.t.send(0, "deliveries", b"k", b"v")
    release = time.monotonic() + 0.1
    h.t.hold(0, release)
    await h.t.commit()  # the committer's turn: held, so not committed
    assert "commit" not in h.log and h.t._dirty == {0}
    await h.t.revoke([0])
    assert time.monotonic() >= release
    assert h.log == ["begin", "before:0", "committing", "commit"] and h.producers[0].stopped


async def test_new_work_waits_while_a_commit_is_in_progress() -> None:
    h = Harness(0)
    gate = h.producers[0].kafka_producer.commit_gate = asyncio.Event()
    await h.t.send(0, "fires", b"k", b"v")
    committing = asyncio.create_task(h.t.commit())
    await spin()
    assert h.log[-1] == "committing"

    async def unit() -> None:
        async with h.t.work():
            h.log.append("work")

    working = asyncio.create_task(unit())
    await spin()
    assert "work" not in h.log

    gate.set()
    await asyncio.gather(committing, working)
    assert h.log[-2:] == ["commit", "work"]


# --- failures -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "was_fenced"),
    [(RuntimeError("the broker said no"), False), (ProducerFenced(), True), (FATAL, True)],
    ids=["generic", "fenced", "fatal state"],
)
async def test_a_failed_commit_gives_the_partition_up(error: BaseException, was_fenced: bool) -> None:
    h = Harness(0, 1)
    h.producers[0].kafka_producer.commit_error = error
    await h.t.send(0, "fires", b"k", b"v")
    await h.t.send(1, "fires", b"k", b"v")
    h.t.after_commit(0, lambda: h.log.append("after:0"))
    h.t.after_commit(1, lambda: h.log.append("after:1"))

    await h.t.commit()
    assert h.failed == [(0, error, was_fenced)]
    assert h.t.partitions == {1} and not h.t.owns(0)
    assert "after:0" not in h.log and "after:1" in h.log  # the other partition committed as usual
    assert h.t.failures == 1 and h.t.commits == 1
    await spin()
    assert h.producers[0].stopped  # (which aborts what it held)

    with pytest.raises(PartitionGone):
        await h.t.send(0, "fires", b"k", b"v")
    with pytest.raises(PartitionGone):
        h.t.after_commit(0, lambda: None)


async def test_a_failing_before_commit_gives_the_partition_up_without_committing() -> None:
    h = Harness(0)

    async def before(partition: int) -> None:
        raise RuntimeError("watermark not written")

    h.t.before_commit = before
    await h.t.send(0, "fires", b"k", b"v")
    await h.t.commit()
    assert "committing" not in h.log
    assert [(p, fenced) for p, _, fenced in h.failed] == [(0, False)]
    assert not h.t.owns(0)


async def test_a_record_not_acknowledged_gives_the_partition_up_without_committing() -> None:
    """aiokafka would commit the records that were delivered without the one that was not."""
    h = Harness(0, 1)
    await h.t.send(0, "fires", b"k", b"v")
    await h.t.send(1, "fires", b"k", b"v")
    h.producers[0].failure = TimeoutError("the batch expired without a leader")
    await h.t.commit()
    assert [(p, type(e), fenced) for p, e, fenced in h.failed] == [(0, Undelivered, False)]
    assert h.log.count("commit") == 1 and not h.t.owns(0) and h.t.owns(1)
    await h.t.send(1, "fires", b"k", b"v")  # (a new transaction of the other partition)
    assert h.producers[1].failure is None


async def test_a_send_failing_after_a_record_was_fenced_counts_as_fenced() -> None:
    """aiokafka refuses the next send ("not in transaction") once a record of the transaction was fenced."""
    h = Harness(0)
    await h.t.send(0, "fires", b"k", b"v")
    h.producers[0].failure = ProducerFenced()
    await h.t.fail(0, RuntimeError("Can't send messages while not in transaction"), h.t._txns[0])
    assert [(p, fenced) for p, _, fenced in h.failed] == [(0, True)]


# --- revocation ---------------------------------------------------------------------------------------


async def test_a_revocation_commits_what_the_partitions_hold_then_stops_their_producers() -> None:
    h = Harness(0, 1)
    await h.t.send(0, "fires", b"k", b"v")
    h.t.after_commit(0, lambda: h.log.append("after:0"))
    await h.t.revoke([0])
    assert h.log == ["begin", "before:0", "committing", "commit", "after:0"]
    assert h.producers[0].stopped and not h.producers[1].stopped
    assert h.t.partitions == {1} and not h.failed
    with pytest.raises(PartitionGone):
        await h.t.send(0, "fires", b"k", b"v")


async def test_a_revocation_behind_stuck_work_gives_the_partitions_up_uncommitted_in_time() -> None:
    h = Harness(0, 1)
    stuck = asyncio.Event()

    async def unit() -> None:  # a send that waits for a partition without a leader
        async with h.t.work():
            await h.t.send(0, "fires", b"k", b"v")
            await stuck.wait()

    working = asyncio.create_task(unit())
    await spin()
    h.t.after_commit(0, lambda: h.log.append("after:0"))
    await asyncio.wait_for(h.t.revoke([0], timeout_s=0.05), 2)
    assert "committing" not in h.log and "after:0" not in h.log  # never committed half a unit of work
    assert h.t.partitions == {1} and not h.failed  # (a revocation: no rejoin asked for)
    await spin()
    assert h.producers[0].stopped  # (which aborts what it held; the next owner fences it anyway)
    working.cancel()


async def test_a_revocation_whose_commit_hangs_gives_the_partitions_up_in_time() -> None:
    h = Harness(0)
    h.producers[0].kafka_producer.commit_gate = asyncio.Event()  # never set
    await h.t.send(0, "fires", b"k", b"v")
    h.t.after_commit(0, lambda: h.log.append("after:0"))
    await asyncio.wait_for(h.t.revoke([0], timeout_s=0.05), 2)
    assert "commit" not in h.log and "after:0" not in h.log
    assert not h.t.owns(0) and not h.t._committing  # the next commit is not blocked
    await h.t.commit()


async def test_a_revocation_told_not_to_commit_gives_the_partitions_up_at_once() -> None:
    h = Harness(0, 1)
    await h.t.send(0, "fires", b"k", b"v")
    await h.t.send(1, "fires", b"k", b"v")
    await h.t.revoke([0], commit=False)
    assert "committing" not in h.log and h.t.partitions == {1}
    await h.t.commit()
    assert h.log.count("commit") == 1 and "before:1" in h.log and "before:0" not in h.log


async def send_through_a_move(h: Harness, release: asyncio.Event) -> FakeBatchedProducer:
    """A send of partition 0 that hangs until `release`; meanwhile the partition is revoked and assigned
    here again with a new producer. The send ends with PartitionGone; returns the new producer."""
    sending = asyncio.create_task(h.t.send(0, "fires", b"k", b"v"))
    await spin()
    await h.t.revoke([0], commit=False)
    new = FakeBatchedProducer(h.log)
    h.t._txns[0] = _Txn(new)  # type: ignore[arg-type]  (assigned here again)
    release.set()
    with pytest.raises(PartitionGone):
        await sending
    return new


async def test_a_send_failing_after_its_partition_moved_gives_up_nothing_of_the_new_assignment() -> None:
    """A send that had taken the partition's producer before a revocation fails once that producer stops;
    the partition, assigned again meanwhile with a new producer, must not be given up for it (that asked
    for a needless rejoin: one more rebalance)."""
    h = Harness(0)
    release = asyncio.Event()
    old = h.producers[0]

    async def send_after_stop(*args: Any, **kwargs: Any) -> asyncio.Future[object]:
        await release.wait()
        raise RuntimeError("producer was stopped")

    old.send = send_after_stop  # type: ignore[method-assign]
    new = await send_through_a_move(h, release)
    assert h.t.owns(0) and not h.failed and not new.stopped


async def test_a_begin_failing_on_a_producer_stopped_by_a_revocation_is_no_failure() -> None:
    h = Harness(0)
    gate = asyncio.Event()

    async def begin_on_stopped() -> None:
        await gate.wait()
        raise AssertionError("not started")

    h.producers[0].kafka_producer.begin_transaction = begin_on_stopped  # type: ignore[method-assign]
    new = await send_through_a_move(h, gate)
    assert h.t.owns(0) and not h.failed and h.t.failures == 0 and not new.stopped


# --- helpers ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ProducerFenced(), True),
        (InvalidProducerEpoch(), True),
        (TransactionalIdAuthorizationFailed(), True),
        (FATAL, True),
        (RuntimeError("producer was fenced by a newer one"), True),
        (RuntimeError("NotLeaderForPartitionError"), False),
        (TimeoutError(), False),
    ],
)
def test_fenced_tells_a_takeover_from_other_failures(error: BaseException, expected: bool) -> None:
    assert fenced(error) is expected


def test_transactional_id_names_the_partition() -> None:
    assert transactional_id("app", 3) == "app-p3"


def test_owned_by_sets_and_resets_the_owner() -> None:
    assert OWNER.get() is None
    with owned_by(3):
        assert OWNER.get() == 3
        with owned_by(None):
            assert OWNER.get() is None
        assert OWNER.get() == 3
    assert OWNER.get() is None
    with pytest.raises(RuntimeError), owned_by(5):
        raise RuntimeError
    assert OWNER.get() is None


# --- starting -------------------------------------------------------------------------------------


class StartedProducer(FakeBatchedProducer):
    """A producer whose start succeeds at once (its InitProducerId fenced the previous owner)."""

    made: list[StartedProducer] = []

    def __init__(self, *_: Any, **__: Any) -> None:
        super().__init__([])
        StartedProducer.made.append(self)

    async def start(self) -> None:
        pass


async def test_a_producer_started_once_its_assignment_went_stale_is_stopped_unused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker stood still while the producer started (freeze.py): what the group assigned may be another
    worker's now; the producer must not be used, or what it commits would repeat that worker's."""
    import scheduler.kafka.transactions as transactions

    monkeypatch.setattr(transactions, "BatchedProducer", StartedProducer)
    StartedProducer.made = []
    t = Transactions("unused:9092", "app")
    answers = {1: [True, True], 2: [True, False]}  # (before it starts, once started: 2 froze meanwhile)
    for p in (1, 2):
        await t.assign([p], lambda p=p: answers[p].pop(0))  # type: ignore[misc]
    assert t.partitions == {1}
    assert [producer.stopped for producer in StartedProducer.made] == [False, True]
    with pytest.raises(PartitionGone):
        await t.send(2, "out", b"k", b"v")
