"""The fault campaign's own checker (tests/campaign): what it expects of a definition and what it counts as
missed or repeated must be right by itself, since every campaign figure rests on it."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace
from typing import Any

import pytest

from scheduler.domain.triggers.kinds import CronTrigger
from tests.campaign.check import (
    Arrived,
    Fired,
    fault_windows,
    gaps,
    missing_events,
    missing_instants,
    tally_events,
)
from tests.campaign.expect import Definition, definitions
from tests.campaign.plan import choose

pytestmark = pytest.mark.unit

T0 = 1_800_000_000_000  # a whole second


def fire(name: str, due: int, at: int | None = None) -> Arrived:
    return Arrived(
        due + 100 if at is None else at, SimpleNamespace(key=SimpleNamespace(name=name), due_at=due)
    )


def light(name: str, start: int) -> Arrived:
    return Arrived(start + 50, {"name": name, "start": start})


def launch(job: str, schedule: str, *parts: str) -> Arrived:
    events = [{"payload": {"partitionKeys": json.dumps([p])}} for p in parts]
    return Arrived(0, {"jobId": job, "schedule": {"name": schedule}, "events": events})


EVERY_2S = Definition(
    "f", "frequency", {"type": "frequency", "timeUnit": "SECONDS", "time": 2, "start": T0}, T0
)


def test_a_plan_is_the_same_for_its_seed_and_says_what_it_chose():
    a, b = choose(7, 180), choose(7, 180)
    assert a == b and a.line().startswith("seed 7: ")
    assert choose(7, 180, brokers=1).faults and all(
        f.kind in ("kill", "pause", "cut") for f in choose(7, 180, brokers=1).faults
    )


def test_frequency_bounded_and_once_instants_come_from_the_definition():
    assert EVERY_2S.instants(T0, T0 + 7_000) == [T0, T0 + 2_000, T0 + 4_000, T0 + 6_000]
    bounded = Definition("b", "bounded", EVERY_2S.trigger, T0 + 1_000, T0 + 4_000)
    assert bounded.instants(0, T0 + 60_000) == [T0 + 2_000, T0 + 4_000]
    once = Definition("o", "once", {"type": "once", "at": T0 + 1_234}, T0)
    assert once.instants(0, T0 + 60_000) == [T0 + 1_234] and once.instants(0, T0 + 1_234) == []


def test_cron_instants_in_a_zone_agree_with_the_schedulers_own_evaluator():
    """The checker's cron matcher and the scheduler's cron evaluator are two implementations: they agree."""
    for seed in range(5):
        (d,) = definitions({"cron_zone": 1}, T0, 120, random.Random(seed))
        evaluator = CronTrigger(d.trigger["expression"], d.trigger["timezone"]).evaluator()
        theirs, t = [], T0 - 1
        while (nxt := evaluator.next_due(t)) is not None and nxt < T0 + 120_000:
            theirs.append(nxt)
            t = nxt
        assert d.instants(0, T0 + 120_000) == theirs and theirs, d.trigger


def test_a_union_fires_each_instant_of_its_frequencies_once_and_a_limited_one_its_first_n():
    union = Definition(
        "u", "union", {"type": "or", "triggers": [EVERY_2S.trigger, {**EVERY_2S.trigger, "time": 3}]}, T0
    )
    assert union.instants(T0, T0 + 7_000) == [T0, T0 + 2_000, T0 + 3_000, T0 + 4_000, T0 + 6_000]
    limited = Definition("l", "limited", EVERY_2S.trigger, T0, max_fires=3)
    assert limited.body("t")["maxFires"] == 3
    assert limited.instants(T0 + 1, T0 + 60_000) == [
        T0 + 2_000,
        T0 + 4_000,
        T0 + 6_000,
    ]  # (from when applied)
    assert limited.instants(T0, T0 + 3_000) == [T0, T0 + 2_000]
    assert limited.beyond([T0, T0 + 2_000, T0 + 4_000, T0 + 6_000, T0 + 8_000], T0) == [
        T0 + 6_000,
        T0 + 8_000,
    ]
    assert limited.beyond([T0], T0) == [] and EVERY_2S.beyond([T0 + 8_000], T0) == []


def test_the_kinds_added_later_leave_every_other_draw_of_a_seed_as_it_was():
    from tests.campaign.plan import LATER_KINDS

    plan = choose(52, 50, brokers=1, scale=0.5)
    assert set(LATER_KINDS) <= set(plan.kinds)
    earlier = {k: n for k, n in plan.kinds.items() if k not in LATER_KINDS}
    assert earlier == {"frequency": 14, "cron_zone": 15, "once": 8, "bounded": 23, "event": 6}  # (as before)
    assert [f.kind for f in plan.faults] == ["kill", "cut"]
    defs = definitions(plan.kinds, T0, 50, random.Random(1), random.Random(2))
    assert {d.kind for d in defs} >= {"union", "limited"}
    assert [d.trigger for d in defs if d.kind not in LATER_KINDS] == [
        d.trigger for d in definitions(earlier, T0, 50, random.Random(1))
    ]


def test_an_instant_not_fired_is_missed_unless_before_the_schedule_was_applied():
    got = Fired.of([fire("f", T0), fire("f", T0 + 4_000)])
    assert missing_instants(got, [EVERY_2S], T0 + 5_000, {}, set(), []) == {"f": [T0 + 2_000]}
    assert missing_instants(got, [EVERY_2S], T0 + 5_000, {"f": T0 + 3_000}, set(), []) == {}
    assert missing_instants(Fired(), [EVERY_2S], T0 + 1, {}, set(), []) == {"f": [T0]}  # (never shown: lost)


def test_a_light_scheduler_schedule_may_coalesce_only_inside_a_faults_window():
    windows = fault_windows([{"at": T0 + 10_000, "healedAt": T0 + 12_000}])
    assert windows == [(T0 + 8_000, T0 + 42_000)]
    got = Fired.of([light("f", t) for t in range(T0, T0 + 8_000, 2_000)], [light("f", T0 + 50_000)])
    assert missing_instants(got, [EVERY_2S], T0 + 52_000, {}, {"f"}, windows) == {
        "f": [T0 + 42_000, T0 + 44_000, T0 + 46_000, T0 + 48_000]
    }
    assert "f" in missing_instants(got, [EVERY_2S], T0 + 52_000, {}, set(), windows)  # (EACH: all count)


def test_a_coalesced_fire_in_a_faults_window_covers_the_instants_missed_just_before_the_window():
    """The previous owner's last commit lagged the fault: the takeover coalesced from there (seed 2021)."""
    windows = fault_windows([{"at": T0 + 10_000, "healedAt": T0 + 12_000}])  # [8 s, 42 s)
    before = [light("f", t) for t in range(T0, T0 + 4_000, 2_000)]  # 0 and 2 s fired, 4 and 6 s not
    got = Fired.of([], [*before, light("f", T0 + 20_000), light("f", T0 + 42_000)])
    assert missing_instants(got, [EVERY_2S], T0 + 44_000, {}, {"f"}, windows) == {}
    assert "f" in missing_instants(got, [EVERY_2S], T0 + 44_000, {}, set(), windows)  # (EACH: all count)
    # a run ended by a fire outside every window is missed; so is one that began long before the window
    after = Fired.of([], [*before, light("f", T0 + 6_000)])
    assert missing_instants(after, [EVERY_2S], T0 + 8_000, {}, {"f"}, windows) == {"f": [T0 + 4_000]}
    late = fault_windows([{"at": T0 + 30_000, "healedAt": T0 + 31_000}])  # [28 s, 61 s)
    got = Fired.of([], [*before, light("f", T0 + 40_000)])
    assert missing_instants(got, [EVERY_2S], T0 + 42_000, {}, {"f"}, late) == {
        "f": [T0 + 4_000, T0 + 6_000, T0 + 8_000, T0 + 10_000, T0 + 12_000, T0 + 14_000, T0 + 16_000]
    }


