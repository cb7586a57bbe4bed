"""A worker never goes quietly deaf (scheduler/worker/liveness.py), through its public interfaces: a worker
whose commands consumer answers nothing (SCHEDULER_FAILPOINTS, as one whose group coordination died on a
3-node cluster) says so on /health and /metrics, replaces the consumer and applies what was written; one
that cannot heal leaves (exit code 75) and its partitions move to a worker that applies their commands."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest

from scheduler.worker.liveness import LEFT_EXIT_CODE
from tests.helpers import SHORT_SESSION, metric, owned, wait_split

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def _schedule(name: str, topic: str) -> dict[str, object]:
    return {"tenant": "acme", "name": name, "trigger": {"type": "cron", "expression": "0 0 1 1 *"},
            "topic": topic}  # fmt: skip


def test_a_worker_whose_commands_consumer_goes_deaf_says_so_heals_and_applies_the_writes(start_worker):
    w = start_worker(SCHEDULER_FAILPOINTS="commands-deaf=once", SCHEDULER_STALL_AFTER_S="3")
    with httpx.Client(base_url=w.url, timeout=30) as client:
        assert client.get("/health").json()["ready"], "an idle deaf consumer has no work: not stalled"
        names = [f"deaf-{i}" for i in range(8)]
        for name in names:
            assert client.post("/schedules", json=_schedule(name, "deaf-out")).status_code == 202
        seen: list[dict[str, object]] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            health = client.get("/health").json()
            if not health["ready"]:
                seen.append(health)
            if (
                seen
                and health["ready"]
                and all(client.get(f"/schedules/acme/{n}").status_code == 200 for n in names)
            ):
                break
            time.sleep(0.3)
        assert seen, "the deaf consumer was never reported: /health said ready throughout"
        [stall] = seen[0]["stalled"]
        assert stall["loop"] == "commands" and "records behind the end of the commands partitions" in str(
            stall["reason"]
        ), seen[0]
        assert "loop commands stalled" in str(seen[0]["notReady"]), seen[0]
        assert all(client.get(f"/schedules/acme/{n}").status_code == 200 for n in names), w.log_tail()
        health = client.get("/health").json()
        assert health["ready"] and health["stalled"] == [] and health["commandsApplied"] == len(names)
        metrics = client.get("/metrics").text
        assert metric(metrics, 'scheduler_loop_heals_total{loop="commands"}') == 1
        assert metric(metrics, 'scheduler_loop_stalls_total{loop="commands"}') == 1
        assert metric(metrics, 'scheduler_loop_stalled{loop="commands"}') == 0


def test_a_worker_that_cannot_heal_leaves_and_its_partitions_commands_are_applied_elsewhere(start_worker):
    deaf = start_worker(
        SCHEDULER_FAILPOINTS="commands-deaf=always", SCHEDULER_STALL_AFTER_S="3", SCHEDULER_LEAVE_AFTER_S="5"
    )
    healthy = start_worker(partitions=0)
    wait_split(deaf, healthy)
    deaf_partitions = owned(deaf)
    names = [f"left-{i}" for i in range(16)]  # (keys over every partition: some of the deaf worker's)
    with httpx.Client(base_url=healthy.url, timeout=30) as client:
        offsets: dict[str, int] = {}
        for name in names:
            answer = client.post("/schedules", json=_schedule(name, "left-out"))
            assert answer.status_code == 202, answer.text
            offsets[name] = answer.json()["offset"]
        assert deaf.proc is not None
        deaf.proc.wait(timeout=90)
        assert deaf.proc.returncode == LEFT_EXIT_CODE, deaf.log_tail()
        assert "the worker stops so its partitions move" in deaf.log_tail(200)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and owned(healthy) != {0, 1, 2, 3}:
            time.sleep(0.3)
        assert owned(healthy) == {0, 1, 2, 3} and deaf_partitions, (owned(healthy), deaf_partitions)
        for name in names:  # applied by the worker that took the partitions (it may still be taking them up)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # (503 while the partition is being taken up)
                params = {"offset": offsets[name], "waitMs": 5000}
                applied = client.get(f"/schedules/acme/{name}/applied", params=params)
                if applied.status_code == 200 and applied.json()["applied"]:
                    break
                time.sleep(0.3)
            assert applied.status_code == 200 and applied.json()["applied"], (
                applied.text,
                healthy.log_tail(),
            )
            answer = client.post(f"/schedules/acme/{name}/enable?wait=applied")
            assert answer.status_code == 200 and answer.json()["version"] == 2, answer.text


def test_a_worker_holding_partitions_it_never_takes_up_leaves_and_they_are_served_elsewhere(
    start_worker, worker_env, workers, tmp_path
):
    """The group membership is watched too: a worker whose take-up of its assignment never ends holds its
    partitions while serving none of them (no other loop sees it: their work is of partitions taken up).
    It says so, then leaves; the partitions go to the worker that can serve them."""
    from tests.helpers import WorkerProcess

    healthy = start_worker()
    # (its membership's bound is twice its session timeout, never under: 12 s with a short session)
    env = {"SCHEDULER_FAILPOINTS": "take-up-hangs=on", "SCHEDULER_STALL_AFTER_S": "3",
           "SCHEDULER_LEAVE_AFTER_S": "5", **SHORT_SESSION}  # fmt: skip
    stuck = WorkerProcess({**worker_env, **env}, log_path=tmp_path / "worker-stuck.log")
    workers.append(stuck)
    stuck.start()
    assert stuck.proc is not None
    seen: list[dict[str, object]] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and stuck.proc.poll() is None:
        health = stuck.health()
        if health is not None and health["stalled"]:
            seen.append(health)
        time.sleep(0.3)
    assert stuck.proc.poll() == LEFT_EXIT_CODE, stuck.log_tail()
    assert seen, "the stuck membership was never reported on /health"
    [stall] = seen[0]["stalled"]
    assert stall["loop"] == "group" and "assignment not taken up" in str(stall["reason"]), seen[0]
    assert "loop group stalled" in stuck.log_tail(400)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and owned(healthy) != {0, 1, 2, 3}:
        time.sleep(0.3)
    assert owned(healthy) == {0, 1, 2, 3}, healthy.log_tail()
    with httpx.Client(base_url=healthy.url, timeout=30) as client:
        for i in range(16):  # (keys over every partition: the stuck worker's too)
            answer = client.post("/schedules?wait=applied", json=_schedule(f"held-{i}", "held-out"))
            assert answer.status_code == 200, answer.text


def test_a_launcher_whose_launches_consumer_goes_deaf_says_so_heals_and_runs_the_program(start_worker):
    """The embedded launcher's consumer of launch requests is a watched loop too (launcher/launches.py):
    deaf, it is found stalled, replaced, and the launch it held back runs."""
    import sys

    w = start_worker(
        SCHEDULER_LAUNCHER="embedded", SCHEDULER_FAILPOINTS="launches-deaf=once", SCHEDULER_STALL_AFTER_S="3"
    )
    program = "demo/tools/command/deaf-launch"
    with httpx.Client(base_url=w.url, timeout=30) as client:
        spec = {"kind": "command", "argv": [sys.executable, "-c", "print('ran')"]}
        assert client.put(f"/programs/{program}", json=spec).status_code == 202
        deadline = time.monotonic() + 30
        while client.get(f"/programs/{program}").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.2)  # (registered through the programs topic)
        start = int((time.time() + 2) * 1000)
        body = {"tenant": "demo", "name": "deaf-launch", "program": program, "enabled": True,
                "trigger": {"type": "frequency", "timeUnit": "HOURS", "time": 1, "start": start}}  # fmt: skip
        answer = client.post("/schedules?wait=applied", json=body)
        assert answer.status_code == 200, answer.text
        seen: list[dict[str, object]] = []
        runs: list[dict[str, object]] = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            health = client.get("/health").json()
            seen += [s for s in health["stalled"] if s["loop"] == "launches"]
            r = client.get(f"/programs/{program}/runs")
            runs = r.json()["runs"] if r.status_code == 200 else []
            if runs and runs[-1]["status"] == "COMPLETED":
                break
            time.sleep(0.3)
        assert runs and runs[-1]["status"] == "COMPLETED", (runs, w.log_tail())
        assert seen and "launch requests behind the end of the launch topic" in str(seen[0]["reason"]), seen
        assert metric(client.get("/metrics").text, 'scheduler_loop_heals_total{loop="launches"}') == 1


async def test_a_registry_follower_gone_deaf_is_stalled_then_follows_again(broker, app_id):
    """The programs (and calendars) followers are loops too: one whose consumer answers nothing while
    definitions arrive is found stalled and follows its topic again with a new consumer."""
    import asyncio

    from aiokafka import AIOKafkaProducer

    from scheduler.worker.failpoints import make_deaf
    from scheduler.worker.following import CAUGHT_UP_WAIT_MS
    from scheduler.worker.liveness import Liveness
    from scheduler.worker.programs import ProgramRegistry
    from tests.helpers import ensure_topic

    topic = f"{app_id}-programs"
    await ensure_topic(broker.bootstrap_servers, topic)
    registry = ProgramRegistry(broker.bootstrap_servers, topic)
    liveness = Liveness(stall_after_s=2)
    liveness.watch(registry)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    await producer.start()
    watch = asyncio.ensure_future(liveness.run(every_s=0.5))
    try:
        await registry.start()
        assert registry._consumer is not None
        make_deaf(registry._consumer)
        await asyncio.sleep(CAUGHT_UP_WAIT_MS / 1000 + 0.3)  # (a fetch in flight ends)
        spec = b'{"kind": "pyspark", "target": "x.y:z"}'
        await producer.send_and_wait(topic, spec, key=b"acme/etl/spark/load")
        stalled: list[object] = []
        for _ in range(150):
            stalled += liveness.stalled()
            if registry.get("acme/etl/spark/load") is not None:
                break
            await asyncio.sleep(0.1)
        assert registry.get("acme/etl/spark/load") is not None, "the deaf follower never read on"
        assert stalled and liveness.states["programs"].heals == 1, stalled
    finally:
        watch.cancel()
        await producer.stop()
        await registry.stop()


def test_a_worker_that_loses_the_brokers_while_starting_exits_to_be_started_again(
    worker_env, workers, tmp_path
):
    """The brokers answer the startup check, then the network goes before the Kafka clients bootstrap (the
    campaign's seed 52: a cut during a joining worker's start): the worker exits 75, start me again, as for
    no broker at all, not 1 (a supervisor that restarts on 75 only would give up on it). The listener
    accepts each connection and closes it: a broker port whose Kafka never answers."""
    from tests.helpers import WorkerProcess

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def refuse() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return  # (closed: the test ended)
            connection.close()

    threading.Thread(target=refuse, daemon=True).start()
    try:
        env = {**worker_env, "KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}"}
        starting = WorkerProcess(env, log_path=tmp_path / "worker-cut.log")
        workers.append(starting)
        starting.start()
        assert starting.proc is not None
        starting.proc.wait(timeout=120)
        assert starting.proc.returncode == LEFT_EXIT_CODE, starting.log_tail()
        assert "lost the brokers at 127.0.0.1:" in starting.log_tail(40), starting.log_tail(40)
    finally:
        listener.close()
