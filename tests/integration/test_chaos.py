"""The chaos test in a bounded form (make chaos runs it for minutes, with thousands of schedules)."""

from __future__ import annotations

import json

import pytest

from tests.chaos import run_chaos
from tests.helpers import on_kafka

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(480)]


async def test_workers_killed_and_paused_at_random_miss_no_due_instant_and_repeat_none_on_kafka(
    broker, tmp_path
):
    """Faults in turn: SIGKILL + restart, SIGSTOP past the session timeout + SIGCONT (a zombie owner);
    meanwhile updates over HTTP. 0 missed; on Kafka 0 repeated for a read_committed reader; no
    acknowledged update lost."""
    report = await run_chaos(
        broker.bootstrap_servers, broker.profile, workers=3, schedules=200, duration_s=75, kill_every_s=18,
        down_s=3, partitions=6, settle_s=30, work_dir=tmp_path, faults=("pause", "kill"), updated=20,
    )  # fmt: skip
    (tmp_path / "report.json").write_text(json.dumps(report, indent=2))
    summary = json.dumps({k: v for k, v in report.items() if k != "missedExamples"}, indent=2)
    print(summary)
    assert {k["kind"] for k in report["kills"]} == {"pause", "kill"}, summary
    assert report["missed"] == 0, json.dumps(report, indent=2)
    assert report["dueInstantsChecked"] > 200 * 40
    assert report["lostUpdates"] == 0 and report["lastFiresNotCarryingTheLastUpdate"] == 0, summary
    assert report["updatesAcknowledged"] > 0, summary
    if on_kafka():
        assert report["duplicates"] == 0, summary
