"""Event -> launch, hop by hop: `python -m tests.bench.hops [EVENTS [SCHEDULES]]` (embedded broker, one
worker, SCHEDULES (100) partition-triggered schedules inserted through the commands topic, EVENTS (150)
sequential partition events; reports, never asserts).

Each hop's time comes from the record timestamps of the topics the event crosses: events -> trigger-fired
(the event routing agent) -> jobs (the trigger agent) -> launches (the job queue agent).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer

from scheduler.kafka.broker import EmbeddedBroker
from tests.bench.common import Worker, insert_all, now_ms, pct, wait_applied
from tests.bench.end_to_end import partition_schedules
from tests.helpers import Api, TopicReader, decode_launch


async def read_all(bootstrap: str, topic: str) -> list[Any]:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    out: list[Any] = []
    try:
        while batch := await consumer.getmany(timeout_ms=1500):
            for messages in batch.values():
                out.extend(messages)
    finally:
        await consumer.stop()
    return sorted(out, key=lambda m: m.timestamp)


async def main(count: int, n: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-hops-"))
    broker = EmbeddedBroker(log_path=work / "broker.log").start()
    bootstrap, app_id = broker.bootstrap_servers, f"hops{uuid.uuid4().hex[:6]}"
    out = f"{app_id}-launches"
    try:
        with Worker(bootstrap, "tansu", app_id, work) as w:
            async with Api(w.proc.url) as api:
                await api.register("bench/apps/workflow/etl")
                await insert_all(bootstrap, app_id, partition_schedules(n, out))
                await asyncio.to_thread(wait_applied, w, n, 900)
                sent = []
                async with TopicReader(bootstrap, out, decode_launch, read_committed=False) as launches:
                    for k in range(count):
                        i = (k * 7919) % n
                        await api.indexed((await api.client.get(f"/schedules/bench/e{i:06d}")).json(), 900)
                        sent.append(now_ms())
                        await api.partitions(f"bench.d{i:06d}", f"p{k}")
                        await launches.wait_for(lambda r, k=k: len(r) > k, timeout_s=30)
                        await asyncio.sleep(0.02)
            events = [
                m.timestamp
                for m in await read_all(bootstrap, f"{app_id}-events")
                if m.key.startswith(b"partition:")
            ]
            fired = [m.timestamp for m in await read_all(bootstrap, f"{app_id}-trigger-fired")]
            jobs = [m.timestamp for m in await read_all(bootstrap, f"{app_id}-jobs") if json.loads(m.value).get("type") == "triggered"]  # fmt: skip
            launched = [m.timestamp for m in await read_all(bootstrap, f"{app_id}-launches")]
        m = min(len(events), len(fired), len(jobs), len(launched), count)
        rows = {
            "HTTP -> events": [events[k] - sent[k] for k in range(m)],
            "events -> trigger-fired": [fired[k] - events[k] for k in range(m)],
            "trigger-fired -> jobs": [jobs[k] - fired[k] for k in range(m)],
            "jobs -> launches": [launched[k] - jobs[k] for k in range(m)],
            "event -> launch": [launched[k] - sent[k] for k in range(m)],
        }
        for name, v in rows.items():
            print(
                f"{name:24s} p50 {pct(v, 0.5)} ms  p90 {pct(v, 0.9)} ms  p99 {pct(v, 0.99)} ms  max {max(v)} ms"
            )
    finally:
        broker.stop()


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    asyncio.run(main(args[0] if args else 150, args[1] if len(args) > 1 else 100))
