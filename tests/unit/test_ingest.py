"""The commands ingest outlives a broker it cannot reach (it keeps its partitions waiting and retries), and
freezes what the commands it applied built."""

from __future__ import annotations

import asyncio
import gc
import logging
from types import SimpleNamespace

import pytest

from scheduler.kafka.broker import free_port
from scheduler.kafka.config import Settings
from scheduler.kafka.producer import TopicCreator
from scheduler.worker.counters import WorkerCounts
from scheduler.worker.ingest import FREEZE_AFTER, YIELD_EVERY, CommandIngest

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


async def test_an_assignment_waits_and_retries_while_the_broker_cannot_be_reached(caplog) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"  # nothing listens there
    settings = Settings(app_id="nobroker", bootstrap_servers=bootstrap, commands_topic="nobroker-commands")
    worker = SimpleNamespace(settings=settings, topics=TopicCreator(bootstrap, 4, 1), progress_db=dict)
    ingest = CommandIngest(worker)
    caplog.set_level(logging.WARNING, logger="scheduler.worker.ingest")
    run = asyncio.ensure_future(ingest.run())
    try:
        await ingest.assign({0, 1})
        for _ in range(100):
            if sum("could not take the commands partitions" in r.message for r in caplog.records) >= 2:
                break
            await asyncio.sleep(0.1)
        assert not run.done(), run  # alive, not crashed
        assert sum("could not take the commands partitions" in r.message for r in caplog.records) >= 2
        assert ingest._wanted == {0, 1}  # still to be taken
        await ingest.revoke({1})
        assert ingest._wanted == {0}
    finally:
        await ingest.stop()
        await asyncio.wait_for(run, 10)


def test_applied_commands_are_frozen_when_the_topic_is_quiet_or_every_freeze_after() -> None:
    counts = WorkerCounts()
    counts.command("INSERT", "applied")
    ingest = CommandIngest(SimpleNamespace(settings=Settings(app_id="settle"), counts=counts))
    frozen = gc.get_freeze_count()
    try:
        assert not ingest.settle(quiet=True)  # nothing applied since the last freeze
        ingest.unfrozen = FREEZE_AFTER - 1
        assert not ingest.settle(quiet=False)  # a flow goes on: not yet
        assert ingest.settle(quiet=True)
        assert ingest.unfrozen == 0 and gc.get_freeze_count() > frozen
        assert counts.commands_frozen == 1  # what /metrics says: the last freeze came after that command
        ingest.unfrozen = FREEZE_AFTER
        assert ingest.settle(quiet=False)
    finally:
        gc.unfreeze()


class _Record:
    def __init__(self, partition: int, offset: int) -> None:
        self.topic, self.partition, self.offset = "t-commands", partition, offset
        self.key, self.value, self.headers = f"k{partition}-{offset}".encode(), b"v", ()


