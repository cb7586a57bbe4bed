"""The commands topic consumed a fetch at a time (scheduler/worker/ingest.py): where a worker starts reading it,
that a command is applied once across a restart (its offset is stored with the schedules' progress), and
that what the applied commands built is frozen out of the garbage collector's full collections."""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from scheduler.client import CommandProducer
from scheduler.domain.model import Action, CronTrigger, Schedule, ScheduleCommand, ScheduleKey
from scheduler.worker.failpoints import make_deaf
from tests.helpers import TopicReader, fires_of, metric, on_kafka, send_commands

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

#: 2026-01-01T00:00:00Z
T0 = 1_767_225_600_000
MINUTE = 60_000


def _yearly(name: str, topic: str) -> Schedule:
    """Fires on its own only on Jan 1st: what a test sees of it are its RUN and BACKFILL fires."""
    return Schedule(ScheduleKey("acme", name), CronTrigger("0 0 0 1 1 *"), topic)


async def _applied(url: str, n: int, timeout_s: float = 30) -> None:
    async with httpx.AsyncClient(base_url=url) as client:
        for _ in range(int(timeout_s / 0.1)):
            if (await client.get("/health")).json()["commandsApplied"] >= n:
                return
            await asyncio.sleep(0.1)
    raise AssertionError(f"{url}: fewer than {n} commands applied after {timeout_s}s")


@pytest.mark.embedded
async def test_a_command_is_applied_once_across_a_restart(broker, start_worker, workers, app_id, tmp_path):
    commands, out = f"{app_id}-commands", f"{app_id}-out"
    key = ScheduleKey("acme", "yearly")
    first = start_worker()
    async with TopicReader(broker.bootstrap_servers, out) as reader:
        await send_commands(
            broker.bootstrap_servers,
            commands,
            ScheduleCommand(key, Action.INSERT, _yearly("yearly", out)),
            ScheduleCommand(key, Action.RUN, fire_range=(T0, T0)),
            ScheduleCommand(key, Action.BACKFILL, fire_range=(T0 - MINUTE, T0 + MINUTE)),
        )
        got = await reader.wait_for(lambda r: len(fires_of(r, "yearly")) >= 2)
        assert sorted(f.due_at for f in fires_of(got, "yearly")) == [T0, T0]
        first.stop()  # clean: the fetch's offset is in the progress table's changelog

        # A new worker with an empty data dir: schedules and offsets come back from the changelogs, and
        # the RUN and BACKFILL already applied are not applied again.
        second = start_worker(SCHEDULER_DATA_DIR=str(tmp_path / "second"))
        await send_commands(
            broker.bootstrap_servers, commands, ScheduleCommand(key, Action.RUN, fire_range=(T0 + 1, T0 + 1))
        )
        await _applied(second.url, 1)
        got = await reader.wait_for(lambda r: any(f.due_at == T0 + 1 for f in fires_of(r, "yearly")))
        await asyncio.sleep(2)  # a replay of the earlier commands would land by now
        dues = sorted(f.due_at for f in fires_of(reader.records, "yearly"))
        assert dues.count(T0) == 2 and dues.count(T0 + 1) == 1, dues
        health = second.health()
        assert health is not None and health["commandsApplied"] == 1, health


@pytest.mark.embedded
async def test_a_worker_starts_where_the_apps_consumer_group_left_the_commands(broker, start_worker, app_id):
    """An upgrade from the per-message agent: a partition without a stored offset starts at the offset
    the app's consumer group committed, not at the beginning."""
    commands, out = f"{app_id}-commands", f"{app_id}-out"
    old = ScheduleCommand(ScheduleKey("acme", "old"), Action.INSERT, _yearly("old", out))
    await send_commands(broker.bootstrap_servers, commands, old)
    group = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap_servers, group_id=app_id, enable_auto_commit=False
    )
    await group.start()
    try:
        tps = [TopicPartition(commands, p) for p in range(4)]
        group.assign(tps)
        ends = await group.end_offsets(tps)
        assert sum(ends.values()) == 1
        await group.commit(ends)  # what the old agent would have committed after applying `old`
    finally:
        await group.stop()
    new = ScheduleCommand(ScheduleKey("acme", "new"), Action.INSERT, _yearly("new", out))
    await send_commands(broker.bootstrap_servers, commands, new)

    worker = start_worker()
    await _applied(worker.url, 1)
    async with httpx.AsyncClient(base_url=worker.url) as client:
        for _ in range(100):  # (with transactions a read shows what committed: a commit after the apply)
            if (await client.get("/schedules/acme/new")).status_code == 200:
                break
            await asyncio.sleep(0.1)
        assert (await client.get("/schedules/acme/new")).status_code == 200
        await asyncio.sleep(1)
        assert (await client.get("/schedules/acme/old")).status_code == 404
    health = worker.health()
    assert health is not None and health["commandsApplied"] == 1, health


