"""The due-time index (kafka.due_index) and the punctuator's horizon over it: memory holds what comes due
within the horizon, not every schedule; an entry leaves the index only once the watermark covers its fire;
a new owner over the same index catches up exactly what the watermark does not cover."""

from __future__ import annotations

from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from scheduler.domain.model import CronTrigger, FrequencyTrigger, ScheduleKey, TimeUnit
from scheduler.kafka.due_index import COMPLETE, DueIndex, MemoryDB, bound, due_key, elapsed_key, parse
from scheduler.wire.codec import key_bytes
from scheduler.worker.punctuator import HORIZON_MS, Punctuator
from tests.unit.test_punctuator import T0, Harness, S, dues_by_name, state

pytestmark = pytest.mark.unit


def _entries(index: DueIndex, partition: int = 0, unit: TimeUnit = S) -> list[tuple[str, int, int]]:
    """(name, due - T0, version) of every entry of the partition's index."""
    return [(key_name(e.key), e.due - T0, e.version) for e in index.scan(partition, unit, b"", 2**62)]


def key_name(key: bytes) -> str:
    from scheduler.wire.codec import key_from_bytes

    return key_from_bytes(key).name


@pytest.mark.parametrize("name", ["a", "nightly/ü", "x" * 300])
@pytest.mark.parametrize("path", ["0", "0.1.2"])
def test_an_index_key_parses_back_and_orders_by_unit_then_due(name: str, path: str) -> None:
    key = key_bytes(ScheduleKey("tenänt", name))
    raw = due_key(TimeUnit.MINUTES, T0, key, path, 7)
    e = parse(raw)
    assert (e.unit, e.due, e.key, e.path, e.version, e.raw) == (TimeUnit.MINUTES, T0, key, path, 7, raw)
    assert (
        due_key(TimeUnit.MINUTES, T0 - 1, key + b"\xff" * 9, path, 99)
        < raw
        < due_key(TimeUnit.MINUTES, T0 + 1, b"", "", 0)
    )
    assert bound(TimeUnit.MINUTES, T0) <= raw < bound(TimeUnit.MINUTES, T0 + 1) < bound(TimeUnit.HOURS, 0)
    assert raw[0] == 0xFF and key[0] != 0xFF  # never a schedule key


def test_a_rocksdb_index_scans_a_unit_between_instants_and_lists_the_elapsed_marks(tmp_path: Path) -> None:
    db = Rdict(str(tmp_path / "db"), Options(raw_mode=True))
    index = DueIndex(lambda partition: db)
    k1, k2 = key_bytes(ScheduleKey("acme", "a")), key_bytes(ScheduleKey("acme", "b"))
    db[k1] = b"a schedule"  # the table's own entries sort before the index
    index.write(
        0,
        [
            (due_key(S, T0 + 5, k1, "0", 1), b""),
            (due_key(S, T0, k2, "0", 1), b""),
            (due_key(TimeUnit.MINUTES, T0, k1, "1", 1), b""),
            (elapsed_key(k2), b""),
            (COMPLETE, b""),
        ],
    )
    assert [(e.due - T0, e.key) for e in index.scan(0, S, b"", T0 + 5)] == [(0, k2), (5, k1)]
    assert [e.due - T0 for e in index.scan(0, S, bound(S, T0 + 1), T0 + 4)] == []
    assert [e.path for e in index.scan(0, TimeUnit.MINUTES, b"", T0)] == ["1"]
    assert list(index.elapsed(0)) == [k2] and index.complete(0)
    index.write(0, [(due_key(S, T0, k2, "0", 1), None)])
    assert [e.key for e in index.scan(0, S, b"", 2**62)] == [k1]
    db.close()


def test_a_memory_db_iterates_in_key_order_while_written() -> None:
    db = MemoryDB()
    for k in (b"c", b"a", b"e"):
        db.put(k, b"")
    seen = []
    for key, _ in db.items(from_key=b"b"):
        seen.append(key)
        db.delete(key)
        db.put(b"d", b"")
    assert seen == [b"c", b"d", b"e"]


async def test_memory_holds_the_schedules_due_within_the_horizon_not_every_schedule() -> None:
    h = Harness(T0 - 1)
    daily = [state(f"d{i:04d}", CronTrigger(f"0 {i % 60} {i // 60 % 24} * * *")) for i in range(1_000)]
    fast = [state(f"f{i}", FrequencyTrigger(S, 5, T0)) for i in range(10)]
    await h.assign(0, [*daily, *fast], {S: T0 - 1})
    assert sorted(dues_by_name(await h.tick_at(T0))) == [("d0000", 0), *((f"f{i}", 0) for i in range(10))]
    await h.punctuator.flush_progress()  # (the fired entries go once the watermark covers them)
    assert len(_entries(h.punctuator.index)) == 1_010  # every schedule is in the index ...
    assert h.punctuator.compiled_count(0) == 10  # ... in memory only the ones due within the horizon
    fires = await h.tick_at(T0 + 60_000)  # a minute on: the fast ones 12 times each, and minute 1's daily
    assert sorted(dues_by_name(fires)) == sorted(
        [("d0001", 60_000), *((f"f{i}", d) for i in range(10) for d in range(5_000, 60_001, 5_000))]
    )


