"""How the consumers of a worker fetch, per broker: the fetch waits, the isolation level, the end offsets a
consumer may trust (Tansu's true ones; with transactions the visible ones), and the profile Faust's
consumers get (apply_consumer_profile). Every Tansu workaround for fetching lives here."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Container, Iterable, Mapping
from typing import Any, TypeVar

from scheduler.kafka.config import BrokerProfile

log = logging.getLogger(__name__)

C = TypeVar("C")


async def started(consumer: C) -> C:
    """`consumer` started; a start that fails or is cancelled (a heal or a timeout while it bootstraps)
    stops what it left before it raises: its client's connections and tasks. Without it each such consumer
    lived on until the garbage collector found it, which logged "Unclosed AIOKafkaConsumer" (two at every
    worker's start: the followed topics' consumer is replaced as each map starts following)."""
    try:
        await consumer.start()  # type: ignore[attr-defined]
    except BaseException:
        with contextlib.suppress(Exception):
            await consumer.stop()  # type: ignore[attr-defined]
        raise
    return consumer


#: Tansu does not answer a waiting fetch when data arrives; it holds it for the whole fetch_max_wait
#: (Faust fixes it at 1.5 s), so every hop between agents would cost up to 1.5 s. Poll often instead.
TANSU_FETCH_MAX_WAIT_MS = 10
#: Faust's consumer on Kafka: how long a fetch waits for records (Faust's own: 1.5 s) while its assignment
#: is settled, and from a new assignment until KAFKA_SETTLE_S after it; see apply_consumer_profile
KAFKA_FETCH_MAX_WAIT_MS = 500
KAFKA_UNSETTLED_FETCH_MAX_WAIT_MS = 100
KAFKA_SETTLE_S = 30.0
#: a consumer that follows a small topic whole (worker.programs.TopicMap: programs, calendars, rules, …):
#: how long its fetch waits for records. On Kafka a fetch is answered as soon as a record arrives — a
#: read_committed one as soon as the transaction that wrote it commits (seen 4–6 ms after the commit with a
#: 5 s wait) — and each empty answer costs the worker CPU (five followers at 100 ms were a sixth of an idle
#: worker's; one at 500 ms, ~0.6 ms of the loop each). What waits behind it on its connection (a
#: broker answers a connection's requests one at a time) is its metadata refresh and the watchdog's end
#: offsets, never a reader's (TopicMap._end_offsets); a map that starts following starts a new consumer.
#: Tansu holds a fetch for its whole wait
FOLLOW_FETCH_MAX_WAIT_MS: dict[str, int] = {"kafka": 2000, "tansu": 100}
#: the longest aiokafka's fetch loop waits (its `consumer_timeout_ms`: 200 ms by default) before it looks
#: again at what to fetch. Whatever it acts on wakes it anyway (a fetch answered, buffered records consumed,
#: a seek, an assignment, a pause lifted, a metadata refresh), so the bound only woke each idle consumer
#: ~4 times a second for nothing (~0.8 ms/s of the loop each, three consumers in a worker)
FETCH_LOOP_WAKE_MS = 2000
#: see apply_consumer_profile: how long aiokafka waits before fetching again while records are buffered
PREFETCH_BACKOFF_S = 0.005
#: a fetch while a changelog partition is far behind (a restore) may wait this long: see
#: _long_polls_while_recovering
TANSU_RECOVERY_FETCH_MAX_WAIT_MS = 500
#: a changelog partition this many records behind its end is being restored
TANSU_RESTORE_LAG = 1000
#: how long reading a partition's true end from a fetch may take before the reported one is used
TANSU_END_OFFSET_TIMEOUT_S = 10.0


async def tansu_end_offsets(
    bootstrap_servers: Any, reported: Mapping[Any, int], timeout_s: float = TANSU_END_OFFSET_TIMEOUT_S
) -> dict[Any, int]:
    """The end offsets of partitions on Tansu, whose ListOffsets answers "first offset of the last batch
    + 1" (short when that batch holds more than one record). A fetch's high watermark is right: fetch
    each non-empty partition from its reported end - 1 (the last batch) and take that, never less than
    what was reported. Faust's changelog recovery reads to these ends, so changelogs can keep batching."""
    import aiokafka

    ends = {tp: end for tp, end in reported.items() if end is not None}
    todo = [tp for tp, end in ends.items() if end > 0]
    if not todo:
        return ends
    reader = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        enable_auto_commit=False,
        fetch_max_wait_ms=TANSU_FETCH_MAX_WAIT_MS,
    )
    await started(reader)
    try:
        reader.assign(todo)
        for tp in todo:
            reader.seek(tp, ends[tp] - 1)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        waiting = set(todo)
        while waiting and loop.time() < deadline:
            batches = await reader.getmany(*waiting, timeout_ms=200)
            for tp, records in batches.items():
                if records:
                    ends[tp] = max(ends[tp], records[-1].offset + 1, reader.highwater(tp) or 0)
                    waiting.discard(tp)
        if waiting:
            log.warning("no true end offset for %d partitions within %.0fs", len(waiting), timeout_s)
    finally:
        await reader.stop()
    return ends


