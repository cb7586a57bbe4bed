"""The wall clock jumps (an NTP step, a VM resumed) while the punctuator runs, with an injected wall clock
and an injected monotonic clock that never jumps. What is defined (README, "Clock jumps"):
- back: nothing fires twice; fires resume when the clock reaches the next due again; an UPDATE then
  does not bring back instants already fired;
- forward: the dues passed over follow each schedule's catch-up policy (EACH, COALESCE, SKIP), marked
  catchUp, as after a restart, and are not counted as late;
- small differences (under CLOCK_JUMP_MS) are lateness, not jumps.
"""

from __future__ import annotations

import dataclasses

import pytest

from scheduler.domain.model import CatchUpPolicy, FrequencyTrigger, TimeUnit
from scheduler.worker.clocks import CLOCK_JUMP_MS
from scheduler.worker.punctuator import Punctuator
from tests.unit.test_punctuator import T0, FakeClock, Harness, S, state

pytestmark = pytest.mark.unit

HOUR, DAY = 3_600_000, 86_400_000


class JumpHarness(Harness):
    """A Harness whose punctuator also has a monotonic clock; `advance` moves both, `jump` the wall only."""

    def __init__(self, now: int) -> None:
        super().__init__(now)
        self.mono = FakeClock(1_000_000)
        self.punctuator = Punctuator(
            self.send, self.load, self.save_progress, self.clock, monotonic=self.mono
        )

    async def advance(self, ms: int, unit: TimeUnit = S) -> list[tuple[str, int, bool, int]]:
        self.mono.now += ms
        fires = await self.tick_at(self.clock.now + ms, unit)
        return [(f.key.name, f.due_at - T0, f.catch_up, f.missed) for f in fires]

    async def jump(self, ms: int, unit: TimeUnit = S) -> list[tuple[str, int, bool, int]]:
        self.mono.now += 1_000  # the jump happened during the second between two looks
        fires = await self.tick_at(self.clock.now + 1_000 + ms, unit)
        return [(f.key.name, f.due_at - T0, f.catch_up, f.missed) for f in fires]


def every(seconds: int) -> FrequencyTrigger:
    return FrequencyTrigger(S, seconds, T0)


async def test_a_step_back_fires_nothing_twice_and_resumes_at_the_next_due() -> None:
    h = JumpHarness(T0)
    await h.assign(0, [state("ten", every(10))])
    assert await h.advance(10_000) == [("ten", 10_000, False, 0)]
    assert await h.advance(10_000) == [("ten", 20_000, False, 0)]
    assert await h.jump(-HOUR) == []  # now T0 + 21 s - 1 h
    for _ in range(3600 + 8):  # a second at a time, back to T0 + 29 s: nothing
        assert await h.advance(1_000) == []
    assert await h.advance(1_000) == [("ten", 30_000, False, 0)]  # T0 + 30 s, once
    assert h.punctuator.stats.clock_jumps == {"backward": 1}
    dues = [f.due_at for f in h.fired()]
    assert len(dues) == len(set(dues))


async def test_an_update_after_a_step_back_does_not_bring_back_instants_already_fired() -> None:
    h = JumpHarness(T0)
    ten = state("ten", every(10))
    kb = h.put(0, ten)
    await h.punctuator.assign(0, [(kb, ten)], {})
    await h.advance(10_000)
    await h.advance(10_000)  # fired T0+10 s and T0+20 s
    await h.jump(-HOUR)
    updated = dataclasses.replace(ten, version=2, schedule=dataclasses.replace(ten.schedule, data={"v": "2"}))
    h.put(0, updated)
    h.punctuator.upsert(0, kb, updated)  # at T0 + 21 s - 1 h
    for _ in range(3600 + 9):
        await h.advance(1_000)
    dues = [f.due_at - T0 for f in h.fired()]
    assert dues == [0, 10_000, 20_000, 30_000]  # (T0 at assignment) not T0 + 10 s - 1 h..., nor 10 s again


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        # an hourly schedule, the clock jumps a day forward: 24 due instants passed over
        (CatchUpPolicy.EACH, [("hourly", k * HOUR, True, 0) for k in range(1, 25)]),
        (CatchUpPolicy.COALESCE, [("hourly", 24 * HOUR, True, 23)]),
        (CatchUpPolicy.SKIP, []),
    ],
)
async def test_a_jump_forward_follows_the_catch_up_policy_and_is_not_lateness(
    policy: CatchUpPolicy, expected: list[tuple[str, int, bool, int]]
) -> None:
    h = JumpHarness(T0)
    await h.assign(0, [state("hourly", FrequencyTrigger(S, 3600, T0), catch_up=policy, window_ms=2 * DAY)])
    assert await h.advance(1_000) == []
    caught_up = h.punctuator.stats.catch_up_fires  # T0's, at assignment
    fires = await h.jump(DAY)  # now T0 + 1 d + 2 s
    assert fires == expected
    assert h.punctuator.stats.lateness.count == 0  # nothing a day late in the lateness histogram
    assert h.punctuator.stats.clock_jumps == {"forward": 1}
    assert h.punctuator.stats.catch_up_fires == caught_up + len(expected)
    # and afterwards the schedule goes on as scheduled fires at its cadence
    h.clock.now = T0 + 25 * HOUR - 1_000
    h.mono.now += 25 * HOUR - DAY - 3_000
    assert await h.advance(1_000) == [("hourly", 25 * HOUR, False, 0)]
    assert h.punctuator.stats.lateness.count == 1


async def test_a_jump_forward_catches_up_every_schedule_once_and_the_regular_ones_stay_regular() -> None:
    h = JumpHarness(T0)
    await h.assign(
        0,
        [
            state("ten", every(10), catch_up=CatchUpPolicy.COALESCE),
            state("minute", every(60), catch_up=CatchUpPolicy.EACH),
        ],
    )
    assert await h.advance(10_000) == [("ten", 10_000, False, 0)]
    fires = await h.jump(5 * 60_000)  # now T0 + 5 min + 11 s
    assert sorted(fires) == sorted(
        [("ten", 310_000, True, 29)] + [("minute", k * 60_000, True, 0) for k in range(1, 6)]
    )
    assert await h.advance(10_000) == [("ten", 320_000, False, 0)]
    dues = [(f.key.name, f.due_at) for f in h.fired()]
    assert len(dues) == len(set(dues))


async def test_a_difference_under_the_threshold_is_lateness_not_a_jump() -> None:
    h = JumpHarness(T0)
    await h.assign(0, [state("ten", every(10))])
    h.mono.now += 9_000
    h.clock.now += 9_000
    await h.punctuator.tick(S)
    fires = await h.jump(CLOCK_JUMP_MS - 1)  # the wall 1 s + threshold - 1 ms, the monotonic clock 1 s
    assert fires == [("ten", 10_000, False, 0)]
    assert h.punctuator.stats.clock_jumps == {}
    assert h.punctuator.stats.lateness.count == 1
