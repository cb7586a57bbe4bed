"""The client commands of the CLI as a subprocess against a real worker: bulk import, the schedule round
trip, bad files, jobs/runs/events of a program schedule, run now and backfill, and auth."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml

from scheduler.cli.render import iso
from tests.conftest import Broker
from tests.helpers import Api, TopicReader, WorkerProcess, fires_of

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


def cli(url: str, *args: str | Path, token: str | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m scheduler ARGS` with SCHEDULER_URL (and SCHEDULER_TOKEN when given)."""
    env = {k: v for k, v in os.environ.items() if k not in ("SCHEDULER_TOKEN", "SCHEDULER_URL")}
    env["SCHEDULER_URL"] = url
    if token is not None:
        env["SCHEDULER_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "scheduler", *map(str, args)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )


def until(
    run: Callable[[], subprocess.CompletedProcess[str]],
    ok: Callable[[subprocess.CompletedProcess[str]], bool],
    timeout_s: float = 30,
) -> subprocess.CompletedProcess[str]:
    """Writes are asynchronous (202): run the command until its answer shows them."""
    deadline = time.monotonic() + timeout_s
    while True:
        r = run()
        if ok(r):
            return r
        if time.monotonic() > deadline:
            raise AssertionError(f"rc {r.returncode}\nstdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-2000:]}")
        time.sleep(0.2)


def as_json(r: subprocess.CompletedProcess[str]) -> Any:
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def got(url: str, ref: str) -> Callable[[], subprocess.CompletedProcess[str]]:
    return lambda: cli(url, "schedules", "get", ref, "--json")


def test_bulk_import_of_300_schedules_from_yaml_then_every_one_is_listed(
    shared_worker: WorkerProcess, shared_app_id: str, tmp_path: Path
) -> None:
    url = shared_worker.url
    schedules = [
        {
            "tenant": "bulk",
            "name": f"s{i:03d}",
            "trigger": {"type": "cron", "expression": f"{i % 60} {i % 24} * * *", "timezone": "Europe/Paris"},
            "topic": f"{shared_app_id}-bulk",
            "data": {"i": str(i)},
            "enabled": i % 2 == 0,
        }
        for i in range(300)
    ]
    path = tmp_path / "bulk.yaml"
    path.write_text(yaml.safe_dump({"schedules": schedules}))

    r = cli(url, "schedules", "create", "-f", path)
    assert r.returncode == 0, r.stderr
    assert "sent 300/300" in r.stderr.splitlines()[-1] and "0 failed" in r.stderr, r.stderr
    assert r.stdout.startswith("accepted 300 of 300 schedules in "), r.stdout
    assert r.stdout.rstrip().endswith(", all applied"), r.stdout

    # applied when the command returned: the listing right after it shows every one
    listing = cli(url, "schedules", "list", "--tenant", "bulk", "--limit", "1000", "--json")
    assert listing.returncode == 0 and json.loads(listing.stdout)["total"] == 300, listing.stderr
    listed = json.loads(listing.stdout)["schedules"]
    assert [s["name"] for s in listed] == [s["name"] for s in schedules]
    assert all(s["data"] == {"i": str(i)} and s["enabled"] is (i % 2 == 0) for i, s in enumerate(listed))
    assert listed[61]["trigger"] == {"type": "cron", "expression": "1 13 * * *", "timezone": "Europe/Paris"}

    r = cli(url, "schedules", "list", "--tenant", "bulk", "--limit", "3")
    assert r.returncode == 0 and r.stderr.startswith("(3 of 300; the next page: --cursor "), r.stderr
    header, *rows = r.stdout.splitlines()
    assert header.split()[:3] == ["KEY", "ENABLED", "TRIGGER"] and len(rows) == 3
    assert rows[1].split()[:6] == ["bulk/s001", "no", "cron", "1", "1", "*"]
    cursor = r.stderr.split("--cursor ")[1].split(",")[0]
    r = cli(url, "schedules", "list", "--tenant", "bulk", "--limit", "3", "--cursor", cursor, "--json")
    assert [s["name"] for s in json.loads(r.stdout)["schedules"]] == [s["name"] for s in listed[3:6]]

    # what `list --json` prints imports again: the same definitions, so every INSERT is a no-op
    exported = tmp_path / "exported.json"
    exported.write_text(listing.stdout)
    r = cli(url, "schedules", "create", "-f", exported, "--json")
    assert as_json(r)["accepted"] == 300 and as_json(r)["failed"] == []


def test_get_update_disable_enable_delete_round_trip_and_next_fire_times(
    shared_worker: WorkerProcess, shared_app_id: str, tmp_path: Path
) -> None:
    url, ref = shared_worker.url, "acme/round-trip"
    body = {
        "tenant": "acme",
        "name": "round-trip",
        "trigger": {"type": "cron", "expression": "0 */7 * * * *", "timezone": "Asia/Kolkata"},
        "topic": f"{shared_app_id}-rt",
        "enabled": True,
    }
    (tmp_path / "one.json").write_text(json.dumps(body))
    r = cli(url, "schedules", "create", "-f", tmp_path / "one.json")
    assert r.returncode == 0 and r.stdout.startswith("accepted 1 of 1 schedule in"), r.stderr
    assert r.stderr == ""  # no progress line for a single schedule

    created = as_json(got(url, ref)())  # (applied when create returned)
    assert created["trigger"] == body["trigger"] and created["enabled"] is True
    text = cli(url, "schedules", "get", ref).stdout
    fields = {line.split()[0]: line.split(maxsplit=1)[1] for line in text.splitlines()}
    assert fields["nextFireAt"] == f"{iso(created['nextFireAt'])} ({created['nextFireAt']})"
    assert '"expression":"0 */7 * * * *"' in fields["trigger"] and fields["enabled"] == "yes"

    # next: ISO-8601 UTC and epoch ms, at second 0 of every 7th minute in Kolkata
    nxt = as_json(cli(url, "schedules", "next", ref, "-n", "3", "--json"))
    assert len(nxt["next"]) == 3 and nxt["next"] == sorted(set(nxt["next"]))
    for ms in nxt["next"]:
        local = datetime.fromtimestamp(ms / 1000, UTC).astimezone(ZoneInfo("Asia/Kolkata"))
        assert local.second == 0 and local.minute % 7 == 0 and ms % 1000 == 0
    assert nxt["nextIso"] == [iso(ms) for ms in nxt["next"]]
    rows = cli(url, "schedules", "next", ref, "-n", "3").stdout.splitlines()[1:]
    assert [row.split() for row in rows] == [
        [str(i + 1), iso(ms), str(ms)] for i, ms in enumerate(nxt["next"])
    ]

    # update from what get printed: tenant/name and the server's fields may stay in the file
    changed = {**created, "trigger": {"type": "frequency", "timeUnit": "MINUTES", "time": 5}}
    (tmp_path / "changed.yaml").write_text(yaml.safe_dump(changed))
    r = cli(url, "schedules", "update", ref, "-f", tmp_path / "changed.yaml")
    assert r.returncode == 0 and r.stdout.strip() == f"{ref}: UPDATE applied (version 2)", r.stderr
    updated = as_json(got(url, ref)())
    assert updated["version"] == 2
    assert updated["trigger"]["type"] == "frequency" and updated["enabled"] is True
    r = cli(url, "schedules", "update", "acme/other", "-f", tmp_path / "changed.yaml")
    assert r.returncode == 2 and "name 'round-trip' is not the name of acme/other" in r.stderr

    assert cli(url, "schedules", "disable", ref).stdout.strip() == f"{ref}: DISABLE applied (version 3)"
    assert as_json(got(url, ref)())["enabled"] is False
    assert "is disabled; when enabled it would fire at:" in cli(url, "schedules", "next", ref).stdout
    r = cli(url, "schedules", "enable", ref, "--no-wait")
    assert r.returncode == 0 and r.stdout.strip() == f"{ref}: ENABLE accepted", r.stderr
    until(got(url, ref), lambda r: r.returncode == 0 and json.loads(r.stdout)["enabled"] is True)

    assert cli(url, "schedules", "delete", ref).stdout.strip() == f"{ref}: DELETE applied"
    r = got(url, ref)()
    assert r.returncode == 1
    assert f"GET /schedules/acme/round-trip: 404 not found: {ref}" in r.stderr
    r = cli(url, "schedules", "delete", ref)
    assert r.returncode == 1 and "404 not found" in r.stderr


def test_a_bad_file_names_the_field_of_each_failure_and_the_good_schedules_are_created(
    shared_worker: WorkerProcess, shared_app_id: str, tmp_path: Path
) -> None:
    url = shared_worker.url
    good = {
        "tenant": "acme",
        "name": "good",
        "trigger": {"type": "frequency", "timeUnit": "HOURS", "time": 1},
        "topic": f"{shared_app_id}-bad",
    }
    bad_cron = {**good, "name": "bad-cron", "trigger": {"type": "cron", "expression": "0 0 31 2 * * *"}}
    bad_zone = {**good, "name": "bad-zone", "trigger": {"type": "cron", "expression": "0 * * * *", "timezone": "Mars/Olympus"}}  # fmt: skip
    path = tmp_path / "mixed.yaml"
    path.write_text(yaml.safe_dump([bad_cron, good, bad_zone]))

    r = cli(url, "schedules", "create", "-f", path)
    assert r.returncode == 1
    assert r.stdout.startswith("accepted 1 of 3 schedules") and r.stdout.rstrip().endswith("2 failed")
    err = r.stderr
    assert "scheduler: 2 of 3 failed:" in err
    assert "#0 acme/bad-cron: POST /schedules: 400 invalid request" in err
    assert "#2 acme/bad-zone: POST /schedules: 400 invalid request" in err
    assert "    trigger.expression: " in err and "    trigger.timezone: " in err, err

    r = cli(url, "schedules", "create", "-f", path, "--json")
    report = json.loads(r.stdout)
    assert r.returncode == 1 and [f["key"] for f in report["failed"]] == ["acme/bad-cron", "acme/bad-zone"]
    assert report["failed"][1]["fields"][0]["field"] == "trigger.timezone"
    until(got(url, "acme/good"), lambda r: r.returncode == 0)

    # the dry run finds the same fields without the server
    r = cli("http://127.0.0.1:9", "schedules", "create", "-f", path, "--dry-run")
    assert r.returncode == 1 and "1 of 3 schedules valid" in r.stdout
    assert "trigger.expression:" in r.stderr and "trigger.timezone:" in r.stderr

    (tmp_path / "scalars.yaml").write_text("- 42\n")
    r = cli(url, "schedules", "create", "-f", tmp_path / "scalars.yaml")
    assert r.returncode == 2 and "item 0: expected a mapping, got int" in r.stderr


async def test_jobs_runs_and_events_commands_against_a_program_schedule(
    shared_worker: WorkerProcess, shared_app_id: str, tmp_path: Path
) -> None:
    url = shared_worker.url
    program, dataset = "acme/pipelines/external/etl", f"{shared_app_id}.clicks"

    def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
        return cli(url, *args)

    async def eventually(
        args: tuple[str | Path, ...], ok: Callable[[subprocess.CompletedProcess[str]], bool]
    ) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(until, lambda: run(*args), ok)

    schedule = {
        "tenant": "acme",
        "name": "etl",
        "enabled": True,
        "trigger": {"type": "partition", "dataset": dataset, "minPartitions": 2},
        "program": program,
        "constraints": [{"type": "delay", "delayMs": 3_600_000}],
    }
    (tmp_path / "etl.yaml").write_text(yaml.safe_dump(schedule))
    async with Api(url) as api:
        await api.register(program)  # an external program: launch requests only
        assert run("schedules", "create", "-f", tmp_path / "etl.yaml").returncode == 0
        created = as_json(
            await eventually(("schedules", "get", "acme/etl", "--json"), lambda r: r.returncode == 0)
        )
        await api.indexed(created)  # events before the trigger index knows the dataset are dead-lettered

    why = run("jobs", "why", "acme/etl")
    assert why.returncode == 0, why.stderr
    assert f"acme/etl launches {program}" in why.stdout
    assert f"[ ] 0 of 2 new partitions of {dataset}" in why.stdout and "pending jobs: none" in why.stdout

    r = run(
        "events", "publish", "partition", f"datasetId={dataset}", 'partitionKeys=["2026-11-22"]', "bytes=100"
    )
    assert r.returncode == 0 and f"partition:{dataset}" in r.stdout, r.stderr
    await eventually(("jobs", "why", "acme/etl"), lambda r: f"1 of 2 new partitions of {dataset}" in r.stdout)

    events = {"events": [{"eventType": "partition", "payload": {"datasetId": dataset, "partitionKeys": '["2026-11-23"]'}}]}  # fmt: skip
    (tmp_path / "events.json").write_text(json.dumps(events))
    assert run("events", "publish", "-f", tmp_path / "events.json", "--json").returncode == 0
    listed = as_json(
        await eventually(
            ("jobs", "list", "--schedule", "acme/etl", "--json"),
            lambda r: r.returncode == 0 and len(json.loads(r.stdout)["jobs"]) == 1,
        )
    )
    job = listed["jobs"][0]
    assert (
        job["state"] == "PENDING_CONSTRAINT" and job["blockedBy"] == "DelayConstraint" and job["checkAt"] > 0
    )
    why = run("jobs", "why", "acme/etl").stdout
    assert "pending jobs: 1" in why and f"{job['jobId']} (PENDING_CONSTRAINT" in why, why
    assert "blocked by DelayConstraint" in why and f"checked again at {iso(job['checkAt'])}" in why, why
    table = run("jobs", "list", "--program", program).stdout.splitlines()
    assert table[0].split()[:3] == ["JOB", "STATE", "PROGRAM"]
    assert table[1].split()[:4] == [job["jobId"], "PENDING_CONSTRAINT", program, "DelayConstraint"]
    assert (
        as_json(run("jobs", "list", "--schedule", "acme/etl", "--state", "PENDING_LAUNCH", "--json"))["jobs"]
        == []
    )

    # runs: the test plays the external system reporting a run's states as program-status events
    run_id = "acme/etl@1795341600000"
    for status in ("STARTING", "RUNNING"):
        r = run(
            "events",
            "publish",
            "program-status",
            f"programId={program}",
            f"runId={run_id}",
            f"status={status}",
        )
        assert r.returncode == 0, r.stderr
    runs = await eventually(
        ("runs", "list", program, "--json"),
        lambda r: r.returncode == 0 and [x["status"] for x in json.loads(r.stdout)["runs"]] == ["RUNNING"],
    )
    assert json.loads(runs.stdout)["runs"][0]["run_id"] == run_id
    rows = run("runs", "list", program).stdout.splitlines()
    assert rows[1].split()[:2] == [run_id, "RUNNING"]
    assert run("runs", "list", program, "--status", "COMPLETED").stdout.strip() == f"no runs of {program}"
    status = run("runs", "status", program).stdout
    assert status.startswith(f"{program}: RUNNING") and f"active: {run_id} RUNNING" in status, status

    r = run("runs", "stop", program, run_id)
    assert r.returncode == 0 and r.stdout.strip() == f"{run_id}: stop requested (STOPPING, then STOPPED)", (
        r.stderr
    )
    r = run("runs", "stop", program, "acme/etl@1")
    assert r.returncode == 1 and "404 not found: acme/etl@1" in r.stderr
    r = run("jobs", "why", "acme/nope")
    assert r.returncode == 1 and "404 not found: acme/nope" in r.stderr
    r = run("events", "publish", "partition", "datasetId=nodot")
    assert r.returncode == 1 and "400 invalid request" in r.stderr and "  payload: " in r.stderr, r.stderr


async def test_run_now_and_backfill_fire_the_schedule_at_the_instants_asked(
    shared_worker: WorkerProcess, broker: Broker, shared_app_id: str, tmp_path: Path
) -> None:
    url, topic = shared_worker.url, f"{shared_app_id}-manual"
    start = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
    body = {
        "tenant": "acme",
        "name": "manual",
        "trigger": {"type": "frequency", "timeUnit": "HOURS", "time": 1, "start": start},
        "topic": topic,
    }  # created disabled: only the manual fires reach the topic
    (tmp_path / "manual.json").write_text(json.dumps(body))
    async with TopicReader(broker.bootstrap_servers, topic) as reader:
        assert (
            await asyncio.to_thread(cli, url, "schedules", "create", "-f", tmp_path / "manual.json")
        ).returncode == 0
        await asyncio.to_thread(until, got(url, "acme/manual"), lambda r: r.returncode == 0)

        at = "2026-03-01T12:34:56Z"
        r = await asyncio.to_thread(
            cli,
            url,
            "schedules",
            "run",
            "acme/manual",
            "--at",
            at,
            "--arg",
            "region=eu",
            "--arg",
            "date=2026-03-01",
        )
        assert r.returncode == 0 and r.stdout.strip() == "acme/manual: RUN applied", r.stderr
        r = await asyncio.to_thread(
            cli,
            url,
            "schedules",
            "backfill",
            "acme/manual",
            "--from",
            "2026-01-01T00:00:00Z",
            "--to",
            "2026-01-01T02:00",
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == (
            "acme/manual: BACKFILL applied: 3 fires from 2026-01-01T00:00:00Z to 2026-01-01T02:00:00Z"
        )
        records = await reader.wait_for(lambda rs: len(fires_of(rs, "manual")) >= 4)
    hour = 3_600_000
    assert sorted(f.due_at for f in fires_of(records, "manual")) == [
        start,
        start + hour,
        start + 2 * hour,
        int(datetime(2026, 3, 1, 12, 34, 56, tzinfo=UTC).timestamp() * 1000),
    ]
    run = max(fires_of(records, "manual"), key=lambda f: f.due_at)  # the RUN's fire carries its arguments
    assert run.data == {"region": "eu", "date": "2026-03-01"}
    r = await asyncio.to_thread(
        cli, url, "schedules", "backfill", "acme/nope", "--from", "2026-01-01", "--to", "2026-01-02"
    )
    assert r.returncode == 1 and "404" in r.stderr


def test_with_auth_on_a_missing_token_fails_clearly_and_the_right_token_works(
    start_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    tokens = {}
    for name, scopes in (("writer", "sched:r,sched:w"), ("reader", "sched:r")):
        r = cli(
            "http://127.0.0.1:9",
            "token",
            "new",
            "--name",
            name,
            "--scopes",
            scopes,
            "--tenants",
            "acme",
            "--json",
        )
        tokens[name] = as_json(r)
    config = {"tokens": [t["entry"] for t in tokens.values()]}
    worker = start_worker(SCHEDULER_AUTH="on", SCHEDULER_AUTH_TOKENS=json.dumps(config))
    url, writer, reader = worker.url, tokens["writer"]["token"], tokens["reader"]["token"]

    r = cli(url, "schedules", "list")
    assert r.returncode == 1
    assert r.stderr.splitlines() == [
        "scheduler: GET /schedules: 401 invalid_request: missing Authorization: Bearer <token>",
        "  (pass --token or set SCHEDULER_TOKEN)",
    ]
    r = cli(url, "schedules", "list", "--token", "sch_not-a-token")
    assert r.returncode == 1 and "401 invalid_token: unknown token" in r.stderr

    body = {"tenant": "acme", "name": "authed", "trigger": {"type": "frequency", "timeUnit": "HOURS", "time": 1}, "topic": "acme-authed"}  # fmt: skip
    (tmp_path / "authed.json").write_text(json.dumps(body))
    r = cli(url, "schedules", "create", "-f", tmp_path / "authed.json", token=reader)
    assert r.returncode == 1 and "403 insufficient_scope: this token lacks scope sched:w" in r.stderr, (
        r.stderr
    )
    r = cli(url, "schedules", "create", "-f", tmp_path / "authed.json", token=writer)
    assert r.returncode == 0, r.stderr
    listed = until(
        lambda: cli(url, "schedules", "list", "--json", token=reader),
        lambda r: r.returncode == 0 and json.loads(r.stdout)["total"] == 1,
    )
    assert [s["key"] for s in json.loads(listed.stdout)["schedules"]] == ["acme/authed"]


async def test_every_applied_command_is_in_the_schedules_history_with_who_sent_it_and_rollback_puts_a_version_back(
    broker: Broker, start_worker: Callable[..., WorkerProcess], app_id: str, tmp_path: Path
) -> None:
    """Over HTTP the token's name, from the commands topic the producer's `scheduler-by` header, else
    "topic"; `schedules history` shows each version with what it changed; `rollback --to 1` PUTs version
    1's definition back over the current version."""
    from scheduler.domain.model import Action, ScheduleCommand, ScheduleKey
    from scheduler.wire.codec import encode_command, key_bytes
    from tests.helpers import produce

    token = as_json(cli("http://127.0.0.1:9", "token", "new", "--name", "deployer", "--scopes", "sched:r,sched:w", "--tenants", "acme", "--json"))  # fmt: skip
    worker = start_worker(SCHEDULER_AUTH="on", SCHEDULER_AUTH_TOKENS=json.dumps({"tokens": [token["entry"]]}))
    url, secret = worker.url, token["token"]
    hourly = {"tenant": "acme", "name": "audited", "trigger": {"type": "cron", "expression": "0 0 * * * *"}, "topic": "acme-audited", "enabled": True}  # fmt: skip
    (tmp_path / "v1.json").write_text(json.dumps(hourly))
    (tmp_path / "v2.json").write_text(
        json.dumps({**hourly, "trigger": {"type": "cron", "expression": "0 30 * * * *"}})
    )
    assert cli(url, "schedules", "create", "-f", tmp_path / "v1.json", token=secret).returncode == 0
    until(
        lambda: cli(url, "schedules", "get", "acme/audited", "--json", token=secret),
        lambda r: r.returncode == 0,
    )
    r = cli(url, "schedules", "update", "acme/audited", "-f", tmp_path / "v2.json", token=secret)
    assert r.returncode == 0, r.stderr
    key = ScheduleKey("acme", "audited")
    commands = f"{app_id}-commands"
    await produce(broker.bootstrap_servers, commands, [(key_bytes(key), encode_command(ScheduleCommand(key, Action.DISABLE)))], headers=[("scheduler-by", b"ops-script")])  # fmt: skip
    await produce(broker.bootstrap_servers, commands, [(key_bytes(key), encode_command(ScheduleCommand(key, Action.ENABLE)))])  # fmt: skip
    history = until(
        lambda: cli(url, "schedules", "history", "acme/audited", "--json", token=secret),
        lambda r: r.returncode == 0 and len(json.loads(r.stdout)["versions"]) == 4,
    )
    versions = json.loads(history.stdout)["versions"]
    assert [(v["version"], v["action"], v["by"]) for v in versions] == [
        (4, "ENABLE", "topic"),
        (3, "DISABLE", "ops-script"),
        (2, "UPDATE", "deployer"),
        (1, "INSERT", "deployer"),
    ]
    assert [v["changed"] for v in versions[:3]] == [["enabled"], ["enabled"], ["trigger"]]
    assert (
        "trigger" in versions[3]["changed"]
        and versions[3]["schedule"]["trigger"]["expression"] == "0 0 * * * *"
    )
    assert all(v["at"] > 0 for v in versions)
    table = cli(url, "schedules", "history", "acme/audited", token=secret)
    assert table.returncode == 0 and table.stdout.splitlines()[0].split() == [
        "VERSION",
        "AT",
        "(UTC)",
        "BY",
        "ACTION",
        "CHANGED",
    ]

    r = cli(url, "schedules", "rollback", "acme/audited", "--to", "1", token=secret)
    assert r.returncode == 0 and "back to the definition of version 1 (as version 5)" in r.stdout, r.stderr
    back = until(
        lambda: cli(url, "schedules", "get", "acme/audited", "--json", token=secret),
        lambda r: r.returncode == 0 and json.loads(r.stdout)["version"] == 5,
    )
    assert (
        json.loads(back.stdout)["trigger"]["expression"] == "0 0 * * * *"
        and json.loads(back.stdout)["enabled"]
    )
    r = cli(url, "schedules", "rollback", "acme/audited", "--to", "9", token=secret)
    assert r.returncode != 0 and "no version 9" in r.stderr
    r = cli(url, "schedules", "history", "acme/nothing", token=secret)
    assert r.returncode == 1 and "404" in r.stderr
