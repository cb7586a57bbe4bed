"""A partition whose producer fenced its previous owner only after its tables' restore began may lack what
that owner committed meanwhile: the worker gives it back and rejoins, so it is restored again, instead of
firing from tables that miss a commit."""

from __future__ import annotations

from pathlib import Path

import pytest

import scheduler.worker.app as app_module
from scheduler.kafka.config import Settings
from scheduler.kafka.transactions import _Txn
from scheduler.worker.app import Worker
from tests.unit.test_transactions import FakeBatchedProducer

pytestmark = pytest.mark.unit


async def test_a_partition_fenced_after_its_restore_began_is_given_back_and_restored_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = Worker(Settings(app_id="app", data_dir=tmp_path, auth="off", partitions=2))
    assert worker.txns is not None
    rejoins: list[object] = []
    monkeypatch.setattr(app_module, "recovery_is_current", lambda app: True)
    monkeypatch.setattr(app_module, "request_rejoin", rejoins.append)
    monkeypatch.setattr(worker, "active_partitions", lambda: {0, 1})
    for p in (0, 1):  # both producers have started by the time recovery completes
        worker.txns._txns[p] = _Txn(FakeBatchedProducer([]))  # type: ignore[arg-type]
    worker._fenced_late = {1}  # partition 1's had not within FENCE_BEFORE_RESTORE_S

    await worker._on_recovered()

    assert worker.punctuator.partitions == {0}  # 0 fires; 1 does not until it is restored again
    assert worker.txns.partitions == {0} and rejoins == [worker.faust_app]
    assert worker.ingest._wanted == {0} and worker._fenced_late == set()
