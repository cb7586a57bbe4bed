"""Schemathesis against a real worker's /openapi.json: no 5xx anywhere, answers as the document says.

One worker with auth on and an all-tenant token (sent on every request; `ignored_auth` also checks that
a request without it is refused). Every operation is tested in schemathesis's four phases (the document's
examples, boundary coverage, random fuzzing, stateful sequences along the document's links), with a
bounded number of cases per operation.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from scheduler.http.auth import hash_token
from scheduler.http.openapi import EXAMPLES, build_spec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

TOKEN = "tok-schemathesis-0123456789abcdef"
CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "response_schema_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "ignored_auth",
]
#: per operation and phase: about 2,300 requests, 20-60 s on two busy cores (a new seed each run)
MAX_EXAMPLES = 20


def _auth_env() -> dict[str, str]:
    tokens = [{"name": "st", "sha256": hash_token(TOKEN), "scopes": ["sched:r", "sched:w"], "tenants": ["*"]}]
    return {"SCHEDULER_AUTH": "on", "SCHEDULER_AUTH_TOKENS": json.dumps({"tokens": tokens})}


def _seed(client: httpx.Client) -> None:
    """The program and schedules the document's examples name, so those cases reach the handlers' core."""
    r = client.put(
        "/programs/acme/pipelines/spark/clicks-etl",
        json={"kind": "pyspark", "target": "scheduler.examples.pipelines:transform"},
    )
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 30
    while client.get("/programs/acme/pipelines/spark/clicks-etl").status_code != 200:
        assert time.monotonic() < deadline, "program not registered"
        time.sleep(0.2)
    schedules = [
        EXAMPLES["ScheduleIn"],  # the README's first schedule
        {
            "tenant": "acme",
            "name": "clicks-etl",
            "enabled": True,
            "trigger": {"type": "partition", "dataset": "acme.clicks", "minPartitions": 2},
            "program": "acme/pipelines/spark/clicks-etl",
            "constraints": [{"type": "concurrency", "maxRuns": 1}],
        },
    ]
    for body in schedules:
        r = client.post("/schedules", json=body)
        assert r.status_code == 202, r.text
    for body in schedules:
        while client.get(f"/schedules/acme/{body['name']}").status_code != 200:
            assert time.monotonic() < deadline, f"schedule {body['name']} not applied"
            time.sleep(0.2)


def _without_discriminators(node: Any) -> Any:
    """The document minus its `discriminator` hints. Schemathesis 4.32.5's negative mode fails to generate
    for a oneOf array with one ("Schema Error: Cannot generate an array with 1 demanded elements", on
    `constraints`); the hint changes nothing else: each branch's `type` is a `const` already."""
    if isinstance(node, dict):
        return {k: _without_discriminators(v) for k, v in node.items() if k != "discriminator"}
    if isinstance(node, list):
        return [_without_discriminators(v) for v in node]
    return node


# Schemathesis 4.32.5's fuzzing phase, when it mixes values from earlier responses into the request bodies,
# sometimes asks for an array "containing" a value it can no longer generate and stops with "Schema Error:
# Cannot generate an array with 1 demanded elements" on POST /schedules (seed-dependent; fixed upstream after
# 4.32.5, schemathesis PR #4440). Fuzzing draws from the document alone; the stateful phase still chains
# responses into requests along the document's links.
# 504 is a documented answer, not a failure: `wait=applied` with a `waitMs` too short for the command to
# be applied (a stateful run once asked for 2 ms) says "accepted, not applied yet" (http/applied.py)
# location-headers inference off: schemathesis 4.32.5 scans 2xx JSON bodies for same-origin URLs and dies on
# a string it generated that starts with "/" or "http://" and holds a "[" (urlsplit: "Invalid IPv6 URL";
# an internal error, not a finding: CI of 2026-12-07, where a definition echoed such a string back)
CONFIG = """
[phases.fuzzing.extra-data-sources]
responses = false

[phases.stateful.inference]
algorithms = ["dependency-analysis"]

[checks.not_a_server_error]
expected-statuses = ["2xx", "3xx", "4xx", "504"]
"""


def _only_the_known_generation_bug(report: str) -> bool:
    """The run stopped on the generation bug above and found nothing else (seen again on 2026-11-24 with
    response data off: its fuzzing still hit it once in a run)."""
    return (
        "Cannot generate an array with" in report
        and "Schema Error: 1" in report
        and "Failures:" not in report
        and "failed" not in report.split("Test Phases:")[-1].split("Errors:")[0]
    )


def _run_schemathesis(document: Path, url: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    st = Path(sys.executable).with_name("st")
    config = workdir / "schemathesis.toml"
    config.write_text(CONFIG)
    command: list[Any] = [
        st,
        "--config-file",
        config,
        "run",
        document,
        "--url",
        url,
        "--checks",
        ",".join(CHECKS),
        "--header",
        f"Authorization: Bearer {TOKEN}",
        "--max-examples",
        MAX_EXAMPLES,
        "--workers",
        1,
        "--request-timeout",
        20,
        "--generation-database",
        "none",
        "--no-color",
        "--output-truncate",
        "false",
    ]
    if seed := os.environ.get("SCHEMATHESIS_SEED"):  # replay the seed a failed run printed
        command += ["--seed", seed]
    # cwd: a directory of its own, so no stray config is picked up
    return subprocess.run([str(c) for c in command], cwd=workdir, capture_output=True, text=True, timeout=360)


def test_schemathesis_finds_no_server_error_and_answers_conform_to_the_document(start_worker, tmp_path):
    worker = start_worker(**_auth_env())
    with httpx.Client(base_url=worker.url, timeout=20) as anonymous:
        served = anonymous.get("/openapi.json")  # public: no token
    assert served.status_code == 200 and served.headers["content-type"].startswith("application/json")
    document = served.json()
    assert document == json.loads(json.dumps(build_spec()))  # the one built from this code
    operations = sum(len(ops) for ops in document["paths"].values())

    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=worker.url, timeout=20, headers=headers) as client:
        _seed(client)
        # schemathesis writes UTF-8, so it never sends a lone surrogate (JSON's \udXXX): one by hand
        r = client.put(
            "/programs/acme/pipelines/spark/surrogate",
            content=b'{"kind": "command", "argv": ["\\ud800"]}',
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code == 400 and r.json()["fields"][0]["field"] == "body", r.text

    path = tmp_path / "openapi.json"
    path.write_text(json.dumps(_without_discriminators(document)))
    result = _run_schemathesis(path, worker.url, tmp_path)
    if _only_the_known_generation_bug(result.stdout + result.stderr):
        result = _run_schemathesis(path, worker.url, tmp_path)  # another seed (the bug is seed-dependent)
    report = result.stdout + result.stderr
    (tmp_path / "schemathesis.txt").write_text(report)
    assert result.returncode == 0, (
        f"schemathesis failed:\n{report[-20_000:]}\n--- worker log:\n{worker.log_tail()}"
    )
    # it tested every operation (but maybe GET /openapi.json: schemathesis leaves out the document's own
    # path unless a filter is given), and found nothing
    counts = re.search(r"Selected: (\d+)/(\d+)\s+Tested: (\d+)", report)
    assert counts is not None, report[-5_000:]
    selected, total, tested = map(int, counts.groups())
    assert selected == total == tested >= operations - 1, report[-5_000:]
    assert re.search(r"\d+ generated, \d+ passed", report), report[-5_000:]
    assert worker.health() is not None, "the worker died under schemathesis"
