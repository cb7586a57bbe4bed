"""Bounded schedules (notBefore / notAfter), one-shot schedules, spread and jitter, end to end on a real
broker: through HTTP and the commands topic, fires read from the output topic, `finished` and `/next` read
over HTTP."""

from __future__ import annotations

import asyncio
import time

import pytest

from scheduler.domain.triggers.shaping import jitter_of, spread_offset
from tests.helpers import Api, TopicReader, fires_of

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

DAY = 86_400_000


@pytest.fixture
def worker(shared_worker):  # type: ignore[no-untyped-def]
    """The module's worker: each test names its schedules apart and reads a topic of its own."""
    return shared_worker


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def test_a_one_shot_schedule_fires_once_at_its_instant_then_shows_finished(broker, worker, app_id):
    out = f"{app_id}-out"
    at = now_ms() + 3_000
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out) as reader:
        created = await api.create(
            {"tenant": "acme", "name": "once", "trigger": {"type": "once", "at": at}, "topic": out}
        )
        assert created["nextFireAt"] == at and created["finished"] is False
        assert created["triggerText"].startswith("once at ")
        await reader.wait_for(lambda r: len(fires_of(r, "once")) >= 1)
        await asyncio.sleep(2)
        done = (await api.client.get("/schedules/acme/once")).json()
        listed = (await api.client.get("/schedules", params={"tenant": "acme"})).json()["schedules"]
    assert [f.due_at for f in fires_of(reader.records, "once")] == [at]
    assert done["finished"] is True and done["nextFireAt"] is None  # kept, visible, fires no more
    assert [s["finished"] for s in listed if s["name"] == "once"] == [True]


async def test_a_bounded_schedule_fires_only_between_not_before_and_not_after(broker, worker, app_id):
    out = f"{app_id}-out"
    start = (now_ms() // 1000 + 3) * 1000
    body = {
        "tenant": "acme",
        "name": "bounded",
        "trigger": {"type": "frequency", "timeUnit": "SECONDS", "time": 1},
        "topic": out,
        "notBefore": start,
        "notAfter": start + 3_000,
    }
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out) as reader:
        created = await api.create(body)
        assert created["nextFireAt"] == start and created["notAfter"] == start + 3_000
        await reader.wait_for(lambda r: len(fires_of(r, "bounded")) >= 4)
        await asyncio.sleep(2.5)
        done = (await api.client.get("/schedules/acme/bounded")).json()
        r = await api.client.post("/schedules", json={**body, "name": "backwards", "notAfter": start - 1})
        assert r.status_code == 400 and r.json()["fields"][0]["field"] == "notAfter"
    assert [f.due_at for f in fires_of(reader.records, "bounded")] == [start + i * 1000 for i in range(4)]
    assert done["finished"] is True


async def test_jitter_moves_each_fire_by_its_own_stable_amount(broker, worker, app_id):
    """Every 2 s with up to 1.5 s of jitter: each fire's dueAt is its nominal instant plus the jitter
    derived from (schedule, instant), the job id follows it, and /next showed the same instants."""
    out = f"{app_id}-out"
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out) as reader:
        await api.create(
            {
                "tenant": "acme",
                "name": "jittered",
                "trigger": {"type": "cron", "expression": "*/2 * * * * *"},
                "topic": out,
                "jitterMs": 1_500,
            }
        )
        shown = (await api.client.get("/schedules/acme/jittered/next", params={"n": "6"})).json()["next"]
        await reader.wait_for(lambda r: len(fires_of(r, "jittered")) >= 5)
    fires = fires_of(reader.records, "jittered")
    for f in fires:
        nominal = f.due_at - f.due_at % 2000
        assert f.due_at == nominal + jitter_of("acme/jittered", nominal, 1_500), f
        assert f.job_id == f"acme/jittered@{f.due_at}" and f.fired_at >= f.due_at
    assert len({f.due_at % 2000 for f in fires}) > 1  # (not one offset for all)
    # /next lists the instants after it was asked: a fire due before (the first may be) is not among them
    assert [f.due_at for f in fires if f.due_at >= shown[0]][:3] == shown[:3]


async def test_user_story_5_thousands_of_daily_feeds_at_no_particular_time_are_spread_over_the_day(
    broker, worker, app_id
):
    """Seed 003's user story 5. 300 daily feeds "at no particular time" (`spreadMs`: a day) get each a
    stable slot of the day from its key, shown by /next (their first fire is hours away): every hour of the
    day has some, none has many; one with a slot seconds away fires there."""
    out = f"{app_id}-out"
    daily = {"type": "cron", "expression": "0 0 0 * * *"}
    names = [f"feed-{i}" for i in range(300)]
    async with Api(worker.url) as api:
        for name in names:
            r = await api.client.post(
                "/schedules",
                json={
                    "tenant": "acme",
                    "name": name,
                    "trigger": daily,
                    "topic": out,
                    "spreadMs": DAY,
                    "enabled": True,
                },
            )
            assert r.status_code == 202, r.text
        slots = {}
        for name in names:
            got = await api.until(f"/schedules/acme/{name}/next", lambda r: r.status_code == 200)
            first = got.json()["next"][0]
            slots[name] = first % DAY
    assert slots == {name: spread_offset(f"acme/{name}", DAY) for name in names}  # stable: from the key
    per_hour = [sum(1 for s in slots.values() if s // 3_600_000 == h) for h in range(24)]
    assert min(per_hour) >= 3 and max(per_hour) <= 25, per_hour

    # a frequent one, to see a spread schedule fire in its slot: every 2 s, anywhere in those 2 s
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out) as reader:
        await api.create(
            {
                "tenant": "acme",
                "name": "every-2s-anytime",
                "trigger": {"type": "frequency", "timeUnit": "SECONDS", "time": 2, "start": 0},
                "topic": out,
                "spreadMs": 2_000,
            }
        )
        await reader.wait_for(lambda r: len(fires_of(r, "every-2s-anytime")) >= 2, timeout_s=30)
    offset = spread_offset("acme/every-2s-anytime", 2_000)
    assert offset % 1_000 != 0  # (in its slot, not on a whole second)
    assert all(f.due_at % 2_000 == offset for f in fires_of(reader.records, "every-2s-anytime"))
