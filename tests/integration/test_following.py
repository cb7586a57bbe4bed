"""The topics a worker follows whole (programs, calendars, notification rules, deliveries, sensor states) are
read by one consumer (worker/following.py): each map gets its own topic's records, before and after it
starts, and one that stops or heals leaves the others following."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiokafka import AIOKafkaProducer

from scheduler.kafka.consumers import FOLLOW_FETCH_MAX_WAIT_MS
from scheduler.worker.calendars import CalendarRegistry
from scheduler.worker.following import Following
from scheduler.worker.programs import ProgramRegistry
from tests.helpers import ensure_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _calendar(tenant: str, name: str, day: str) -> bytes:
    return json.dumps({"tenant": tenant, "name": name, "dates": [day]}).encode()


async def _until(check, what: str, timeout_s: float = 20.0) -> None:
    for _ in range(int(timeout_s / 0.1)):
        if check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"not within {timeout_s} s: {what}")


async def test_the_maps_a_worker_follows_share_one_consumer_and_each_gets_its_own_topic(broker, app_id):
    bootstrap = broker.bootstrap_servers
    programs_topic, calendars_topic = f"{app_id}-programs", f"{app_id}-calendars"
    for topic in (programs_topic, calendars_topic):
        await ensure_topic(bootstrap, topic)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    following = Following(bootstrap, FOLLOW_FETCH_MAX_WAIT_MS[broker.profile])
    programs = ProgramRegistry(bootstrap, programs_topic, following=following)
    calendars = CalendarRegistry(bootstrap, calendars_topic, following=following)
    spec = b'{"kind": "pyspark", "target": "x.y:z"}'
    try:
        await producer.send_and_wait(programs_topic, spec, key=b"acme/etl/spark/before")
        await producer.send_and_wait(calendars_topic, _calendar("acme", "h1", "2026-12-25"), key=b"acme/h1")
        await programs.start()
        assert programs.get("acme/etl/spark/before") is not None
        await calendars.start()  # (a second map: the first one still holds what it read)
        assert calendars.get("acme/h1") is not None and programs.get("acme/etl/spark/before") is not None
        assert programs._consumer is not None and programs._consumer is calendars._consumer, "two consumers"
        assert {tp.topic for tp in programs._consumer.assignment()} == {programs_topic, calendars_topic}

        await producer.send_and_wait(programs_topic, spec, key=b"acme/etl/spark/after")
        await producer.send_and_wait(calendars_topic, _calendar("acme", "h2", "2027-01-01"), key=b"acme/h2")
        await _until(lambda: programs.get("acme/etl/spark/after") is not None, "the program written after")
        await _until(lambda: calendars.get("acme/h2") is not None, "the calendar written after")
        assert "acme/etl/spark/after" not in calendars.all() and "acme/h2" not in programs.all()

        assert await calendars.heal()  # (a new consumer: both maps read again, nothing lost)
        await producer.send_and_wait(programs_topic, None, key=b"acme/etl/spark/before")  # (deleted)
        await _until(lambda: programs.get("acme/etl/spark/before") is None, "the deletion after a heal")
        assert calendars.get("acme/h2") is not None and programs.get("acme/etl/spark/after") is not None

        await calendars.stop()  # (the other map follows on)
        await producer.send_and_wait(programs_topic, spec, key=b"acme/etl/spark/last")
        await _until(
            lambda: programs.get("acme/etl/spark/last") is not None, "a program after the other stopped"
        )
        assert programs._consumer is not None
        assert {tp.topic for tp in programs._consumer.assignment()} == {programs_topic}
        assert await programs.read_to_end(5.0)
    finally:
        await programs.stop()
        await calendars.stop()
        await producer.stop()
    assert following.consumer is None, "the consumer outlived the last map"


class _Map:
    """A map that follows a topic (programs.TopicMap's shape: what the consumer hands it, kept)."""

    def __init__(self, topic: str) -> None:
        self.topic, self.records, self.read_to_end = topic, {}, False

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        self.records[key] = value

    def caught_up(self) -> None:
        self.read_to_end = True


async def test_a_consumer_replaced_while_it_starts_is_stopped(broker, app_id):
    """A worker's maps start following one after another, each on a new consumer: the one replaced while
    it was still starting was left open (its connections and tasks lived on until the garbage collector
    logged "Unclosed AIOKafkaConsumer", twice at every worker's start)."""
    bootstrap = broker.bootstrap_servers
    first_topic, second_topic = f"{app_id}-first", f"{app_id}-second"
    for topic in (first_topic, second_topic):
        await ensure_topic(bootstrap, topic)
    following = Following(bootstrap, FOLLOW_FETCH_MAX_WAIT_MS[broker.profile])
    first, second = _Map(first_topic), _Map(second_topic)
    try:
        await following.add(first)
        while following.consumer is None:  # (its task runs: the consumer is made, then starts)
            await asyncio.sleep(0)
        starting = following.consumer
        assert starting._fetcher is None, "it started already: no race to test"
        await following.add(second)  # (a new consumer for both: the one starting is replaced)
        assert starting._closed, "the consumer replaced while it started was left open"
        await _until(lambda: first.read_to_end and second.read_to_end, "both maps read to their end")
        assert following.consumer is not starting
    finally:
        await following.stop()
