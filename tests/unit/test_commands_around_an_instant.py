"""Commands that write a schedule around one of its instants — while its fires are staged, sent ahead,
or being fired late; between the sending and the commit; after a stall of the timer — never take the instant
away and never make it twice (docs: Design, Delivery, "Commands around an instant"). Each test names the
fault it found; most were found by the randomized test_fire_once_through_updates."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

from scheduler.domain.model import FrequencyTrigger, ScheduleState
from scheduler.worker.punctuator import HORIZON_MS
from tests.unit.test_punctuator import T0, Harness, S, state
from tests.unit.test_punctuator_staging import _fires, _on_send, _sending_ahead

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("again", ["update", "delete"])
async def test_a_fire_owed_at_an_instant_stays_owed_through_a_command_after_the_instant_came(again: str):
    """stop 81's CI (32 instants of `maxFires` schedules missed): an update while the instant was sent made
    its fire there owed (its staged fire dropped), and a second command came after the instant, before the
    partition's commit sent what it owed. The instant was due before that command: its fire is sent all the
    same, as the version that owed it (as a staged fire is: held.still_due)."""
    h = Harness(T0 - 1)
    p = h.punctuator
    a, b = state("a"), state("b")
    await _sending_ahead(h, [a, b])
    b2 = dataclasses.replace(b, version=b.version + 1)
    _on_send(h, 0, lambda: p.upsert(0, h.put(0, b2), b2, b))  # (as a's fire is sent: b's is staged)
    await p._send_ahead(S, T0, h.clock.now)
    assert _fires(h) == [("a", T0, T0)]
    h.clock.now = T0 + 5  # (the instant came; the partition's commit has not begun yet)
    if again == "update":
        b3 = dataclasses.replace(b, version=b.version + 2, active_since=T0 + 5)
        p.upsert(0, h.put(0, b3), b3, b2)
    else:
        p.remove(0, h.put(0, b2))
    await p.settle(0)
    assert [(n, due) for n, due, _ in _fires(h)] == [("a", T0), ("b", T0)]
    await p.settle(0)
    assert len(h.sent) == 2, "owed once"


async def test_a_fire_unsure_at_an_instant_stays_so_through_a_command_after_the_instant_came():
    """The same while the instant is still being sent (past it: a long sending): the staged fire of the
    first version is dropped after the second command, and the instant is owed all the same."""
    h = Harness(T0 - 1)
    p = h.punctuator
    a, b, c = state("a"), state("b"), state("c")
    await _sending_ahead(h, [a, c, b])  # (staged in this order)
    b2 = dataclasses.replace(b, version=b.version + 1)
    b3 = dataclasses.replace(b, version=b.version + 2, active_since=T0 + 5)

    def first() -> None:  # (as a's fire is sent: b's is staged)
        p.upsert(0, h.put(0, b2), b2, b)

        def second() -> None:
            h.clock.now = T0 + 5
            p.upsert(0, h.put(0, b3), b3, b2)

        h.on_send = second  # (as the next fire, c's, is sent: b's staged fire not emitted yet)

    _on_send(h, 0, first)
    await p._send_ahead(S, T0, h.clock.now)
    await p.settle(0)
    assert sorted((n, due) for n, due, _ in _fires(h)) == [("a", T0), ("b", T0), ("c", T0)]
    await p.settle(0)
    assert len(h.sent) == 3, "sent once"


async def test_a_staged_fire_of_an_older_version_dropped_while_the_instant_is_sent_owes_nothing():
    """Two versions staged at the instant (one staged, then replaced and its successor staged as the sending
    began); a third written at the instant while it is sent. The oldest one's fire is dropped, the second
    one's is sent (it was current when the instant came): only the drop of the second's would owe the fire.
    test_fire_once_through_updates found the duplicate."""
    h = Harness(T0 - 1)
    p = h.punctuator
    b, a = state("b"), state("c")  # (staged in this order: by key)
    await _sending_ahead(h, [b, a])
    await p._stage(S, T0, None)
    a2 = dataclasses.replace(
        a, version=a.version + 1, schedule=dataclasses.replace(a.schedule, data={"v": "2"})
    )
    p.upsert(0, h.put(0, a2), a2, a)  # (before the sending: a2 is armed at the instant, staged with it)
    a3 = dataclasses.replace(a2, version=a.version + 2, active_since=T0)

    def at_the_instant() -> None:
        h.clock.now = T0
        p.upsert(0, h.put(0, a3), a3, a2)

    _on_send(h, 0, at_the_instant)  # (as b's fire is sent: c's two are staged after it)
    await p._send_ahead(S, T0, h.clock.now)
    await p.settle(0)
    assert [(n, due) for n, due, _ in _fires(h)] == [("b", T0), ("c", T0)]
    assert [f.data for f in h.fired() if f.key.name == "c"] == [{"v": "2"}]


async def test_a_schedule_written_after_a_stall_of_its_timer_fires_each_instant_it_was_due_at_by_then():
    """The timer stalled past several instants (a starved loop): a command then writes the schedule. Each
    instant of the version it replaced due by then fires, as that version, not only the one memory held
    armed; the new version's dues come after the write."""
    h = Harness(T0 - 1)
    p = h.punctuator
    a = state("a")  # every 10 s from T0
    await h.assign(0, [a], {S: T0 - 1})
    await p.horizon.fill(S, h.clock.now + HORIZON_MS)
    h.clock.now = T0 + 25_000
    a2 = dataclasses.replace(a, version=a.version + 1, active_since=h.clock.now)
    p.upsert(0, h.put(0, a2), a2, a)
    assert [f.due_at for f in await h.tick_at(T0 + 25_001)] == [T0, T0 + 10_000, T0 + 20_000]
    assert [f.due_at for f in await h.tick_at(T0 + 30_000)] == [T0 + 30_000]


