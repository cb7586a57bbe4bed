"""The chaos test in a bounded form (make chaos runs it for minutes, with thousands of schedules)."""

from __future__ import annotations

import json

import pytest

from tests.chaos import run_chaos

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(480)]


async def test_workers_killed_and_restarted_at_random_miss_no_due_instant(broker, tmp_path):
    report = await run_chaos(
        broker.bootstrap_servers, broker.profile, workers=3, schedules=200, duration_s=60, kill_every_s=15,
        down_s=3, partitions=6, settle_s=30, work_dir=tmp_path,
    )  # fmt: skip
    (tmp_path / "report.json").write_text(json.dumps(report, indent=2))
    assert len(report["kills"]) >= 3
    assert report["missed"] == 0, json.dumps(report, indent=2)
    assert report["dueInstantsChecked"] > 200 * 30
