"""The freeze guard (scheduler/worker/freeze.py): without transactions, a worker that stood still longer than
its group session survives drops its work once a rebalance follows, and goes on if none does."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from faust.stores.rocksdb import Store
from faust.types import TP
from rocksdict import Options, Rdict

from scheduler.worker import freeze
from scheduler.worker.freeze import FreezeGuard
from scheduler.worker.ownership import Ownership

pytestmark = pytest.mark.unit


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    c = _Clock()
    monkeypatch.setattr(freeze, "_clock", c)
    return c


def _guard(app: SimpleNamespace) -> FreezeGuard:
    guard = FreezeGuard(app, session_timeout_s=8.0, heartbeat_interval_s=1.0)  # suspect past 6 s
    guard._thread = threading.current_thread()  # (started, without a ticking thread: the tests tick)
    guard._tick = freeze._clock()
    return guard


async def test_work_goes_on_after_a_stall_the_session_survives(clock: _Clock) -> None:
    app = SimpleNamespace(rebalancing=False, rebalancing_count=3)
    guard = _guard(app)
    clock.now += 5.9
    assert await guard.hold()
    assert not guard.suspect() and guard.freezes == 0


async def test_a_freeze_past_the_session_drops_work_once_a_rebalance_begins(clock: _Clock) -> None:
    app = SimpleNamespace(rebalancing=False, rebalancing_count=3)
    guard = _guard(app)
    clock.now += 16.0  # SIGSTOP for 16 s: no tick meanwhile; the first record after the wake sees the gap
    held = asyncio.ensure_future(guard.hold())
    await asyncio.sleep(0.1)
    assert not held.done(), "it waits for the coordinator's verdict before writing anything"
    app.rebalancing, app.rebalancing_count = True, 4  # the first heartbeat after the wake: rejoin
    assert await asyncio.wait_for(held, 1) is False
    assert await guard.hold() is False, "everything is dropped while that rebalance runs"
    guard.recovered()  # the new assignment's tables are restored: Faust resumes the streams, then ends
    assert app.rebalancing, "(the rebalance, which it marks ended only after the streams resumed)"
    assert await guard.hold() is True, "a record of the new assignment is handled, not dropped"
    assert guard.freezes == 1 and guard.dropped == 2


async def test_a_recovery_of_an_assignment_from_before_the_freeze_does_not_end_it(clock: _Clock) -> None:
    app = SimpleNamespace(rebalancing=True, rebalancing_count=4)
    guard = _guard(app)
    clock.now += 10.0
    assert guard.suspect()
    guard.recovered()  # the rebalance that was running when it froze: the coordinator has expired it since
    assert guard.suspect()
    app.rebalancing = False  # (a rebalance that ended without a recovery callback: nothing was assigned)
    app.rebalancing_count = 5
    assert not guard.suspect()


async def test_a_rebalance_already_running_at_the_wake_drops_work_at_once(clock: _Clock) -> None:
    app = SimpleNamespace(rebalancing=True, rebalancing_count=4)
    guard = _guard(app)
    clock.now += 10.0
    assert await asyncio.wait_for(guard.hold(), 1) is False


async def test_work_goes_on_when_no_rebalance_follows_within_the_session(clock: _Clock) -> None:
    app = SimpleNamespace(rebalancing=False, rebalancing_count=3)
    guard = _guard(app)
    clock.now += 7.0  # past the limit (6 s), but the coordinator had not expired it after all
    held = asyncio.ensure_future(guard.hold())
    await asyncio.sleep(0.1)
    assert not held.done()
    clock.now += 8.0  # a whole session without a rebalance
    assert await asyncio.wait_for(held, 1) is True
    assert not guard.suspect() and guard.dropped == 0


def test_the_time_before_it_starts_is_no_freeze(clock: _Clock) -> None:
    app = SimpleNamespace(rebalancing=True, rebalancing_count=1)
    guard = FreezeGuard(app, session_timeout_s=8.0, heartbeat_interval_s=1.0)
    clock.now += 30.0  # the app starting: topics, the first rebalance
    assert not guard.suspect()
    guard.start()
    try:
        clock.now += 0.5
        assert not guard.suspect() and guard.freezes == 0
    finally:
        guard.stop()


def test_the_thread_sees_a_freeze_before_any_record_does(clock: _Clock) -> None:
    app = SimpleNamespace(rebalancing=False, rebalancing_count=0)
    guard = _guard(app)
    clock.now += 0.1
    guard._seen(clock.now)
    assert guard.freezes == 0
    clock.now += 9.0
    guard._seen(clock.now)  # what the ticking thread does when it runs again
    assert guard.freezes == 1 and guard.suspect()


class _Tables(dict):  # type: ignore[type-arg]
    """Faust's table manager as the worker wraps it: its tables, and on_rebalance (which reads their offsets)."""

    def __init__(self, tables: dict[str, Any]) -> None:
        super().__init__(tables)
        self.offsets_read: list[dict[str, int | None]] = []

    async def on_rebalance(self, *args: Any, **kwargs: Any) -> None:
        self.offsets_read.append(
            {name: Store.persisted_offset(t.data, TP(name, 0)) for name, t in self.items()}
        )


def _table(path: Path) -> Any:
    db = Rdict(str(path), Options(raw_mode=True))
    return SimpleNamespace(data=SimpleNamespace(offset_key=Store.offset_key, _db_for_partition=lambda p: db))


async def test_the_rebalances_after_a_freeze_restore_the_partitions_owned_from_their_changelogs_start(
    tmp_path: Path,
) -> None:
    """A frozen owner's late changelog writes, acknowledged after the next owner's, moved the stored offset
    past them: the partition's restore must read its changelog from the start, its data kept."""
    tables = _Tables({"trigger-progress": _table(tmp_path / "a"), "job-queue": _table(tmp_path / "b")})
    for t in tables.values():
        Store.set_persisted_offset(t.data, TP("x", 0), 41)
        t.data._db_for_partition(0)[b"k"] = b"v"
    suspect = [False]
    worker = SimpleNamespace(
        faust_app=SimpleNamespace(tables=tables, rebalancing_count=1),
        freeze=SimpleNamespace(suspect=lambda: suspect[0]),
    )
    ownership = Ownership(worker)  # type: ignore[arg-type]
    ownership.owned = {0}
    ownership._restore_whole_after_a_freeze()
    await tables.on_rebalance()  # no freeze: offsets kept
    suspect[0] = True
    await tables.on_rebalance()
    await tables.on_rebalance()  # (again until an assignment is restored)
    assert tables.offsets_read == [
        {"trigger-progress": 41, "job-queue": 41},
        {"trigger-progress": None, "job-queue": None},
        {"trigger-progress": None, "job-queue": None},
    ]
    assert all(t.data._db_for_partition(0)[b"k"] == b"v" for t in tables.values())


def test_an_assignment_made_before_a_freeze_past_the_session_is_stale_and_the_next_one_is_not(
    clock: _Clock,
) -> None:
    """With transactions (ownership.py): a worker frozen between the group's assignment and its take-up must
    not start that assignment's producers; they would fence the partitions' owners of the next one."""
    app = SimpleNamespace(rebalancing=True, rebalancing_count=4)
    guard = _guard(app)
    clock.now += 5.0  # shorter than the session could have run out: nothing is stale
    assert not guard.stale(4)
    clock.now += 14.5  # SIGSTOP between rebalance 4's sync and its take-up
    assert guard.stale(4) and guard.stale(3)
    app.rebalancing_count = 5  # the rejoin after the wake
    assert not guard.stale(5)
