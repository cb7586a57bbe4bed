"""Finished schedules deleted past their retention, on a real broker: a one-shot fires once, is shown
finished, and once SCHEDULER_FINISHED_RETENTION_MS has passed its owner deletes it (a DELETE of the commands
path, `by: retention`), making room in its tenant's cap; a recurring schedule and a one-shot still to come
stay."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.helpers import Api, TopicReader, fires_of, metric

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


async def test_a_fired_one_shot_goes_after_the_retention_and_frees_its_place_in_the_cap(
    broker, start_worker, app_id
):
    worker = start_worker(SCHEDULER_PARTITIONS="1", SCHEDULER_MAX_SCHEDULES_PER_TENANT="3",
                          SCHEDULER_FINISHED_RETENTION_MS="3000")  # fmt: skip
    out = f"{app_id}-out"
    now = int(time.time() * 1000)
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out) as reader:
        await api.create(
            {"tenant": "acme", "name": "soon", "topic": out, "trigger": {"type": "once", "at": now + 1500}}
        )
        await api.create({"tenant": "acme", "name": "later", "topic": out,
                          "trigger": {"type": "once", "at": now + 3_600_000}})  # fmt: skip
        await api.create({"tenant": "acme", "name": "daily", "topic": out,
                          "trigger": {"type": "cron", "expression": "0 0 3 * * *"}})  # fmt: skip
        extra = {
            "tenant": "acme",
            "name": "extra",
            "topic": out,
            "trigger": {"type": "cron", "expression": "0 0 4 * * *"},
        }
        full = await api.client.post("/schedules", json=extra)
        assert full.status_code == 409 and full.json()["error"] == "limit", full.text
        await reader.wait_for(lambda r: len(fires_of(r, "soon")) == 1)
        shown = (await api.client.get("/schedules/acme/soon")).json()
        assert shown["finished"] is True, shown
        deadline = time.monotonic() + 60
        while (await api.client.get("/schedules/acme/soon")).status_code != 404:
            assert time.monotonic() < deadline, "the finished one-shot was not deleted"
            await asyncio.sleep(0.5)
        gone_at = int(time.time() * 1000)
        assert gone_at - (now + 1500) >= 3000, "deleted before its retention"
        for name in ("later", "daily"):
            assert (await api.client.get(f"/schedules/acme/{name}")).status_code == 200
        await api.create(extra)  # (its place in the cap is free)
        await asyncio.sleep(6)  # (another sweep or so: nothing else goes)
        listed = (await api.client.get("/schedules", params={"tenant": "acme"})).json()["schedules"]
        assert sorted(s["name"] for s in listed) == ["daily", "extra", "later"]
        metrics = (await api.client.get("/metrics")).text
    assert len(fires_of(reader.records, "soon")) == 1
    assert metric(metrics, "scheduler_retention_deletes_total") == 1, metrics
