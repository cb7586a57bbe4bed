"""BatchedProducer: a record nobody awaits still has its failure retrieved and logged."""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Any

import pytest

from scheduler.producer import BatchedProducer

pytestmark = pytest.mark.unit


class _FakeAioProducer:
    def __init__(self) -> None:
        self.futures: list[asyncio.Future[object]] = []

    async def send(self, topic: str, value: bytes, **kwargs: Any) -> asyncio.Future[object]:
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self.futures.append(fut)
        return fut


async def test_a_failed_record_nobody_awaits_is_logged_with_its_topic_not_left_unretrieved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Acceptance finding 8: "Future exception was never retrieved" was logged 7 times by asyncio, with
    no topic, when changelog and index writes failed with NotLeaderForPartitionError."""
    producer = BatchedProducer("unused:9092")
    fake = _FakeAioProducer()
    producer._producer = fake  # type: ignore[assignment]
    unretrieved: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: unretrieved.append(context))
    try:
        with caplog.at_level(logging.WARNING, logger="scheduler.producer"):
            await producer.send("t-trigger-index", b"k", b"v")  # the future is dropped
            fake.futures[0].set_exception(RuntimeError("NotLeaderForPartitionError"))
            await asyncio.sleep(0)  # the done callbacks run
            fake.futures.clear()
            gc.collect()
        assert "a record to t-trigger-index was not acknowledged" in caplog.text
        assert not unretrieved
    finally:
        loop.set_exception_handler(None)
