"""Bad input at scale: thousands of malformed and hostile messages (tests/fuzz_inputs.py) interleaved with
valid ones on the commands, light-scheduler and events topics of one worker. The worker stays up, every
bad message is dead-lettered exactly once with a reason, every good one takes effect. Seeded: the seed is
printed; FUZZ_SEED=<seed> replays it.

The embedded broker (Tansu) takes records of 20 MiB and more (measured), so what refuses an oversized
message here is the worker's own limit, MAX_MESSAGE_BYTES.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import MessageSizeTooLargeError

from scheduler.domain.model import MAX_NAME_LEN
from scheduler.wire.codec import MAX_MESSAGE_BYTES, decode, key_bytes
from scheduler.wire.light import command_from_task_definition
from tests.fuzz_inputs import (
    COMMANDS,
    EVENTS,
    LIGHT,
    Message,
    hostile,
    seed,
    valid_command,
    valid_partition_event,
    valid_task_definition,
    verdict,
)
from tests.helpers import Api, TopicReader, WorkerProcess, dead_letter

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

HOSTILE = {COMMANDS: 1_500, LIGHT: 600, EVENTS: 900}
VALID = {COMMANDS: 180, LIGHT: 60, EVENTS: 60}
UNWATCHED = 40
KNOWN = "fzok.clicks"  # the one dataset a schedule triggers on
TENANT = "fz-ok"
_UNICODE = ["", "-café", "-日本", "-🚀", "-👩‍💻", "-ñandú"]


def _alive(worker: WorkerProcess) -> bool:
    assert worker.proc is not None and worker.proc.poll() is None, f"the worker died:\n{worker.log_tail()}"
    return True


def _identity(topic: str, key: bytes | None, value: bytes | None) -> tuple[str, str, bytes | None]:
    """How a dead letter names the message it stands for: its (head of) value, or its key if none."""
    if value is None:
        return (topic, "key", key)
    return (topic, "value", value[:MAX_MESSAGE_BYTES])


async def test_thousands_of_hostile_messages_are_dead_lettered_once_each_and_the_valid_ones_apply(
    broker, start_worker, app_id
):
    fuzz_seed = seed()
    print(f"FUZZ_SEED={fuzz_seed}")
    rng = random.Random(fuzz_seed)
    worker = start_worker()
    topic_of = {
        COMMANDS: f"{app_id}-commands",
        LIGHT: f"{app_id}-light-scheduler",
        EVENTS: f"{app_id}-events",
    }
    out = f"{app_id}-fuzz-out"
    bootstrap = broker.bootstrap_servers

    # The bad messages, each with the identity its dead letter must carry (unique, or the message is
    # dropped), and the rare ones the oracle accepts (random bytes that happen to be valid) left out.
    expected: dict[tuple[str, str, bytes | None], Message] = {}
    n = target = 0
    for topic, count in HOSTILE.items():
        target += count
        while len(expected) < target:
            n += 1
            msg = hostile(rng, topic, n, KNOWN)
            refusal = verdict(msg)
            if refusal is None:
                continue
            if refusal.downstream:  # refused as the command it became: named by that command's key
                cmd = command_from_task_definition(msg.value)
                ident = _identity(topic_of[COMMANDS], key_bytes(cmd.key), None)
            else:
                ident = _identity(topic_of[topic], msg.key, msg.value)
            expected.setdefault(ident, msg)
    valid = [valid_command(TENANT, f"cmd-{i}{_UNICODE[i % 6]}", out) for i in range(VALID[COMMANDS])]
    valid += [valid_task_definition(TENANT, f"light-{i}{_UNICODE[i % 6]}", out) for i in range(VALID[LIGHT])]
    valid_names = {f"cmd-{i}{_UNICODE[i % 6]}" for i in range(VALID[COMMANDS])}
    valid_names |= {f"light-{i}{_UNICODE[i % 6]}" for i in range(VALID[LIGHT])}
    events = [valid_partition_event(KNOWN, f"2026-01-{i:04d}") for i in range(VALID[EVENTS])]
    # events of datasets nobody watches: counted, not dead-lettered
    unwatched = [valid_partition_event(f"fz.unknown{i}", "p") for i in range(UNWATCHED)]
    assert all(verdict(m) is None for m in valid + events + unwatched)
    messages = [*expected.values(), *valid, *events, *unwatched]
    rng.shuffle(messages)
    print(
        f"{len(expected)} hostile ({Counter(m.kind for m in expected.values()).most_common()}), "
        f"{len(valid) + len(events)} valid"
    )

    async with (
        Api(worker.url) as api,
        TopicReader(bootstrap, f"{app_id}-dead-letters", dead_letter) as dead,
        # FiredTasks of the commands' schedules, TaskDefinitions of light-scheduler's: read by their keys
        TopicReader(bootstrap, out, decoder=lambda value: value) as fires,
    ):
        # The valid events feed one schedule: a job once all of them arrived, held there by a delay.
        await api.create(
            {
                "tenant": TENANT,
                "name": "clicks-etl",
                "trigger": {"type": "partition", "dataset": KNOWN, "minPartitions": VALID[EVENTS]},
                "program": f"{TENANT}/pipelines/spark/clicks-etl",
                "topic": f"{app_id}-launches",
                "constraints": [{"type": "delay", "delayMs": 3_600_000}],
            }
        )
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=8 * 1_048_576, linger_ms=5)
        await producer.start()
        try:
            acks = [await producer.send(topic_of[m.topic], m.value, key=m.key) for m in messages]
            outcomes = await asyncio.gather(*acks, return_exceptions=True)
        finally:
            await producer.stop()
        # A broker refuses a record over its own limit (Apache Kafka's max.message.bytes, 1 MiB by default;
        # Tansu takes 100 MiB): such a message never reaches the worker, so it has no dead letter.
        refused = [m for m, o in zip(messages, outcomes) if isinstance(o, MessageSizeTooLargeError)]
        assert all(m.kind.endswith("/oversized") for m in refused), [m.kind for m in refused]
        assert not [
            o
            for o in outcomes
            if isinstance(o, BaseException) and not isinstance(o, MessageSizeTooLargeError)
        ]
        for ident in [i for i, m in expected.items() if any(m is r for r in refused)]:
            del expected[ident]

        await dead.wait_for(lambda r: _alive(worker) and len(r) >= len(expected), timeout_s=240)
        await fires.wait_for(
            lambda _: valid_names <= {decode("ScheduleKey", m.key)["name"] for m in fires.raw}, timeout_s=60
        )
        jobs = await api.wait_jobs(
            lambda j: len(j["jobs"]) == 1, timeout_s=60, schedule=f"{TENANT}/clicks-etl"
        )
        progress = await api.progress(TENANT, "clicks-etl")
        listed = (await api.client.get("/schedules", params={"tenant": TENANT, "limit": "1000"})).json()
        await _http_limits(api)
        health = worker.health()

    assert _alive(worker) and health is not None and health["status"] == "ok"

    # every bad message dead-lettered exactly once, with a reason; nothing else dead-lettered
    seen: Counter[tuple[str, str, bytes | None]] = Counter()
    strays = []
    for record in dead.records:
        assert record["reason"], record
        assert not record["reason"].startswith("internal error"), record["reason"]
        ids = [
            _identity(record["topic"], record["key"], record["value"]),
            (record["topic"], "key", record["key"]),
        ]
        match = next((i for i in ids if i in expected), None)
        if match is None:
            strays.append(record)
        else:
            seen[match] += 1
    assert not strays, f"dead letters of no bad message: {[(r['topic'], r['reason']) for r in strays[:5]]}"
    missing = [expected[i].kind for i in expected if seen[i] == 0]
    assert not missing, f"not dead-lettered: {Counter(missing)}"
    assert [i for i, c in seen.items() if c > 1] == []
    assert health["deadLetters"] == len(expected)
    assert health["unwatched"] == UNWATCHED

    # every valid schedule listed and fired; the valid events made one job, and nothing else counted
    assert valid_names <= {s["name"] for s in listed["schedules"]}
    assert listed["total"] == len(valid_names) + 1
    (job,) = jobs["jobs"]
    assert job["events"] == VALID[EVENTS] and job["blockedBy"] == "DelayConstraint"
    assert progress["jobsCreated"] == 1 and progress["trigger"]["partitions"] == 0


async def _http_limits(api: Api) -> None:
    """The same limits over HTTP, refused up front: 400 naming the field, 413 for a body over aiohttp's
    1 MiB (no dead letter: nothing reaches a topic)."""
    deep = (  # JSON nested 10,000 deep: Python's JSON parser gives up (RecursionError) before we look
        '{"tenant":"fz","name":"deep","topic":"t","trigger":'
        + '{"type":"and","triggers":[' * 10_000
        + '{"type":"cron","expression":"* * * * *"}'
        + "]}" * 10_000
        + "}"
    )
    nested_9 = {"type": "cron", "expression": "* * * * *"}
    for _ in range(9):
        nested_9 = {"type": "and", "triggers": [nested_9]}
    bodies = {
        "deep": (deep, 400),
        "nested-9": (json.dumps(_schedule_body(trigger=nested_9, program="fz/a/b/c")), 400),
        "long-name": (json.dumps(_schedule_body(name="n" * (MAX_NAME_LEN + 1))), 400),
        "data-entries": (json.dumps(_schedule_body(data={f"k{i}": "v" for i in range(257)})), 400),
        "unicode-cron": (
            json.dumps(_schedule_body(trigger={"type": "cron", "expression": "١ * * * *"})),
            400,
        ),
        "surrogate": (json.dumps(_schedule_body(name="bad\\ud800")).replace("\\\\ud800", "\\ud800"), 400),
        "2-MB-body": (json.dumps(_schedule_body(data={"big": "x" * 2_000_000})), 413),
    }
    for what, (body, status) in bodies.items():
        r = await api.client.post("/schedules", content=body, headers={"content-type": "application/json"})
        assert r.status_code == status, (what, r.status_code, r.text[:300])
    payload = {"datasetId": KNOWN, "partitionKeys": '["x"]', "x": "é" * 40_000}  # 80 KB, 40k characters
    r = await api.client.post("/events", json={"eventType": "partition", "payload": payload})
    assert r.status_code == 400, r.text


def _schedule_body(**fields: Any) -> dict[str, Any]:
    return {
        "tenant": "fz",
        "name": "http",
        "topic": "fz-out",
        "trigger": {"type": "cron", "expression": "* * * * *"},
        **fields,
    }