async def _frozen(client: httpx.AsyncClient) -> float:
    """The commands applied when what they built was last frozen."""
    text = (await client.get("/metrics")).text
    found = re.search(r"^scheduler_gc_frozen_commands (\S+)$", text, re.M)
    assert found, "no scheduler_gc_frozen_commands in /metrics"
    return float(found.group(1))


@pytest.mark.embedded
async def test_what_applied_commands_built_is_frozen_once_the_topic_is_quiet(broker, start_worker, app_id):
    """Without it every full collection walks every schedule (~110 ms at 100,000, fires late behind it).
    (The number of frozen objects is no measure: transient objects frozen with them die meanwhile.)"""
    commands, out, n = f"{app_id}-commands", f"{app_id}-out", 2000
    worker = start_worker()
    async with httpx.AsyncClient(base_url=worker.url) as client:
        await send_commands(
            broker.bootstrap_servers,
            commands,
            *(
                ScheduleCommand(ScheduleKey("acme", f"y{i}"), Action.INSERT, _yearly(f"y{i}", out))
                for i in range(n)
            ),
        )
        await _applied(worker.url, n)
        for _ in range(50):
            if await _frozen(client) >= n:  # the last freeze came after the last command
                break
            await asyncio.sleep(0.1)
        assert await _frozen(client) >= n, await _frozen(client)


