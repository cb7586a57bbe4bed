"""Several specs in one plain schedule (issue 39 item 5) and limited actions (item 6) end to end.

An OR of crons, frequencies and a one-shot without a program fires at the union of their instants, each
once, exactly the instants `/next` promised; `/next` and `scheduler schedules next` say which spec each
instant comes from; what is not an OR of time triggers is refused with the field named.

`maxFires: N` fires N times (a program's schedule: N jobs) and the schedule is finished; GET, the list and
the CLI show the fires made and left; an update that raises it fires the difference."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.helpers import Api, TopicReader, decode_launch, fires_of, scheduler_cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture
def worker(shared_worker):  # type: ignore[no-untyped-def]
    return shared_worker


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.mark.embedded
async def test_an_or_of_time_specs_fires_their_union_each_instant_once(broker, worker, app_id, tenant):
    out = f"{app_id}-out"
    once_at = (now_ms() // 1000 + 7) * 1000 + 500  # (between the crons' whole seconds)
    trigger = {"type": "or", "triggers": [
        {"type": "cron", "expression": "*/2 * * * * *"},
        {"type": "cron", "expression": "*/3 * * * * *"},
        {"type": "once", "at": once_at},
    ]}  # fmt: skip
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out) as reader:
        for bad, field in (
            ({"type": "and", "triggers": trigger["triggers"][:2]}, "program"),
            (
                {
                    "type": "or",
                    "triggers": [
                        trigger["triggers"][0],
                        {"type": "partition", "dataset": f"{tenant}.logs", "minPartitions": 1},
                    ],
                },
                "trigger.triggers.1",
            ),  # fmt: skip
        ):
            r = await api.client.post(
                "/schedules", json={"tenant": tenant, "name": "bad", "trigger": bad, "topic": out}
            )
            assert r.status_code == 400 and r.json()["fields"][0]["field"] == field, r.text
        created = await api.create({"tenant": tenant, "name": "u", "trigger": trigger, "topic": out})
        assert created["triggerText"].startswith("(cron */2 * * * * * OR")
        promised = (await api.client.get(f"/schedules/{tenant}/u/next", params={"n": 12})).json()
        assert len(promised["next"]) == 12 and promised["next"] == sorted(set(promised["next"]))
        for at, specs in zip(promised["next"], promised["specs"], strict=True):
            due = [f"0.{i}" for i, ok in enumerate((at % 2000 == 0, at % 3000 == 0, at == once_at)) if ok]
            assert specs == due, (at, specs)
        assert once_at in promised["next"]
        assert promised["specTexts"]["0.2"].startswith("once at")
        window = promised["next"][:8]
        await reader.wait_for(lambda r: any(f.due_at >= window[-1] for f in fires_of(r, "u")), timeout_s=60)
        cli = scheduler_cli(worker.url, "schedules", "next", f"{tenant}/u", "-n", "6")
    fired = [f.due_at for f in fires_of(reader.records, "u") if window[0] <= f.due_at <= window[-1]]
    assert fired == window, "the union fires every promised instant once, and nothing else"
    assert cli.returncode == 0, cli.stderr
    assert "FROM" in cli.stdout and "0.1 cron */3 * * * * *" in cli.stdout, cli.stdout


async def _until_finished(api: Api, path: str) -> dict:  # type: ignore[type-arg]
    r = await api.until(path, lambda r: r.status_code == 200 and r.json()["finished"], timeout_s=30)
    return dict(r.json())


@pytest.mark.embedded
async def test_max_fires_fires_that_many_times_then_the_schedule_is_finished(broker, worker, app_id, tenant):
    out = f"{app_id}-out"
    body = {"tenant": tenant, "name": "three", "trigger": {"type": "cron", "expression": "* * * * * *"},
            "topic": out, "maxFires": 3}  # fmt: skip
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out) as reader:
        r = await api.client.post("/schedules", json={**body, "maxFires": 0})
        assert r.status_code == 400 and r.json()["fields"][0]["field"] == "maxFires", r.text
        created = await api.create(body)
        assert (created["maxFires"], created["fires"], created["firesLeft"], created["finished"]) == (
            3,
            0,
            3,
            False,
        )
        promised = (await api.client.get(f"/schedules/{tenant}/three/next", params={"n": 10})).json()["next"]
        assert len(promised) == 3, "no more instants than it has fires left"
        done = await _until_finished(api, f"/schedules/{tenant}/three")
        assert (done["fires"], done["firesLeft"], done["nextFireAt"]) == (3, 0, None)
        assert (await api.client.get(f"/schedules/{tenant}/three/next")).json()["next"] == []
        listed = scheduler_cli(worker.url, "schedules", "list", "--tenant", tenant)
        await asyncio.sleep(2.5)  # (what it would fire next, had it not finished)
        fired = [f.due_at for f in fires_of(reader.records, "three")]
        assert len(fired) == 3 and len(set(fired)) == 3, fired

        await api.update(
            tenant, "three", {k: v for k, v in body.items() if k not in ("tenant", "name")} | {"maxFires": 5}
        )
        more = await _until_finished(api, f"/schedules/{tenant}/three")
        assert (more["fires"], more["firesLeft"]) == (5, 0)
        await reader.wait_for(lambda r: len(fires_of(r, "three")) >= 5)
        await asyncio.sleep(2.5)
    fired = [f.due_at for f in fires_of(reader.records, "three")]
    assert len(fired) == 5 and len(set(fired)) == 5, "an update that raised maxFires to 5 fired 2 more"
    assert listed.returncode == 0 and "finished" in listed.stdout, listed.stdout + listed.stderr


async def test_max_fires_of_a_program_schedule_counts_its_jobs(broker, worker, app_id, tenant):
    launches = f"{app_id}-launches"
    body = {"tenant": tenant, "name": "twice", "trigger": {"type": "cron", "expression": "* * * * * *"},
            "topic": launches, "program": f"{tenant}/pipes/workflow/p", "maxFires": 2}  # fmt: skip
    async with (
        Api(worker.url) as api,
        TopicReader(broker.bootstrap_servers, launches, decode_launch) as reader,
    ):
        await api.create(body)
        done = await _until_finished(api, f"/schedules/{tenant}/twice")
        assert (done["fires"], done["firesLeft"]) == (2, 0)
        await reader.wait_for(lambda r: len(r) >= 2)
        await asyncio.sleep(2.5)
    assert len(reader.records) == 2, [r["jobId"] for r in reader.records]
