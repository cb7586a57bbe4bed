"""Auth and tenants over HTTP on a real worker: 401 vs 403, scopes, and every way to cross a tenant line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from scheduler.http.auth import hash_token
from tests.helpers import Api, wait_split

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TOKENS = {
    "admin": ("tok-admin-0123456789abcdef", ["sched:r", "sched:w"], ["*"]),
    "acme": ("tok-acme-rw-0123456789abcdef", ["sched:r", "sched:w"], ["acme"]),
    "acme-ro": ("tok-acme-ro-0123456789abcdef", ["sched:r"], ["acme"]),
    "beta": ("tok-beta-rw-0123456789abcdef", ["sched:r", "sched:w"], ["beta"]),
}


def _config() -> dict[str, Any]:
    return {
        "tokens": [
            {"name": name, "sha256": hash_token(token), "scopes": scopes, "tenants": tenants}
            for name, (token, scopes, tenants) in TOKENS.items()
        ]
    }


def _h(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who][0]}"}


def _cron(tenant: str, name: str, **extra: Any) -> dict[str, Any]:
    return {
        "tenant": tenant,
        "name": name,
        "trigger": {"type": "cron", "expression": "0 0 0 1 1 *"},
        "enabled": True,
        **extra,
    }


def _on_partition(tenant: str, name: str, dataset: str, program: str) -> dict[str, Any]:
    return {
        "tenant": tenant,
        "name": name,
        "trigger": {"type": "partition", "dataset": dataset},
        "program": program,
        "constraints": [{"type": "delay", "delayMs": 3_600_000}],  # stays pending: visible in /jobs
        "enabled": True,
    }


@pytest.fixture
def auth_env(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump(_config()))
    return {"SCHEDULER_AUTH": "on", "SCHEDULER_AUTH_TOKENS_FILE": str(path)}


async def test_401_403_scopes_and_tenant_lines_on_every_route(start_worker, auth_env, app_id):
    worker = start_worker(**auth_env)
    out = f"{app_id}-out"
    async with (
        httpx.AsyncClient(base_url=worker.url, timeout=10) as anon,
        Api(worker.url, TOKENS["acme"][0]) as acme,
        Api(worker.url, TOKENS["beta"][0]) as beta,
        Api(worker.url, TOKENS["admin"][0]) as admin,
    ):
        c = anon
        # --- authentication: 401 with WWW-Authenticate, never a body of data
        r = await c.get("/schedules")
        assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
        assert (await c.get("/schedules", headers={"Authorization": "Basic abc"})).status_code == 401
        assert (await c.get("/schedules", headers={"Authorization": "Bearer nope"})).status_code == 401
        assert (await c.post("/events", json={"eventType": "partition", "payload": {}})).status_code == 401
        assert (await c.get("/health")).status_code == 200  # public: liveness probes
        # --- scopes: a read-only token cannot write (403 insufficient_scope), can read
        r = await c.post("/schedules", json=_cron("acme", "ro", topic=out), headers=_h("acme-ro"))
        assert r.status_code == 403 and r.json()["error"] == "insufficient_scope"
        assert (await c.get("/schedules", headers=_h("acme-ro"))).status_code == 200

        # --- writes: own tenant yes, another's no
        await acme.create(_cron("acme", "a1", topic=out))
        await beta.create(_cron("beta", "b1", topic=out))
        r = await acme.client.post("/schedules", json=_cron("beta", "sneaky", topic=out))
        assert r.status_code == 403 and "beta" in r.json()["reason"]
        for method, path, body in [
            ("GET", "/schedules/beta/b1", None),
            (
                "PUT",
                "/schedules/beta/b1",
                {"trigger": {"type": "cron", "expression": "* * * * * *"}, "topic": out},
            ),
            ("DELETE", "/schedules/beta/b1", None),
            ("POST", "/schedules/beta/b1/enable", None),
            ("POST", "/schedules/beta/b1/disable", None),
            ("GET", "/schedules/beta/b1/next", None),
            ("GET", "/schedules/beta/b1/trigger", None),
            ("POST", "/schedules/beta/b1/run", None),
            ("POST", "/schedules/beta/b1/backfill", {"from": 1_700_000_000_000, "to": 1_700_000_060_000}),
            ("GET", "/schedules?tenant=beta", None),
            ("GET", "/schedulers?host=beta", None),
            ("GET", "/triggers?eventKey=partition:beta.raw", None),
            ("PUT", "/programs/beta/app/workflow/p", {"kind": "external"}),
            ("GET", "/programs/beta/app/workflow/p", None),
            ("GET", "/programs/beta/app/workflow/p/runs", None),
            ("GET", "/programs/beta/app/workflow/p/status", None),
            ("POST", "/programs/beta/app/workflow/p/runs/x/stop", None),
        ]:
            r = await acme.client.request(method, path, json=body)
            assert r.status_code == 403, (method, path, r.status_code, r.text)
        # light-scheduler's POST /schedulers: host is the tenant
        td = {
            "host": "beta",
            "name": "td",
            "action": "INSERT",
            "frequency": {"timeUnit": "MINUTES", "time": 1},
            "topic": out,
        }
        assert (await acme.client.post("/schedulers", json=td)).status_code == 403
        assert (await beta.client.post("/schedulers", json=td)).status_code == 200
        assert (await acme.client.post("/schedulers", json={**td, "host": "acme"})).status_code == 200

        # --- a schedule may not launch or watch another tenant's programs and data
        await beta.register("beta/app/workflow/p")
        await acme.register("acme/app/workflow/p")
        for body in [
            _on_partition("acme", "x1", "acme.raw", "beta/app/workflow/p"),
            _on_partition("acme", "x2", "beta.raw", "acme/app/workflow/p"),
            {
                "tenant": "acme",
                "name": "x3",
                "trigger": {"type": "programStatus", "program": "beta/app/workflow/p", "on": ["SUCCEEDED"]},
                "program": "acme/app/workflow/p",
            },
        ]:
            r = await acme.client.post("/schedules", json=body)
            assert r.status_code == 403, (body, r.text)

        # --- events: only of one's own datasets and programs
        r = await acme.client.post(
            "/events",
            json={"eventType": "partition", "payload": {"datasetId": "beta.raw", "partitionKeys": '["k"]'}},
        )
        assert r.status_code == 403
        r = await acme.client.post(
            "/events",
            json={
                "eventType": "program-status",
                "payload": {"programId": "beta/app/workflow/p", "runId": "r1", "status": "COMPLETED"},
            },
        )
        assert r.status_code == 403

        # --- reads: lists show one's own tenants only (jobs and programs included)
        await acme.create(_on_partition("acme", "on-raw", "acme.raw", "acme/app/workflow/p"))
        await beta.create(_on_partition("beta", "on-raw", "beta.raw", "beta/app/workflow/p"))
        await acme.partitions("acme.raw", "2026-11-22")
        await beta.partitions("beta.raw", "2026-11-22")
        both = await admin.wait_jobs(
            lambda j: {x["schedule"] for x in j["jobs"]} >= {"acme/on-raw", "beta/on-raw"}
        )
        assert {x["schedule"] for x in both["jobs"]} >= {"acme/on-raw", "beta/on-raw"}
        acme_jobs = await acme.jobs()
        assert acme_jobs["jobs"] and {x["schedule"].split("/")[0] for x in acme_jobs["jobs"]} == {"acme"}
        assert all(x["program"].startswith("acme/") for x in acme_jobs["recent"])
        keys = [s["key"] for s in (await acme.client.get("/schedules")).json()["schedules"]]
        assert "acme/a1" in keys and not [k for k in keys if not k.startswith("acme/")]
        await admin.until("/schedulers", lambda r: {s["host"] for s in r.json()} >= {"acme", "beta"})
        assert {s["host"] for s in (await acme.client.get("/schedulers")).json()} == {"acme"}
        assert set((await acme.client.get("/programs")).json()) == {"acme/app/workflow/p"}
        assert set((await admin.client.get("/programs")).json()) >= {
            "acme/app/workflow/p",
            "beta/app/workflow/p",
        }
        assert (await acme.client.get("/schedules/acme/a1/next")).status_code == 200
        assert (await acme.client.get("/triggers?eventKey=partition:acme.raw")).status_code == 200

        # --- routes that are not about one tenant need an every-tenant token
        assert (await acme.client.get("/metrics")).status_code == 403
        assert (await admin.client.get("/metrics")).status_code in (200, 404)  # 404 until metrics exist


async def test_forwarded_and_fanned_out_queries_keep_the_token(start_worker, auth_env, app_id):
    """With two workers, queries hop to the owner: the hop carries the caller's token, not a master key."""
    first = start_worker(**auth_env)
    second = start_worker(partitions=0, **auth_env)
    wait_split(first, second)  # (a write while the group rebalances would be a 503)
    out = f"{app_id}-out"
    names = [f"s{i:02d}" for i in range(12)]
    async with Api(first.url, TOKENS["admin"][0]) as admin:
        for name in names:
            assert (
                await admin.client.post("/schedules", json=_cron("acme", name, topic=out))
            ).status_code == 202
            assert (
                await admin.client.post("/schedules", json=_cron("beta", name, topic=out))
            ).status_code == 202
    deadline = time.monotonic() + 60
    async with httpx.AsyncClient(timeout=10) as c:
        while True:
            r = await c.get(f"{second.url}/schedules", headers=_h("admin"))
            if r.status_code == 200 and r.json()["total"] == 2 * len(names):
                break
            assert time.monotonic() < deadline, r.text
            time.sleep(0.2)
        owners = {w.url: set(w.health()["partitions"]) for w in (first, second)}
        assert all(owners.values()), owners  # both own partitions: some keys are answered by a hop
        for w in (first, second):
            r = await c.get(f"{w.url}/schedules", headers=_h("acme"))
            assert r.status_code == 200 and sorted(s["key"] for s in r.json()["schedules"]) == [
                f"acme/{n}" for n in names
            ]
            for name in names:
                assert (await c.get(f"{w.url}/schedules/acme/{name}", headers=_h("acme"))).status_code == 200
                assert (await c.get(f"{w.url}/schedules/beta/{name}", headers=_h("acme"))).status_code == 403
                assert (await c.get(f"{w.url}/schedules/acme/{name}")).status_code == 401


def _worker_refuses_to_start(env: dict[str, str]) -> str:
    """Start `scheduler worker` with `env`; it must exit non-zero. Returns what it printed."""
    proc = subprocess.run(
        [sys.executable, "-m", "scheduler", "worker"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    return proc.stdout + proc.stderr


def test_a_worker_with_auth_on_and_no_tokens_refuses_to_start(worker_env):
    assert "no tokens are configured" in _worker_refuses_to_start({**worker_env, "SCHEDULER_AUTH": "on"})


def test_plain_text_tokens_in_the_config_are_refused(worker_env):
    bad = json.dumps(
        {"tokens": [{"token": "secret", "sha256": "0" * 64, "scopes": ["sched:r"], "tenants": ["*"]}]}
    )
    env = {**worker_env, "SCHEDULER_AUTH": "on", "SCHEDULER_AUTH_TOKENS": bad}
    assert "plain-text tokens are not accepted" in _worker_refuses_to_start(env)
