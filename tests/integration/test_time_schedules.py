"""Time schedules end to end on a real broker: commands in through the topic, fires out of the output topic."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from scheduler.domain.model import (
    Action,
    CatchUpPolicy,
    CronTrigger,
    FrequencyTrigger,
    Schedule,
    ScheduleCommand,
    ScheduleKey,
    TimeUnit,
)
from scheduler.wire.codec import encode_command, key_bytes
from scheduler.worker.punctuator import SEND_AHEAD_MS
from tests.helpers import SHORT_SESSION, TopicReader, fires_of, on_kafka, send_commands

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture
def worker(shared_worker):  # type: ignore[no-untyped-def]
    """The module's worker: each test names its schedules apart and reads a topic of its own (the restart
    test starts workers of its own)."""
    return shared_worker


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def every_second(name: str, topic: str, **kw) -> Schedule:  # type: ignore[no-untyped-def]
    return Schedule(
        ScheduleKey("acme", name), FrequencyTrigger(TimeUnit.SECONDS, 1), topic, enabled=True, **kw
    )


def insert(s: Schedule) -> ScheduleCommand:
    return ScheduleCommand(s.key, Action.INSERT, s)


@pytest.mark.embedded
async def test_every_second_frequency_and_six_field_cron_fire_on_their_due_times(broker, worker, app_id):
    out = f"{app_id}-out"
    start = (now_ms() // 1000 + 3) * 1000 + 250
    freq = Schedule(
        ScheduleKey("acme", "freq"),
        FrequencyTrigger(TimeUnit.SECONDS, 1, start),
        out,
        {"k": "v"},
        enabled=True,
    )
    cron = Schedule(ScheduleKey("acme", "cron"), CronTrigger("*/2 * * * * *", "UTC"), out, enabled=True)
    async with TopicReader(broker.bootstrap_servers, out) as reader:
        await send_commands(broker.bootstrap_servers, worker.topic("commands"), insert(freq), insert(cron))
        await reader.wait_for(lambda r: len(fires_of(r, "freq")) >= 4 and len(fires_of(r, "cron")) >= 4)
    f = fires_of(reader.records, "freq")
    assert [x.due_at for x in f[:4]] == [start + i * 1000 for i in range(4)]
    assert all(x.data == {"k": "v"} and x.job_id == f"acme/freq@{x.due_at}" for x in f)
    c = fires_of(reader.records, "cron")
    assert all(x.due_at % 2000 == 0 for x in c)
    assert [b.due_at - a.due_at for a, b in zip(c, c[1:])] == [2000] * (len(c) - 1)
    assert all(x.fired_at >= x.due_at and not x.catch_up for x in f + c)


@pytest.mark.embedded
async def test_no_fire_is_seen_before_its_instant_and_on_kafka_each_is_sent_ahead_of_it(
    broker, worker, app_id
):
    """With transactions an instant's fires are sent up to SEND_AHEAD_MS before it, firedAt = the instant,
    their partitions' transactions held until it: a read_committed reader sees none before the instant.
    Without them (Tansu) a fire is sent at its instant."""
    out = f"{app_id}-ahead"
    schedules = [every_second(f"ahead-{i}", out) for i in range(8)]
    async with TopicReader(broker.bootstrap_servers, out) as reader:
        await send_commands(broker.bootstrap_servers, worker.topic("commands"), *map(insert, schedules))
        await reader.wait_for(lambda r: len(r) >= 8 * 5)
        seen = list(zip(reader.raw, reader.records, reader.received, strict=True))
    early = [(f.key.name, f.due_at - at) for _, f, at in seen if at < f.due_at]
    assert not early, f"seen before their instant (schedule, ms early): {early[:5]}"
    assert all(f.fired_at >= f.due_at for _, f, _ in seen)
    if on_kafka():
        ahead = [f for m, f, _ in seen if m.timestamp < f.due_at]
        assert ahead, "no instant's fires were sent ahead of it"
        assert all(f.fired_at == f.due_at for f in ahead), "sent ahead, firedAt is the instant"


@pytest.mark.embedded
async def test_a_schedule_written_in_the_last_ms_before_an_instant_first_fires_at_it(broker, worker, app_id):
    """A schedule's first fire is the first instant after its activeSince, whenever in the second it was
    written. On Kafka an instant's fires are sent up to SEND_AHEAD_MS before it and their partition's
    watermark moves past it then: a schedule written in those milliseconds owes its fire at that instant,
    sent into the partition's transaction before it commits (worker/owed.py)."""
    out = f"{app_id}-owed"
    commands = worker.topic("commands")
    # every partition has fires at every instant, sent ahead of it
    await send_commands(
        broker.bootstrap_servers, commands, *(insert(every_second(f"bg-{i}", out)) for i in range(16))
    )
    await asyncio.sleep(2)
    names: list[str] = []
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    await producer.start()
    async with TopicReader(broker.bootstrap_servers, out) as reader:
        try:
            until = time.monotonic() + 4
            while time.monotonic() < until:  # one at a time, spread over the seconds
                name = f"new-{len(names):04d}"
                names.append(name)
                await producer.send_and_wait(
                    commands,
                    encode_command(insert(every_second(name, out))),
                    key=key_bytes(ScheduleKey("acme", name)),
                )
                await asyncio.sleep(0.005)
        finally:
            await producer.stop()
        await reader.wait_for(lambda r: set(names) <= {f.key.name for f in r}, timeout_s=30)
    first = {}
    for f in reader.records:
        first[f.key.name] = min(first.get(f.key.name, f.due_at), f.due_at)
    async with httpx.AsyncClient(base_url=worker.url, timeout=10) as client:
        since = {n: (await client.get(f"/schedules/acme/{n}")).json()["activeSince"] for n in names}
    skipped = [(n, since[n], first[n]) for n in names if first[n] != (since[n] // 1000 + 1) * 1000]
    assert not skipped, f"first fire not the first instant after activeSince: {skipped[:5]}"
    in_window = [n for n in names if since[n] % 1000 >= 1000 - SEND_AHEAD_MS]
    assert len(in_window) >= 3, (
        f"too few written in the last {SEND_AHEAD_MS} ms before an instant: {in_window}"
    )


@pytest.mark.embedded
async def test_schedules_updated_while_their_instants_are_sent_fire_once_at_each(broker, worker, app_id):
    """Every-second schedules updated without pause (~6,000 updates a second: more than the worker applies
    while it fires, so its timers run late too), at every point of the second, fire exactly once at each
    instant. On Kafka an update applied while an instant is being sent ahead, of a schedule already sent at
    it, does not arm it there again (the fault campaign's duplicate, seed 119), and one whose fire there was
    not sent yet owes it (worker/owed.py); with the timer late, a fire due before the update that replaced
    its version is sent as that version (held.still_due, Stager.overdue), once."""
    await _updated_while_sent_fire_once(broker, worker, f"{app_id}-busy", "busy")


async def test_limited_schedules_updated_while_their_instants_are_fired_fire_once_at_each(
    broker, worker, app_id
):
    """The same through the trigger agent (a `maxFires` schedule's fires are counted there): a fire made
    by the version an update replaced meanwhile keeps its instant (trigger_agent.instant_kept), once."""
    await _updated_while_sent_fire_once(broker, worker, f"{app_id}-limited", "limited", max_fires=1_000_000)


async def _updated_while_sent_fire_once(broker, worker, out: str, prefix: str, **kw) -> None:  # type: ignore[no-untyped-def]
    """(The module's worker is shared: each test's schedules have names of their own.)"""
    commands = worker.topic("commands")
    names = [f"{prefix}-{i:03d}" for i in range(600)]
    await send_commands(
        broker.bootstrap_servers, commands, *(insert(every_second(n, out, **kw)) for n in names)
    )
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers, linger_ms=1)
    await producer.start()
    async with TopicReader(broker.bootstrap_servers, out) as reader:
        try:
            await reader.wait_for(lambda r: set(names) <= {f.key.name for f in r}, timeout_s=30)
            start = now_ms()
            updates = 0
            while now_ms() < start + 5_000:  # up to 6 updates a millisecond: many in each sending
                for _ in range(30):
                    name = names[updates % len(names)]
                    updated = every_second(name, out, data={"v": str(updates)}, **kw)
                    await producer.send(
                        commands,
                        encode_command(ScheduleCommand(updated.key, Action.UPDATE, updated)),
                        key=key_bytes(updated.key),
                    )
                    updates += 1
                await asyncio.sleep(0.005)
            await producer.flush()
        finally:
            await producer.stop()
        end = now_ms()
        window = range((start // 1000 + 1) * 1000, (end // 1000 + 1) * 1000, 1000)  # updated through these
        await reader.wait_for(
            lambda r: len({f.key.name for f in r if f.due_at > window[-1] + 1000}) == len(names),
            timeout_s=30,
        )
    seen: dict[tuple[str, int], int] = {}
    for f in reader.records:
        seen[(f.key.name, f.due_at)] = seen.get((f.key.name, f.due_at), 0) + 1
    doubled = [(k, n) for k, n in seen.items() if n > 1]
    missed = [(name, due) for name in names for due in window if (name, due) not in seen]
    assert not doubled, f"{len(doubled)} fires doubled (schedule, instant), e.g. {doubled[:5]}"
    assert not missed, f"{len(missed)} instants missed, e.g. {missed[:5]}"


async def test_update_changes_the_cadence(broker, worker, app_id):
    out = f"{app_id}-out"
    s = every_second("u", out, data={"v": "1"})
    async with TopicReader(broker.bootstrap_servers, out) as reader:
        await send_commands(broker.bootstrap_servers, worker.topic("commands"), insert(s))
        await reader.wait_for(lambda r: len(r) >= 2)
        updated = Schedule(s.key, FrequencyTrigger(TimeUnit.SECONDS, 3), out, {"v": "2"}, enabled=True)
        await send_commands(
            broker.bootstrap_servers, worker.topic("commands"), ScheduleCommand(s.key, Action.UPDATE, updated)
        )
        await reader.wait_for(lambda r: len([x for x in r if x.data == {"v": "2"}]) >= 3, timeout_s=40)
    v2 = [x for x in reader.records if x.data == {"v": "2"}]
    assert [b.due_at - a.due_at for a, b in zip(v2, v2[1:])] == [3000] * (len(v2) - 1)
    first_v2 = reader.records.index(v2[0])
    assert all(x.data == {"v": "2"} for x in reader.records[first_v2:]), (
        "old cadence kept firing after UPDATE"
    )


async def test_delete_stops_fires(broker, worker, app_id):
    out = f"{app_id}-out"
    s = every_second("d", out)
    async with TopicReader(broker.bootstrap_servers, out) as reader:
        await send_commands(broker.bootstrap_servers, worker.topic("commands"), insert(s))
        await reader.wait_for(lambda r: len(r) >= 2)
        await send_commands(
            broker.bootstrap_servers, worker.topic("commands"), ScheduleCommand(s.key, Action.DELETE)
        )
        await asyncio.sleep(1.5)
        count = len(reader.records)
        await asyncio.sleep(3)
        assert len(reader.records) == count, "fires after DELETE"


async def test_a_schedule_deleted_and_created_again_fires_only_as_created_again(broker, worker, app_id):
    """An INSERT numbers its versions from 1 again: the deleted version 1's due-time index entry, beyond the
    horizon when it was deleted and before the new definition's first due, was loaded as the new one's and
    fired it at an instant of the deleted definition (due_index: an entry names its schedule's creation)."""
    out = f"{app_id}-again"
    first = (now_ms() // 1000 + 15) * 1000  # (beyond the 10 s horizon)
    key = ScheduleKey("acme", "again")
    old = Schedule(key, FrequencyTrigger(TimeUnit.SECONDS, 20, first), out, {"v": "old"}, enabled=True)
    new = Schedule(
        key, FrequencyTrigger(TimeUnit.SECONDS, 20, first + 10_000), out, {"v": "new"}, enabled=True
    )
    commands = worker.topic("commands")
    async with TopicReader(broker.bootstrap_servers, out) as reader:
        await send_commands(broker.bootstrap_servers, commands, insert(old))
        await asyncio.sleep(1)
        await send_commands(
            broker.bootstrap_servers, commands, ScheduleCommand(key, Action.DELETE), insert(new)
        )
        await reader.wait_for(lambda r: any(f.due_at == first + 10_000 for f in r), timeout_s=40)
    assert [(f.due_at - first, f.data) for f in reader.records] == [(10_000, {"v": "new"})]


async def test_an_output_topic_deleted_under_its_schedules_is_created_again_and_nothing_stalls(
    broker, start_worker, app_id
):
    """A topic deleted while schedules fire to it (an operator's clean-up): its records are failed at once,
    not retried for aiokafka's 40 s (for ever in a transaction, whose commit held every partition's fires),
    the partition's work is redone, and the next fire creates the topic again. A worker of its own: its
    partition is given up and taken again meanwhile."""
    worker = start_worker()
    out, gone = f"{app_id}-out", f"{app_id}-gone"
    schedules = [every_second(f"s{i}", out) for i in range(8)] + [every_second("g", gone)]
    async with TopicReader(broker.bootstrap_servers, out) as reader:
        await send_commands(broker.bootstrap_servers, worker.topic("commands"), *map(insert, schedules))
        await reader.wait_for(lambda r: all(len(fires_of(r, f"s{i}")) >= 2 for i in range(8)))
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
        await admin.start()
        try:
            await admin.delete_topics([gone])
        finally:
            await admin.close()
        before = {i: len(fires_of(reader.records, f"s{i}")) for i in range(8)}
        # (a stall lasted 40-60 s, then a rebalance; a few seconds now)
        await reader.wait_for(
            lambda r: all(len(fires_of(r, f"s{i}")) >= before[i] + 8 for i in range(8)), timeout_s=25
        )
    async with TopicReader(broker.bootstrap_servers, gone) as again:
        await again.wait_for(lambda r: len(fires_of(r, "g")) >= 2, timeout_s=20)


async def test_disable_pauses_and_enable_resumes_without_catching_up(broker, worker, app_id):
    out = f"{app_id}-out"
    s = every_second("p", out)
    commands = worker.topic("commands")
    async with TopicReader(broker.bootstrap_servers, out) as reader:
        await send_commands(broker.bootstrap_servers, commands, insert(s))
        await reader.wait_for(lambda r: len(r) >= 2)
        await send_commands(broker.bootstrap_servers, commands, ScheduleCommand(s.key, Action.DISABLE))
        await asyncio.sleep(1.5)
        paused_at, count = now_ms(), len(reader.records)
        await asyncio.sleep(3)
        assert len(reader.records) == count, "fires while disabled"
        await send_commands(broker.bootstrap_servers, commands, ScheduleCommand(s.key, Action.ENABLE))
        await reader.wait_for(lambda r: len(r) >= count + 2)
    resumed = reader.records[count:]
    assert all(not x.catch_up for x in resumed)
    assert resumed[0].due_at > paused_at + 3000, "a fire due while disabled was caught up"


@pytest.mark.embedded
@pytest.mark.serial
async def test_sigkill_restart_restores_the_table_and_catches_up_by_policy(
    broker, start_worker, app_id, tmp_path
):
    """Fires due while the only worker was dead: COALESCE gives exactly one, EACH every one, SKIP none."""
    out = f"{app_id}-out"
    commands = f"{app_id}-commands"
    schedules = {
        "coalesce": every_second("coalesce", out),
        "each": every_second("each", out, catch_up=CatchUpPolicy.EACH),
        "skip": every_second("skip", out, catch_up=CatchUpPolicy.SKIP),
    }
    first = start_worker(**SHORT_SESSION)
    async with TopicReader(broker.bootstrap_servers, out) as reader:
        await send_commands(broker.bootstrap_servers, commands, *(insert(s) for s in schedules.values()))
        await reader.wait_for(lambda r: all(len(fires_of(r, n)) >= 3 for n in schedules))
        first.kill()
        killed_at = now_ms()
        before = {n: len(fires_of(reader.records, n)) for n in schedules}
        await asyncio.sleep(4)
        # Same app id, empty data dir (as on another machine): the table comes back from its changelog.
        start_worker(SCHEDULER_DATA_DIR=str(tmp_path / "elsewhere"))
        await reader.wait_for(lambda r: all(len(fires_of(r, n)) >= before[n] + 3 for n in schedules), 60)

    coalesce = fires_of(reader.records, "coalesce")
    caught = [x for x in coalesce if x.catch_up]
    assert len(caught) == 1, caught
    assert caught[0].missed >= 3 and caught[0].due_at > killed_at
    after = coalesce[coalesce.index(caught[0]) :]
    assert [b.due_at - a.due_at for a, b in zip(after, after[1:])] == [1000] * (len(after) - 1)

    each = fires_of(reader.records, "each")
    dues = sorted({x.due_at for x in each})  # dedupe by job id: a replayed fire repeats its due
    assert dues == list(range(dues[0], dues[-1] + 1000, 1000)), "EACH left a due instant unfired"
    assert any(x.catch_up for x in each)

    skip = fires_of(reader.records, "skip")
    assert not any(x.catch_up for x in skip)
    gaps = [b.due_at - a.due_at for a, b in zip(skip, skip[1:])]
    assert max(gaps) >= 4000, "SKIP should leave the downtime unfired"
