"""Delayed messages' pure logic (scheduler/domain/delayed.py): etf1's headers, limits, the storage keys."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rocksdict import Options, Rdict

from scheduler.domain.delayed import (
    DUE,
    MAX_VALUE_BYTES,
    DelayedMessage,
    InvalidDelayed,
    due_key,
    due_until,
    from_delayed_record,
    instant_of,
    parse_epoch,
)
from scheduler.domain.delayed_counts import within
from scheduler.kafka import tables
from scheduler.wire.delayed_codec import encode_delayed
from scheduler.worker import delayed as delayed_module
from scheduler.worker.counters import WorkerCounts
from scheduler.worker.delayed import DelayedMessages, decode_message, topic_of

pytestmark = pytest.mark.unit

TOPIC = [("scheduler-target-topic", b"out")]


@pytest.mark.parametrize(
    ("raw", "ms"),
    [
        (b"1795870100", 1_795_870_100_000),  # etf1: seconds
        (b"1795870100.25", 1_795_870_100_250),
        (b"1795870100250", 1_795_870_100_250),  # ms
        (b" 0 ", 0),
        (b"0", 0),
        (b"99999999999", 99_999_999_999_000),  # (the largest in seconds)
        (b"100000000000", 100_000_000_000),  # (the smallest in ms)
    ],
)
def test_an_epoch_is_seconds_or_milliseconds(raw: bytes, ms: int) -> None:
    assert parse_epoch(raw) == ms


@pytest.mark.parametrize("raw", [b"soon", b"-5", b"nan", b"", "١٢".encode(), b"\xff"])
def test_an_epoch_that_is_no_instant_is_refused(raw: bytes) -> None:
    with pytest.raises(InvalidDelayed, match="scheduler-epoch"):
        parse_epoch(raw)


def test_a_record_keeps_its_headers_and_is_delivered_with_its_id_and_when() -> None:
    headers = [("scheduler-epoch", b"1795870100"), *TOPIC, ("scheduler-target-key", b"k"), ("trace", b"t")]
    m = from_delayed_record(b"id-1", b"payload", headers, received_at=7)
    assert m is not None
    assert (m.id, m.deliver_at, m.topic, m.delivered_key, m.value) == (
        b"id-1", 1_795_870_100_000, "out", b"k", b"payload",
    )  # fmt: skip
    assert m.delivered_headers(99)[-3:] == [
        ("trace", b"t"),
        ("scheduler-id", b"id-1"),
        ("scheduler-delivered-at", b"99"),
    ]
    assert decode_message(encode_delayed(m)) == m


def test_without_a_target_key_the_id_is_the_delivered_key() -> None:
    m = from_delayed_record(b"id-1", b"x", [("scheduler-epoch", b"5"), *TOPIC], 0)
    assert m is not None and m.delivered_key == b"id-1"


def test_a_tombstone_is_a_cancel() -> None:
    assert from_delayed_record(b"id-1", None, [], 0) is None


@pytest.mark.parametrize(
    ("key", "value", "headers", "reason"),
    [
        (b"i", b"v", TOPIC, "no scheduler-epoch"),
        (b"i", b"v", [("scheduler-epoch", b"5")], "no scheduler-target-topic"),
        (b"", b"v", [("scheduler-epoch", b"5"), *TOPIC], "needs an id"),
        (b"i", b"v", [("scheduler-epoch", b"5"), ("scheduler-target-topic", b"a b")], "1-249 characters"),
        (b"i", b"v", [("scheduler-epoch", b"5"), ("scheduler-target-topic", b".")], "not . or .."),
        (b"i", b"v", [("scheduler-epoch", b"5"), ("scheduler-target-topic", b"..")], "not . or .."),
        (b"i", b"v" * (MAX_VALUE_BYTES + 1), [("scheduler-epoch", b"5"), *TOPIC], "at most"),
        (b"i", b"v", [("scheduler-epoch", b"99999999999999"), *TOPIC], "after 2200"),
    ],
)
def test_what_cannot_be_held_names_why(key: bytes, value: bytes, headers: list, reason: str) -> None:
    with pytest.raises(InvalidDelayed, match=reason):
        from_delayed_record(key, value, headers, 0)


def test_due_keys_sort_by_instant_then_id_and_due_until_bounds_them() -> None:
    keys = sorted([due_key(2_000, b"a"), due_key(1_000, b"z"), due_key(1_000, b"b"), due_key(70_000, b"")])
    assert [instant_of(k) for k in keys] == [1_000, 1_000, 2_000, 70_000]
    assert keys[0].endswith(b"b")
    assert [k for k in keys if k < due_until(2_000)] == keys[:3]
    assert [k for k in keys if k < due_until(1_999)] == keys[:2]


def test_a_message_round_trips_with_null_key_value_and_header() -> None:
    m = DelayedMessage(b"\x00\xff", 5, "t", None, None, (("h", None),), 1)
    assert decode_message(encode_delayed(m)) == m


# --- the service (scheduler/worker/delayed.py) on a RocksDB table, without transactions -------------


class _Table:
    """One partition of a raw Faust table as the service uses it: get / [] / del in the current event's
    partition, its RocksDB, and the changelog records it sends."""

    def __init__(self, path: Path) -> None:
        self.db = Rdict(str(path), Options(raw_mode=True))
        self.data = SimpleNamespace(offset_key=b"__offset__", _db_for_partition=lambda p: self.db)
        self.changelog: list[tuple[int, bytes, bytes | None]] = []

    def get(self, key: bytes) -> bytes | None:
        return self.db.get(key)

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.db[key] = value

    def __delitem__(self, key: bytes) -> None:
        del self.db[key]

    def send_changelog(self, partition: int, key: bytes, value: bytes | None) -> None:
        self.changelog.append((partition, key, value))


class _Punctuator:
    """The partitions taken up, telling its `moved` callbacks when they change (as Punctuator does)."""

    def __init__(self, partitions: set[int]) -> None:
        self._partitions = partitions
        self.moved: list[Any] = []

    @property
    def partitions(self) -> set[int]:
        return set(self._partitions)

    @partitions.setter
    def partitions(self, partitions: set[int]) -> None:
        self._partitions = set(partitions)
        for moved in self.moved:
            moved()


class _Worker:
    def __init__(self, table: _Table) -> None:
        self.delayed = table
        self.txns = None
        self.now = 1_795_000_000_000  # (an epoch below 10^11 would read as seconds)
        self.clock = lambda: self.now
        self.counts = WorkerCounts()
        self.sent: list[tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]]]] = []
        self.dead: list[str] = []
        self.refused: dict[str, str] = {}  # topic -> why the broker refuses to create it
        self.topics = SimpleNamespace(ensure=self._ensure, refusal=self._refusal, known=lambda topic: False)
        self.punctuator = _Punctuator({0})

    async def _ensure(self, *topics: str) -> None:
        pass

    async def _refusal(self, topic: str) -> str | None:  # (TopicCreator.refusal's words)
        why = self.refused.get(topic)
        return None if why is None else f"the broker refuses to create topic {topic}: {why}"

    async def produce(self, topic, key, value, partition=None, headers=None):  # type: ignore[no-untyped-def]
        self.sent.append((topic, key, value, headers or []))
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def may_work(self) -> bool:
        return True

    async def dead_letter(self, event: Any, reason: str) -> None:
        self.dead.append(reason)


def _event(key: bytes, value: bytes | None, at: int | None = None, topic: str = "out") -> Any:
    headers = (
        []
        if at is None
        else [("scheduler-epoch", str(at).encode()), ("scheduler-target-topic", topic.encode())]
    )
    return SimpleNamespace(message=SimpleNamespace(key=key, value=value, headers=headers, partition=0))


async def test_held_replaced_cancelled_and_delivered_in_due_order_once(tmp_path: Path) -> None:
    worker = _Worker(_Table(tmp_path / "db"))
    service = DelayedMessages(worker)  # type: ignore[arg-type]
    now = worker.now
    for event in (
        _event(b"late", b"L", now + 5_000),
        _event(b"b", b"B", now - 10),
        _event(b"a", b"A", now - 20),
        _event(b"gone", b"G", now - 30),
        _event(b"gone", None),  # cancelled
        _event(b"moved", b"M1", now - 40),
        _event(b"moved", b"M2", now + 60_000),  # replaced: due later
        _event(b"bad", b"x"),  # no instant
    ):
        await service.handle(event)
    assert await service.deliver_due() == 2
    assert [(key, value) for _, key, value, _ in worker.sent] == [(b"a", b"A"), (b"b", b"B")]
    assert await service.deliver_due() == 0, "delivered once: its entries went with it"
    assert service.pending(0, b"moved") is not None and service.pending(0, b"a") is None
    worker.now += 60_000
    assert await service.deliver_due() == 2
    assert [value for _, _, value, _ in worker.sent[2:]] == [b"L", b"M2"]
    assert len(worker.dead) == 1 and "scheduler-epoch" in worker.dead[0]
    events = worker.counts.events
    assert (events["delayedHeld"], events["delayedReplaced"], events["delayedCancelled"]) == (5, 1, 1)
    assert events["delayedDelivered"] == 4 and events["delayedRefused"] == 1
    assert list(worker.delayed.db.keys()) == [], "nothing left pending"


async def test_a_message_for_a_topic_the_broker_refuses_to_create_is_dead_lettered_not_held(
    tmp_path: Path,
) -> None:
    worker = _Worker(_Table(tmp_path / "db"))
    worker.refused["out.x"] = "InvalidTopicError: collides with existing topics: out_x"
    service = DelayedMessages(worker)  # type: ignore[arg-type]
    await service.handle(_event(b"m", b"x", worker.now - 1, topic="out.x"))
    await service.handle(_event(b"ok", b"y", worker.now - 1))
    assert await service.deliver_due() == 1 and [t for t, *_ in worker.sent] == ["out"]
    assert worker.dead == ["the broker refuses to create topic out.x: InvalidTopicError: collides with "
                           "existing topics: out_x"]  # fmt: skip
    assert worker.counts.events["delayedRefused"] == 1 and service.pending(0, b"m") is None


async def test_a_partition_with_a_message_long_past_due_is_overdue_until_it_is_delivered(
    tmp_path: Path,
) -> None:
    worker = _Worker(_Table(tmp_path / "db"))
    service = DelayedMessages(worker)  # type: ignore[arg-type]
    await service.handle(_event(b"soon", b"x", worker.now - 1_000))
    assert service.overdue(late_ms=2_000) == 0, "due a second ago: not late yet"
    await service.handle(_event(b"late", b"x", worker.now - 3_000))
    assert service.overdue(late_ms=2_000) == 1
    await service.deliver_due()
    assert service.overdue(late_ms=2_000) == 0


async def test_pending_counts_by_topic_and_minute_follow_writes_made_while_a_partition_is_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition taken up is counted a chunk a turn; a write behind the scan is counted as it lands, one
    ahead of it is left to the scan (domain/delayed_counts.py): the counts end equal to the store's."""
    monkeypatch.setattr(delayed_module, "COUNT_CHUNK", 3)
    worker = _Worker(_Table(tmp_path / "db"))
    service = DelayedMessages(worker)  # type: ignore[arg-type]
    now = worker.now
    minute = now // 60_000 * 60_000
    for i in range(7):  # before the partition is counted
        await service.handle(_event(f"m{i}".encode(), b"x", minute + 120_000 + i * 60_000, topic=f"t{i % 2}"))
    counts = service.pending_counts
    service.count_some()  # the first 3 (in due order)
    assert counts.counting() == [0] and sum(counts.by_topic().values()) == 3
    await service.handle(_event(b"m0", None))  # behind the scan: counted now
    await service.handle(
        _event(b"m6", b"y", minute + 900_000, topic="t9")
    )  # ahead: replaced, left to the scan
    await service.handle(_event(b"m1", b"y", minute + 60 * 60_000, topic="t1"))  # behind -> ahead
    service.count_some()
    service.count_some()
    assert counts.counting() == []
    assert counts.by_topic() == {"t0": 2, "t1": 3, "t9": 1}
    expected = {minute + 60_000 * k: 1 for k in (4, 5, 6, 7, 15, 60)}
    assert counts.by_minute() == expected
    await service.handle(_event(b"now", b"z", now - 5, topic="t0"))  # counted: the scan is over
    assert within(counts.by_minute(), now, [("1m", 60_000), ("1h", 3_600_000)]) == {
        "overdue": 0,
        "1m": 1,
        "1h": 7,
        "all": 7,
    }  # fmt: skip (at minute grain: the minute an hour from now's starts within the hour)
    assert await service.deliver_due() == 1
    assert counts.by_topic() == {"t0": 2, "t1": 3, "t9": 1}
    worker.punctuator.partitions = set()
    service.count_some()
    assert counts.by_topic() == {} and counts.counting() == [], "a partition given up is forgotten"


