"""Schedules as code (scheduler/cli/plans.py) and the importers (scheduler/client/importers.py): the
files read, the plan against what a scheduler holds, crontab lines and CronJob manifests mapped."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.cli.plans import SourceError, Sources, canonical, invalid, plan, read_sources
from scheduler.client.importers import from_cronjobs, from_crontab
from scheduler.domain.model import Paused, ScheduleKey, ScheduleState
from scheduler.http.api import ScheduleIn, schedule_json

pytestmark = pytest.mark.unit

PROGRAM = "acme/etl/command/pull"


def _item(name: str, **fields: Any) -> dict[str, Any]:
    return {"tenant": "acme", "name": name, "trigger": {"type": "cron", "expression": "0 3 * * *"},
            "topic": "out", **fields}  # fmt: skip


def _held(item: dict[str, Any], version: int = 3, paused: Paused | None = None) -> dict[str, Any]:
    """What GET /schedules answers for the definition `item` once a server holds it."""
    body = ScheduleIn.model_validate(item)
    schedule = body.to_schedule(ScheduleKey(body.tenant, body.name))
    if schedule.program is not None and not schedule.topic:
        schedule = replace(schedule, topic="app-launches")
    return schedule_json(ScheduleState(schedule, 1, 2, 1, version, paused), 123)


def _sources(*items: dict[str, Any], programs: dict[str, Any] | None = None) -> Sources:
    sources = Sources(programs=dict(programs or {}))
    for item in items:
        key = f"{item['tenant']}/{item['name']}"
        sources.schedules[key] = item
        sources.origin[key] = "f.yaml"
    return sources


def test_files_of_a_directory_are_read_programs_and_schedules_and_a_key_held_twice_is_refused(tmp_path):
    (tmp_path / "team").mkdir()
    (tmp_path / "team" / "a.yaml").write_text(
        yaml.safe_dump(
            {
                "programs": {PROGRAM: {"kind": "command", "argv": ["true"]}},
                "schedules": [_item("a", program=PROGRAM, topic=None)],
            }
        )  # fmt: skip
    )
    (tmp_path / "b.json").write_text('[{"tenant": "acme", "name": "b", "topic": "t", '
                                     '"trigger": {"type": "cron", "expression": "* * * * *"}}]')  # fmt: skip
    (tmp_path / "empty.yml").write_text("")
    (tmp_path / "notes.txt").write_text("not read")
    sources = read_sources([str(tmp_path)])
    assert set(sources.schedules) == {"acme/a", "acme/b"} and set(sources.programs) == {PROGRAM}
    assert sources.origin["acme/b"].endswith("b.json") and sources.tenants == {"acme"}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(_item("a")))
    with pytest.raises(SourceError, match=r"schedule acme/a is in .*c\.yaml and in .*a\.yaml"):
        read_sources([str(tmp_path)])
    with pytest.raises(SourceError, match="no such file"):
        read_sources([str(tmp_path / "missing")])


def test_a_plan_creates_the_new_updates_the_changed_leaves_the_equal_and_prunes_only_when_asked():
    equal = _item("equal")  # (written with its defaults left out; the server spells them out)
    changed = _item("changed", trigger={"type": "cron", "expression": "0 4 * * *"}, labels={"team": "data"})
    current = {
        "acme/equal": _held(equal),
        "acme/changed": _held(_item("changed", labels={"team": "data"})),
        "acme/gone": _held(_item("gone", labels={"team": "ops"})),
        "acme/other": _held(_item("other", labels={"team": "data"})),
    }
    sources = _sources(_item("new"), equal, changed)
    changes = {c.key: c for c in plan(sources, current, {})}
    assert {k: c.verb for k, c in changes.items()} == {
        "acme/new": "create", "acme/equal": "unchanged", "acme/changed": "update"}  # fmt: skip
    update = changes["acme/changed"]
    assert update.version == 3 and update.diff == ('trigger.expression: "0 3 * * *" -> "0 4 * * *"',)
    assert update.body is not None and "tenant" not in update.body
    assert update.body["trigger"]["expression"] == "0 4 * * *"
    pruned = {c.key: c.verb for c in plan(sources, current, {}, prune=True) if c.verb == "delete"}
    assert pruned == {"acme/gone": "delete", "acme/other": "delete"}
    chosen = {
        c.key for c in plan(sources, current, {}, prune=True, selector="team=ops") if c.verb == "delete"
    }
    assert chosen == {"acme/gone"}


def test_a_plan_applied_then_read_back_is_empty_a_programs_launch_topic_needs_no_spelling():
    item = _item("p", program=PROGRAM, enabled=True)
    del item["topic"]  # (the server fills in its launch topic)
    spec = {"kind": "command", "argv": ["true"]}
    changes = plan(_sources(item, programs={PROGRAM: spec}), {"acme/p": _held(item)}, {PROGRAM: spec})
    assert [(c.verb, c.what) for c in changes] == [("unchanged", "program"), ("unchanged", "schedule")]
    moved = {**spec, "argv": ["false"]}
    [program, _] = plan(_sources(item, programs={PROGRAM: moved}), {"acme/p": _held(item)}, {PROGRAM: spec})
    assert program.verb == "register" and program.diff == ('argv: ["true"] -> ["false"]',)
    [program, _] = plan(_sources(item, programs={PROGRAM: spec}), {"acme/p": _held(item)}, {PROGRAM: None})
    assert program.verb == "register" and program.diff == ()


def test_a_schedule_an_operator_paused_stays_paused_whatever_its_file_says():
    item = _item("paused", enabled=True)
    held = _held({**item, "enabled": False}, paused=Paused(5, "incident 42", "alice", None))
    [change] = plan(_sources(item), {"acme/paused": held}, {})
    assert change.verb == "unchanged" and "paused by alice (incident 42)" in str(change.note)
    [change] = plan(_sources({**item, "description": "new"}), {"acme/paused": held}, {})
    assert change.verb == "update" and change.body is not None and change.body["enabled"] is False
    not_paused = _held({**item, "enabled": False})
    [change] = plan(_sources(item), {"acme/paused": not_paused}, {})
    assert change.verb == "update" and change.diff == ("enabled: false -> true",)


def test_invalid_definitions_are_named_with_their_file_and_nothing_else_is_judged():
    bad = _item("bad", trigger={"type": "cron", "expression": "61 * * * *"})
    sources = _sources(bad, _item("good"), programs={"x/y": {"kind": "command"}})
    sources.origin["x/y"] = "p.yaml"
    problems = invalid(sources)
    assert any(p.startswith("f.yaml: acme/bad: trigger") for p in problems), problems
    assert any(
        p.startswith("p.yaml: program x/y: ") and "namespace/application/type/name" in p for p in problems
    )
    assert any(p.startswith("p.yaml: program x/y: argv") for p in problems), problems
    assert not any("acme/good" in p for p in problems)


def test_canonical_spells_out_defaults():
    assert canonical(_item("a")) == canonical({**_item("a"), "catchUp": "COALESCE", "priority": 0})


CRONTAB = r"""
# nightly jobs
SHELL=/bin/bash
PATH=/usr/bin:/bin
MAILTO=ops@example.com
0 3 * * * /opt/backup/run.sh --full
CRON_TZ=Europe/Paris
*/15 * * * 1-5 python3 /srv/sync.py
@daily date +\%F%some input
@reboot /opt/start.sh
0 3 * * * /opt/backup/run.sh --full
not a line
"""


def test_a_crontab_becomes_programs_and_schedules_with_what_cannot_map_reported():
    imported = from_crontab(CRONTAB, "acme")
    names = [s["name"] for s in imported.schedules]
    assert len(names) == 4 and names[0].startswith("run-sh-") and names[3] == f"{names[0]}-2", names
    first, sync, daily, _ = imported.schedules
    assert first["trigger"] == {"type": "cron", "expression": "0 3 * * *", "timezone": "UTC"}
    assert sync["trigger"]["timezone"] == "Europe/Paris" and daily["trigger"]["expression"] == "0 0 * * *"
    assert first["catchUp"] == "SKIP" and first["enabled"] is True  # (cron runs nothing it missed)
    program = imported.programs[first["program"]]
    assert program["argv"] == ["/bin/bash", "-c", "/opt/backup/run.sh --full"]
    assert program["env"] == {"PATH": "/usr/bin:/bin"}
    assert imported.programs[daily["program"]]["argv"][-1] == "date +%F"
    report = "\n".join(imported.report)
    for said in ("MAILTO=ops@example.com: not mapped", "@reboot: not mapped", "standard input) is dropped",
                 "line 12: not five time fields"):  # fmt: skip
        assert said in report, report
    assert imported.skipped == 2
    reordered = from_crontab("\n".join(reversed(CRONTAB.strip().splitlines())), "acme")
    assert {s["name"] for s in reordered.schedules} >= {names[1]}  # (a name is its command's, not its line's)
    assert invalid(_imported_sources(imported)) == []


def test_a_system_crontabs_user_field_is_reported_not_run():
    [schedule] = from_crontab(
        "5 4 * * sun root /usr/sbin/logrotate /etc/logrotate.conf\n", "ops", system=True
    ).schedules
    assert schedule["name"].startswith("logrotate-")
    imported = from_crontab("5 4 * * sun root /usr/sbin/logrotate /etc/logrotate.conf\n", "ops", system=True)
    assert imported.programs[schedule["program"]]["argv"][-1] == "/usr/sbin/logrotate /etc/logrotate.conf"
    assert "user root: runs as the launcher's user" in imported.report[0]


CRONJOB = """
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly-report, namespace: analytics, labels: {team: data, app.kubernetes.io/name: r}}
spec:
  schedule: "30 2 * * *"
  timeZone: America/New_York
  concurrencyPolicy: Replace
  startingDeadlineSeconds: 600
  suspend: true
  successfulJobsHistoryLimit: 3
  jobTemplate:
    spec:
      backoffLimit: 2
      activeDeadlineSeconds: 3600
      template:
        spec:
          containers:
          - name: report
            image: registry.example.com/report:1.4
            command: [python, -m, report]
            args: [--date, yesterday]
            env:
            - {name: MODE, value: full}
            - {name: PASSWORD, valueFrom: {secretKeyRef: {name: db, key: password}}}