def test_the_duplicates_are_shown_by_schedule_and_instant():
    got = Fired.of([fire("f", T0), fire("f", T0), fire("f", T0 + 2_000), fire("g", T0)], [light("g", T0)])
    assert got.duplicates() == 2
    assert got.duplicate_examples() == {"f": [T0], "g": [T0]}


def test_an_instant_fired_twice_is_one_duplicate_whichever_topic_it_came_by():
    got = Fired.of([fire("f", T0), fire("f", T0), fire("f", T0 + 2_000)], [light("g", T0), light("g", T0)])
    assert got.duplicates() == 2


def test_an_event_must_be_in_exactly_one_launch_of_its_schedule():
    events: dict[str, tuple[str, int]] = {
        "e1": ("s", T0),
        "e2": ("s", T0),
        "e3": ("s", T0),
        "e0": ("s", T0 - 9),
    }
    launches = [launch("j1", "s", "e1", "e2"), launch("j2", "other", "e3"), launch("j1", "s", "e1", "e2")]
    applied = {"s": T0 - 5}  # (e0 was sent before its schedule was applied: not checked)
    assert missing_events(launches, events, applied) == ["e3"]  # (launched, but by another schedule)
    tally: dict[str, Any] = tally_events(launches, events, applied)
    assert tally["eventsMissed"] == 1 and tally["eventDuplicates"] == 1  # (j1 sent twice)
    merged_twice = [launch("j1", "s", "e1"), launch("j2", "s", "e1", "e2"), launch("j3", "s", "e3")]
    assert tally_events(merged_twice, events, applied)["eventDuplicates"] == 1  # (e1 in two jobs)


def test_the_longest_gap_of_a_fault_is_the_latest_arrival_due_in_its_window():
    faults = [
        {"kind": "kill", "at": T0, "healedAt": T0 + 1_000},
        {"kind": "pause", "at": T0 + 20_000, "healedAt": T0 + 30_000},
    ]
    records = [
        fire("a", T0, T0 + 9_000),
        fire("b", T0 + 19_000, T0 + 40_000),
        fire("c", T0 - 5_000, T0 + 60_000),
    ]
    out = gaps(records, faults)
    assert out["kill"] == {"ms": 9_000, "schedule": "a", "due": T0}  # (b's instant is due in the pause's)
    assert out["pause"]["ms"] == 21_000
