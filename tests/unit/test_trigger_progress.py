"""Trigger progress: thresholds counted across events, AND/OR trees, resets, replay dedupe, JSON form."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scheduler.domain.events import DataEvent, ProgramStatusEvent
from scheduler.domain.model import (
    CompositeTrigger,
    CronTrigger,
    DataSizeTrigger,
    ElapsedTrigger,
    FrequencyTrigger,
    PartitionTrigger,
    ProgramId,
    ProgramOutcome,
    ProgramStatusTrigger,
    TimeUnit,
    Trigger,
    trigger_leaves,
)
from scheduler.domain.triggers.progress import (
    MAX_EVENTS_KEPT,
    LeafProgress,
    TriggerProgress,
    apply,
    describe,
    elapsed_due,
    find,
    reset,
    satisfied,
)

pytestmark = pytest.mark.unit

T0 = 1_704_067_200_000
PROG_A = ProgramId("sales", "etl", "workflow", "ingest")
DATASET = "sales.orders"


def summary(i: int = 0) -> dict[str, Any]:
    return {"timestamp": T0 + i, "eventType": "partition", "payload": {"n": str(i)}}


def parts(n: int, dataset: str = DATASET) -> DataEvent:
    return DataEvent(dataset, n, 0)


def data_bytes(n: int, partitions: int = 0) -> DataEvent:
    return DataEvent(DATASET, partitions, n)


def status(st: str, program: ProgramId = PROG_A) -> ProgramStatusEvent:
    return ProgramStatusEvent(program, "run-1", st)


def fresh() -> TriggerProgress:
    return TriggerProgress(version=1)


# --- leaves --------------------------------------------------------------------------------------


def test_partition_threshold_is_counted_across_events() -> None:
    t = PartitionTrigger(DATASET, min_partitions=5)
    p = fresh()
    assert apply(t, p, "0", parts(2), summary(1))
    assert not satisfied(t, p)
    assert apply(t, p, "0", parts(2), summary(2))
    assert not satisfied(t, p)
    assert apply(t, p, "0", parts(1), summary(3))
    assert satisfied(t, p)
    assert p.leaves["0"].partitions == 5
    assert p.events == [summary(1), summary(2), summary(3)]


def test_partition_trigger_does_not_count_a_data_event_without_partitions() -> None:
    t = PartitionTrigger(DATASET, 1)
    p = fresh()
    assert not apply(t, p, "0", data_bytes(1000), summary())
    assert not satisfied(t, p)
    assert p.events == []


def test_data_size_sums_bytes_of_partition_and_data_events() -> None:
    t = DataSizeTrigger(DATASET, min_bytes=1000)
    p = fresh()
    assert apply(t, p, "0", data_bytes(400, partitions=2), summary(1))  # a partition event with bytes
    assert apply(t, p, "0", data_bytes(500), summary(2))  # a data event
    assert not satisfied(t, p)
    assert apply(t, p, "0", data_bytes(100), summary(3))
    assert satisfied(t, p)
    assert p.leaves["0"].bytes == 1000


def test_data_size_does_not_count_an_event_without_bytes() -> None:
    t = DataSizeTrigger(DATASET, 1)
    p = fresh()
    assert not apply(t, p, "0", parts(3), summary())
    assert not satisfied(t, p)


@pytest.mark.parametrize(
    ("outcome", "statuses"),
    [
        (ProgramOutcome.SUCCEEDED, {"COMPLETED"}),
        (ProgramOutcome.FAILED, {"FAILED"}),
        (ProgramOutcome.KILLED, {"KILLED"}),
        (ProgramOutcome.FINISHED, {"COMPLETED", "FAILED", "KILLED"}),
    ],
)
def test_program_outcome_matches_exactly_its_statuses(outcome: ProgramOutcome, statuses: set[str]) -> None:
    all_statuses = {"PENDING", "STARTING", "RUNNING", "SUSPENDED", "RESUMING", "STOPPING"} | {
        "COMPLETED",
        "FAILED",
        "KILLED",
    }
    assert {s for s in all_statuses if outcome.matches(s)} == statuses


@pytest.mark.parametrize(
    ("on", "st", "fires"),
    [
        ((ProgramOutcome.SUCCEEDED,), "COMPLETED", True),
        ((ProgramOutcome.SUCCEEDED,), "FAILED", False),
        ((ProgramOutcome.SUCCEEDED,), "KILLED", False),
        ((ProgramOutcome.SUCCEEDED,), "RUNNING", False),
        ((ProgramOutcome.FAILED,), "FAILED", True),
        ((ProgramOutcome.FAILED,), "COMPLETED", False),
        ((ProgramOutcome.FINISHED,), "COMPLETED", True),
        ((ProgramOutcome.FINISHED,), "FAILED", True),
        ((ProgramOutcome.FINISHED,), "KILLED", True),
        ((ProgramOutcome.FINISHED,), "STOPPING", False),
        ((ProgramOutcome.FAILED, ProgramOutcome.KILLED), "KILLED", True),
        ((ProgramOutcome.FAILED, ProgramOutcome.KILLED), "COMPLETED", False),
    ],
)
def test_program_status_trigger_fires_on_a_matching_outcome(
    on: tuple[ProgramOutcome, ...], st: str, fires: bool
) -> None:
    t = ProgramStatusTrigger(PROG_A, on)
    p = fresh()
    assert apply(t, p, "0", status(st), summary()) is fires
    assert satisfied(t, p) is fires
    assert len(p.events) == (1 if fires else 0)


def test_program_status_trigger_defaults_to_succeeded() -> None:
    assert ProgramStatusTrigger(PROG_A).on == (ProgramOutcome.SUCCEEDED,)


@pytest.mark.parametrize("time_trigger", [CronTrigger("0 * * * *"), FrequencyTrigger(TimeUnit.HOURS, 1)])
def test_a_time_leaf_fires_when_it_comes_due(time_trigger: Trigger) -> None:
    p = fresh()
    assert not satisfied(time_trigger, p)
    assert apply(time_trigger, p, "0", None, {"eventType": "time", "payload": {"due": str(T0)}})
    assert satisfied(time_trigger, p)


@pytest.mark.parametrize(
    ("trigger", "event"),
    [
        (PartitionTrigger(DATASET), status("COMPLETED")),
        (PartitionTrigger(DATASET), None),
        (DataSizeTrigger(DATASET, 1), status("COMPLETED")),
        (DataSizeTrigger(DATASET, 1), None),
        (ProgramStatusTrigger(PROG_A, (ProgramOutcome.FINISHED,)), parts(3)),
        (ProgramStatusTrigger(PROG_A, (ProgramOutcome.FINISHED,)), None),
        (CronTrigger("0 * * * *"), parts(3)),
        (FrequencyTrigger(TimeUnit.HOURS, 1), status("COMPLETED")),
    ],
)
def test_an_event_of_the_wrong_kind_for_the_leaf_does_not_count(
    trigger: Trigger, event: DataEvent | ProgramStatusEvent | None
) -> None:
    p = fresh()
    assert not apply(trigger, p, "0", event, summary())
    assert not satisfied(trigger, p)
    assert p.events == []


def test_an_event_for_a_path_that_is_not_in_the_tree_does_not_count() -> None:
    t = CompositeTrigger("OR", (PartitionTrigger(DATASET),))
    p = fresh()
    assert not apply(t, p, "0.5", parts(1), summary())
    assert not apply(t, p, "0", parts(1), summary())  # the composite itself is not a leaf
    assert not satisfied(t, p)


# --- composites ----------------------------------------------------------------------------------

AND_TREE = CompositeTrigger("AND", (ProgramStatusTrigger(PROG_A), PartitionTrigger(DATASET, 2)))
OR_TREE = CompositeTrigger("OR", (ProgramStatusTrigger(PROG_A), PartitionTrigger(DATASET, 2)))


def test_leaf_paths_of_a_composite() -> None:
    assert [path for path, _ in trigger_leaves(AND_TREE)] == ["0.0", "0.1"]


def test_and_is_satisfied_only_when_both_children_are() -> None:
    p = fresh()
    apply(AND_TREE, p, "0.0", status("COMPLETED"), summary(1))
    assert not satisfied(AND_TREE, p)
    apply(AND_TREE, p, "0.1", parts(1), summary(2))
    assert not satisfied(AND_TREE, p)
    apply(AND_TREE, p, "0.1", parts(1), summary(3))
    assert satisfied(AND_TREE, p)


def test_and_with_data_first_then_program() -> None:
    p = fresh()
    apply(AND_TREE, p, "0.1", parts(2), summary(1))
    assert not satisfied(AND_TREE, p)
    apply(AND_TREE, p, "0.0", status("FAILED"), summary(2))  # not what the leaf waits for
    assert not satisfied(AND_TREE, p)
    apply(AND_TREE, p, "0.0", status("COMPLETED"), summary(3))
    assert satisfied(AND_TREE, p)
    assert p.events == [summary(1), summary(3)]


def test_or_is_satisfied_by_the_program_alone() -> None:
    p = fresh()
    apply(OR_TREE, p, "0.0", status("COMPLETED"), summary())
    assert satisfied(OR_TREE, p)


def test_or_is_satisfied_by_the_partitions_alone() -> None:
    p = fresh()
    apply(OR_TREE, p, "0.1", parts(1), summary())
    assert not satisfied(OR_TREE, p)
    apply(OR_TREE, p, "0.1", parts(1), summary())
    assert satisfied(OR_TREE, p)


NESTED = CompositeTrigger(
    "AND",
    (
        DataSizeTrigger(DATASET, 100),  # 0.0
        CompositeTrigger(
            "OR",
            (
                CompositeTrigger(
                    "AND", (PartitionTrigger("sales.returns"), CronTrigger("0 6 * * *"))
                ),  # 0.1.0
                ProgramStatusTrigger(PROG_A, (ProgramOutcome.FINISHED,)),  # 0.1.1
            ),
        ),
    ),
)


def test_nested_composite_leaf_paths() -> None:
    assert [path for path, _ in trigger_leaves(NESTED)] == ["0.0", "0.1.0.0", "0.1.0.1", "0.1.1"]
    assert find(NESTED, "0.1.0") == NESTED.triggers[1].triggers[0]  # type: ignore[union-attr]
    assert find(NESTED, "0.1.0.1") == CronTrigger("0 6 * * *")
    assert find(NESTED, "0") == NESTED


@pytest.mark.parametrize("path", ["", "1", "0.2", "0.0.0", "0.1.0.2", "1.0"])
def test_find_of_a_path_outside_the_tree_is_none(path: str) -> None:
    assert find(NESTED, path) is None


def test_nested_composite_is_satisfied_through_its_inner_and() -> None:
    p = fresh()
    apply(NESTED, p, "0.0", data_bytes(100), summary(1))
    apply(NESTED, p, "0.1.0.0", parts(1, "sales.returns"), summary(2))
    assert not satisfied(NESTED, p)
    assert not satisfied(NESTED.triggers[1], p, "0.1")
    apply(NESTED, p, "0.1.0.1", None, summary(3))
    assert satisfied(NESTED.triggers[1].triggers[0], p, "0.1.0")  # type: ignore[union-attr]
    assert satisfied(NESTED, p)


def test_nested_composite_is_satisfied_through_its_inner_or_program_branch() -> None:
    p = fresh()
    apply(NESTED, p, "0.1.1", status("KILLED"), summary(1))
    assert not satisfied(NESTED, p)  # the data-size leaf still waits
    apply(NESTED, p, "0.0", data_bytes(99), summary(2))
    assert not satisfied(NESTED, p)
    apply(NESTED, p, "0.0", data_bytes(1), summary(3))
    assert satisfied(NESTED, p)


# --- reset, dedupe, events kept ------------------------------------------------------------------


def test_reset_clears_leaves_and_events_and_bumps_seq() -> None:
    p = fresh()
    p.mark("e0", 7)
    apply(AND_TREE, p, "0.0", status("COMPLETED"), summary(1))
    apply(AND_TREE, p, "0.1", parts(2), summary(2))
    assert satisfied(AND_TREE, p)
    reset(p)
    assert p.leaves == {}
    assert p.events == []
    assert p.seq == 1
    assert not satisfied(AND_TREE, p)
    assert p.seen("e0", 7)  # sources survive a reset: a replay after the job is still a replay
    reset(p)
    assert p.seq == 2


def test_progress_after_reset_counts_from_zero() -> None:
    t = PartitionTrigger(DATASET, 2)
    p = fresh()
    apply(t, p, "0", parts(3), summary())
    reset(p)
    apply(t, p, "0", parts(1), summary())
    assert not satisfied(t, p)


def test_seen_and_mark_dedupe_per_source() -> None:
    p = fresh()
    assert not p.seen("e0", 0)
    p.mark("e0", 5)
    assert p.seen("e0", 5)
    assert p.seen("e0", 3)
    assert not p.seen("e0", 6)
    assert not p.seen("e1", 0)  # another source has its own positions
    p.mark("e0", 2)  # an older position never lowers the mark
    assert p.sources["e0"] == 5
    assert p.seen("e0", 4)


def test_events_kept_are_bounded_but_counting_goes_on() -> None:
    t = PartitionTrigger(DATASET, MAX_EVENTS_KEPT + 10)
    p = fresh()
    for i in range(MAX_EVENTS_KEPT + 10):
        assert apply(t, p, "0", parts(1), summary(i))
    assert len(p.events) == MAX_EVENTS_KEPT
    assert p.events[-1] == summary(MAX_EVENTS_KEPT - 1)
    assert satisfied(t, p)


# --- JSON form -----------------------------------------------------------------------------------


def test_progress_round_trips_through_json() -> None:
    p = TriggerProgress(version=3, seq=4)
    apply(NESTED, p, "0.0", data_bytes(40, partitions=1), summary(1))
    apply(NESTED, p, "0.1.0.1", None, summary(2))
    apply(NESTED, p, "0.1.1", status("FAILED"), summary(3))
    p.mark("e2", 41)
    p.mark("t", T0)
    wire = json.loads(json.dumps(p.to_json()))
    back = TriggerProgress.from_json(wire)
    assert back == p
    assert back.leaves["0.1.0.1"] == LeafProgress(fired=True)
    assert back.to_json() == p.to_json()


def test_progress_json_shape() -> None:
    p = TriggerProgress(version=2)
    apply(PartitionTrigger(DATASET, 5), p, "0", parts(2), summary())
    assert json.loads(json.dumps(p.to_json())) == {
        "version": 2,
        "leaves": {"0": {"partitions": 2, "bytes": 0, "fired": False, "since": None, "runs": []}},
        "events": [summary()],
        "sources": {},
        "seq": 0,
        "lastJobAt": None,
        "lastDue": None,
    }


# --- describe ------------------------------------------------------------------------------------


def test_describe_shows_what_each_trigger_has_and_needs() -> None:
    tree = CompositeTrigger(
        "AND",
        (
            PartitionTrigger(DATASET, 3),
            DataSizeTrigger("sales.returns", 100),
            CompositeTrigger(
                "OR", (ProgramStatusTrigger(PROG_A, (ProgramOutcome.FINISHED,)), CronTrigger("0 6 * * *"))
            ),
        ),
    )
    p = fresh()
    apply(tree, p, "0.0", parts(1), summary(1))
    apply(tree, p, "0.1", DataEvent("sales.returns", 0, 150), summary(2))
    apply(tree, p, "0.2.1", None, summary(3))
    assert describe(tree, p) == {
        "path": "0",
        "satisfied": False,
        "op": "AND",
        "triggers": [
            {
                "path": "0.0",
                "satisfied": False,
                "type": "partition",
                "dataset": DATASET,
                "partitions": 1,
                "needs": 3,
                "text": "1 of 3 new partitions of sales.orders",
            },
            {
                "path": "0.1",
                "satisfied": True,
                "type": "dataSize",
                "dataset": "sales.returns",
                "bytes": 150,
                "needs": 100,
                "text": "150 of 100 new bytes of sales.returns",
            },
            {
                "path": "0.2",
                "satisfied": True,
                "op": "OR",
                "triggers": [
                    {
                        "path": "0.2.0",
                        "satisfied": False,
                        "type": "programStatus",
                        "program": "sales/etl/workflow/ingest",
                        "on": ["FINISHED"],
                        "fired": False,
                        "text": "sales/etl/workflow/ingest reaching FINISHED: not seen yet",
                    },
                    {
                        "path": "0.2.1",
                        "satisfied": True,
                        "type": "time",
                        "fired": True,
                        "text": "cron 0 6 * * *: came due",
                    },
                ],
            },
        ],
    }


def test_describe_of_untouched_progress_shows_zeros() -> None:
    assert describe(PartitionTrigger(DATASET, 2), fresh()) == {
        "path": "0",
        "satisfied": False,
        "type": "partition",
        "dataset": DATASET,
        "partitions": 0,
        "needs": 2,
        "text": "0 of 2 new partitions of sales.orders",
    }


# --- elapsed triggers -------------------------------------------------------------------------------


def test_at_least_every_t_is_due_t_after_the_last_job_or_activation() -> None:
    leaf = ElapsedTrigger(60_000)
    p = TriggerProgress(version=1)
    assert elapsed_due(leaf, p, "0", active_since=1_000) == 61_000
    reset(p, now=500_000)
    assert elapsed_due(leaf, p, "0", active_since=1_000) == 560_000


def test_an_elapsed_trigger_fires_only_at_the_due_instant_armed_last() -> None:
    leaf = ElapsedTrigger(60_000)
    p = TriggerProgress(version=1)
    assert not apply(leaf, p, "0", None, summary(), due=99, active_since=1_000)
    assert not satisfied(leaf, p)
    assert apply(leaf, p, "0", None, summary(), due=61_000, active_since=1_000)
    assert satisfied(leaf, p)


def test_t_since_the_last_event_restarts_with_each_event_of_its_dataset() -> None:
    leaf = ElapsedTrigger(10_000, dataset=DATASET)
    p = TriggerProgress(version=1)
    assert elapsed_due(leaf, p, "0", active_since=0) is None  # no event yet: nothing to wait after
    apply(leaf, p, "0", parts(1), summary(), now=100_000)
    assert elapsed_due(leaf, p, "0", active_since=0) == 110_000
    apply(leaf, p, "0", parts(1), summary(), now=105_000)  # another event: a new quiet period
    assert not apply(leaf, p, "0", None, summary(), due=110_000, active_since=0)
    assert apply(leaf, p, "0", None, summary(), due=115_000, active_since=0)
    assert satisfied(leaf, p)