---
apiVersion: v1
kind: List
items:
- apiVersion: batch/v1
  kind: CronJob
  metadata: {name: hourly}
  spec:
    schedule: "@hourly"
    jobTemplate: {spec: {template: {spec: {containers: [{name: c, image: busybox, command: [date]}]}}}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}
"""


def test_cronjob_manifests_map_their_schedule_policy_deadlines_and_report_the_rest():
    imported = from_cronjobs(list(yaml.safe_load_all(CRONJOB)))
    report, hourly = imported.schedules
    assert (
        report["tenant"] == "analytics" and report["name"] == "nightly-report" and report["enabled"] is False
    )
    assert report["trigger"] == {"type": "cron", "expression": "30 2 * * *", "timezone": "America/New_York"}
    assert report["overlap"] == "CANCEL_OTHER" and report["catchUpWindowMs"] == 600_000
    assert report["timeLimitMs"] == 3_600_000 and report["retry"] == {"maxAttempts": 3}
    assert report["labels"] == {"team": "data", "imported-from": "cronjob"}
    program = imported.programs[report["program"]]
    assert program["argv"] == ["python", "-m", "report", "--date", "yesterday"] and program["env"] == {
        "MODE": "full"
    }
    assert hourly["tenant"] == "default" and hourly["trigger"]["expression"] == "0 * * * *"
    assert hourly["overlap"] == "ALLOW_ALL" and hourly["enabled"] is True
    text = "\n".join(imported.report)
    for said in ("image registry.example.com/report:1.4", "env PASSWORD: from a secret", "app.kubernetes.io/name",
                 "successfulJobsHistoryLimit: not mapped", "ConfigMap: not a CronJob"):  # fmt: skip
        assert said in text, text
    assert from_cronjobs([yaml.safe_load(CRONJOB.split("---")[0])], "acme").schedules[0]["tenant"] == "acme"
    assert invalid(_imported_sources(imported)) == []


def _imported_sources(imported: Any) -> Sources:
    sources = _sources(*imported.schedules, programs=imported.programs)
    sources.origin.update(dict.fromkeys(imported.programs, "imported.yaml"))
    return sources


def test_an_imported_file_is_read_back_by_apply(tmp_path: Path):
    path = tmp_path / "crontab.yaml"
    path.write_text(yaml.safe_dump(from_crontab(CRONTAB, "acme").document()))
    sources = read_sources([str(path)])
    assert len(sources.schedules) == 4 and len(sources.programs) == 4


JOBS_MODULE = '''
from scheduler.client.code import after, on_partitions, schedule

@schedule(tenant="acme", cron="0 3 * * *", tz="Europe/Paris", overlap="SKIP")
def nightly(args):
    """Pull the night's files."""
    return "pulled"

