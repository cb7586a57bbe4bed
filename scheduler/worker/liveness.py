"""Whether each long-lived loop of the worker keeps up, and what the worker says when one does not.

A loop that holds partitions but has stopped working is the worst failure a scheduler has: it answers
/health, accepts writes with 202, and applies or fires nothing (seen on a 3-node Kafka: the commands
consumer's group coordination died at the first rebalance and the worker stayed "ready" for minutes).
So every watched loop reports its work (`Work`: how much is waiting, and a counter that grows with
every piece done), and the watchdog looks at each one every few seconds:

- a loop with work waiting whose counter has not moved since the last look is *behind*; behind for
  `stall_after_s` in a row it is *stalled*: the worker is not ready (/health says which loop and why,
  `scheduler_loop_stalled{loop}` is 1), and the loop is asked to heal (replace its Kafka client: stop it,
  build a new one, resume from the positions it had);
- a loop that moves again, or has nothing waiting, is well again at once;
- a loop still stalled `leave_after_s` after it was found stalled (its client replaced meanwhile, to no
  avail) while the cluster answers makes the worker leave: `on_leave` stops it (exit code LEFT_EXIT_CODE), its partitions move to a
  worker that can serve them at once, and its supervisor (Kubernetes, systemd, compose) starts it again.
  A deaf worker never holds partitions for minutes.

A loop says what "waiting" means for it: the commands ingest, records behind the end of its partitions;
the punctuator, due instants past due and not fired; the group membership (`Membership`), an assignment
not yet served, its progress any rebalance begun, record restored or take-up completed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger(__name__)

CHECK_EVERY_S = 5.0  # how often the watchdog looks at every loop
STALL_AFTER_S = 30.0  # behind this long in a row: stalled (SCHEDULER_STALL_AFTER_S)
LEAVE_AFTER_S = 90.0  # stalled this long: the worker leaves (SCHEDULER_LEAVE_AFTER_S; 0: never)
LEFT_EXIT_CODE = 75  # (EX_TEMPFAIL) the worker stopped itself: a loop stalled; start it again
WORK_TIMEOUT_S = 10.0  # a loop's answer to "what is your work" (an end-offsets request) waits at most this
#: a worker that decided to leave and has not stopped this long after exits at once (LEFT_EXIT_CODE)
LEAVE_GRACE_S = 30.0


def exit_after(seconds: float, code: int = LEFT_EXIT_CODE) -> threading.Timer:
    """Exit the process with `code` in `seconds` unless it ended before, from a thread of its own (the event
    loop may be what hangs). A worker that decided to leave stops as SIGTERM would, and that stop can hang:
    on one broker after a pause, a cut and kills, a worker whose punctuator stalled decided to leave, then
    went on logging "still stalled" for minutes with its partitions (the fault campaign, seed 4001: fires
    up to 233 s late)."""

    def leave() -> None:
        log.error("the worker did not stop within %.0f s of deciding to leave: it exits now", seconds)
        logging.shutdown()
        os._exit(code)

    timer = threading.Timer(seconds, leave)
    timer.daemon = True
    timer.start()
    return timer


def fetched_to(consumer: Any, tp: Any) -> int | None:
    """The offset after the last record the consumer handed out for `tp` (past transaction markers too),
    without waiting for a position reset as `position()` does; None while it has none."""
    try:
        state = consumer._subscription.subscription.assignment.state_value(tp)
    except AttributeError:  # (no assignment)
        return None
    return state.position if state is not None and state.has_valid_position else None


@dataclass(frozen=True)
class Work:
    """What a loop has to do: `pending` pieces waiting (0: idle), `done` a counter of pieces done."""

    pending: int
    done: int
    what: str  # what a piece is, in words: "commands behind the end of the topic"


class Watched(Protocol):
    """A long-lived loop the watchdog looks at."""

    name: str

    async def work(self) -> Work:
        """What it has to do now (may raise: the look is skipped)."""
        ...

    async def heal(self) -> bool:
        """Replace what no longer works (a Kafka client); True if it replaced something."""
        ...


@dataclass
class LoopState:
    """What the watchdog knows of one loop."""

    last_done: int | None = None
    behind_since: float | None = None  # monotonic, while it has work and does none
    stalled_since_ms: int | None = None  # wall clock, while stalled
    reason: str = ""
    stalls: int = 0  # times it was found stalled
    heals: int = 0  # clients replaced


@dataclass
class Liveness:
    """The watchdog of a worker's loops: `check()` once, or `run()` every CHECK_EVERY_S."""

    loops: list[Watched] = field(default_factory=list)
    stall_after_s: float = STALL_AFTER_S
    leave_after_s: float = LEAVE_AFTER_S
    # called once, with why, when a loop stayed stalled leave_after_s (None: nothing is done)
    on_leave: Callable[[str], Awaitable[None]] | None = None
    left: str | None = None  # why the worker left
    # whether the cluster answers: a worker leaves only then (a broker outage stalls every worker alike,
    # and leaving would not help); None: assumed
    reachable: Callable[[], Awaitable[bool]] | None = None
    monotonic: Callable[[], float] = time.monotonic
    wall_ms: Callable[[], int] = lambda: int(time.time() * 1000)
    states: dict[str, LoopState] = field(default_factory=dict)

    def watch(self, loop: Watched) -> None:
        self.loops.append(loop)
        self.states[loop.name] = LoopState()

    async def check(self) -> None:
        for loop in self.loops:
            try:
                async with asyncio.timeout(WORK_TIMEOUT_S):
                    work = await loop.work()
            except Exception as exc:  # (the broker away: an end-offsets request failed) not a verdict
                log.debug("could not ask loop %s for its work: %r", loop.name, exc)
                continue
            await self._look(loop, work)

    async def _look(self, loop: Watched, work: Work) -> None:
        state = self.states[loop.name]
        stall_after_s = getattr(loop, "stall_after_s", None) or self.stall_after_s  # (a loop's own bound)
        now = self.monotonic()
        moved = state.last_done is not None and work.done != state.last_done
        state.last_done = work.done
        if work.pending <= 0 or moved:
            if state.stalled_since_ms is not None:
                log.warning(
                    "loop %s works again after %.0f s stalled",
                    loop.name,
                    (self.wall_ms() - state.stalled_since_ms) / 1000,
                )
            state.behind_since = state.stalled_since_ms = None
            state.reason = ""
            return
        if state.behind_since is None:
            state.behind_since = now
        behind_s = now - state.behind_since
        state.reason = f"{work.pending} {work.what}, none done for {behind_s:.0f} s"
        if behind_s < stall_after_s:
            return
        remedy = getattr(loop, "remedy", "replacing its client")  # (what is done about it: for the log)
        if state.stalled_since_ms is None:
            state.stalled_since_ms = self.wall_ms()
            state.stalls += 1
            log.error("loop %s stalled: %s; %s", loop.name, state.reason, remedy)
            where = getattr(loop, "where", None)  # (a loop that can say where it waits: for the log)
            if where is not None:
                log.warning("loop %s waits in:\n%s", loop.name, where())
        else:
            log.warning("loop %s still stalled: %s; %s", loop.name, state.reason, remedy)
        if self.left is not None:
            return  # (the worker is stopping)
        stalled_s = (self.wall_ms() - state.stalled_since_ms) / 1000
        if (
            self.leave_after_s
            and stalled_s >= self.leave_after_s
            and (self.reachable is None or await self.reachable())
        ):
            tried = f"its client was replaced {state.heals} times to no avail" if state.heals else remedy
            self.left = f"loop {loop.name} stalled for {stalled_s:.0f} s ({state.reason}); {tried}"
            log.error(
                "%s: the worker stops so its partitions move to a worker that can serve them", self.left
            )
            if self.on_leave is not None:
                await self.on_leave(self.left)
            return
        try:
            if await loop.heal():
                state.heals += 1
                state.behind_since = now  # (the new client gets a whole bound of its own)
        except Exception:
            log.warning("healing loop %s failed", loop.name, exc_info=True)

    def stalled(self) -> list[dict[str, Any]]:
        """The loops stalled now: what /health shows."""
        return [
            {"loop": name, "since": s.stalled_since_ms, "reason": s.reason}
            for name, s in self.states.items()
            if s.stalled_since_ms is not None
        ]

    async def run(self, every_s: float | None = None) -> None:
        """A look every every_s (default: CHECK_EVERY_S, or a third of stall_after_s if that is less)."""
        if every_s is None:
            every_s = min(CHECK_EVERY_S, self.stall_after_s / 3)
        while True:
            await asyncio.sleep(every_s)
            try:
                await self.check()
            except Exception:  # (never dies: the next look comes all the same)
                log.exception("the loops' watchdog failed a look")


