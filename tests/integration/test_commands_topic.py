"""The commands topics as producers use them: light-scheduler's raw Avro, and every kind of bad input."""

from __future__ import annotations

import asyncio
from functools import partial

import httpx
import pytest
from aiokafka import AIOKafkaProducer

from scheduler.domain.model import (
    Action,
    CronTrigger,
    FrequencyTrigger,
    Schedule,
    ScheduleCommand,
    ScheduleKey,
    TimeUnit,
)
from scheduler.kafka.partitioner import kafka_partition
from scheduler.wire.codec import encode, encode_command, key_bytes, key_to_avro
from tests.helpers import (
    TopicReader,
    dead_letter,
    ensure_topic,
    fires_of,
    light_decode,
    light_encode,
    on_kafka,
    produce,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.mark.embedded
async def test_light_scheduler_task_definition_produced_as_raw_avro_is_scheduled_and_fires_what_light_scheduler_sends(
    broker, worker, app_id
):
    """A producer and a consumer that know only seed 001's schemas: the definition goes in on the
    light-scheduler topic, and its topic gets the TaskDefinition back at each fire, start = the fire time,
    keyed by its TaskDefinitionKey (light-scheduler's punctuator), not our FiredTask."""
    out = f"{app_id}-light-out"
    key = light_encode("TaskDefinitionKey", {"host": "networknt.com", "name": "petstore-cleanup"})
    definition = {
        "host": "networknt.com",
        "name": "petstore-cleanup",
        "action": "INSERT",
        "frequency": {"timeUnit": "SECONDS", "time": 1},
        "topic": out,
        "start": None,
        "data": {"serviceId": "petstore"},
    }
    task_definition = partial(light_decode, "TaskDefinition")
    async with TopicReader(broker.bootstrap_servers, out, task_definition) as reader:
        await produce(
            broker.bootstrap_servers,
            f"{app_id}-light-scheduler",
            [(key, light_encode("TaskDefinition", definition))],
        )
        await reader.wait_for(lambda r: len(r) >= 3)
        await produce(
            broker.bootstrap_servers,
            f"{app_id}-light-scheduler",
            [(key, light_encode("TaskDefinition", {**definition, "action": "DELETE"}))],
        )
        await asyncio.sleep(1.5)
        count = len(reader.records)
        await asyncio.sleep(2.5)
    fires = reader.records
    assert {light_decode("TaskDefinitionKey", m.key)["name"] for m in reader.raw} == {"petstore-cleanup"}
    assert all(f == {**definition, "start": f["start"]} for f in fires), fires[0]
    starts = [f["start"] for f in fires]
    assert all(s % 1000 == 0 for s in starts) and len(set(starts)) == len(starts)
    assert len(fires) == count, "light-scheduler DELETE did not stop the fires"


def _good(name: str, topic: str) -> ScheduleCommand:
    s = Schedule(ScheduleKey("acme", name), FrequencyTrigger(TimeUnit.SECONDS, 1), topic, enabled=True)
    return ScheduleCommand(s.key, Action.INSERT, s)


def _raw_insert(name: str, trigger: tuple[str, dict], topic: str) -> bytes:
    """An INSERT encoded field by field, so the test can write what our own records refuse to hold."""
    return encode(
        "ScheduleCommand",
        {
            "key": {"tenant": "acme", "name": name},
            "action": "INSERT",
            "schedule": {
                "tenant": "acme",
                "name": name,
                "trigger": trigger,
                "topic": topic,
                "data": {},
                "enabled": True,
                "catchUp": "COALESCE",
                "catchUpWindowMs": 60000,
            },
        },
    )


@pytest.mark.embedded
async def test_each_kind_of_bad_command_is_dead_lettered_and_good_commands_still_apply(
    broker, worker, app_id
):
    out = f"{app_id}-out"
    k = lambda name: key_bytes(ScheduleKey("acme", name))  # noqa: E731
    good_1 = encode_command(_good("good-1", out))
    unknown_action = bytearray(encode_command(ScheduleCommand(ScheduleKey("acme", "x"), Action.DELETE)))
    unknown_action[len(b"\x08acme\x02x")] = 2 * 7  # action index 7: a symbol our schema does not have
    bad = {
        "undecodable": (k("u"), b"\xff\xfe not avro at all"),
        # (cut inside its topic name: a cut at a field boundary may be a whole command of an earlier
        # release, whose schedule ended before the fields added since, and is applied as one)
        "truncated": (k("good-2"), (whole := encode_command(_good("good-2", out)))[: len(whole) // 2]),
        "unknown action": (k("x"), bytes(unknown_action)),
        "invalid cron": (
            k("c"),
            _raw_insert("c", ("scheduler.CronTrigger", {"expression": "61 * * * *", "timezone": "UTC"}), out),
        ),
        "invalid time zone": (
            k("z"),
            _raw_insert(
                "z", ("scheduler.CronTrigger", {"expression": "* * * * *", "timezone": "Mars/Olympus"}), out
            ),
        ),
        "update of missing": (
            k("m"),
            encode_command(
                ScheduleCommand(ScheduleKey("acme", "m"), Action.UPDATE, _good("m", out).schedule)
            ),
        ),
        "delete of missing": (
            k("n"),
            encode_command(ScheduleCommand(ScheduleKey("acme", "n"), Action.DELETE)),
        ),
        "missing schedule": (
            k("s"),
            encode(
                "ScheduleCommand",
                {"key": {"tenant": "acme", "name": "s"}, "action": "INSERT", "schedule": None},
            ),
        ),
        "missing field": (k("f"), encode("ScheduleKey", key_to_avro(ScheduleKey("acme", "f")))),
        # a name no broker takes: a fire for it would wait for metadata that never comes
        "topic named .": (k("d"), encode_command(_good("d", "."))),
    }
    if on_kafka():  # a legal name Kafka refuses to create: it collides with `-out_x` ('.' and '_' are alike)
        bad["topic the broker refuses"] = (k("r"), encode_command(_good("r", f"{app_id}-out.x")))
    expected_reason = {
        "undecodable": "not a valid Avro ScheduleCommand",
        "truncated": "not a valid Avro ScheduleCommand",
        "unknown action": "unknown enum symbol",
        "invalid cron": "trigger.expression",
        "invalid time zone": "trigger.timezone",
        "update of missing": "does not exist",
        "delete of missing": "does not exist",
        "missing schedule": "INSERT needs a schedule",
        "missing field": "not a valid Avro ScheduleCommand",
        "topic named .": "topic: must be 1-249 characters",
        "topic the broker refuses": f"the broker refuses to create topic {app_id}-out.x: InvalidTopicError",
    }
    records = (
        [(k("good-1"), good_1)] + list(bad.values()) + [(k("good-3"), encode_command(_good("good-3", out)))]
    )
    async with (
        TopicReader(broker.bootstrap_servers, f"{app_id}-dead-letters", dead_letter) as dlq,
        TopicReader(broker.bootstrap_servers, out) as fires,
    ):
        await ensure_topic(broker.bootstrap_servers, f"{app_id}-out_x")
        await produce(broker.bootstrap_servers, f"{app_id}-commands", records)
        await dlq.wait_for(lambda r: len(r) >= len(bad))
        await fires.wait_for(lambda r: len(fires_of(r, "good-1")) >= 2 and len(fires_of(r, "good-3")) >= 2)
    by_value = {d["value"]: d for d in dlq.records}
    assert len(dlq.records) == len(bad)
    for kind, (key, value) in bad.items():
        d = by_value[value]  # the original bytes, unchanged
        assert d["key"] == key and d["topic"] == f"{app_id}-commands"
        assert expected_reason[kind] in d["reason"], (kind, d["reason"])
    assert not fires_of(fires.records, "good-2")


async def test_a_command_keyed_otherwise_is_moved_to_the_partition_that_owns_it(broker, worker, app_id):
    out = f"{app_id}-out"
    cmd = ScheduleCommand(
        ScheduleKey("acme", "rekeyed"),
        Action.INSERT,
        Schedule(ScheduleKey("acme", "rekeyed"), CronTrigger("* * * * * *"), out, enabled=True),
    )
    async with TopicReader(broker.bootstrap_servers, out) as fires:
        await produce(
            broker.bootstrap_servers, f"{app_id}-commands", [(b"a plain string key", encode_command(cmd))]
        )
        await fires.wait_for(lambda r: len(r) >= 2)
    r = httpx.get(f"{worker.url}/schedules/acme/rekeyed")
    assert r.status_code == 200 and r.json()["key"] == "acme/rekeyed"


async def test_a_moved_command_that_turns_out_invalid_is_dead_lettered_with_its_original_key_and_position(
    broker, worker, app_id
):
    commands = f"{app_id}-commands"
    bad = {  # name -> (the key its producer gave it, the command)
        "never-inserted": (
            b"a plain string key",
            encode_command(ScheduleCommand(ScheduleKey("acme", "never-inserted"), Action.DELETE)),
        ),
        "bad-cron": (
            None,
            _raw_insert(
                "bad-cron", ("scheduler.CronTrigger", {"expression": "61 * * * *", "timezone": "UTC"}), "out"
            ),
        ),
    }
    owners = {kafka_partition(key_bytes(ScheduleKey("acme", name)), worker.partitions) for name in bad}
    wrong = min(set(range(worker.partitions)) - owners)  # a partition that owns neither schedule key
    fillers = [b"\xff filler %d" % i for i in range(3)]  # so the original offsets are not the moved ones'
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    await producer.start()
    async with TopicReader(broker.bootstrap_servers, f"{app_id}-dead-letters", dead_letter) as dlq:
        try:
            for value in fillers:
                await producer.send_and_wait(commands, value, partition=wrong)
            produced = {
                value: (key, await producer.send_and_wait(commands, value, key=key, partition=wrong))
                for key, value in bad.values()
            }
        finally:
            await producer.stop()
        await dlq.wait_for(lambda r: len(r) >= len(fillers) + len(bad))
        await asyncio.sleep(1)  # and no more
    assert len(dlq.records) == len(fillers) + len(bad)
    by_value = {d["value"]: (d, msg.key) for d, msg in zip(dlq.records, dlq.raw)}
    for value, (key, at) in produced.items():
        d, kafka_key = by_value[value]
        assert (d["topic"], d["partition"], d["offset"], d["key"]) == (commands, wrong, at.offset, key)
        assert kafka_key == key  # the dead-letter record itself is keyed by the original key too
    assert "does not exist" in by_value[bad["never-inserted"][1]][0]["reason"]
    assert "trigger.expression" in by_value[bad["bad-cron"][1]][0]["reason"]
