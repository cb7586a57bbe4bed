"""Delayed messages side by side with etf1/kafka-message-scheduler (issue 38 item 5).

    python -m tests.bench.delayed --n 10000 100000 [--window 60] [--kill] [--etf1 PATH] [--out DIR]

The same workload on the same Apache Kafka (one KRaft node it starts itself), one side after the other: N
records in etf1's shape (key = the message id; headers `scheduler-epoch` in whole seconds, etf1's unit, and
`scheduler-target-topic`, `scheduler-target-key` = the id) produced with the default partitioner, due
evenly over a window of `--window` seconds that starts once the load has had time to land. Ours: one
worker, transactions on, 8 partitions, reading its delayed topic; etf1: its `kafka` binary (built from its
public source by tests/bench/etf1.sh; nothing of it is in this repository), reading a topic of 8
partitions. One reader process (read_committed) takes what is delivered to the side's target topic.

Per side: load → all live (from the first record produced until the side holds all N: ours its
GET /stats/messages, etf1 its `planned_schedule` counter; asked every 50 ms; `produced_s`: the part of it the
bench's own producer took), missed and duplicated ids, lateness (arrival at
the reader − the due second) p50 / p99 / max, deliveries a second (`delivered_per_s`, from the first instant
to the last arrival: N / window while the side keeps up; a short window asks for a rate: 500,000 over 10 s
is 50,000 a second), the process's RSS (peak, sampled) and CPU seconds over the run. `--kill`: the process is SIGKILLed mid-window and restarted at once (ours on its data dir), and the
time from the restart (the side ready again) to the first delivery after it is reported, and the longest the
reader then got nothing (`silent_s`: the kill's whole cost to a reader, start, group join and reload included).
Benchmarks report, never assert.

Both sides start alike: the bench creates each side's input topic before the side starts (a topic the
worker created itself answered the first produce with NotLeaderForPartition, retried, ~0.3 s of its load on
a new broker), and before the first row each side runs once with WARMUP_N messages, not reported (the first
side on a new broker ran on a cold JVM: ours, first, took ~0.2 s longer to go live at 10,000 than the same
run a minute later).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import platform
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psutil

from tests.bench.common import Worker, now_ms

PARTITIONS = 8
GRACE_S = 20  # after the window: stragglers (and a killed side's catch-up) still counted
METRICS_ADDR = "127.0.0.1:18001"  # etf1's metrics (its counts: _Etf1.held)
WARMUP_N, WARMUP_WINDOW_S = 1_000, 2  # each side's run before the first row (see the module's doc)


def _read(bootstrap: str, topic: str, until: Any, ready: Any, queue: Any) -> None:
    """The reader process: every partition of `topic` from its end until `until` (ms; set later), each
    delivery as (its key: the message id, arrival ms, its `scheduler-delivered-at` header or 0: ours says when
    it sent it)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def read() -> list[tuple[str, int, int]]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed",
            fetch_max_wait_ms=50,
        )  # fmt: skip
        await consumer.start()
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_end(*tps)
        for tp in tps:
            await consumer.position(tp)
        ready.put(True)
        got: list[tuple[str, int, int]] = []
        try:
            while until.value == 0 or now_ms() < until.value:
                batch = await consumer.getmany(timeout_ms=100)
                at = now_ms()
                for records in batch.values():
                    got.extend((msg.key.decode(), at, _sent_at(msg.headers)) for msg in records)
        finally:
            await consumer.stop()
        return got

    queue.put(asyncio.run(read()))


def _sent_at(headers: Any) -> int:
    return next((int(v) for k, v in headers if k == "scheduler-delivered-at"), 0)


