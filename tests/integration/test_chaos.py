"""The chaos test in a bounded form: one fault of each kind a worker can suffer (a pause and a kill; a
network cut), each checked as make chaos checks its minutes of faults with thousands of schedules."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.chaos import run_chaos
from tests.helpers import on_kafka
from tests.netns import BROKER_HOST, Lab, missing

pytestmark = [pytest.mark.integration, pytest.mark.chaos, pytest.mark.timeout(480), pytest.mark.serial]


@pytest.mark.long  # (CI's campaign seeds kill and pause workers the same way: tests/integration/test_campaign.py)
async def test_workers_killed_and_paused_at_random_miss_no_due_instant_and_repeat_none_on_kafka(
    broker, tmp_path
):
    """One SIGSTOP past the session timeout + SIGCONT (a zombie owner), then one SIGKILL + restart;
    meanwhile updates over HTTP. 0 missed; on Kafka 0 repeated for a read_committed reader; no
    acknowledged update lost."""
    report = await run_chaos(
        broker.bootstrap_servers, broker.profile, workers=3, schedules=200, duration_s=40, kill_every_s=18,
        down_s=3, partitions=6, settle_s=30, work_dir=tmp_path, faults=("pause", "kill"), updated=20,
    )  # fmt: skip
    (tmp_path / "report.json").write_text(json.dumps(report, indent=2))
    summary = json.dumps({k: v for k, v in report.items() if k != "missedExamples"}, indent=2)
    print(summary)
    assert [k["kind"] for k in report["kills"]] == ["pause", "kill"], summary
    assert report["missed"] == 0, json.dumps(report, indent=2)
    assert report["dueInstantsChecked"] > 200 * 30
    assert report["lostUpdates"] == 0 and report["lastFiresNotCarryingTheLastUpdate"] == 0, summary
    assert report["updatesAcknowledged"] > 0, summary
    if on_kafka():
        assert report["duplicates"] == 0, summary


@pytest.fixture
def cut_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, Any]]:
    """Three workers' network namespaces, and a 1-node Apache Kafka of its own where they reach it."""
    from scheduler.kafka.kafka_server import KafkaCluster, KafkaUnavailable

    lacking = missing()
    if lacking is not None:
        pytest.fail(f"the network cut test needs {lacking}", pytrace=False)
    with Lab(3) as lab:
        try:
            cluster = KafkaCluster(tmp_path_factory.mktemp("kafka-cut"), host=BROKER_HOST).start()
        except KafkaUnavailable as exc:
            pytest.fail(f"the network cut test needs Apache Kafka from its jars: {exc}", pytrace=False)
        try:
            yield lab, cluster
        finally:
            cluster.stop(timeout_s=0)  # (thrown away: no controlled shutdown to wait for)


@pytest.mark.own_broker
async def test_workers_cut_off_from_the_network_are_fenced_and_repeat_nothing(cut_lab, tmp_path):
    """A worker cut off from the network keeps running: its timers tick, its producers and its HTTP requests
    wait for the broker. Once its partitions moved and the cut heals, nothing it held may commit: 0 missed,
    0 repeated for a read_committed reader, no acknowledged update lost. (Without transactions the same run
    repeats thousands of due instants. Whether the victim itself logs "fenced" depends on what it had open
    when cut: one that was still recovering had nothing.)"""
    lab, cluster = cut_lab
    report = await run_chaos(
        cluster.bootstrap_servers, "kafka", workers=3, schedules=200, duration_s=35, kill_every_s=20,
        partitions=6, settle_s=30, work_dir=tmp_path, faults=("cut",), updated=20, lab=lab,
    )  # fmt: skip
    (tmp_path / "report.json").write_text(json.dumps(report, indent=2))
    summary = json.dumps({k: v for k, v in report.items() if k != "missedExamples"}, indent=2)
    print(summary)
    assert [k["kind"] for k in report["kills"]] == ["cut"], summary
    assert report["missed"] == 0, json.dumps(report, indent=2)
    assert report["duplicates"] == 0, summary
    assert report["dueInstantsChecked"] > 200 * 25
    assert report["lostUpdates"] == 0 and report["lastFiresNotCarryingTheLastUpdate"] == 0, summary
    assert report["updatesAcknowledged"] > 0, summary
