"""The scheduler's topics from Python, for producers and consumers: schedule commands straight onto the
commands topic (Avro, keyed and partitioned exactly as the workers partition them), events onto the events
topic, and the fires and launch requests read back (read_committed on Kafka: a fenced or aborted
transaction's records are never seen).

    async with CommandProducer("broker:9092", app_id="scheduler", partitions=8) as producer:
        await producer.insert(Schedule(ScheduleKey("acme", "nightly"), CronTrigger("0 0 2 * * *"),
                                       "acme-fires", enabled=True))
        await producer.disable(ScheduleKey("acme", "nightly"))

    async with RecordReader("broker:9092", "acme-fires") as reader:
        async for fire in reader.fires():
            print(fire.key.id, fire.due_at, fire.data)

`partitions` and `app_id` must be the workers' (SCHEDULER_PARTITIONS, SCHEDULER_APP_ID): a command on
another partition than its key's would be applied by a worker that does not own the schedule."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from scheduler.domain.delayed import EPOCH_HEADER, TARGET_KEY_HEADER, TARGET_TOPIC_HEADER
from scheduler.domain.events import Notification, event_key
from scheduler.domain.events import parse as parse_event
from scheduler.domain.model import Action, FiredTask, PauseRequest, Schedule, ScheduleCommand, ScheduleKey
from scheduler.kafka.consumers import isolation
from scheduler.kafka.partitioner import kafka_partition
from scheduler.wire.codec import DecodeError, decode, encode, encode_command, key_bytes, notification_to_avro
from scheduler.wire.command_headers import command_headers
from scheduler.wire.fires import decode_fired

#: the defaults of the workers' settings (scheduler.kafka.config.Settings)
DEFAULT_APP_ID = "scheduler"
DEFAULT_PARTITIONS = 8


async def produce_keyed(
    producer: AIOKafkaProducer, topic: str, records: Iterable[tuple[bytes, bytes]], partitions: int
) -> int:
    """Produce (key, value) records in whole batches, each on its key's partition among `partitions` (the
    workers' partitioner); returns how many, once the broker has them all."""
    futures: list[Any] = []
    batches: dict[int, Any] = {}
    sent = 0
    for key, value in records:
        partition = kafka_partition(key, partitions)
        batch = batches.get(partition)
        if batch is None:
            batch = batches[partition] = producer.create_batch()
        if batch.append(key=key, value=value, timestamp=None) is None:  # full: send it, start another
            futures.append(await producer.send_batch(batch, topic, partition=partition))
            batch = batches[partition] = producer.create_batch()
            batch.append(key=key, value=value, timestamp=None)
        sent += 1
    for partition, batch in batches.items():
        futures.append(await producer.send_batch(batch, topic, partition=partition))
    await asyncio.gather(*futures)
    return sent


