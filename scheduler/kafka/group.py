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


def track_recovery_generation() -> None:
    """Process-wide: Faust's Recovery remembers the consumer generation of the recovery that is completing.

    A worker that wakes from a pause in the middle of a rebalance sees its earlier recovery complete after
    the next assignment was made: Faust calls the tables' recovery callbacks first, and only then notices the
    generation moved on. The worker must not take that for the new assignment's recovery (its tables are not
    restored yet: it would fire from empty ones). See recovery_is_current."""
    from faust.tables.recovery import Recovery

    original = Recovery.on_recovery_completed
    if getattr(original, "_tracks_generation", False):
        return

    async def on_recovery_completed(self: Any, generation_id: int = 0) -> None:
        self.completing_generation = generation_id
        await original(self, generation_id)

    on_recovery_completed._tracks_generation = True  # type: ignore[attr-defined]
    Recovery.on_recovery_completed = on_recovery_completed  # type: ignore[method-assign]


def recovery_is_current(app: Any) -> bool:
    """Whether the recovery whose completion is being handled is of the consumer's current generation."""
    completing = getattr(app.tables.recovery, "completing_generation", None)
    return completing is None or completing == app.consumer_generation_id


def membership_progress(app: Any) -> int:
    """A number that moves whenever the app's group membership makes progress towards serving an assignment:
    a rebalance begun, or a changelog record restored (active or standby). See liveness.Membership."""
    recovery = app.tables.recovery
    restored = sum(recovery.active_offsets.values()) + sum(recovery.standby_offsets.values())
    return hash((int(getattr(app, "rebalancing_count", 0)), int(restored)))