class FlakyChangelogWorker:
    """Applies every command as one schedule write on its partition; the changelog of some partitions
    fails a number of times (its leader is away), or never answers."""

    def __init__(self, failures: dict[int, int], hang: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.settings = Settings(app_id="t", commands_topic="t-commands")
        self.txns = None  # at-least-once (the embedded broker's way)
        self.failures, self.hang = dict(failures), hang
        self.writes: list[tuple[bytes, bytes | None, int]] = []
        self.stored: dict[int, int] = {}
        self.unretrieved: list[object] = []

    async def handle_command(self, event: object) -> None:
        msg = event.message  # type: ignore[attr-defined]
        self.writes.append((msg.key, msg.value, msg.partition))

    async def may_work(self) -> bool:
        return True

    def write_local(self) -> None:
        pass

    def take_writes(self) -> list[tuple[bytes, bytes | None, int]]:
        writes, self.writes = self.writes, []
        return writes

    async def write_changelog(self, writes: list[tuple[bytes, bytes | None, int]]) -> None:
        partitions = {w[2] for w in writes}
        assert len(partitions) == 1, "one partition per changelog write: one cannot hold up another"
        (p,) = partitions
        if p in self.hang:
            await asyncio.sleep(3600)
        if self.failures.get(p, 0) > 0:
            self.failures[p] -= 1
            raise RuntimeError(f"NotLeaderForPartitionError on partition {p}")

    def save_progress_record(self, partition: int, key: bytes, value: bytes) -> None:
        from scheduler.wire.codec import decode_json

        self.stored[partition] = decode_json(value)["offset"]


class _FakeConsumer:
    def __init__(self) -> None:
        self.paused: set[int] = set()

    def pause(self, tp: object) -> None:
        self.paused.add(tp.partition)  # type: ignore[attr-defined]

    def resume(self, tp: object) -> None:
        self.paused.discard(tp.partition)  # type: ignore[attr-defined]

    def assignment(self) -> set[object]:
        from aiokafka import TopicPartition

        return {TopicPartition("t-commands", p) for p in range(4)}


def _fetch(**by_partition: range) -> dict[object, list[_Record]]:
    from aiokafka import TopicPartition

    return {
        TopicPartition("t-commands", int(p[1:])): [_Record(int(p[1:]), o) for o in offsets]
        for p, offsets in by_partition.items()
    }


async def test_a_changelog_write_that_fails_on_one_partition_is_retried_while_the_others_go_on() -> None:
    """Acceptance finding 8: one failed changelog write (NotLeaderForPartitionError) held the whole ingest
    for 41 s, and asyncio logged "Future exception was never retrieved"."""
    worker = FlakyChangelogWorker(failures={1: 2})
    ingest = CommandIngest(worker)
    ingest._consumer = _FakeConsumer()  # type: ignore[assignment]
    ingest._active = {0, 1}
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: worker.unretrieved.append(context))
    try:
        await ingest._apply(_fetch(p0=range(0, 3), p1=range(0, 3)))
        await asyncio.sleep(0.05)
        assert worker.stored == {0: 3}  # partition 0 is stored at once; partition 1 retries
        await ingest._apply(_fetch(p0=range(3, 5), p1=range(3, 4)))  # the next fetch is not held either
        await asyncio.sleep(0.05)
        assert worker.stored == {0: 5}
        assert ingest._consumer.paused == {1}  # type: ignore[attr-defined]  # two flushes behind: not fetched
        for _ in range(60):
            if worker.stored.get(1) == 4:
                break
            await asyncio.sleep(0.1)
        assert worker.stored == {0: 5, 1: 4}  # retried, in order, the offset after the writes
        assert ingest._consumer.paused == set()  # type: ignore[attr-defined]
        gc.collect()
        assert not worker.unretrieved
    finally:
        loop.set_exception_handler(None)


async def test_a_revocation_drops_a_flush_that_cannot_finish_and_stores_no_offset_for_it(monkeypatch) -> None:
    import scheduler.worker.ingest as ingest_module

    monkeypatch.setattr(ingest_module, "REVOKE_WAIT_S", 0.2)
    worker = FlakyChangelogWorker(failures={}, hang={1})
    ingest = CommandIngest(worker)
    ingest._active = {0, 1}
    await ingest._apply(_fetch(p0=range(0, 2), p1=range(0, 2)))
    await ingest._apply(_fetch(p1=range(2, 3)))
    await asyncio.wait_for(ingest.revoke({1}), 5)  # bounded, though partition 1's changelog never answers
    await asyncio.sleep(0.1)
    assert worker.stored == {0: 2}  # no offset for partition 1: its next owner applies those commands again
    assert ingest.flushes._flushing == {}


