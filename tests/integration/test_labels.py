"""Descriptions, labels and the list's filters end to end (issue 39): kept from the topic and HTTP, shown,
selected by (`?label=team=data,tier!=bronze`, enabled, paused, trigger kind, program, topic, next fire
before/after) across every
worker's partitions; a filter the list does not know is a 400, never silently ignored."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Api, scheduler_cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]


def _schedule(tenant: str, name: str, labels: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"tenant": tenant, "name": name, "trigger": {"type": "cron", "expression": "0 0 3 * * *"},
            "topic": "nightly", "labels": labels, **extra}  # fmt: skip


async def _names(api: Api, tenant: str, **query: str) -> list[str]:
    r = await api.client.get("/schedules", params={"tenant": tenant, **query})
    assert r.status_code == 200, r.text
    return [s["name"] for s in r.json()["schedules"]]


async def test_labels_and_descriptions_are_kept_and_the_list_selects_by_them(worker, tenant):
    async with Api(worker.url) as api:
        for i in range(12):  # (spread over the partitions, so over the workers)
            tier = "gold" if i % 3 == 0 else "bronze"
            await api.create(
                _schedule(tenant, f"s{i:02d}", {"team": "data" if i % 2 else "ops", "tier": tier})
            )
        await api.create(
            _schedule(tenant, "report", {"team": "data", "critical": ""}, description="finance's nightly report",
                      topic="reports", trigger={"type": "frequency", "timeUnit": "HOURS", "time": 1})
        )  # fmt: skip
        shown = (await api.client.get(f"/schedules/{tenant}/report")).json()
        assert shown["description"] == "finance's nightly report"
        assert shown["labels"] == {"team": "data", "critical": ""}

        assert await _names(api, tenant, label="team=data,tier=gold") == ["s03", "s09"]
        assert await _names(api, tenant, label="critical") == ["report"]
        assert await _names(api, tenant, label="team=ops,tier!=bronze") == ["s00", "s06"]
        assert await _names(api, tenant, trigger="frequency") == ["report"]
        assert await _names(api, tenant, topic="reports") == ["report"]
        page = (
            await api.client.get("/schedules", params={"tenant": tenant, "label": "team=data", "limit": "3"})
        ).json()
        assert [s["name"] for s in page["schedules"]] == ["s01", "s03", "s05"] and page["total"] is None
        rest = await _names(api, tenant, label="team=data", cursor=page["next"])
        assert rest == ["s07", "s09", "s11", "report"]  # (key order: shorter names first)

        r = await api.client.post(
            f"/schedules/{tenant}/s00/disable", params={"wait": "applied"}, json={"note": "x"}
        )
        assert r.status_code in (200, 202), r.text
        assert await _names(api, tenant, paused="true") == ["s00"]
        assert await _names(api, tenant, enabled="false") == ["s00"]

        for query, field in (({"labels": "team=data"}, "labels"), ({"label": "team=da ta"}, "label")):
            r = await api.client.get("/schedules", params={"tenant": tenant, **query})
            assert r.status_code == 400 and r.json()["fields"][0]["field"] == field, r.text
        bad = await api.client.post("/schedules", json=_schedule(tenant, "bad", {"team": "data science"}))
        assert bad.status_code == 400 and bad.json()["fields"][0]["field"] == "labels.team", bad.text


def test_the_cli_lists_by_label(worker, tenant) -> None:
    async def create() -> None:
        async with Api(worker.url) as api:
            await api.create(_schedule(tenant, "a", {"team": "data"}))
            await api.create(_schedule(tenant, "b", {"team": "ops"}))

            hour = 3_600_000
            for name, at in (("c", now + hour), ("d", now + 26 * hour)):  # (a and b: 03:00, within 24 h)
                await api.create({"tenant": tenant, "name": name, "trigger": {"type": "once", "at": at},
                                  "topic": "later", "labels": {"team": "soon"}})  # fmt: skip

    now = int(time.time() * 1000)
    asyncio.run(create())
    r = scheduler_cli(worker.url, "schedules", "list", "--tenant", tenant, "--label", "team=data")
    assert r.returncode == 0, r.stderr
    assert f"{tenant}/a" in r.stdout and f"{tenant}/b" not in r.stdout
    later = scheduler_cli(
        worker.url, "schedules", "list", "--json", "--tenant", tenant, "--next-after", "+25h"
    )
    assert later.returncode == 0, later.stderr
    assert [s["name"] for s in json.loads(later.stdout)["schedules"]] == ["d"]
    sooner = scheduler_cli(
        worker.url, "schedules", "list", "--json", "--tenant", tenant, "--next-before", "+25h"
    )
    assert sorted(s["name"] for s in json.loads(sooner.stdout)["schedules"]) == ["a", "b", "c"]