@schedule(tenant="acme", every="15m")
@on_partitions("acme.clicks", tenant="acme", min_partitions=4)
def refresh(args):
    return None

@after(nightly, tenant="acme", name="report-after-nightly")
def report(args):
    return None

@schedule(tenant="acme", cron="0 * * * *", spark=True)
def hourly_etl(spark, args):
    return None

def plain(args):
    return None
'''


def test_decorated_functions_declare_programs_and_schedules_that_apply_reads(tmp_path, monkeypatch):
    (tmp_path / "team_jobs.py").write_text(JOBS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sources = read_sources([], ["team_jobs"])
    assert set(sources.programs) == {
        "acme/team-jobs/python/nightly", "acme/team-jobs/python/refresh", "acme/team-jobs/python/report",
        "acme/team-jobs/pyspark/hourly_etl"}  # fmt: skip
    assert sources.programs["acme/team-jobs/python/nightly"] == {
        "kind": "python", "target": "team_jobs:nightly", "description": "Pull the night's files."}  # fmt: skip
    assert sources.programs["acme/team-jobs/pyspark/hourly_etl"]["kind"] == "pyspark"
    schedules = sources.schedules
    assert set(schedules) == {"acme/nightly", "acme/refresh", "acme/refresh-partition", "acme/report-after-nightly",
                              "acme/hourly-etl"}  # fmt: skip
    assert schedules["acme/nightly"]["trigger"] == {"type": "cron", "expression": "0 3 * * *",
                                                    "timezone": "Europe/Paris"}  # fmt: skip
    assert schedules["acme/nightly"]["overlap"] == "SKIP" and schedules["acme/nightly"]["enabled"] is True
    assert schedules["acme/refresh"]["trigger"] == {"type": "frequency", "timeUnit": "MINUTES", "time": 15}
    assert schedules["acme/refresh-partition"]["trigger"]["minPartitions"] == 4
    assert schedules["acme/report-after-nightly"]["trigger"] == {
        "type": "programStatus", "program": "acme/team-jobs/python/nightly", "on": ["SUCCEEDED"]}  # fmt: skip
    assert sources.origin["acme/nightly"] == "team_jobs:nightly"
    assert invalid(sources) == []


def test_a_decorator_that_says_too_little_or_too_much_is_refused():
    from scheduler.client.code import every_trigger, schedule

    with pytest.raises(ValueError, match="one of cron= and every="):
        schedule(tenant="acme")
    with pytest.raises(ValueError, match="every='15 minutes'"):
        every_trigger("15 minutes")
    assert every_trigger("30s") == {"type": "frequency", "timeUnit": "SECONDS", "time": 30}


def test_the_python_runner_calls_the_function_with_the_jobs_arguments(tmp_path):
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "runme.py").write_text("def go(args):\n    return 'got ' + args['day']\n"
                                       "def boom(args):\n    raise RuntimeError('no ' + args['day'])\n")  # fmt: skip
    env = {**os.environ, "SCHEDULER_ARGS": json.dumps({"day": "2026-11-29"}), "PYTHONPATH": str(tmp_path)}
    run = [sys.executable, "-m", "scheduler.launcher.python_runner"]
    ok = subprocess.run([*run, "runme:go"], env=env, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout.strip() == "got 2026-11-29", ok.stderr
    failed = subprocess.run([*run, "runme:boom"], env=env, capture_output=True, text=True, timeout=60)
    assert failed.returncode == 1 and "RuntimeError: no 2026-11-29" in failed.stderr
    assert subprocess.run([*run, "runme"], env=env, capture_output=True, timeout=60).returncode == 2


def aps_job(*args: Any, **kwargs: Any) -> None:
    """What the APScheduler jobs below run."""


def _apscheduler_store(path: Path) -> str:
    """A SQLite job store as APScheduler's SQLAlchemyJobStore writes it: each job's pickled state."""
    import pickle
    import sqlite3
    from datetime import UTC, datetime, timedelta

    from apscheduler.job import Job
    from apscheduler.schedulers.background import BackgroundScheduler
    from apscheduler.triggers.cron import CronTrigger
    from apscheduler.triggers.date import DateTrigger
    from apscheduler.triggers.interval import IntervalTrigger

    start = datetime(2026, 12, 1, tzinfo=UTC)
    jobs = [
        (
            "nightly",
            "tests.unit.test_apply:aps_job",
            CronTrigger(day_of_week="0-4", hour=3, minute="*/15", timezone="Europe/Paris", jitter=30),
            {"kwargs": {"day": "today"}, "max_instances": 1},
        ),  # fmt: skip
        (
            "every-90m",
            "tests.unit.test_apply:aps_job",
            IntervalTrigger(minutes=90, start_date=start),
            {"coalesce": False, "max_instances": 3},
        ),  # fmt: skip
        (
            "once",
            "tests.unit.test_apply:aps_job",
            DateTrigger(run_date=start + timedelta(days=1)),
            {"misfire_grace_time": 60},
        ),
        ("weekly-2026", "tests.unit.test_apply:aps_job", CronTrigger(year=2026, hour=1), {}),
    ]
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE apscheduler_jobs (id VARCHAR(191) PRIMARY KEY, next_run_time FLOAT, job_state BLOB)"
    )
    for i, (job_id, func, trigger, extra) in enumerate(jobs):
        options = {"executor": "default", "misfire_grace_time": None, "coalesce": True, "max_instances": 1,
                   "next_run_time": start, "args": (), "kwargs": {}, "name": job_id, **extra}  # fmt: skip
        job = Job(BackgroundScheduler(timezone=UTC), id=job_id, func=func, trigger=trigger, **options)
        db.execute("INSERT INTO apscheduler_jobs VALUES (?, ?, ?)",
                   (job_id, float(i), pickle.dumps(job.__getstate__(), pickle.HIGHEST_PROTOCOL)))  # fmt: skip
    db.commit()
    db.close()
    return f"sqlite:///{path}"


def test_an_apscheduler_job_store_becomes_python_programs_and_schedules(tmp_path):
    from scheduler.client.importers import apscheduler_states, from_apscheduler

    imported = from_apscheduler(apscheduler_states(_apscheduler_store(tmp_path / "jobs.sqlite")), "acme")
    nightly, every, once = imported.schedules
    assert nightly["trigger"] == {
        "type": "cron",
        "expression": "0 */15 3 * * mon-fri",
        "timezone": "Europe/Paris",
    }
    assert (
        nightly["overlap"] == "SKIP" and nightly["jitterMs"] == 30_000 and nightly["data"] == {"day": "today"}
    )
    assert imported.programs[nightly["program"]] == {"kind": "python", "target": "tests.unit.test_apply:aps_job",
                                                     "description": "from APScheduler: tests.unit.test_apply:aps_job"}  # fmt: skip
    assert every["trigger"] == {
        "type": "frequency",
        "timeUnit": "MINUTES",
        "time": 90,
        "start": 1_796_083_200_000,
    }
    assert every["catchUp"] == "EACH" and "overlap" not in every
    assert once["trigger"] == {"type": "once", "at": 1_796_169_600_000} and once["catchUpWindowMs"] == 60_000
    report = "\n".join(imported.report)
    assert "job weekly-2026: year=2026 week=*: no such cron fields here; not mapped" in report, report
    assert "called as function(args)" in report and imported.skipped == 1
    assert invalid(_imported_sources(imported)) == []


def test_the_import_command_writes_what_apply_reads_and_says_what_it_could_not(tmp_path):
    import subprocess
    import sys

    url = _apscheduler_store(tmp_path / "jobs.sqlite")
    out = tmp_path / "aps.yaml"
    run = [
        sys.executable,
        "-m",
        "scheduler",
        "import",
        "apscheduler",
        url,
        "--tenant",
        "acme",
        "-o",
        str(out),
    ]
    done = subprocess.run(run, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "3 schedules and 1 program " in done.stderr and "1 not mapped" in done.stderr
    assert len(read_sources([str(out)]).schedules) == 3
    bad = subprocess.run([*run[:5], "sqlite:///nowhere/x.sqlite", "--tenant", "acme"], capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert bad.returncode == 2 and "cannot read its APScheduler jobs" in bad.stderr


SENSOR_MODULE = '''
from scheduler.client.code import on_sensor, sensor


