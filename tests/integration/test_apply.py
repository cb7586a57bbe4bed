"""Schedules as code end to end on a real broker, through the CLI: `scheduler apply` makes a worker hold
a directory's programs and schedules (a plan first, idempotent, --dry-run changes nothing, --prune
deletes only what no file holds and a selector matches, an operator's pause survives), refuses invalid
files whole, and `scheduler import crontab|cronjob` writes files it takes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.helpers import scheduler_cli

pytestmark = [pytest.mark.integration, pytest.mark.embedded, pytest.mark.timeout(180)]


def _schedule(tenant: str, name: str, expression: str = "0 3 * * *", **fields: Any) -> dict[str, Any]:
    return {"tenant": tenant, "name": name, "trigger": {"type": "cron", "expression": expression},
            "topic": "apply-out", **fields}  # fmt: skip


def _write(path: Path, doc: Any) -> None:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_apply_makes_the_scheduler_hold_a_directory_and_a_second_apply_changes_nothing(
    shared_worker, tenant, tmp_path
):
    url = shared_worker.url
    program = f"{tenant}/etl/command/pull"
    defs = tmp_path / "defs"
    (defs / "team").mkdir(parents=True)
    _write(defs / "programs.yaml", {"programs": {program: {"kind": "command", "argv": ["true"]}}})
    _write(defs / "team" / "schedules.yaml", {"schedules": [
        _schedule(tenant, "hourly"),
        {"tenant": tenant, "name": "etl", "program": program, "enabled": True,
         "trigger": {"type": "cron", "expression": "0 2 * * *", "timezone": "Europe/Paris"}},
        _schedule(tenant, "old-ops", labels={"team": "ops"}),
        _schedule(tenant, "old-data", labels={"team": "data"}),
    ]})  # fmt: skip

    def apply(*args: str) -> subprocess.CompletedProcess[str]:
        return scheduler_cli(url, "apply", "-f", str(defs), *args)

    def held(name: str) -> dict[str, Any]:
        answer = httpx.get(f"{url}/schedules/{tenant}/{name}", timeout=30)
        return answer.json() if answer.status_code == 200 else {"status": answer.status_code}

    first = apply()
    assert first.returncode == 0, first.stdout + first.stderr
    for line in (f"* register program {program}", f"+ create {tenant}/hourly", f"+ create {tenant}/etl",
                 "plan: 4 to create, 1 to register", "applied: 4 created, 1 registered"):  # fmt: skip
        assert line in first.stdout, first.stdout
    assert held("etl")["program"] == program and held("etl")["enabled"] is True
    assert {held(n)["version"] for n in ("hourly", "etl", "old-ops", "old-data")} == {1}

    again = apply()
    assert again.returncode == 0 and again.stdout.strip() == "plan: 5 unchanged", again.stdout + again.stderr
    assert held("hourly")["version"] == 1  # (nothing was written)

    paused = scheduler_cli(url, "schedules", "disable", f"{tenant}/etl", "--note", "incident 7")
    assert paused.returncode == 0, paused.stderr
    _write(defs / "team" / "schedules.yaml", {"schedules": [
        _schedule(tenant, "hourly", "0 4 * * *"),
        {"tenant": tenant, "name": "etl", "program": program, "enabled": True,
         "trigger": {"type": "cron", "expression": "0 2 * * *", "timezone": "Europe/Paris"}},
        _schedule(tenant, "added"),
    ]})  # fmt: skip
    dry = apply("--prune", "--selector", "team=ops", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    for line in (f"~ update {tenant}/hourly (over version 1)", '    trigger.expression: "0 3 * * *" -> "0 4 * * *"',
                 f"+ create {tenant}/added", f"- delete {tenant}/old-ops (over version 1)",
                 "note: paused by ", "(incident 7): left paused", "(dry run: nothing sent)"):  # fmt: skip
        assert line in dry.stdout, dry.stdout
    assert f"{tenant}/old-data" not in dry.stdout  # (not matched by the selector: kept)
    assert held("hourly")["trigger"]["expression"] == "0 3 * * *" and held("added") == {"status": 404}

    planned = scheduler_cli(url, "apply", "-f", str(defs), "--prune", "--dry-run", "--json")
    verbs = {(c["verb"], c["key"]) for c in json.loads(planned.stdout)["plan"]}
    assert ("delete", f"{tenant}/old-data") in verbs and ("delete", f"{tenant}/old-ops") in verbs, verbs

    done = apply("--prune", "--selector", "team=ops")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "applied: 1 created, 1 deleted, 1 updated" in done.stdout, done.stdout
    assert held("hourly")["trigger"]["expression"] == "0 4 * * *" and held("hourly")["version"] == 2
    assert held("old-ops") == {"status": 404} and held("old-data")["version"] == 1
    etl = held("etl")
    assert etl["enabled"] is False and etl["paused"]["note"] == "incident 7", etl  # (the pause survives)
    last = apply("--prune", "--selector", "team=ops")
    assert last.returncode == 0 and "to create" not in last.stdout and "to update" not in last.stdout, (
        last.stdout
    )


def test_apply_refuses_invalid_files_whole_and_imports_become_what_it_applies(
    shared_worker, tenant, tmp_path
):
    url = shared_worker.url
    bad = tmp_path / "bad.yaml"
    _write(bad, [_schedule(tenant, "fine"), _schedule(tenant, "broken", "61 * * * *")])
    refused = scheduler_cli(url, "apply", "-f", str(bad))
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert f"bad.yaml: {tenant}/broken: trigger" in refused.stdout and "nothing applied" in refused.stdout
    assert httpx.get(f"{url}/schedules/{tenant}/fine", timeout=30).status_code == 404
    orphan = tmp_path / "orphan.yaml"  # (valid, but the scheduler refuses it: it says which field and why)
    _write(orphan, [_schedule(tenant, "orphan", program=f"{tenant}/nowhere/sh/missing")])
    failed = scheduler_cli(url, "apply", "-f", str(orphan))
    assert failed.returncode == 1 and "1 failed" in failed.stdout, failed.stdout + failed.stderr
    assert f"create {tenant}/orphan failed: POST /schedules: 400" in failed.stderr, failed.stderr
    assert f"  program: unknown program {tenant}/nowhere/sh/missing" in failed.stderr, failed.stderr

    crontab = tmp_path / "crontab"
    crontab.write_text("CRON_TZ=Europe/Paris\n*/5 * * * * echo hello\n@reboot /opt/start.sh\n")
    imported = tmp_path / "imported.yaml"
    made = scheduler_cli(url, "import", "crontab", str(crontab), "--tenant", tenant, "-o", str(imported))
    assert made.returncode == 0, made.stderr
    assert "@reboot: not mapped" in made.stderr and "1 schedule and 1 program" in made.stderr
    applied = scheduler_cli(url, "apply", "-f", str(imported))
    assert applied.returncode == 0 and "applied: 1 created, 1 registered" in applied.stdout, applied.stdout
    [schedule] = yaml.safe_load(imported.read_text())["schedules"]
    answer = httpx.get(f"{url}/schedules/{tenant}/{schedule['name']}", timeout=30).json()
    assert answer["trigger"] == {"type": "cron", "expression": "*/5 * * * *", "timezone": "Europe/Paris"}
    program = httpx.get(f"{url}/programs/{answer['program']}", timeout=30).json()
    assert program["argv"] == ["/bin/sh", "-c", "echo hello"]
    assert scheduler_cli(url, "apply", "-f", str(imported)).stdout.strip() == "plan: 2 unchanged"

    manifest = tmp_path / "cronjob.yaml"
    _write(manifest, {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly"},
                      "spec": {"schedule": "30 1 * * *", "concurrencyPolicy": "Forbid", "jobTemplate": {"spec": {
                          "template": {"spec": {"containers": [{"name": "c", "command": ["date"]}]}}}}}})  # fmt: skip
    made = scheduler_cli(url, "import", "cronjob", str(manifest), "--tenant", tenant, "-o", str(imported))
    assert made.returncode == 0, made.stderr
    applied = scheduler_cli(url, "apply", "-f", str(imported))
    assert applied.returncode == 0, applied.stdout + applied.stderr
    nightly = httpx.get(f"{url}/schedules/{tenant}/nightly", timeout=30).json()
    assert (
        nightly["overlap"] == "SKIP"
        and nightly["enabled"] is True
        and nightly["labels"]["imported-from"] == "cronjob"
    )

    from tests.unit.test_apply import _apscheduler_store  # (an APScheduler 3 SQLAlchemy job store, SQLite)

    aps = f"{tenant}-aps"
    store = _apscheduler_store(tmp_path / "jobs.sqlite")
    made = scheduler_cli(url, "import", "apscheduler", store, "--tenant", aps, "-o", str(imported))
    assert made.returncode == 0 and "1 not mapped" in made.stderr, made.stderr
    applied = scheduler_cli(url, "apply", "-f", str(imported))
    assert applied.returncode == 0 and "applied: 3 created, 1 registered" in applied.stdout, applied.stdout
    nightly = httpx.get(f"{url}/schedules/{aps}/nightly", timeout=30).json()
    assert nightly["trigger"] == {
        "type": "cron",
        "expression": "0 */15 3 * * mon-fri",
        "timezone": "Europe/Paris",
    }
    assert nightly["overlap"] == "SKIP" and nightly["data"] == {"day": "today"}, nightly
    assert scheduler_cli(url, "apply", "-f", str(imported)).stdout.strip() == "plan: 4 unchanged"


JOBS = '''
import json, os, pathlib

from scheduler.client.code import after, on_partitions, schedule

OUT = pathlib.Path(os.environ.get("JOBS_OUT", "."))  # (where the launcher runs it: the test's folder)

@schedule(tenant="{tenant}", cron="0 3 1 1 *")
def nightly(args):
    """Pull the night's files."""
    (OUT / "nightly.json").write_text(json.dumps(args))
    return "pulled " + args.get("day", "?")

