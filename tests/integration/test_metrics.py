"""GET /metrics of a real worker (with auth on and JSON logs): fires, lateness, commands, dead letters,
partitions, table sizes; who may scrape it; every line of the worker's log is a JSON object."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from scheduler.http.auth import hash_token
from tests.helpers import on_kafka, produce

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

OPS, ACME = "ops-token-all-tenants", "acme-token"
TOKENS = {
    "tokens": [
        {"name": "ops", "sha256": hash_token(OPS), "scopes": ["sched:r", "sched:w"], "tenants": ["*"]},
        {"name": "acme", "sha256": hash_token(ACME), "scopes": ["sched:r", "sched:w"], "tenants": ["acme"]},
    ]
}

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _samples(text: str) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _sum(samples: Samples, name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and labels.items() <= dict(ls).items())


async def _scrape_until(client: httpx.AsyncClient, done: Any, timeout_s: float = 60) -> Samples:
    deadline = time.monotonic() + timeout_s
    while True:
        r = await client.get("/metrics")
        assert r.status_code == 200, r.text
        samples = _samples(r.text)
        if done(samples) or time.monotonic() > deadline:
            return samples
        await asyncio.sleep(0.5)


async def test_metrics_of_a_worker_with_auth_on_and_json_logs(start_worker, broker, app_id):
    worker = start_worker(
        SCHEDULER_AUTH="on", SCHEDULER_AUTH_TOKENS=json.dumps(TOKENS), SCHEDULER_LOG_FORMAT="json"
    )
    commands = f"{app_id}-commands"
    async with httpx.AsyncClient(
        base_url=worker.url, timeout=10, headers={"Authorization": f"Bearer {OPS}"}
    ) as client:
        # who may scrape: an all-tenant token; a tenant-bound one is refused, no token is unauthorized
        r = await client.get("/metrics", headers={"Authorization": ""})
        assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
        assert (await client.get("/metrics", headers={"Authorization": f"Bearer {ACME}"})).status_code == 403
        r = await client.get("/metrics")
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain")

        for i in range(3):
            body = {
                "tenant": "acme",
                "name": f"every-second-{i}",
                "trigger": {"type": "frequency", "timeUnit": "SECONDS", "time": 1},
                "topic": f"{app_id}-out",
                "enabled": True,
            }
            assert (await client.post("/schedules", json=body)).status_code == 202
        await produce(broker.bootstrap_servers, commands, [(b"acme/garbage", b"\x07 not an Avro command")])

        def done(s: Samples) -> bool:
            return (
                _sum(s, "scheduler_fires_total", unit="seconds", kind="scheduled") >= 3
                and _sum(s, "scheduler_commands_total", action="INSERT", result="applied") >= 3
                and _sum(s, "scheduler_dead_letters_total", topic=commands) >= 1
                and _sum(s, "scheduler_table_entries", table="schedules") == 3
                and (not on_kafka() or _sum(s, "scheduler_held_commit_lag_seconds_count") > 0)
            )

        s = await _scrape_until(client, done)
        health = worker.health()
    assert health is not None
    assert _sum(s, "scheduler_fires_total", unit="seconds", kind="scheduled") >= 3
    assert 0 < _sum(s, "scheduler_fires_total") <= health["fires"]  # the same counter, read later
    assert _sum(s, "scheduler_fire_lateness_seconds_count") > 0
    assert _sum(s, "scheduler_fire_lateness_seconds_bucket", le="+Inf") == _sum(
        s, "scheduler_fire_lateness_seconds_count"
    )
    if on_kafka():  # (fires sent ahead of their instant, their transactions held until it)
        assert _sum(s, "scheduler_held_commit_lag_seconds_count") > 0
    assert _sum(s, "scheduler_commands_total", action="INSERT", result="applied") == 3
    assert _sum(s, "scheduler_commands_total", action="unknown", result="dead_lettered") == 1
    assert _sum(s, "scheduler_dead_letters_total", topic=commands, reason="undecodable") == 1
    assert _sum(s, "scheduler_partitions_owned") == len(health["partitions"]) == worker.partitions
    assert _sum(s, "scheduler_table_entries", table="schedules") == 3
    assert _sum(s, "scheduler_rebalances_total") >= 1
    assert _sum(s, "scheduler_ready") == 1

    # the worker's log: one JSON object per line, the dead letter among them
    lines = [line for line in worker.log_path.read_text().splitlines() if line.strip()]
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            pytest.fail(f"not a JSON line in the worker's log: {line!r}")
    assert all({"ts", "level", "logger", "message"} <= r.keys() for r in records)
    assert any(
        r["logger"] == "scheduler.worker.output"
        and r["level"] == "WARNING"
        and "dead-lettered" in r["message"]
        for r in records
    )
