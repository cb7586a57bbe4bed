"""Lists come a page at a time: `limit`, `next` and `cursor`, over two workers (a page merges both), through
HTTP and the CLI. Every schedule is listed once, in key order, whatever the page size."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from scheduler.domain.model import ScheduleKey
from scheduler.wire.codec import key_bytes
from tests.helpers import Api, wait_split
from tests.integration.test_cli import cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

#: names of different lengths: the key order is not the names' alphabetical one
NAMES = ["a", "b", "aa", "zz", "n10", "n9", "x", "feed-0001", "feed-2", "m"] + [f"s{i}" for i in range(20)]


def _body(tenant: str, name: str, topic: str) -> dict:
    return {
        "tenant": tenant,
        "name": name,
        "trigger": {"type": "frequency", "timeUnit": "HOURS", "time": 1},
        "topic": topic,
    }


def _order(tenant: str, name: str) -> bytes:
    return key_bytes(ScheduleKey(tenant, name))


async def _get(client: httpx.AsyncClient, path: str, params: dict[str, str]) -> httpx.Response:
    """GET, asked again while partitions move (503 with Retry-After: a list needs every partition's owner)."""
    deadline = time.monotonic() + 30
    while (r := await client.get(path, params=params)).status_code == 503 and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    assert r.status_code == 200, r.text
    return r


async def _pages(client: httpx.AsyncClient, limit: int, path: str = "/schedules", **query: str) -> list[dict]:
    """Every page of a list (GET /schedules, /jobs), following `next`: each has at most `limit`."""
    field = path.strip("/")
    pages, cursor = [], None
    while True:
        params = {**query, "limit": str(limit), **({"cursor": cursor} if cursor else {})}
        r = await _get(client, path, params)
        page = r.json()
        assert len(page[field]) <= limit
        pages.append(page)
        cursor = page["next"]
        if cursor is None:
            return pages
        assert len(page[field]) == limit  # only the last page is short
        assert len(pages) < 100, "the cursor does not move on"


async def test_pages_list_every_schedule_once_in_key_order_across_two_workers(start_worker, app_id):
    first = start_worker()
    second = start_worker(partitions=0)
    wait_split(first, second)  # (a write while the group rebalances would be a 503)
    out = f"{app_id}-out"
    async with httpx.AsyncClient(base_url=first.url, timeout=10) as client:
        for name in NAMES:
            assert (await client.post("/schedules", json=_body("pages", name, out))).status_code == 202
        for name in ("a", "b", "c"):
            assert (await client.post("/schedules", json=_body("other", name, out))).status_code == 202
    want = sorted((("pages", n) for n in NAMES), key=lambda k: _order(*k))
    everyone = sorted([*want, *(("other", n) for n in "abc")], key=lambda k: _order(*k))
    deadline = time.monotonic() + 60
    async with httpx.AsyncClient(base_url=second.url, timeout=10) as client:
        while True:
            r = await client.get("/schedules")
            if r.status_code == 200 and r.json()["total"] == len(everyone):
                break
            assert time.monotonic() < deadline, r.text  # (503 while the partitions move, not JSON at first)
            await asyncio.sleep(0.2)
    owners = {w.url: set(w.health()["partitions"]) for w in (first, second)}
    assert all(owners.values()), owners  # both own partitions: every page merges both workers' pages

    for w in (first, second):
        async with httpx.AsyncClient(base_url=w.url, timeout=10) as client:
            for limit in (1, 7, 30, 1000):
                pages = await _pages(client, limit, tenant="pages")
                listed = [(s["tenant"], s["name"]) for p in pages for s in p["schedules"]]
                assert listed == want, (limit, listed)
                assert {p["total"] for p in pages} == {len(NAMES)}
            pages = await _pages(client, 4)  # every tenant
            assert [(s["tenant"], s["name"]) for p in pages for s in p["schedules"]] == everyone

            # A cursor is opaque: one this API did not give is a 400 naming it; so is a limit out of range.
            r = await client.get("/schedules", params={"cursor": "not a cursor!"})
            assert r.status_code == 400 and r.json()["fields"][0]["field"] == "cursor"
            r = await client.get("/schedules", params={"limit": "0"})
            assert r.status_code == 400 and r.json()["fields"][0]["field"] == "limit"

            # light-scheduler's list is a bare JSON list: its next page's cursor is a header.
            seen, cursor = [], None
            while True:
                params = {"host": "pages", "limit": "8", **({"cursor": cursor} if cursor else {})}
                r = await _get(client, "/schedulers", params)
                assert len(r.json()) <= 8
                seen += [td["name"] for td in r.json()]
                cursor = r.headers.get("X-Next-Cursor")
                if cursor is None:
                    break
            assert seen == [n for _, n in want]

    # The CLI: one page says where the next one starts; --all follows the cursors.
    page = cli(first.url, "schedules", "list", "--tenant", "pages", "--limit", "7")
    assert page.returncode == 0, page.stderr
    assert f"(7 of {len(NAMES)}; the next page: --cursor " in page.stderr
    every = cli(second.url, "schedules", "list", "--json", "--tenant", "pages", "--limit", "7", "--all")
    assert every.returncode == 0, every.stderr
    assert [s["name"] for s in json.loads(every.stdout)["schedules"]] == [n for _, n in want]


async def test_jobs_and_programs_come_in_pages_across_two_workers(start_worker, app_id):
    """24 pending jobs of 6 programs (owned by both workers), priorities mixed: every page size lists each
    job once, by queue (here: each program's) then queue order (highest priority first); /programs pages by id."""
    first = start_worker()
    second = start_worker(partitions=0)
    deadline = time.monotonic() + 60
    while not all((h := w.health()) and h["ready"] and h["partitions"] for w in (first, second)):
        assert time.monotonic() < deadline, [w.health() for w in (first, second)]
        await asyncio.sleep(0.2)
    programs = [f"pages/app/workflow/p{i}" for i in range(6)]
    async with Api(first.url) as api:
        for i, program in enumerate(programs):
            for j in range(4):
                await api.create({
                    "tenant": "pages", "name": f"job-{i}-{j}", "program": program,
                    "trigger": {"type": "partition", "dataset": "pages.ds"}, "priority": (i + j) % 3 * 5,
                    "constraints": [{"type": "delay", "delayMs": 3_600_000}],  # pending for an hour
                })  # fmt: skip
        await api.partitions("pages.ds", "p1")
        everything = (await api.wait_jobs(lambda j: len(j["jobs"]) == 24, timeout_s=60))["jobs"]
    owners = [set(w.health()["partitions"]) for w in (first, second)]
    assert all(owners), owners
    order = [(j["queue"], -j["priority"], j["triggeredAt"], j["jobId"]) for j in everything]
    assert order == sorted(order) and {j["program"] for j in everything} == set(programs)
    for w in (first, second):
        async with httpx.AsyncClient(base_url=w.url, timeout=10) as client:
            for limit in (1, 5, 24, 1000):
                pages = await _pages(client, limit, "/jobs")
                assert [j["jobId"] for p in pages for j in p["jobs"]] == [j["jobId"] for j in everything]
            r = await client.get("/jobs", params={"cursor": "bm90IGpzb24"})
            assert r.status_code == 400 and r.json()["fields"][0]["field"] == "cursor", r.text
            listed, cursor = [], None
            while True:
                r = await _get(client, "/programs", {"limit": "4", **({"cursor": cursor} if cursor else {})})
                assert len(r.json()) <= 4
                listed += list(r.json())
                if (cursor := r.headers.get("X-Next-Cursor")) is None:
                    break
            assert listed == sorted(listed) and set(programs) <= set(listed), listed
    # The CLI: a page of jobs says where the next one starts
    page = cli(first.url, "jobs", "list", "--limit", "5")
    assert page.returncode == 0, page.stderr
    cursor = page.stderr.split("the next page: --cursor ")[1].split(")")[0]
    after = cli(first.url, "jobs", "list", "--json", "--limit", "5", "--cursor", cursor)
    assert after.returncode == 0, after.stderr
    assert [j["jobId"] for j in json.loads(after.stdout)["jobs"]] == [j["jobId"] for j in everything[5:10]]
