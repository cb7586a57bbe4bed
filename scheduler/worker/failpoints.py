"""Faults a test or the fault campaign injects into a worker process, named in SCHEDULER_FAILPOINTS
(comma-separated `name=mode`). Never set in production: each one breaks the worker on purpose.

    commands-deaf=once     the first commands consumer answers every fetch with nothing (no error, no
                           record), as one whose fetcher or group coordination died; the one that replaces
                           it works
    commands-deaf=always   every commands consumer does (the worker cannot heal: it must leave the group)
    launches-deaf=once     the launcher's first consumer of launch requests answers every fetch with nothing; the
                           one that replaces it works
    notifier-deaf=once     the notifier's first consumer of run states and alerts answers every fetch with nothing;
                           the one that replaces it works
    take-up-hangs=on       every take-up of an assignment waits forever, as a worker that holds partitions
                           and never serves them (it must leave the group: see liveness.Membership)
    take-up-slow=S         each partition's take-up waits S seconds first, as one whose index holds hundreds of
                           thousands of dues to catch up does
    freeze-at-assignment=S the whole process stands still S seconds (SIGSTOP; a child process sends SIGCONT)
                           as its first assignment of partitions begins, before their producers start: a
                           process paused by its host between the group's decision and its own take-up
    schedule-reads=N       the punctuator's first N reads of a schedule fail, as when a partition's store,
                           closed under a revocation while a scan of it was still open, cannot be opened
                           again ("lock hold by current process")
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Callable
from typing import Any

ENV = "SCHEDULER_FAILPOINTS"


def failpoint(name: str) -> str | None:
    """The mode the failpoint is set to, None if it is not set."""
    for item in os.environ.get(ENV, "").split(","):
        key, _, mode = item.strip().partition("=")
        if key == name:
            return mode or "on"
    return None


def failing_reads() -> Callable[[], None] | None:
    """What each read of a schedule by the punctuator calls first (None: the failpoint is not set)."""
    mode = failpoint("schedule-reads")
    if mode is None:
        return None
    left = [int(mode)]

    def read() -> None:
        if left[0] > 0:
            left[0] -= 1
            raise OSError("IO error: lock hold by current process (failpoint schedule-reads)")

    return read


def make_deaf(consumer: Any) -> None:
    """The consumer's fetches answer nothing from now on."""

    async def deaf(*_: Any, timeout_ms: int = 0, **__: Any) -> dict[Any, list[Any]]:
        await asyncio.sleep(timeout_ms / 1000)
        return {}

    consumer.getmany = deaf


async def maybe_hang_take_up() -> None:
    """Waits forever if the take-up-hangs failpoint is set."""
    if failpoint("take-up-hangs") is not None:
        await asyncio.Event().wait()


async def maybe_slow_take_up() -> None:
    """Waits the failpoint's seconds before a partition's take-up, if take-up-slow is set."""
    seconds = failpoint("take-up-slow")
    if seconds is not None:
        await asyncio.sleep(float(seconds))


_froze = False


async def maybe_freeze_at_assignment(has_partitions: bool) -> None:
    """Stops the whole process for the failpoint's seconds, at its first assignment of partitions."""
    global _froze
    seconds = failpoint("freeze-at-assignment")
    if seconds is None or _froze or not has_partitions:
        return
    _froze = True
    subprocess.Popen(["sh", "-c", f"sleep {float(seconds)}; kill -CONT {os.getpid()}"])
    os.kill(os.getpid(), signal.SIGSTOP)
