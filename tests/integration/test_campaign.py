"""The randomized fault campaign (tests/campaign) in its bounded form: two fixed seeds of 50 s of faults
each, one on a 1-node and one on a 3-node Apache Kafka (`make campaign` runs 20 seeds of 3 minutes, each
choosing). Between them: every command path (HTTP, the commands topic, light-scheduler's topic), event-driven
schedules, a worker killed, paused and cut off the network, a broker killed. A seed prints what it chose; a
failure names the seed that replays it: python -m tests.campaign --seed N."""

from __future__ import annotations

import json

import pytest

from tests.campaign.__main__ import failed, run_seed, summary

pytestmark = [pytest.mark.integration, pytest.mark.serial, pytest.mark.own_broker, pytest.mark.timeout(420)]


@pytest.mark.parametrize(("seed", "brokers"), [(52, 1), (119, 3)])  # (kill + cut; broker kill + pause)
def test_a_campaign_seed_misses_nothing_repeats_nothing_and_loses_no_write(seed, brokers, tmp_path):
    report = run_seed(seed, 50, brokers, 0.5, tmp_path)
    print(summary(report))
    detail = json.dumps(report, indent=2)
    assert report["dueInstantsChecked"] > 500, detail  # (~1,000 in 50 s: a floor, not a figure)
    assert report["eventsChecked"] > 10, detail
    assert not failed(report), (
        detail
    )  # (missed, duplicates, lost writes or schedules, events missed or repeated)
    assert [f for f in report["faults"] if "skipped" not in f], detail
