"""Run caps end to end (issue 39 item 7): a worker with SCHEDULER_MAX_ACTIVE_RUNS=3 and
SCHEDULER_TENANT_MAX_ACTIVE_RUNS=2. Jobs of five programs (on their own job queues, most on other
partitions) launch while their tenant and the deployment have slots; the others wait (PENDING_CAP, and
`jobs why` says which cap), and launch as runs end, oldest ask first. The test plays the launcher: the
launch requests read from the schedules' topic, the run statuses sent as program-status events."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.helpers import Api, TopicReader, decode_launch, scheduler_cli

pytestmark = [pytest.mark.integration, pytest.mark.embedded, pytest.mark.timeout(180)]


async def test_the_deployment_and_tenant_caps_hold_jobs_until_runs_end(broker, start_worker, app_id):
    worker = start_worker(SCHEDULER_MAX_ACTIVE_RUNS="3", SCHEDULER_TENANT_MAX_ACTIVE_RUNS="2")
    launches = f"{app_id}-launches"
    async with (
        Api(worker.url) as api,
        TopicReader(broker.bootstrap_servers, launches, decode_launch) as reader,
    ):
        names = {"a1": "alpha", "a2": "alpha", "a3": "alpha", "b1": "beta", "b2": "beta"}
        for name, tenant in names.items():
            await api.create({"tenant": tenant, "name": name, "topic": launches,
                              "trigger": {"type": "partition", "dataset": f"{tenant}.{name}"},
                              "program": f"{tenant}/etl/workflow/{name}"})  # fmt: skip

        def launched() -> list[str]:
            return [x["schedule"]["name"] for x in reader.records]

        def of(name: str) -> dict[str, Any]:
            return next(x for x in reader.records if x["schedule"]["name"] == name)

        async def trigger(name: str) -> None:
            await api.partitions(f"{names[name]}.{name}", "p")

        async def waiting(name: str, why: str) -> dict[str, Any]:
            tenant = names[name]
            jobs = await api.wait_jobs(
                lambda j: bool(j["jobs"]) and why in j["jobs"][0]["reason"], schedule=f"{tenant}/{name}"
            )
            return dict(jobs["jobs"][0])

        for name in ("a1", "a2", "b1"):
            await trigger(name)
            await reader.wait_for(lambda r, name=name: name in launched())  # type: ignore[misc]
        await trigger("a3")
        job = await waiting("a3", "tenant alpha has 2 runs active, at most 2")
        assert (job["state"], job["blockedBy"]) == ("PENDING_CAP", "RunCap"), job
        await trigger("b2")
        await waiting("b2", "3 runs active in the deployment, at most 3 (SCHEDULER_MAX_ACTIVE_RUNS)")
        why = scheduler_cli(worker.url, "jobs", "why", "beta/b2")
        assert why.returncode == 0 and "SCHEDULER_MAX_ACTIVE_RUNS" in why.stdout, why.stdout + why.stderr
        await asyncio.sleep(1)
        assert launched() == ["a1", "a2", "b1"], "a job launched over a cap"

        await api.run("alpha/etl/workflow/a1", of("a1")["runId"], "STARTING", "RUNNING", "COMPLETED")
        await reader.wait_for(lambda r: len(r) == 4)
        assert (
            launched()[3] == "a3"
        )  # (asked before b2: its tenant has a slot again, and so has the deployment)
        await asyncio.sleep(1)
        assert len(reader.records) == 4, "b2 launched while the deployment was at its cap"
        await api.status("beta/etl/workflow/b1", of("b1")["runId"], "FAILED")
        await reader.wait_for(lambda r: len(r) == 5)
    assert launched() == ["a1", "a2", "b1", "a3", "b2"]