@sensor(tenant="acme", every="1m", time_limit="20s")
def new_exports(cursor):
    """New exports."""
    return {"runKeys": ["x"], "cursor": "x"}


@on_sensor(new_exports, tenant="acme")
def load_exports(args):
    return None


@on_sensor("acme/other/sensor/ready", tenant="acme", name="when-ready")
def load_ready(args):
    return None
'''


def test_a_sensor_decorator_declares_a_sensor_program_and_on_sensor_schedules_fire_on_it(
    tmp_path, monkeypatch
):
    (tmp_path / "team_sensors.py").write_text(SENSOR_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sources = read_sources([], ["team_sensors"])
    assert sources.programs["acme/team-sensors/sensor/new_exports"] == {
        "kind": "sensor", "target": "team_sensors:new_exports", "intervalMs": 60_000, "timeLimitMs": 20_000,
        "description": "New exports."}  # fmt: skip
    assert sources.schedules["acme/load-exports"]["trigger"] == {
        "type": "sensor", "sensor": "acme/team-sensors/sensor/new_exports"}  # fmt: skip
    assert sources.schedules["acme/load-exports"]["program"] == "acme/team-sensors/python/load_exports"
    assert sources.schedules["acme/when-ready"]["trigger"]["sensor"] == "acme/other/sensor/ready"
    assert invalid(sources) == []
