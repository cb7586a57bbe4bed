"""Priority under load (seed 003's user story 6), end to end on a real broker: a pool of 2 (a concurrency
group), a flood of 20 jobs of three priorities. The test plays the launcher: it reads the launch requests and
ends the runs one at a time through program-status events."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.helpers import Api, TopicReader, decode_launch

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

POOL = [{"type": "concurrency", "maxRuns": 2, "group": "pool"}]
PROGRAMS = {p: f"acme/feeds/workflow/{p}" for p in ("blocker", "high", "mid", "low")}
PRIORITY = {"blocker": 100, "high": 10, "mid": 5, "low": 0}


def feed(name: str, tier: str, out: str, **extra: Any) -> dict[str, Any]:
    return {
        "tenant": "acme",
        "name": name,
        "trigger": {"type": "partition", "dataset": "acme.flood"},
        "program": PROGRAMS[tier],
        "topic": out,
        "constraints": POOL,
        "priority": PRIORITY[tier],
        **extra,
    }


async def test_user_story_6_a_saturated_pool_runs_high_priority_feeds_first_and_low_ones_catch_up_later(
    broker, worker, app_id
):
    """Two blocker runs fill the pool; one event then makes 20 jobs: 4 high, 6 mid, 10 low — of the low
    ones, 2 run anyway and 2 are dropped once deferred 4 s (`timeout`, the maximum deferral). As runs end
    one at a time the rest launch highest priority first, oldest first within a priority, and the low
    ones catch up last."""
    out = f"{app_id}-launches"
    tiers = {"high": 4, "mid": 6, "low": 6}
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as launches:
        for i in range(2):
            blocker = feed(f"blocker-{i}", "blocker", out)
            await api.create({**blocker, "trigger": {"type": "partition", "dataset": f"acme.b{i}"}})
        for tier, n in tiers.items():
            for i in range(n):
                await api.create(feed(f"{tier}-{i}", tier, out))
        for i, action in enumerate(["FORCE_START", "FORCE_START", "DISCARD", "DISCARD"]):
            await api.create(feed(f"low-max-{i}", "low", out, timeout={"timeoutMs": 4_000, "action": action}))
        for i in range(2):
            await api.partitions(f"acme.b{i}", "p")
        await launches.wait_for(lambda r: len(r) >= 2)
        for r in launches.records:
            await api.run(program_of(r), r["runId"], "STARTING", "RUNNING")
        flood_at = time.time() * 1000
        await api.partitions("acme.flood", "p1")  # 20 jobs wait: the pool is full
        # (the 20 jobs reach the pool's queue in any order: wait for all 10 of higher priority and at least
        # 16 in all — the 4 with a maximum deferral may have left already)
        jobs = (
            await api.wait_jobs(
                lambda j: len(j["jobs"]) >= 16 and sum(1 for x in j["jobs"] if x["priority"] > 0) == 10,
                timeout_s=30,
            )
        )["jobs"]
        # `jobs` lists them in the order they will launch, and says why the low ones wait
        assert [j["priority"] for j in jobs] == sorted((j["priority"] for j in jobs), reverse=True)
        low = next(j for j in jobs if j["priority"] == 0)
        assert "deferred: 10 jobs of higher priority wait before it" in low["reason"], low
        # past the maximum deferral (4 s): 2 low ones launched anyway, 2 dropped
        await launches.wait_for(lambda r: sum(1 for x in r if x["forced"]) >= 2, timeout_s=30)
        recent = await api.wait_jobs(lambda j: sum(1 for o in j["recent"] if o["outcome"] == "DISCARD") >= 2)
        assert time.time() * 1000 - flood_at >= 4_000
        # then the runs end one at a time, each freeing a slot for the next in line
        ended: set[str] = set()
        deadline = time.monotonic() + 90
        while len(launches.records) < 2 + 18 or len(ended) < len(launches.records):
            assert time.monotonic() < deadline, f"{len(launches.records)} launched, {len(ended)} ended"
            live = [r for r in launches.records if r["runId"] not in ended]
            if live:
                await api.run(
                    program_of(live[0]),
                    live[0]["runId"],
                    *(() if live[0] in launches.records[:2] else ("STARTING", "RUNNING")),
                    "COMPLETED",
                )
                ended.add(live[0]["runId"])
            await asyncio.sleep(0.3)
    after = [r for r in launches.records[2:] if not r["forced"]]
    tiers_in_order = [r["schedule"]["name"].split("-")[0] for r in after]
    assert tiers_in_order == ["high"] * 4 + ["mid"] * 6 + ["low"] * 6, tiers_in_order
    for tier in ("high", "mid", "low"):
        triggered = [r["triggeredAt"] for r in after if r["schedule"]["name"].startswith(tier)]
        assert triggered == sorted(triggered), tier  # oldest first within a priority
    assert sorted(r["schedule"]["name"] for r in launches.records if r["forced"]) == [
        "low-max-0",
        "low-max-1",
    ]
    discarded = [o["schedule"] for o in recent["recent"] if o["outcome"] == "DISCARD"]
    assert sorted(discarded) == ["acme/low-max-2", "acme/low-max-3"]


def program_of(launch: dict[str, Any]) -> str:
    p = launch["program"]
    return f"{p['namespace']}/{p['application']}/{p['type']}/{p['name']}"
