"""A partition whose producer fenced its previous owner only after its tables' restore began may lack what
that owner committed meanwhile: the worker gives it back and rejoins, so it is restored again, instead of
firing from tables that miss a commit."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from faust.types import TP

import scheduler.kafka.transactions as transactions_module
import scheduler.worker.ownership as ownership_module
from scheduler.kafka.config import Settings
from scheduler.kafka.transactions import _Txn
from scheduler.worker.app import Worker
from scheduler.worker.held import Held
from tests.unit.test_transactions import FakeBatchedProducer

pytestmark = pytest.mark.unit


async def _no_calendars() -> None:
    """(no broker here: the calendars a take-up reads first are none)"""


async def test_a_partition_fenced_after_its_restore_began_is_given_back_and_restored_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = Worker(Settings(app_id="app", data_dir=tmp_path, auth="off", partitions=2))
    assert worker.txns is not None
    monkeypatch.setattr(worker, "read_calendars", _no_calendars)
    rejoins: list[object] = []
    monkeypatch.setattr(ownership_module, "recovery_is_current", lambda app: True)
    monkeypatch.setattr(ownership_module, "request_rejoin", rejoins.append)
    monkeypatch.setattr(worker.ownership, "active_partitions", lambda: {0, 1})
    for p in (0, 1):  # both producers have started by the time recovery completes
        worker.txns._txns[p] = _Txn(FakeBatchedProducer([]))  # type: ignore[arg-type]
    worker.ownership.fenced_late = {1}  # partition 1's had not within FENCE_BEFORE_RESTORE_S

    await worker.ownership.on_recovered()

    assert worker.punctuator.partitions == {0}  # 0 fires; 1 does not until it is restored again
    assert worker.txns.partitions == {0} and rejoins == [worker.faust_app]
    assert worker.ingest._wanted == {0} and worker.ownership.fenced_late == set()


async def test_an_older_take_up_stops_where_a_newer_assignment_takes_the_partitions_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Faust calls the recovery callback in a task a newer rebalance does not cancel: a take-up still
    waiting for a producer when the next assignment's recovery completes must not go on assigning
    partitions beside it (each would be caught up twice from one watermark: campaign seed 4000)."""
    worker = Worker(Settings(app_id="app", data_dir=tmp_path, auth="off", partitions=2))
    assert worker.txns is not None
    monkeypatch.setattr(worker, "read_calendars", _no_calendars)
    monkeypatch.setattr(ownership_module, "recovery_is_current", lambda app: True)
    monkeypatch.setattr(worker.ownership, "active_partitions", lambda: {0, 1})
    monkeypatch.setattr(worker.faust_app, "consumer_generation_id", 1, raising=False)
    worker.txns._txns[0] = _Txn(FakeBatchedProducer([]))  # type: ignore[arg-type]
    fenced = asyncio.get_running_loop().create_future()
    worker.txns._starting[1] = fenced  # type: ignore[assignment]  # partition 1's producer: not started yet
    assigned: list[tuple[int, int]] = []

    async def assign(partition: int, states: object, fired_up_to: object) -> int:
        assigned.append((partition, worker.generation()))
        worker.punctuator._parts[partition] = Held(high={})
        await asyncio.sleep(0.01)  # (a catch-up's sends)
        return 0

    monkeypatch.setattr(worker.punctuator, "assign", assign)
    older = asyncio.ensure_future(worker.ownership.on_recovered())
    await asyncio.sleep(0.01)
    assert not older.done()  # waiting for partition 1's producer
    worker.faust_app.consumer_generation_id = 2  # the next rebalance: the same partitions, restored again
    worker.txns._txns[1] = _Txn(FakeBatchedProducer([]))  # type: ignore[arg-type]
    fenced.set_result(None)
    newer = asyncio.ensure_future(worker.ownership.on_recovered())
    await asyncio.wait_for(asyncio.gather(older, newer), 10)

    assert sorted(assigned) == [(0, 2), (1, 2)]  # each partition taken up once, by the newer take-up
    assert worker.punctuator.partitions == {0, 1}


