"""Batched producer for what Faust never reads back: fired tasks and dead letters.

Fires go through this one, not Faust's: each instant's fires are sent as whole batches per topic and
partition. It starts on first use, so a catch-up during the first partition assignment can already fire.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import operator
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, cast

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError, for_code
from aiokafka.protocol.metadata import MetadataRequest

log = logging.getLogger(__name__)

Headers = list[tuple[str, bytes]]
#: a record's partition, in send_batch's (key, value, partition[, headers])
_PARTITION = operator.itemgetter(2)


class ProducerStopped(RuntimeError):
    """A send on a producer after its stop."""


#: a failure of records to one topic, of one kind, is logged at most once in this many seconds (a fenced
#: producer fails every record it held: thousands of lines)
UNACKNOWLEDGED_LOG_EVERY_S = 5.0
#: (topic, error type) -> (when it was last logged, how many were not logged since)
_unacknowledged_logged: dict[tuple[str, str], tuple[float, int]] = {}


def _unacknowledged(topic: str, fut: asyncio.Future[object]) -> None:
    if fut.cancelled() or (exc := fut.exception()) is None:
        return
    key, now = (topic, type(exc).__name__), time.monotonic()
    last, quiet = _unacknowledged_logged.get(key, (-UNACKNOWLEDGED_LOG_EVERY_S, 0))
    if now - last < UNACKNOWLEDGED_LOG_EVERY_S:
        _unacknowledged_logged[key] = (last, quiet + 1)
        return
    _unacknowledged_logged[key] = (now, 0)
    more = f" (and {quiet} more like it before)" if quiet else ""
    log.warning("a record to %s was not acknowledged by the broker: %r%s", topic, exc, more)


def _holds_a_batch(producer: AIOKafkaProducer, topic: str, partition: int) -> bool:
    """Whether aiokafka (0.14) holds a batch of this partition its sender has not taken (a send_batch would
    wait for it)."""
    return bool(producer._message_accumulator._batches.get(TopicPartition(topic, partition)))


#: how often a producer with `missing_topic` looks for batches whose topic left the broker, and how long a
#: batch waits before its topic's metadata is asked for again
GONE_CHECK_S = 0.5
GONE_STALE_S = 2.0


async def _fail_gone(producer: AIOKafkaProducer) -> list[str]:
    """Fail at once the batches aiokafka (0.14) holds for a topic the broker no longer lists (deleted since
    they were added), and return the topics. aiokafka retries them for its request timeout (40 s), and a
    transactional producer for ever: its AddPartitionsToTxn is refused (UNKNOWN_TOPIC_OR_PARTITION) and
    retried without a metadata refresh, and the transaction's commit waits — every partition's work with
    it. So the metadata is asked for again once a batch has waited GONE_STALE_S."""
    accumulator, client = producer._message_accumulator, producer.client
    held = [tp for tp, batches in accumulator._batches.items() if batches]
    if not held:
        return []
    stale = time.monotonic() - GONE_STALE_S
    if any(accumulator._batches[tp][0]._ctime < stale for tp in held):
        with contextlib.suppress(Exception):  # (a broker away: what it knew stands)
            await client.force_metadata_update()
    gone: list[str] = []
    for tp in held:
        if client.cluster.partitions_for_topic(tp.topic) is not None or not accumulator._batches.get(tp):
            continue
        error = UnknownTopicOrPartitionError(f"topic {tp.topic} is not on the broker any more (deleted?)")
        for batch in accumulator._batches.pop(tp):
            batch.failure(exception=error)
            batch.future.exception()  # (its records' futures carry it: never "never retrieved")
            batch._drain_waiter.exception()  # (as aiokafka's own expiry leaves it: no sender waits for it)
        if tp.topic not in gone:
            gone.append(tp.topic)
    return gone


def _copy_outcome(to: asyncio.Future[object], fut: asyncio.Future[object]) -> None:
    if to.done():
        return
    if fut.cancelled():
        to.cancel()
    elif (exc := fut.exception()) is not None:
        to.set_exception(exc)
    else:
        to.set_result(fut.result())


def _track(producer: AIOKafkaProducer, topic: str) -> None:
    """Keep `topic` in the producer's metadata. aiokafka refreshes only the topics added to its client once
    any is: a topic that was in the first (all-topics) metadata is never added, and drops out of the
    metadata as soon as another topic is added — its batches then find no leader and expire after the
    request timeout (40 s stalls on fresh clusters, where the output topic is created after the producer
    started). So every topic sent to is added."""
    client = producer.client
    if topic not in client._topics:
        client.add_topic(topic)  # (the refresh it asks for runs in the background)


#: awaited for a topic the broker does not list; raises TopicRefused if it cannot be created
MissingTopic = Callable[[str], Awaitable[None]]


class TopicRefused(Exception):
    """The broker refuses to create the topic a record is for (its reason is the message)."""


class BatchedProducer:
    def __init__(
        self,
        bootstrap_servers: str,
        *,
        linger_ms: int = 2,
        transactional_id: str | None = None,
        missing_topic: MissingTopic | None = None,
    ) -> None:
        """`transactional_id`: a transactional producer (see scheduler.kafka.transactions), which starts by
        fencing any other producer of that id; None: an idempotent-free producer with acks=all.
        `missing_topic`: awaited before a send to a topic the broker does not list (TopicCreator.present):
        aiokafka would wait its request timeout (40 s) for metadata that never comes, holding its caller —
        the punctuator's tick, a partition's transaction — and fail."""
        self._missing_topic = missing_topic
        self._watch: asyncio.Future[None] | None = None  # (with missing_topic: _watch_gone)
        self._failed = asyncio.Event()  # set with `failure`
        self._bootstrap = bootstrap_servers
        self._linger_ms = linger_ms
        self.transactional_id = transactional_id
        self._producer: AIOKafkaProducer | None = None
        self._stopped = False
        self._lock = asyncio.Lock()
        # (topic, partition) -> the task adding its latest batch that could not be added at once
        self._tails: dict[tuple[str, int], asyncio.Future[None]] = {}
        #: the first failure of a record sent since `failure` was last reset (a transaction's begin): aiokafka
        #: commits a transaction whose records failed (a batch expired without a leader, refused by the
        #: broker) with the records that did not, so a transaction checks it before its commit
        self.failure: BaseException | None = None

    def _note(self, fut: asyncio.Future[object]) -> None:
        if self.failure is None and not fut.cancelled() and (exc := fut.exception()) is not None:
            self.failure = exc
            self._failed.set()

    async def delivered(self) -> None:
        """Until every record sent so far is acknowledged or failed, or until one fails (see `failure`): a
        transaction that cannot commit is not waited for (a record for a deleted topic holds the others
        of its transaction for ever, and aiokafka's flush with them)."""
        await self.settle()
        if self._producer is not None and self.failure is None:
            self._failed.clear()
            flushing = asyncio.ensure_future(self._producer.flush())
            failed = asyncio.ensure_future(self._failed.wait())
            try:
                await asyncio.wait([flushing, failed], return_when=asyncio.FIRST_COMPLETED)
            finally:
                failed.cancel()
                if not flushing.done():
                    flushing.cancel()

    async def _started(self) -> AIOKafkaProducer:
        if self._producer is None:
            if self._stopped:
                # never started again: a transactional one would fence the partition's new owner (a send
                # that had taken this producer before its partition was revoked)
                raise ProducerStopped(f"producer {self.transactional_id or ''} was stopped")
            async with self._lock:
                if self._producer is None:
                    producer = AIOKafkaProducer(
                        bootstrap_servers=self._bootstrap,
                        acks="all",
                        linger_ms=self._linger_ms,
                        max_batch_size=256 * 1024,
                        **(
                            {"transactional_id": self.transactional_id, "enable_idempotence": True}
                            if self.transactional_id is not None
                            else {}
                        ),
                    )
                    try:
                        await producer.start()
                        if self.transactional_id is not None:
                            await producer._txn_manager.wait_for_pid()  # fenced the previous owner
                    except BaseException:
                        await producer.stop()
                        raise
                    if self._stopped:  # stopped while it started
                        await producer.stop()
                        raise ProducerStopped(f"producer {self.transactional_id or ''} was stopped")
                    self._producer = producer
                    if self._missing_topic is not None:
                        self._watch = asyncio.ensure_future(self._watch_gone(producer))
        return self._producer

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> asyncio.Future[object]:
        """Queue a record; the returned future resolves when the broker acknowledged it. A caller that
        does not await it still has its failure logged (never "Future exception was never retrieved")."""
        producer = await self._for(topic)
        fut: asyncio.Future[object] = await producer.send(
            topic, value, key=key, partition=partition, headers=headers
        )
        fut.add_done_callback(functools.partial(_unacknowledged, topic))
        fut.add_done_callback(self._note)
        return fut

    async def _watch_gone(self, producer: AIOKafkaProducer) -> None:
        while True:
            await asyncio.sleep(GONE_CHECK_S)
            try:
                for topic in await _fail_gone(producer):
                    log.warning("records for topic %s failed: it is not on the broker any more", topic)
            except Exception:  # (aiokafka's internals changed: the records expire as they did before)
                log.exception("looking for records of deleted topics failed")
                return

    async def _for(self, topic: str) -> AIOKafkaProducer:
        """The started producer, ready for a record of `topic`. A topic it has no metadata for is new to it
        (one metadata request), or gone from the broker (deleted since it was created): then
        `missing_topic`."""
        producer = await self._started()
        if self._missing_topic is not None and producer.client.cluster.partitions_for_topic(topic) is None:
            producer.client.add_topic(topic)
            with contextlib.suppress(Exception):  # (a broker away: the send waits for it as it would have)
                await producer.client.force_metadata_update()
            if producer.client.cluster.partitions_for_topic(topic) is None:
                await self._missing_topic(topic)
        _track(producer, topic)
        return producer

    def partition_count(self, topic: str) -> int | None:
        """The topic's partition count from the producer's metadata; None while it does not know the topic."""
        if self._producer is None:
            return None
        partitions = self._producer.client.cluster.partitions_for_topic(topic)
        return len(partitions) if partitions else None

    async def send_batch(
        self,
        topic: str,
        records: list[tuple[bytes, bytes, int]] | list[tuple[bytes, bytes, int, Headers]],
        positions: list[int] | None = None,
    ) -> list[asyncio.Future[object]]:
        """Queue (key, value, partition[, headers]) records as whole batches: ~10x cheaper per record than
        `send` (measured on the embedded broker: 700k vs 65k records/s). One future per record: its
        batch's (its RecordMetadata's offset is the batch's first; a record's own is that plus its
        position in the batch, written to `positions[i]` when a list of len(records) is given)."""
        producer = await self._for(topic)
        partitions = set(map(_PARTITION, records))
        groups: Mapping[int, Sequence[int]]
        if len(partitions) == 1:  # (a table's writes, a partition's fires: nothing to group)
            groups = {cast(int, partitions.pop()): range(len(records))}
        else:
            grouped: dict[int, list[int]] = {}
            for i, record in enumerate(records):
                grouped.setdefault(cast(int, record[2]), []).append(i)
            groups = grouped
        out: list[asyncio.Future[object] | None] = [None] * len(records)
        for partition, indexes in groups.items():
            await self._append(producer, topic, partition, records, indexes, positions, out)
        return cast(list[asyncio.Future[object]], out)

    async def _append(
        self,
        producer: AIOKafkaProducer,
        topic: str,
        partition: int,
        records: Sequence[Any],
        indexes: Sequence[int],
        positions: list[int] | None,
        out: list[asyncio.Future[object] | None],
    ) -> None:
        """The records at `indexes`, all of `partition`, in batches: each appended to aiokafka's (0.14)
        record builder itself as BatchBuilder.append would, without its checks and keywords (~0.4 µs a
        record against ~0.7: a delayed message's ingest writes two), a batch sent when full. out[i]: the
        record's batch's future; positions[i]: its place in that batch."""
        batch, count, first = producer.create_batch(), 0, 0
        for n, i in enumerate(indexes):
            record = records[i]
            key, value = record[0], record[1]
            headers = record[3] if len(record) > 3 else []
            if batch._builder.append(count, None, key, value, headers) is None:  # full: send
                fut = await self._add_full(producer, batch, count, topic, partition)
                for j in indexes[first:n]:
                    out[j] = fut
                batch, count, first = producer.create_batch(), 0, n
                if batch._builder.append(0, None, key, value, headers) is None:
                    raise ValueError(f"a record of {len(value or b'')} bytes does not fit in a batch")
            if positions is not None:
                positions[i] = count
            count += 1
        fut = await self._add_full(producer, batch, count, topic, partition)
        for j in indexes[first:]:
            out[j] = fut

    async def _add_full(
        self, producer: AIOKafkaProducer, batch: Any, count: int, topic: str, partition: int
    ) -> asyncio.Future[object]:
        """A batch _append filled: its count set and closed, as BatchBuilder.append leaves it."""
        batch._relative_offset = count
        batch.close()
        return await self._add_batch(producer, batch, topic, partition)

    async def _add_batch(
        self, producer: AIOKafkaProducer, batch: Any, topic: str, partition: int
    ) -> asyncio.Future[object]:
        """aiokafka's send_batch waits while the partition holds a batch its sender has not taken, which
        lasts as long as the partition's leader is away (up to the request timeout): the punctuator, which
        emits an instant's fires partition after partition, would hold every other partition's fires
        behind it (25-60 s gaps when a broker died). Such a batch goes to a task of its partition, in
        order, and the caller gets its future at once."""
        key = (topic, partition)
        before = self._tails.get(key)
        if (before is None or before.done()) and not _holds_a_batch(producer, topic, partition):
            fut: asyncio.Future[object] = await producer.send_batch(batch, topic, partition=partition)
            fut.add_done_callback(functools.partial(_unacknowledged, topic))  # (retrieved: never "never")
            fut.add_done_callback(self._note)
            return fut
        delivered: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        delivered.add_done_callback(functools.partial(_unacknowledged, topic))
        delivered.add_done_callback(self._note)
        task = asyncio.ensure_future(self._add_later(producer, batch, topic, partition, before, delivered))
        self._tails[key] = task
        task.add_done_callback(lambda t: self._tails.pop(key) if self._tails.get(key) is t else None)
        return delivered

    @staticmethod
    async def _add_later(
        producer: AIOKafkaProducer,
        batch: Any,
        topic: str,
        partition: int,
        before: asyncio.Future[None] | None,
        delivered: asyncio.Future[object],
    ) -> None:
        if before is not None:
            await asyncio.wait([before])  # the partition's earlier batch first
        try:
            fut = await producer.send_batch(batch, topic, partition=partition)
        except Exception as exc:
            if not delivered.done():
                delivered.set_exception(exc)
            return
        fut.add_done_callback(functools.partial(_copy_outcome, delivered))

    async def start(self) -> None:
        await self._started()

    async def settle(self) -> None:
        """Until every batch held back by _add_batch has been handed to aiokafka (a transaction commits
        only what aiokafka holds)."""
        while tails := [t for t in self._tails.values() if not t.done()]:
            await asyncio.wait(tails)

    @property
    def kafka_producer(self) -> AIOKafkaProducer:
        assert self._producer is not None, "not started"
        return self._producer

    async def stop(self, timeout_s: float | None = None) -> None:
        self._stopped = True
        if self._watch is not None:
            self._watch.cancel()
        producer, self._producer = self._producer, None
        if producer is not None:
            if timeout_s is None:
                await producer.stop()
            else:
                try:
                    await asyncio.wait_for(producer.stop(), timeout_s)
                except Exception:  # a fenced or cut-off producer: what it held is aborted anyway
                    log.debug("producer %s did not stop cleanly", self.transactional_id, exc_info=True)


#: how long a created topic may take to reach every broker's metadata before ensure() returns anyway
VISIBLE_WITHIN_S = 15.0


async def visible_everywhere(client: AIOKafkaClient, topics: list[str]) -> None:
    """Until every broker's metadata lists `topics` with a leader for each partition (at most
    VISIBLE_WITHIN_S). A KRaft broker learns of a new topic from the metadata log a moment after the
    controller created it: a consumer asking that broker first is told the topic does not exist (aiokafka's
    start raises; Faust's assignor leaves the topic out of the assignment until its next metadata refresh,
    then rebalances)."""
    deadline = asyncio.get_running_loop().time() + VISIBLE_WITHIN_S
    while True:
        behind = []
        for broker in client.cluster.brokers():
            try:
                response = await client.send(broker.nodeId, MetadataRequest(topics))
            except Exception:  # a broker that does not answer (down, restarting) answers no reader either
                continue
            led = {
                t["topic"]
                for t in response.to_object()["topics"]
                if t["error_code"] == 0 and t["partitions"] and all(p["leader"] >= 0 for p in t["partitions"])
            }
            if not led.issuperset(topics):
                behind.append(broker.nodeId)
        if not behind:
            return
        if asyncio.get_running_loop().time() > deadline:
            log.warning("topics %s not yet in the metadata of brokers %s", topics, behind)
            return
        await asyncio.sleep(0.02)  # a broker usually has it within a few ms


class TopicCreator:
    """Creates topics (output topics of schedules) once, with the cluster's defaults for the rest. A topic the
    broker refuses to create (a name colliding with another's once '.' and '_' are alike, a creation policy)
    is `refused`, with the broker's reason, until an ensure() creates or finds it."""

    def __init__(self, bootstrap_servers: str, partitions: int, replication_factor: int) -> None:
        self._bootstrap = bootstrap_servers
        self._partitions = partitions
        self._replication = replication_factor
        self._known: set[str] = set()
        self._refused: dict[str, str] = {}

    def known(self, topic: str) -> bool:
        """Created (or found) already: ensure() would return at once."""
        return topic in self._known

    async def present(self, topic: str) -> None:
        """`topic`, which a producer's metadata does not list, exists once this returns: created again if it
        was deleted since it was created (as a broker that creates topics on first use would); TopicRefused
        when the broker refuses to."""
        self._known.discard(topic)
        if (why := await self.refusal(topic)) is not None:
            raise TopicRefused(why)
        if topic in self._known:
            log.info("topic %s was not on the broker (deleted?): found or created again", topic)

    async def refusal(self, topic: str) -> str | None:
        """ensure(topic), then why the broker refuses to create it ("the broker refuses to create topic …"),
        or None when it exists (or could not be asked: a broker away)."""
        if topic not in self._known:
            await self.ensure(topic)
        why = self._refused.get(topic)
        return None if why is None else f"the broker refuses to create topic {topic}: {why}"

    async def ensure(self, *topics: str, configs: Mapping[str, Mapping[str, str]] | None = None) -> None:
        """Create those of `topics` that do not exist (`configs`: topic -> its topic configs)."""
        missing = [t for t in topics if t not in self._known]
        if not missing:
            return
        admin = AIOKafkaAdminClient(bootstrap_servers=self._bootstrap)
        await admin.start()
        refused: dict[str, str] = {}
        try:
            existing = set(await admin.list_topics())
            new = [
                NewTopic(
                    t, self._partitions, self._replication, topic_configs=dict((configs or {}).get(t, {}))
                )
                for t in missing
                if t not in existing
            ]
            if new:
                with contextlib.suppress(TopicAlreadyExistsError):
                    refused = _refusals(await admin.create_topics(new))
                created = [t.name for t in new if t.name not in refused]
                if created:
                    await visible_everywhere(admin._client, created)
        except Exception:
            log.warning("could not create topics %s; relying on broker auto-creation", missing, exc_info=True)
            return
        finally:
            await admin.close()
        for topic, reason in refused.items():
            log.warning("the broker refuses to create topic %r: %s", topic, reason)
        self._refused.update(refused)
        for topic in missing:
            if topic not in refused:
                self._refused.pop(topic, None)
                self._known.add(topic)


def _refusals(response: Any) -> dict[str, str]:
    """Topic -> the broker's reason, for each topic a CreateTopics response did not create (but for one that
    exists already)."""
    refused = {}
    for entry in response.topic_errors:
        topic, code = entry[0], entry[1]
        if code in (0, TopicAlreadyExistsError.errno):
            continue
        message = entry[2] if len(entry) > 2 and entry[2] else ""
        refused[topic] = f"{for_code(code).__name__}{': ' + message if message else ''}"
    return refused