@pytest.mark.parametrize("id", [b"", b"a", b"x" * 200])
@pytest.mark.parametrize("topic", ["t", "orders.été", "t" * 249])
def test_the_topic_read_alone_is_the_decoded_messages(id: bytes, topic: str) -> None:
    for at in (0, 1_795_000_000_000, 2**62):
        m = DelayedMessage(id, at, topic, None, b"v", (), 1)
        assert topic_of(encode_delayed(m)) == decode_message(encode_delayed(m)).topic == topic


async def test_the_next_turn_is_at_the_first_instant_after_now(tmp_path: Path) -> None:
    worker = _Worker(_Table(tmp_path / "db"))
    service = DelayedMessages(worker)  # type: ignore[arg-type]
    assert service.next_due() is None
    for key, at in ((b"past", worker.now - 10), (b"soon", worker.now + 500), (b"later", worker.now + 2_000)):
        await service.handle(_event(key, b"x", at))
    assert service.next_due() == worker.now + 500, "one due already is the turn's, not the wake-up's"


async def _running(service: DelayedMessages) -> tuple[asyncio.Task[None], list[int]]:
    """The service's loop running, with a list that counts its turns (scans)."""
    turns: list[int] = []
    turn = service.turn

    async def counted() -> float:
        turns.append(1)
        return await turn()

    service.turn = counted  # type: ignore[method-assign]
    return asyncio.create_task(service.run()), turns