def _percentile(values: list[int], q: float) -> int | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, list[tuple[str, bytes]]]]) -> None:
    """As an etf1 producer does: aiokafka's default partitioner, values and headers as they are."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, max_batch_size=512 * 1024)
    await producer.start()
    try:
        sent = [await producer.send(topic, b"payload-" + key, key=key, headers=h) for key, h in records]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


class _Ours:
    name = "ours"

    def __init__(self, bootstrap: str, work: Path, app_id: str | None = None) -> None:
        """`app_id`: another worker of that app (else a new app)."""
        self.app_id = app_id or f"dl{uuid.uuid4().hex[:6]}"
        self.worker = Worker(bootstrap, "kafka", self.app_id, work / "ours")
        self.input = f"{self.app_id}-delayed"

    def start(self, timeout_s: float = 240) -> psutil.Process:
        self.worker.proc.start()
        self.worker.proc.wait_ready(timeout_s=timeout_s)
        assert self.worker.proc.proc is not None
        return psutil.Process(self.worker.proc.proc.pid)

    def held(self) -> int:
        try:
            r = httpx.get(f"{self.worker.proc.url}/stats/messages", params={"limit": 1}, timeout=5)
            body = r.json()
            return int(body["pending"]) if r.status_code == 200 and not body["counting"] else 0
        except (httpx.HTTPError, ValueError, KeyError):
            return 0

    def kill(self) -> None:
        self.worker.proc.kill()

    def stop(self) -> None:
        self.worker.proc.kill()


class _Etf1:
    name = "etf1"

    def __init__(self, bootstrap: str, work: Path, binary: Path) -> None:
        self.bootstrap, self.binary, self.work = bootstrap, binary, work / "etf1"
        self.work.mkdir(parents=True, exist_ok=True)
        run = uuid.uuid4().hex[:6]
        self.input, self.group = f"etf1-{run}-schedules", f"etf1-{run}"
        self.history = f"etf1-{run}-history"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> psutil.Process:
        # its README's advice for producers that are not librdkafka's (ours: aiokafka's murmur2): its own
        # tombstone of a delivered message must land on that message's partition
        with contextlib.suppress(httpx.HTTPError):  # (else its rows would read another process's counts)
            httpx.get(f"http://{METRICS_ADDR}/metrics", timeout=2)
            raise RuntimeError(
                f"something answers on {METRICS_ADDR} already (an etf1 left running?): stop it"
            )
        config = self.work / "config.yaml"
        config.write_text("kafka.producer.configuration:\n    partitioner: murmur2_random\n")
        env = {**os.environ, "CONFIGURATION_FILE": str(config), "BOOTSTRAP_SERVERS": self.bootstrap,
               "SCHEDULES_TOPICS": self.input,
               "HISTORY_TOPIC": self.history, "GROUP_ID": self.group, "METRICS_ADDR": METRICS_ADDR,
               "SERVER_ADDR": "127.0.0.1:18000", "LOG_LEVEL": "warning"}  # fmt: skip
        log = open(self.work / "etf1.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen([str(self.binary)], env=env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)  # fmt: skip
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                # (its /liveness probe times out until its first schedule: its metrics answer once it runs)
                if (
                    self.proc.poll() is None
                    and httpx.get(f"http://{METRICS_ADDR}/metrics", timeout=2).is_success
                ):
                    time.sleep(5)  # (its consumer's group join)
                    return psutil.Process(self.proc.pid)
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.kill()
        log_tail = (self.work / "etf1.log").read_text(errors="replace")[-3000:]
        raise TimeoutError(f"etf1 did not start:\n{log_tail}")

    def held(self) -> int:
        try:
            text = httpx.get(f"http://{METRICS_ADDR}/metrics", timeout=5).text
        except httpx.HTTPError:
            return 0
        found = re.search(r'type="kafka_scheduler_planned_schedule"\} (\S+)', text)
        return int(float(found.group(1))) if found else 0

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        self.kill()


async def side_run(
    side: Any, bootstrap: str, n: int, window_s: int, kill: bool, grace_s: int = GRACE_S
) -> dict[str, Any]:
    from scheduler.kafka.producer import TopicCreator

    out = f"{side.input}-out"
    topics = TopicCreator(bootstrap, PARTITIONS, 1)
    await topics.ensure(out, side.input)  # (ours: its delayed topic, as the worker would create it)
    if side.name == "etf1":
        await topics.ensure(side.history)
    process = side.start()
    ctx = mp.get_context("spawn")
    queue, ready, until = ctx.Queue(), ctx.Queue(), ctx.Value("q", 0)
    reader = ctx.Process(target=_read, args=(bootstrap, out, until, ready, queue))
    reader.start()
    await asyncio.to_thread(ready.get, True, 60)
    lead_s = 10 + n // 5_000  # the load lands before the window
    t0 = (now_ms() // 1000 + lead_s) * 1000
    due = [t0 // 1000 + i * window_s // n for i in range(n)]
    records = [
        (f"m{i:08d}".encode(), [("scheduler-epoch", str(d).encode()), ("scheduler-target-topic", out.encode()),
                                ("scheduler-target-key", f"m{i:08d}".encode())])
        for i, d in enumerate(due)
    ]  # fmt: skip
    cpu_before = sum(process.cpu_times()[:2])
    rss_peak = process.memory_info().rss
    t_load = time.monotonic()
    await _produce(bootstrap, side.input, records)
    produced_s = time.monotonic() - t_load
    live_s = None
    end = t0 + window_s * 1000
    until.value = end + grace_s * 1000
    killed_at = restarted_at = None
    cpu_dead = 0.0
    while now_ms() < until.value:
        if live_s is None and await asyncio.to_thread(side.held) >= n:
            live_s = time.monotonic() - t_load
        with contextlib.suppress(psutil.Error):
            rss_peak = max(rss_peak, process.memory_info().rss)
        if kill and killed_at is None and now_ms() >= t0 + window_s * 500:
            cpu_dead = sum(process.cpu_times()[:2]) - cpu_before
            side.kill()
            killed_at = now_ms()
            process = await asyncio.to_thread(side.start)
            restarted_at = now_ms()
            cpu_before = sum(process.cpu_times()[:2])
        await asyncio.sleep(0.05 if live_s is None else 0.2)  # (load → live to ~0.1 s)
    cpu_s = cpu_dead + sum(process.cpu_times()[:2]) - cpu_before
    side.stop()
    got: list[tuple[str, int, int]] = await asyncio.to_thread(queue.get, True, 120)
    reader.join(timeout=30)
    due_ms = {key.decode(): d * 1000 for (key, _), d in zip(records, due, strict=True)}
    ids = {key for key, _, _ in got}
    lateness = [at - due_ms[key] for key, at, _ in got if key in due_ms]
    sent = [sent - due_ms[key] for key, _, sent in got if key in due_ms and sent]
    row: dict[str, Any] = {
        "side": side.name,
        "n": n,
        "load_to_live_s": None if live_s is None else round(live_s, 2),
        "produced_s": round(produced_s, 2),  # (of load → live: the bench's own producer's part)
        "missed": n - len(ids & set(due_ms)),
        "duplicates": len(got) - len(ids),
        "lateness_p50_ms": _percentile(lateness, 0.5),
        "lateness_p99_ms": _percentile(lateness, 0.99),
        "lateness_max_ms": max(lateness) if lateness else None,
        "sent_p50_ms": _percentile(sent, 0.5),  # (ours: due → sent, the rest is the commit and the read)
        "sent_p99_ms": _percentile(sent, 0.99),
        # deliveries a second from the first instant to the last arrival: n / window while it keeps up
        "delivered_per_s": round(len(got) * 1000 / max(1, max(at for _, at, _ in got) - t0)) if got else None,
        "rss_mb": round(rss_peak / 1e6),
        "cpu_s": round(cpu_s, 1),
    }
    if kill and restarted_at is not None:
        after = [at for _, at, _ in got if at >= restarted_at]
        row["killed"] = True
        row["restart_to_first_delivery_s"] = round((min(after) - restarted_at) / 1000, 2) if after else None
        row["silent_s"] = silence(sorted(at for _, at, _ in got), killed_at)
    return row


def silence(arrivals: list[int], killed_at: int) -> float | None:
    """The longest the reader went without a delivery from the kill on (s): from the last arrival before a
    gap to the first after it (ms, sorted). While a side runs something is delivered every due second, so
    this is how long the kill kept it from delivering, its restart, its group join and its reload included,
    whatever it calls ready (restart → first delivery counts from that)."""
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False) if b > killed_at]
    return round(max(gaps) / 1000, 2) if gaps else None


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| N | side | load → all live s | missed | dup | lateness p50 / p99 / max ms | RSS MB | CPU s "
            "| restart → first delivery s | silent after the kill s |")  # fmt: skip
    lines = [head, "|" + " --- |" * 10]
    for r in rows:
        lines.append(
            f"| {r['n']:,}{' + kill' if r.get('killed') else ''} | {r['side']} | {r['load_to_live_s']} | "
            f"{r['missed']} | {r['duplicates']} | {r['lateness_p50_ms']} / {r['lateness_p99_ms']} / "
            f"{r['lateness_max_ms']} | {r['rss_mb']} | {r['cpu_s']} | {r.get('restart_to_first_delivery_s', '–')} | {r.get('silent_s', '–')} |"
        )
    return "\n".join(lines)


@contextlib.contextmanager
def one_kafka(prefix: str) -> Iterator[tuple[Path, str]]:
    """A temporary directory with one Apache Kafka node (KRaft) in it: (the directory, its bootstrap);
    both gone after."""
    from scheduler.kafka.kafka_server import KafkaCluster

    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        with KafkaCluster(work / "kafka", nodes=1, heap_mb=1024) as cluster:
            yield work, cluster.bootstrap_servers
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from scheduler.kafka.kafka_server import KAFKA_VERSION

    rows: list[dict[str, Any]] = []
    with one_kafka("delayed-bench-") as (work, bootstrap):
        warmups: list[Any] = [] if args.only == "etf1" else [_Ours(bootstrap, work / "warmup")]
        if args.etf1 is not None and args.only != "ours":
            warmups.append(_Etf1(bootstrap, work / "warmup", args.etf1))
        for side in warmups:
            warm = await side_run(side, bootstrap, WARMUP_N, WARMUP_WINDOW_S, False, grace_s=3)
            print(f"(warm-up, not reported) {table([warm]).splitlines()[-1]}", flush=True)
        for n in args.n:
            for kill in [False, True] if args.kill else [False]:
                sides: list[Any] = [] if args.only == "etf1" else [_Ours(bootstrap, work / f"{n}-{kill}")]
                if args.etf1 is not None and args.only != "ours":
                    sides.append(_Etf1(bootstrap, work / f"{n}-{kill}", args.etf1))
                for side in sides:
                    rows.append(await side_run(side, bootstrap, n, args.window, kill))
                    print(table(rows[-1:]).splitlines()[-1], flush=True)
    command = f"python -m tests.bench.delayed --n {' '.join(map(str, args.n))} --window {args.window}"
    command += (" --kill" if args.kill else "") + (" --etf1 PATH" if args.etf1 else "")
    command += f" --only {args.only}" if args.only else ""
    return results(command, f"Apache Kafka {KAFKA_VERSION} (1 node); ours with transactions", rows)


def results(command: str, broker: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A run's rows with the command, the date, the machine and the broker."""
    return {
        "command": command,
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {psutil.cpu_count()} cores, "
        f"{psutil.virtual_memory().total / 2**30:.0f} GiB, Python {platform.python_version()}",
        "broker": broker,
        "rows": rows,
    }


def write(out: Path, name: str, run: dict[str, Any], table: Callable[[list[dict[str, Any]]], str]) -> None:
    """`name`.json and `name`.md (the table) under `out`; the table printed."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(run, indent=2) + "\n")
    text = f"{run['command']} — {run['date']}, {run['machine']}, {run['broker']}\n\n"
    (out / f"{name}.md").write_text(text + table(run["rows"]) + "\n")
    print((out / f"{name}.md").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[10_000])
    parser.add_argument("--window", type=int, default=60, help="seconds the due instants are spread over")
    parser.add_argument("--kill", action="store_true", help="also a run with a SIGKILL + restart mid-window")
    parser.add_argument("--etf1", type=Path, help="etf1's kafka binary (tests/bench/etf1.sh builds it)")
    parser.add_argument("--only", choices=("ours", "etf1"), help="one side alone")
    parser.add_argument("--out", type=Path, default=Path("tests/bench/results/delayed"))
    args = parser.parse_args()
    write(args.out, "delayed", asyncio.run(main_async(args)), table)


if __name__ == "__main__":
    main()
