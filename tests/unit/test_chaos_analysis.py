"""The chaos report's arithmetic: missed and repeated due instants, and the gap each fault owns."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from scheduler.domain.model import ScheduleKey
from tests.chaos import analyse

pytestmark = pytest.mark.unit


@dataclass
class Fire:
    key: ScheduleKey
    due_at: int
    fired_at: int

    @property
    def job_id(self) -> str:
        return f"{self.key.name}@{self.due_at}"


def fires(name: str, start: int, end: int, late: dict[int, int] | None = None) -> list[Fire]:
    late = late or {}
    return [Fire(ScheduleKey("chaos", name), t, t + late.get(t, 5)) for t in range(start, end, 1000)]


def test_a_missing_and_a_repeated_due_instant_are_counted():
    records = fires("a", 0, 20_000) + fires("b", 0, 20_000)
    records = [r for r in records if not (r.key.name == "a" and r.due_at == 7_000)]
    records.append(Fire(ScheduleKey("chaos", "b"), 9_000, 9_500))
    report = analyse(records, 2, 0, 20_000, [])
    assert report["missed"] == 1
    assert report["duplicates"] == 1
    assert report["missedExamples"] == {"a": [7_000]}


def test_each_fault_owns_the_gap_of_the_due_instants_up_to_the_next_fault():
    """A slow fault must not be reported as the gap of the fault before it too."""
    records = fires("a", 0, 120_000, late={12_000: 4_000, 40_000: 30_000})
    kills = [{"kind": "kill", "killedAt": 10_000}, {"kind": "pause", "killedAt": 38_000}]
    report = analyse(records, 1, 0, 120_000, kills)
    assert [k["maxLatenessMs"] for k in report["aroundKills"]] == [4_000, 30_000]
    assert report["longestGapMsByFault"] == {"kill": 4_000, "pause": 30_000}
