"""A worker restarted with a backlog fires each partition once that partition is taken up, not after the last
one: Faust starts a worker's services only when its first recovery ends, and that recovery takes each
partition up in turn (its index caught up: ~4 s per partition of 125,000 schedules due each minute). Before,
the punctuator was one of those services, so a restarted worker with a million such schedules fired nothing
for the half minute of its take-up. Here each partition's take-up is made slow (SCHEDULER_FAILPOINTS) and the
first fires after the restart must arrive before /health says the worker is ready (it is once its last
partition is taken up), each due once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.helpers import Api, TopicReader, WorkerProcess, fires_of

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

NAMES = [f"early-{i}" for i in range(8)]
SLOW_S = 4  # each of the 4 partitions' take-up: the last one is taken up ~16 s after the restart


def _every_second(name: str, topic: str) -> dict[str, object]:
    return {"tenant": "acme", "name": name, "trigger": {"type": "frequency", "timeUnit": "SECONDS", "time": 1},
            "topic": topic, "enabled": True}  # fmt: skip


@pytest.mark.parametrize("transactions", ["on", "off"])
async def test_a_restarted_worker_fires_its_first_partitions_while_it_takes_up_the_others(
    broker, start_worker, worker_env, workers: list[WorkerProcess], tmp_path: Path, app_id, transactions
):
    topic = f"{app_id}-early-out"
    first = start_worker(SCHEDULER_TRANSACTIONS=transactions)
    async with TopicReader(broker.bootstrap_servers, topic) as reader:
        async with Api(first.url) as api:
            for name in NAMES:
                await api.create(_every_second(name, topic))
        await reader.wait_for(lambda r: all(fires_of(r, n) for n in NAMES), 60)
        first.stop()
        again = WorkerProcess(
            {
                **worker_env,
                "SCHEDULER_TRANSACTIONS": transactions,
                "SCHEDULER_FAILPOINTS": f"take-up-slow={SLOW_S}",
            },
            log_path=tmp_path / "worker-again.log",
        )
        workers.append(again)  # (stopped by the fixture, by pid)
        restarted = int(time.time() * 1000)
        again.start()
        served = None  # when /health first said ready: after its last partition was taken up
        first_fire = None  # when the punctuator's first fire due after the restart arrived
        deadline = time.monotonic() + 120
        while (served is None or first_fire is None) and time.monotonic() < deadline:
            # (not a catch-up: each partition's take-up sends its own, the punctuator fires the rest)
            if first_fire is None and any(f.due_at > restarted and not f.catch_up for f in reader.records):
                first_fire = time.monotonic()
            if served is None and ((await asyncio.to_thread(again.health)) or {}).get("ready"):
                served = time.monotonic()
            await asyncio.sleep(0.1)
        assert served is not None and first_fire is not None, again.log_tail(80)
        assert first_fire < served, (
            f"the first fire after the restart came {first_fire - served:.1f} s after the worker was ready "
            f"(its last partition taken up): the first partitions waited for the others\n{again.log_tail(80)}"
        )
        await reader.wait_for(
            lambda r: all(f.due_at > restarted for n in NAMES for f in fires_of(r, n)[-1:]), 60
        )
    if transactions == "on":  # exactly once for a read_committed reader
        for name in NAMES:
            dues = [f.due_at for f in fires_of(reader.records, name)]
            assert len(dues) == len(set(dues)), f"{name} fired an instant twice"
