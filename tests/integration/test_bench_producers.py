"""The producers benchmark sends what it says it measures (it reports CPU per record: the count must be right),
through both producers and both modes, on a real broker."""

from __future__ import annotations

import argparse
import uuid

import pytest

from scheduler.kafka.producer import TopicCreator
from tests.bench.producers import MODES, PARTITIONS, SIDES, count_committed, run_side

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("side", SIDES)
async def test_each_side_delivers_every_record_once_to_a_read_committed_reader(broker, side, mode):
    if broker.profile != "kafka":
        pytest.fail(f"the producers benchmark needs Apache Kafka (transactions), not {broker.profile}")
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    await TopicCreator(broker.bootstrap_servers, PARTITIONS, 1).ensure(topic)
    args = argparse.Namespace(records=3_000, per_tick=700, value_bytes=170, rdkafka="{}", timeout_s=120)
    got = run_side(broker.bootstrap_servers, topic, side, mode, args)
    assert got["wall_s"] > 0 and got["cpu_s"] > 0
    assert await count_committed(broker.bootstrap_servers, topic) == 3_000
