"""Secrets end to end on a real broker: a program's env names a secret (`{"secretRef": "tenant/name"}`),
the embedded launcher resolves it from its secrets directory at launch and the program gets the value;
then every record of every topic of the app, every HTTP answer about the program and its runs, and the
worker's log are read, and the value is in none of them (the run printed it: its kept output is masked).
A secret no store holds fails the run naming the reference; one of another tenant is refused at PUT."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import httpx
import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from tests.helpers import Api, scheduler_cli, started_consumer

pytestmark = [pytest.mark.integration, pytest.mark.embedded, pytest.mark.timeout(180)]

SECRET = "s3cr3t-ZQX-7781-never-shown"


async def _every_record_of(bootstrap: str, app_id: str) -> tuple[list[str], bytes]:
    """The app's topics, and all their records' keys, values and headers, one after the other."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        topics = sorted(t for t in await admin.list_topics() if t.startswith(f"{app_id}-"))
    finally:
        await admin.close()
    consumer = await started_consumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                      isolation_level="read_uncommitted")  # fmt: skip
    seen = bytearray()
    try:
        partitions = [
            TopicPartition(t, p) for t in topics for p in (consumer.partitions_for_topic(t) or set())
        ]
        if not partitions:
            for t in topics:  # (metadata not loaded yet for these topics)
                await consumer._client.force_metadata_update()  # noqa: SLF001
                partitions += [TopicPartition(t, p) for p in (consumer.partitions_for_topic(t) or set())]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        left = {tp for tp, end in ends.items() if end > 0}
        deadline = time.monotonic() + 60
        while left and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for tp, records in batch.items():
                for r in records:
                    seen += (r.key or b"") + (r.value or b"") + b"".join(k.encode() + v for k, v in r.headers)
                if await consumer.position(tp) >= ends[tp]:
                    left.discard(tp)
        assert not left, f"could not read to the end of {sorted(map(str, left))}"
    finally:
        await consumer.stop()
    return topics, bytes(seen)


async def test_a_programs_secret_reaches_it_and_no_topic_answer_or_log(
    broker, start_worker, app_id, tmp_path: Path
):
    store = tmp_path / "secrets"
    (store / "acme").mkdir(parents=True)
    (store / "acme" / "db-password").write_text(SECRET + "\n")
    out = tmp_path / "got"
    worker = start_worker(SCHEDULER_LAUNCHER="embedded", SCHEDULER_SECRETS_DIR=str(store),
                          SCHEDULER_SECRET_GLOBEX__OTHER="another-tenants-secret")  # fmt: skip
    program = "acme/etl/command/uses-secret"
    script = ("import os, sys; v = os.environ['DB_PASSWORD']; open(sys.argv[1], 'w').write(v); "
              "print('connecting with', v, flush=True); "
              "print('other secrets seen:', [k for k in os.environ if k.startswith('SCHEDULER_SECRET_')]); sys.exit(3)")  # fmt: skip
    spec = {"kind": "command", "argv": [sys.executable, "-c", script, str(out)],
            "env": {"DB_PASSWORD": {"secretRef": "acme/db-password"}, "MODE": "full"}}  # fmt: skip
    async with httpx.AsyncClient(base_url=worker.url, timeout=30) as client:
        foreign = await client.put("/programs/acme/etl/command/foreign",
                                   json={**spec, "env": {"X": {"secretRef": "globex/other"}}})  # fmt: skip
        assert foreign.status_code == 400 and "env.X" in foreign.text and "namespace acme" in foreign.text
        missing = {**spec, "env": {"DB_PASSWORD": {"secretRef": "acme/not-there"}}}
        # registered with the CLI: the secret named on the command line, the rest from a file
        (tmp_path / "spec.json").write_text(
            json.dumps({"kind": "command", "argv": spec["argv"], "env": {"MODE": "full"}})
        )
        put = scheduler_cli(worker.url, "programs", "put", program, "-f", str(tmp_path / "spec.json"),
                            "--secret-env", "DB_PASSWORD=acme/db-password")  # fmt: skip
        assert put.returncode == 0, put.stderr
        async with Api(worker.url) as api:
            for name, prog, definition in (("uses-secret", program, None),
                                           ("missing", "acme/etl/command/missing", missing)):  # fmt: skip
                if definition is not None:
                    await api.register(prog, definition)
                await api.create({"tenant": "acme", "name": name, "program": prog,
                                  "trigger": {"type": "cron", "expression": "0 0 1 1 *"}})  # fmt: skip
                assert scheduler_cli(worker.url, "schedules", "run", f"acme/{name}").returncode == 0

        async def ended(prog: str) -> dict:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                runs = (await client.get(f"/programs/{prog}/runs")).json()["runs"]
                if runs and runs[0]["status"] in ("FAILED", "COMPLETED"):
                    return runs[0]
                await asyncio.sleep(0.3)
            raise AssertionError(f"no run of {prog} ended:\n{worker.log_tail()}")

        run = await ended(program)
        assert out.read_text() == SECRET, "the program did not get the secret's value"
        assert run["status"] == "FAILED" and "connecting with ***" in str(run), run
        assert "other secrets seen: []" in str(run), (
            run
        )  # (the launcher's own SCHEDULER_SECRET_* stay its own)
        gone = await ended("acme/etl/command/missing")
        assert "secret acme/not-there (env DB_PASSWORD) is in none of the secret stores (files, env)" in str(
            gone
        )
        answers = [await client.get(path) for path in (
            f"/programs/{program}", "/programs", f"/programs/{program}/runs", f"/programs/{program}/runs/{run['run_id']}",
            f"/programs/{program}/status", f"/programs/{program}/runs/{run['run_id']}/logs", "/jobs", "/metrics",
            "/schedules/acme/uses-secret/history", "/sensors", "/notifications", "/admin")]  # fmt: skip
        assert "connecting with ***" in answers[5].text, answers[5].text  # (the run's kept output, masked)
        printed = [scheduler_cli(worker.url, *args) for args in (
            ("runs", "logs", program, run["run_id"]), ("runs", "list", program), ("programs", "get", program))]  # fmt: skip
        assert (await client.get(f"/programs/{program}")).json()["env"]["DB_PASSWORD"] == {
            "secretRef": "acme/db-password"
        }
    topics, records = await _every_record_of(broker.bootstrap_servers, app_id)
    assert any(t.endswith("-programs") for t in topics) and any("changelog" in t for t in topics), topics
    assert SECRET.encode() not in records, "the secret's value is on a topic"
    assert b"acme/db-password" in records  # (what is there: the reference)
    for answer in answers:
        assert SECRET not in answer.text, f"the secret's value is in the answer of {answer.request.url}"
    for done in printed:
        assert done.returncode == 0 and SECRET not in done.stdout + done.stderr, done.args
    assert "DB_PASSWORD=<secret acme/db-password>" in printed[2].stdout, printed[2].stdout
    log = worker.log_path.read_text(errors="replace")
    assert SECRET not in log and "another-tenants-secret" not in log
    kept = [f for f in (tmp_path / "data").rglob("*") if f.is_file() and "run-logs" in f.parts]
    assert kept, "no run output kept under the data dir's run-logs/"
    for f in kept:  # (the run's output as the launcher keeps it on disk)
        assert SECRET.encode() not in f.read_bytes(), f"the secret's value is in {f}"
