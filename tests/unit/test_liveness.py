"""The loops' watchdog (scheduler/worker/liveness.py): a loop with work waiting and none done for the bound
is stalled (the worker is not ready, and says which loop and why), is asked to heal, and is well again as
soon as it moves or has nothing waiting."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from scheduler.worker.liveness import LEFT_EXIT_CODE, Liveness, Membership, Work, not_ready_because

pytestmark = pytest.mark.unit


@dataclass
class Loop:
    name: str = "commands"
    pending: int = 0
    done: int = 0
    heals: int = 0
    fails: bool = False

    async def work(self) -> Work:
        if self.fails:
            raise ConnectionError("broker away")
        return Work(self.pending, self.done, "records behind")

    async def heal(self) -> bool:
        self.heals += 1
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _watchdog(loop: Loop, clock: Clock) -> Liveness:
    liveness = Liveness(stall_after_s=30, monotonic=clock, wall_ms=lambda: int(clock.now * 1000))
    liveness.watch(loop)
    return liveness


async def test_a_loop_behind_for_the_bound_is_stalled_healed_and_well_again_once_it_moves() -> None:
    loop, clock = Loop(pending=5), Clock()
    liveness = _watchdog(loop, clock)
    app = SimpleNamespace(rebalancing=False)
    for t in (0, 10, 29):
        clock.now = t
        await liveness.check()
    assert liveness.stalled() == [] and loop.heals == 0
    assert not_ready_because(app, True, liveness) is None
    clock.now = 31
    await liveness.check()
    [stall] = liveness.stalled()
    assert stall["loop"] == "commands" and stall["since"] == 31_000
    assert stall["reason"] == "5 records behind, none done for 31 s"
    assert loop.heals == 1 and liveness.states["commands"].stalls == 1
    assert "loop commands stalled: 5 records behind" in (not_ready_because(app, True, liveness) or "")
    # the healed loop gets a whole bound before it is healed again; still stalled meanwhile
    clock.now = 50
    await liveness.check()
    assert loop.heals == 1 and liveness.stalled()
    clock.now = 62
    await liveness.check()
    assert loop.heals == 2 and liveness.states["commands"].stalls == 1
    loop.done += 1
    clock.now = 63
    await liveness.check()
    assert liveness.stalled() == [] and not_ready_because(app, True, liveness) is None


async def test_a_loop_that_works_or_has_nothing_waiting_is_never_stalled() -> None:
    loop, clock = Loop(pending=100), Clock()
    liveness = _watchdog(loop, clock)
    for t in range(0, 300, 5):  # a long flow: work always waiting, always some done
        clock.now = t
        loop.done += 1
        await liveness.check()
    loop.pending = 0
    for t in range(300, 400, 5):  # idle: nothing done, nothing waiting
        clock.now = t
        await liveness.check()
    assert liveness.stalled() == [] and loop.heals == 0


async def test_a_loop_that_cannot_say_what_it_has_to_do_keeps_its_verdict() -> None:
    loop, clock = Loop(pending=1), Clock()
    liveness = _watchdog(loop, clock)
    await liveness.check()
    loop.fails = True
    clock.now = 100
    await liveness.check()  # (the broker away: no verdict either way)
    assert liveness.stalled() == []
    loop.fails = False
    await liveness.check()
    assert [s["loop"] for s in liveness.stalled()] == ["commands"]


def test_not_ready_before_the_first_assignment_and_while_rebalancing() -> None:
    liveness = Liveness()
    assert "joining the group" in (
        not_ready_because(SimpleNamespace(rebalancing=False), False, liveness) or ""
    )
    assert not_ready_because(SimpleNamespace(rebalancing=True), True, liveness) == "rebalancing"


async def test_a_member_that_neither_rejoins_restores_nor_takes_up_for_its_bound_is_stuck_and_leaves() -> (
    None
):
    """Seed 4000's joiner, never ready for 330 s, and a worker holding partitions it never takes up: the
    group membership is a watched loop; its bound is never under twice the session timeout (a join waits
    that long for the members that must rejoin)."""
    clock, app = Clock(), SimpleNamespace(rebalancing=True, assigned=True, progress=0)
    left: list[str] = []

    async def leave(why: str) -> None:
        left.append(why)

    liveness = Liveness(
        stall_after_s=3,
        leave_after_s=5,
        on_leave=leave,
        monotonic=clock,
        wall_ms=lambda: int(clock.now * 1000),
    )
    member = Membership(
        lambda: not app.rebalancing and app.assigned, lambda: app.progress, floor_s=20
    ).watched_by(liveness)
    assert member.stall_after_s == 20
    for t in range(0, 20):  # rebalancing, nothing moves: not stalled before the floor
        clock.now = t
        await liveness.check()
    assert liveness.stalled() == []
    for t in range(20, 24):  # restoring: progress
        clock.now = t
        app.progress += 1
        await liveness.check()
    for t in (24, 43):  # (behind from the first look that saw no move, at 24)
        clock.now = t
        await liveness.check()
    assert liveness.stalled() == []
    clock.now = 44
    await liveness.check()
    [stall] = liveness.stalled()
    assert stall["loop"] == "group" and stall["reason"] == "1 assignment not taken up, none done for 20 s"
    assert left == []
    clock.now = 49
    await liveness.check()
    assert len(left) == 1 and left[0].startswith("loop group stalled for 5 s")
    # serving: nothing waits, never stalled whatever the progress
    liveness = Liveness(stall_after_s=3, monotonic=clock, wall_ms=lambda: int(clock.now * 1000))
    Membership(lambda: True, lambda: 0, floor_s=20).watched_by(liveness)
    for t in range(100, 400, 5):
        clock.now = t
        await liveness.check()
    assert liveness.stalled() == []


async def test_a_loop_still_stalled_past_the_second_bound_makes_the_worker_leave_once() -> None:
    loop, clock = Loop(pending=3), Clock()
    left: list[str] = []

    async def leave(why: str) -> None:
        left.append(why)

    liveness = Liveness(
        stall_after_s=30,
        leave_after_s=60,
        on_leave=leave,
        monotonic=clock,
        wall_ms=lambda: int(clock.now * 1000),
    )
    liveness.watch(loop)
    for t in range(0, 200, 5):
        clock.now = t
        await liveness.check()
    [why] = left  # once: at 30 s stalled, at 90 s (60 s later) it leaves
    assert why.startswith("loop commands stalled for 60 s (3 records behind") and "replaced 2 times" in why
    assert liveness.left == why and loop.heals == 2  # (no more heals once it leaves)


async def test_no_leaving_when_the_second_bound_is_zero() -> None:
    loop, clock = Loop(pending=3), Clock()
    liveness = Liveness(
        stall_after_s=30, leave_after_s=0, monotonic=clock, wall_ms=lambda: int(clock.now * 1000)
    )
    liveness.watch(loop)
    for t in range(0, 600, 5):
        clock.now = t
        await liveness.check()
    assert liveness.left is None and liveness.stalled()


async def test_no_leaving_while_the_cluster_does_not_answer() -> None:
    """A broker outage stalls every worker alike: leaving would not help (and an unsupervised worker
    would be gone when the brokers come back)."""
    loop, clock = Loop(pending=3), Clock()
    answers = [False]

    async def reachable() -> bool:
        return answers[0]

    left: list[str] = []

    async def leave(why: str) -> None:
        left.append(why)

    liveness = Liveness(
        stall_after_s=30, leave_after_s=60, on_leave=leave, reachable=reachable, monotonic=clock,
        wall_ms=lambda: int(clock.now * 1000),
    )  # fmt: skip
    liveness.watch(loop)
    for t in range(0, 300, 5):
        clock.now = t
        await liveness.check()
    assert left == [] and liveness.stalled()
    answers[0] = True
    clock.now = 305
    await liveness.check()
    assert len(left) == 1


async def test_a_stalled_loop_that_can_say_where_it_waits_has_it_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop, clock = Loop(pending=5), Clock()
    loop.where = lambda: "  ingest.py:42 in run"  # type: ignore[attr-defined]
    liveness = _watchdog(loop, clock)
    for t in (0, 31, 62):
        clock.now = t
        await liveness.check()
    waits = [r.getMessage() for r in caplog.records if "waits in" in r.getMessage()]
    assert waits == ["loop commands waits in:\n  ingest.py:42 in run"]  # (once, when found stalled)


async def test_the_commands_ingest_says_where_its_run_loop_waits() -> None:
    import asyncio

    from scheduler.worker.ingest import CommandIngest

    ingest = CommandIngest(SimpleNamespace(settings=SimpleNamespace(commands_topic="c")))
    assert "not running" in ingest.where()

    async def parked() -> None:
        ingest._task = asyncio.current_task()
        await asyncio.sleep(30)

    task = asyncio.ensure_future(parked())
    await asyncio.sleep(0.01)
    try:
        where = ingest.where()
    finally:
        task.cancel()
    assert "in parked" in where and "in sleep" in where, where


async def test_the_commands_loop_goes_on_after_a_turn_cancelled_under_it_and_a_dead_loop_is_restarted() -> (
    None
):
    import asyncio

    from scheduler.worker.ingest import CommandIngest

    ingest = CommandIngest(SimpleNamespace(settings=SimpleNamespace(commands_topic="c")))
    turns: list[str] = []

    async def turn() -> None:
        turns.append("turn")
        if len(turns) == 1:
            raise asyncio.CancelledError()  # (a Kafka client's task cancelled under it, not the loop)
        if len(turns) == 2:
            raise RuntimeError("a bug in one turn")
        ingest._stopped = True

    ingest._turn = turn  # type: ignore[method-assign]
    await asyncio.wait_for(ingest.run(), 5)
    assert turns == ["turn", "turn", "turn"]

    ingest._stopped, turns[:] = False, ["turn", "turn"]  # (the next turn stops it again)
    dead = asyncio.ensure_future(asyncio.sleep(0))
    await dead
    ingest._task = dead
    assert await ingest.heal() is True and ingest._task is not dead  # (started again)
    await asyncio.wait_for(ingest._task, 5)
    assert turns == ["turn", "turn", "turn"]


def test_a_worker_that_decided_to_leave_and_hangs_exits_with_the_left_code() -> None:
    """(seed 4001: its stop hung and it went on holding its partitions; exit_after ends it from a thread)"""
    hang = "from scheduler.worker.liveness import exit_after; exit_after(0.3); import time; time.sleep(60)"
    done = subprocess.run([sys.executable, "-c", hang], capture_output=True, text=True, timeout=30)
    assert done.returncode == LEFT_EXIT_CODE, done.stderr
    assert "did not stop within 0 s of deciding to leave" in done.stderr


def test_a_worker_that_stops_in_time_is_not_cut_short() -> None:
    quick = "from scheduler.worker.liveness import exit_after; exit_after(30); print('stopped')"
    done = subprocess.run([sys.executable, "-c", quick], capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout.strip()) == (0, "stopped"), done.stderr
