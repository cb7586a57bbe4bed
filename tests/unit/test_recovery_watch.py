"""The watch over Faust's changelog restore: which partitions are stalled, and when one has nothing left."""

from __future__ import annotations

import pytest

from scheduler.kafka.recovery import nothing_left, stalled

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
