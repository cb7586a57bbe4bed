"""One seed of the campaign: start what its plan chose, load the schedules, strike the faults, then check.

The checks, each against what a definition says and what the output topics hold (read_committed):
- missed: an instant a definition must fire (at or after its notBefore, set LEAD_S after the schedule was
  sent, and after the schedule became active: the scheduler fires no instant before its schedule existed)
  that never fired; for light-scheduler definitions (COALESCE: a takeover fires the latest of the instants
  it missed), only the instants due outside the faults' windows and a worker's join (its rebalance is a
  takeover too: seed 8100 coalesced two instants while the workers started during the load joined); for event-driven schedules, an
  acknowledged event (sent after its schedule was applied) in no launch request of its schedule;
- applied past the lead: an acknowledged schedule that became active more than LEAD_S after it was sent
  (counted and shown, with the longest send -> active time); one never shown is lost (a failure);
- duplicates: an instant fired twice; an event in two launch requests, a launch request sent twice;
- lost writes: an update acknowledged (over HTTP) that the schedule does not show at the end;
- the longest gap per fault kind: the longest a read_committed reader waited for an instant due around it;
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
from aiokafka import AIOKafkaProducer

from scheduler.client.http import HttpClient
from scheduler.wire.codec import encode
from scheduler.wire.fires import decode_fired
from scheduler.worker.liveness import LEFT_EXIT_CODE
from tests.campaign.check import (
    Fired,
    arrived,
    fault_windows,
    gaps,
    missing_events,
    missing_instants,
    tally_events,
)
from tests.campaign.expect import TENANT, Definition, definitions
from tests.campaign.plan import Fault, Plan, later_random
from tests.chaos import worker_processes
from tests.helpers import TopicReader, decode_launch, light_decode, produce, send_commands
from tests.netns import Lab

LEAD_S = 20.0  # a schedule's first instant to check comes this long after it was sent
SETTLE_S = 120.0  # after the faults: until every instant of the window fired, at most this long
LIST_WAIT_S = 240.0  # after the faults: until the schedules can be listed (every partition has an owner)
SETTLE_BETWEEN_S = 12.0  # a fault comes at least this long after the one before healed
REPEAT_GRACE_S = 5.0  # then this long more, for a repeat
HTTP_CHUNK = 100  # schedules created over HTTP at a time (each chunk's notBefore from when it is sent)
UPDATED = 10  # schedules updated over HTTP throughout (with updates on), checked for lost writes


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Campaign:
    def __init__(
        self, plan: Plan, bootstrap: str, work: Path, cluster: Any = None, lab: Lab | None = None
    ) -> None:
        """`lab`: a network namespace per worker, which a cut takes down (the brokers where they reach)."""
        self.plan = plan
        self.rnd = random.Random(plan.seed * 7919 + 1)  # (the plan's own draws stay as they were)
        self.bootstrap = bootstrap
        self.cluster = cluster
        self.work = work
        self.app_id = f"camp{uuid.uuid4().hex[:8]}"
        self.out = f"{self.app_id}-out"
        self.light_out = f"{self.app_id}-light-out"  # (light-scheduler's fires: TaskDefinitions)
        self.launches = f"{self.app_id}-launches"
        self.lab = lab
        env = {
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "SCHEDULER_BROKER_PROFILE": "kafka",
            "SCHEDULER_APP_ID": self.app_id,
            "SCHEDULER_PARTITIONS": "8",
            "SCHEDULER_LOG_LEVEL": os.environ.get("CAMPAIGN_LOG_LEVEL", "info"),
            "SCHEDULER_AUTH": "off",
            "SCHEDULER_STANDBY_REPLICAS": str(plan.standby),
            "SCHEDULER_REPLICATION_FACTOR": "3" if plan.brokers == 3 else "1",
            "SCHEDULER_LIGHT_TOPIC": f"{self.app_id}-light",
        }
        self.procs = worker_processes(env, work, plan.workers, lab)
        self.started: set[int] = set()
        self.ready: set[int] = set()  # started and answered ready once
        self.refused: set[str] = set()  # schedules whose creation was not acknowledged (not checked)
        self.faults_done: list[dict[str, Any]] = []
        self.joins: list[dict[str, Any]] = []  # a worker started while others ran: {worker, at, healedAt}
        self.joining: list[asyncio.Future[None]] = []
        self.stalls: list[dict[str, Any]] = []  # what /health said, per worker and loop
        self.left: list[dict[str, Any]] = []  # workers that left (exit 75), started again
        self.died: list[dict[str, Any]] = []  # workers that exited otherwise (a failure), started again
        self.never_ready: list[dict[str, Any]] = []  # a worker joining mid-run never ready (a failure)
        self.killed: set[int] = set()  # workers down by a kill fault now
        self.acked: dict[str, str] = {}  # updated schedule -> the value of its last acknowledged update
        # updated schedule -> values sent after it whose answer never came (each may or may not apply)
        self.unknown: dict[str, set[str]] = {}
        self.write_errors: Counter[str] = Counter()
        self.light: set[str] = set()  # schedules sent as light-scheduler TaskDefinitions
        self.events: dict[str, tuple[str, int]] = {}  # acknowledged event (its key) -> its schedule, sent
        self.sent_at: dict[str, int] = {}  # schedule -> when its definition was sent
        self.applied: dict[str, int] = {}  # schedule -> when it became active, as the scheduler shows it
        self.list_wait_s = 0.0  # how long listing them waited (every worker answered) after the faults

    # --- workers ----------------------------------------------------------------------------------

    def _start(self, i: int) -> None:
        self.procs[i].start()
        self.started.add(i)

    async def _ready(self, i: int) -> None:
        await asyncio.to_thread(self.procs[i].wait_ready, 150, 0)
        self.ready.add(i)

    async def _joined(self, i: int) -> None:
        """The worker joining mid-run is ready. A fault may kill it while it starts (seed 2020: a kill 2 s after
        its start): it is started again (by the fault, or the supervisor) and waited for again."""
        deadline = time.monotonic() + 150 + self.plan.duration_s
        while True:
            try:
                return await self._ready(i)
            except AssertionError as exc:  # (it exited)
                if time.monotonic() > deadline:  # a failure, reported with the rest (seed 4000, 2nd replay)
                    why = str(exc)[:300]
                    self.never_ready.append({"worker": i, "log": str(self.procs[i].log_path), "why": why})
                    return
                await asyncio.sleep(1)

    async def _join(self, i: int) -> None:
        """Start worker i while others run; its rebalance is a window like a fault's (from its start until it
        is ready), for the COALESCE schedules."""
        at = now_ms()
        self._start(i)
        await self._joined(i)
        self.joins.append({"worker": i, "at": at, "healedAt": now_ms()})

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
                self.joining.append(asyncio.ensure_future(self._join(i)))
                await asyncio.sleep(self.rnd.uniform(0.2, 2))

    def live_urls(self) -> list[str]:
        return [self.procs[i].url for i in sorted(self.ready)]

    # --- schedules --------------------------------------------------------------------------------

    async def load(self, defs: list[Definition], loading: asyncio.Event) -> list[Definition]:
        """Each definition by one of the plan's paths: the commands topic in bulk, or HTTP (bulk creates of
        HTTP_CHUNK, each waiting once, at its end, for every partition's last write). Each schedule's
        notBefore is LEAD_S after it was sent (a big bulk over HTTP takes a minute): returns the
        definitions as sent."""
        by_path: dict[str, list[Definition]] = {p: [] for p in (*self.plan.paths, "topic")}
        for d in defs:  # (light-scheduler's TaskDefinitions say frequencies only)
            light_ok = d.kind == "frequency" and not d.name.startswith("updated-")  # (updated over HTTP)
            fit = [p for p in self.plan.paths if p != "light" or light_ok] or ["topic"]
            by_path[self.rnd.choice(fit)].append(d)
        await self.register_programs([d.program for d in defs if d.program is not None])
        loading.set()
        sent: list[Definition] = []
        light_defs = [self._from_now(d) for d in by_path.get("light", [])]
        if light_defs:
            records: list[tuple[bytes | None, bytes]] = [
                d.task_definition(self.light_out) for d in light_defs
            ]
            await produce(self.bootstrap, f"{self.app_id}-light", records)
            self.light.update(d.name for d in light_defs)
            sent += light_defs
        topic_defs = [self._from_now(d) for d in by_path.get("topic", [])]
        if topic_defs:
            await send_commands(
                self.bootstrap, f"{self.app_id}-commands", *(d.command(self._topic(d)) for d in topic_defs)
            )
            sent += topic_defs
        http_defs = by_path.get("http", [])
        if http_defs:
            url = self.procs[self.rnd.choice(sorted(self.ready))].url
            async with HttpClient(url, timeout_s=30) as client:
                for i in range(0, len(http_defs), HTTP_CHUNK):
                    chunk = [self._from_now(d) for d in http_defs[i : i + HTTP_CHUNK]]
                    result = await client.create_many([d.body(self._topic(d)) for d in chunk], concurrency=8)
                    sent += chunk
                    for _, key, exc in result.failures:
                        self.write_errors[f"create {exc.status}"] += 1
                        self.refused.add(key.split("/", 1)[1])
                        print(f"  create {key} failed: {exc.summary()}", flush=True)
                    if result.applied is False:
                        self.write_errors["creates not applied within 30 s"] += 1
        return sent

    async def register_programs(self, programs: list[str]) -> None:
        """The event-driven schedules' programs (external: their launch requests are what is checked),
        registered and known to every ready worker before a schedule names them."""
        async with httpx.AsyncClient(timeout=10) as client:
            for p in programs:
                r = await client.put(f"{self.live_urls()[0]}/programs/{p}", json={"kind": "external"})
                r.raise_for_status()
            for url in self.live_urls():
                for p in programs:
                    deadline = time.monotonic() + 30
                    while (await client.get(f"{url}/programs/{p}")).status_code != 200:
                        if time.monotonic() > deadline:
                            raise TimeoutError(
                                f"{url} does not know program {p} 30 s after it was registered"
                            )
                        await asyncio.sleep(0.2)

    def _topic(self, d: Definition) -> str:
        return self.launches if d.program is not None else self.out

    def _from_now(self, d: Definition) -> Definition:
        """The definition with its first instant to check LEAD_S from now (its bounds moved alike)."""
        self.sent_at[d.name] = now_ms()
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

    async def event_loop(self, stop: asyncio.Event, defs: list[Definition]) -> None:
        """About every second, a new partition of a random event-driven schedule's dataset, on the events
        topic (acks=all); one acknowledged is checked (sent at or after the schedule's notBefore: applied)."""
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", request_timeout_ms=10_000)
        await producer.start()
        try:
            n = 0
            while not stop.is_set():
                await asyncio.sleep(self.rnd.uniform(0.5, 1.5))
                ready = [d for d in defs if d.not_before <= now_ms()]
                if not ready:
                    continue
                d, n = self.rnd.choice(ready), n + 1
                part = f"e{n:05d}"
                event = {"timestamp": now_ms(), "eventType": "partition",
                         "payload": {"datasetId": d.trigger["dataset"], "partitionKeys": f'["{part}"]'}}  # fmt: skip
                key = f"partition:{d.trigger['dataset']}".encode()
                sent = now_ms()
                try:
                    await producer.send_and_wait(
                        f"{self.app_id}-events", encode("Notification", event), key=key
                    )
                except Exception:  # (not acknowledged: it may or may not count; not checked)
                    self.write_errors["event unanswered"] += 1
                    continue
                self.events[part] = (d.name, sent)
        finally:
            await producer.stop()

    # --- faults -----------------------------------------------------------------------------------

    async def strike(self, fault: Fault) -> dict[str, Any]:
        kind, lasts = fault.kind, fault.lasts_s
        record: dict[str, Any] = {"kind": kind, "victim": fault.victim, "at": now_ms(), "lasts_s": lasts}
        if kind in ("kill", "pause", "cut"):
            victim = fault.victim
            if victim not in self.started:  # (the one joining mid-run, not started yet: another one)
                victim = sorted(self.started)[victim % len(self.started)]
                record["victim"] = victim
            w = self.procs[victim]
            if kind == "kill":
                self.killed.add(victim)
                w.kill()
                await asyncio.sleep(lasts)
                w.start()  # (same data dir)
                self.killed.discard(victim)
            elif kind == "cut":
                if self.lab is None:
                    raise ValueError("a network cut needs the workers in namespaces (a netns.Lab)")
                self.lab.namespaces[victim].cut()
                await asyncio.sleep(lasts)
                self.lab.namespaces[victim].heal()
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
        """The plan's faults at their times, but never one sooner than SETTLE_BETWEEN_S after the last
        healed (one that took longer than planned, waiting for the cluster first, moves the rest on: two
        brokers down at once is not a fault the campaign means to strike)."""
        healed = 0.0
        for fault in self.plan.faults:
            await asyncio.sleep(
                max(0.0, began + fault.at_s - time.monotonic(), healed + SETTLE_BETWEEN_S - time.monotonic())
            )
            print(f"  fault {fault.kind} #{fault.victim} for {fault.lasts_s:.0f} s", flush=True)
            self.faults_done.append(await self.strike(fault))
            healed = time.monotonic()

    async def health_loop(self, stop: asyncio.Event) -> None:
        """Every second, what each started worker's /health says of its loops; a worker that left (exit 75:
        a loop stalled past its bound) is started again, as its supervisor would."""
        open_stalls: dict[tuple[int, str], dict[str, Any]] = {}
        async with httpx.AsyncClient(timeout=2) as client:
            while not stop.is_set():
                for i in sorted(self.started):
                    proc = self.procs[i].proc
                    code = None if proc is None or i in self.killed else proc.poll()
                    if code is not None:  # (started again, as its supervisor would)
                        exited = {"worker": i, "at": now_ms(), "code": code}
                        (self.left if code == LEFT_EXIT_CODE else self.died).append(exited)
                        why = "left: a loop stalled past its bound" if code == LEFT_EXIT_CODE else "died"
                        print(f"  worker {i} {why} (exit {code}): started again", flush=True)
                        self.procs[i].start()
                        continue
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
            async with contextlib.AsyncExitStack() as readers:

                async def reader(topic: str, decoder: Any) -> TopicReader:
                    return await readers.enter_async_context(
                        TopicReader(
                            self.bootstrap, topic, decoder, read_committed=True, replication=replication
                        )
                    )

                fires = await reader(self.out, decode_fired)
                light = await reader(self.light_out, _light_fire)
                launches = await reader(self.launches, decode_launch)
                starting = asyncio.ensure_future(self.start_workers(loading))
                if plan.start != "during_load":
                    await starting
                else:
                    await self._ready(0)
                    self.started.add(0)
                not_before = now_ms() + int(LEAD_S * 1000)
                defs = definitions(plan.kinds, not_before, plan.duration_s, self.rnd, later_random(plan.seed))
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
                event_defs = [d for d in defs if d.program is not None]
                eventing = asyncio.ensure_future(self.event_loop(stop, event_defs)) if event_defs else None
                began = time.monotonic()
                window_start = now_ms()
                faults = asyncio.ensure_future(self.fault_loop(began))
                if plan.start == "joins_mid_run":
                    await asyncio.sleep(plan.duration_s / 2)
                    self.joining.append(asyncio.ensure_future(self._join(plan.workers - 1)))
                await asyncio.sleep(max(0.0, began + plan.duration_s - time.monotonic()))
                await faults  # (the last one heals)
                await asyncio.gather(*self.joining)
                window_end = now_ms() - 1000
                stop.set()
                acknowledged = await updating if updating is not None else 0
                if eventing is not None:
                    await eventing
                checked = [d for d in defs if d.name not in self.refused]
                self.applied = await self._applied()
                settled = time.monotonic() + SETTLE_S
                windows = fault_windows(self.faults_done + self.joins)

                def missing() -> bool:
                    got = Fired.of(arrived(fires), arrived(light))
                    lost = missing_instants(got, checked, window_end, self.applied, self.light, windows)
                    return bool(lost or missing_events(arrived(launches), self.events, self.applied))

                while time.monotonic() < settled and missing():
                    await asyncio.sleep(0.5)
                await asyncio.sleep(REPEAT_GRACE_S)
                records = [*arrived(fires), *arrived(light)]
                got = Fired.of(records)
                launched = arrived(launches)
                final = await self._final(updated)
                lost = missing_instants(got, checked, window_end, self.applied, self.light, windows)
                shown = await self._shown(list(lost)[:5])
                await watching
        finally:
            for p in self.procs:
                p.kill()
            if self.cluster is not None:
                for n in self.cluster.nodes:  # (a broker left paused by a failure would hang the next seed)
                    with contextlib.suppress(Exception):
                        self.cluster.kill(n.node_id, signal.SIGCONT)
            for ns in self.lab.namespaces if self.lab is not None else ():
                with contextlib.suppress(Exception):
                    ns.heal()
        report = self.check(checked, got, window_end, final, acknowledged, windows)
        report["missedShown"] = shown
        return {
            **report,
            **tally_events(launched, self.events, self.applied),
            "longestGapByFault": gaps(records, self.faults_done),
            "listWaitS": self.list_wait_s,
            "window": [window_start, window_end],
        }

    def _any_url(self) -> str:
        """A worker that runs (the final reads go through any: each answers for every schedule)."""
        running = [p for p in self.procs if p.proc is not None and p.proc.poll() is None]
        return self.rnd.choice(running or self.procs).url

    async def _applied(self) -> dict[str, int]:
        """When each schedule became active, as the scheduler shows it (retried through a rebalance; how
        long that took is reported: a worker still rebalancing a minute after the faults is a finding)."""
        started = time.monotonic()
        deadline = started + LIST_WAIT_S
        while True:
            try:
                async with HttpClient(self._any_url(), timeout_s=20) as client:
                    listed = {s["name"]: s["activeSince"] async for s in client.all_schedules(TENANT)}
                self.list_wait_s = round(time.monotonic() - started, 1)
                return listed
            except Exception as exc:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"the schedules could not be listed in {LIST_WAIT_S:.0f} s: {exc!r}"
                    ) from exc
                await asyncio.sleep(1)

    async def _shown(self, names: list[str]) -> dict[str, Any]:
        """What a worker shows of schedules that missed instants (when each became active, its version), and
        whether each came as a light-scheduler TaskDefinition (COALESCE; the others catch up EACH)."""
        out: dict[str, Any] = {}
        async with HttpClient(self._any_url(), timeout_s=20) as client:
            for name in names:
                try:
                    s = await client.schedule(TENANT, name)
                    out[name] = {k: s.get(k) for k in ("version", "activeSince", "createdAt", "updatedAt")}
                    out[name]["light"] = name in self.light
                except Exception as exc:
                    out[name] = repr(exc)
        return out

    async def _final(self, updated: list[Definition]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with HttpClient(self._any_url(), timeout_s=20) as client:
            for d in updated:
                with contextlib.suppress(Exception):
                    out[d.name] = (await client.schedule(TENANT, d.name))["data"]
        return out

    def check(
        self,
        defs: list[Definition],
        got: Fired,
        window_end: int,
        final: dict[str, Any],
        acknowledged: int,
        windows: list[tuple[int, int]],
    ) -> dict[str, Any]:
        applied = self.applied
        checked = sum(
            len(d.expected(window_end, applied.get(d.name, 0), d.name in self.light, windows)) for d in defs
        )
        lost = missing_instants(got, defs, window_end, applied, self.light, windows)
        beyond = {
            d.name: extra
            for d in defs
            if (extra := d.beyond(sorted(got.get(d.name, ())), applied.get(d.name, 0)))
        }
        shown = [d for d in defs if d.name in applied]
        # an acknowledged schedule applied after its first instant to check (LEAD_S after it was sent)
        late = [d for d in shown if applied[d.name] > d.not_before]
        apply_ms = [applied[d.name] - self.sent_at[d.name] for d in shown if d.name in self.sent_at]
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
            "lightSchedules": len(self.light),
            "missed": sum(len(v) for v in lost.values()),
            "missedExamples": {n: v[:5] for n, v in list(lost.items())[:5]},
            "duplicates": got.duplicates(),
            "duplicateExamples": got.duplicate_examples(),
            "beyondMaxFires": sum(len(v) for v in beyond.values()),
            "beyondMaxFiresExamples": {n: v[:5] for n, v in list(beyond.items())[:5]},
            "schedulesNotShown": len(defs) - len(shown),
            "appliedPastLead": len(late),
            "appliedPastLeadExamples": {d.name: applied[d.name] - d.not_before for d in late[:5]},
            "longestApplyMs": max(apply_ms, default=0),
            "writesAcknowledged": acknowledged,
            "lostWrites": len(lost_writes),
            "lostWriteExamples": dict(list(lost_writes.items())[:5]),
            "writeErrors": dict(self.write_errors),
            "schedulesNotAcknowledged": len(self.refused),
            "faults": self.faults_done,
            "joins": self.joins,
            "stalls": self.stalls,
            "stallsHealed": sum("healedAt" in s for s in self.stalls),
            "workersLeft": self.left,
            "workersDied": self.died,
            "workersNeverReady": self.never_ready,
            "logs": str(self.work),
        }


def _light_fire(value: bytes) -> dict[str, Any]:
    return light_decode("TaskDefinition", value)
