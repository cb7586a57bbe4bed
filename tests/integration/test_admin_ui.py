"""The admin page (GET /ui) in headless Chromium against a real worker: schedules with their next fires,
pending jobs and why they wait, recent runs, the tenant filter, hostile names rendered as text, errors
shown, and the token prompt when auth is on."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Page, Route, async_playwright, expect

from scheduler.http.auth import hash_token, new_token
from tests.helpers import Api

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ETL = "acme/pipelines/spark/etl"
SENSOR = "acme/watch/sensor/ready"
HOSTILE = '<img src=x onerror=alert(1)> & "ünïcødé" 🕑'
WITHIN_A_MINUTE = re.compile(r"^(due|in \d{1,2} s)$")
IN_ONE_OR_TWO_HOURS = re.compile(r"^in [12] h( \d+ min)?$")
A_DURATION = re.compile(r"^\d+ (ms|s)$")
# the page refreshes every 3 s; a busy two-core machine may need a few rounds
expect.set_options(timeout=30_000)


@asynccontextmanager
async def browser_page() -> AsyncIterator[Page]:
    """A headless Chromium page; records page errors and dialogs (an injected alert() would open one)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"{CHROMIUM} is missing: the admin page is tested in Debian's Chromium. Install it with "
            "`apt-get install -y chromium` (.ci/run does); do not use `playwright install`.",
            pytrace=False,
        )
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 900})
            problems: list[str] = []
            page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
            page.on("dialog", lambda dialog: problems.append(f"dialog: {dialog.message}"))
            page.problems = problems  # type: ignore[attr-defined]
            yield page
        finally:
            await browser.close()


def window_in_two_hours() -> dict[str, Any]:
    """A time-window constraint that holds a job for the next two hours."""
    now = datetime.now(UTC)
    return {
        "type": "timeWindow",
        "start": (now + timedelta(hours=2)).strftime("%H:%M"),
        "end": (now + timedelta(hours=3)).strftime("%H:%M"),
        "timezone": "UTC",
    }


