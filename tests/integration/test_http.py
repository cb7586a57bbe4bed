"""The HTTP API against a real worker: status codes, bodies, and the light-scheduler endpoints."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta
from functools import partial
from zoneinfo import ZoneInfo

import httpx
import pytest
from cronsim import CronSim

from tests.helpers import TopicReader, light_decode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture
def worker(shared_worker):  # type: ignore[no-untyped-def]
    """The module's worker: its tests name their schedules apart (the first, which lists them all, starts
    its own)."""
    return shared_worker


def _cron_body(name: str, topic: str, expression: str = "0 */7 * * * *", tz: str = "Asia/Kolkata") -> dict:
    return {
        "tenant": "acme",
        "name": name,
        "trigger": {"type": "cron", "expression": expression, "timezone": tz},
        "topic": topic,
        "data": {"team": "data"},
        "enabled": True,
    }


async def _eventually(
    client: httpx.AsyncClient, path: str, status: int, timeout_s: float = 15
) -> httpx.Response:
    deadline = time.monotonic() + timeout_s
    while True:
        r = await client.get(path)
        if r.status_code == status or time.monotonic() > deadline:
            return r
        await asyncio.sleep(0.1)


@pytest.mark.embedded
async def test_create_get_list_update_delete_with_their_status_codes(start_worker, app_id):
    worker = start_worker()
    out = f"{app_id}-out"
    async with httpx.AsyncClient(base_url=worker.url, timeout=10) as client:
        r = await client.post("/schedules", json=_cron_body("nightly", out))
        assert (
            r.status_code == 202 and r.json().items() >= {"key": "acme/nightly", "action": "INSERT"}.items()
        )
        assert isinstance(r.json()["partition"], int) and isinstance(r.json()["offset"], int), r.json()
        r = await _eventually(client, "/schedules/acme/nightly", 200)
        assert r.status_code == 200
        body = r.json()
        assert body["trigger"] == {"type": "cron", "expression": "0 */7 * * * *", "timezone": "Asia/Kolkata"}
        assert body["enabled"] is True and body["data"] == {"team": "data"} and body["nextFireAt"] > 0

        # The same INSERT again is idempotent; a different definition under the same key conflicts.
        assert (await client.post("/schedules", json=_cron_body("nightly", out))).status_code == 202
        r = await client.post("/schedules", json=_cron_body("nightly", out, expression="0 0 * * *"))
        assert r.status_code == 409

        await client.post("/schedules", json={**_cron_body("other", out), "tenant": "globex"})
        await _eventually(client, "/schedules/globex/other", 200)
        r = await client.get("/schedules", params={"tenant": "acme"})
        assert r.status_code == 200 and [s["key"] for s in r.json()["schedules"]] == ["acme/nightly"]
        # (a list reads what committed: with transactions it may trail a one-key read by a commit)
        deadline = time.monotonic() + 15
        while (
            len((r := await client.get("/schedules")).json()["schedules"]) < 2 and time.monotonic() < deadline
        ):
            await asyncio.sleep(0.1)
        assert [s["key"] for s in r.json()["schedules"]] == ["acme/nightly", "globex/other"]

        update = {
            k: v
            for k, v in _cron_body("nightly", out, expression="0 0 3 * * *", tz="UTC").items()
            if k not in ("tenant", "name")
        }
        assert (await client.put("/schedules/acme/nightly", json=update)).status_code == 202
        deadline = time.monotonic() + 15
        while (await client.get("/schedules/acme/nightly")).json()["version"] != 2:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        assert (await client.get("/schedules/acme/nightly")).json()["trigger"]["expression"] == "0 0 3 * * *"

        assert (await client.post("/schedules/acme/nightly/disable")).status_code == 202
        deadline = time.monotonic() + 15
        while (await client.get("/schedules/acme/nightly")).json()["enabled"]:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        assert (await client.get("/schedules/acme/nightly")).json()["nextFireAt"] is None

        assert (await client.delete("/schedules/acme/nightly")).status_code == 202
        assert (await _eventually(client, "/schedules/acme/nightly", 404)).status_code == 404


async def test_unknown_keys_get_404(worker):
    async with httpx.AsyncClient(base_url=worker.url, timeout=10) as client:
        assert (await client.get("/schedules/acme/missing")).status_code == 404
        assert (await client.get("/schedules/acme/missing/next")).status_code == 404
        assert (await client.delete("/schedules/acme/missing")).status_code == 404
        assert (await client.post("/schedules/acme/missing/enable")).status_code == 404
        body = {"trigger": {"type": "cron", "expression": "* * * * *"}, "topic": "t"}
        assert (await client.put("/schedules/acme/missing", json=body)).status_code == 404


async def test_paths_and_methods_without_a_route_get_json_errors(worker):
    """aiohttp's own 404 / 405 answer JSON like every other error (the OpenAPI document says so)."""
    async with httpx.AsyncClient(base_url=worker.url, timeout=10) as client:
        for path in ("/no/such/route", "/programs/acme/app/spark/etl/runs/run%0A1/extra"):
            r = await client.get(path)
            assert r.status_code == 404 and r.headers["content-type"].startswith("application/json"), r.text
            assert r.json()["error"] == "not found"
        r = await client.patch("/schedules")
        assert r.status_code == 405 and r.headers["content-type"].startswith("application/json"), r.text
        assert r.json()["error"] == "method not allowed" and "POST" in r.headers["Allow"]


