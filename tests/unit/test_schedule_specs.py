"""Several time specs in one plain schedule (issue 39 item 5): an OR of crons, frequencies and one-shots
without a program fires at the union of their instants, each instant once, on the punctuator's fast path;
`/next` names the specs each instant comes from."""

from __future__ import annotations

from itertools import islice, takewhile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.domain.model import (
    CompositeTrigger,
    CronTrigger,
    FrequencyTrigger,
    InvalidSchedule,
    OnceTrigger,
    PartitionTrigger,
    Schedule,
    ScheduleKey,
    ScheduleState,
    TimeUnit,
    Trigger,
)
from scheduler.domain.triggers.instants import fire_instants, spec_texts, upcoming
from tests.unit.test_punctuator import Harness, dues_by_name

pytestmark = pytest.mark.unit

T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z
S = 1000


def plain(trigger: Trigger) -> ScheduleState:
    schedule = Schedule(ScheduleKey("acme", "u"), trigger, "out", {"name": "u"}, enabled=True)
    schedule.validate()
    return ScheduleState(schedule, T0 - S, T0 - S, T0 - S)


def leaf_instants(trigger: Trigger, after: int, until: int) -> set[int]:
    evaluator = trigger.evaluator()
    assert evaluator is not None
    ev, out = evaluator.anchored(T0 - S), set()
    t = ev.next_due(after)
    while t is not None and t <= until:
        out.add(t)
        t = ev.next_due(t)
    return out


leaves = st.one_of(
    st.integers(1, 30).map(lambda s: CronTrigger(f"*/{s} * * * * *")),
    st.integers(1, 45).map(lambda s: FrequencyTrigger(TimeUnit.SECONDS, s)),
    st.integers(0, 120).map(lambda s: OnceTrigger(T0 + s * S)),
    st.sampled_from([CronTrigger("* * * * *"), CronTrigger("*/2 * * * *")]),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(leaves, min_size=1, max_size=5), st.booleans())
def test_the_union_fires_each_instant_of_any_spec_once_in_order(specs: list[Trigger], nest: bool) -> None:
    tree: Trigger = CompositeTrigger("OR", tuple(specs))
    if nest and len(specs) > 2:
        tree = CompositeTrigger("OR", (specs[0], CompositeTrigger("OR", tuple(specs[1:]))))
    state = plain(tree)
    until = T0 + 300 * S
    expected = sorted(set().union(*(leaf_instants(t, T0 - S - 1, until) for t in specs)))
    got = list(takewhile(lambda t: t <= until, islice(fire_instants(state, T0 - S - 1), len(expected) + 1)))
    assert got == expected
    [(path, union)] = state.time_leaves()
    assert path == "0"


def test_next_names_the_specs_of_each_instant() -> None:
    state = plain(CompositeTrigger("OR", (CronTrigger("*/5 * * * * *"), CronTrigger("*/10 * * * * *"))))
    nxt, _ = upcoming(state, T0, 4)
    assert [(t - T0) // S for t in nxt] == [0, 5, 10, 15]
    extras = spec_texts(state, nxt)
    assert extras["specs"] == [["0.0", "0.1"], ["0.0"], ["0.0", "0.1"], ["0.0"]]
    assert extras["specTexts"] == {"0.0": "cron */5 * * * * *", "0.1": "cron */10 * * * * *"}


def test_a_minute_cron_with_a_seconds_frequency_is_driven_by_the_second() -> None:
    state = plain(CompositeTrigger("OR", (CronTrigger("* * * * *"), FrequencyTrigger(TimeUnit.SECONDS, 20))))
    [(_, union)] = state.time_leaves()
    assert union.unit is TimeUnit.SECONDS


@pytest.mark.parametrize(
    ("trigger", "field"),
    [
        (CompositeTrigger("AND", (CronTrigger("* * * * *"), CronTrigger("*/2 * * * *"))), "program"),
        (
            CompositeTrigger("OR", (CronTrigger("* * * * *"), PartitionTrigger("acme.logs", 1))),
            "trigger.triggers.1",
        ),
        (
            CompositeTrigger(
                "OR", (CronTrigger("* * * * *"), CompositeTrigger("AND", (CronTrigger("* * * * *"),)))
            ),
            "trigger.triggers.1",
        ),
        (PartitionTrigger("acme.logs", 1), "program"),
    ],
)
def test_a_plain_schedule_refuses_what_is_not_an_or_of_time_triggers(trigger: Trigger, field: str) -> None:
    with pytest.raises(InvalidSchedule) as err:
        plain(trigger)
    assert err.value.field == field


async def test_the_punctuator_fires_the_union_once_per_instant_on_its_fast_path() -> None:
    h = Harness(T0 - 1)
    state = plain(CompositeTrigger("OR", (CronTrigger("*/5 * * * * *"), CronTrigger("*/10 * * * * *"),
                                          FrequencyTrigger(TimeUnit.SECONDS, 7))))  # fmt: skip
    await h.assign(0, [state], {TimeUnit.SECONDS: T0 - 1})
    fired = []
    for second in range(0, 31):
        fired += dues_by_name(await h.tick_at(T0 + second * S))
    assert fired == [("u", s * S) for s in (0, 5, 7, 10, 14, 15, 20, 21, 25, 28, 30)]
    assert all(topic == "out" for topic, _, _ in h.sent)  # FiredTasks to its topic: no trigger hop