@pytest.mark.parametrize("transactions", ["on", "off"])
async def test_a_bulk_load_steps_aside_for_the_fires_each_command_applied_once_each_fire_sent_once(
    broker, start_worker, app_id, transactions
):
    """Issue 41 item 2: a fetch of commands is applied in steps that wait for the punctuator while it
    stages or fires (with transactions, a commit that holds sent fires also cuts the fetch's unit of work:
    it resumes in a unit of its own). How much that keeps fires on time is the benchmark's (`python -m
    tests.bench.scaleout --ingest N`); here, on Kafka with and without transactions: the commands stepped
    aside, each was applied once, and every fire due while they were applied was sent once."""
    if not on_kafka():
        pytest.fail("needs Apache Kafka (SCHEDULER_TEST_BROKER=kafka): transactions on and off")
    out, n_firing, n_bulk = f"{app_id}-out", 2_000, 20_000
    worker = start_worker(SCHEDULER_TRANSACTIONS=transactions)
    every_second = CronTrigger("* * * * * *")
    firing = [
        Schedule(ScheduleKey("acme", f"e{i}"), every_second, out, enabled=True) for i in range(n_firing)
    ]
    bulk = [_yearly(f"b{i}", f"{app_id}-bulk") for i in range(n_bulk)]
    async with (
        CommandProducer(broker.bootstrap_servers, app_id=app_id, partitions=4) as producer,
        TopicReader(broker.bootstrap_servers, out, start="latest") as reader,
    ):
        await producer.send_many(ScheduleCommand(s.key, Action.INSERT, s) for s in firing)
        await _applied(worker.url, n_firing, timeout_s=60)
        await reader.wait_for(lambda r: len(r) >= 2 * n_firing)  # (firing: the load starts mid-flow)
        first = (time.time_ns() // 1_000_000 // 1000 + 1) * 1000  # the first whole second of the load
        await producer.send_many(ScheduleCommand(s.key, Action.INSERT, s) for s in bulk)
        await _applied(worker.url, n_firing + n_bulk, timeout_s=120)
        last = time.time_ns() // 1_000_000 // 1000 * 1000  # the last second the load was applied in
        assert last >= first, "the load took less than a second: nothing checked"
        seconds = (last - first) // 1000 + 1
        got = await reader.wait_for(
            lambda r: sum(first <= f.due_at <= last for f in r) >= n_firing * seconds, timeout_s=60
        )
        await asyncio.sleep(1)  # (a repeated fire would land by now)
        fires = Counter((f.key.name, f.due_at) for f in got if first <= f.due_at <= last)
        assert len(fires) == n_firing * seconds, f"{n_firing * seconds - len(fires)} fires missed"
        assert set(fires.values()) == {1}, [k for k, n in fires.items() if n > 1][:5]
        async with httpx.AsyncClient(base_url=worker.url) as client:
            text = (await client.get("/metrics")).text
    assert metric(text, "scheduler_commands_yielded_total") > 0  # (the commands waited for the fires)
    assert metric(text, 'scheduler_commands_total{action="INSERT",result="applied"}') == n_firing + n_bulk
    assert "scheduler_dead_letters_total{" not in text, "a command was dead-lettered (applied twice?)"


class Harness:
    """A CommandIngest on a real broker, with a worker that only notes what it applies (and its watchdog)."""

    def __init__(self, broker: Any, app_id: str) -> None:
        from aiokafka import AIOKafkaProducer

        from scheduler.kafka.config import Settings
        from scheduler.kafka.producer import TopicCreator
        from scheduler.worker.counters import WorkerCounts
        from scheduler.worker.ingest import CommandIngest
        from scheduler.worker.liveness import Liveness
        from tests.unit.test_ingest import FlakyChangelogWorker

        self.topic = f"{app_id}-commands"
        worker = FlakyChangelogWorker(failures={})
        worker.settings = Settings(
            app_id=app_id, bootstrap_servers=broker.bootstrap_servers, commands_topic=self.topic,
            broker_profile=broker.profile,
        )  # fmt: skip
        worker.topics = TopicCreator(broker.bootstrap_servers, 4, 1)  # type: ignore[attr-defined]
        worker.progress_db = lambda partition: {}  # type: ignore[attr-defined]
        worker.counts = WorkerCounts()  # type: ignore[attr-defined]
        self.applied: list[tuple[bytes, int]] = []
        handle = worker.handle_command

        async def handle_and_note(event: Any) -> None:
            self.applied.append((event.message.key, event.message.partition))
            await handle(event)

        worker.handle_command = handle_and_note  # type: ignore[method-assign]
        self.producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers)
        self.ingest = CommandIngest(worker)
        self.liveness = Liveness(stall_after_s=2)
        self.liveness.watch(self.ingest)
        self.stalls_seen: list[list[dict[str, Any]]] = []

    async def __aenter__(self) -> Harness:
        self.run = asyncio.ensure_future(self.ingest.run())
        self.watch = asyncio.ensure_future(self.liveness.run(every_s=0.5))
        await self.producer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.watch.cancel()
        await self.producer.stop()
        await self.ingest.stop()
        await asyncio.wait_for(self.run, 10)

    async def send(self, name: str, partition: int) -> None:
        await self.producer.send_and_wait(self.topic, b"v", key=name.encode(), partition=partition)

    async def until_applied(self, n: int) -> None:
        for _ in range(300):
            if len(self.applied) >= n:
                return
            if self.liveness.stalled():
                self.stalls_seen.append(self.liveness.stalled())
            await asyncio.sleep(0.1)
        raise AssertionError(f"{len(self.applied)} of {n} commands applied after 30 s: {self.applied}")

    def expect(self, *names: tuple[str, int]) -> None:
        assert sorted(self.applied) == sorted((n.encode(), p) for n, p in names), self.applied

    async def hold_the_next_fetch(self, timeout_ms: int) -> asyncio.Event:
        """The loop's next fetch waits until the returned event is set (what is done meanwhile happens while
        it is out), then fetches for up to timeout_ms; returns once that fetch is out."""
        consumer = self.ingest._consumer
        assert consumer is not None
        real = consumer.getmany
        in_fetch, release = asyncio.Event(), asyncio.Event()

        async def held(*partitions: Any, max_records: int | None = None, **_: Any) -> Any:
            in_fetch.set()
            await release.wait()
            return await real(*partitions, timeout_ms=timeout_ms, max_records=max_records)

        consumer.getmany = held  # type: ignore[method-assign]
        await in_fetch.wait()
        consumer.getmany = real  # type: ignore[method-assign]  # (the fetches after this one)
        return release


