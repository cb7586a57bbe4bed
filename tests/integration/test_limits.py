"""Limits on what a schedule does (issue 39 items 6 and 7) end to end.

`maxFires: N` fires N times (a program's schedule: N jobs) and the schedule is finished; GET, the list and
the CLI show the fires made and left; an update that raises it fires the difference.

Weighted slots: in a concurrency group of 2, a run of a schedule with `slots: 2` holds both; the other
schedule's job waits, and `jobs why` (GET /jobs) says it needs a slot that the heavy run holds; once that
run ends, it launches."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.helpers import SHORT_SESSION, Api, TopicReader, decode_launch, fires_of, scheduler_cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture
def worker(shared_worker):  # type: ignore[no-untyped-def]
    return shared_worker


async def _until_finished(api: Api, path: str) -> dict:  # type: ignore[type-arg]
    r = await api.until(path, lambda r: r.status_code == 200 and r.json()["finished"], timeout_s=30)
    return dict(r.json())


@pytest.mark.embedded
async def test_max_fires_fires_that_many_times_then_the_schedule_is_finished(broker, worker, app_id, tenant):
    out = f"{app_id}-out"
    body = {"tenant": tenant, "name": "three", "trigger": {"type": "cron", "expression": "* * * * * *"},
            "topic": out, "maxFires": 3,
            "notBefore": int(time.time() * 1000) + 4000}  # fmt: skip  # (none fired while it is looked at)
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


@pytest.mark.embedded
async def test_a_heavy_run_holds_its_slots_of_the_group_and_the_next_job_waits_for_one(
    broker, worker, app_id, tenant
):
    launches = f"{app_id}-launches"
    group = {"type": "concurrency", "maxRuns": 2, "group": "warehouse"}

    def schedule(name: str, dataset: str, **constraint: int) -> dict:  # type: ignore[type-arg]
        return {"tenant": tenant, "name": name, "trigger": {"type": "partition", "dataset": f"{tenant}.{dataset}"},
                "topic": launches, "program": f"{tenant}/wh/workflow/{name}", "constraints": [{**group, **constraint}]}  # fmt: skip

    async with (
        Api(worker.url) as api,
        TopicReader(broker.bootstrap_servers, launches, decode_launch) as reader,
    ):
        await api.create(schedule("heavy", "big", slots=2))
        r = await api.client.post(
            "/schedules", json={**schedule("bad", "x", slots=3), "program": f"{tenant}/wh/workflow/heavy"}
        )
        assert r.status_code == 400 and r.json()["fields"][0]["field"] == "constraints.concurrency.slots", (
            r.text
        )
        await api.create(schedule("light", "small"))
        await api.partitions(f"{tenant}.big", "p1")
        await reader.wait_for(lambda r: len(r) == 1)
        heavy = reader.records[0]
        await api.partitions(f"{tenant}.small", "p1")
        jobs = await api.wait_jobs(lambda j: len(j["jobs"]) == 1, schedule=f"{tenant}/light")
        reason = jobs["jobs"][0]["reason"]
        assert reason == "2 slots of 2 held by active runs in group warehouse; this job needs 1 slot", reason
        why = scheduler_cli(worker.url, "jobs", "why", f"{tenant}/light")
        assert why.returncode == 0 and "this job needs 1 slot" in why.stdout, why.stdout + why.stderr
        await asyncio.sleep(1.5)
        assert len(reader.records) == 1, "the light job launched while the heavy run held both slots"
        await api.status(
            f"{tenant}/wh/workflow/heavy",
            heavy["runId"],
            "COMPLETED",
        )
        await reader.wait_for(lambda r: len(r) == 2, timeout_s=30)
    assert reader.records[1]["runId"].startswith(f"{tenant}/light@")


@pytest.mark.serial
@pytest.mark.timeout(240)
async def test_a_limited_schedule_fires_exactly_its_max_across_its_owners_sigkill(
    broker, start_worker, app_id, tmp_path
):
    """Kafka: the count of fires commits with the fires. 16 limited schedules (every second, EACH, 12
    fires) on worker A; B joins (a handover) and A is SIGKILLed mid-way (a takeover, the missed instants
    caught up). A read_committed reader sees each schedule's first 12 instants, each once, and no more."""
    out = f"{app_id}-out"
    a = start_worker(**SHORT_SESSION)
    names = [f"l{i:02d}" for i in range(16)]
    async with Api(a.url) as api, TopicReader(broker.bootstrap_servers, out) as reader:
        for name in names:
            await api.create({"tenant": "acme", "name": name, "trigger": {"type": "frequency", "timeUnit": "SECONDS",
                              "time": 1}, "topic": out, "catchUp": "EACH", "maxFires": 12})  # fmt: skip
        b = start_worker(partitions=0, SCHEDULER_DATA_DIR=str(tmp_path / "b"))
        await asyncio.sleep(3)
        a.kill()
    async with Api(b.url) as api, TopicReader(broker.bootstrap_servers, out) as reader:
        deadline = time.monotonic() + 90
        for name in names:
            while (r := await api.client.get(f"/schedules/acme/{name}")).status_code != 200 or not r.json()[
                "finished"
            ]:
                assert time.monotonic() < deadline, f"{name} did not finish: {r.text}"
                await asyncio.sleep(0.3)
            assert r.json()["fires"] == 12, r.text
        await reader.wait_for(lambda recs: len(recs) >= 12 * len(names), timeout_s=30)
        await asyncio.sleep(3)  # (what would come next, had it not finished)
        states = {n: (await api.client.get(f"/schedules/acme/{n}")).json() for n in names}
    for name in names:
        dues = sorted(f.due_at for f in fires_of(reader.records, name))
        start = (states[name]["activeSince"] // 1000 + 1) * 1000
        assert dues == [start + i * 1000 for i in range(12)], (name, dues)
