"""The instants a schedule fires at (`/next`, dry runs, backfills): a plain time trigger at its dues, an
AND/OR tree where the trigger agent makes its jobs, one job per instant (issue 39: `/next` of AND(every
4 s, every 6 s) promised every 2 s while it launched every 6 s; OR(*/5 s, */10 s) launched :00 twice)."""

from __future__ import annotations

import random
from itertools import islice, takewhile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.domain.commands import manual_fires
from scheduler.domain.model import (
    Action,
    CompositeTrigger,
    CronTrigger,
    FrequencyTrigger,
    PartitionTrigger,
    ProgramId,
    Schedule,
    ScheduleCommand,
    ScheduleKey,
    ScheduleState,
    TimeUnit,
    Trigger,
)
from scheduler.domain.triggers.instants import fire_instants, upcoming
from scheduler.domain.triggers.progress import TriggerProgress, apply, reset, satisfied

pytestmark = pytest.mark.unit

T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z
S = 1000
PROGRAM = ProgramId("t", "app", "workflow", "p")


def every(seconds: int) -> FrequencyTrigger:
    return FrequencyTrigger(TimeUnit.SECONDS, seconds)


def cron_every(seconds: int) -> CronTrigger:
    return CronTrigger(f"*/{seconds} * * * * *")


def state(trigger: Trigger, **extra: object) -> ScheduleState:
    schedule = Schedule(ScheduleKey("t", "s"), trigger, "out", enabled=True, program=PROGRAM, **extra)  # type: ignore[arg-type]
    return ScheduleState(schedule, T0, T0, T0 - S)  # (a frequency starts on the next second: T0)


def first(s: ScheduleState, n: int, after: int = T0) -> list[int]:
    return list(islice(fire_instants(s, after), n))


def seconds(instants: list[int]) -> list[int]:
    return [(t - T0) // S for t in instants]


def test_a_plain_time_trigger_fires_at_each_of_its_dues() -> None:
    assert seconds(first(state(every(5)), 4)) == [5, 10, 15, 20]


def test_an_and_of_every_4_s_and_every_6_s_fires_every_6_s() -> None:
    """Both must come due after the last job: 4 and 6 -> 6; 8 and 12 -> 12; 16 and 18 -> 18."""
    both = CompositeTrigger("AND", (every(4), every(6)))
    assert seconds(first(state(both), 5)) == [6, 12, 18, 24, 30]


def test_an_or_of_two_crons_due_at_the_same_instants_fires_each_instant_once() -> None:
    either = CompositeTrigger("OR", (cron_every(5), cron_every(10)))
    assert seconds(first(state(either), 6)) == [5, 10, 15, 20, 25, 30]


def test_an_and_waiting_for_data_lists_nothing_until_the_data_counted() -> None:
    tree = CompositeTrigger("AND", (every(10), PartitionTrigger("t.feed", 1)))
    s = state(tree)
    assert first(s, 3) == []
    progress = TriggerProgress(1)
    assert apply(tree, progress, "0.1", _partition(), {}, now=T0 + 3 * S, active_since=T0 - S)
    fires, _ = upcoming(s, T0 + 4 * S, 3, progress=progress)
    assert seconds(fires) == [10]  # (with the data that counted; the next job needs new data)


def test_an_or_with_a_data_leaf_lists_what_its_time_leaf_fires() -> None:
    tree = CompositeTrigger("OR", (every(10), PartitionTrigger("t.feed", 1)))
    assert seconds(first(state(tree), 3)) == [10, 20, 30]


def test_a_calendar_removes_a_due_and_says_which() -> None:
    skipped: list[tuple[int, str]] = []
    weekend = lambda t: "holidays" if (t - T0) // S in (10, 20) else None  # noqa: E731
    walk = fire_instants(state(every(5)), T0, excluded=weekend, skipped=skipped)
    assert seconds(list(islice(walk, 4))) == [5, 15, 25, 30]
    assert [(seconds([t])[0], c) for t, c in skipped] == [(10, "holidays"), (20, "holidays")]


def test_a_backfill_of_an_and_fires_where_the_tree_fires_and_leaves_out_what_waits_for_data() -> None:
    def backfill(trigger: Trigger) -> list[int]:
        cmd = ScheduleCommand(ScheduleKey("t", "s"), Action.BACKFILL, fire_range=(T0 + 1, T0 + 30 * S))
        return seconds(manual_fires(state(trigger), cmd))

    assert backfill(CompositeTrigger("AND", (every(4), every(6)))) == [6, 12, 18, 24, 30]
    assert backfill(CompositeTrigger("AND", (every(10), PartitionTrigger("t.feed", 1)))) == [10, 20, 30]
    assert backfill(CompositeTrigger("OR", (cron_every(10), cron_every(15)))) == [10, 15, 20, 30]


def test_a_leaf_due_at_the_instant_of_the_last_job_counts_for_no_next_job() -> None:
    """The agent: OR(a, b) both due at 10 -> one job; AND(a, b): b's fire of 10 after the job of 10 does not
    count toward the next one."""
    either = CompositeTrigger("OR", (cron_every(5), cron_every(10)))
    progress = TriggerProgress(1)
    assert apply(either, progress, "0.0", None, {}, now=T0 + 10 * S, due=T0 + 10 * S)
    assert satisfied(either, progress)
    reset(progress, T0 + 10 * S, T0 + 10 * S)
    assert not apply(either, progress, "0.1", None, {}, now=T0 + 10 * S, due=T0 + 10 * S)
    assert not satisfied(either, progress)
    assert TriggerProgress.from_json(progress.to_json()).last_due == T0 + 10 * S


# --- the agent's jobs are the instants listed (property) -------------------------------------------


def _partition():  # type: ignore[no-untyped-def]
    from scheduler.domain.events import DataEvent

    return DataEvent("t.feed", 1, 0)


def _agent_jobs(s: ScheduleState, until: int, rnd: random.Random) -> list[int]:
    """The instants the trigger agent makes jobs at, fed every time leaf's fire up to `until` in due order
    (leaves due at one instant in any order), as the punctuator sends them."""
    tree = s.schedule.trigger
    fires = []
    for path, evaluator in s.time_leaves():
        due = evaluator.next_due(T0)
        while due is not None and due <= until:
            fires.append((due, rnd.random(), path))
            due = evaluator.next_due(due)
    progress, jobs = TriggerProgress(1), []
    for due, _, path in sorted(fires):
        apply(tree, progress, path, None, {}, now=due, due=due, active_since=T0 - S)
        if satisfied(tree, progress):
            jobs.append(due)
            reset(progress, due, due)
    return jobs


def _leaf(draw: st.DrawFn) -> Trigger:
    n = draw(st.integers(1, 9))
    return every(n) if draw(st.booleans()) else cron_every(n)


@st.composite
def trees(draw: st.DrawFn, depth: int = 2) -> Trigger:
    if depth == 0 or draw(st.integers(0, 2)) == 0:
        return _leaf(draw)
    children = tuple(draw(trees(depth - 1)) for _ in range(draw(st.integers(1, 3))))
    return CompositeTrigger(draw(st.sampled_from(("AND", "OR"))), children)


@settings(max_examples=300, deadline=None)
@given(trees(), st.integers(0, 2**32))
def test_the_agent_makes_a_job_at_each_instant_listed_and_at_no_other(tree: Trigger, seed: int) -> None:
    s = state(tree)
    until = T0 + 120 * S
    listed = list(takewhile(lambda t: t <= until, fire_instants(s, T0)))
    assert _agent_jobs(s, until, random.Random(seed)) == listed
    assert len(set(listed)) == len(listed)
