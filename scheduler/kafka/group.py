"""The app's consumer group membership, as Faust's consumer holds it (private members: here only)."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def request_rejoin(app: Any) -> bool:
    """Ask the group coordinator for a rebalance (Faust's consumer runs in a thread of its own: the
    request is handed to that thread's loop). True if it could be asked."""
    thread = getattr(app.consumer, "_thread", None)
    consumer = getattr(thread, "_consumer", None)
    loop = getattr(thread, "thread_loop", None)
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None or loop is None:
        log.warning("could not ask for a rebalance: the consumer is not started")
        return False
    loop.call_soon_threadsafe(coordinator.request_rejoin)
    return True