class _TransactionalWorker:
    """With transactions: the ingest reads the hop topics too; what each fetch of a partition's topic made
    is staged with the offset after it (Worker.stage_commit). The hop handler of partition 1 finds its
    transaction given up at its second record."""

    def __init__(self) -> None:
        from scheduler.kafka.transactions import Transactions

        self.settings = Settings(app_id="t", commands_topic="t-commands")
        self.txns = Transactions("unused:9092", "t")
        self.handled: list[tuple[str, int, int]] = []
        self.staged: list[tuple[int, int, str | None]] = []
        self.ingest: CommandIngest | None = None

    async def handle_command(self, event: object) -> None:
        msg = event.message  # type: ignore[attr-defined]
        self.handled.append((msg.topic, msg.partition, msg.offset))

    async def hop(self, event: object) -> None:
        from scheduler.kafka.transactions import OWNER, PartitionGone

        msg = event.message  # type: ignore[attr-defined]
        assert OWNER.get() == msg.partition, "a hop's work belongs to its partition's transaction"
        if msg.partition == 1 and msg.offset == 11:
            raise PartitionGone(
                "partition 1: fenced"
            )  # (Transactions.fail told the worker, which dropped it)
        self.handled.append((msg.topic, msg.partition, msg.offset))

    async def stage_commit(self, partition: int, next_offset: int, topic: str | None = None) -> None:
        self.staged.append((partition, next_offset, topic))


async def test_with_transactions_a_hop_fetch_is_staged_with_its_position_and_a_partition_given_up_stops() -> (
    None
):
    from aiokafka import TopicPartition

    worker = _TransactionalWorker()
    ingest = CommandIngest(worker, hops={"t-jobs": worker.hop})
    ingest._consumer = _FakeConsumer()  # type: ignore[assignment]
    ingest._active = {0, 1}
    assert ingest._tps({1}) == [TopicPartition("t-commands", 1), TopicPartition("t-jobs", 1)]

    def records(topic: str, partition: int, offsets: range) -> list[_Record]:
        out = []
        for o in offsets:
            r = _Record(partition, o)
            r.topic = topic
            out.append(r)
        return out

    await ingest._apply(
        {
            TopicPartition("t-commands", 0): records("t-commands", 0, range(0, 2)),
            TopicPartition("t-jobs", 0): records("t-jobs", 0, range(5, 7)),
            TopicPartition("t-jobs", 1): records("t-jobs", 1, range(10, 13)),
        }
    )
    assert worker.handled == [
        ("t-commands", 0, 0), ("t-commands", 0, 1), ("t-jobs", 0, 5), ("t-jobs", 0, 6), ("t-jobs", 1, 10)
    ]  # fmt: skip
    # each topic's position after what it applied, in the partition's transaction; none for the one given up
    assert worker.staged == [(0, 2, None), (0, 7, "t-jobs")]
    assert ingest._active == {0} and ingest._consumer.paused == {1}  # type: ignore[attr-defined]


class _Firing:
    """The punctuator as the ingest sees it (ports.Firing): busy until `idle` is set."""

    def __init__(self, idle: bool, sent: bool = False) -> None:
        self.idle = asyncio.Event()
        if idle:
            self.idle.set()
        self.sent = sent

    def sent_uncommitted(self) -> bool:
        return self.sent


def _giving_way(firing: _Firing) -> tuple[_TransactionalWorker, CommandIngest]:
    worker = _TransactionalWorker()
    worker.counts = WorkerCounts()  # type: ignore[attr-defined]
    ingest = CommandIngest(worker, firing=firing)
    ingest._consumer = _FakeConsumer()  # type: ignore[assignment]
    ingest._active = {0, 1}
    return worker, ingest


async def test_with_transactions_a_fetch_gives_way_to_a_busy_punctuator_with_what_it_applied_staged() -> None:
    """Issue 41 item 2: while the punctuator stages or fires, the commands wait for it after each step of
    YIELD_EVERY, outside their unit of work (what they applied is staged first: a commit can go)."""
    firing = _Firing(idle=False)
    worker, ingest = _giving_way(firing)
    applying = asyncio.create_task(ingest._apply(_fetch(p0=range(0, 250), p1=range(0, 250))))
    for _ in range(100):
        await asyncio.sleep(0)
        if worker.counts.commands_yielded:  # type: ignore[attr-defined]
            break
    assert len(worker.handled) == YIELD_EVERY and worker.staged == [(0, YIELD_EVERY, None)]
    assert ingest.worker.txns._work == 0  # (outside its unit of work while it waits)
    firing.idle.set()
    await applying
    assert len(worker.handled) == 500 and worker.staged == [(0, 100, None), (0, 250, None), (1, 250, None)]


