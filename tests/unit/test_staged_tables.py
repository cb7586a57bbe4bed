"""Tables written in the partition transactions (scheduler.kafka.staged): a write is read back at once inside
its partition's work, reaches the changelog in the partition's transaction, and RocksDB only once that
committed; a partition given up keeps nothing of it. A real RocksDB (rocksdict) per partition, fake
producers for the transactions (as tests/unit/test_transactions.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rocksdict import Options, Rdict

from scheduler.kafka.staged import StagedTable
from scheduler.kafka.transactions import PartitionGone, Transactions, _Txn, owned_by
from tests.unit.test_transactions import FakeBatchedProducer

pytestmark = pytest.mark.unit


class _Producer(FakeBatchedProducer):
    """Acknowledges each record with its offset in the changelog partition, as a broker would."""

    def __init__(self, log: list[str]) -> None:
        super().__init__(log)
        self.next_offset = 0

    async def send(
        self, topic: str, key: Any, value: Any, partition: int | None = None, headers: Any = None
    ) -> Any:
        self.sent.append((topic, key, value))
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        fut.set_result(SimpleNamespace(offset=self.next_offset, partition=partition))
        self.next_offset += 1
        return fut


class _FaustTable:
    """What StagedTable uses of a Faust table: its name, changelog topic, store (a RocksDB per partition)."""

    def __init__(self, base: Path) -> None:
        self.name = "job-queue"
        self.changelog_topic = SimpleNamespace(get_topic_name=lambda: "app-job-queue-changelog")
        self.persisted: dict[Any, int] = {}
        dbs: dict[int, Rdict] = {}

        def db(partition: int) -> Rdict:
            if partition not in dbs:
                dbs[partition] = Rdict(str(base / f"p{partition}"), Options(raw_mode=True))
            return dbs[partition]

        self.data = SimpleNamespace(
            _db_for_partition=db,
            set_persisted_offset=lambda tp, offset: self.persisted.__setitem__(tp, offset),
        )
        self.dbs = dbs

    def get(self, key: bytes) -> bytes | None:  # outside an event Faust looks in every partition
        return next((v for db in self.dbs.values() if (v := db.get(key)) is not None), None)


class _Harness:
    def __init__(self, base: Path, *partitions: int) -> None:
        self.log: list[str] = []
        self.failed: list[int] = []
        self.faust = _FaustTable(base)
        self.t = Transactions("unused:9092", "app", before_commit=self.before, on_failed=self.on_failed)
        self.table = StagedTable(self.faust, self.t)
        self.producers = {p: _Producer(self.log) for p in partitions}
        for p, producer in self.producers.items():
            self.t._txns[p] = _Txn(producer)  # type: ignore[arg-type]

    async def before(self, partition: int) -> None:
        await self.table.stage(self.t, partition)

    async def on_failed(self, partition: int, exc: BaseException, was_fenced: bool) -> None:
        self.failed.append(partition)
        self.table.drop(partition)

    def committed(self, partition: int, key: bytes) -> bytes | None:
        return self.faust.data._db_for_partition(partition).get(key)


async def test_a_write_is_read_back_in_its_work_and_reaches_rocksdb_only_once_its_transaction_committed(
    tmp_path: Path,
) -> None:
    h = _Harness(tmp_path, 0)
    async with h.t.work():
        with owned_by(0):
            h.table[b"p1"] = b"queue-1"
            h.table[b"p1"] = b"queue-2"  # the last write of a key is what commits
            h.table[b"p2"] = b"x"
            del h.table[b"p2"]
            assert h.table.get(b"p1") == b"queue-2" and h.table.get(b"p2") is None
    assert h.table.get(b"p1") is None  # outside the work (an HTTP read): what committed, nothing yet
    assert h.committed(0, b"p1") is None and 0 in h.t._dirty

    await h.t.commit()
    assert h.producers[0].sent == [
        ("app-job-queue-changelog", b"p1", b"queue-2"),
        ("app-job-queue-changelog", b"p2", None),
    ]
    assert h.log == ["begin", "committing", "commit"]
    assert h.committed(0, b"p1") == b"queue-2" and h.table.get(b"p1") == b"queue-2"
    assert list(h.faust.persisted.values()) == [1]  # where the store stands in its changelog
    assert h.table.held(0) == {}


async def test_a_partition_given_up_keeps_nothing_of_its_writes(tmp_path: Path) -> None:
    h = _Harness(tmp_path, 0, 1)
    with owned_by(0):
        h.table[b"a"] = b"zombie"
    with owned_by(1):
        h.table[b"b"] = b"kept"
    h.producers[0].kafka_producer.commit_error = RuntimeError("fenced by a newer producer")
    await h.t.commit()
    assert h.failed == [0]
    assert h.committed(0, b"a") is None and h.table.held(0) == {}  # aborted, never in RocksDB
    assert h.committed(1, b"b") == b"kept"
    with owned_by(0), pytest.raises(PartitionGone):  # nothing it does now can commit
        await h.t.send(0, "fires", b"k", b"v")


def test_a_write_outside_a_partitions_work_is_refused(tmp_path: Path) -> None:
    h = _Harness(tmp_path, 0)
    with pytest.raises(RuntimeError, match="outside a partition's work"):
        h.table[b"a"] = b"v"


async def test_a_write_of_work_whose_transaction_was_given_up_is_refused_and_never_held(
    tmp_path: Path,
) -> None:
    """A zombie's handler that goes on after its partition was fenced: its write must not be held for the
    partition's next transaction (here, if it is assigned again): that would revert what others committed."""
    h = _Harness(tmp_path, 0)
    await h.t.fail(0, RuntimeError("fenced by a newer producer"))
    with owned_by(0), pytest.raises(PartitionGone):
        h.table[b"progress"] = b"stale"
    h.t._txns[0] = _Txn(_Producer(h.log))  # type: ignore[arg-type]  # assigned here again
    with owned_by(0):
        assert h.table.get(b"progress") is None


