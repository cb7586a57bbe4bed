"""A watch over Faust's changelog recovery: a partition whose restore receives nothing says why, and one
that has nothing more to receive ends; and two fixes of what feeds it, without which a standby copy lost
records (`fetch_only_what_was_asked`, `keep_changelog_events_on_resume`), one of where it starts, without
which a broker's loss crashed a worker (`seek_no_offset_below_the_start`), and one of what it fetches once
its tables are live (`pause_changelogs_in_the_fetch`).
The only module that reaches into Faust's recovery service and its consumer's fetch state (their private
members)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

#: a restoring partition that has received no record for this long is looked at
STALL_S = 5.0
#: how often the watch looks, and how often one stalled partition is reported
WATCH_INTERVAL_S = 2.0
REPORT_EVERY_S = 10.0


def stalled(
    remaining: Mapping[Any, int],
    received_at: Mapping[Any, float],
    started_at: float | None,
    now: float,
    stall_s: float = STALL_S,
) -> list[Any]:
    """The partitions still behind their end whose last record (or the recovery's start, for one that
    received none) is more than stall_s ago."""
    if started_at is None:
        return []
    return [
        tp
        for tp, behind in remaining.items()
        if behind > 0 and now - received_at.get(tp, started_at) > stall_s
    ]


def nothing_left(position: int | None, highwater: int, queued: int) -> bool:
    """A restoring partition has received all it ever will: its consumer's position is past the offset it
    waits for (Faust's highwater: the end - 1) and no fetched record waits in the changelog queue. The
    records between were transaction markers or aborted records, which no consumer receives."""
    return position is not None and position > highwater and queued == 0


def fetch_only_what_was_asked() -> None:
    """Process-wide, every broker. Faust's consumer hands its fetch the live set of active partitions; the
    fetch runs in the consumer's thread, and aiokafka returns every partition's buffered records when the
    set it was given is empty. A restore's end empties the set mid-fetch (its changelog partitions are
    paused), so the fetch returns what aiokafka prefetched for the standby partitions; Faust then drops
    those records as not active, after the consumer's position moved past them. The standby went on from
    there and applied what came later: its copy lost records, its stored offset said it had them all, and a
    takeover from it restored nothing (a 3-worker run with commands arriving during a rebalance: 62 of 77
    schedules of a standby partition missing; chaos with a standby: 1,012 due instants missed).
    The fetch now gets a copy taken when it starts: records of a partition not active then stay in
    aiokafka's buffer, fetched again once the partition is resumed (its standby seek comes first)."""
    import faust.transport.drivers.aiokafka as driver

    thread = driver.AIOKafkaConsumerThread
    getmany = thread.getmany
    if getattr(getmany, "_asked_only", False):
        return

    async def getmany_asked(self: Any, active_partitions: set[Any] | None, timeout: float) -> Any:
        if active_partitions is None:  # (a client-only app's fetch: every partition)
            return await getmany(self, None, timeout)
        if not active_partitions:
            return {}  # (aiokafka would take an empty set for "all")
        return await getmany(self, set(active_partitions), timeout)

    getmany_asked._asked_only = True  # type: ignore[attr-defined]
    thread.getmany = getmany_asked  # type: ignore[method-assign]


def pause_changelogs_in_the_fetch() -> None:
    """Process-wide, every broker. Faust pauses a partition only in its own books (the set its fetch asks
    for); aiokafka goes on fetching every partition assigned. Once a worker's tables are live Faust pauses
    their changelog partitions, and aiokafka fetched them all the same: an idle worker's Faust consumer
    asked for its 72 changelog partitions twice a second (ten times a second for the 30 s after each
    assignment, kafka.consumers.SettledWaits) and decoded as many empty answers, ~5 ms of CPU a second,
    a third of an idle worker's; under load each partition's first fetch of the worker's own changelog
    records stayed in aiokafka's buffer, never read. A changelog partition Faust pauses or resumes is now
    paused or resumed in aiokafka too, in the consumer's thread and in the order asked (resuming wakes
    its fetch at once). A paused partition's buffered records are dropped with its position where it was:
    fetched again from there once resumed (a standby's seek comes first, as before)."""
    import faust.transport.drivers.aiokafka as driver

    consumer = driver.Consumer
    pause, resume = consumer.pause_partitions, consumer.resume_partitions
    if getattr(pause, "_in_the_fetch", False):
        return

    def pause_partitions(self: Any, tps: Any) -> None:
        pause(self, tps)
        mirror_pause(self, tps, paused=True)

    def resume_partitions(self: Any, tps: Any) -> None:
        resume(self, tps)
        mirror_pause(self, tps, paused=False)

    pause_partitions._in_the_fetch = True  # type: ignore[attr-defined]
    consumer.pause_partitions = pause_partitions  # type: ignore[method-assign]
    consumer.resume_partitions = resume_partitions  # type: ignore[method-assign]


def mirror_pause(consumer: Any, tps: Any, *, paused: bool) -> None:
    """Pause (or resume) in the aiokafka consumer of Faust's `consumer` the changelog partitions of `tps`,
    in its thread. Nothing while that consumer is not started; a partition no longer assigned when its
    turn comes is left alone (a new assignment starts every partition unpaused), and so is every one once
    the consumer's thread has stopped (a pause at a stop must not fail it)."""
    from aiokafka import TopicPartition
    from aiokafka.errors import IllegalStateError

    changelogs = [TopicPartition(tp.topic, tp.partition) for tp in tps if consumer._is_changelog_tp(tp)]
    thread: Any = getattr(consumer, "_thread", None)
    aio = getattr(thread, "_consumer", None)
    if not changelogs or thread is None or aio is None:
        return

    def apply() -> None:
        for tp in changelogs:
            try:
                (aio.pause if paused else aio.resume)(tp)
            except IllegalStateError:  # (not assigned any more)
                continue

    with contextlib.suppress(RuntimeError):  # (its loop closed: the consumer stopped, nothing to fetch)
        thread.thread_loop.call_soon_threadsafe(apply)


