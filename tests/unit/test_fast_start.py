"""A worker's start and rebalances without Faust's waste (scheduler.kafka.tables): the table manager starts
without its one-second sleep, and a rebalance collects garbage only when it dropped an open database."""

from __future__ import annotations

import gc
from types import SimpleNamespace
from typing import Any

import faust
import pytest
from faust.stores.rocksdb import Store
from faust.types import TP

from scheduler.kafka.tables import collect_only_what_was_closed, start_tables_at_once

pytestmark = pytest.mark.unit


def _store(open_partitions: set[int]) -> tuple[Any, Any]:
    """What Store.revoke_partitions reads of itself and of its table."""
    table = SimpleNamespace(changelog_topic=SimpleNamespace(topics={"app-schedules-changelog"}))
    store = SimpleNamespace(
        _dbs={p: object() for p in open_partitions}, logger=SimpleNamespace(info=lambda *a, **k: None)
    )
    return store, table


def test_a_rebalance_that_drops_no_open_database_collects_no_garbage(monkeypatch: pytest.MonkeyPatch) -> None:
    collect_only_what_was_closed()
    collected: list[object] = []
    monkeypatch.setattr(gc, "collect", lambda *a: collected.append(a) or 0)
    store, table = _store({1})
    Store.revoke_partitions(store, table, {TP("app-schedules-changelog", 0), TP("app-other", 1)})
    assert collected == [] and set(store._dbs) == {1}


def test_a_rebalance_that_drops_an_open_database_still_releases_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """(a database's lock goes with its last reference: the partition may be opened again here later)"""
    collect_only_what_was_closed()
    collected: list[object] = []
    monkeypatch.setattr(gc, "collect", lambda *a: collected.append(a) or 0)
    store, table = _store({0, 1})
    Store.revoke_partitions(store, table, {TP("app-schedules-changelog", 0)})
    assert len(collected) == 1 and set(store._dbs) == {1}


async def test_the_table_manager_starts_its_tables_without_sleeping(tmp_path: Any) -> None:
    app = faust.App("fast-start", broker="kafka://127.0.0.1:1", store="memory://", datadir=str(tmp_path))
    manager = app.tables
    done: list[str] = []

    async def no_sleep(*_: Any) -> None:
        raise AssertionError("the table manager slept")

    async def update_channels() -> None:
        done.append("channels")

    async def recovery_start() -> None:
        done.append("recovery")

    start_tables_at_once(app)
    manager.sleep = no_sleep
    manager._update_channels = update_channels
    manager._recovery = SimpleNamespace(start=recovery_start)
    await manager.on_start()
    assert done == ["channels", "recovery"]
