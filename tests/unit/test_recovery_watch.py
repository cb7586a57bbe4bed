"""The watch over Faust's changelog restore: which partitions are stalled, and when one has nothing left."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP

from scheduler.kafka.recovery import _look, nothing_left, stalled

pytestmark = pytest.mark.unit


def test_a_partition_behind_its_end_with_no_record_for_the_stall_time_is_stalled() -> None:
    remaining = {"a": 3, "b": 2, "c": 0, "d": 5}
    received = {"a": 100.0, "b": 97.0}  # d received nothing since the start (90)
    assert stalled(remaining, received, started_at=90.0, now=103.0, stall_s=5.0) == ["b", "d"]


def test_nothing_is_stalled_before_a_recovery_started() -> None:
    assert stalled({"a": 3}, {}, started_at=None, now=1e9) == []


@pytest.mark.parametrize(
    ("position", "highwater", "queued", "done"),
    [
        (12, 10, 0, True),  # the record at 10 was a commit marker, 11 an abort marker: nothing to receive
        (11, 10, 0, True),
        (10, 10, 0, False),  # the record at the highwater is still to come
        (3, 10, 0, False),
        (12, 10, 4, False),  # fetched records wait in the queue: they may be the partition's
        (None, 10, 0, False),  # no position (resetting)
    ],
)
def test_a_restore_has_nothing_left_only_past_its_end_with_nothing_queued(
    position: int | None, highwater: int, queued: int, done: bool
) -> None:
    assert nothing_left(position, highwater, queued) is done


class _Recovery:
    """What the watch reads of Faust's recovery service: one changelog partition, 3 records behind."""

    def __init__(self, started_at: float) -> None:
        self.in_recovery = True
        self._recovery_started_at = started_at
        self._active_events_received_at: dict[TP, float] = {}
        self.active_highwaters = {TP("t-changelog", 2): 10}
        self.active_offsets = {TP("t-changelog", 2): 7}

    def active_remaining(self) -> dict[TP, int]:
        return {tp: hw - self.active_offsets[tp] for tp, hw in self.active_highwaters.items()}


class _App:
    def __init__(self, recovery: _Recovery, position: int) -> None:
        self.tables = SimpleNamespace(recovery=recovery, changelog_queue=asyncio.Queue())
        self.consumer = SimpleNamespace(position=self._position)
        self._at = position

    async def _position(self, tp: TP) -> int:
        return self._at


@pytest.mark.parametrize(("position", "ended"), [(12, True), (8, False)])
async def test_the_watch_ends_a_restore_past_its_end_and_reports_any_other_stall(
    position: int, ended: bool, caplog: pytest.LogCaptureFixture
) -> None:
    recovery = _Recovery(started_at=time.monotonic() - 10)
    await _look(_App(recovery, position), recovery, {})
    tp = TP("t-changelog", 2)
    assert recovery.active_offsets[tp] == (10 if ended else 7)
    expected = (
        "ended at 12: nothing visible up to its end 11" if ended else "receives nothing: restored to 7 of 10"
    )
    assert expected in caplog.text


async def test_a_fetch_returns_only_the_partitions_active_when_it_started() -> None:
    """Faust hands its fetch the live set of active partitions; a restore's end empties it mid-fetch, and
    aiokafka then returned every partition's records (standby ones too, which Faust dropped)."""
    import faust.transport.drivers.aiokafka as driver

    from scheduler.kafka.recovery import fetch_only_what_was_asked

    fetch_only_what_was_asked()
    fetch_only_what_was_asked()  # (once per process, however often it is asked)
    live = {TP("t-changelog", 0), TP("t-changelog", 1)}
    given: list[Any] = []

    async def call_thread(fn: Any, consumer: Any, partitions: Any, **_: Any) -> dict[Any, Any]:
        live.clear()  # the restore ended while the fetch waited
        given.append(partitions)
        return {}

    thread = SimpleNamespace(
        _ensure_consumer=lambda: SimpleNamespace(_max_poll_records=10),
        call_thread=call_thread,
        _fetch_records=None,
    )
    await driver.AIOKafkaConsumerThread.getmany(thread, live, 1.0)
    assert given == [{TP("t-changelog", 0), TP("t-changelog", 1)}]
    assert await driver.AIOKafkaConsumerThread.getmany(thread, set(), 1.0) == {}
    assert len(given) == 1  # an empty set fetches nothing (aiokafka would take it for "all")