def keep_changelog_events_on_resume(app: Any) -> None:
    """Faust's changelog queue (records fetched for the restore and the standbys, waiting to be applied)
    is cleared when a rebalance suspends the flow, and again whenever the flow resumes. The resume that
    ends a recovery comes after the standby partitions were sought and resumed: the standby records
    queued at that moment were dropped, their offsets never read again, and the next record applied moved
    the standby's stored offset past them (one schedule of ~100 missing from a standby copy, in 3 runs of
    4). The queue is now cleared only while the flow is suspended (a rebalance: its partitions are then
    sought again from their stored offsets); what is queued when the flow resumes is applied."""
    flow = app.flow_control
    queue = app.tables.changelog_queue
    clear = queue.clear
    if getattr(clear, "_when_suspended", False):
        return

    def clear_when_suspended() -> None:
        if not flow.is_active():
            clear()

    clear_when_suspended._when_suspended = True  # type: ignore[attr-defined]
    queue.clear = clear_when_suspended


def seek_no_offset_below_the_start(app: Any) -> None:
    """Faust's recovery seeks each changelog partition to its start offset; a standby partition assigned
    while a recovery ran has none yet (None), and one whose leader was away when its offsets were asked has
    "-1 - 1" (-2): aiokafka refuses either (ValueError), the Recovery service crashes, and the worker with
    it (the fault campaign, seed 2006: brokers SIGKILLed during rebalances, standby replicas on; twice in
    one run). A start that is none or below -1 is now -1, which the recovery reads as "from the beginning"
    (what a partition without a stored offset gets anyway)."""
    recovery = app.tables.recovery
    original = recovery._seek_offsets
    if getattr(original, "_clamped", False):
        return

    async def seek_offsets(consumer: Any, tps: Any, offsets: Any, title: str) -> None:
        for tp in tps:
            offset = offsets.get(tp)
            if offset is None or offset < -1:
                log.warning(
                    "%s recovery of %s had no start offset (%r): from its beginning", title, tp, offset
                )
                offsets[tp] = -1
        await original(consumer, tps, offsets, title)

    seek_offsets._clamped = True  # type: ignore[attr-defined]
    recovery._seek_offsets = seek_offsets


def _fetch_state(app: Any, tp: Any) -> str:
    """What aiokafka's consumer holds for a partition, for the report (best effort: private members)."""
    try:
        consumer = app.consumer._thread._ensure_consumer()
        state = consumer._subscription.subscription.assignment.state_value(tp)
        fetcher = consumer._fetcher
        if state is None:
            return "not assigned to the consumer"
        return (
            f"paused={state.paused} valid_position={state.has_valid_position} "
            f"broker_highwater={state.highwater} lso={state.lso} buffered={tp in fetcher._records} "
            f"fetching_from={sorted(fetcher._in_flight)}"
        )
    except Exception as exc:  # a Faust or aiokafka upgrade moved something: report, never fail
        return f"fetch state unknown ({type(exc).__name__}: {exc})"


async def watch_recovery(app: Any, interval_s: float = WATCH_INTERVAL_S) -> None:
    """Runs for the worker's life. Faust waits for the record at its highwater, and ends a partition's
    restore early only in its own exactly-once mode (after two 5 s timeouts); a changelog written in our
    transactions can end in markers, so a partition whose position is past its end is marked restored
    here. Any other stall is logged with the consumer's view of it, once every REPORT_EVERY_S."""
    recovery = app.tables.recovery
    reported: dict[Any, float] = {}
    while True:
        await asyncio.sleep(interval_s)
        if not recovery.in_recovery:
            reported.clear()
            continue
        try:
            await _look(app, recovery, reported)
        except Exception:  # a Faust or aiokafka upgrade moved something: the watch must not stop the worker
            log.exception("the restore watch failed")


async def _look(app: Any, recovery: Any, reported: dict[Any, float]) -> None:
    now = time.monotonic()
    for tp in stalled(
        recovery.active_remaining(),
        recovery._active_events_received_at,
        recovery._recovery_started_at,
        now,
    ):
        highwater = recovery.active_highwaters[tp]
        try:
            position = await asyncio.wait_for(app.consumer.position(tp), 2.0)
        except Exception:  # resetting, or no longer assigned
            position = None
        if nothing_left(position, highwater, app.tables.changelog_queue.qsize()):
            recovery.active_offsets[tp] = highwater
            log.warning(
                "restore of %s[%d] ended at %d: nothing visible up to its end %d (transaction markers "
                "or aborted records)", tp.topic, tp.partition, position, highwater + 1,
            )  # fmt: skip
        elif now - reported.get(tp, 0.0) >= REPORT_EVERY_S:
            reported[tp] = now
            log.warning(
                "restore of %s[%d] receives nothing: restored to %s of %d, consumer position %s, %s",
                tp.topic, tp.partition, recovery.active_offsets.get(tp), highwater, position,
                _fetch_state(app, tp),
            )  # fmt: skip