async def test_a_fired_entry_leaves_the_index_only_once_the_watermark_covers_it() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("a")], {S: T0 - 1})  # every 10 s from T0
    h.mode = "pending"  # the broker has not acknowledged the fire yet
    assert dues_by_name(await h.tick_at(T0)) == [("a", 0)]
    await h.punctuator.flush_progress()
    assert _entries(h.punctuator.index) == [("a", 0, 1), ("a", 10_000, 1)]  # both: the watermark is before T0
    h.futures[-1].set_result(None)
    await h.punctuator.flush_progress()
    assert _entries(h.punctuator.index) == [("a", 10_000, 1)]


async def test_a_new_owner_over_the_same_index_catches_up_exactly_the_fire_the_watermark_missed() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("a"), state("b", FrequencyTrigger(S, 3_600, T0 + 1_000))], {S: T0 - 1})
    h.mode = "pending"
    assert dues_by_name(await h.tick_at(T0)) == [("a", 0)]  # produced, never acknowledged: then a crash
    index = h.punctuator.index

    h2 = Harness(T0 + 2_000)
    h2.table = h.table
    h2.punctuator = Punctuator(h2.send, h2.load, h2.save_progress, h2.clock, index=index)
    await h2.punctuator.assign(0, None, {S: T0 - 1})  # the index is complete: no schedule is read whole
    fires = h2.fired()
    assert [(f.key.name, f.due_at - T0, f.catch_up) for f in fires] == [("a", 0, True), ("b", 1_000, True)]
    assert dues_by_name(await h2.tick_at(T0 + 10_000)) == [("a", 10_000)]  # and on: no fire twice
    assert dues_by_name(await h2.tick_at(T0 + 19_999)) == []
    await h2.punctuator.flush_progress()
    assert sorted(_entries(index)) == [("a", 20_000, 1), ("b", 3_601_000, 1)]  # the leftovers are gone


async def test_entries_of_an_old_version_or_a_deleted_schedule_are_dropped_not_fired() -> None:
    h = Harness(T0 - 1)
    a, b = state("a"), state("b")
    await h.assign(0, [a, b], {S: T0 - 1})
    h.clock.now = T0 - 500
    a2 = state("a", FrequencyTrigger(S, 7, T0 + 3_000), active_since=T0 - 500)
    a2 = type(a2)(a2.schedule, a2.created_at, a2.updated_at, a2.active_since, version=2)
    kb = h.put(0, a2)
    h.punctuator.upsert(0, kb, a2)
    del h.table[(0, key_bytes(ScheduleKey("acme", "b")))]
    h.punctuator.remove(0, key_bytes(ScheduleKey("acme", "b")))
    fires = [*await h.tick_at(T0), *await h.tick_at(T0 + 3_000), *await h.tick_at(T0 + 10_000)]
    assert dues_by_name(fires) == [("a", 3_000), ("a", 10_000)]
    await h.punctuator.flush_progress()
    h2 = Harness(T0 + 10_500)
    h2.table = h.table
    h2.punctuator = Punctuator(h2.send, h2.load, h2.save_progress, h2.clock, index=h.punctuator.index)
    await h2.punctuator.assign(0, None, {S: T0 + 10_000})
    assert h2.fired() == []
    assert [(n, v) for n, _, v in _entries(h.punctuator.index)] == [("a", 2)]


async def test_after_a_long_stall_the_horizon_is_loaded_before_it_fires() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("a")], {S: T0 - 1})
    fires = await h.tick_at(T0 + 3 * HORIZON_MS)  # nothing ran for three horizons: every due fires, late
    assert [d for _, d in dues_by_name(fires)][0] == 0 and len(fires) >= 1


async def test_an_instant_staged_by_an_owner_that_lost_the_partition_fires_once_when_it_comes_back() -> None:
    # staged ahead (its next due already in the index), then the partition is revoked before the instant and
    # assigned again: both entries are ahead of the watermark; the earlier one fires, then the next, once each
    h = Harness(T0 - 300)
    await h.assign(0, [state("a")], {S: T0 - 1_000})
    await h.punctuator.horizon.fill(S, T0 - 300 + HORIZON_MS)
    await h.punctuator._stage(S, T0 + 200, None)
    h.punctuator.revoke(0)
    h.clock.now = T0 - 100
    await h.punctuator.assign(0, None, {S: T0 - 1_000})
    fires = [*await h.tick_at(T0), *await h.tick_at(T0 + 10_000), *await h.tick_at(T0 + 19_999)]
    assert dues_by_name(fires) == [("a", 0), ("a", 10_000)]