#: how far back from a partition's end visible_ends first looks for its last record (then 8x further each time)
VISIBLE_LOOKBACK = 64


async def visible_ends(
    bootstrap_servers: Any, reported: Mapping[Any, int], timeout_s: float = 10.0
) -> dict[Any, int]:
    """For a read_committed consumer: one past the last record it can receive, per partition.

    The end a read_committed consumer is told (the last stable offset) is one past the last transaction
    marker of a transactional partition, and no consumer ever receives a marker: Faust's recovery, which
    reads a changelog until it has seen the record at end - 1, would wait for ever (faust-streaming's own
    exactly-once mode gives up after two 5 s timeouts). Read each partition's tail instead, further back
    while all it holds is markers and aborted records; a partition with nothing visible ends at 0."""
    import aiokafka

    ends = {tp: end for tp, end in reported.items() if end is not None}
    todo = {tp: end for tp, end in ends.items() if end > 0}
    if not todo:
        return ends
    reader = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    await started(reader)
    try:
        reader.assign(list(todo))
        begins = await reader.beginning_offsets(list(todo))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        lookback = VISIBLE_LOOKBACK
        while todo and loop.time() < deadline:
            starts = {tp: max(begins.get(tp, 0), end - lookback) for tp, end in todo.items()}
            for tp, start in starts.items():
                reader.seek(tp, start)
            last: dict[Any, int] = {}
            reading = set(todo)
            while reading and loop.time() < deadline:
                batches = await reader.getmany(*reading, timeout_ms=200)
                for tp, records in batches.items():
                    if records:
                        last[tp] = max(last.get(tp, -1), records[-1].offset)
                for tp in list(reading):
                    if await reader.position(tp) >= todo[tp]:
                        reading.discard(tp)
            for tp in list(todo):
                if tp in reading:
                    continue
                if tp in last:
                    ends[tp] = last[tp] + 1
                elif starts[tp] <= begins.get(tp, 0):
                    ends[tp] = 0  # nothing visible at all
                else:
                    continue  # only markers and aborted records in the tail: look further back
                del todo[tp]
            lookback *= 8
        if todo:
            log.warning("no visible end for %d partitions within %.0fs", len(todo), timeout_s)
    finally:
        await reader.stop()
    return ends


def recovery_fetch(lags: Mapping[str, int | None]) -> bool:
    """A fetch that restores a table: a partition of some changelog is more than TANSU_RESTORE_LAG records
    behind its end (lags: topic -> the most any of its partitions is behind, None when not known yet)."""
    return any(
        lag is not None and lag > TANSU_RESTORE_LAG
        for topic, lag in lags.items()
        if topic.endswith("-changelog")
    )


def fetched_lags(states: Iterable[tuple[Any, Any]], buffered: Container[Any]) -> dict[str, int | None]:
    """topic -> how far the furthest behind of its partitions that the next fetch asks for is (None when not
    known yet), from (partition, aiokafka partition state) pairs. A paused partition is not fetched, nor one
    whose last fetch is still buffered: Faust leaves a changelog's fetched records unread once its table is
    live, so such a partition's lag stays where it was and would keep every fetch at the long wait."""
    lags: dict[str, int | None] = {}
    for tp, state in states:
        lags.setdefault(tp.topic, None)
        if tp in buffered or state.paused:
            continue
        if state.highwater is not None and state.has_valid_position:
            lags[tp.topic] = max(lags[tp.topic] or 0, state.highwater - state.position)
    return lags


