"""A partition's transaction on a real broker (scheduler/kafka/transactions.py): a record the broker did not
acknowledge never lets the transaction commit the others."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from scheduler.kafka.transactions import PartitionGone, Transactions, Undelivered
from tests.helpers import TopicReader

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def _topic(bootstrap: str, name: str, **config: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, 1, 1, topic_configs=config)])
    finally:
        await admin.close()


async def test_a_transaction_with_a_record_the_broker_refused_is_given_up_not_committed(broker) -> None:
    """aiokafka commits a transaction whose records partly failed (a batch that expired without a leader
    while a broker was away; here one the broker refused as too large) with the records that did not: a
    fire lost while its watermark committed — the fault campaign's seed 2006 lost single instants that way.
    The transaction is given up instead: nothing of it is read, and the partition is handed back (on_failed)
    to be redone from what was committed."""
    name = f"tx{uuid.uuid4().hex[:8]}"
    fires, small = f"{name}-fires", f"{name}-small"
    await _topic(broker.bootstrap_servers, fires)
    await _topic(broker.bootstrap_servers, small, **{"max.message.bytes": "2048"})
    failed: list[tuple[int, BaseException]] = []

    async def on_failed(partition: int, exc: BaseException, fenced: bool) -> None:
        failed.append((partition, exc))

    txns = Transactions(broker.bootstrap_servers, name, on_failed=on_failed)
    await txns.assign([0])
    assert txns.owns(0)
    async with TopicReader(broker.bootstrap_servers, fires, decoder=bytes, read_committed=True) as reader:
        async with txns.work():
            delivered = await txns.send(0, fires, b"k", b"a fire")
            refused = await txns.send(0, small, b"k", b"x" * 10_000)
        await txns.commit()
        assert delivered.done() and not delivered.exception()
        assert refused.done() and refused.exception() is not None
        assert [p for p, _ in failed] == [0] and isinstance(failed[0][1], Undelivered), failed
        assert not txns.owns(0)
        with pytest.raises(PartitionGone):
            await txns.send(0, fires, b"k", b"after")

        # a new owner (a new assignment) fences and aborts what the given-up producer held; it commits
        txns_again = Transactions(broker.bootstrap_servers, name)
        await txns_again.assign([0])
        async with txns_again.work():
            await txns_again.send(0, fires, b"k", b"the fire again")
        await txns_again.commit()
        await reader.wait_for(lambda r: len(r) >= 1)
        await asyncio.sleep(1)
        assert reader.records == [b"the fire again"], reader.records
        await txns_again.stop()
    await txns.stop()
