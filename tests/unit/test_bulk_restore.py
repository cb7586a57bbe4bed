"""Which changelog partitions a restore reads in bulk, and from where."""

from __future__ import annotations

import pytest
from faust.types import TP

from scheduler.kafka.bulk_restore import behind

pytestmark = pytest.mark.unit

A, B, C, D = (TP("app-schedules-changelog", p) for p in range(4))


def test_partitions_at_least_min_records_behind_are_read_from_the_record_after_the_last_applied() -> None:
    # start: the last offset applied (None or -1: none); highwater: the offset of the last record
    starts = {A: None, B: -1, C: 899, D: 950}
    highwaters = {A: 99, B: 98, C: 999, D: 999}
    assert behind(starts, highwaters, 100) == {A: 0, C: 900}  # B: 99 records; D: 49


def test_an_empty_or_unknown_end_is_never_read() -> None:
    assert behind({A: None, B: 5}, {A: -1, B: None}, 1) == {}