def _long_polls_while_recovering(fetcher: Any) -> None:
    """Tansu answers a fetch with what it gathers within the fetch's max wait, and finding an offset
    costs it time that grows with what it stores: at 10 ms it returns a record or two per partition of a
    long changelog (raw, 8 partitions of 10k one-record batches: stalled at ~30k with 10 ms, all read in
    2.3 s with 1 s). While a changelog partition is far behind (a restore, a standby catching up), wait
    longer; at the tail, the short poll that keeps agent hops at ~10 ms."""
    actions = fetcher._get_actions_per_node

    def get_actions_per_node(assignment: Any) -> Any:
        states = ((tp, assignment.state_value(tp)) for tp in assignment.tps)
        restoring = recovery_fetch(fetched_lags(states, fetcher._records))
        fetcher._fetch_max_wait_ms = (
            TANSU_RECOVERY_FETCH_MAX_WAIT_MS if restoring else TANSU_FETCH_MAX_WAIT_MS
        )
        return actions(assignment)

    fetcher._get_actions_per_node = get_actions_per_node


def consumer_broken(consumer: Any) -> bool:
    """Whether one of the consumer's background tasks has ended: they never restart, and the consumer
    fetches nothing more (a dead fetcher: every getmany answers nothing; a dead group coordination: every
    getmany raises its error again)."""
    tasks = (
        getattr(getattr(consumer, "_coordinator", None), "_coordination_task", None),
        getattr(getattr(consumer, "_fetcher", None), "_fetch_task", None),
    )
    return any(task is not None and task.done() for task in tasks)


async def getmany_or_wake(
    consumer: Any, wake: asyncio.Event, timeout_ms: int, max_records: int | None = None
) -> dict[Any, list[Any]]:
    """The consumer's getmany, cut short (nothing returned) when `wake` is set: the records of a fetch
    answered meanwhile stay buffered for the next getmany."""
    getting = asyncio.ensure_future(consumer.getmany(timeout_ms=timeout_ms, max_records=max_records))
    waking = asyncio.ensure_future(wake.wait())
    try:
        await asyncio.wait((getting, waking), return_when=asyncio.FIRST_COMPLETED)
    finally:
        waking.cancel()
        if not getting.done():
            getting.cancel()
    return getting.result() if getting.done() else {}


def isolation(profile: BrokerProfile) -> dict[str, Any]:
    """The isolation level a consumer of our topics needs: on Kafka, committed records only (what an
    aborted transaction — a fenced zombie's fires, a failed commit's — wrote is never read); Tansu has no
    transactions."""
    return {} if profile == "tansu" else {"isolation_level": "read_committed"}


def consumer_options(profile: BrokerProfile) -> dict[str, Any]:
    """What a consumer the worker, the launcher or the CLI creates itself (not through Faust) needs for
    the broker: on Kafka it reads committed records only (transactions), on Tansu it polls often."""
    if profile == "tansu":
        return {"fetch_max_wait_ms": TANSU_FETCH_MAX_WAIT_MS, "consumer_timeout_ms": FETCH_LOOP_WAKE_MS}
    return {**isolation(profile), "consumer_timeout_ms": FETCH_LOOP_WAKE_MS}


def faust_consumer_options(profile: BrokerProfile, read_committed: bool) -> dict[str, Any]:
    """What the profile sets on the consumers Faust creates (see apply_consumer_profile)."""
    tansu = profile == "tansu"
    return {
        "fetch_max_wait_ms": TANSU_FETCH_MAX_WAIT_MS if tansu else KAFKA_FETCH_MAX_WAIT_MS,
        "consumer_timeout_ms": FETCH_LOOP_WAKE_MS,
        **({"isolation_level": "read_committed"} if read_committed else {}),
    }


