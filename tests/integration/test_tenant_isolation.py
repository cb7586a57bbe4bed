"""Tenant lines on a real worker, over HTTP: a list filtered by another tenant's schedule or tenant is 403
(never an empty 200), and two tenants naming the same concurrency group hold none of each other's jobs.
The group tests play the launcher: they read launch requests and publish the runs' status events."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from aiokafka import AIOKafkaProducer

from scheduler.domain.constraints import ConcurrencyConstraint
from scheduler.domain.jobs import Job, ProgramQueue
from scheduler.http.auth import hash_token
from scheduler.kafka.partitioner import kafka_partition
from scheduler.wire.codec import encode_json
from tests.conftest import Broker
from tests.helpers import Api, TopicReader, WorkerProcess, decode_launch

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TOKENS = {
    "admin": ("tok-admin-tenants-0123456789abcdef", ["*"]),
    "acme": ("tok-acme-tenants-0123456789abcdef", ["acme"]),
    "beta": ("tok-beta-tenants-0123456789abcdef", ["beta"]),
}
PARTITIONS = 4


def _auth_env(directory: Path) -> dict[str, str]:
    path = directory / "tokens.yaml"
    tokens = [
        {"name": who, "sha256": hash_token(token), "scopes": ["sched:r", "sched:w"], "tenants": tenants}
        for who, (token, tenants) in TOKENS.items()
    ]
    path.write_text(yaml.safe_dump({"tokens": tokens}))
    return {"SCHEDULER_AUTH": "on", "SCHEDULER_AUTH_TOKENS_FILE": str(path)}


def _h(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who][0]}"}


def _held(tenant: str, out: str) -> dict[str, Any]:
    """A schedule whose job stays pending (an hour's delay): something for its tenant's lists to show."""
    return {
        "tenant": tenant,
        "name": "held",
        "trigger": {"type": "partition", "dataset": f"{tenant}.raw"},
        "program": f"{tenant}/app/workflow/p",
        "topic": out,
        "constraints": [{"type": "delay", "delayMs": 3_600_000}],
    }


async def _beta_has_a_pending_job(url: str, out: str) -> None:
    async with Api(url, TOKENS["beta"][0]) as beta:
        await beta.create(_held("beta", out))
        await beta.partitions("beta.raw", "2026-11-22")
        await beta.wait_jobs(lambda j: len(j["jobs"]) == 1, schedule="beta/held")


@pytest.fixture(scope="module")
def lists_worker(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    """One worker with auth for the read-only list checks (they change nothing), beta with a pending job."""
    base = tmp_path_factory.mktemp("tenant-lists")
    app_id = f"t{uuid.uuid4().hex[:10]}"
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
        "SCHEDULER_BROKER_PROFILE": broker.profile,
        "SCHEDULER_APP_ID": app_id,
        "SCHEDULER_PARTITIONS": str(PARTITIONS),
        "SCHEDULER_DATA_DIR": str(base / "data"),
        "SCHEDULER_LIGHT_TOPIC": f"{app_id}-light-scheduler",
        "SCHEDULER_LOG_LEVEL": "info",
        **_auth_env(base),
    }
    worker = WorkerProcess(env, log_path=base / "worker.log")
    try:
        worker.start()
        worker.wait_ready()
        asyncio.run(_beta_has_a_pending_job(worker.url, f"{app_id}-launches"))
        yield worker
    finally:
        worker.kill()


#: every list route that takes a tenant, schedule, program or job filter ("{t}": the tenant asked about)
FILTERED_LISTS = {
    "schedules?tenant": ("/schedules", {"tenant": "{t}"}),
    "schedulers?host": ("/schedulers", {"host": "{t}"}),
    "schedulers?host&name": ("/schedulers", {"host": "{t}", "name": "held"}),
    "jobs?schedule": ("/jobs", {"schedule": "{t}/held"}),
    "jobs?program": ("/jobs", {"program": "{t}/app/workflow/p"}),
    "jobs?jobId": ("/jobs", {"jobId": "{t}/held@v1.1"}),
    "triggers?eventKey": ("/triggers", {"eventKey": "partition:{t}.raw"}),
    "programs/…/runs": ("/programs/{t}/app/workflow/p/runs", {}),
    "programs/…/runs?status": ("/programs/{t}/app/workflow/p/runs", {"status": "RUNNING"}),
}


@pytest.mark.parametrize(("path", "query"), FILTERED_LISTS.values(), ids=FILTERED_LISTS.keys())
def test_a_list_filtered_by_another_tenants_schedule_or_tenant_is_403(
    lists_worker: WorkerProcess, path: str, query: dict[str, str]
) -> None:
    def get(who: str, tenant: str) -> httpx.Response:
        params = {k: v.format(t=tenant) for k, v in query.items()}
        return httpx.get(lists_worker.url + path.format(t=tenant), params=params, headers=_h(who), timeout=10)

    refused = get("acme", "beta")
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"] == "forbidden" and "'beta'" in refused.json()["reason"]
    own = get("beta", "beta")
    assert own.status_code == 200, own.text
    if path == "/jobs":  # the filter is real: beta's own token finds its job with it
        assert [j["jobId"] for j in own.json()["jobs"]] == ["beta/held@v1.1"]
    assert get("acme", "acme").status_code == 200  # one's own tenant: answered (empty)


# --- concurrency groups: one name, one group per tenant ------------------------------------------


def _in_group(tenant: str, name: str, out: str, group: str = "etl") -> dict[str, Any]:
    return {
        "tenant": tenant,
        "name": name,
        "trigger": {"type": "partition", "dataset": f"{tenant}.raw"},
        "program": f"{tenant}/app/workflow/{name}",
        "topic": out,
        "constraints": [{"type": "concurrency", "maxRuns": 1, "group": group}],
    }


async def test_two_tenants_naming_the_same_group_do_not_hold_each_others_jobs(
    broker, start_worker, tmp_path, app_id
):
    worker = start_worker(**_auth_env(tmp_path))
    out = f"{app_id}-launches"
    async with (
        Api(worker.url, TOKENS["acme"][0]) as acme,
        Api(worker.url, TOKENS["beta"][0]) as beta,
        TopicReader(broker.bootstrap_servers, out, decode_launch) as launches,
    ):
        await acme.create(_in_group("acme", "load", out))
        await beta.create(_in_group("beta", "load", out))
        await acme.partitions("acme.raw", "1")
        await launches.wait_for(lambda r: len(r) == 1)  # acme's run: active in acme's group etl
        await beta.partitions("beta.raw", "1")
        await launches.wait_for(lambda r: len(r) == 2)  # beta's group etl is another group: not held
        acme_run, beta_run = (r["jobId"] for r in launches.records)
        assert (acme_run.split("/")[0], beta_run.split("/")[0]) == ("acme", "beta")

        await beta.partitions("beta.raw", "2")
        held = await beta.wait_jobs(lambda j: len(j["jobs"]) == 1, schedule="beta/load")
        # held by beta's own run only: "1", and nothing of acme's two runs (the next one is below)
        assert held["jobs"][0]["reason"] == "1 run active in group etl, at most 1"
        await acme.partitions("acme.raw", "2")
        held = await acme.wait_jobs(lambda j: len(j["jobs"]) == 1, schedule="acme/load")
        assert held["jobs"][0]["reason"] == "1 run active in group etl, at most 1"

        await acme.run("acme/app/workflow/load", acme_run, "STARTING", "RUNNING", "COMPLETED")
        await launches.wait_for(lambda r: len(r) == 3)  # acme's second job, released by acme's run
        await asyncio.sleep(1)
        assert len(launches.records) == 3  # beta's job still waits: acme's run was never beta's
        assert (await beta.jobs(schedule="beta/load"))["jobs"]
        await beta.run("beta/app/workflow/load", beta_run, "COMPLETED")
        await launches.wait_for(lambda r: len(r) == 4)
    assert [r["schedule"]["tenant"] for r in launches.records] == ["acme", "beta", "acme", "beta"]


async def test_a_group_queue_shared_by_every_tenant_is_handed_to_its_tenants_queues(
    broker, start_worker, tmp_path, app_id
):
    """State written before groups were resolved within a tenant: one queue `group:etl` for everybody,
    here with acme's job waiting behind beta's run. A worker that recovers it hands acme's job to acme's
    group, where beta's run does not count, and beta's run to beta's."""
    first = start_worker()
    out = f"{app_id}-launches"
    async with Api(first.url) as api:
        await api.create(_in_group("acme", "load", out))
        await api.create(_in_group("beta", "load", out))
    first.stop()

    beta_run = "beta/load@1704067100000"  # launched by the shared queue, still running
    job = Job(
        job_id="acme/load@v1.1",
        schedule="acme/load",
        version=1,
        program="acme/app/workflow/load",
        topic=out,
        arguments={},
        triggered_at=1_704_067_200_000,
        constraints=(ConcurrencyConstraint(1, group="etl"),),
        timeout=None,
        reason="1 run active in group etl, at most 1",
        blocked_by="ConcurrencyConstraint",
    )
    shared = ProgramQueue(
        "group:etl",
        jobs=[job],
        active={beta_run: "RUNNING"},
        run_program={beta_run: "beta/app/workflow/load"},
        launched=[beta_run],
    )
    key = b"group:etl"
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    await producer.start()
    try:
        await producer.send_and_wait(
            f"{app_id}-job-queue-changelog",
            encode_json(shared.to_json()),
            key=key,
            partition=kafka_partition(key, PARTITIONS),
        )
    finally:
        await producer.stop()

    second = start_worker(SCHEDULER_DATA_DIR=str(tmp_path / "fresh"))  # the table from its changelog
    async with Api(second.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        await launches.wait_for(lambda r: len(r) == 1)
        assert launches.records[0]["jobId"] == "acme/load@v1.1"
        await api.partitions("beta.raw", "1")  # beta's group still has beta's run: its job waits
        held = await api.wait_jobs(lambda j: len(j["jobs"]) == 1, schedule="beta/load")
        assert held["jobs"][0]["reason"] == "1 run active in group etl, at most 1"
        await api.run("beta/app/workflow/load", beta_run, "COMPLETED")
        await launches.wait_for(lambda r: len(r) == 2)
    assert [r["schedule"]["tenant"] for r in launches.records] == ["acme", "beta"]
