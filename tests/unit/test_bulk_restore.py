"""Which changelog partitions a restore reads in bulk, and from where."""

from __future__ import annotations

import pytest
from faust.types import TP

from scheduler.kafka.bulk_restore import behind

pytestmark = pytest.mark.unit

A, B, C, D = (TP("app-schedules-changelog", p) for p in range(4))


def test_partitions_behind_are_read_from_the_record_after_the_last_applied_when_together_min_records() -> (
    None
):
    # start: the last offset applied (None or -1: none); highwater: the offset of the last record
    starts = {A: None, B: -1, C: 899, D: 999}
    highwaters = {A: 99, B: 98, C: 999, D: 999}
    # A: 100 records, B: 99, C: 100, D: none: 299 in all
    assert behind(starts, highwaters, 299) == {A: 0, B: 0, C: 900}
    assert behind(starts, highwaters, 300) == {}


def test_a_takeover_of_several_partitions_of_a_few_thousand_records_each_is_one_bulk_load() -> None:
    highwaters = {tp: 12_499 for tp in (A, B, C, D)}  # 4 x 12,500: each below the threshold, 50,000 in all
    assert behind({}, highwaters, 20_000) == {A: 0, B: 0, C: 0, D: 0}


def test_an_empty_or_unknown_end_is_never_read() -> None:
    assert behind({A: None, B: 5}, {A: -1, B: None}, 1) == {}