def _every(name: str, seconds: int, start: int, created_at: int) -> ScheduleState:
    st = state(name, FrequencyTrigger(S, seconds, start))
    return dataclasses.replace(st, created_at=created_at, updated_at=created_at, active_since=created_at)


@pytest.mark.parametrize("same_ms", [False, True])
async def test_a_schedule_deleted_and_inserted_again_never_fires_at_an_instant_of_the_deleted_one(
    same_ms: bool,
) -> None:
    """An INSERT numbers its versions from 1 again: the deleted version 1's index entry (due at T0 + 20 s,
    beyond the horizon when it was deleted, before the new one's first due) was loaded as the new one's and
    fired it then, an instant its definition does not have. The index entry names the schedule's creation now; and a DELETE drops its
    next entries, for an INSERT in the same millisecond as the one it deletes (the same creation)."""
    h = Harness(T0 - 5_000)
    p = h.punctuator
    await h.assign(0, [], {S: T0 - 5_001})
    created = T0 - 5_000 if same_ms else T0 - 60_000
    old = _every("a", 40, T0 + 20_000, created)  # (T0 + 20 s, T0 + 60 s)
    kb = h.put(0, old)
    p.upsert(0, kb, old)
    del h.table[(0, kb)]
    if same_ms:
        p.remove(0, kb, old)
    else:
        p.remove(0, kb)  # (no state told: its entries are left for the loader)
    new = _every("a", 20, T0 + 30_000, T0 - 5_000)  # (T0 + 30 s, T0 + 50 s)
    p.upsert(0, h.put(0, new), new)
    assert await h.tick_at(T0 + 20_001) == []
    assert [f.due_at for f in await h.tick_at(T0 + 30_001)] == [T0 + 30_000]


async def test_an_instant_sent_moved_off_and_back_by_two_updates_fires_once():
    """Its fire at the instant sent ahead; an UPDATE then moves the schedule off the instant, and another
    back on it, both before the commit. The second's previous version does not come due there, so it owed
    the instant: a second fire. An instant fired by an earlier version is remembered (Held.settled)."""
    h = Harness(T0 - 1)
    p = h.punctuator
    a = state("a", FrequencyTrigger(S, 20, T0))  # (due at T0)
    await _sending_ahead(h, [a])
    await p._send_ahead(S, T0, h.clock.now)
    off = dataclasses.replace(
        a, version=2, schedule=dataclasses.replace(a.schedule, trigger=FrequencyTrigger(S, 20, T0 + 10_000))
    )
    p.upsert(0, h.put(0, off), off, a)
    back = dataclasses.replace(a, version=3)
    p.upsert(0, h.put(0, back), back, off)
    await p.settle(0)
    assert [(n, due) for n, due, _ in _fires(h)] == [("a", T0)]


async def test_a_schedule_inserted_deleted_and_inserted_again_in_one_millisecond_is_created_after_it(
    tmp_path: Path,
) -> None:
    """Its creation tells its due-time index entries from the deleted one's: the same millisecond would not
    (the randomized test found the fire at an instant of the first definition it left)."""
    from aiokafka.structs import ConsumerRecord

    from scheduler.domain.commands import Action, ScheduleCommand
    from scheduler.kafka.config import Settings
    from scheduler.kafka.partitioner import kafka_partition
    from scheduler.wire.codec import encode_command, key_bytes
    from scheduler.worker.app import Worker

    worker = Worker(
        Settings(app_id="app", data_dir=tmp_path, auth="off", partitions=4, transactions="off"),
        clock=lambda: T0,
    )
    worker.topics._known.add("out")  # (no broker to ask whether the output topic exists)
    first, second = state("a").schedule, state("a", FrequencyTrigger(S, 20, T0)).schedule
    kb = key_bytes(first.key)
    partition = kafka_partition(kb, 4)

    async def apply(offset: int, command: ScheduleCommand) -> None:
        value = encode_command(command)
        record = ConsumerRecord(
            "app-commands", partition, offset, T0, 0, kb, value, None, len(kb), len(value), []
        )
        await worker.handle_command(SimpleNamespace(message=record))
        worker.write_local()

    await apply(0, ScheduleCommand(first.key, Action.INSERT, first))
    assert worker.local_state(kb).created_at == T0  # type: ignore[union-attr]
    await apply(1, ScheduleCommand(first.key, Action.DELETE))
    await apply(2, ScheduleCommand(second.key, Action.INSERT, second))
    again = worker.local_state(kb)
    assert again is not None and again.schedule.trigger == second.trigger
    assert (again.created_at, again.active_since) == (T0 + 1, T0)
