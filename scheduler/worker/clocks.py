"""The worker's two clocks — the wall clock says what an instant is, the monotonic clock how long
something took — and what tells a jump of the wall clock (an NTP step, a VM resumed) from lateness."""

from __future__ import annotations

import time
from collections.abc import Callable

#: the wall clock moving more than this against the monotonic clock between two looks is a clock jump, not
#: lateness
CLOCK_JUMP_MS = 1_000


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class JumpWatch:
    """Looks at the wall clock against the monotonic one."""

    def __init__(self, monotonic: Callable[[], int]) -> None:
        self._monotonic = monotonic
        self._last: tuple[int, int] | None = None  # (wall, monotonic) at the last look

    def jump(self, now: int) -> int:
        """How far the wall clock (`now`) jumped since the last look: ms forward (> 0) or back (< 0), 0 when
        it moved with the monotonic clock within CLOCK_JUMP_MS (or at the first look)."""
        mono = self._monotonic()
        last, self._last = self._last, (now, mono)
        if last is None:
            return 0
        step = now - (last[0] + (mono - last[1]))
        return step if abs(step) > CLOCK_JUMP_MS else 0