class SettledWaits:
    """Kafka: a fetch of Faust's consumer waits KAFKA_FETCH_MAX_WAIT_MS while the consumer's assignment
    is settled, KAFKA_UNSETTLED_FETCH_MAX_WAIT_MS from a new assignment (a start, a rebalance) until
    KAFKA_SETTLE_S after it (its recovery's offset lookups and changelog reads share the fetch's
    connection, where the broker answers one request at a time)."""

    def __init__(self) -> None:
        self._assignment: object | None = None
        self._since = 0.0

    def wait_ms(self, assignment: object, now: float) -> int:
        if assignment is not self._assignment:
            self._assignment, self._since = assignment, now
        return (
            KAFKA_FETCH_MAX_WAIT_MS
            if now - self._since >= KAFKA_SETTLE_S
            else KAFKA_UNSETTLED_FETCH_MAX_WAIT_MS
        )

    def hook(self, fetcher: Any) -> None:
        """Set the fetcher's wait before it builds each round of fetch requests (aiokafka's private
        Fetcher._get_actions_per_node, called with the assignment: a new object at each assignment)."""
        actions = fetcher._get_actions_per_node

        def get_actions_per_node(assignment: Any) -> Any:
            fetcher._fetch_max_wait_ms = self.wait_ms(assignment, time.monotonic())
            return actions(assignment)

        fetcher._get_actions_per_node = get_actions_per_node


def apply_consumer_profile(profile: BrokerProfile, read_committed: bool = False) -> None:
    """Process-wide: the consumers Faust creates get the profile's fetching (and, with transactions,
    read only what was committed: see visible_ends for the end offsets that needs).

    On every broker: aiokafka fetches nothing from a node while records of any partition it leads wait in
    its buffer, for up to its prefetch backoff (100 ms, not configurable). With one broker (or a few)
    leading many partitions, one busy agent then delays every other agent's next record: event -> launch
    p99 was 163 ms on a 1-node Kafka (`make bench`, 2026-11-24). Tansu also needs short polls, its true
    end offsets, and long polls while a changelog is restored (see above).

    On Kafka, a broker answers one request of a connection at a time, so a request of Faust's consumer
    (the end and start offsets of a takeover's recovery) waits behind the fetch in progress, and Faust's
    fetch waits up to 1.5 s when no record comes: a takeover's recovery waited ~1.5 s at each of its three
    steps (highwaters, start offsets, its last changelog read): 4.5 s of a 13.9 s gap after a worker was
    killed. Fetches wait 100 ms at most (KAFKA_UNSETTLED_FETCH_MAX_WAIT_MS) from a new assignment until
    KAFKA_SETTLE_S after it, and 500 ms once it settled: each empty answer costs the worker CPU (at 100 ms
    Faust's fetches were ~30 % of an idle worker's), and a record that arrives is answered at once either
    way. A rebalance then waits at most once for the settled wait: for the fetch in flight when it began
    (SettledWaits)."""
    import types

    import aiokafka
    import faust.transport.drivers.aiokafka as driver

    if getattr(driver.aiokafka, "_scheduler_profile", False):
        return
    tansu = profile == "tansu"

    class ProfiledConsumer(aiokafka.AIOKafkaConsumer):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**kwargs, **faust_consumer_options(profile, read_committed)})

        async def end_offsets(self, partitions: Any) -> Any:
            reported = await super().end_offsets(partitions)
            if tansu:
                return await tansu_end_offsets(self._client._bootstrap_servers, reported)
            if read_committed:
                return await visible_ends(self._client._bootstrap_servers, reported)
            return reported

        async def start(self) -> None:
            await super().start()
            fetcher = getattr(self, "_fetcher", None)
            if fetcher is not None and hasattr(fetcher, "_prefetch_backoff"):
                fetcher._prefetch_backoff = PREFETCH_BACKOFF_S
            if fetcher is not None and hasattr(fetcher, "_get_actions_per_node"):
                if tansu:
                    _long_polls_while_recovering(fetcher)
                else:
                    SettledWaits().hook(fetcher)

    proxy = types.ModuleType("aiokafka")
    proxy.__dict__.update(vars(aiokafka))
    proxy.AIOKafkaConsumer = ProfiledConsumer  # type: ignore[attr-defined]
    proxy._scheduler_profile = True  # type: ignore[attr-defined]
    driver.aiokafka = proxy  # type: ignore[attr-defined]