@after(nightly, tenant="{tenant}")
def report(args):
    (OUT / "report.json").write_text(json.dumps({{"after": os.environ["SCHEDULER_SCHEDULE"]}}))

@on_partitions("{tenant}.landing", tenant="{tenant}", min_partitions=2)
def landed(args):
    pass
'''


def test_decorated_functions_are_applied_and_run_by_the_launchers_python_one_after_the_other(
    start_worker, tenant, tmp_path
):
    """`@schedule` and `@after` in a module: `apply --module` registers its functions as `python`
    programs with their schedules; a run of the first (asked with `schedules run --arg`) calls the function
    with the arguments in the launcher's Python, and its SUCCEEDED fires the second."""
    import os
    import sys
    import time

    code = tmp_path / "code"
    code.mkdir()
    (code / f"jobs_{tenant}.py").write_text(JOBS.format(tenant=tenant))
    worker = start_worker(SCHEDULER_LAUNCHER="embedded", PYTHONPATH=str(code), JOBS_OUT=str(tmp_path))
    env = {**os.environ, "SCHEDULER_URL": worker.url}
    applied = subprocess.run([sys.executable, "-m", "scheduler", "apply", "--module", f"jobs_{tenant}"],
                             cwd=code, env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "applied: 3 created, 3 registered" in applied.stdout, applied.stdout
    landed = httpx.get(f"{worker.url}/schedules/{tenant}/landed", timeout=30).json()
    assert landed["trigger"] == {"type": "partition", "dataset": f"{tenant}.landing", "minPartitions": 2}, (
        landed
    )
    program = httpx.get(f"{worker.url}/programs/{tenant}/jobs-{tenant}/python/nightly", timeout=30).json()
    assert program == {**program, "kind": "python", "target": f"jobs_{tenant}:nightly"}, program
    ran = scheduler_cli(worker.url, "schedules", "run", f"{tenant}/nightly", "--arg", "day=2026-11-29")
    assert ran.returncode == 0, ran.stderr
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not (tmp_path / "report.json").exists():
        time.sleep(0.3)
    called_with = json.loads((tmp_path / "nightly.json").read_text())
    assert called_with["day"] == "2026-11-29", (
        called_with,
        worker.log_tail(),
    )  # (and the job's own arguments)
    assert json.loads((tmp_path / "report.json").read_text()) == {"after": f"{tenant}/report"}
    runs = httpx.get(f"{worker.url}/programs/{tenant}/jobs-{tenant}/python/nightly/runs", timeout=30).json()
    assert [r["status"] for r in runs["runs"]] == ["COMPLETED"], runs
    again = subprocess.run([sys.executable, "-m", "scheduler", "apply", "--module", f"jobs_{tenant}"],
                           cwd=code, env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert again.returncode == 0 and again.stdout.strip() == "plan: 6 unchanged", again.stdout + again.stderr


async def test_a_plan_made_before_someone_else_changed_a_schedule_is_refused_for_it_and_the_change_kept(
    shared_worker, tenant, tmp_path
):
    """`apply` writes each update and delete over the version its plan saw (If-Match): a schedule changed
    between the plan and the write answers 412, reported as failed; the other change goes through, and a
    new plan sees the change."""
    from scheduler.cli.plans import apply_plan, plan, read_current, read_sources
    from scheduler.client.http import HttpClient

    url = shared_worker.url
    path = tmp_path / "schedules.yaml"
    _write(path, [_schedule(tenant, "a"), _schedule(tenant, "b")])
    assert scheduler_cli(url, "apply", "-f", str(path)).returncode == 0
    _write(path, [_schedule(tenant, "a", "0 4 * * *"), _schedule(tenant, "b", "0 5 * * *")])
    sources = read_sources([str(path)])
    async with HttpClient(url) as client:
        changes = plan(sources, *await read_current(client, sources.tenants, sources.programs))
        assert [(c.verb, c.key, c.version) for c in changes] == [
            ("update", f"{tenant}/a", 1), ("update", f"{tenant}/b", 1)]  # fmt: skip
        theirs = {k: v for k, v in _schedule(tenant, "b", "0 6 * * *").items() if k not in ("tenant", "name")}
        await client.update(tenant, "b", theirs)  # (someone else's change, after the plan: version 2)
        outcome = await apply_plan(client, changes)
        assert outcome.done == {"update": 1}
        assert [(c.key, e.status) for c, e in outcome.failed] == [(f"{tenant}/b", 412)], outcome.failed
        b = await client.request("GET", f"/schedules/{tenant}/b")
        assert (b["version"], b["trigger"]["expression"]) == (2, "0 6 * * *")  # (theirs is kept)
        assert (await client.request("GET", f"/schedules/{tenant}/a"))["trigger"]["expression"] == "0 4 * * *"
    again = scheduler_cli(url, "apply", "-f", str(path), "--dry-run")
    assert f"~ update {tenant}/b (over version 2)" in again.stdout, again.stdout
