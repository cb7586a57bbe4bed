"""Backfill objects end to end (issue 39 item 4): start one over HTTP (a dry run first), see it launch at
most maxConcurrent jobs at a time, newest first, follow its progress, cancel it from the CLI, then backfill
only what failed or never ran. The test plays the launcher (launch requests read from the schedule's
topic, run statuses sent as program-status events)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.helpers import Api, TopicReader, decode_launch, scheduler_cli

pytestmark = [pytest.mark.integration, pytest.mark.embedded, pytest.mark.timeout(180)]

HOUR = 3_600_000


@pytest.fixture
def worker(shared_worker):  # type: ignore[no-untyped-def]
    return shared_worker


async def test_a_backfill_launches_a_few_at_a_time_reports_progress_and_is_cancelled(
    broker, worker, app_id, tenant
):
    launches = f"{app_id}-launches"
    program = f"{tenant}/etl/workflow/hourly"
    start = (int(time.time() * 1000) // HOUR - 10) * HOUR  # the top of the hour, 10 hours ago
    instants = [start + i * HOUR for i in range(6)]
    span = {"from": instants[0], "to": instants[-1]}
    base = f"/schedules/{tenant}/hourly/backfills"
    async with (
        Api(worker.url) as api,
        TopicReader(broker.bootstrap_servers, launches, decode_launch) as reader,
    ):
        await api.create({"tenant": tenant, "name": "hourly", "enabled": False, "topic": launches,
                          "trigger": {"type": "cron", "expression": "0 * * * *"}, "program": program})  # fmt: skip
        await api.create({"tenant": tenant, "name": "plain", "topic": launches,
                          "trigger": {"type": "cron", "expression": "0 * * * *"}})  # fmt: skip
        r = await api.client.post(f"/schedules/{tenant}/plain/backfills", json=span)
        assert r.status_code == 400 and r.json()["fields"][0]["field"] == "program", r.text

        dry = await api.client.post(
            base, json={**span, "reprocess": "all", "order": "newest", "dryRun": True}
        )
        assert dry.status_code == 200, dry.text
        assert (
            dry.json()["instants"] == 6 and dry.json()["next"] == instants[::-1] and dry.json()["id"] is None
        )
        r = await api.client.post(
            base, json={**span, "reprocess": "all", "order": "newest", "maxConcurrent": 2}
        )
        assert r.status_code == 202, r.text
        bid = r.json()["id"]

        def due(x: dict[str, Any]) -> int:
            return int(x["arguments"]["trigger.due"])

        async def progress(predicate) -> dict[str, Any]:  # type: ignore[no-untyped-def]
            got = await api.until(f"{base}/{bid}", lambda r: r.status_code == 200 and predicate(r.json()))
            return dict(got.json())

        async def end(launch: dict[str, Any], status: str) -> None:
            await api.status(program, launch["runId"], status)

        await reader.wait_for(lambda r: len(r) == 2)
        await asyncio.sleep(1)
        assert [due(x) for x in reader.records] == instants[:3:-1], "not two at a time, newest first"
        shown = await progress(lambda b: b["launched"] == 2)
        assert (shown["status"], shown["pending"], shown["inFlight"], shown["total"]) == ("RUNNING", 4, 2, 6)
        first, second = reader.records
        await end(first, "COMPLETED")
        await end(second, "FAILED")
        await reader.wait_for(lambda r: len(r) == 4)
        assert [due(x) for x in reader.records[2:]] == [instants[3], instants[2]]
        await progress(lambda b: b["completed"] == 1 and b["failed"] == 1)

        cancelled = scheduler_cli(worker.url, "backfills", "cancel", f"{tenant}/hourly", bid)
        assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
        shown = await progress(lambda b: b["status"] == "CANCELLED")
        assert (shown["cancelled"], shown["pending"], shown["launched"]) == (2, 0, 4), shown
        again = await api.client.delete(f"{base}/{bid}")
        assert again.status_code == 409, again.text
        for launch in reader.records[2:]:
            await end(launch, "COMPLETED")  # (a cancelled backfill's runs go on to their end)
        await progress(lambda b: b["completed"] == 3 and b["inFlight"] == 0)
        listed = scheduler_cli(worker.url, "backfills", "list", f"{tenant}/hourly")
        assert listed.returncode == 0 and bid in listed.stdout and "CANCELLED" in listed.stdout, listed.stdout

        # what ran: instants 5, 3, 2 COMPLETED, 4 FAILED; 1 and 0 never ran
        await api.until(
            f"/programs/{program}/runs",
            lambda r: sorted(x["status"] for x in r.json()["runs"]) == ["COMPLETED"] * 3 + ["FAILED"],
        )
        failed = await api.client.post(base, json={**span, "reprocess": "failed", "dryRun": True})
        assert failed.json()["next"] == [instants[0], instants[1], instants[4]], failed.text
        assert failed.json()["leftOut"] == 3
        r = await api.client.post(base, json={**span, "maxConcurrent": 5})  # reprocess none: only the missing
        assert r.status_code == 202 and r.json()["instants"] == 2, r.text
        await reader.wait_for(lambda r: len(r) == 6)
        assert sorted(due(x) for x in reader.records[4:]) == instants[:2]
        listed_json = (await api.client.get(base)).json()["backfills"]
        assert [b["id"] for b in listed_json][1] == bid and len(listed_json) == 2
