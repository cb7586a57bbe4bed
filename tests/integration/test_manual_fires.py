"""Trigger now and backfill (POST .../run, .../backfill), and the schedules-per-tenant limit, on a real worker."""

from __future__ import annotations

import time

import pytest

from scheduler.domain.model import Action, CronTrigger, Schedule, ScheduleCommand, ScheduleKey
from tests.helpers import Api, TopicReader, dead_letter, decode_launch, fires_of, send_commands

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

MINUTE = 60_000
#: 2026-01-01T00:00:00Z
T0 = 1_767_225_600_000


@pytest.mark.embedded
async def test_run_now_and_backfill_fire_a_time_schedule(broker, worker, app_id):
    out = f"{app_id}-out"
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out) as reader:
        # once a year: nothing fires by itself during the test
        await api.create(
            {
                "tenant": "acme",
                "name": "yearly",
                "trigger": {"type": "cron", "expression": "0 0 0 1 1 *"},
                "topic": out,
            }
        )
        # every minute at second 0: the backfill range below holds exactly 5 instants
        await api.create(
            {
                "tenant": "acme",
                "name": "minutely",
                "trigger": {"type": "cron", "expression": "0 * * * * *"},
                "topic": out,
            }
        )
        before = int(time.time() * 1000)
        r = await api.client.post("/schedules/acme/yearly/run")
        assert r.status_code == 202, r.text
        assert r.json().items() >= {"key": "acme/yearly", "action": "RUN", "fires": 1}.items(), r.json()
        r = await api.client.post("/schedules/acme/yearly/run", json={"at": T0 + 123})
        assert r.status_code == 202
        got = await reader.wait_for(lambda rec: len(fires_of(rec, "yearly")) >= 2)
        yearly = sorted(fires_of(got, "yearly"), key=lambda f: f.due_at)
        assert yearly[0].due_at == T0 + 123 and not yearly[0].catch_up
        assert yearly[1].due_at >= before and not yearly[1].catch_up

        r = await api.client.post(
            "/schedules/acme/minutely/backfill", json={"from": T0 - 1, "to": T0 + 4 * MINUTE}
        )
        assert r.status_code == 202 and r.json()["fires"] == 5, r.text
        got = await reader.wait_for(
            lambda rec: len([f for f in fires_of(rec, "minutely") if f.due_at < T0 + 10 * MINUTE]) >= 5
        )
        backfilled = sorted(f.due_at for f in fires_of(got, "minutely") if f.due_at < T0 + 10 * MINUTE)
        assert backfilled == [T0 + i * MINUTE for i in range(5)]
        assert all(f.catch_up for f in fires_of(got, "minutely") if f.due_at < T0 + 10 * MINUTE)

        # bad input: 4xx naming the field; unknown schedule 404; a range with too many fires 400
        r = await api.client.post("/schedules/acme/minutely/backfill", json={"from": T0, "to": T0 - 1})
        assert r.status_code == 400 and r.json()["fields"][0]["field"] == "to"
        r = await api.client.post("/schedules/acme/minutely/backfill", json={"from": "yesterday", "to": T0})
        assert r.status_code == 400 and r.json()["fields"][0]["field"] == "from"
        r = await api.client.post(
            "/schedules/acme/minutely/backfill", json={"from": T0, "to": T0 + 30 * 86_400_000}
        )
        assert r.status_code == 400 and "10000" in r.text
        r = await api.client.post("/schedules/acme/minutely/run", json={"at": -5})
        assert r.status_code == 400 and r.json()["fields"][0]["field"] == "at"
        assert (await api.client.post("/schedules/acme/nope/run")).status_code == 404
        assert (
            await api.client.post("/schedules/acme/nope/backfill", json={"from": T0, "to": T0})
        ).status_code == 404


async def test_run_now_makes_a_job_of_a_program_schedule_that_goes_through_its_constraints(
    broker, worker, app_id
):
    launches = f"{app_id}-launches"  # the worker's launch topic
    async with (
        Api(worker.url) as api,
        TopicReader(broker.bootstrap_servers, launches, decode_launch) as reader,
    ):
        await api.create(
            {
                "tenant": "acme",
                "name": "on-data",
                "trigger": {"type": "partition", "dataset": "acme.raw"},
                "program": "acme/etl/workflow/load",
                "data": {"date": "latest", "mode": "full"},
            }
        )
        # runtime arguments: over the schedule's data
        r = await api.client.post("/schedules/acme/on-data/run", json={"arguments": {"date": "2026-11-01"}})
        assert r.status_code == 202, r.text
        got = await reader.wait_for(lambda rec: any(x["schedule"]["name"] == "on-data" for x in rec))
        launch = next(x for x in got if x["schedule"]["name"] == "on-data")
        assert launch["arguments"]["trigger.eventType"] == "run"
        assert launch["arguments"]["date"] == "2026-11-01" and launch["arguments"]["mode"] == "full"
        r = await api.client.post("/schedules/acme/on-data/run", json={"arguments": {"date": 5}})
        assert r.status_code == 400 and r.json()["fields"][0]["field"].startswith("arguments"), r.text
        # BACKFILL needs a time trigger
        r = await api.client.post("/schedules/acme/on-data/backfill", json={"from": T0, "to": T0 + MINUTE})
        assert r.status_code == 400 and "no time trigger" in r.text


async def test_a_tenant_cannot_hold_more_schedules_than_its_limit(broker, start_worker, app_id):
    worker = start_worker(SCHEDULER_PARTITIONS="1", SCHEDULER_MAX_SCHEDULES_PER_TENANT="3")
    out = f"{app_id}-out"

    def body(tenant: str, name: str) -> dict:
        return {
            "tenant": tenant,
            "name": name,
            "trigger": {"type": "cron", "expression": "0 0 0 1 1 *"},
            "topic": out,
        }

    async with (
        Api(worker.url) as api,
        TopicReader(broker.bootstrap_servers, f"{app_id}-dead-letters", dead_letter) as dlq,
    ):
        for i in range(3):
            await api.create(body("acme", f"s{i}"))
        r = await api.client.post("/schedules", json=body("acme", "s3"))
        assert r.status_code == 409 and r.json()["error"] == "limit", r.text
        await api.create(body("beta", "s0"))  # other tenants are not affected
        # the commands topic enforces it too: the fourth INSERT is dead-lettered with the reason
        extra = ScheduleKey("acme", "s4")
        await send_commands(
            broker.bootstrap_servers,
            f"{app_id}-commands",
            ScheduleCommand(
                extra, Action.INSERT, Schedule(extra, CronTrigger("0 0 0 1 1 *"), topic=out, enabled=True)
            ),
        )
        got = await dlq.wait_for(lambda rec: any("maximum" in d["reason"] for d in rec))
        assert any("acme/s4" in d["reason"] for d in got)
        # deleting one makes room again
        await api.delete("acme", "s0")
        await api.create(body("acme", "s3"))
        r = await api.client.get("/schedules", params={"tenant": "acme"})
        assert sorted(s["name"] for s in r.json()["schedules"]) == ["s1", "s2", "s3"]