@dataclass
class Counted:
    """A loop watched through two counts of its own, whose client cannot be replaced: the punctuator
    (time units with an instant past due, and the fires done)."""

    name: str
    pending: Callable[[], int]
    done: Callable[[], int]
    what: str
    remedy: str = "nothing to replace: the worker leaves if it stays so"

    async def work(self) -> Work:
        return Work(self.pending(), self.done(), self.what)

    async def heal(self) -> bool:
        return False


@dataclass
class Membership:
    """The worker's membership of the consumer group, watched as a loop: while it is not serving an
    assignment (joining, rebalancing, restoring, taking its partitions up) that is work waiting, and every
    rebalance begun, changelog record restored or take-up completed is progress. A member that makes none
    for its bound is stuck: not assigned at all (seen in the fault campaign, seed 4000: a worker joining
    mid-run never ready for 330 s), or holding partitions it never takes up, which no other loop sees (their
    work is of the partitions taken up). Nothing in it can be replaced: past the leave bound the worker
    leaves, so its partitions go to the others, and its supervisor starts it again.

    Its bound is never under `floor_s` (twice the session timeout): a join legitimately waits for the
    members that must rejoin, a silent one until the session timeout drops it. Before its first join
    begins (`joined` False) it waits for nothing: a worker not yet in the group holds no partition (and
    is not ready). The watchdog runs from the app's start (not after the first recovery, as the app's
    services do), or a first take-up that never ends would never be seen."""

    serving: Callable[[], bool]
    progress: Callable[[], int]
    floor_s: float
    joined: Callable[[], bool] = lambda: True
    stall_after_s: float = 0.0  # (set by watched_by: the watchdog's bound, not under floor_s)
    name: str = "group"
    remedy: str = "nothing to replace: the worker leaves if it stays so"

    def watched_by(self, liveness: Liveness) -> Membership:
        self.stall_after_s = max(liveness.stall_after_s, self.floor_s)
        liveness.watch(self)
        return self

    async def work(self) -> Work:
        waiting = self.joined() and not self.serving()
        return Work(1 if waiting else 0, self.progress(), "assignment not taken up")

    async def heal(self) -> bool:
        return False


def not_ready_because(faust_app: Any, assigned: bool, liveness: Liveness) -> str | None:
    """Why the worker is not ready (None: it is): not in the group yet, rebalancing or recovering (queries
    about moving partitions get 503), or a loop stalled."""
    why = not_serving_because(faust_app, assigned)
    if why is not None:
        return why
    stalled = liveness.stalled()
    if stalled:
        return "; ".join(f"loop {s['loop']} stalled: {s['reason']}" for s in stalled)
    return None


def not_serving_because(faust_app: Any, assigned: bool) -> str | None:
    """Why the worker does not serve an assignment now (None: it does): see Membership."""
    if not assigned:
        return "not assigned its partitions yet (joining the group)"
    if faust_app.rebalancing or getattr(faust_app, "in_recovery", False):
        return "rebalancing"
    return None
