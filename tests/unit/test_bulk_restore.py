"""Which changelog partitions a restore reads in bulk, and from where."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP

from scheduler.kafka.bulk_restore import behind, load

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


class _Consumer:
    """A consumer that answers `per_fetch` records of each partition per fetch, up to `ends`, and notes
    what `seen` holds at each fetch."""

    def __init__(self, ends: dict[TP, int], per_fetch: int, seen: dict[TP, int]) -> None:
        self.ends, self.per_fetch, self.seen = ends, per_fetch, seen
        self.positions: dict[Any, int] = {}
        self.at_fetch: list[dict[TP, int]] = []

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def assign(self, tps: list[Any]) -> None: ...

    def seek(self, tp: Any, offset: int) -> None:
        self.positions[tp] = offset

    async def position(self, tp: Any) -> int:
        return self.positions[tp]

    async def getmany(self, *tps: Any, timeout_ms: int, max_records: int) -> dict[Any, list[Any]]:
        self.at_fetch.append(dict(self.seen))
        out = {}
        for tp in tps:
            start = self.positions[tp]
            end = min(start + self.per_fetch, self.ends[TP(tp.topic, tp.partition)] + 1)
            out[tp] = [SimpleNamespace(offset=o, key=b"k", value=b"v") for o in range(start, end)]
            self.positions[tp] = end
        return out


async def test_a_long_load_moves_the_recovery_offsets_after_each_fetch_not_only_at_its_end() -> None:
    """Faust's recovery offsets (what the group's watchdog counts as progress: liveness.Membership) move
    with each fetch applied: a load of 10M records took minutes, and the worker, seen as stalled, left the
    group in the middle of it, to start the same load again elsewhere."""
    offsets: dict[TP, int] = {A: -1}
    consumer = _Consumer({A: 99, B: 49}, per_fetch=20, seen=offsets)
    applied: list[int] = []
    last, count = await load(
        lambda: consumer,
        {A: 0, B: 0},
        {A: 99, B: 49},
        lambda events: applied.append(len(list(events))),
        60,
        offsets,
    )
    assert count == 150 and last == {A: 99, B: 49}
    assert [seen.get(A) for seen in consumer.at_fetch] == [-1, 19, 39, 59, 79]  # moved after each fetch
    # one short of each end until the load returns (its caller sets them): Faust's recovery does not see
    # a restore done while its step still runs (it logs "POSSIBLE INTERNAL ERROR" after 30 s of that)
    assert offsets == {A: 98, B: 48}