async def _stopped(service: DelayedMessages, task: asyncio.Task[None]) -> None:
    service.stop()
    await asyncio.wait_for(task, 2)


async def test_an_idle_loop_scans_only_when_something_changed_and_a_write_is_delivered_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delayed_module, "QUIET_MAX_S", 10.0)
    worker = _Worker(_Table(tmp_path / "db"))
    service = DelayedMessages(worker)  # type: ignore[arg-type]
    await service.handle(_event(b"later", b"x", worker.now + 60_000))
    task, turns = await _running(service)
    await asyncio.sleep(8 * delayed_module.TICK_S)
    assert len(turns) == 1, "ticks with nothing due and nothing changed do not scan"
    await service.handle(_event(b"now", b"N", worker.now - 1))  # (written: the next tick scans)
    await asyncio.sleep(3 * delayed_module.TICK_S)
    assert [value for _, _, value, _ in worker.sent] == [b"N"]
    await _stopped(service, task)


async def test_an_idle_loop_sleeps_until_a_change_instead_of_ticking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Quiet (nothing due, nothing changed), the loop does not wake every TICK_S to find that out: an idle
    worker's wake-ups (each a task step and a timer) were ~20 a second."""
    monkeypatch.setattr(delayed_module, "QUIET_MAX_S", 10.0)
    worker = _Worker(_Table(tmp_path / "db"))
    service = DelayedMessages(worker)  # type: ignore[arg-type]
    await service.handle(_event(b"later", b"x", worker.now + 60_000))
    looks: list[int] = []
    quiet_now = service._quiet_now

    def counted() -> bool:
        looks.append(1)
        return quiet_now()

    service._quiet_now = counted  # type: ignore[method-assign]
    task, turns = await _running(service)
    await asyncio.sleep(10 * delayed_module.TICK_S)
    assert len(turns) == 1 and len(looks) <= 2, "a quiet loop waits for a change"
    worker.punctuator.partitions = {1}  # (0 given up, 1 taken up: it wakes; one database for all here)
    await asyncio.sleep(3 * delayed_module.TICK_S)
    assert len(turns) == 2
    await service.handle(_event(b"now", b"N", worker.now - 1))  # (a write landing wakes it)
    await asyncio.sleep(3 * delayed_module.TICK_S)
    assert [value for _, _, value, _ in worker.sent] == [b"N"]
    await _stopped(service, task)


