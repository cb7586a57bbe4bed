"""Labels and descriptions (their limits), label selectors, and GET /schedules' filters (issue 39)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.domain.labels import MAX_LABELS, parse_selector, validate_description, validate_labels
from scheduler.domain.model import (
    CompositeTrigger,
    CronTrigger,
    FrequencyTrigger,
    InvalidSchedule,
    Paused,
    ProgramId,
    Schedule,
    ScheduleKey,
    ScheduleState,
    TimeUnit,
)
from scheduler.http.filters import BadFilter, parse_filters

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("labels", "field"),
    [
        ({f"k{i}": "v" for i in range(MAX_LABELS + 1)}, "labels"),
        ({"": "v"}, "labels."),
        ({"-team": "v"}, "labels.-team"),
        ({"team": "data science"}, "labels.team"),
        ({"team": "x" * 64}, "labels.team"),
        ({"é": "v"}, "labels.é"),
    ],
)
def test_labels_that_cannot_be_kept_are_refused_naming_the_label(labels: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidSchedule) as exc:
        validate_labels(labels)
    assert exc.value.field == field


def test_labels_within_the_limits_and_an_empty_value_are_kept() -> None:
    validate_labels({"team": "data", "tier": "", "app.kubernetes.io": "x-1_2.3", "k" * 63: "v" * 63})
    validate_description("x" * 1000)
    with pytest.raises(InvalidSchedule, match="longer than 1000"):
        validate_description("x" * 1001)


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ("team=data", {"team": "data"}, True),
        ("team==data", {"team": "data"}, True),
        ("team=data", {"team": "ops"}, False),
        ("team=data", {}, False),
        ("tier!=bronze", {}, True),
        ("tier!=bronze", {"tier": "bronze"}, False),
        ("critical", {"critical": ""}, True),
        ("critical", {}, False),
        ("!deprecated", {}, True),
        ("!deprecated", {"deprecated": "yes"}, False),
        ("team=data, tier!=bronze,critical", {"team": "data", "tier": "gold", "critical": ""}, True),
        ("team=data,tier!=bronze", {"team": "data", "tier": "bronze"}, False),
    ],
)
def test_a_selector_matches_when_every_term_holds(
    selector: str, labels: dict[str, str], matches: bool
) -> None:
    assert parse_selector(selector).matches(labels) is matches


@pytest.mark.parametrize("selector", ["", "team=data,", "a b=c", "team=da ta", "=x", "!", "x" * 64])
def test_a_selector_that_is_not_one_says_so(selector: str) -> None:
    with pytest.raises(ValueError):
        parse_selector(selector)


def state(name: str, **extra: object) -> ScheduleState:
    schedule = Schedule(ScheduleKey("acme", name), CronTrigger("0 0 3 * * *"), "out", enabled=True)
    paused = extra.pop("paused", None)
    return ScheduleState(replace(schedule, **extra), 1, 1, 1, 1, paused)  # type: ignore[arg-type]


def test_the_filters_of_the_list_each_hold_and_an_unknown_one_is_refused() -> None:
    gold = state("a", labels={"team": "data", "tier": "gold"})
    off = state("b", enabled=False, paused=Paused(5, "why"), topic="other")
    launched = state(
        "c",
        trigger=CompositeTrigger("OR", (FrequencyTrigger(TimeUnit.SECONDS, 5),)),
        program=ProgramId("acme", "app", "workflow", "etl"),
    )
    everything = [gold, off, launched]

    def listed(**query: str) -> list[str]:
        match = parse_filters(query).match
        return [s.schedule.key.name for s in everything if match is None or match(s)]

    assert listed() == ["a", "b", "c"]
    assert listed(tenant="acme", limit="5") == ["a", "b", "c"]
    assert listed(label="team=data") == ["a"]
    assert listed(label="tier!=gold") == ["b", "c"]
    assert listed(enabled="false") == ["b"]
    assert listed(paused="true") == ["b"] and listed(paused="false") == ["a", "c"]
    assert listed(trigger="or") == ["c"] and listed(trigger="cron") == ["a", "b"]
    assert listed(program="acme/app/workflow/etl") == ["c"]
    assert listed(topic="other") == ["b"]
    assert listed(topic="out", enabled="true", label="team") == ["a"]
    next_fire = {"a": 1_000, "b": None, "c": 5_000}
    timed = parse_filters({"nextBefore": "4000"}, lambda st: next_fire[st.schedule.key.name]).match
    assert timed is not None and [s.schedule.key.name for s in everything if timed(s)] == ["a"]
    timed = parse_filters({"nextAfter": "1000"}, lambda st: next_fire[st.schedule.key.name]).match
    assert timed is not None and [s.schedule.key.name for s in everything if timed(s)] == ["a", "c"]
    ended = replace(gold, schedule=replace(gold.schedule, max_fires=1), fires=1)
    done = parse_filters({"finished": "true"}).match
    assert done is not None and [done(s) for s in (*everything, ended)] == [False, False, False, True]
    for query, field in (
        ({"nextBefore": "tomorrow"}, "nextBefore"),
        ({"finished": "1"}, "finished"),
        ({"labels": "team=data"}, "labels"),
        ({"label": "team=data,"}, "label"),
        ({"enabled": "yes"}, "enabled"),
        ({"trigger": "hourly"}, "trigger"),
    ):
        with pytest.raises(BadFilter) as exc:
            parse_filters(query)
        assert exc.value.field == field
