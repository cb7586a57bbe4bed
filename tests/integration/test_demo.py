"""`make demo`: the whole data loop — Spark ingest -> partitions -> transform -> success -> report —
and the run analytics, on the embedded broker, as a newcomer runs it."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.own_broker, pytest.mark.timeout(600)]


def test_the_demo_chain_runs_to_its_report_and_the_run_analytics(tmp_path):
    data = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "scheduler", "demo", "--data-dir", str(data), "--timeout", "400"],
        capture_output=True, text=True, timeout=560, start_new_session=True,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    for line in ("DATA    demo.clicks +3 partitions", "LAUNCH  demo/transform@v1.1 -> transform (triggered by partition)",
                 "LAUNCH  demo/report@v1.1 -> report (triggered by program-status)", "RUN     report    demo/report@v1.1: COMPLETED"):  # fmt: skip
        assert line in out, out[-3000:]
    assert (data / "reports" / "run-analytics.png").stat().st_size > 1000
    table = (data / "reports" / "run-analytics.md").read_text()
    cron_row = next(r for r in table.splitlines() if r.startswith("| demo/cron-copy"))
    runs, no_new_data = int(cron_row.split("|")[2]), int(cron_row.split("|")[9])
    assert runs >= 2 and no_new_data >= runs - 2, cron_row  # the clock-driven copy mostly found nothing new