async def test_an_idle_loop_scans_a_partition_taken_up_and_at_least_every_quiet_max(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = _Worker(_Table(tmp_path / "db"))
    service = DelayedMessages(worker)  # type: ignore[arg-type]
    task, turns = await _running(service)
    await asyncio.sleep(3 * delayed_module.TICK_S)
    # a partition taken up with a message past due that no write of this service put there (restored)
    m = DelayedMessage(b"restored", worker.now - 5, "out", None, b"R", (), 1)
    worker.delayed.db[due_key(m.deliver_at, m.id)] = encode_delayed(m)
    worker.punctuator.partitions = {1}  # (given 0 up; the fake table has one database for all)
    await asyncio.sleep(3 * delayed_module.TICK_S)
    assert [value for _, _, value, _ in worker.sent] == [b"R"]
    await _stopped(service, task)
    monkeypatch.setattr(delayed_module, "QUIET_MAX_S", 2 * delayed_module.TICK_S)
    service = DelayedMessages(worker)  # type: ignore[arg-type]
    task, turns = await _running(service)
    await asyncio.sleep(12 * delayed_module.TICK_S)
    assert 2 <= len(turns) <= 8, "with nothing changed, a scan every QUIET_MAX_S"
    await _stopped(service, task)


async def test_a_message_due_while_a_turn_ran_is_the_next_turns_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn delivers what is due by the clock it read, then looks for the next instant: a message due in
    between (the clock crossed its instant during the turn — messages due on a whole second, a wake-up a
    hair early) is delivered by the next turn at once, not by the next scan QUIET_MAX_S later (the bench's
    1 % of deliveries sent a quarter of a second late)."""
    monkeypatch.setattr(delayed_module, "QUIET_MAX_S", 10.0)
    worker = _Worker(_Table(tmp_path / "db"))
    service = DelayedMessages(worker)  # type: ignore[arg-type]
    at = worker.now + 1
    await service.handle(_event(b"on-the-second", b"S", at))
    deliver = service.deliver_due

    async def crossing(now: int | None = None) -> int:
        delivered = await deliver(now)
        worker.now = max(worker.now, at + 1)  # (its instant passed while the turn ran)
        return delivered

    service.deliver_due = crossing  # type: ignore[method-assign]
    task, _ = await _running(service)
    await asyncio.sleep(3 * delayed_module.TICK_S)
    assert [value for _, _, value, _ in worker.sent] == [b"S"]
    await _stopped(service, task)


# --- with transactions: what an instant delivers is read ahead, and not used once written to ------------


class _TxWorker(_Worker):
    """The service's port with transactions: the staged table and fake producers of test_staged_tables."""

    def __init__(self, base: Path) -> None:
        from tests.unit.test_staged_tables import _Harness

        self.harness = _Harness(base, 0)
        self.harness.faust.data.offset_key = b"__offset__"
        super().__init__(_Table(base / "unused"))
        self.delayed = self.harness.table  # type: ignore[assignment]
        self.txns = self.harness.t  # type: ignore[assignment]

    async def produce_many(self, topic, records):  # type: ignore[no-untyped-def]
        return [await self.produce(topic, k, v, headers=h) for k, v, h in records]


async def _held(worker: _TxWorker, service: DelayedMessages, *events: Any) -> None:
    from scheduler.kafka.transactions import owned_by

    with owned_by(0):
        for event in events:
            await service.handle(event)
    await worker.txns.commit()  # type: ignore[union-attr]


async def _prepared(
    tmp_path: Path, *messages: tuple[bytes, bytes, int]
) -> tuple[_TxWorker, DelayedMessages, int]:
    """A service with transactions holding these (id, value, ms after the instant) messages, what the
    instant delivers read ahead of it; and the instant."""
    worker = _TxWorker(tmp_path)
    service = DelayedMessages(worker)  # type: ignore[arg-type]
    at = worker.now + 200
    await _held(worker, service, *(_event(id, value, at + after) for id, value, after in messages))
    await service.prepare(at)
    return worker, service, at


async def test_a_prepared_delivery_is_dropped_when_its_messages_are_written_to_before_the_instant(
    tmp_path: Path,
) -> None:
    worker, service, at = await _prepared(
        tmp_path, (b"kept", b"K", 0), (b"cancelled", b"C", 0), (b"moved", b"M", 0)
    )
    assert [m.id for _, m, _ in service._prepared[0].entries] == [b"cancelled", b"kept", b"moved"]
    await _held(worker, service, _event(b"cancelled", None), _event(b"moved", b"M2", at + 60_000))
    worker.now = at
    assert await service.deliver_due() == 1
    assert [(key, value) for _, key, value, _ in worker.sent] == [(b"kept", b"K")]
    await worker.txns.commit()  # type: ignore[union-attr]
    worker.now = at + 60_000
    assert await service.deliver_due() == 1 and worker.sent[-1][2] == b"M2"


async def test_a_prepared_delivery_is_used_at_its_instant_and_a_later_past_due_write_is_still_found(
    tmp_path: Path,
) -> None:
    worker, service, at = await _prepared(tmp_path, (b"a", b"A", 0), (b"b", b"B", 1))
    worker.now = at + 1  # (b, due a millisecond after what was prepared, is read at the instant)
    assert await service.deliver_due() == 2 and 0 not in service._prepared
    await worker.txns.commit()  # type: ignore[union-attr]
    await _held(worker, service, _event(b"late", b"L", worker.now - 5_000))  # before the floor
    assert await service.deliver_due() == 1
    assert [value for _, _, value, _ in worker.sent] == [b"A", b"B", b"L"]


async def test_a_message_landing_after_its_instant_was_read_ahead_is_delivered_with_it(
    tmp_path: Path,
) -> None:
    """Written before the instant was read ahead but held for the partition's commit (not in RocksDB: the
    read did not see it), and landing before the instant: what was read ahead is read again. Else the
    delivery took it as it was, read on from its end, and raised the floor over the message: held until the
    partition was assigned again (test_delayed_once_through_writes found it)."""
    from scheduler.kafka.transactions import owned_by

    worker = _TxWorker(tmp_path)
    service = DelayedMessages(worker)  # type: ignore[arg-type]
    at = worker.now + 200
    await _held(worker, service, _event(b"a", b"A", at))
    with owned_by(0):
        await service.handle(_event(b"late", b"L", worker.now - 100))  # (held for the next commit)
    await service.prepare(at)
    assert [m.id for _, m, _ in service._prepared[0].entries] == [b"a"]
    await worker.txns.commit()  # type: ignore[union-attr]
    worker.now = at
    assert await service.deliver_due() == 2
    assert [value for _, _, value, _ in worker.sent] == [b"L", b"A"]


async def test_a_prepare_waits_for_a_commit_in_progress(tmp_path: Path) -> None:
    """A commit takes the partition's held writes into its transaction and puts them in RocksDB once it
    committed: read in between, a cancel would be in neither (the cancelled message prepared, delivered)."""
    from scheduler.kafka.transactions import owned_by

    worker = _TxWorker(tmp_path)
    service = DelayedMessages(worker)  # type: ignore[arg-type]
    at = worker.now + 200
    await _held(worker, service, _event(b"cancelled", b"C", at), _event(b"kept", b"K", at))
    with owned_by(0):
        await service.handle(_event(b"cancelled", None))
    gate = asyncio.Event()
    worker.harness.producers[0].kafka_producer.commit_gate = gate
    committing = asyncio.ensure_future(worker.txns.commit())  # type: ignore[union-attr]
    await asyncio.sleep(0.01)  # (the commit took the cancel's deletes and waits on the broker)
    preparing = asyncio.ensure_future(service.prepare(at))
    await asyncio.sleep(0.01)
    gate.set()
    await committing
    await preparing
    assert [m.id for _, m, _ in service._prepared[0].entries] == [b"kept"]


async def test_a_partition_with_more_due_than_a_batch_scans_on_from_its_last_delivery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More due than a delivery turn takes (BATCH): the next scans start at the last key delivered, not at
    the front of the keys (the deleted ones: at 1M due over a minute every partition had more than a batch
    due each second, and each scan walked every message delivered before); a write below it is found."""
    monkeypatch.setattr(delayed_module, "BATCH", 2)
    worker = _TxWorker(tmp_path)
    service = DelayedMessages(worker)  # type: ignore[arg-type]
    ids = [b"m1", b"m2", b"m3", b"m4", b"m5"]
    await _held(worker, service, *(_event(id, id, worker.now - 1_000 + i) for i, id in enumerate(ids)))
    delivered = []
    for _ in range(2):
        assert await service.deliver_due() == 2
        delivered += [value for _, _, value, _ in worker.sent[-2:]]
        assert service._from(0) == due_key(worker.now - 1_000 + len(delivered) - 1, delivered[-1])
        await worker.txns.commit()  # type: ignore[union-attr]
    await _held(worker, service, _event(b"late", b"late", worker.now - 5_000))  # below the floor
    assert await service.deliver_due() == 2
    assert [value for _, _, value, _ in worker.sent] == [*ids[:4], b"late", b"m5"]


async def test_a_message_replaced_at_the_same_instant_and_not_committed_yet_is_delivered_as_replaced(
    tmp_path: Path,
) -> None:
    """The scan reads RocksDB, where the replacement (the same due key) is not until its commit: the
    partition's own writes are what the key holds."""
    from scheduler.kafka.transactions import owned_by

    worker = _TxWorker(tmp_path)
    service = DelayedMessages(worker)  # type: ignore[arg-type]
    at = worker.now + 200
    await _held(worker, service, _event(b"m", b"first", at))
    with owned_by(0):
        await service.handle(_event(b"m", b"second", at))  # (held for the partition's next commit)
    worker.now = at
    assert await service.deliver_due() == 1
    assert [value for _, _, value, _ in worker.sent] == [b"second"]


async def test_a_message_written_before_a_delivery_raised_the_floor_and_committed_after_is_delivered(
    tmp_path: Path,
) -> None:
    """A delivery reads RocksDB from the partition's floor and raises it to its instant; a message written
    in the same transaction before that delivery (held: not in RocksDB yet) lands below the floor at the
    commit, and the floor goes down to it then: the next scan delivers it (else only a reassignment did)."""
    from scheduler.kafka.transactions import owned_by

    worker = _TxWorker(tmp_path)
    service = DelayedMessages(worker)  # type: ignore[arg-type]
    await _held(
        worker, service, _event(b"first", b"F", worker.now - 10), _event(b"other", b"O", worker.now + 150)
    )
    assert await service.deliver_due() == 1  # (the floor: at this instant)
    await worker.txns.commit()  # type: ignore[union-attr]
    with owned_by(0):
        await service.handle(_event(b"new", b"N", worker.now + 100))  # (held for the next commit)
    worker.now += 200
    assert await service.deliver_due() == 1, "other: new is not in RocksDB yet"
    await worker.txns.commit()  # type: ignore[union-attr]
    assert await service.deliver_due() == 1
    assert [value for _, _, value, _ in worker.sent] == [b"F", b"O", b"N"]


def _rocksdb_gets(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The keys the service reads from its partitions' RocksDB by a get, from now on."""
    reads: list[bytes] = []
    db_of = delayed_module.partition_db

    def spied(table: Any, partition: int) -> Any:
        db = db_of(table, partition)
        return SimpleNamespace(get=lambda key: reads.append(key) or db.get(key))

    monkeypatch.setattr(delayed_module, "partition_db", spied)
    return reads


async def test_a_new_messages_landing_asks_rocksdb_nothing_and_the_counts_stay_the_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message whose id nothing holds (neither RocksDB nor the partition's writes) is new, and so is its
    due key: its landing counts it without a RocksDB get (an absent key's get walks every file's bloom
    filter). One replaced in the same transaction, and one cancelled and sent again for the same instant
    (RocksDB holds its due key), are counted against what RocksDB holds, as before."""
    from scheduler.kafka.transactions import owned_by

    worker = _TxWorker(tmp_path)
    service = DelayedMessages(worker)  # type: ignore[arg-type]
    at = worker.now + 60_000
    await _held(worker, service, _event(b"old", b"x", at, topic="t0"))
    counts = service.pending_counts
    service.count_some()
    assert counts.by_topic() == {"t0": 1}
    reads = _rocksdb_gets(monkeypatch)
    with owned_by(0):
        for i in range(3):
            await service.handle(_event(f"n{i}".encode(), b"x", at + i, topic="t1"))
        await service.handle(_event(b"n0", b"x", at + 5, topic="t2"))  # (replaced before its commit)
        await service.handle(_event(b"old", None))  # cancelled, and sent again for the same instant
        await service.handle(_event(b"old", b"y", at, topic="t3"))
    await worker.txns.commit()  # type: ignore[union-attr]
    assert counts.by_topic() == {"t1": 2, "t2": 1, "t3": 1}
    assert sorted(key for key in reads if key.startswith(DUE)) == [
        due_key(at, b"old"),
        due_key(at + 5, b"n0"),
    ]


async def test_a_delivery_counted_at_its_commit_takes_what_it_replaced_from_its_scan_not_rocksdb(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pending counts follow each landing write with the topic of what it replaces: for a delivered
    message what the delivery's scan read (no RocksDB get a message at its commit), for a key changed in
    RocksDB since (a restore, told by `moved`) RocksDB's own: the counts stay the store's."""
    from scheduler.kafka.transactions import owned_by

    worker = _TxWorker(tmp_path)
    service = DelayedMessages(worker)  # type: ignore[arg-type]
    at = worker.now - 1_000
    held = (_event(f"m{i}".encode(), b"x", at + i, topic=f"t{i % 2}") for i in range(4))
    await _held(worker, service, *held)
    counts = service.pending_counts
    service.count_some()
    assert counts.by_topic() == {"t0": 2, "t1": 2}
    reads = _rocksdb_gets(monkeypatch)
    assert await service.deliver_due(at + 1) == 2
    await worker.txns.commit()  # type: ignore[union-attr]
    assert counts.by_topic() == {"t0": 1, "t1": 1}
    assert [key for key in reads if key.startswith(DUE)] == [], "the deletes' topics come from the scan"
    # m2 read by a scan (kept: t0), then RocksDB's value changed under it (a restore) and the partition
    # taken up again: what lands next replaces RocksDB's message (t9), not the one the scan read
    worker.now = at + 2
    await service.prepare(at + 3)
    key = due_key(at + 2, b"m2")
    tables.partition_db(worker.delayed, 0)[key] = encode_delayed(
        DelayedMessage(b"m2", at + 2, "t9", None, b"x", (), worker.now)
    )
    worker.punctuator.partitions = set()  # (given up, then taken up again: counted from the store)
    service.count_some()
    worker.punctuator.partitions = {0}
    service.count_some()
    assert counts.by_topic() == {"t9": 1, "t1": 1}
    with owned_by(0):
        await service.handle(_event(b"m2", None))
    await worker.txns.commit()  # type: ignore[union-attr]
    assert counts.by_topic() == {"t1": 1}