class CommandProducer:
    """Schedule commands and events onto the scheduler's topics. Every call returns once the broker has
    the record (acks=all); the worker that owns the key applies it a moment later (its result: the
    schedule over HTTP, or a dead letter on `<app>-dead-letters` with the reason if it was refused)."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        app_id: str = DEFAULT_APP_ID,
        partitions: int = DEFAULT_PARTITIONS,
        commands_topic: str | None = None,
        events_topic: str | None = None,
        delayed_topic: str | None = None,
        by: str | None = None,
        **producer_options: Any,
    ) -> None:
        """`by`: who sends the commands (the schedule's history shows it); `producer_options`: aiokafka's."""
        self.partitions = partitions
        self.commands_topic = commands_topic or f"{app_id}-commands"
        self.events_topic = events_topic or f"{app_id}-events"
        self.delayed_topic = delayed_topic or f"{app_id}-delayed"
        self.by = by
        options = {"acks": "all", "linger_ms": 5, "max_batch_size": 512 * 1024, **producer_options}
        self._producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, **options)

    async def __aenter__(self) -> CommandProducer:
        await self._producer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._producer.stop()

    # --- one command ----------------------------------------------------------------------------

    async def send(
        self, command: ScheduleCommand, *, deadline_ms: int | None = None, if_version: int | None = None
    ) -> None:
        """Any command. `deadline_ms` (epoch ms): not applied after it (a retry past its caller's timeout
        never lands over a newer write); `if_version`: applied only over that version of the schedule."""
        key = key_bytes(command.key)
        headers = command_headers(deadline_ms=deadline_ms, if_version=if_version, by=self.by)
        await self._producer.send_and_wait(
            self.commands_topic,
            encode_command(command),
            key=key,
            partition=kafka_partition(key, self.partitions),
            headers=headers or None,
        )

    async def insert(self, schedule: Schedule, **conditions: Any) -> None:
        """Create the schedule (a schedule that exists is replaced: upsert)."""
        await self.send(ScheduleCommand(schedule.key, Action.INSERT, schedule), **conditions)

    async def update(self, schedule: Schedule, **conditions: Any) -> None:
        """Change an existing schedule (refused to the dead letters if it does not exist)."""
        await self.send(ScheduleCommand(schedule.key, Action.UPDATE, schedule), **conditions)

    async def delete(self, key: ScheduleKey, **conditions: Any) -> None:
        await self.send(ScheduleCommand(key, Action.DELETE), **conditions)

    async def enable(self, key: ScheduleKey, **conditions: Any) -> None:
        await self.send(ScheduleCommand(key, Action.ENABLE), **conditions)

    async def disable(
        self, key: ScheduleKey, note: str | None = None, until: int | None = None, **conditions: Any
    ) -> None:
        """Pause it: with a note for people, and an instant (epoch ms) it resumes at by itself."""
        pause = None if note is None and until is None else PauseRequest(note, until)
        await self.send(ScheduleCommand(key, Action.DISABLE, pause=pause), **conditions)

    # --- many, and events -----------------------------------------------------------------------

    async def send_many(self, commands: Iterable[ScheduleCommand]) -> int:
        """Commands in whole batches per partition (bulk loads: ~10× one at a time); how many were sent."""
        return await self.send_encoded((key_bytes(c.key), encode_command(c)) for c in commands)

    async def send_encoded(self, records: Iterable[tuple[bytes, bytes]]) -> int:
        """Commands already encoded (key_bytes, encode_command), in whole batches per partition."""
        return await produce_keyed(self._producer, self.commands_topic, records, self.partitions)

    async def publish(self, event_type: str, payload: dict[str, str], timestamp_ms: int | None = None) -> str:
        """An event (seed 002's Notification: `partition`, `dataSize`, `programStatus`, ...) on the events
        topic, keyed as the workers route it; returns its key. A malformed event raises InvalidEvent here,
        before anything is produced."""
        ts = time.time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
        notification = Notification(ts, event_type, dict(payload))
        key = event_key(parse_event(notification)).encode()
        await self._producer.send_and_wait(
            self.events_topic,
            encode("Notification", notification_to_avro(notification)),
            key=key,
            partition=kafka_partition(key, self.partitions),
        )
        return key.decode()

    # --- delayed messages -----------------------------------------------------------------------

    async def send_at(
        self,
        id: str | bytes,
        topic: str,
        value: bytes | None,
        at_ms: int,
        *,
        key: bytes | None = None,
        headers: Iterable[tuple[str, bytes]] = (),
    ) -> None:
        """Deliver `value` to `topic` at `at_ms` (epoch ms), with `key` (else the id) and `headers`: a
        delayed message (docs: Deliver a record later). The same id again replaces it; `cancel` drops it."""
        control = [(EPOCH_HEADER, str(at_ms).encode()), (TARGET_TOPIC_HEADER, topic.encode())]
        if key is not None:
            control.append((TARGET_KEY_HEADER, key))
        await self._delayed(id, value if value is not None else b"", [*control, *headers])

    async def cancel(self, id: str | bytes) -> None:
        """Cancel the delayed message of this id (a tombstone: nothing happens if none is pending)."""
        await self._delayed(id, None, None)

    async def _delayed(
        self, id: str | bytes, value: bytes | None, headers: list[tuple[str, bytes]] | None
    ) -> None:
        kb = id.encode() if isinstance(id, str) else id
        await self._producer.send_and_wait(
            self.delayed_topic, value, key=kb, partition=kafka_partition(kb, self.partitions), headers=headers
        )


@dataclass(frozen=True)
class Record:
    """A record as read: its value decoded with the reader's schema (None and `error` set if it did not
    decode)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: dict[str, Any] | None
    error: str | None = None
    raw: bytes | None = None  # the bytes that did not decode


class RecordReader:
    """Reads one of the scheduler's output topics: fires (`FiredTask`, the default schema), launch requests
    (`LaunchRequest`), dead letters (`DeadLetter`), alerts (`Alert`), run transitions (`Notification`).
    From the end (`from_beginning`: from the start), without a consumer group unless `group_id` is given
    (then its offsets are committed as records are yielded). On Kafka (`profile="kafka"`, the default)
    only committed records are read."""

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        schema: str = "FiredTask",
        profile: str = "kafka",
        from_beginning: bool = False,
        group_id: str | None = None,
        **consumer_options: Any,
    ) -> None:
        self.topic, self.schema = topic, schema
        options = {
            "auto_offset_reset": "earliest" if from_beginning else "latest",
            "enable_auto_commit": group_id is not None,
            "group_id": group_id,
            **isolation("tansu" if profile == "tansu" else "kafka"),
            **consumer_options,
        }
        self._consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap_servers, **options)

    async def __aenter__(self) -> RecordReader:
        try:
            await self._consumer.start()
        except BaseException:  # (no broker: a consumer that never started is still closed)
            with contextlib.suppress(Exception):
                await self._consumer.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            await self._consumer.stop()

    async def records(self) -> AsyncIterator[Record]:
        """Every record from where the reader starts, decoded; forever (break out of the loop to stop)."""
        async for msg in self._consumer:
            try:
                value = decode(self.schema, msg.value)
            except DecodeError as exc:
                yield Record(
                    msg.topic, msg.partition, msg.offset, msg.timestamp, msg.key, None, str(exc), msg.value
                )
                continue
            yield Record(msg.topic, msg.partition, msg.offset, msg.timestamp, msg.key, value)

    async def fires(self) -> AsyncIterator[FiredTask]:
        """The fires of a schedule output topic, typed (records that are not fires are skipped)."""
        async for msg in self._consumer:
            try:
                fire = decode_fired(msg.value)
            except DecodeError:
                continue
            yield fire
