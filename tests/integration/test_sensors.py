"""Polling sensors end to end on a real broker: a program of kind `sensor` (the example that watches a
directory for new files) is evaluated every interval by the worker owning it, out of the event loop, with the
cursor it returned last; each time it says so, the schedules whose trigger is `{"type": "sensor"}` fire, once
— files already fired for never again, across a SIGKILL of its owner (the other worker reads its cursor and
goes on). A check that hangs is killed at its time limit and one that raises fails its evaluation, saying
why; the worker stays ready. State over HTTP and `scheduler sensors status`."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from scheduler.worker.app import partition_for
from tests.helpers import Api, TopicReader, decode_launch, owned, scheduler_cli, wait_split

pytestmark = [pytest.mark.integration, pytest.mark.embedded, pytest.mark.timeout(240)]

SENSOR = "acme/landing/sensor/new-files"
LOAD = (
    "acme/landing/workflow/load"  # (what the schedule launches: its launch requests are what the test reads)
)


def launches(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [x for x in records if x["schedule"]["name"] == "on-files"]


def sensor_spec(directory: Path, **extra: Any) -> dict[str, Any]:
    return {"kind": "sensor", "target": "scheduler.examples.sensors:new_files", "intervalMs": 1000,
            "env": {"SENSOR_DIR": str(directory)}, **extra}  # fmt: skip


async def state_of(client: httpx.AsyncClient, sensor: str = SENSOR) -> dict[str, Any]:
    r = await client.get(f"/programs/{sensor}/sensor")
    assert r.status_code == 200, r.text
    return dict(r.json())


async def until_state(
    client: httpx.AsyncClient, check: Any, sensor: str = SENSOR, timeout_s: float = 40
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = await state_of(client, sensor)
        if check(state):
            return state
        await asyncio.sleep(0.3)
    raise AssertionError(f"sensor {sensor} never got there: {state}")


async def test_a_sensor_fires_its_schedules_once_per_new_thing_and_a_bad_check_fails_saying_why(
    broker, start_worker, app_id, tmp_path: Path
):
    landing = tmp_path / "landing"
    landing.mkdir()
    worker = start_worker()
    out = f"{app_id}-launches"
    hangs = "acme/landing/sensor/hangs"
    raises = "acme/landing/sensor/raises"
    async with Api(worker.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as reader:
        client = api.client
        await api.register(SENSOR, sensor_spec(landing))
        await api.register(hangs, {"kind": "sensor", "argv": [sys.executable, "-c", "import time; time.sleep(60)"],
                                   "intervalMs": 1000, "timeLimitMs": 1000})  # fmt: skip
        await api.register(raises, {"kind": "sensor", "target": "json:loads", "intervalMs": 1000})
        bad = await client.put(
            "/programs/acme/landing/sensor/bad", json={"kind": "sensor", "argv": ["x"], "target": "m:f"}
        )
        assert bad.status_code == 400 and "target" in bad.text, bad.text
        await api.register(LOAD, {"kind": "external"})
        await api.indexed(await api.create({"tenant": "acme", "name": "on-files", "topic": out, "program": LOAD,
                                            "trigger": {"type": "sensor", "sensor": SENSOR}}))  # fmt: skip
        refused = await client.post("/schedules", json={"tenant": "acme", "name": "launch-sensor", "program": SENSOR,
                                                        "trigger": {"type": "cron", "expression": "0 3 * * *"}})  # fmt: skip
        assert refused.status_code == 400 and "is a sensor" in refused.text, refused.text

        quiet = await until_state(client, lambda s: s["evaluations"] >= 2)
        assert quiet["outcome"] == "NOTHING_NEW" and quiet["cursor"] is None and quiet["fires"] == 0, quiet
        assert not launches(reader.records)

        for name in ("2026-11-29T01-a.csv", "2026-11-29T02-b.csv"):
            (landing / f".{name}").write_text("x")
        for name in (
            "2026-11-29T01-a.csv",
            "2026-11-29T02-b.csv",
        ):  # (both at once: one evaluation sees both)
            (landing / f".{name}").rename(landing / name)
        fired = await until_state(client, lambda s: s["fires"] == 1)
        assert fired["cursor"] == "2026-11-29T02-b.csv", fired
        assert fired["runKeys"] == ["2026-11-29T01-a.csv", "2026-11-29T02-b.csv"], fired
        await reader.wait_for(lambda r: len(launches(r)) == 1)
        seen = fired["evaluations"]
        await until_state(client, lambda s: s["evaluations"] >= seen + 3)  # nothing new: no fire
        assert len(launches(reader.records)) == 1

        (landing / "2026-11-29T03-c.csv").write_text("x")
        again = await until_state(client, lambda s: s["fires"] == 2)
        assert again["cursor"] == "2026-11-29T03-c.csv" and again["runKeys"] == ["2026-11-29T03-c.csv"], again
        await reader.wait_for(lambda r: len(launches(r)) == 2)

        hung = await until_state(client, lambda s: s["failures"] >= 1, sensor=hangs)
        assert hung["outcome"] == "FAILED" and "time limit of 1 s exceeded" in hung["reason"], hung
        raised = await until_state(client, lambda s: s["failures"] >= 1, sensor=raises)
        assert "Traceback" in raised["reason"] and "exit code 1" in raised["reason"], raised
        listed = (await client.get("/sensors", params={"namespace": "acme"})).json()["sensors"]
        assert {s["sensor"] for s in listed} == {SENSOR, hangs, raises}
        assert (await client.get("/programs/acme/landing/sensor/none/sensor")).status_code == 404
        await asyncio.sleep(1.5)
        assert len(launches(reader.records)) == 2
    assert worker.health()["ready"], worker.health()
    cli = scheduler_cli(worker.url, "sensors", "status", SENSOR)
    assert cli.returncode == 0 and "2 fires" in cli.stdout and "2026-11-29T03-c.csv" in cli.stdout, (
        cli.stdout + cli.stderr
    )


async def test_a_sensors_cursor_survives_the_sigkill_of_its_owner(
    broker, start_worker, app_id, tmp_path: Path
):
    landing = tmp_path / "landing"
    landing.mkdir()
    out = f"{app_id}-launches"
    one = start_worker()
    two = start_worker(partitions=0, SCHEDULER_DATA_DIR=str(tmp_path / "two"))
    await asyncio.to_thread(wait_split, one, two)
    partition = partition_for(SENSOR.encode(), 4)
    owner, survivor = (one, two) if partition in owned(one) else (two, one)
    async with Api(survivor.url) as api, TopicReader(broker.bootstrap_servers, out, decode_launch) as reader:
        client = api.client
        await api.register(SENSOR, sensor_spec(landing))
        await api.register(LOAD, {"kind": "external"})
        await api.indexed(await api.create({"tenant": "acme", "name": "on-files", "topic": out, "program": LOAD,
                                            "trigger": {"type": "sensor", "sensor": SENSOR}}))  # fmt: skip
        (landing / "001.csv").write_text("x")
        before = await until_state(client, lambda s: s["fires"] == 1)
        await reader.wait_for(lambda r: len(launches(r)) == 1)
        owner.kill()
        await asyncio.to_thread(lambda: survivor.wait_ready(partitions=4))
        (landing / "002.csv").write_text("x")
        after = await until_state(client, lambda s: s["fires"] == 2, timeout_s=60)
        await reader.wait_for(lambda r: len(launches(r)) == 2)
        await asyncio.sleep(3)  # (a few more evaluations: nothing fires again)
        fires = launches(reader.records)
    assert len(fires) == 2, fires
    assert after["runKeys"] == ["002.csv"] and after["cursor"] == "002.csv", after
    assert after["evaluations"] > before["evaluations"], "the survivor started over instead of going on"
