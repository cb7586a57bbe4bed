"""Records handed over one at a time by many tasks, produced as whole batches (HTTP writes' commands).

Each `send` queues its record and returns a future of the record's own RecordMetadata. What is queued in
one turn of the event loop goes to the broker in one `BatchedProducer.send_batch`, in the order handed
over: a batch of 500 schedules over HTTP is 500 tasks that each reach `send` in the same turn, and an
aiokafka `send` each cost ~15 µs of the worker's CPU against ~2 for its place in a whole batch. A record
waits at most that turn (the flush runs after the callbacks already due). Flushes hand their batches over
one after another, so the records of one partition keep the order they were handed over in.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING

from aiokafka.structs import RecordMetadata

if TYPE_CHECKING:
    from scheduler.kafka.producer import BatchedProducer, Headers

_Queued = tuple[bytes, bytes, int, "Headers", "asyncio.Future[RecordMetadata]"]


class GatheredSender:
    """Records to one topic, gathered per turn of the loop into `producer`'s whole batches."""

    def __init__(self, producer: BatchedProducer, topic: str) -> None:
        self._producer = producer
        self._topic = topic
        self._queue: list[_Queued] = []
        self._flush: asyncio.Future[None] | None = None  # the flush that will take the queue
        self._handing = asyncio.Lock()  # one flush hands its batches over at a time

    def send(
        self, key: bytes, value: bytes, partition: int, headers: Headers | None = None
    ) -> asyncio.Future[RecordMetadata]:
        """Queue a record for `partition`; the future resolves to its RecordMetadata (its own offset) once
        the broker acknowledged it, or to the send's failure."""
        fut: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        self._queue.append((key, value, partition, headers or [], fut))
        if self._flush is None or self._flush.done():  # (done: cancelled before it took the queue)
            self._flush = asyncio.ensure_future(self._hand_over())
        return fut

    async def _hand_over(self) -> None:
        async with self._handing:
            queued, self._queue, self._flush = self._queue, [], None
            positions = [0] * len(queued)
            try:
                batches = await self._producer.send_batch(
                    self._topic, [(k, v, p, h) for k, v, p, h, _ in queued], positions
                )
            except asyncio.CancelledError:  # (the worker stopping)
                for *_, fut in queued:
                    fut.cancel()
                raise
            except Exception as exc:  # (the producer stopped, the topic refused...): each caller hears it
                for *_, fut in queued:
                    if not fut.done():
                        fut.set_exception(exc)
                return
        for (_, _, _, _, fut), batch, position in zip(queued, batches, positions, strict=True):
            batch.add_done_callback(functools.partial(_settle, fut, position))


def _settle(fut: asyncio.Future[RecordMetadata], position: int, batch: asyncio.Future[object]) -> None:
    if fut.done():  # (its caller was cancelled: an HTTP client gone)
        return
    if batch.cancelled():
        fut.cancel()
    elif (exc := batch.exception()) is not None:
        fut.set_exception(exc)
    else:
        meta: RecordMetadata = batch.result()  # type: ignore[assignment]
        fut.set_result(meta._replace(offset=meta.offset + position))
