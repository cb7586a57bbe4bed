"""A worker frozen past its group session, without transactions: what it held must not be written.

A process stopped as a whole (a long GC pause, SIGSTOP, a suspended VM) stops its heartbeats with it; once
the group session has run out, another worker owns its partitions and goes on from the changelogs. When
the frozen one wakes it still believes it owns them, and its agents go on with the records they had
fetched, from their stale tables, until the coordinator tells it to rejoin: what they write lands in the
changelogs after the new owner's writes, so the next restore of that key takes the stale value (a trigger
progress's job sequence went back and the jobs it numbered again were dropped as launched already; a
schedule could go back to an older version). With transactions (Kafka) the new owner's producer fences the
old one and none of it commits — unless the old one froze *before* its own producers started: woken, it
would take up an assignment the group had already given to others, and its producers would fence the
partitions' current owners, then fire from tables restored before those owners' last commits (campaign seed
119: 15 to 338 instants fired twice). So with transactions this guard only dates freezes: an assignment
made at or before a freeze is `stale`, and its producers are never started (worker/ownership.py). Without
transactions (the embedded Tansu broker), this guard is the fence:

- a thread ticks every TICK_S; a gap much longer than that means the whole process stood still (a blocked
  event loop does not stop the thread, nor the consumer's heartbeat thread: only a process-wide freeze stops
  both). A gap that the session could not have survived (FreezeGuard.limit_s) marks the worker suspect;
- every agent's record, every fetch of commands and every punctuator tick asks `hold()` before its work:
  while the worker is suspect it waits for the coordinator's verdict. A rebalance (which the first heartbeat
  after the wake starts when the session ran out) means the partitions may have moved: the work is
  dropped, not written, and the partitions' next owner (this worker again, perhaps) applies those records
  again from the last committed offsets; work goes on once the tables of the next assignment are restored
  (`recovered`). No rebalance within the session timeout means the session had survived: the work goes on.

What the producers held unsent when the process froze still goes out when it wakes: a restore of the trigger
progress skips such a late write by its group generation, one of the schedules by its version
(kafka.tables.keep_newest_generation); for the other tables only transactions close that gap. Their acknowledgements would also move the tables' stored offsets
past the next owner's writes: the partitions the worker owned are restored from the start of their
changelogs after a freeze (Worker._restore_whole_after_a_freeze).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

#: how often the thread looks at the clock. A gap is measured from the last look (the thread's, or a record's:
#: `suspect`, `stale`), so it overstates a freeze by at most this, far below `limit_s` (a second or more);
#: each look is a wake-up of a thread that takes the GIL (ten a second were ~0.1 % of a core, idle)
TICK_S = 0.5


def _clock() -> float:
    """Seconds of a clock that counts a suspended machine's sleep (CLOCK_BOOTTIME), else monotonic."""
    try:
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    except (AttributeError, OSError):  # (not Linux)
        return time.monotonic()


class FreezeGuard:
    def __init__(self, app: Any, session_timeout_s: float, heartbeat_interval_s: float) -> None:
        """`app`: the Faust app, whose rebalancing flag and count say that a rebalance began."""
        self.app = app
        self.session_timeout_s = session_timeout_s
        #: a freeze this long may have outlived the session: the coordinator last heard of the worker up to
        #: a heartbeat interval before it froze, and another may pass before it learns of the wake
        self.limit_s = max(1.0, session_timeout_s - 2 * heartbeat_interval_s)
        self._tick = _clock()
        self._suspect_rebalances: int | None = None  # the app's rebalance count when the freeze was seen
        self._suspect_at = 0.0
        self.last_freeze_rebalance: int | None = None  # the app's rebalance count when the last one was seen
        self.freezes = 0  # freezes seen
        self.dropped = 0  # units of work dropped because a rebalance came after a freeze
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._tick = _clock()  # (the app's start is no freeze)
            self._thread = threading.Thread(target=self._run, name="freeze-guard", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            self._seen(_clock())

    def _seen(self, now: float) -> None:
        if self._thread is None:
            return  # not started: nothing is watched yet
        gap, self._tick = now - self._tick, now
        if gap > self.limit_s:
            self.last_freeze_rebalance = self.app.rebalancing_count
        if gap > self.limit_s and self._suspect_rebalances is None:
            self._suspect_rebalances = self.app.rebalancing_count
            self._suspect_at = now
            self.freezes += 1
            log.warning(
                "this worker stood still for %.1f s (its group session: %.0f s): its partitions may have "
                "moved; nothing more is written until the coordinator says whether they did",
                gap,
                self.session_timeout_s,
            )

    def stale(self, rebalance: int) -> bool:
        """Whether the assignment of the app's rebalance number `rebalance` may be another worker's by now:
        this worker stood still past its session after that rebalance began (its count rises as the
        rebalance begins, before the worker rejoins), so the group may have moved on without it. A freeze
        seen just after the next rebalance began dates that one too: it is asked again (one more rebalance,
        never a zombie's take-up)."""
        self._seen(_clock())
        return self.last_freeze_rebalance is not None and rebalance <= self.last_freeze_rebalance

    def recovered(self) -> None:
        """The tables of an assignment made after the freeze are restored (the worker's recovery callback,
        which Faust runs before it resumes the streams, and before it ends the rebalance): work goes on."""
        count = self._suspect_rebalances
        if count is not None and self.app.rebalancing_count > count:
            self._suspect_rebalances = None

    def suspect(self) -> bool:
        """Whether the worker froze past what its session survives, and no assignment since was restored."""
        self._seen(_clock())  # (a record handled before the thread woke sees the gap itself)
        count = self._suspect_rebalances
        if count is not None and self.app.rebalancing_count > count and not self.app.rebalancing:
            self._suspect_rebalances = None  # (a rebalance ran its course, without a recovery callback)
        return self._suspect_rebalances is not None

    async def hold(self) -> bool:
        """Before a unit of work: True to go on; False to drop it (a rebalance came after a freeze: the
        partitions' next owner applies it again). Waits, while suspect, for a rebalance or the session."""
        if not self.suspect():
            return True
        count = self._suspect_rebalances
        while (
            self._suspect_rebalances == count
            and not self.app.rebalancing
            and self.app.rebalancing_count == count
            and _clock() - self._suspect_at < self.session_timeout_s
        ):
            await asyncio.sleep(0.05)
            self._seen(_clock())
        if self._suspect_rebalances is None:
            return True  # (restored meanwhile)
        if self.app.rebalancing or self.app.rebalancing_count != count:
            self.dropped += 1
            return False
        log.info("no rebalance followed the freeze: the session had survived; work goes on")
        self._suspect_rebalances = None
        return True