@pytest.mark.parametrize(
    ("transactions", "fetch_in_hand"),
    [("on", False), ("on", True), ("off", False)],
    ids=["revoked-at-once", "revoked-after-a-fetch", "without-transactions"],
)
async def test_a_take_up_held_up_past_its_revocation_hands_nothing_to_the_punctuator_or_the_ingest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, transactions: str, fetch_in_hand: bool
) -> None:
    """Faust counts a rebalance when it revokes, before the group's next generation: a take-up held up
    meanwhile (a partition's catch-up behind a network cut) must not go on once on_revoked took the
    partitions back. It did (campaign seed 52): its ingest assignment, queued behind the revocation waiting
    for the fetch in hand, came after it, and at the next assignment the ingest applied the partition's hop
    records into tables not restored yet, and committed them: 174 fires twice."""
    settings = Settings(app_id="app", data_dir=tmp_path, auth="off", partitions=2, transactions=transactions)
    worker = Worker(settings)
    monkeypatch.setattr(worker, "read_calendars", _no_calendars)
    monkeypatch.setattr(ownership_module, "recovery_is_current", lambda app: True)
    monkeypatch.setattr(worker.ownership, "active_partitions", lambda: {0, 1})
    monkeypatch.setattr(worker.faust_app, "consumer_generation_id", 1, raising=False)
    monkeypatch.setattr(worker.faust_app, "rebalancing_count", 1)
    worker.ownership._assignment = (1, 1)
    if worker.txns is not None:
        for p in (0, 1):
            worker.txns._txns[p] = _Txn(FakeBatchedProducer([]))  # type: ignore[arg-type]
    caught_up = asyncio.Event()

    async def assign(partition: int, states: object, fired_up_to: object) -> int:
        if partition == 1:
            await caught_up.wait()  # (its catch-up's sends, held up)
        worker.punctuator._parts[partition] = Held(high={})
        return 0

    monkeypatch.setattr(worker.punctuator, "assign", assign)
    taking_up = asyncio.ensure_future(worker.ownership.on_recovered())
    await asyncio.sleep(0.01)
    assert worker.punctuator.partitions == {0} and not taking_up.done()
    if fetch_in_hand:
        await worker.ingest._lock.acquire()  # (the ingest applying a fetch: the revocation waits for it)
    worker.faust_app.rebalancing_count += 1  # the revocation (Faust's on_rebalance_start)
    changelog = worker.schedules.changelog_topic.get_topic_name()
    revoking = asyncio.ensure_future(
        worker.ownership.on_revoked(worker.faust_app, {TP(changelog, 0), TP(changelog, 1)})
    )
    await asyncio.sleep(0.01)
    caught_up.set()
    await asyncio.sleep(0.01)
    if fetch_in_hand:
        worker.ingest._lock.release()
    await asyncio.wait_for(asyncio.gather(taking_up, revoking), 10)

    assert worker.punctuator.partitions == set()  # nothing fires what it no longer owns
    assert worker.txns is None or worker.txns.partitions == set()  # (started again: it would fence the owner)
    assert not worker.ingest._wanted and not worker.ingest._active  # nothing applied into its tables


async def test_a_producer_of_an_assignment_revoked_since_is_not_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started, it would fence the partition's owner now (its transaction given up) before being stopped
    unused: an assignment revoked before its producer starts starts none."""
    worker = Worker(Settings(app_id="app", data_dir=tmp_path, auth="off", partitions=2))
    assert worker.txns is not None
    monkeypatch.setattr(worker.faust_app, "rebalancing_count", 1)
    started: list[str] = []

    class Recorded(FakeBatchedProducer):
        def __init__(self, bootstrap: str, **kwargs: object) -> None:
            super().__init__([])

        async def start(self) -> None:
            started.append("start")

    monkeypatch.setattr(transactions_module, "BatchedProducer", Recorded)
    current = worker.ownership._current(1)
    worker.faust_app.rebalancing_count += 1  # revoked
    await asyncio.wait_for(worker.txns.assign({0, 1}, current), 10)

    assert started == [] and worker.txns.partitions == set()
    await asyncio.wait_for(worker.txns.assign({0}, worker.ownership._current(2)), 10)
    assert started == ["start"] and worker.txns.partitions == {0}  # (the current assignment's: started)


async def test_a_first_assignment_of_generation_0_is_taken_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tansu numbers a group's first generation 0, and Faust has counted one rebalance by then (the first
    join's revocation of nothing): that assignment is the current one, not one revoked since."""
    worker = Worker(Settings(app_id="app", data_dir=tmp_path, auth="off", partitions=2, transactions="off"))
    monkeypatch.setattr(worker, "read_calendars", _no_calendars)
    monkeypatch.setattr(ownership_module, "recovery_is_current", lambda app: True)
    monkeypatch.setattr(worker.ownership, "active_partitions", lambda: {0, 1})
    monkeypatch.setattr(worker.faust_app, "consumer_generation_id", 0, raising=False)
    monkeypatch.setattr(worker.faust_app, "rebalancing_count", 1)

    async def assign(partition: int, states: object, fired_up_to: object) -> int:
        worker.punctuator._parts[partition] = Held(high={})
        return 0

    monkeypatch.setattr(worker.punctuator, "assign", assign)
    await asyncio.wait_for(worker.ownership.on_recovered(), 10)

    assert worker.punctuator.partitions == {0, 1} and worker.ingest._wanted == {0, 1}