async def test_a_commands_consumer_gone_deaf_is_found_stalled_replaced_and_reads_on(broker, app_id) -> None:
    """On a 3-node cluster a worker's commands consumer lost its group coordination at the first rebalance
    (aiokafka's coordination routine ended on an AssertionError: the assignment changed while it looked
    its coordinator up) and the worker applied nothing for minutes while it said it was ready. The consumer
    has no group now (the cause), and whatever else leaves a consumer deaf, the watchdog sees records
    waiting and none applied: the loop is stalled (the worker not ready), its consumer is replaced, and the
    commands after that are applied, each once, on the partitions kept after a revocation."""
    async with Harness(broker, app_id) as h:
        await h.ingest.assign({0, 1, 2, 3})
        for p in range(4):
            await h.send(f"before-{p}", p)
        await h.until_applied(4)
        assert await h.ingest.revoke({3})  # (the assignment changes: what killed a grouped consumer)
        consumer = h.ingest._consumer
        assert consumer is not None and consumer._group_id is None
        make_deaf(consumer)  # no error, no record: what a consumer whose fetcher or coordination died answers
        await asyncio.sleep(0.5)  # (a fetch in flight, a real one, ends with nothing)
        for p in range(3):
            await h.send(f"after-{p}", p)
        await h.until_applied(7)
        assert h.ingest._consumer is not consumer and h.ingest.replaced == 1
        assert h.stalls_seen and h.stalls_seen[0][0]["loop"] == "commands", h.stalls_seen
        assert "records behind the end of the commands partitions" in str(h.stalls_seen[0][0]["reason"])
        await asyncio.sleep(1.5)  # (nothing more comes: none applied twice; the watchdog sees it well)
        h.expect(*((f"before-{p}", p) for p in range(4)), *((f"after-{p}", p) for p in range(3)))
        assert h.liveness.stalled() == [] and h.liveness.states["commands"].heals == 1
        assert not h.run.done(), h.run


async def test_commands_that_arrive_during_a_fetch_cut_by_a_revocation_are_applied(broker, app_id) -> None:
    """A fetch in flight while some partitions are revoked is not applied (it may hold records of the
    revoked ones), but the consumer's position had passed its records: on the partitions kept, the
    commands that arrived during that fetch were skipped — acknowledged, never applied. They are fetched
    again now."""
    async with Harness(broker, app_id) as h:
        await h.ingest.assign({0, 1, 2, 3})
        for p in range(4):
            await h.send(f"before-{p}", p)
        await h.until_applied(4)
        # (the revocation and the new commands come while this fetch is out)
        revoked = await h.hold_the_next_fetch(timeout_ms=5000)
        assert await h.ingest.revoke({3})
        for p in range(3):
            await h.send(f"during-{p}", p)
        revoked.set()
        await h.until_applied(7)
        await asyncio.sleep(1)
        h.expect(*((f"before-{p}", p) for p in range(4)), *((f"during-{p}", p) for p in range(3)))
        assert h.ingest.replaced == 0


async def test_a_fetch_in_flight_when_every_partition_is_revoked_does_not_hold_the_next_assignment(
    broker, app_id
) -> None:
    """A worker that lost all its commands partitions unsubscribes its consumer; a fetch still out then
    waits inside aiokafka for the consumer's next assignment, which only the run loop itself makes: the
    loop waited for itself ("commands assignment not taken", seen by the fault campaign). A fetch is bounded
    now, and the partitions assigned again are taken and read."""
    async with Harness(broker, app_id) as h:
        await h.ingest.assign({0, 1})
        for p in range(2):
            await h.send(f"before-{p}", p)
        await h.until_applied(2)
        revoked = await h.hold_the_next_fetch(timeout_ms=200)  # (every partition is revoked while it is out)
        assert await h.ingest.revoke({0, 1})
        revoked.set()
        await asyncio.sleep(0.5)  # (the fetch is out, on a consumer with no subscription)
        await h.ingest.assign({0, 1})
        for p in range(2):
            await h.send(f"after-{p}", p)
        await h.until_applied(6)
        await asyncio.sleep(1)
        # (this harness stores no offsets: partitions assigned again are read from their beginning)
        before = [(f"before-{p}", p) for p in range(2)]
        h.expect(*before, *before, *((f"after-{p}", p) for p in range(2)))
