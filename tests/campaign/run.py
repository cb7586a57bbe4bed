"""One seed of the campaign: start what its plan chose, load the schedules, strike the faults, then check.

The checks, each against what a definition says and what the output topic holds (read_committed):
- missed: an instant a definition must fire (at or after its notBefore, set LEAD_S after the schedule was
  sent: an acknowledged schedule must fire within that bound) that never fired;
- duplicates: an instant fired twice;
- lost writes: an update acknowledged (over HTTP) that the schedule does not show at the end;
- stalls: every time a worker's /health said a loop stalled, and whether it healed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import signal
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from scheduler.client.http import HttpClient
from tests.campaign.expect import TENANT, Definition, definitions
from tests.campaign.plan import Fault, Plan
from tests.helpers import TopicReader, WorkerProcess, send_commands

LEAD_S = 20.0  # a schedule's first instant to check comes this long after it was sent
SETTLE_S = 45.0  # after the faults: until every instant of the window fired, at most this long
REPEAT_GRACE_S = 5.0  # then this long more, for a repeat
HTTP_CHUNK = 100  # schedules created over HTTP at a time (each chunk's notBefore from when it is sent)
UPDATED = 10  # schedules updated over HTTP throughout (with updates on), checked for lost writes


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Campaign:
    def __init__(self, plan: Plan, bootstrap: str, work: Path, cluster: Any = None) -> None:
        self.plan = plan
        self.rnd = random.Random(plan.seed * 7919 + 1)  # (the plan's own draws stay as they were)
        self.bootstrap = bootstrap
        self.cluster = cluster
        self.work = work
        self.app_id = f"camp{uuid.uuid4().hex[:8]}"
        self.out = f"{self.app_id}-out"
        env = {
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "SCHEDULER_BROKER_PROFILE": "kafka",
            "SCHEDULER_APP_ID": self.app_id,
            "SCHEDULER_PARTITIONS": "8",
            "SCHEDULER_LOG_LEVEL": os.environ.get("CAMPAIGN_LOG_LEVEL", "warning"),
            "SCHEDULER_AUTH": "off",
            "SCHEDULER_STANDBY_REPLICAS": str(plan.standby),
            "SCHEDULER_REPLICATION_FACTOR": "3" if plan.brokers == 3 else "1",
        }
        self.procs = [
            WorkerProcess({**env, "SCHEDULER_DATA_DIR": str(work / f"w{i}")}, work / f"worker-{i}.log")
            for i in range(plan.workers)
        ]
        self.started: set[int] = set()
        self.ready: set[int] = set()  # started and answered ready once
        self.refused: set[str] = set()  # schedules whose creation was not acknowledged (not checked)
        self.faults_done: list[dict[str, Any]] = []
        self.stalls: list[dict[str, Any]] = []  # what /health said, per worker and loop
        self.acked: dict[str, str] = {}  # updated schedule -> the value of its last acknowledged update
        # updated schedule -> values sent after it whose answer never came (each may or may not apply)
        self.unknown: dict[str, set[str]] = {}
        self.write_errors: Counter[str] = Counter()

    # --- workers ----------------------------------------------------------------------------------

    def _start(self, i: int) -> None:
        self.procs[i].start()
        self.started.add(i)

    async def _ready(self, i: int) -> None:
        await asyncio.to_thread(self.procs[i].wait_ready, 150, 0)
        self.ready.add(i)

    async def start_workers(self, loading: asyncio.Event) -> None:
        """As the plan says: all at once, one by one, the rest during the load, or the last mid-run."""
        start, n = self.plan.start, self.plan.workers
        first = 1 if start in ("during_load", "one_by_one") else (n - 1 if start == "joins_mid_run" else n)
        for i in range(first):
            self._start(i)
            if start == "one_by_one":
                await self._ready(i)
        for i in range(first):
            await self._ready(i)
        if start == "one_by_one":
            for i in range(first, n):
                self._start(i)
                await self._ready(i)
        elif start == "during_load":
            await loading.wait()
            for i in range(first, n):
                self._start(i)
                await asyncio.sleep(self.rnd.uniform(0.2, 2))

    def live_urls(self) -> list[str]:
        return [self.procs[i].url for i in sorted(self.ready)]

    # --- schedules --------------------------------------------------------------------------------

    async def load(self, defs: list[Definition], loading: asyncio.Event) -> list[Definition]:
        """Each definition by one of the plan's paths: the commands topic in bulk, or HTTP (bulk creates of
        HTTP_CHUNK, each waiting once, at its end, for every partition's last write). Each schedule's
        notBefore is LEAD_S after it was sent (a big bulk over HTTP takes a minute): returns the
        definitions as sent."""
        by_path: dict[str, list[Definition]] = {p: [] for p in self.plan.paths}
        for d in defs:
            by_path[self.rnd.choice(self.plan.paths)].append(d)
        loading.set()
        sent: list[Definition] = []
        topic_defs = [self._from_now(d) for d in by_path.get("topic", [])]
        if topic_defs:
            await send_commands(
                self.bootstrap, f"{self.app_id}-commands", *(d.command(self.out) for d in topic_defs)
            )
            sent += topic_defs
        http_defs = by_path.get("http", [])
        if http_defs:
            url = self.procs[self.rnd.choice(sorted(self.ready))].url
            async with HttpClient(url, timeout_s=30) as client:
                for i in range(0, len(http_defs), HTTP_CHUNK):
                    chunk = [self._from_now(d) for d in http_defs[i : i + HTTP_CHUNK]]
                    result = await client.create_many([d.body(self.out) for d in chunk], concurrency=8)
                    sent += chunk
                    for _, key, exc in result.failures:
                        self.write_errors[f"create {exc.status}"] += 1
                        self.refused.add(key.split("/", 1)[1])
                        print(f"  create {key} failed: {exc.summary()}", flush=True)
                    if result.applied is False:
                        self.write_errors["creates not applied within 30 s"] += 1
        return sent

    def _from_now(self, d: Definition) -> Definition:
        """The definition with its first instant to check LEAD_S from now (its bounds moved alike)."""
        shift = now_ms() + int(LEAD_S * 1000) - d.not_before
        if shift <= 0:
            return d
        return dataclasses.replace(
            d, not_before=d.not_before + shift, not_after=None if d.not_after is None else d.not_after + shift
        )

    async def update_loop(self, stop: asyncio.Event, defs: list[Definition]) -> int:
        """PUT UPDATED schedules' data in turn through a random live worker, waiting until applied; returns
        how many were acknowledged (200: applied; a 504 is accepted too: it must show in the end)."""
        n = acks = 0
        async with httpx.AsyncClient(timeout=12) as client:
            while not stop.is_set():
                n += 1
                d = defs[n % len(defs)]
                body = {
                    k: v for k, v in d.body(self.out, {"v": str(n)}).items() if k not in ("tenant", "name")
                }
                url = f"{self.rnd.choice(self.live_urls())}/schedules/{TENANT}/{d.name}?wait=applied&waitMs=8000"
                try:
                    r = await client.put(
                        url, json=body, headers={"X-Request-Deadline": str(now_ms() + 3_000)}
                    )
                except httpx.HTTPError:  # (no answer: it may have been produced, and then applies)
                    self.write_errors["update unanswered"] += 1
                    self.unknown.setdefault(d.name, set()).add(str(n))
                    continue
                if r.status_code in (200, 504):  # (504: produced, not applied yet)
                    self.acked[d.name] = str(n)
                    self.unknown[d.name] = set()
                    acks += 1
                    if r.status_code == 504:
                        self.write_errors["update 504"] += 1
                else:
                    self.write_errors[f"update {r.status_code}"] += 1
                await asyncio.sleep(0.2)
        return acks

    # --- faults -----------------------------------------------------------------------------------

    async def strike(self, fault: Fault) -> dict[str, Any]:
        kind, lasts = fault.kind, fault.lasts_s
        record: dict[str, Any] = {"kind": kind, "victim": fault.victim, "at": now_ms(), "lasts_s": lasts}
        if kind in ("kill", "pause"):
            victim = fault.victim
            if victim not in self.started:  # (the one joining mid-run, not started yet: another one)
                victim = sorted(self.started)[victim % len(self.started)]
                record["victim"] = victim
            w = self.procs[victim]
            if kind == "kill":
                w.kill()
                await asyncio.sleep(lasts)
                w.start()  # (same data dir)
            else:
                w.pause()
                await asyncio.sleep(lasts)
                w.resume()
        else:
            cluster = self.cluster
            await asyncio.to_thread(cluster.wait_fully_replicated, 120)  # (the last one caught up)
            victim = cluster.active_controller() if kind == "controller_kill" else fault.victim
            record["victim"] = victim
            record["at"] = now_ms()
            if kind == "broker_pause":
                cluster.kill(victim, signal.SIGSTOP)
                await asyncio.sleep(lasts)
                cluster.kill(victim, signal.SIGCONT)
            else:
                cluster.kill(victim)
                await asyncio.sleep(lasts)
                cluster.start_node(victim)
        return {**record, "healedAt": now_ms()}

    async def fault_loop(self, began: float) -> None:
        for fault in self.plan.faults:
            await asyncio.sleep(max(0.0, began + fault.at_s - time.monotonic()))
            print(f"  fault {fault.kind} #{fault.victim} for {fault.lasts_s:.0f} s", flush=True)
            self.faults_done.append(await self.strike(fault))

    async def health_loop(self, stop: asyncio.Event) -> None:
        """Every second, what each started worker's /health says of its loops."""
        open_stalls: dict[tuple[int, str], dict[str, Any]] = {}
        async with httpx.AsyncClient(timeout=2) as client:
            while not stop.is_set():
                for i in sorted(self.started):
                    try:
                        health = (await client.get(f"{self.procs[i].url}/health")).json()
                    except (httpx.HTTPError, ValueError):
                        continue  # (down or paused)
                    now_stalled = {s["loop"]: s for s in health.get("stalled", [])}
                    for loop, s in now_stalled.items():
                        if (i, loop) not in open_stalls:
                            entry = {"worker": i, "loop": loop, "since": s["since"], "reason": s["reason"]}
                            open_stalls[(i, loop)] = entry
                            self.stalls.append(entry)
                    for (w, loop), entry in list(open_stalls.items()):
                        if w == i and loop not in now_stalled:
                            entry["healedAt"] = now_ms()
                            del open_stalls[(w, loop)]
                await asyncio.sleep(1)

    # --- the run ------------------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        plan = self.plan
        replication = 3 if plan.brokers == 3 else 1
        loading = asyncio.Event()
        try:
            async with TopicReader(
                self.bootstrap, self.out, read_committed=True, replication=replication
            ) as reader:
                starting = asyncio.ensure_future(self.start_workers(loading))
                if plan.start != "during_load":
                    await starting
                else:
                    await self._ready(0)
                    self.started.add(0)
                not_before = now_ms() + int(LEAD_S * 1000)
                defs = definitions(plan.kinds, not_before, plan.duration_s, self.rnd)
                updated = [
                    Definition(f"updated-{i:03d}", "frequency", {"type": "frequency", "timeUnit": "SECONDS",
                               "time": 1, "start": not_before - not_before % 1000}, not_before)
                    for i in range(UPDATED if plan.updates else 0)
                ]  # fmt: skip
                loaded = await self.load(defs + updated, loading)
                defs = [d for d in loaded if not d.name.startswith("updated-")]
                await starting
                stop = asyncio.Event()
                watching = asyncio.ensure_future(self.health_loop(stop))
                updating = asyncio.ensure_future(self.update_loop(stop, updated)) if updated else None
                began = time.monotonic()
                window_start = now_ms()
                faults = asyncio.ensure_future(self.fault_loop(began))
                if plan.start == "joins_mid_run":
                    await asyncio.sleep(plan.duration_s / 2)
                    self._start(plan.workers - 1)
                    joining = asyncio.ensure_future(self._ready(plan.workers - 1))
                await asyncio.sleep(max(0.0, began + plan.duration_s - time.monotonic()))
                await faults  # (the last one heals)
                if plan.start == "joins_mid_run":
                    await joining
                window_end = now_ms() - 1000
                stop.set()
                acknowledged = await updating if updating is not None else 0
                settled = time.monotonic() + SETTLE_S
                checked = [d for d in defs if d.name not in self.refused]
                while time.monotonic() < settled and _missing(reader.records, checked, window_end):
                    await asyncio.sleep(0.5)
                await asyncio.sleep(REPEAT_GRACE_S)
                records = list(reader.records)
                final = await self._final(updated)
                await watching
        finally:
            for p in self.procs:
                p.kill()
            if self.cluster is not None:
                for n in self.cluster.nodes:  # (a broker left paused by a failure would hang the next seed)
                    with contextlib.suppress(Exception):
                        self.cluster.kill(n.node_id, signal.SIGCONT)
        return self.check(defs, records, window_start, window_end, final, acknowledged)

    async def _final(self, updated: list[Definition]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with HttpClient(self.procs[0].url, timeout_s=20) as client:
            for d in updated:
                with contextlib.suppress(Exception):
                    out[d.name] = (await client.schedule(TENANT, d.name))["data"]
        return out

    def check(
        self,
        defs: list[Definition],
        records: list[Any],
        window_start: int,
        window_end: int,
        final: dict[str, Any],
        acknowledged: int,
    ) -> dict[str, Any]:
        fired: dict[str, Counter[int]] = {}
        for r in records:
            fired.setdefault(r.key.name, Counter())[r.due_at] += 1
        checked = missed = 0
        missed_examples: dict[str, list[int]] = {}
        for d in defs:
            if d.name in self.refused:
                continue
            expected = d.instants(0, window_end)
            got = fired.get(d.name, Counter())
            lost = [t for t in expected if t not in got]
            checked += len(expected)
            missed += len(lost)
            if lost and len(missed_examples) < 5:
                missed_examples[d.name] = lost[:5]
        duplicates = sum(c - 1 for counts in fired.values() for c in counts.values() if c > 1)
        # the last acknowledged update, or one sent after it whose answer never came
        lost_writes = {
            n: (v, final.get(n))
            for n, v in self.acked.items()
            if (final.get(n) or {}).get("v") not in {v, *self.unknown.get(n, ())}
        }
        return {
            "seed": self.plan.seed,
            "plan": self.plan.line(),
            "dueInstantsChecked": checked,
            "missed": missed,
            "missedExamples": missed_examples,
            "duplicates": duplicates,
            "writesAcknowledged": acknowledged,
            "lostWrites": len(lost_writes),
            "lostWriteExamples": dict(list(lost_writes.items())[:5]),
            "writeErrors": dict(self.write_errors),
            "schedulesNotAcknowledged": len(self.refused),
            "longestGapMsByFault": _gaps(records, self.faults_done),
            "faults": self.faults_done,
            "stalls": self.stalls,
            "stallsHealed": sum("healedAt" in s for s in self.stalls),
            "window": [window_start, window_end],
            "logs": str(self.work),
        }


def _missing(records: list[Any], defs: list[Definition], window_end: int) -> bool:
    fired: dict[str, set[int]] = {}
    for r in records:
        fired.setdefault(r.key.name, set()).add(r.due_at)
    return any(t not in fired.get(d.name, ()) for d in defs for t in d.instants(0, window_end))


def _gaps(records: list[Any], faults: list[dict[str, Any]]) -> dict[str, int]:
    """Per fault kind, the latest fire (fired - due) of the instants due from just before a fault until
    30 s after it healed, or until just before the next fault if that comes first."""
    out: dict[str, int] = {}
    starts = sorted(f["at"] for f in faults)
    for f in faults:
        if "skipped" in f:
            continue
        later = [t - 2_000 for t in starts if t > f["at"]]
        lo, hi = f["at"] - 2_000, min([f["healedAt"] + 30_000, *later[:1]])
        late = [r.fired_at - r.due_at for r in records if lo <= r.due_at < hi]
        if late:
            out[f["kind"]] = max(out.get(f["kind"], 0), max(late))
    return out