async def test_writes_sent_now_travel_in_the_open_transaction_and_are_read_back_until_it_committed(
    tmp_path: Path,
) -> None:
    """send_now (a delivery's deletes): the changelog records go into the transaction at once, the reads of
    the partition's work keep seeing them, RocksDB gets them at the commit, which sends nothing more."""
    h = _Harness(tmp_path, 0)
    h.faust.data._db_for_partition(0)[b"due"] = b"message"  # committed before
    async with h.t.work():
        with owned_by(0):
            del h.table[b"due"]
            await h.table.send_now(0)
            assert h.producers[0].sent == [("app-job-queue-changelog", b"due", None)]
            assert h.table.held(0) == {}
            assert h.table.get(b"due") is None  # (RocksDB still has it: the delete is read back)
    async with h.t.work():  # a later unit of the same transaction
        with owned_by(0):
            assert h.table.get(b"due") is None
            h.table[b"other"] = b"x"
    assert h.committed(0, b"due") == b"message"
    await h.t.commit()
    assert h.producers[0].sent == [
        ("app-job-queue-changelog", b"due", None),
        ("app-job-queue-changelog", b"other", b"x"),
    ]
    assert h.committed(0, b"due") is None and h.committed(0, b"other") == b"x"
    assert h.table._sent == {}


