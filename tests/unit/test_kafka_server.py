"""The Apache Kafka runner's pure parts: its pinned version, node configs, the controller lookup, the
messages it gives when a tool is missing; and the embedded broker's growth warning."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scheduler.kafka import kafka_server
from scheduler.kafka.broker import TansuGrowthWatch
from scheduler.kafka.kafka_server import KAFKA_VERSION, KafkaCluster, KafkaUnavailable

pytestmark = pytest.mark.unit


def test_the_version_is_the_one_the_pom_pins_and_deploy_runs():
    assert re.fullmatch(r"4\.\d+\.\d+", KAFKA_VERSION)
    deploy = (Path(__file__).parents[2] / "deploy" / "docker-compose.yml").read_text()
    images = set(re.findall(r"image: apache/kafka:(\S+)", deploy))
    assert images == {KAFKA_VERSION}


def test_a_missing_java_or_mvn_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # neither java nor mvn
    monkeypatch.setenv("SCHEDULER_KAFKA_CACHE", str(tmp_path / "cache"))
    with pytest.raises(KafkaUnavailable, match="needs java and mvn on PATH"):
        kafka_server.classpath()


def test_a_failed_download_says_what_mvn_said(tmp_path, monkeypatch):
    fake = tmp_path / "bin"
    fake.mkdir()
    for tool, body in (("java", "exit 0"), ("mvn", "echo 'Could not resolve dependencies: offline'; exit 1")):
        (fake / tool).write_text(f"#!/bin/sh\n{body}\n")
        (fake / tool).chmod(0o755)
    monkeypatch.setenv("PATH", str(fake))
    monkeypatch.setenv("SCHEDULER_KAFKA_CACHE", str(tmp_path / "cache"))
    with pytest.raises(KafkaUnavailable, match=r"(?s)mvn could not fetch Apache Kafka .*Could not resolve"):
        kafka_server.classpath()


def test_three_nodes_share_one_quorum_and_keep_their_ports_across_restarts(tmp_path):
    cluster = KafkaCluster(tmp_path / "k", nodes=3)
    for n in cluster.nodes:
        cluster._write_config(n)
    props = [
        dict(line.split("=", 1) for line in n.properties_path.read_text().splitlines()) for n in cluster.nodes
    ]
    assert len({p["controller.quorum.voters"] for p in props}) == 1
    assert [p["node.id"] for p in props] == ["1", "2", "3"]
    assert all(p["min.insync.replicas"] == "2" and p["default.replication.factor"] == "3" for p in props)
    assert len({n.port for n in cluster.nodes} | {n.controller_port for n in cluster.nodes}) == 6
    again = KafkaCluster(tmp_path / "k", nodes=3)
    assert [(n.port, n.controller_port) for n in again.nodes] == [
        (n.port, n.controller_port) for n in cluster.nodes
    ]
    assert again.cluster_id == cluster.cluster_id


def test_a_cluster_never_takes_one_port_twice_when_the_os_hands_it_out_again(tmp_path, monkeypatch):
    """The OS may give the port just released to the next ask (CI saw a node's port as another's)."""
    handed = iter([40001, 40001, 40002, 40001, 40003, 40003, 40004, 40005, 40005, 40006])
    monkeypatch.setattr(kafka_server, "_free_port", lambda host: next(handed))
    cluster = KafkaCluster(tmp_path / "k", nodes=3)
    ports = [p for n in cluster.nodes for p in (n.port, n.controller_port)]
    assert sorted(ports) == [40001, 40002, 40003, 40004, 40005, 40006]


def test_a_restarted_node_is_ready_only_once_it_accepts_clients_on_its_port(tmp_path, monkeypatch):
    """The others list a restarted node from its registration on, seconds before it opens its port to
    clients: a test that went on then was refused by it (CI, 2026-11-27)."""
    cluster = KafkaCluster(tmp_path / "k", nodes=3)
    restarted = cluster.nodes[0].port
    opened_after = iter([3, 2, 1, 0])  # the restarted node's port opens on the fourth look
    listening = {"open": False}

    def is_listening(host: str, port: int) -> bool:
        if port == restarted and not listening["open"]:
            listening["open"] = next(opened_after) == 0
            return listening["open"]
        return True

    async def every_node_listed(bootstrap: str) -> set[int]:
        return {1, 2, 3}

    monkeypatch.setattr(kafka_server, "_listening", is_listening)
    monkeypatch.setattr(kafka_server, "_broker_ids", every_node_listed)
    monkeypatch.setattr(kafka_server.time, "sleep", lambda s: None)
    cluster.wait_ready(timeout_s=5)
    assert listening["open"], "ready before the restarted node accepted clients"


def test_a_single_node_holds_one_replica_of_everything(tmp_path):
    cluster = KafkaCluster(tmp_path / "k", nodes=1, port=19999)
    cluster._write_config(cluster.nodes[0])
    props = cluster.nodes[0].properties_path.read_text()
    assert "offsets.topic.replication.factor=1" in props
    assert "transaction.state.log.min.isr=1" in props
    assert cluster.bootstrap_servers == "127.0.0.1:19999"


def test_the_active_controller_is_the_leader_of_the_highest_epoch(tmp_path):
    cluster = KafkaCluster(tmp_path / "k", nodes=3)
    for n, (leader, epoch) in zip(cluster.nodes, [(1, 4), (2, 5), (-1, 5)]):
        d = n.log_dir / "__cluster_metadata-0"
        d.mkdir(parents=True)
        (d / "quorum-state").write_text(json.dumps({"leaderId": leader, "leaderEpoch": epoch}))
    assert cluster.active_controller() == 2


def test_the_embedded_broker_warns_each_time_its_memory_passes_another_step():
    watch = TansuGrowthWatch(broker=None, step_mb=1000)  # type: ignore[arg-type]
    assert watch.check(900, 19.0, 0) == 0 and not watch.warnings
    assert watch.check(1100, 19.0, 0) == 1000
    assert "grows 19.0 MB a minute (~26.7 GB a day)" in watch.warnings[-1]
    assert watch.check(1900, 19.0, 1000) == 1000 and len(watch.warnings) == 1
    assert watch.check(2050, 19.0, 1000) == 2000 and len(watch.warnings) == 2


def test_a_cluster_id_never_starts_with_a_dash():
    from scheduler.kafka.kafka_server import _cluster_id

    ids = [_cluster_id() for _ in range(2000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)


def test_only_children_of_the_main_thread_get_the_parent_death_signal():
    """A node restarted from asyncio.to_thread's worker thread was SIGKILLed when that thread ended."""
    import os
    import threading

    from scheduler.kafka.kafka_server import child_setup, die_with_parent

    assert child_setup() is die_with_parent
    assert child_setup(tied_to_parent=False) is os.setsid
    seen = []
    t = threading.Thread(target=lambda: seen.append(child_setup()))
    t.start()
    t.join()
    assert seen == [os.setsid]


