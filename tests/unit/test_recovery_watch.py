"""The watch over Faust's changelog restore: which partitions are stalled, and when one has nothing left."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest
from faust.types import TP

from scheduler.kafka.recovery import _look, nothing_left, stalled

pytestmark = pytest.mark.unit


def test_a_partition_behind_its_end_with_no_record_for_the_stall_time_is_stalled() -> None:
    remaining = {"a": 3, "b": 2, "c": 0, "d": 5}
    received = {"a": 100.0, "b": 97.0}  # d received nothing since the start (90)
    assert stalled(remaining, received, started_at=90.0, now=103.0, stall_s=5.0) == ["b", "d"]


def test_nothing_is_stalled_before_a_recovery_started() -> None:
    assert stalled({"a": 3}, {}, started_at=None, now=1e9) == []


@pytest.mark.parametrize(
    ("position", "highwater", "queued", "done"),
    [
        (12, 10, 0, True),  # the record at 10 was a commit marker, 11 an abort marker: nothing to receive
        (11, 10, 0, True),
        (10, 10, 0, False),  # the record at the highwater is still to come
        (3, 10, 0, False),
        (12, 10, 4, False),  # fetched records wait in the queue: they may be the partition's
        (None, 10, 0, False),  # no position (resetting)
    ],
)
def test_a_restore_has_nothing_left_only_past_its_end_with_nothing_queued(
    position: int | None, highwater: int, queued: int, done: bool
) -> None:
    assert nothing_left(position, highwater, queued) is done


class _Recovery:
    """What the watch reads of Faust's recovery service: one changelog partition, 3 records behind."""

    def __init__(self, started_at: float) -> None:
        self.in_recovery = True
        self._recovery_started_at = started_at
        self._active_events_received_at: dict[TP, float] = {}
        self.active_highwaters = {TP("t-changelog", 2): 10}
        self.active_offsets = {TP("t-changelog", 2): 7}

    def active_remaining(self) -> dict[TP, int]:
        return {tp: hw - self.active_offsets[tp] for tp, hw in self.active_highwaters.items()}


class _App:
    def __init__(self, recovery: _Recovery, position: int) -> None:
        self.tables = SimpleNamespace(recovery=recovery, changelog_queue=asyncio.Queue())
        self.consumer = SimpleNamespace(position=self._position)
        self._at = position

    async def _position(self, tp: TP) -> int:
        return self._at


@pytest.mark.parametrize(("position", "ended"), [(12, True), (8, False)])
async def test_the_watch_ends_a_restore_past_its_end_and_reports_any_other_stall(
    position: int, ended: bool, caplog: pytest.LogCaptureFixture
) -> None:
    recovery = _Recovery(started_at=time.monotonic() - 10)
    await _look(_App(recovery, position), recovery, {})
    tp = TP("t-changelog", 2)
    assert recovery.active_offsets[tp] == (10 if ended else 7)
    expected = (
        "ended at 12: nothing visible up to its end 11" if ended else "receives nothing: restored to 7 of 10"
    )
    assert expected in caplog.text
