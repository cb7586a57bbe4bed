"""deploy/ meets Kafka: workers started with exactly the environment docker-compose.yml gives them (hosts,
ports and mounted paths replaced, nothing else) against a local 3-node Apache Kafka of the version deploy/
runs: they fire, and when one is SIGKILLed the other takes its partitions over and misses no due instant.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.chaos import all_fired, analyse
from tests.helpers import TopicReader, WorkerProcess, free_port, wait_split

pytestmark = [pytest.mark.integration, pytest.mark.own_broker, pytest.mark.timeout(420), pytest.mark.serial]

DEPLOY = Path(__file__).parents[2] / "deploy"
TOKEN = "deploy-test-token-0123456789abcdef"


def compose_worker_env(service: str) -> dict[str, str]:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())  # resolves the << merges
    return {k: str(v) for k, v in compose["services"][service]["environment"].items()}


def localised(env: dict[str, str], bootstrap: str, work: Path, tokens: Path) -> dict[str, str]:
    """Only where things are: hosts, ports, and the paths compose mounts volumes and files at."""
    port = free_port()
    replaced = {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "SCHEDULER_WEB_HOST": "127.0.0.1",
        "SCHEDULER_WEB_BIND": "127.0.0.1",
        "SCHEDULER_WEB_PORT": str(port),
        "SCHEDULER_DATA_DIR": str(work / "data"),
        "SCHEDULER_DATASETS_DIR": str(work / "datasets"),
        "SCHEDULER_SPARK_MASTER": "spark://127.0.0.1:7077",
        "SCHEDULER_AUTH_TOKENS_FILE": str(tokens),
    }
    unknown = set(replaced) - set(env)
    assert not unknown, f"deploy/ no longer sets {unknown}"
    return {**env, **replaced}


async def test_workers_with_deploys_environment_fire_and_fail_over_on_a_3_node_kafka(kafka3, tmp_path):
    tokens = tmp_path / "tokens.yaml"  # the mounted token file: same format, a token this test knows
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    tokens.write_text(
        yaml.safe_dump(
            {
                "tokens": [
                    {"name": "ops", "sha256": digest, "scopes": ["sched:r", "sched:w"], "tenants": ["*"]}
                ]
            }
        )
    )
    envs = [
        localised(compose_worker_env(f"worker-{i}"), kafka3.bootstrap_servers, tmp_path / f"w{i}", tokens)
        for i in (1, 2)
    ]
    assert envs[0]["SCHEDULER_REPLICATION_FACTOR"] == "3" and envs[0]["SCHEDULER_AUTH"] == "on"
    workers = [
        WorkerProcess(env, tmp_path / f"worker-{i}.log", port=int(env["SCHEDULER_WEB_PORT"]))
        for i, env in enumerate(envs)
    ]
    headers = {"Authorization": f"Bearer {TOKEN}"}
    out = f"deploy-{time.time_ns()}-out"
    try:
        for w in workers:  # together, as compose starts them
            w.start()
        # (each with some of the partitions: a write while the group rebalances would be a 503)
        await asyncio.to_thread(
            wait_split, *workers, total=int(envs[0]["SCHEDULER_PARTITIONS"]), timeout_s=180
        )
        async with (
            httpx.AsyncClient(base_url=workers[0].url, timeout=30, headers=headers) as api,
            TopicReader(kafka3.bootstrap_servers, out) as reader,
        ):
            assert (await api.get("/schedules")).status_code == 200
            assert (await api.get("/schedules", headers={"Authorization": "Bearer wrong"})).status_code == 401
            for i in range(20):
                body: dict[str, Any] = {
                    "tenant": "acme", "name": f"s{i:05d}", "topic": out, "enabled": True, "catchUp": "EACH",
                    "trigger": {"type": "frequency", "timeUnit": "SECONDS", "time": 1},
                }  # fmt: skip
                r = await api.post("/schedules", json=body)
                assert r.status_code == 202, r.text
            await reader.wait_for(lambda r: len({x.key.name for x in r}) == 20, timeout_s=60)
            window_start = time.time_ns() // 1_000_000 + 2000
            await asyncio.sleep(3)
            workers[0].kill()
            killed_at = time.time_ns() // 1_000_000
            # the survivor takes every partition over (after the dead one's session timeout)
            await asyncio.to_thread(workers[1].wait_ready, 120)
            await asyncio.sleep(5)
            window_end = time.time_ns() // 1_000_000
            settled = time.monotonic() + 10  # the takeover's late fires arrive
            while time.monotonic() < settled and not all_fired(reader.records, 20, window_start, window_end):
                await asyncio.sleep(0.5)
            report = analyse(list(reader.records), 20, window_start, window_end, [{"killedAt": killed_at}])
        assert report["missed"] == 0, report["missedExamples"]
        print(
            f"deploy/ on Kafka: failover, longest due->fire gap {report['aroundKills'][0]['maxLatenessMs']} ms"
        )
    except BaseException:
        for w in workers:
            print(w.log_tail(60))
        raise
    finally:
        for w in workers:
            w.kill()