async def test_with_transactions_a_punctuator_that_never_rests_slows_the_commands_but_never_stops_them() -> (
    None
):
    worker, ingest = _giving_way(_Firing(idle=False))
    await asyncio.wait_for(ingest._apply(_fetch(p0=range(0, 150), p1=range(0, 150))), 5)
    assert len(worker.handled) == 300  # (a step of YIELD_EVERY after each wait of YIELD_TO_FIRES_S)
    assert worker.staged == [(0, 100, None), (0, 150, None), (1, 50, None), (1, 150, None)]
    assert worker.counts.commands_yielded == 2  # type: ignore[attr-defined]


@pytest.mark.parametrize("fires_sent", [True, False])
async def test_with_transactions_a_commit_holding_sent_fires_cuts_a_fetchs_unit_of_work(fires_sent) -> None:
    """A commit waits for the units of work in progress: one that would carry fires already sent (a
    read_committed reader waits for them) cuts the fetch's unit after its step; one of index writes alone
    waits for the whole fetch (fewer, larger transactions)."""
    worker, ingest = _giving_way(_Firing(idle=True, sent=fires_sent))
    applying = asyncio.create_task(ingest._apply(_fetch(p0=range(0, 250), p1=range(0, 250))))
    committing = asyncio.create_task(worker.txns.commit())  # (waits for the fetch's unit of work)
    await asyncio.wait_for(asyncio.gather(applying, committing), 5)
    assert len(worker.handled) == 500
    cut = [(0, 100, None)] if fires_sent else []
    assert worker.staged == [*cut, (0, 250, None), (1, 250, None)]
    assert worker.counts.commands_yielded == 0  # type: ignore[attr-defined]


class _WaitingConsumer(_FakeConsumer):
    """A consumer whose getmany waits its whole timeout for records that never come (an idle topic)."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[int] = []
        self.cut_short = 0

    async def getmany(self, *partitions: object, timeout_ms: int = 0, max_records: int | None = None) -> dict:
        self.waits.append(timeout_ms)
        try:
            await asyncio.sleep(timeout_ms / 1000)
        except asyncio.CancelledError:
            self.cut_short += 1
            raise
        return {}


@pytest.mark.parametrize("transactions", [True, False])
async def test_an_idle_fetch_waits_a_second_with_transactions_and_an_assignment_cuts_it_short(
    transactions,
) -> None:
    """With transactions an idle commands loop turns once a second, not five times (each empty turn cost the
    worker's loop ~0.2 ms), and a wake (an assignment to take, a stop) ends the wait at once: a takeover
    does not wait for it. Without them it turns every FETCH_WAIT_MS (held writes go out at each turn)."""
    from scheduler.worker.ingest import FETCH_WAIT_MS, IDLE_FETCH_WAIT_MS

    worker = _TransactionalWorker() if transactions else FlakyChangelogWorker({})
    worker.counts = WorkerCounts()  # type: ignore[attr-defined]
    worker.writes_held = lambda: False  # type: ignore[attr-defined]
    ingest = CommandIngest(worker)
    consumer = _WaitingConsumer()
    ingest._consumer = consumer  # type: ignore[assignment]
    ingest._active = {0, 1}
    run = asyncio.ensure_future(ingest.run())
    try:
        await asyncio.sleep(0.5)
        if not transactions:
            assert consumer.waits[0] == FETCH_WAIT_MS and len(consumer.waits) >= 2
            return
        assert consumer.waits == [IDLE_FETCH_WAIT_MS], "one idle fetch in half a second"
        taken: list[set[int]] = []

        async def take(partitions: set[int]) -> None:
            taken.append(partitions)

        ingest._take_assignment = take  # type: ignore[method-assign]
        await ingest.assign({2})
        for _ in range(20):
            await asyncio.sleep(0.01)
            if taken:
                break
        assert taken == [{2}], "the assignment waited for the idle fetch"
        assert consumer.cut_short == 1
    finally:
        ingest._stopped = True
        ingest._wake.set()
        await asyncio.wait_for(run, 5)
