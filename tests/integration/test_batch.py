"""POST /schedules:batch on a real broker: each item judged as a POST of it alone would be (400 naming the
field, 409 for a different definition under an existing key, a key twice in one batch refused), the rest
produced and, with ?wait=applied, applied; atomic batches produce nothing unless all would be; dryRun
produces nothing; the CLI's bulk create goes through it; each item's answer names its own command's offset."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from scheduler.domain.model import ScheduleKey
from scheduler.wire.codec import key_bytes
from tests.helpers import TopicReader, scheduler_cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _item(tenant: str, name: str, expression: str = "0 3 * * *") -> dict[str, Any]:
    return {
        "tenant": tenant,
        "name": name,
        "topic": "batch-out",
        "trigger": {"type": "cron", "expression": expression},
    }


def test_a_batch_answers_each_item_as_its_own_post_would_and_produces_the_accepted(
    shared_worker, tenant, tmp_path
):
    with httpx.Client(base_url=shared_worker.url, timeout=60) as client:
        assert client.post("/schedules?wait=applied", json=_item(tenant, "taken")).status_code == 200
        items = [_item(tenant, f"s{i}") for i in range(300)]
        items[7] = _item(tenant, "bad", "61 * * * *")
        items[8] = _item(tenant, "s0")  # (the key of item 0 again)
        items[9] = _item(tenant, "taken", "0 4 * * *")  # (exists, with another definition)
        answer = client.post("/schedules:batch?wait=applied", json={"schedules": items})
        assert answer.status_code == 200, answer.text
        got = answer.json()
        assert (got["total"], got["accepted"], got["failed"], got["produced"]) == (300, 297, 3, True)
        results = got["results"]
        assert [r["index"] for r in results] == list(range(300))
        assert results[7]["status"] == 400 and results[7]["fields"][0]["field"].startswith("trigger")
        assert (
            results[8]["status"] == 400 and "also item 0 of this batch" in results[8]["fields"][0]["message"]
        )
        assert results[9]["status"] == 409 and "already exists" in results[9]["reason"]
        assert results[0] == {
            **results[0],
            "status": 200,
            "applied": True,
            "version": 1,
            "key": f"{tenant}/s0",
        }
        assert client.get(f"/schedules/{tenant}/s299").json()["version"] == 1
        assert client.get(f"/schedules/{tenant}/taken").json()["trigger"]["expression"] == "0 3 * * *"

        atomic = [_item(tenant, "a1"), _item(tenant, "a2", "not cron")]
        answer = client.post("/schedules:batch", json={"schedules": atomic, "atomic": True}).json()
        assert (
            answer["produced"] is False and answer["accepted"] == 0 and answer["results"][0]["status"] == 200
        )
        assert answer["results"][1]["status"] == 400
        preview = client.post(
            "/schedules:batch?dryRun=true", json={"schedules": [_item(tenant, "d1")]}
        ).json()
        assert preview["results"][0]["dryRun"] is True
        for name in ("a1", "d1"):
            assert client.get(f"/schedules/{tenant}/{name}").status_code == 404, name
        too_many = client.post("/schedules:batch", json={"schedules": [_item(tenant, "x")] * 1001})
        assert too_many.status_code == 400 and "schedules" in too_many.text

    path = tmp_path / "many.json"
    path.write_text(json.dumps([_item(tenant, f"cli-{i}") for i in range(1000)]))
    created = scheduler_cli(shared_worker.url, "schedules", "create", "-f", str(path))
    assert created.returncode == 0, created.stdout + created.stderr
    assert "accepted 1000 of 1,000 schedules" in created.stdout and "all applied" in created.stdout
    assert httpx.get(f"{shared_worker.url}/schedules/{tenant}/cli-999", timeout=30).status_code == 200


async def test_each_item_of_batches_sent_at_once_answers_where_its_own_command_is(
    shared_worker, shared_app_id, broker, tenant
):
    """The commands of an HTTP write go to the broker gathered with the others of the same turn of the
    worker's loop, in whole batches (scheduler.kafka.gathered): each 202 still names the partition and
    offset of its own command, which `GET .../applied?offset=` and a reader of the commands topic rely on."""
    items = [_item(tenant, f"o{i}") for i in range(300)]
    async with httpx.AsyncClient(base_url=shared_worker.url, timeout=60) as client:
        answers = await asyncio.gather(
            *(client.post("/schedules:batch", json={"schedules": items[i : i + 100]}) for i in (0, 100, 200))
        )
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    results = [r for a in answers for r in a.json()["results"]]
    assert [r["status"] for r in results] == [202] * 300, results
    where = {(r["partition"], r["offset"]): r["key"] for r in results}
    assert len(where) == 300, "two items answered the same offset"
    expected = {at: key_bytes(ScheduleKey(*key.split("/"))) for at, key in where.items()}
    async with TopicReader(
        broker.bootstrap_servers, f"{shared_app_id}-commands", lambda v: v, read_committed=False
    ) as reader:
        await reader.wait_for(lambda _: {(m.partition, m.offset) for m in reader.raw} >= where.keys(), 60)
        found = {(m.partition, m.offset): m.key for m in reader.raw if (m.partition, m.offset) in where}
    assert found == expected
