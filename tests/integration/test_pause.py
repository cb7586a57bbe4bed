"""Pause with a note (issue 39): a DISABLE keeps why, by whom, since and until when; GET, the list, the CLI
and the history show it; at `until` the schedule resumes by itself (its resume held as a delayed message),
and a resume that outlived its pause (enabled by hand, paused again) changes nothing."""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Api, TopicReader, fires_of, scheduler_cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def schedule(api: Api, tenant: str, name: str) -> dict[str, Any]:
    r = await api.client.get(f"/schedules/{tenant}/{name}")
    assert r.status_code == 200, r.text
    return dict(r.json())


async def pause(api: Api, tenant: str, name: str, **body: Any) -> dict[str, Any]:
    """Disable with this body, answered once applied (?wait=applied)."""
    r = await api.client.post(f"/schedules/{tenant}/{name}/disable", params={"wait": "applied"}, json=body)
    assert r.status_code in (200, 202), r.text
    return await schedule(api, tenant, name)


@pytest.mark.embedded
async def test_a_pause_keeps_its_note_and_resumes_by_itself_at_its_end(broker, worker, app_id, tenant):
    out = f"{app_id}-out"
    every_second = {"tenant": tenant, "name": "s", "trigger": {"type": "cron", "expression": "* * * * * *"},
                    "topic": out}  # fmt: skip
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out) as reader:
        await api.create(every_second)
        until = now_ms() + 6_000
        for bad, field in (({"until": now_ms() - 1}, "until"), ({"note": "x" * 1001}, "note")):
            r = await api.client.post(f"/schedules/{tenant}/s/disable", json=bad)
            assert r.status_code == 400 and r.json()["fields"][0]["field"] == field, r.text
        paused = await pause(api, tenant, "s", note="warehouse migration", until=until)
        assert paused["enabled"] is False
        assert paused["paused"]["note"] == "warehouse migration" and paused["paused"]["until"] == until
        assert paused["paused"]["by"] == "auth-off" and paused["paused"]["at"] <= now_ms()
        listed = (await api.client.get("/schedules", params={"tenant": tenant})).json()["schedules"]
        assert listed[0]["paused"] == paused["paused"]

        deadline = time.monotonic() + 30
        while not (resumed := await schedule(api, tenant, "s"))["enabled"]:
            assert time.monotonic() < deadline, "it did not resume at the end of its pause"
            await asyncio.sleep(0.2)
        assert resumed["paused"] is None and resumed["activeSince"] >= until
        history = (await api.client.get(f"/schedules/{tenant}/s/history")).json()["versions"]
        assert [(v["action"], v["by"], v["note"], v["until"]) for v in history[:2]] == [
            ("ENABLE", "pausedUntil", None, until),
            ("DISABLE", "auth-off", "warehouse migration", until),
        ]
        await reader.wait_for(lambda r: any(f.due_at >= resumed["activeSince"] for f in fires_of(r, "s")))
    silent = [
        f.due_at for f in fires_of(reader.records, "s") if paused["paused"]["at"] + 1_000 < f.due_at < until
    ]
    assert silent == [], "it fired while paused"


@pytest.mark.embedded
async def test_a_resume_that_outlived_its_pause_changes_nothing(worker, tenant):
    async with Api(worker.url) as api:
        await api.create({"tenant": tenant, "name": "s", "trigger": {"type": "cron", "expression": "0 0 3 * * *"},
                          "topic": "elsewhere"})  # fmt: skip
        until = now_ms() + 3_000
        await pause(api, tenant, "s", note="short", until=until)
        r = await api.client.post(f"/schedules/{tenant}/s/enable", params={"wait": "applied"})
        assert r.status_code in (200, 202), r.text
        again = await pause(api, tenant, "s", note="for good")  # (no end)
        assert again["paused"]["until"] is None
        await asyncio.sleep((until - now_ms()) / 1000 + 4)  # (its resume is delivered at `until`)
        after = await schedule(api, tenant, "s")
    assert after["enabled"] is False and after["paused"] == again["paused"]
    assert after["version"] == again["version"]


def test_the_cli_pauses_with_a_note_and_an_end_and_shows_them(worker, tenant) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return scheduler_cli(worker.url, "schedules", *args)

    asyncio.run(_create(worker.url, tenant))
    r = cli("disable", f"{tenant}/nightly", "--note", "quarter close", "--until", "+2h")
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 30
    while "paused until" not in (shown := cli("get", f"{tenant}/nightly").stdout):
        assert time.monotonic() < deadline, shown
        time.sleep(0.3)
    assert ": quarter close (since " in shown and " by auth-off)" in shown
    listed = cli("list", "--tenant", tenant).stdout
    assert "paused until" in listed and "quarter close" in listed
    assert "quarter close" in cli("history", f"{tenant}/nightly").stdout


async def _create(url: str, tenant: str) -> None:
    async with Api(url) as api:
        await api.create({"tenant": tenant, "name": "nightly", "trigger": {"type": "cron", "expression": "0 0 3 * * *"},
                          "topic": "elsewhere"})  # fmt: skip


async def test_a_schedule_paused_and_resumed_often_shows_its_newest_commands_in_its_history(worker, tenant):
    """Its history is appended to without being read back each time (wire/messages.py, HISTORY_SLACK): past
    MAX_HISTORY commands it still answers the newest 100, newest first, each pause with its own note."""
    async with Api(worker.url) as api:
        await api.create({"tenant": tenant, "name": "toggled", "trigger": {"type": "cron", "expression": "0 0 3 * * *"},
                          "topic": "elsewhere"})  # fmt: skip
        for i in range(90):  # 180 commands after the INSERT
            r = await api.client.post(
                f"/schedules/{tenant}/toggled/disable", json={"note": f'pause {i} {{"v":}}'}
            )
            assert r.status_code == 202, r.text
            r = await api.client.post(f"/schedules/{tenant}/toggled/enable", params={"wait": "applied"})
            assert r.status_code == 200, r.text
        history = (await api.client.get(f"/schedules/{tenant}/toggled/history")).json()["versions"]
    assert len(history) == 100
    assert [v["action"] for v in history[:4]] == ["ENABLE", "DISABLE", "ENABLE", "DISABLE"]
    notes = [v["note"] for v in history if v["action"] == "DISABLE"]
    assert notes == [f'pause {i} {{"v":}}' for i in range(89, 39, -1)]