def test_a_child_spawned_from_a_short_lived_thread_is_tied_to_the_process_not_the_thread():
    """Nodes restarted from a fault's thread (asyncio.to_thread) had no parent-death signal: a test runner
    killed then (by CI's timeout, by the watchdog) left them running. spawn() starts them from a thread
    that lasts as long as the process, with the signal."""
    import subprocess
    import sys
    import threading
    import time

    from scheduler.kafka.kafka_server import child_setup, die_with_parent, spawn

    setups, children = [], []

    def start() -> subprocess.Popen[bytes]:
        setup = child_setup()
        setups.append(setup)
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], preexec_fn=setup)

    t = threading.Thread(target=lambda: children.append(spawn(start)))
    t.start()
    t.join()
    try:
        assert setups == [die_with_parent]
        time.sleep(0.5)
        assert children[0].poll() is None, "the child died with the thread that asked for it"
    finally:
        children[0].kill()
        children[0].wait(10)


def test_a_broker_left_by_an_earlier_run_is_found_by_its_pid_file_and_stopped(tmp_path):
    """`scheduler run --broker kafka` calls stop_stale() before it starts its own: a node an earlier run
    left behind (started before the parent-death signal existed, or without it) is stopped; a pid that was
    reused by another process is left alone."""
    import subprocess
    import sys

    cluster = KafkaCluster(tmp_path / "kafka", nodes=1)
    node = cluster.nodes[0]
    node.dir.mkdir(parents=True)
    # a stand-in for the orphaned JVM: its command line names the node's properties file, as the JVM's does
    orphan = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", str(node.properties_path)],
        start_new_session=True,
    )
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        (node.dir / "pid").write_text(str(orphan.pid))
        assert cluster.stop_stale(timeout_s=10) == [orphan.pid]
        assert orphan.wait(timeout=10) is not None
        (node.dir / "pid").write_text(str(other.pid))  # the pid now belongs to someone else
        assert cluster.stop_stale(timeout_s=10) == []
        assert other.poll() is None
    finally:
        for p in (orphan, other):
            p.kill()
            p.wait(timeout=10)


def test_a_collector_chosen_in_jdk_java_options_replaces_g1_instead_of_stopping_the_jvm():
    from scheduler.kafka.kafka_server import JVM_FLAGS, jvm_flags

    assert jvm_flags({}) == JVM_FLAGS and "-XX:+UseG1GC" in JVM_FLAGS
    assert jvm_flags({"JDK_JAVA_OPTIONS": "-XX:TieredStopAtLevel=1"}) == JVM_FLAGS
    chosen = jvm_flags({"JDK_JAVA_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"})
    assert "-XX:+UseG1GC" not in chosen and "-XX:MaxGCPauseMillis=20" not in chosen
    assert "-XX:+ExitOnOutOfMemoryError" in chosen
