"""The admin page acts and draws, in headless Chromium against a real worker (with its launcher): every
action round-trips through a dialog that confirms and shows the server's answer — create and edit a
schedule from a form validated as you type with its next fire times in its zone, disable/enable, run now
with arguments, backfill a range (its count shown first), register a program, follow a run's output,
stop/suspend/resume a run — and the drawings show the test's data: the runs timeline (retries marked), fires per minute with lateness,
and the pipeline graph. SCHEDULER_SCREENSHOTS_DIR=tests/integration/screenshots keeps the screenshots the
README shows."""

from __future__ import annotations

import asyncio
import os
import re
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Page, expect

from tests.helpers import Api, TopicReader, WorkerProcess, fires_of
from tests.integration.test_admin_ui import browser_page

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

SLEEPER = "acme/tools/command/sleeper"
expect.set_options(timeout=30_000)


def shots(tmp_path: Path) -> Path:
    where = Path(os.environ.get("SCHEDULER_SCREENSHOTS_DIR") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    return where


def local_input(at: datetime) -> str:
    """A datetime-local input's value (the browser's zone is the test machine's)."""
    return at.strftime("%Y-%m-%dT%H:%M")


async def confirm(page: Page, expect_status: str = "202") -> str:
    """Confirm the open dialog; its answer (the server's), then close it."""
    await page.click("#dialog-confirm")
    answer = page.locator("#dialog-answer")
    await expect(answer).to_be_visible()
    await expect(answer).to_contain_text(expect_status)
    text = await answer.inner_text()
    await page.click("#dialog-close")
    await expect(page.locator("#dialog")).not_to_be_visible()
    return text


def row(page: Page, key: str) -> Any:
    return page.locator(f'#schedules tr[data-key="{key}"]')


async def test_every_action_round_trips_through_the_page(
    start_worker: Any, app_id: str, tmp_path: Path
) -> None:
    worker: WorkerProcess = start_worker(SCHEDULER_LAUNCHER="embedded")
    fires = f"{app_id}-fires"
    async with (
        Api(worker.url) as api,
        TopicReader(worker.env["KAFKA_BOOTSTRAP_SERVERS"], fires) as reader,
        browser_page() as page,
    ):
        await api.create({"tenant": "acme", "name": "ping", "topic": fires,
                          "trigger": {"type": "cron", "expression": "0 */10 * * * *"}})  # fmt: skip
        await page.goto(f"{worker.url}/ui")
        await expect(row(page, "acme/ping")).to_be_visible()

        # create from the form: validated as typed (a bad field is named and marked), next fires in its zone
        await page.click("#new-schedule")
        await page.fill('[name="tenant"]', "acme")
        await page.fill('[name="name"]', "paris-morning")
        await page.fill('[name="trigger.expression"]', "0 61 9 * * *")
        await page.fill('[name="trigger.timezone"]', "Europe/Paris")
        await page.fill('[name="topic"]', fires)
        await expect(page.locator("#dialog-preview .bad")).to_contain_text("trigger")
        await expect(page.locator('[name="trigger.expression"]')).to_have_class(re.compile("invalid"))
        await page.fill('[name="trigger.expression"]', "0 30 9 * * *")
        preview = page.locator("#dialog-preview")
        await expect(preview).to_contain_text("Next fire times (Europe/Paris")
        await expect(preview.locator("ol.fires li")).to_have_count(10)
        await expect(preview.locator("ol.fires li").first).to_contain_text("09:30:00")
        await expect(page.locator('[name="trigger.expression"]')).not_to_have_class(re.compile("invalid"))
        await page.screenshot(path=str(shots(tmp_path) / "admin-form.png"))
        assert '"action": "INSERT"' in await confirm(page)
        await expect(row(page, "acme/paris-morning")).to_be_visible()
        created = (await api.client.get("/schedules/acme/paris-morning")).json()
        assert created["trigger"] == {
            "type": "cron",
            "expression": "0 30 9 * * *",
            "timezone": "Europe/Paris",
        }

        # edit: the same form, filled; the preview follows the change; saved with PUT
        await row(page, "acme/paris-morning").locator("button.edit").click()
        await expect(page.locator('[name="trigger.expression"]')).to_have_value("0 30 9 * * *")
        await page.fill('[name="trigger.expression"]', "0 0 18 * * *")
        await expect(preview.locator("ol.fires li").first).to_contain_text("18:00:00")
        assert '"action": "UPDATE"' in await confirm(page)
        await expect(row(page, "acme/paris-morning").locator("td.trigger")).to_contain_text("18")

        # disable with a note (a pause: the list says why, since when and by whom), then enable
        await row(page, "acme/paris-morning").locator("button.disable").click()
        await page.fill('[name="note"]', "warehouse migration")
        await expect(preview).to_contain_text("It will be disabled")
        await confirm(page)
        await expect(row(page, "acme/paris-morning").locator("td.enabled")).to_contain_text(
            "paused: warehouse migration (since "
        )
        await row(page, "acme/paris-morning").locator("button.enable").click()
        await expect(preview.locator("ol.fires li").first).to_contain_text("18:00:00")
        await confirm(page)
        await expect(row(page, "acme/paris-morning").locator("td.enabled")).to_have_text("yes")

        # run now, with arguments: the fire carries them
        await row(page, "acme/ping").locator("button.run").click()
        await page.fill('[name="arguments"]', "who=page\nwhy=test")
        await expect(preview).to_contain_text("It will fire once")
        await confirm(page)
        deadline = time.monotonic() + 30
        while not [f for f in fires_of(reader.records, "ping") if f.data.get("who") == "page"]:
            assert time.monotonic() < deadline, "the run-now fire did not come"
            await asyncio.sleep(0.2)

        # backfill the last hour: the count shown first is the count that fires
        before = len(fires_of(reader.records, "ping"))
        await row(page, "acme/ping").locator("button.backfill").click()
        now = datetime.now()
        await page.fill('[name="from"]', local_input(now - timedelta(hours=1)))
        await page.fill('[name="to"]', local_input(now))
        count = page.locator("#dialog-preview .fires-count")
        await expect(count).to_contain_text("It will make")
        shown = int(re.search(r"make (\d+) fire", await count.inner_text()).group(1))  # type: ignore[union-attr]
        assert 5 <= shown <= 7, shown  # every 10 minutes over an hour
        assert f'"fires": {shown}' in await confirm(page)
        deadline = time.monotonic() + 30
        while len(fires_of(reader.records, "ping")) - before < shown:
            assert time.monotonic() < deadline, "the backfill's fires did not all come"
            await asyncio.sleep(0.2)

        # register a program
        await page.click("#new-program")
        await page.fill('[name="program"]', SLEEPER)
        await page.select_option('[name="kind"]', "command")
        await page.fill('[name="argv"]', '["sh", "-c", "echo now sleeping; sleep 120"]')
        await confirm(page)
        await api.until(
            f"/programs/{SLEEPER}", lambda r: r.status_code == 200 and r.json()["kind"] == "command"
        )

        # a run of it (run now on its schedule), then suspend, resume and stop it from the runs table
        await api.create({"tenant": "acme", "name": "sleeper", "program": SLEEPER,
                          "trigger": {"type": "cron", "expression": "0 0 3 * * *"}})  # fmt: skip
        await expect(row(page, "acme/sleeper")).to_be_visible()
        await row(page, "acme/sleeper").locator("button.run").click()
        await confirm(page)
        run_row = page.locator("#runs tbody tr", has=page.locator("td.program", has_text=SLEEPER))
        await expect(run_row.locator(".badge")).to_have_text("RUNNING")
        await run_row.locator("button.logs").click()  # its output, followed while it runs
        await expect(page.locator("#dialog-body pre.run-logs")).to_have_text("now sleeping\n")
        await expect(page.locator("#dialog-body .run-logs-state")).to_contain_text("RUNNING, following")
        await page.click("#dialog-close")
        await run_row.locator("button.suspend").click()
        await confirm(page)
        await expect(run_row.locator(".badge")).to_have_text("SUSPENDED")
        await run_row.locator("button.resume").click()
        await confirm(page)
        await expect(run_row.locator(".badge")).to_have_text("RUNNING")
        await run_row.locator("button.stop").click()
        await confirm(page)
        await expect(run_row.locator(".badge")).to_have_text("STOPPED")

        # a program schedule's backfill is a backfill object: what it launches shown first, then followed
        # and cancelled in its Backfills dialog (two days of its 03:00 cron, one at a time)
        await row(page, "acme/sleeper").locator("button.backfill").click()
        await page.fill('[name="from"]', local_input(now - timedelta(days=2)))
        await page.fill('[name="to"]', local_input(now))
        await expect(count).to_contain_text("It will launch 2 instants")
        assert '"id": "bf-' in await confirm(page)
        await row(page, "acme/sleeper").locator("button.backfills").click()
        running = page.locator("#dialog-body p.backfill")
        await expect(running).to_contain_text("RUNNING: 1 of 2 launched")
        await running.locator("button.cancel-backfill").click()
        await expect(running).to_contain_text("CANCELLED: 1 of 2 launched")
        await page.click("#dialog-close")
        await page.screenshot(path=str(shots(tmp_path) / "admin-tables.png"), full_page=True)
        assert not page.problems, page.problems  # type: ignore[attr-defined]


async def test_the_drawings_show_the_tests_runs_fires_and_pipeline(
    start_worker: Any, app_id: str, tmp_path: Path
) -> None:
    worker: WorkerProcess = start_worker(SCHEDULER_LAUNCHER="embedded")
    quick, flaky, report = "acme/etl/command/quick", "acme/etl/command/flaky", "acme/etl/command/report"
    async with Api(worker.url) as api, browser_page() as page:
        await api.register(quick, {"kind": "command", "argv": ["true"]})
        await api.register(flaky, {"kind": "command", "argv": ["false"]})
        await api.register(report, {"kind": "command", "argv": ["true"]})
        # the pipeline: new partitions of acme.clicks -> etl (launches quick) -> quick SUCCEEDED -> report
        await api.create({"tenant": "acme", "name": "etl", "program": quick,
                          "trigger": {"type": "partition", "dataset": "acme.clicks", "minPartitions": 1}})  # fmt: skip
        await api.create({"tenant": "acme", "name": "report", "program": report,
                          "trigger": {"type": "programStatus", "program": quick, "on": ["SUCCEEDED"]}})  # fmt: skip
        # a program that fails, retried once: two runs, the second an attempt 2
        await api.create({"tenant": "acme", "name": "flaky", "program": flaky,
                          "trigger": {"type": "cron", "expression": "0 0 3 * * *"},
                          "retry": {"maxAttempts": 2, "initialDelayMs": 500}})  # fmt: skip
        # and fires to count: every second
        await api.create({"tenant": "acme", "name": "tick", "topic": f"{app_id}-fires",
                          "trigger": {"type": "cron", "expression": "* * * * * *"}})  # fmt: skip
        r = await api.client.post("/events", json={"eventType": "partition", "payload": {
            "datasetId": "acme.clicks", "partitionKeys": '["2026-11-26"]', "bytes": "10"}})  # fmt: skip
        assert r.status_code == 202, r.text
        assert (await api.client.post("/schedules/acme/flaky/run", json={})).status_code == 202

        def runs_of(program: str) -> list[dict[str, Any]]:
            return httpx.get(f"{worker.url}/programs/{program}/runs", timeout=10).json()["runs"]

        deadline = time.monotonic() + 90
        while not (
            any(r["status"] == "COMPLETED" for r in runs_of(report))
            and len([r for r in runs_of(flaky) if r["status"] == "FAILED"]) == 2
        ):
            assert time.monotonic() < deadline, (runs_of(quick), runs_of(report), runs_of(flaky))
            await asyncio.sleep(0.5)
        runs = runs_of(quick) + runs_of(report) + runs_of(flaky)

        await page.goto(f"{worker.url}/ui")
        # the timeline: a bar per run, coloured by its end state, the retry marked
        bars = page.locator("#timeline svg rect.bar")
        await expect(bars).to_have_count(len(runs))
        await expect(page.locator("#timeline rect.bar.s-COMPLETED")).to_have_count(2)
        await expect(page.locator("#timeline rect.bar.s-FAILED")).to_have_count(2)
        await expect(page.locator("#timeline rect.bar.retry")).to_have_count(1)
        await expect(page.locator("#timeline text.retry-mark")).to_have_text("#2")
        await expect(page.locator("#timeline-legend")).to_contain_text(f"{len(runs)} runs of 3 programs")

        # fires per minute: the every-second schedule's fires are drawn and counted
        await expect(page.locator("#fires svg rect.fire-bar").first).to_be_visible()
        await expect(page.locator("#fires-summary")).to_contain_text(
            re.compile(r"([5-9]|\d\d+) fires in the last hour")
        )
        drawn = sum(
            [
                int(n)
                for n in await page.locator("#fires rect.fire-bar").evaluate_all(
                    "(b) => b.map((x) => x.dataset.fires)"
                )
            ]
        )
        stats = httpx.get(f"{worker.url}/stats/fires", timeout=10).json()
        assert 0 < drawn <= sum(m["fires"] for m in stats["minutes"]), (drawn, stats)

        # the pipeline graph: dataset -> etl -> quick -> report -> report's program; flaky launches flaky
        graph = page.locator("#graph svg")
        for a, b in (
            ("dataset:acme.clicks", "schedule:acme/etl"),
            ("schedule:acme/etl", f"program:{quick}"),
            (f"program:{quick}", "schedule:acme/report"),
            ("schedule:acme/report", f"program:{report}"),
            ("schedule:acme/flaky", f"program:{flaky}"),
        ):
            await expect(graph.locator(f'path.edge[data-from="{a}"][data-to="{b}"]')).to_have_count(1)
        await expect(graph.locator('g.node[data-node="schedule:acme/tick"]')).to_have_count(0)  # time only
        await graph.locator(f'g.node[data-node="program:{quick}"]').click()
        details = page.locator("#graph-details")
        await expect(details).to_contain_text("Registered: command")
        await expect(details).to_contain_text("COMPLETED")
        await graph.locator('g.node[data-node="dataset:acme.clicks"]').click()
        await expect(details).to_contain_text("Watched by 1 schedule: acme/etl")

        await page.select_option("#timeline-period", "600000")  # the last 10 minutes: every run is in them
        await expect(bars).to_have_count(len(runs))
        where = shots(tmp_path)
        await page.locator("#timeline-section").screenshot(path=str(where / "admin-timeline.png"))
        await page.locator("#fires-section").screenshot(path=str(where / "admin-fires.png"))
        await page.locator("#graph-section").screenshot(path=str(where / "admin-pipeline.png"))
        assert not page.problems, page.problems  # type: ignore[attr-defined]
