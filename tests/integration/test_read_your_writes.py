"""Read your writes over HTTP (scheduler/http/applied.py): a 202 says where its command is, `.../applied`
says when its owner has applied it, and `?wait=applied` answers only then — also when the worker asked
is not the key's owner. Without it, a create then an immediate disable answered 404 in 8 of 8 tries."""

from __future__ import annotations

import asyncio
import json
from datetime import date

import httpx
import pytest

from tests.helpers import wait_split

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def _schedule(name: str, topic: str) -> dict[str, object]:
    return {"tenant": "acme", "name": name, "trigger": {"type": "cron", "expression": "0 0 1 1 *"},
            "topic": topic}  # fmt: skip


@pytest.mark.embedded
async def test_a_write_asked_to_wait_is_answered_once_applied_and_the_next_write_finds_it(
    shared_worker, app_id
):
    topic = f"{app_id}-out"
    async with httpx.AsyncClient(base_url=shared_worker.url, timeout=30) as client:
        health = (await client.get("/health")).json()
        assert health["ready"] and health["stalled"] == [] and "notReady" not in health, health
        for i in range(5):  # (each create then enable at once: such a write found nothing before)
            name = f"ryw-{i}"
            created = await client.post("/schedules?wait=applied", json=_schedule(name, topic))
            assert created.status_code == 200, created.text
            body = created.json()
            assert body["applied"] is True and body["version"] == 1, body
            assert isinstance(body["offset"], int) and isinstance(body["partition"], int), body
            enabled = await client.post(f"/schedules/acme/{name}/enable?wait=applied")
            assert enabled.status_code == 200, enabled.text
            assert enabled.json()["version"] == 2, enabled.json()
            got = await client.get(f"/schedules/acme/{name}")
            assert got.status_code == 200 and got.json()["enabled"] is True, got.text

        # without wait: a 202 with where the command is, and the owner tells when it is applied
        accepted = await client.post("/schedules", json=_schedule("ryw-later", topic))
        assert accepted.status_code == 202, accepted.text
        offset = accepted.json()["offset"]
        applied = await client.get(f"/schedules/acme/ryw-later/applied?offset={offset}&waitMs=10000")
        assert applied.status_code == 200 and applied.json() == {
            "key": "acme/ryw-later", "offset": offset, "applied": True
        }, applied.text  # fmt: skip
        assert (await client.get("/schedules/acme/ryw-later")).status_code == 200
        # an offset not written yet is not applied, after the wait asked for
        ahead = await client.get(f"/schedules/acme/ryw-later/applied?offset={offset + 1000}&waitMs=200")
        assert ahead.status_code == 200 and ahead.json()["applied"] is False, ahead.text

        bad = await client.post("/schedules?wait=soon", json=_schedule("ryw-bad", topic))
        assert bad.status_code == 400 and bad.json()["fields"][0]["field"] == "wait", bad.text
        bad = await client.post("/schedules?wait=applied&waitMs=-1", json=_schedule("ryw-bad", topic))
        assert bad.status_code == 400 and bad.json()["fields"][0]["field"] == "waitMs", bad.text
        bad = await client.get("/schedules/acme/ryw-later/applied?offset=x")
        assert bad.status_code == 400 and bad.json()["fields"][0]["field"] == "offset", bad.text


async def test_a_write_to_a_worker_that_does_not_own_the_key_waits_for_the_owner(start_worker):
    first = start_worker()
    second = start_worker(partitions=0)
    wait_split(first, second)
    topic = "ryw-two-out"
    for w in (first, second):  # whichever worker is asked, the owner is asked in turn
        async with httpx.AsyncClient(base_url=w.url, timeout=30) as client:
            for i in range(6):  # (keys over several partitions: some owned by the other worker)
                name = f"two-{w.url[-5:]}-{i}"
                created = await client.post("/schedules?wait=applied", json=_schedule(name, topic))
                assert created.status_code == 200 and created.json()["applied"], created.text
                deleted = await client.delete(f"/schedules/acme/{name}?wait=applied")
                assert deleted.status_code == 200, deleted.text
                assert deleted.json()["applied"] is True and deleted.json().get("version") is None
                assert (await client.get(f"/schedules/acme/{name}")).status_code == 404


async def test_a_followed_topic_is_read_to_its_end_while_its_followers_fetch_waits(broker, app_id):
    """The lookup of an absent program, calendar or rule reads its topic to the end first (TopicMap.
    read_to_end: read-your-writes). The end is asked on a connection of its own: a broker answers one
    request of a connection at a time, and on the follower's the ask waited behind its fetch, which waits
    its whole fetch_max_wait when no record comes (500 ms on Kafka: every such 404 took that long). Here
    the follower's fetch waits 30 s, so the ask would time out."""
    from aiokafka import AIOKafkaProducer

    from scheduler.domain.calendars import Calendar
    from scheduler.kafka.producer import TopicCreator
    from scheduler.worker.calendars import CalendarRegistry

    topic = f"{app_id}-calendars"
    await TopicCreator(broker.bootstrap_servers, 1, 1).ensure(topic)
    calendars = CalendarRegistry(broker.bootstrap_servers, topic, profile="kafka", fetch_max_wait_ms=30_000)
    await calendars.start()
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    await producer.start()
    try:
        await asyncio.sleep(0.5)  # (its fetch is waiting at the broker now: nothing comes)
        assert await calendars.read_to_end(wait_s=5.0), "the end was not read within 5 s"
        assert await calendars.lookup("acme/absent", wait_s=5.0) is None
        holidays = Calendar("acme", "holidays", dates=frozenset([date(2027, 1, 1)]))
        await producer.send_and_wait(topic, json.dumps(holidays.to_json()).encode(), key=b"acme/holidays")
        found = await calendars.lookup("acme/holidays", wait_s=10.0)  # (produced: the fetch answers)
        assert found == holidays
    finally:
        await producer.stop()
        await calendars.stop()