async def test_the_page_shows_schedules_next_fires_pending_jobs_and_runs(worker, app_id, tmp_path):
    async with Api(worker.url) as api:
        fires = f"{app_id}-fires"
        every_second = {"type": "cron", "expression": "* * * * * *"}
        await api.create({"tenant": "acme", "name": "heartbeat", "trigger": every_second, "topic": fires})
        hourly = {"type": "frequency", "timeUnit": "HOURS", "time": 1}
        await api.create({"tenant": "zeta", "name": HOSTILE, "trigger": hourly, "topic": fires})
        await api.create(
            {
                "tenant": "acme",
                "name": "nightly-etl",
                "trigger": {"type": "partition", "dataset": "acme.clicks", "minPartitions": 1},
                "program": ETL,
                "topic": f"{app_id}-launches",
                "constraints": [window_in_two_hours()],
                "overlap": "BUFFER_ALL",
            }
        )
        await api.partitions("acme.clicks", "2026-11-22")
        await api.wait_jobs(lambda j: len(j["jobs"]) == 1, schedule="acme/nightly-etl")
        await api.run(ETL, "run-1", "STARTING", "RUNNING", "COMPLETED")
        answer = 'print("SCHEDULER-SENSOR-RESULT", \'{"fire": true, "cursor": "v1"}\')'
        await api.register(
            SENSOR, {"kind": "sensor", "argv": [sys.executable, "-c", answer], "intervalMs": 60_000}
        )
    later = f"{app_id}-later"
    in_an_hour = (int(time.time()) // 60 + 60) * 60_000
    for id in ("reminder-1", "reminder-2"):  # delayed messages: counted by topic and due minute
        r = httpx.post(
            f"{worker.url}/messages", json={"id": id, "topic": later, "deliverAt": in_an_hour, "value": "x"}
        )
        assert r.status_code == 202, r.text

    async with browser_page() as page:
        await page.goto(f"{worker.url}/ui")
        schedules = page.locator("#schedules tbody tr")
        await expect(schedules).to_have_count(3)

        heartbeat = page.locator('#schedules tr[data-key="acme/heartbeat"]')
        await expect(heartbeat.locator("td.trigger")).to_have_text("cron * * * * * *")
        await expect(heartbeat.locator("td.enabled")).to_have_text("yes")
        next_fire = heartbeat.locator("td.rel")
        first = int(await next_fire.get_attribute("data-at") or 0)
        assert first > 0
        await expect(next_fire).not_to_have_attribute("data-at", str(first))  # a later refresh moved it on
        assert int(await next_fire.get_attribute("data-at") or 0) > first
        await expect(next_fire).to_have_text(WITHIN_A_MINUTE)
        assert (await heartbeat.locator("td.time").text_content() or "").count(
            ":"
        ) == 2  # local, to the second

        hostile = page.locator("#schedules tbody tr", has_text=HOSTILE)
        await expect(hostile.locator("td.name")).to_have_text(HOSTILE)
        await expect(hostile.locator("td.tenant")).to_have_text("zeta")
        await expect(hostile.locator("td.trigger")).to_have_text("every 1 h")
        assert await page.locator("img").count() == 0, "a schedule name was parsed as HTML"

        etl = page.locator('#schedules tr[data-key="acme/nightly-etl"]')
        await expect(etl.locator("td.program")).to_have_text(f"{ETL} (overlap BUFFER_ALL)")

        job = page.locator("#jobs tbody tr", has_text="acme/nightly-etl")
        await expect(job.locator("td.state")).to_have_text("PENDING_CONSTRAINT")
        await expect(job.locator("td.blocked")).to_have_text("TimeWindow")
        await expect(job.locator("td.program")).to_have_text(ETL)
        await expect(job.locator(".rel")).to_have_text(IN_ONE_OR_TWO_HOURS)

        run = page.locator("#runs tbody tr", has_text="run-1")
        await expect(run.locator(".badge")).to_have_text("COMPLETED")
        await expect(run.locator("td.program")).to_have_text(ETL)
        await expect(run.locator("td.duration")).to_have_text(A_DURATION)

        sensor = page.locator(
            f'#sensors tr[data-sensor="{SENSOR}"]'
        )  # (evaluated once a minute: the first at once)
        await expect(sensor.locator(".badge")).to_have_text("FIRED")
        await expect(sensor.locator("td.cursor")).to_have_text("v1")

        await expect(page.locator(f'#messages-topics tr[data-topic="{later}"] td.num')).to_have_text("2")
        minute = page.locator(f'#messages-minutes tr[data-at="{in_an_hour}"]')
        await expect(minute.locator("td.num")).to_have_text("2")
        await expect(page.locator("#messages-count")).to_have_text("2")

        await page.screenshot(path=tmp_path / "admin.png", full_page=True)

        # a 503 while partitions move is shown, and the last answer stays on screen
        async def rebalancing(route: Route) -> None:
            body = {"error": "unavailable", "reason": "partitions are moving between workers (rebalancing)"}
            await route.fulfill(status=503, json=body, headers={"Retry-After": "2"})

        await page.route("**/jobs", rebalancing)
        await expect(page.locator("#errors")).to_contain_text("GET /jobs: 503, partitions are moving")
        await expect(page.locator("#jobs").locator("xpath=..")).to_have_class(re.compile(r"\bstale\b"))
        await expect(job.locator("td.state")).to_have_text("PENDING_CONSTRAINT")
        await page.unroute("**/jobs")
        await expect(page.locator("#errors")).to_be_hidden()

        await page.fill("#tenant", "zeta")
        await expect(schedules).to_have_count(1)
        await expect(schedules.locator("td.name")).to_have_text(HOSTILE)
        await expect(page.locator("#jobs tbody tr.empty")).to_have_text("No pending jobs.")
        await expect(page.locator("#runs tbody tr.empty")).to_have_text("No runs yet.")
        await expect(page.locator("#sensors-section")).to_be_hidden()
        assert "tenant=zeta" in page.url
        await page.fill("#tenant", "acme")
        await expect(schedules).to_have_count(2)
        await expect(job).to_have_count(1)
        await expect(run).to_have_count(1)
        assert page.problems == []  # type: ignore[attr-defined]

    for asset, content_type in (
        ("", "text/html"),
        ("admin.js", "text/javascript"),
        ("admin.css", "text/css"),
    ):
        r = httpx.get(f"{worker.url}/ui/{asset}")
        assert r.status_code == 200 and r.headers["content-type"] == f"{content_type}; charset=utf-8", asset
        assert "script-src 'self'" in r.headers["content-security-policy"]
    assert httpx.get(f"{worker.url}/ui/app.py").status_code == 404


async def test_with_auth_on_the_page_asks_for_a_token_and_says_when_one_is_refused(start_worker):
    token, write_only = new_token(), new_token()
    tokens = [
        {"name": "ops", "sha256": hash_token(token), "scopes": ["sched:r", "sched:w"], "tenants": ["*"]},
        {"name": "writer", "sha256": hash_token(write_only), "scopes": ["sched:w"], "tenants": ["*"]},
    ]
    worker = start_worker(SCHEDULER_AUTH="on", SCHEDULER_AUTH_TOKENS=json.dumps({"tokens": tokens}))
    async with Api(worker.url) as api:
        api.client.headers["Authorization"] = f"Bearer {token}"
        trigger = {"type": "frequency", "timeUnit": "MINUTES", "time": 5}
        await api.create({"tenant": "acme", "name": "every-5-min", "trigger": trigger, "topic": "acme-fires"})
    assert httpx.get(f"{worker.url}/ui").status_code == 200  # the page is public, its data are not
    assert httpx.get(f"{worker.url}/schedules").status_code == 401

    async with browser_page() as page:
        await page.goto(f"{worker.url}/ui")
        message = page.locator("#auth-message")
        await expect(message).to_contain_text("needs a bearer token")
        await expect(page.locator("#schedules tbody tr.empty")).to_have_text("Not authorized.")

        async def use(value: str) -> None:
            await page.fill("#token", value)
            await page.click("#auth button[type=submit]")

        await use("sch_not-a-token")
        await expect(message).to_contain_text("refused this token (401: unknown token)")
        await use(write_only)
        await expect(message).to_contain_text("may not read these data (403: this token lacks scope sched:r)")
        await use(token)
        await expect(page.locator('#schedules tr[data-key="acme/every-5-min"] td.trigger')).to_have_text(
            "every 5 min"
        )
        await expect(page.locator("#errors")).to_be_hidden()
        await expect(message).to_have_text("Using the token kept for this tab.")
        assert await page.evaluate("sessionStorage.getItem('scheduler.token')") == token
        await page.click("#forget")
        await expect(message).to_contain_text("needs a bearer token")
        await expect(page.locator("#schedules tbody tr.empty")).to_have_text("Not authorized.")
        assert page.problems == []  # type: ignore[attr-defined]


async def test_the_page_shows_a_finished_schedule_and_an_sla_alert_among_the_outcomes(worker, app_id):
    async with Api(worker.url) as api:
        past = int(datetime.now(UTC).timestamp() * 1000) - 60_000
        once = {"type": "once", "at": past}
        await api.create({"tenant": "acme", "name": "one-shot", "trigger": once, "topic": f"{app_id}-fires"})
        await api.create(
            {
                "tenant": "acme",
                "name": "stale-feed",
                "trigger": {"type": "partition", "dataset": "acme.stale"},
                "program": ETL,
                "topic": f"{app_id}-launches",
                "fireAtLeastEveryMs": 1_000,
            }
        )
        await api.wait_jobs(
            lambda j: any(o["outcome"] == "NOT_FIRED" for o in j["recent"]), schedule="acme/stale-feed"
        )

    async with browser_page() as page:
        await page.goto(f"{worker.url}/ui")
        finished = page.locator('#schedules tr[data-key="acme/one-shot"]')
        await expect(finished.locator("td.enabled")).to_have_text("finished")
        alert = page.locator("#outcomes tbody tr", has_text="NOT_FIRED").first
        await expect(alert).to_contain_text("acme/stale-feed")
        # NOT_FIRED alerts back off (periods 1, 2, 4, 8 …): the newest may be any of them by now
        await expect(alert).to_contain_text(
            re.compile(
                r"no job for \d+ s \(\d+ periods? of fireAtLeastEveryMs 1 s; alert \d+ of this silence"
            )
        )
