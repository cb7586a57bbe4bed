"""SLAs (deadlines), end to end on a real broker: a job's run that does not complete within its
schedule's `completeWithinMs` of its trigger, and a schedule that makes no job for `fireAtLeastEveryMs`,
each raise an Alert on the alerts topic, count in /metrics, and show among the schedule's recent outcomes
(`GET /jobs`, what `scheduler jobs why` and the admin page show). The test plays the launcher."""

from __future__ import annotations

import asyncio
import re
from functools import partial
from typing import Any

import pytest

from scheduler.wire.codec import decode
from tests.helpers import Api, TopicReader, decode_launch

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ETL = "acme/feeds/workflow/etl"


def alerts_total(metrics: str, kind: str) -> float:
    match = re.search(rf'^scheduler_alerts_total{{kind="{kind}"}} (\S+)$', metrics, re.M)
    return float(match.group(1)) if match else 0.0


async def test_user_story_3_a_run_not_complete_within_its_sla_after_the_data_arrived_raises_one_alert(
    broker, worker, app_id
):
    """Seed 003's user story 3 ("the SLA for processing is 3 hours after arrival"), in seconds: the first
    run completes within its 3 s, the second does not: one DEADLINE_MISSED alert, for that job."""
    out = f"{app_id}-launches"
    body: dict[str, Any] = {
        "tenant": "acme",
        "name": "feed-sla",
        "trigger": {"type": "partition", "dataset": "acme.feed"},
        "program": ETL,
        "topic": out,
        "completeWithinMs": 3_000,
    }
    async with (
        Api(worker.url) as api,
        TopicReader(broker.bootstrap_servers, out, decode_launch) as launches,
        TopicReader(broker.bootstrap_servers, f"{app_id}-alerts", partial(decode, "Alert")) as alerts,
    ):
        created = await api.create(body)
        assert created["completeWithinMs"] == 3_000
        await api.partitions("acme.feed", "p1")
        first = (await launches.wait_for(lambda r: len(r) >= 1))[0]
        await api.run(ETL, first["runId"], "STARTING", "RUNNING", "COMPLETED")  # in time
        await api.partitions("acme.feed", "p2")
        second = (await launches.wait_for(lambda r: len(r) >= 2))[1]
        await api.run(ETL, second["runId"], "STARTING", "RUNNING")  # and then nothing
        await alerts.wait_for(lambda r: len(r) >= 1, timeout_s=30)
        await asyncio.sleep(4)  # (no second alert: the first job met its deadline)
        recent = (await api.jobs(schedule="acme/feed-sla"))["recent"]
        metrics = (await api.client.get("/metrics")).text
    [alert] = alerts.records
    assert (alert["kind"], alert["schedule"], alert["jobId"]) == (
        "DEADLINE_MISSED",
        "acme/feed-sla",
        second["jobId"],
    )
    assert alert["dueBy"] == second["triggeredAt"] + 3_000 and alert["raisedAt"] >= alert["dueBy"]
    assert "its run had not completed" in alert["reason"]
    assert [(o["jobId"], o["outcome"]) for o in recent] == [(second["jobId"], "DEADLINE_MISSED")]
    assert alerts_total(metrics, "DEADLINE_MISSED") == 1


async def test_a_schedule_that_makes_no_job_for_its_fire_at_least_every_raises_alerts_that_back_off(
    broker, worker, app_id
):
    out = f"{app_id}-launches"
    body: dict[str, Any] = {
        "tenant": "acme",
        "name": "stale-feed",
        "trigger": {"type": "partition", "dataset": "acme.stale"},
        "program": ETL,
        "topic": out,
        "fireAtLeastEveryMs": 2_000,
    }
    async with (
        Api(worker.url) as api,
        TopicReader(broker.bootstrap_servers, f"{app_id}-alerts", partial(decode, "Alert")) as alerts,
    ):
        created = await api.create(body)
        # one at the 1st, 2nd and 4th late period (backing off), each saying which it is
        got = await alerts.wait_for(lambda r: len(r) >= 3, timeout_s=30)
        recent = await api.wait_jobs(
            lambda j: any(o["outcome"] == "NOT_FIRED" for o in j["recent"]), schedule="acme/stale-feed"
        )
        r = await api.client.post("/schedules", json={**body, "name": "no-program", "program": None, "topic": "t", "trigger": {"type": "cron", "expression": "* * * * *"}})  # fmt: skip
        assert r.status_code == 400 and r.json()["fields"][0]["field"] == "fireAtLeastEveryMs", r.text
        metrics = (await api.client.get("/metrics")).text
    first, second, third = got[:3]
    assert first["kind"] == "NOT_FIRED" and first["schedule"] == "acme/stale-feed" and first["jobId"] is None
    start = created["activeSince"]
    assert [a["dueBy"] for a in (first, second, third)] == [start + 2_000, start + 4_000, start + 8_000]
    assert "none since it became active" in first["reason"] and "alert 1 of this silence" in first["reason"]
    assert "alert 3 of this silence" in third["reason"] and "(4 periods of" in third["reason"]
    assert any(o["outcome"] == "NOT_FIRED" for o in recent["recent"])
    assert alerts_total(metrics, "NOT_FIRED") >= 2
