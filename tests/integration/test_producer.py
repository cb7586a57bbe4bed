"""The batched producer on a real broker."""

from __future__ import annotations

import uuid

import pytest

from scheduler.kafka.producer import BatchedProducer, TopicCreator

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_a_topic_known_when_the_producer_started_stays_in_its_metadata_after_another_is_added(broker):
    """aiokafka refreshes only the topics added to its client once any is; a topic that came with the first
    (all-topics) metadata was never added and dropped out when the next topic was: its batches found no
    leader and expired after 40 s (the stalls of a worker's first minute on a fresh cluster)."""
    first, later = f"p{uuid.uuid4().hex[:8]}-first", f"p{uuid.uuid4().hex[:8]}-later"
    topics = TopicCreator(broker.bootstrap_servers, 2, 1)
    await topics.ensure(first)
    producer = BatchedProducer(broker.bootstrap_servers)
    try:
        await producer.start()
        client = producer.kafka_producer.client
        # a refresh while no topic is tracked yet fetches every topic (a transactional producer's failed
        # coordinator lookup asks for one at start): `first` is known without having been added
        await client.force_metadata_update()
        assert first in client.cluster.topics()
        await (await producer.send(first, b"k", b"v", partition=0))
        await topics.ensure(later)
        await (await producer.send(later, b"k", b"v", partition=0))  # adds `later` to the tracked topics
        await client.force_metadata_update()
        assert client.cluster.partitions_for_topic(first) == {0, 1}
        await (await producer.send(first, b"k", b"v", partition=1))
    finally:
        await producer.stop(10)