async def test_a_key_sent_now_twice_in_one_transaction_reads_back_its_latest_write_until_it_committed(
    tmp_path: Path,
) -> None:
    h = _Harness(tmp_path, 0)
    async with h.t.work():
        with owned_by(0):
            h.table[b"k"] = b"first"
            await h.table.send_now(0)
            h.table[b"k"] = b"second"
            h.table[b"j"] = b"j"
            await h.table.send_now(0)
            assert h.table.get(b"k") == b"second" and h.table.written(0, b"k") == (True, b"second")
            assert h.table.get_many(0, [b"k", b"j", b"none"]) == [b"second", b"j", None]
            h.table[b"k"] = b"held"  # (held, not sent: read before what was sent)
            assert h.table.get_many(0, [b"k"]) == [b"held"] and h.table.get(b"k") == b"held"
    await h.t.commit()
    assert h.committed(0, b"k") == b"held" and h.committed(0, b"j") == b"j"
    assert h.table._sent == {} and h.table.written(0, b"k") == (False, None)


async def test_writes_sent_now_of_a_partition_given_up_are_forgotten(tmp_path: Path) -> None:
    h = _Harness(tmp_path, 0)
    h.faust.data._db_for_partition(0)[b"due"] = b"message"
    with owned_by(0):
        del h.table[b"due"]
        await h.table.send_now(0)
    h.producers[0].kafka_producer.commit_error = RuntimeError("fenced by a newer producer")
    await h.t.commit()
    assert h.failed == [0] and h.table._sent == {}
    assert h.committed(0, b"due") == b"message"  # aborted: the next owner delivers it


async def test_get_many_reads_what_get_reads_of_each_key(tmp_path: Path) -> None:
    """The committed values in one multi-get, then the writes sent now, then those held (the latest)."""
    h = _Harness(tmp_path, 0)
    db = h.faust.data._db_for_partition(0)
    for key in (b"kept", b"sent", b"held", b"both"):
        db[key] = b"committed"
    async with h.t.work():
        with owned_by(0):
            h.table[b"sent"] = b"sent now"
            h.table[b"both"] = b"sent now"
            await h.table.send_now(0)
            h.table[b"held"] = b"held"
            del h.table[b"both"]
            h.table[b"new"] = b"new"
            keys = [b"kept", b"sent", b"held", b"both", b"new", b"none"]
            assert h.table.get_many(0, keys) == [h.table.get(key) for key in keys] == [
                b"committed", b"sent now", b"held", None, b"new", None,
            ]  # fmt: skip
            assert h.table.get_many(0, []) == []


async def test_a_hop_fetch_sends_its_staged_writes_when_staged_a_command_fetch_at_the_commit(
    tmp_path: Path,
) -> None:
    """ScheduleStore.stage_commit: what a hop topic's fetch wrote to the staged tables (a delayed message's
    entries) goes into the transaction with the fetch's position, while the next partition is applied, so
    the commit waits for none of it; a commands fetch's (its history entries) wait for the commit."""
    from scheduler.worker.schedule_store import ScheduleStore

    h = _Harness(tmp_path, 0)
    schedules, progress = _FaustTable(tmp_path / "schedules"), _FaustTable(tmp_path / "progress")
    schedules.changelog_topic = SimpleNamespace(get_topic_name=lambda: "app-schedules-changelog")
    progress.changelog_topic = SimpleNamespace(get_topic_name=lambda: "app-progress-changelog")
    store = ScheduleStore(schedules, progress, None, h.t, [h.table])  # type: ignore[arg-type]
    changelog = "app-job-queue-changelog"
    async with h.t.work():
        with owned_by(0):
            h.table[b"history"] = b"entry"
            await store.stage_commit(0, 5)  # a fetch of commands
            assert h.table.held(0) == {b"history": b"entry"}
            assert [key for topic, key, _ in h.producers[0].sent if topic == changelog] == []
            h.table[b"message"] = b"due"
            await store.stage_commit(0, 7, "app-delayed")  # a fetch of a hop topic
            assert h.table.held(0) == {}
            assert [key for topic, key, _ in h.producers[0].sent if topic == changelog] == [
                b"history",
                b"message",
            ]
            assert h.table.get(b"message") == b"due"  # (read back until the commit)
    assert h.committed(0, b"message") is None
    await h.t.commit()
    assert h.committed(0, b"message") == b"due" and h.committed(0, b"history") == b"entry"
