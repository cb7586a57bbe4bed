"""Delayed messages end to end (scheduler/worker/delayed.py): records produced to `<app>-delayed` with
etf1/kafka-message-scheduler's headers are delivered to their target topic at their instant, key, value and
headers intact; a tombstone cancels, a record of the same id replaces, a past instant delivers at once, a
record that names no instant is dead-lettered. On Kafka a read_committed reader sees each once, across the
owner's SIGKILL; on Tansu each at least once, with its id in a header."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaProducer

from scheduler.client.http import ApiError, HttpClient
from scheduler.client.kafka import CommandProducer
from tests.helpers import SHORT_SESSION, TopicReader, dead_letter, ensure_topic, metric, on_kafka, owned

pytestmark = [pytest.mark.integration, pytest.mark.embedded, pytest.mark.timeout(240)]


def _now() -> int:
    return time.time_ns() // 1_000_000


def _headers(at: int | str, topic: str, key: bytes | None = None, **more: bytes) -> list[tuple[str, bytes]]:
    out = [("scheduler-epoch", str(at).encode()), ("scheduler-target-topic", topic.encode())]
    if key is not None:
        out.append(("scheduler-target-key", key))
    return out + [(k.replace("_", "-"), v) for k, v in more.items()]


async def _send(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None, list[Any]]]) -> None:
    """Each (key, value, headers) in order, as an etf1 producer writes them (the default partitioner)."""
    await ensure_topic(bootstrap, topic)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        sent = [
            await producer.send(topic, value, key=key, headers=headers) for key, value, headers in records
        ]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


def _header(msg: Any, name: str) -> bytes | None:
    return next((v for k, v in msg.headers if k == name), None)


async def test_delayed_records_are_delivered_at_their_instant_cancelled_replaced_or_dead_lettered(
    broker, worker, app_id
):
    out = f"{app_id}-out"
    delayed = worker.topic("delayed")
    t0 = _now()
    due = t0 + 4_000
    refused = []
    if on_kafka():  # a legal name Kafka refuses to create: it collides with `-out_x` ('.' and '_' are alike)
        await ensure_topic(broker.bootstrap_servers, f"{app_id}-out_x")
        refused = [(b"m7", b"v7", _headers(t0, f"{app_id}-out.x"))]
    async with (
        TopicReader(broker.bootstrap_servers, out, decoder=lambda v: v) as reader,
        TopicReader(broker.bootstrap_servers, worker.topic("dead-letters"), decoder=dead_letter) as dead,
    ):
        await _send(broker.bootstrap_servers, delayed, [
            (b"m1", b"v1", _headers(due, out, b"k1", trace_id=b"abc")),  # ms
            (b"m2", b"v2", _headers(due, out)),
            (b"m2", None, []),  # cancelled
            (b"m3", b"v3-first", _headers(t0 + 120_000, out)),
            (b"m3", b"v3", _headers(due, out)),  # replaces the first, due much later
            (b"m4", b"v4", _headers((t0 - 30_000) // 1000, out)),  # etf1's seconds, past: at once
            (b"m5", b"v5", [("scheduler-target-topic", out.encode())]),  # no instant
            (b"m6", b"v6", _headers(due, "..")),  # a topic no broker takes
        ] + refused)  # fmt: skip
        records = await reader.wait_for(lambda r: len(r) >= 3, timeout_s=30)
        await asyncio.sleep(3)  # (what must not come: m2, m3's first version, a repeat)
        got = {bytes(_header(m, "scheduler-id") or b""): m for m in reader.raw}
        records = list(reader.raw)
        reasons = [
            d["reason"] for d in await dead.wait_for(lambda r: len(r) >= 2 + len(refused), timeout_s=10)
        ]

    ids = Counter(bytes(_header(m, "scheduler-id") or b"") for m in records)
    assert ids == Counter({b"m1": 1, b"m3": 1, b"m4": 1}), ids
    m1 = got[b"m1"]
    assert (m1.key, m1.value) == (b"k1", b"v1")
    assert _header(m1, "trace-id") == b"abc" and _header(m1, "scheduler-epoch") == str(due).encode()
    delivered_at = int(_header(m1, "scheduler-delivered-at") or b"0")
    assert delivered_at >= due, f"m1 delivered {due - delivered_at} ms early"
    assert (got[b"m3"].key, got[b"m3"].value) == (b"m3", b"v3"), "the replacement is what is delivered"
    assert int(_header(got[b"m4"], "scheduler-delivered-at") or b"0") < due, (
        "a past instant waits for nothing"
    )
    assert any("scheduler-epoch" in r for r in reasons), reasons
    assert any("scheduler-target-topic must be 1-249 characters" in r for r in reasons), reasons
    if refused:
        assert any(f"the broker refuses to create topic {app_id}-out.x" in r for r in reasons), reasons


async def test_no_message_is_seen_before_its_instant_and_on_kafka_each_instant_is_sent_ahead_of_it(
    broker, worker, app_id
):
    """With transactions an instant's deliveries are sent up to SEND_AHEAD_MS before it, their partitions'
    transactions held until it: a read_committed reader sees none before the instant (only the commit is
    left after it). Without them (Tansu) a delivery is sent at its instant."""
    out = f"{app_id}-ahead"
    first = (_now() // 1000 + 4) * 1000
    instants = [first + i * 1000 for i in range(5)]
    records = [
        (f"a{i}-{j}".encode(), b"v", _headers(at, out)) for i, at in enumerate(instants) for j in range(20)
    ]
    async with TopicReader(broker.bootstrap_servers, out, decoder=lambda v: v) as reader:
        await _send(broker.bootstrap_servers, worker.topic("delayed"), records)
        await reader.wait_for(lambda r: len(r) >= len(records), timeout_s=30)
        seen = list(zip(reader.raw, reader.received, strict=True))

    def instant(m: Any) -> int:
        return int(_header(m, "scheduler-epoch") or b"0")

    early = [(m.key, instant(m) - at) for m, at in seen if at < instant(m)]
    assert not early, f"seen before their instant (key, ms early): {early[:5]}"
    if on_kafka():
        ahead = {instant(m) for m, _ in seen if m.timestamp < instant(m)}
        assert ahead, "no instant's deliveries were sent ahead of it"
        stamped = {int(_header(m, "scheduler-delivered-at") or b"0") for m, _ in seen if instant(m) in ahead}
        assert stamped <= set(instants), (
            f"sent ahead, they say they were delivered at their instant: {stamped}"
        )
        async with httpx.AsyncClient(base_url=worker.url, timeout=10) as client:
            page = (await client.get("/metrics")).text
        assert metric(page, "scheduler_held_commit_lag_seconds_count") > 0, "held commits are measured"


async def test_a_message_written_after_deliveries_moved_on_and_due_before_them_is_delivered_at_once(
    broker, worker, app_id
):
    """Each partition's scans start where its last delivery ended (not at the front of its keys, a run of
    deleted ones): a message written later with an instant before that point — past due, or a replacement
    moved earlier — must still be found."""
    out = f"{app_id}-out"
    delayed = worker.topic("delayed")
    ids = [f"first-{i}".encode() for i in range(16)]  # (ids over every partition)
    async with TopicReader(broker.bootstrap_servers, out, decoder=lambda v: v) as reader:
        await _send(
            broker.bootstrap_servers, delayed, [(k, b"v", _headers(_now() + 1_500, out)) for k in ids]
        )
        await reader.wait_for(lambda r: len(r) >= 16, timeout_s=30)
        await asyncio.sleep(1)  # (a few more delivery turns: each partition's scans start past them)
        past = [f"past-{i}".encode() for i in range(16)]
        moved = [f"moved-{i}".encode() for i in range(16)]
        await _send(broker.bootstrap_servers, delayed, [
            *[(k, b"late", _headers(_now() - 5_000, out)) for k in past],
            *[(k, b"later", _headers(_now() + 600_000, out)) for k in moved],
            *[(k, b"earlier", _headers(_now() - 5_000, out)) for k in moved],  # (replaced: due in the past)
        ])  # fmt: skip
        await reader.wait_for(lambda r: len(r) >= 48, timeout_s=30)
        await asyncio.sleep(2)  # (what must not come: a repeat)
        delivered = Counter(bytes(_header(m, "scheduler-id") or b"") for m in reader.raw)
        values = {bytes(_header(m, "scheduler-id") or b""): m.value for m in reader.raw}
    if on_kafka():  # (exactly once for a read_committed reader; Tansu: at least once)
        assert delivered == Counter(ids + past + moved), delivered
    assert set(delivered) == set(ids + past + moved), delivered
    assert all(values[k] == b"earlier" for k in moved), values


@pytest.mark.serial
async def test_a_burst_of_delayed_messages_survives_its_owner_killed_mid_window(
    broker, start_worker, app_id, tmp_path
):
    """2,000 messages due over 12 s on two workers; one is SIGKILLed mid-window: every message arrives, and
    on Kafka a read_committed reader sees each exactly once (on Tansu repeats carry the same id)."""
    out = f"{app_id}-burst"
    a = start_worker(**SHORT_SESSION)
    b = start_worker(partitions=1, SCHEDULER_DATA_DIR=str(tmp_path / "b"), **SHORT_SESSION)
    n = 2_000
    t0 = _now() + 3_000
    records = [(f"b{i:05d}".encode(), f"v{i}".encode(), _headers(t0 + i * 6, out)) for i in range(n)]
    async with TopicReader(broker.bootstrap_servers, out, decoder=lambda v: v) as reader:
        await _send(broker.bootstrap_servers, b.topic("delayed"), records)
        while _now() < t0 + 5_000:
            await asyncio.sleep(0.1)
        victim = b if owned(b) else a
        victim.kill()
        await reader.wait_for(lambda r: len({bytes(_header(m, "scheduler-id") or b"") for m in reader.raw}) >= n,
                              timeout_s=90)  # fmt: skip
        await asyncio.sleep(3)
        seen = Counter(bytes(_header(m, "scheduler-id") or b"") for m in reader.raw)
    assert set(seen) == {key for key, _, _ in records}
    repeated = {k: c for k, c in seen.items() if c > 1}
    if on_kafka():
        assert not repeated, f"{len(repeated)} delivered twice, e.g. {list(repeated.items())[:5]}"
    early = [
        m
        for m in reader.raw
        if int(_header(m, "scheduler-delivered-at") or b"0") < int(_header(m, "scheduler-epoch") or b"0")
    ]
    assert not early, f"{len(early)} delivered before their instant"


async def test_a_worker_on_an_empty_data_dir_restores_the_pending_messages_in_bulk_and_delivers_them(
    broker, start_worker, app_id, tmp_path
):
    """The delayed messages' changelog, far behind (here: more than 40 records), is read by the bulk
    restore's own consumer rather than a record at a time by Faust's: every message is pending again, and
    those due are delivered, once on Kafka."""
    out = f"{app_id}-restored"
    first = start_worker()
    soon, later = _now() + 15_000, _now() + 3_600_000
    records = [(f"r{i:03d}".encode(), b"v", _headers(soon if i < 20 else later, out)) for i in range(300)]
    await _send(broker.bootstrap_servers, first.topic("delayed"), records)
    async with httpx.AsyncClient(base_url=first.url, timeout=10) as client:
        await _stats_when(client, 300)
    first.stop()
    async with TopicReader(broker.bootstrap_servers, out, decoder=lambda v: v) as reader:
        fresh = start_worker(
            SCHEDULER_DATA_DIR=str(tmp_path / "fresh"), SCHEDULER_BULK_RESTORE_MIN_RECORDS="40"
        )
        health = fresh.health() or {}
        assert health.get("bulkRestoredRecords", 0) >= 600 * 3 // 4, health  # (a tail may be Faust's)
        await reader.wait_for(lambda r: len(r) >= 20, timeout_s=60)
        await asyncio.sleep(2)  # (what must not come: a repeat)
        async with httpx.AsyncClient(base_url=fresh.url, timeout=10) as client:
            await _stats_when(client, 280)
    delivered = Counter(bytes(_header(m, "scheduler-id") or b"") for m in reader.raw)
    assert set(delivered) == {f"r{i:03d}".encode() for i in range(20)}, delivered
    if on_kafka():
        assert max(delivered.values()) == 1, delivered


async def _stats_when(client: httpx.AsyncClient, pending: int) -> dict[str, Any]:
    """GET /stats/messages once it counts `pending` messages, every partition counted."""
    deadline = time.monotonic() + 30
    while True:
        r = await client.get("/stats/messages", params={"limit": 3})
        if r.status_code == 200 and r.json()["pending"] == pending and not r.json()["counting"]:
            return r.json()
        assert time.monotonic() < deadline, r.text
        await asyncio.sleep(0.3)


async def test_pending_messages_are_counted_by_topic_and_due_minute_as_they_come_and_go_and_after_a_restart(
    broker, start_worker, app_id
):
    worker = start_worker()
    soon, minute = _now() + 3_000, 60_000
    later = (_now() // minute + 5) * minute  # the start of a minute 4-5 minutes from now
    records = [(f"a{i}".encode(), b"x", _headers(later + i % 3 * minute, f"{app_id}-a")) for i in range(30)]
    records += [(f"b{i}".encode(), b"x", _headers(later + 10 * minute, f"{app_id}-b")) for i in range(20)]
    records += [(f"c{i}".encode(), b"x", _headers(soon, f"{app_id}-c")) for i in range(5)]
    await _send(broker.bootstrap_servers, worker.topic("delayed"), records)
    async with httpx.AsyncClient(base_url=worker.url, timeout=10) as client:
        stats = await _stats_when(client, 55)
        assert stats["byTopic"] == {f"{app_id}-a": 30, f"{app_id}-b": 20, f"{app_id}-c": 5}, stats
        first = soon // minute * minute
        assert stats["byMinute"][0] == {"at": first, "count": 5}, stats
        assert stats["byMinute"][1:] == [{"at": later, "count": 10}, {"at": later + minute, "count": 10}]
        assert stats["beyond"] == 30
        await _send(broker.bootstrap_servers, worker.topic("delayed"), [(b"a0", None, [])])  # cancelled
        stats = await _stats_when(client, 49)  # (and the 5 due soon delivered)
        assert stats["byTopic"] == {f"{app_id}-a": 29, f"{app_id}-b": 20}, stats
        metrics = (await client.get("/metrics")).text
        assert f'scheduler_delayed_pending{{topic="{app_id}-a"}} 29.0' in metrics
        assert 'scheduler_delayed_pending_due{within="1h"} 49.0' in metrics
        assert "scheduler_delayed_pending_counting 0.0" in metrics
    worker.stop()
    worker = start_worker()  # (its data dir: the partitions are counted again from the store)
    async with httpx.AsyncClient(base_url=worker.url, timeout=10) as client:
        again = await _stats_when(client, 49)
    assert again == stats


async def test_over_http_a_message_is_held_shown_cancelled_and_delivered(broker, worker, app_id):
    out = f"{app_id}-http"
    due = _now() + 3_000
    async with (
        TopicReader(broker.bootstrap_servers, out, decoder=lambda v: v) as reader,
        httpx.AsyncClient(base_url=worker.url, timeout=10) as client,
    ):
        body = {"id": "h1", "topic": out, "deliverAt": due, "key": "k", "valueBase64": "AAE=",
                "headers": {"source": "test"}}  # fmt: skip
        r = await client.post("/messages", json=body)
        assert r.status_code == 202, r.text
        assert r.json() == {"id": "h1", "deliverAt": due}
        r = await client.post("/messages", json={**body, "id": "h2", "value": "gone", "valueBase64": None})
        assert r.status_code == 202, r.text
        deadline = time.monotonic() + 10
        while (r := await client.get("/messages/h1")).status_code != 200:  # (held once the worker read it)
            assert time.monotonic() < deadline, r.text
            await asyncio.sleep(0.2)
        shown = r.json()
        assert (shown["topic"], shown["deliverAt"], shown["key"], shown["valueBase64"]) == (
            out,
            due,
            "k",
            "AAE=",
        )
        assert shown["headers"]["source"] == "test" and shown["status"] == "pending"
        assert (await client.delete("/messages/h2")).status_code == 202
        for bad in ("not a topic", ".", ".."):  # (Kafka refuses the last two; a record for one would wait)
            r = await client.post("/messages", json={**body, "topic": bad})
            assert r.status_code == 400 and r.json()["fields"][0]["field"] == "topic", (bad, r.text)
        await reader.wait_for(lambda r: len(r) >= 1, timeout_s=20)
        await asyncio.sleep(2)
        assert (await client.get("/messages/h1")).status_code == 404, "a delivered message is forgotten"
        assert (await client.get("/messages/h2")).status_code == 404, "a cancelled message is forgotten"
        metrics = (await client.get("/metrics")).text
    assert [(m.key, m.value, _header(m, "scheduler-id")) for m in reader.raw] == [(b"k", b"\x00\x01", b"h1")]
    assert 'scheduler_delayed_total{outcome="delivered"} 1.0' in metrics
    assert 'scheduler_delayed_total{outcome="cancelled"} 1.0' in metrics


async def test_the_client_library_sends_replaces_and_cancels_delayed_messages(broker, worker, app_id):
    """CommandProducer.send_at / cancel onto the delayed topic, HttpClient.send_at / message / cancel."""
    out = f"{app_id}-lib"
    due = _now() + 3_000
    async with (
        TopicReader(broker.bootstrap_servers, out, decoder=lambda v: v) as reader,
        CommandProducer(broker.bootstrap_servers, app_id=app_id, partitions=4) as producer,
        HttpClient(worker.url) as api,
    ):
        await producer.send_at("lib-1", out, b"first", due + 60_000)
        await producer.send_at("lib-1", out, b"one", due, key=b"k1", headers=[("h", b"1")])  # replaces
        await producer.send_at("lib-2", out, b"two", due)
        await producer.cancel("lib-2")
        await api.send_at("lib-3", out, "three", due, headers={"h": "3"})
        await api.send_at("lib-4", out, b"\x00four", due)
        deadline = time.monotonic() + 10
        while True:  # (held once the owner read it)
            try:
                shown = await api.message("lib-4")
                break
            except ApiError as exc:
                assert exc.status == 404 and time.monotonic() < deadline, exc
                await asyncio.sleep(0.2)
        assert shown["valueBase64"] == "AGZvdXI=" and shown["deliverAt"] == due
        await _listed_in_due_order(api, out, due)
        await api.cancel("lib-4")
        await reader.wait_for(lambda r: len(r) >= 2, timeout_s=20)
        await asyncio.sleep(2)
    got = sorted((_header(m, "scheduler-id"), m.key, m.value, _header(m, "h")) for m in reader.raw)
    assert got == [(b"lib-1", b"k1", b"one", b"1"), (b"lib-3", b"lib-3", b"three", b"3")]


def test_the_cli_sends_shows_and_cancels_a_delayed_message(worker):
    from tests.integration.test_cli import cli

    sent = cli(
        worker.url, "messages", "send", "cli-1", "cli-out", "--at", "+1h", "--value", "v", "--header", "a=b"
    )
    assert sent.returncode == 0 and "cli-1: delivered to cli-out at" in sent.stdout, sent.stderr
    deadline = time.monotonic() + 15
    while (shown := cli(worker.url, "messages", "get", "cli-1", "--json")).returncode != 0:
        assert time.monotonic() < deadline and "404" in shown.stderr + shown.stdout, shown.stderr
        time.sleep(0.3)
    body = json.loads(shown.stdout)
    assert (body["topic"], body["headers"]["a"], body["valueBase64"]) == ("cli-out", "b", "dg==")
    listed = cli(worker.url, "messages", "list", "--due-before", "+2h", "--topic", "cli-out", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [m["id"] for m in json.loads(listed.stdout)["messages"]] == ["cli-1"]
    stats = cli(worker.url, "messages", "stats", "--limit", "5")
    assert stats.returncode == 0 and stats.stdout.startswith("1 pending"), stats.stdout + stats.stderr
    assert re.search(r"^cli-out +1$", stats.stdout, re.M), stats.stdout
    assert cli(worker.url, "messages", "cancel", "cli-1").returncode == 0
    bad = cli(worker.url, "messages", "send", "cli-2", "cli-out", "--at", "soon")
    assert bad.returncode != 0 and "+30s" in bad.stderr, bad.stderr


async def _listed_in_due_order(api: HttpClient, out: str, due: int) -> None:
    """GET /messages: what is pending on every worker, due first, paged; dueBefore and topic filter it."""
    later = [(f"list-{i}", due + 600_000 + i * 1000) for i in range(5)]
    for id, at in reversed(later):
        await api.send_at(id, out, b"x", at)
    deadline = time.monotonic() + 15
    while True:  # (lib-1, 3 and 4 are listed too, until they are delivered)
        pending = [m async for m in api.all_messages(topic=out, limit=2)]
        if sum(m["id"].startswith("list-") for m in pending) == 5:
            break
        assert time.monotonic() < deadline, pending
        await asyncio.sleep(0.2)
    assert [(m["id"], m["deliverAt"]) for m in pending[-5:]] == later
    assert [m["deliverAt"] for m in pending] == sorted(m["deliverAt"] for m in pending)
    first = await api.messages(due_before=due + 601_000, topic=out)
    assert [m["id"] for m in first["messages"]][-2:] == ["list-0", "list-1"] and first["next"] is None
    assert (await api.messages(topic="elsewhere"))["messages"] == []
    for id, _ in later:
        await api.cancel(id)
