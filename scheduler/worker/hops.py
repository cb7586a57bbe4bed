"""The hops between the worker's agents (trigger-index updates, events, trigger-fired, jobs): who handles each
topic's records, and the net under every handler.

Without transactions (Tansu) each hop is a Faust agent, at-least-once and idempotent (see the docs' Delivery
guarantee, docs/content/design/delivery.md). With transactions the commands ingest (ingest.py) consumes the hop topics too, a fetch
at a time on the worker's active partitions: a record's handling, what it sends, its table writes (staged,
kafka/staged.py) and the position after it commit in its partition's transaction, so each hop is applied
exactly once and a fenced owner's work never reaches a read_committed reader or a restored table.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from scheduler.kafka.transactions import PartitionGone

if TYPE_CHECKING:
    from scheduler.worker.ports import Outbox

log = logging.getLogger(__name__)

Handler = Callable[[Any], Awaitable[None]]


def record_time_ms(message: Any) -> int | None:
    """A record's timestamp in epoch ms: aiokafka's records (our consumer) carry ms as an int, Faust's
    messages (its agents) seconds as a float. None when it has none."""
    ts = getattr(message, "timestamp", None)
    if ts is None or ts <= 0:
        return None
    return round(ts * 1000) if isinstance(ts, float) else int(ts)


async def safely(worker: Outbox, event: Any, what: str, handle: Handler) -> None:
    """Handle one record; a worker never dies on input: an unexpected error dead-letters it with its reason.
    PartitionGone is not input's fault: the partition's transaction was given up, and its consumer stops."""
    try:
        await handle(event)
    except PartitionGone:
        raise
    except Exception as exc:
        log.exception("unexpected error handling %s", what)
        await worker.dead_letter(event, f"internal error: {type(exc).__name__}: {exc}")


def agent(handle: Handler, hold: Callable[[], Awaitable[bool]]) -> Callable[[Any], Awaitable[None]]:
    """A Faust agent (no transactions) that hands each event of its stream to `handle`, unless `hold` says
    to drop it: the worker froze past its session and a rebalance followed (see freeze.py); the event's
    partition is then consumed again from its last committed offset by its next owner."""

    async def run(stream: Any) -> None:
        events: AsyncIterator[Any] = stream.events()
        async for event in events:
            if await hold():
                await handle(event)

    return run
