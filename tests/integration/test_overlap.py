"""Overlap policies end to end (issue 39 item 1): what a schedule's job does while a run of its earlier jobs
is active — SKIP, BUFFER_ONE, BUFFER_ALL, ALLOW_ALL, CANCEL_OTHER and TERMINATE_OTHER.

The first test plays the launcher itself (run statuses as program-status events, the launch requests read
from the schedules' topic, the stop requests from the launcher control topic); the second runs real
programs under the embedded launcher and sees the run in the way stopped, then killed."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import pytest

from tests.helpers import Api, TopicReader, decode_launch, metric, scheduler_cli

pytestmark = [pytest.mark.integration, pytest.mark.embedded, pytest.mark.timeout(240)]


@pytest.fixture
def worker(shared_worker):  # type: ignore[no-untyped-def]
    return shared_worker


def _control(value: bytes) -> dict[str, Any]:
    return dict(json.loads(value))


def _schedule(tenant: str, name: str, dataset: str, topic: str, overlap: str) -> dict[str, Any]:
    return {"tenant": tenant, "name": name, "trigger": {"type": "partition", "dataset": f"{tenant}.{dataset}"},
            "topic": topic, "program": f"{tenant}/etl/workflow/{name}", "overlap": overlap}  # fmt: skip


async def test_each_policy_launches_skips_buffers_or_stops_as_it_says(broker, worker, app_id, tenant):
    launches = f"{app_id}-launches"
    names = ("skip", "one", "all", "any", "cancel", "terminate")
    policies = ("SKIP", "BUFFER_ONE", "BUFFER_ALL", "ALLOW_ALL", "CANCEL_OTHER", "TERMINATE_OTHER")
    async with (
        Api(worker.url) as api,
        TopicReader(broker.bootstrap_servers, launches, decode_launch) as reader,
        TopicReader(broker.bootstrap_servers, worker.topic("launcher-control"), _control) as control,
    ):
        plain = {"tenant": tenant, "name": "plain", "topic": "t", "overlap": "SKIP",
                 "trigger": {"type": "cron", "expression": "0 * * * *"}}  # fmt: skip
        for body, field in ((plain, "overlap"), ({**_schedule(tenant, "x", "x", "t", "NEVER")}, "overlap")):
            r = await api.client.post("/schedules", json=body)
            assert r.status_code == 400 and r.json()["fields"][0]["field"] == field, r.text
        for name, policy in zip(names, policies, strict=True):
            await api.create(_schedule(tenant, name, name, launches, policy))

        def of(name: str) -> list[dict[str, Any]]:
            return [x for x in reader.records if x["schedule"]["name"] == name]

        async def trigger(name: str) -> None:
            await api.partitions(f"{tenant}.{name}", "p")

        async def done(name: str, launch: dict[str, Any], status: str = "COMPLETED") -> None:
            await api.status(f"{tenant}/etl/workflow/{name}", launch["runId"], status)

        for name in names:  # a first job each, launched
            await trigger(name)
        await reader.wait_for(lambda r: all(len(of(n)) == 1 for n in names))
        for name in ("cancel", "terminate"):  # their first runs started (as a launcher would say)
            await api.run(
                f"{tenant}/etl/workflow/{name}", of(name)[0]["runId"], "PREPARING", "STARTING", "RUNNING"
            )
        await api.until(
            f"/programs/{tenant}/etl/workflow/terminate/runs",
            lambda r: r.status_code == 200 and [x["status"] for x in r.json()["runs"]] == ["RUNNING"],
        )
        for name in names:  # two more triggers each, while the first run is active
            await trigger(name)
            await api.wait_jobs(lambda j: True, schedule=f"{tenant}/{name}")
            await trigger(name)
        await reader.wait_for(lambda r: len(of("any")) == 3)
        # (a read_committed reader may see the stop requests a moment before the worker's own store has
        # the transaction that sent them: the HTTP answer is waited for until it shows all four waiting)
        jobs = await api.wait_jobs(
            lambda j: (
                sum(x["schedule"] == f"{tenant}/all" for x in j["jobs"]) == 2
                and len(control.records) >= 2
                and sum(o["schedule"] == f"{tenant}/skip" for o in j["recent"]) == 2
                and {x["schedule"].split("/")[1] for x in j["jobs"]} == {"one", "all", "cancel", "terminate"}
            ),
            tenant=tenant,
        )
        waiting = {j["schedule"].split("/")[1]: j for j in jobs["jobs"]}
        assert all(j["blockedBy"] == "OverlapPolicy" for j in jobs["jobs"]), jobs
        assert waiting["one"]["reason"] == (
            f"overlap BUFFER_ONE: waits for run {of('one')[0]['runId']} of the schedule to end"
        )
        skipped = [o for o in jobs["recent"] if o["schedule"] == f"{tenant}/skip"]
        assert {o["outcome"] for o in skipped} == {"SKIP"} and "overlap SKIP: run" in skipped[0]["reason"]
        why = scheduler_cli(worker.url, "jobs", "why", f"{tenant}/cancel")
        assert why.returncode == 0 and "overlap CANCEL_OTHER" in why.stdout, why.stdout + why.stderr
        stops = {c["runId"]: c for c in control.records}
        assert stops[of("cancel")[0]["runId"]]["type"] == "stop"
        assert stops[of("terminate")[0]["runId"]]["type"] == "terminate"
        assert stops[of("terminate")[0]["runId"]]["reason"].startswith("killed by overlap TERMINATE_OTHER")
        await asyncio.sleep(1)
        assert [len(of(n)) for n in names] == [1, 1, 1, 3, 1, 1], "a job launched over an active run"

        for name in ("skip", "one", "all"):
            await done(name, of(name)[0])
        await api.run(f"{tenant}/etl/workflow/cancel", of("cancel")[0]["runId"], "STOPPING", "STOPPED")
        await done("terminate", of("terminate")[0], "KILLED")
        await reader.wait_for(lambda r: [len(of(n)) for n in names] == [1, 2, 2, 3, 2, 2])
        assert of("one")[1]["jobId"].endswith(".2")  # the waiting job, the third trigger folded in
        await asyncio.sleep(1)
        assert len(of("all")) == 2, "BUFFER_ALL launched its next job while the last one ran"
        await done("all", of("all")[1])
        await reader.wait_for(lambda r: len(of("all")) == 3)
        await trigger("skip")  # no run active now: it launches
        await reader.wait_for(lambda r: len(of("skip")) == 2)
        shown = scheduler_cli(worker.url, "schedules", "get", f"{tenant}/all")
        assert shown.returncode == 0 and "BUFFER_ALL" in shown.stdout, shown.stdout + shown.stderr
        metrics = (await api.client.get("/metrics")).text
    assert metric(metrics, "scheduler_overlap_stops_total") == 2
    assert metric(metrics, 'scheduler_job_outcomes_total{outcome="SKIP"}') >= 2


@pytest.mark.timeout(300)
async def test_a_run_in_the_way_is_stopped_or_killed_by_the_launcher_and_the_next_one_starts(
    start_worker, tenant
):
    """Real programs: a run that sleeps a minute is in the way of the next job; CANCEL_OTHER stops it
    (SIGTERM: STOPPED), TERMINATE_OTHER kills it (SIGKILL: KILLED); each with why, then the next run."""
    worker = start_worker(SCHEDULER_LAUNCHER="embedded")
    sleep = {"kind": "command", "argv": [sys.executable, "-c", "import time; time.sleep(60)"]}
    async with Api(worker.url) as api:
        for name, policy in (("cancel", "CANCEL_OTHER"), ("terminate", "TERMINATE_OTHER")):
            await api.register(f"{tenant}/etl/command/{name}", sleep)
            body = {**_schedule(tenant, name, name, "t", policy), "program": f"{tenant}/etl/command/{name}"}
            del body["topic"]  # (the launch topic the launcher reads)
            await api.create(body)
            await api.partitions(f"{tenant}.{name}", "p")

        async def runs(name: str, predicate) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
            r = await api.until(
                f"/programs/{tenant}/etl/command/{name}/runs",
                lambda r: r.status_code == 200 and predicate(r.json()["runs"]),
                timeout_s=60,
            )
            return list(r.json()["runs"])

        for name in ("cancel", "terminate"):
            await runs(name, lambda rs: len(rs) == 1 and rs[0]["status"] == "RUNNING")
            await api.partitions(f"{tenant}.{name}", "p")
        cancelled = await runs("cancel", lambda rs: len(rs) == 2 and rs[1]["status"] == "RUNNING")
        terminated = await runs("terminate", lambda rs: len(rs) == 2 and rs[1]["status"] == "RUNNING")
    first = cancelled[0]
    assert first["status"] == "STOPPED" and first["error"].startswith("stopped by overlap CANCEL_OTHER"), (
        first
    )
    assert [t[0] for t in first["transitions"]][-2:] == ["STOPPING", "STOPPED"]
    first = terminated[0]
    assert first["status"] == "KILLED" and first["error"].startswith("killed by overlap TERMINATE_OTHER"), (
        first
    )
    assert [t[0] for t in first["transitions"]][-2:] == ["STOPPING", "KILLED"]
    for pair in (cancelled, terminated):
        assert pair[1]["created_at"] >= pair[0]["ended_at"], "the next run started before the last ended"