def test_a_changelog_partition_faust_pauses_or_resumes_is_paused_or_resumed_in_aiokafka_in_its_thread() -> (
    None
):
    """Faust paused a partition in its own books only: aiokafka fetched every changelog partition of a live
    worker's tables twice a second for nothing. Now a changelog partition follows Faust's pause and resume
    in aiokafka's consumer (in the consumer's thread, in order); any other partition, and one no longer
    assigned, is left as it is."""
    import threading

    import faust.transport.drivers.aiokafka as driver
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from scheduler.kafka.recovery import pause_changelogs_in_the_fetch

    pause_changelogs_in_the_fetch()
    pause_changelogs_in_the_fetch()  # (once per process, however often it is asked)
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()

    def in_thread(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(10)

    async def assigned() -> AIOKafkaConsumer:  # (never started: the assignment is all that is asked of it)
        aio = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:1")
        aio.assign([TopicPartition("t-changelog", p) for p in (0, 1)] + [TopicPartition("t-commands", 0)])
        return aio

    async def paused() -> set[tuple[str, int]]:  # (after what was asked before it, in the same loop)
        return {(tp.topic, tp.partition) for tp in aio.paused()}

    aio = in_thread(assigned())
    active: set[Any] = set()
    faust_consumer = SimpleNamespace(
        _is_changelog_tp=lambda tp: tp.topic.endswith("-changelog"),
        _thread=SimpleNamespace(_consumer=aio, thread_loop=loop),
        _get_active_partitions=lambda: active,
        _paused_partitions=set(),
    )
    try:
        changelogs = {TP("t-changelog", 0), TP("t-changelog", 1)}
        driver.Consumer.pause_partitions(
            faust_consumer, changelogs | {TP("t-commands", 0), TP("gone-changelog", 3)}
        )
        assert in_thread(paused()) == {("t-changelog", 0), ("t-changelog", 1)}
        assert faust_consumer._paused_partitions == changelogs | {
            TP("t-commands", 0),
            TP("gone-changelog", 3),
        }
        driver.Consumer.resume_partitions(faust_consumer, {TP("t-changelog", 1), TP("t-commands", 0)})
        assert in_thread(paused()) == {("t-changelog", 0)}
        assert active == {TP("t-changelog", 1), TP("t-commands", 0)}  # (Faust's own books, as before)
        faust_consumer._thread._consumer = None  # a consumer not started: nothing to pause yet
        driver.Consumer.pause_partitions(faust_consumer, {TP("t-changelog", 1)})
        assert in_thread(paused()) == {("t-changelog", 0)}
    finally:
        in_thread(aio.stop())
        loop.call_soon_threadsafe(loop.stop)
        runner.join(10)
        loop.close()
    faust_consumer._thread._consumer = aio  # its thread stopped (a worker's stop): Faust's pause goes on
    driver.Consumer.pause_partitions(faust_consumer, {TP("t-changelog", 1)})
    assert TP("t-changelog", 1) in faust_consumer._paused_partitions


async def test_changelog_records_queued_when_the_flow_resumes_are_kept_and_a_rebalance_clears_them() -> None:
    """Faust's changelog queue was cleared whenever the flow resumed, the end of a recovery included:
    standby records waiting in it were lost after their partitions had been sought."""
    from mode.utils.queues import FlowControlEvent, FlowControlQueue

    from scheduler.kafka.recovery import keep_changelog_events_on_resume

    flow = FlowControlEvent()
    queue: FlowControlQueue[int] = FlowControlQueue(flow_control=flow, clear_on_resume=True)
    app = SimpleNamespace(flow_control=flow, tables=SimpleNamespace(changelog_queue=queue))
    keep_changelog_events_on_resume(app)
    keep_changelog_events_on_resume(app)
    flow.resume()
    for i in range(3):
        queue.put_nowait(i)
    flow.resume()  # (the end of a recovery)
    assert queue.qsize() == 3
    flow.suspend()  # a rebalance: Faust suspends, then clears
    flow.clear()
    assert queue.qsize() == 0


async def test_a_recovery_never_seeks_a_partition_below_its_beginning() -> None:
    """A standby partition assigned during a recovery has no start offset (None); one whose leader was away
    has "the earliest - 1" = -2: either seek crashed the worker (brokers killed in the fault campaign)."""
    from collections import Counter

    from scheduler.kafka.recovery import seek_no_offset_below_the_start

    sought: dict[str, int] = {}

    async def faust_seek_offsets(consumer: Any, tps: Any, offsets: Any, title: str) -> None:
        for tp in tps:
            offset = offsets[tp]
            sought[tp] = 0 if offset == -1 else offset  # (Faust: -1 is "from the beginning")

    recovery = SimpleNamespace(_seek_offsets=faust_seek_offsets)
    app = SimpleNamespace(tables=SimpleNamespace(recovery=recovery))
    seek_no_offset_below_the_start(app)
    seek_no_offset_below_the_start(app)  # (once only)
    offsets: Counter[str] = Counter({"a": -2, "b": 7, "c": -1})
    offsets["d"] = None  # type: ignore[assignment]
    await recovery._seek_offsets(None, {"a", "b", "c", "d"}, offsets, "standby")
    assert sought == {"a": 0, "b": 7, "c": 0, "d": 0}
    assert recovery._seek_offsets._clamped
