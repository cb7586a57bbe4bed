"""Exclusion calendars end to end on a real broker: managed over HTTP and the CLI, excluded by schedules,
their instants not fired (counted) and shown by /next, an update followed by every schedule that uses it
without re-sending them."""

from __future__ import annotations

import asyncio
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.helpers import Api, TopicReader, fires_of, scheduler_cli

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]


async def test_a_schedule_does_not_fire_on_its_calendars_days_and_follows_the_calendars_updates(
    broker, worker, app_id
):
    out = f"{app_id}-out"
    today = datetime.now(UTC).date()
    days = [today.isoformat(), (today + timedelta(days=1)).isoformat()]  # (today, and past midnight)
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out) as reader:
        r = await api.client.put(
            "/calendars/acme/freeze", json={"dates": days, "description": "release freeze"}
        )
        assert r.status_code == 202, r.text
        await api.until("/calendars/acme/freeze", lambda r: r.status_code == 200)
        r = await api.client.post(
            "/schedules",
            json={"tenant": "acme", "name": "x", "trigger": {"type": "cron", "expression": "* * * * * *"},
                  "topic": out, "excludeCalendars": ["nope"]},
        )  # fmt: skip
        assert r.status_code == 400 and r.json()["fields"][0]["field"] == "excludeCalendars.0", r.text
        every_second = {"tenant": "acme", "name": "frozen", "trigger": {"type": "cron", "expression": "* * * * * *"},
                        "topic": out, "excludeCalendars": ["freeze"]}  # fmt: skip
        every_10_min = {
            **every_second,
            "name": "preview",
            "trigger": {"type": "cron", "expression": "0 */10 * * * *"},
        }
        await api.create(every_second)
        await api.create(every_10_min)
        preview = (await api.client.get("/schedules/acme/preview/next", params={"n": "3"})).json()
        await asyncio.sleep(3)
        assert fires_of(reader.records, "frozen") == []  # its days: nothing fires
        metrics = (await api.client.get("/metrics")).text
        # the calendar changes (no day any more): the schedule fires again, not re-sent
        r = await api.client.put("/calendars/acme/freeze", json={"dates": [], "description": "freeze lifted"})
        assert r.status_code == 202
        await reader.wait_for(lambda rs: len(fires_of(rs, "frozen")) >= 2, timeout_s=30)
        listed = (await api.client.get("/calendars", params={"tenant": "acme"})).json()["calendars"]
    day_after = datetime.combine(today + timedelta(days=2), datetime.min.time(), UTC)
    assert preview["next"][0] == int(day_after.timestamp() * 1000)  # the first instant after its days
    assert preview["excluded"][0]["calendar"] == "freeze" and len(preview["excluded"]) > 0
    excluded = float(re.search(r"^scheduler_excluded_fires_total (\S+)$", metrics, re.M).group(1))  # type: ignore[union-attr]
    assert excluded >= 2
    assert [c["description"] for c in listed] == ["freeze lifted"]


async def test_a_restarted_worker_knows_the_calendars_before_it_catches_up_or_fires(
    broker, start_worker, app_id
):
    """A worker reads the calendars before it takes its first partition up: its catch-up of the instants
    passed while it was down, and the fires of its first partitions while it takes up the others (Faust
    starts its services only after that), skip the days a calendar holds, as every later fire does."""
    out = f"{app_id}-out"
    today = datetime.now(UTC).date()
    days = [today.isoformat(), (today + timedelta(days=1)).isoformat()]
    first = start_worker()
    async with TopicReader(broker.bootstrap_servers, out) as reader:
        async with Api(first.url) as api:
            r = await api.client.put("/calendars/acme/freeze", json={"dates": days})
            assert r.status_code == 202, r.text
            await api.until("/calendars/acme/freeze", lambda r: r.status_code == 200)
            for name in ("frozen", "free"):
                await api.create(
                    {"tenant": "acme", "name": name, "trigger": {"type": "cron", "expression": "* * * * * *"},
                     "topic": out, "excludeCalendars": ["freeze"] if name == "frozen" else []}
                )  # fmt: skip
        await reader.wait_for(lambda rs: len(fires_of(rs, "free")) >= 2, timeout_s=30)
        first.stop()
        await asyncio.sleep(3)  # instants pass: the next take-up catches them up (coalesced: one each)
        again = start_worker(SCHEDULER_FAILPOINTS="take-up-slow=2")
        seen = len(fires_of(reader.records, "free"))
        await reader.wait_for(lambda rs: len(fires_of(rs, "free")) >= seen + 3, timeout_s=30)
        assert any(f.catch_up for f in fires_of(reader.records, "free")), "nothing was caught up"
    frozen = fires_of(reader.records, "frozen")
    assert frozen == [], f"fired on a day its calendar holds: {frozen}\n{again.log_tail(40)}"


def test_the_cli_puts_lists_and_deletes_calendars(worker) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return scheduler_cli(worker.url, "calendars", *args)

    r = cli("put", "acme/holidays", "--timezone", "Europe/Paris", "--dates", "2026-12-25,2027-01-01", "--range", "2026-08-01..2026-08-15", "--weekdays", "sat,sun")  # fmt: skip
    assert r.returncode == 0 and r.stdout.strip() == "acme/holidays: PUT accepted", r.stderr
    for _ in range(100):
        got = cli("get", "acme/holidays")
        if got.returncode == 0:
            break
    assert (
        got.stdout.strip()
        == "acme/holidays (Europe/Paris): 2026-12-25, 2027-01-01, 2026-08-01..2026-08-15, SAT, SUN"
    )
    assert "acme/holidays" in cli("list", "--tenant", "acme").stdout
    assert cli("delete", "acme/holidays").returncode == 0
    bad = cli("put", "acme/holidays", "--timezone", "Mars/Olympus")
    assert bad.returncode == 1 and "timezone" in bad.stderr