INVALID_BODIES = [
    ({"name": None}, "name"),
    ({"trigger": {"type": "cron", "expression": "61 * * * *"}}, "trigger.expression"),
    (
        {"trigger": {"type": "cron", "expression": "* * * * *", "timezone": "Nowhere/City"}},
        "trigger.timezone",
    ),
    ({"trigger": {"type": "cron", "expression": "* * * *"}}, "trigger.expression"),
    ({"trigger": {"type": "cron", "expression": "0 0 30 2 *"}}, "trigger.expression"),  # never fires
    ({"trigger": {"type": "weekly"}}, "trigger"),
    ({"trigger": {"type": "frequency", "timeUnit": "FORTNIGHTS", "time": 1}}, "trigger.timeUnit"),
    ({"trigger": {"type": "frequency", "timeUnit": "SECONDS", "time": 0}}, "trigger.time"),
    ({"topic": "no spaces allowed"}, "topic"),
    ({"tenant": "a/b"}, "tenant"),
    ({"name": ""}, "name"),
    ({"catchUp": "SOMETIMES"}, "catchUp"),
    ({"data": {"k": 1}}, "data.k"),
    ({"unexpected": True}, "unexpected"),
]


async def test_invalid_bodies_get_400_naming_the_field(worker):
    async with httpx.AsyncClient(base_url=worker.url, timeout=10) as client:
        for change, field in INVALID_BODIES:
            body = {k: v for k, v in {**_cron_body("x", "out"), **change}.items() if v is not None}
            r = await client.post("/schedules", json=body)
            assert r.status_code == 400, (change, r.text)
            assert field in [f["field"] for f in r.json()["fields"]], (change, r.json())


async def test_a_body_that_is_not_json_gets_400(worker):
    async with httpx.AsyncClient(base_url=worker.url, timeout=10) as client:
        r = await client.post(
            "/schedules", content=b"{not json", headers={"content-type": "application/json"}
        )
    assert r.status_code == 400 and r.json()["fields"][0]["field"] == "body"


async def test_a_body_larger_than_the_server_reads_gets_a_json_413(worker):
    """(schemathesis once sent a 46 MB schedule: the 413, made JSON by web._json_errors, was undocumented)"""
    huge = {**_cron_body("x", "out"), "data": {"blob": "x" * (2 << 20)}}
    async with httpx.AsyncClient(base_url=worker.url, timeout=30) as client:
        r = await client.post("/schedules", json=huge)
        assert r.status_code == 413 and r.json()["error"] == "request entity too large", r.text
        assert (await client.get("/schedules/acme/x")).status_code == 404  # nothing was written


async def test_next_fire_times_match_an_independent_evaluator_for_a_time_zone_cron(worker, app_id):
    expression, tz = "0 15 9 * * 1-5", "Asia/Kolkata"  # weekdays 09:15 IST (UTC+05:30, no DST)
    async with httpx.AsyncClient(base_url=worker.url, timeout=10) as client:
        await client.post("/schedules", json=_cron_body("ist", f"{app_id}-out", expression, tz))
        await _eventually(client, "/schedules/acme/ist", 200)
        r = await client.get("/schedules/acme/ist/next", params={"n": 50})
    assert r.status_code == 200
    it = CronSim("15 9 * * 1-5", datetime.now(ZoneInfo(tz)))
    assert r.json()["next"] == [round(next(it).timestamp() * 1000) for _ in range(50)]


async def test_next_fire_times_follow_the_wall_clock_through_dst_changes(worker, app_id):
    """A daily 02:30 in New York, for 400 days: each day's 02:30 as zoneinfo reads it (a non-existent
    02:30 shifted by the gap, a repeated one at its first occurrence)."""
    async with httpx.AsyncClient(base_url=worker.url, timeout=10) as client:
        await client.post(
            "/schedules", json=_cron_body("ny", f"{app_id}-out", "0 30 2 * * *", "America/New_York")
        )
        await _eventually(client, "/schedules/acme/ny", 200)
        r = await client.get("/schedules/acme/ny/next", params={"n": 400})
    got = r.json()["next"]
    zone = ZoneInfo("America/New_York")
    first = datetime.fromtimestamp(got[0] / 1000, zone)
    days = [first.date() + timedelta(days=k) for k in range(400)]
    expected = [round(datetime(d.year, d.month, d.day, 2, 30, tzinfo=zone).timestamp() * 1000) for d in days]
    assert got == expected


async def test_light_scheduler_endpoints_accept_its_task_definition_json(broker, worker, app_id):
    out = f"{app_id}-light-out"
    definition = {
        "host": "networknt.com",
        "name": "report",
        "action": "INSERT",
        "frequency": {"timeUnit": "SECONDS", "time": 1},
        "topic": out,
        "data": {"a": "b"},
    }
    async with (
        httpx.AsyncClient(base_url=worker.url, timeout=10) as client,
        TopicReader(broker.bootstrap_servers, out, partial(light_decode, "TaskDefinition")) as reader,
    ):
        r = await client.post("/schedulers", json=definition)
        assert r.status_code == 200
        fired = await reader.wait_for(lambda rec: len(rec) >= 2)  # what light-scheduler sends: its definition
        assert all(f == {**definition, "start": f["start"]} and f["start"] % 1000 == 0 for f in fired)
        r = await client.get(
            "/schedulers", params={"host": "networknt.com", "name": "report", "unit": "SECONDS"}
        )
        assert r.status_code == 200
        assert r.json() == [{**definition, "start": None}]
        assert (
            await client.get("/schedulers", params={"host": "networknt.com", "unit": "MINUTES"})
        ).json() == []
        r = await client.post("/schedulers", json={**definition, "frequency": None})
        assert r.status_code == 400 and r.json()["fields"][0]["field"] == "frequency"
