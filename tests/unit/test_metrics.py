"""/metrics without Kafka: the plain-int counters, the collector's exposition, table sizes on real RocksDB
(within a key budget), dead-letter reason classes, and the JSON log format."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import rocksdict
from prometheus_client.parser import text_string_to_metric_families

from scheduler.domain.commands import CommandRejected
from scheduler.domain.events import InvalidEvent
from scheduler.domain.jobs import Job, ProgramQueue
from scheduler.domain.model import CatchUpPolicy, FrequencyTrigger, InvalidSchedule, TimeUnit
from scheduler.domain.triggers import plan_catch_up
from scheduler.wire.codec import DecodeError
from scheduler.worker.counters import FireCounts
from scheduler.worker.liveness import Liveness, LoopState
from scheduler.worker.logs import JsonFormatter, logging_config
from scheduler.worker.metrics import (
    LATENESS_BUCKETS_MS,
    REASON_CLASSES,
    Histogram,
    TableSizes,
    WorkerCounts,
    blocked_by_label,
    build_registry,
    count_missed,
    reason_class,
)
from scheduler.worker.punctuator import Punctuator
from tests.unit.test_punctuator import T0, Harness, state

pytestmark = pytest.mark.unit

OFFSET_KEY = b"__faust\x00offset__"


# --- the plain-int histogram -------------------------------------------------------------------------


def test_histogram_buckets_are_cumulative_and_inclusive_of_their_upper_bound() -> None:
    h = Histogram((1, 5, 10))
    for ms in (0, 1, 2, 5, 6, 10, 11, 10_000):
        h.observe(ms)
    assert h.cumulative_s() == [("0.001", 2.0), ("0.005", 4.0), ("0.01", 6.0), ("+Inf", 8.0)]
    assert (h.count, h.sum_ms) == (8, 10_035)


def test_lateness_buckets_go_from_a_millisecond_to_minutes() -> None:
    assert LATENESS_BUCKETS_MS[0] == 1 and LATENESS_BUCKETS_MS[-1] >= 60_000
    assert list(LATENESS_BUCKETS_MS) == sorted(set(LATENESS_BUCKETS_MS))


# --- what the punctuator counts ------------------------------------------------------------------------


async def test_punctuator_counts_scheduled_fires_by_unit_and_their_lateness() -> None:
    h = Harness(T0 - 1)
    await h.assign(0, [state("a"), state("b")], {TimeUnit.SECONDS: T0 - 1})
    await h.tick_at(T0 + 7)  # both due at T0, fired 7 ms late
    await h.tick_at(T0 + 10_000 + 300)  # both due at T0 + 10 s, fired 300 ms late
    stats = h.punctuator.stats
    assert stats.fires_by_unit == Counter({TimeUnit.SECONDS: 4})
    assert stats.fires == 4 and stats.catch_up_fires == 0
    assert stats.lateness.count == 4 and stats.lateness.sum_ms == 2 * 7 + 2 * 300
    buckets = dict(stats.lateness.cumulative_s())
    assert buckets["0.005"] == 0 and buckets["0.01"] == 2 and buckets["0.25"] == 2 and buckets["0.5"] == 4


async def test_catch_up_fires_are_counted_apart_and_not_as_lateness() -> None:
    h = Harness(T0 + 45_000)  # every 10 s from T0, watermark T0 + 5 s: 10, 20, 30, 40 s missed
    await h.assign(
        0,
        [
            state("coalesce"),
            state("each", catch_up=CatchUpPolicy.EACH),
            state("skip", catch_up=CatchUpPolicy.SKIP),
        ],
        {TimeUnit.SECONDS: T0 + 5_000},
    )
    stats = h.punctuator.stats
    assert stats.catch_up_by_unit == Counter({TimeUnit.SECONDS: 5}) and stats.fires == 5
    assert stats.lateness.count == 0
    assert stats.missed["coalesced"] == 3 and stats.missed["skip_policy"] == 4
    assert stats.skipped == 4  # what /health has always said


def _plan(policy: CatchUpPolicy, fired_up_to: int, now: int, window_ms: int, every_ms: int = 10_000) -> Any:
    trigger = FrequencyTrigger(TimeUnit.MILLISECONDS, every_ms, T0).evaluator()
    return plan_catch_up(trigger, policy, fired_up_to, now, window_ms)


@pytest.mark.parametrize(
    ("policy", "window_ms", "every_ms", "expected"),
    [
        # 10, 20, 30, 40 s missed; window 1 h: all within
        (CatchUpPolicy.COALESCE, 3_600_000, 10_000, {"coalesced": 3}),
        (CatchUpPolicy.EACH, 3_600_000, 10_000, {}),
        (CatchUpPolicy.SKIP, 3_600_000, 10_000, {"skip_policy": 4}),
        # window 20 s: 10 and 20 s are too old
        (CatchUpPolicy.COALESCE, 20_000, 10_000, {"outside_window": 2, "coalesced": 1}),
        (CatchUpPolicy.EACH, 20_000, 10_000, {"outside_window": 2}),
        (CatchUpPolicy.SKIP, 20_000, 10_000, {"outside_window": 2, "skip_policy": 2}),
        # every 10 ms for 40 s: EACH fires the newest 1,000 of 4,000
        (CatchUpPolicy.EACH, 3_600_000, 10, {"each_limit": 3_000}),
    ],
)
def test_missed_due_instants_are_counted_by_reason(
    policy: CatchUpPolicy, window_ms: int, every_ms: int, expected: dict[str, int]
) -> None:
    plan = _plan(policy, T0 + 5_000, T0 + 45_000, window_ms, every_ms)
    missed: Counter[str] = Counter()
    count_missed(missed, policy, plan)
    assert +missed == expected
    stats = FireCounts(missed=missed)
    assert stats.skipped == plan.skipped


# --- dead letters, commands, jobs --------------------------------------------------------------------------


def _raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException:
        return sys.exc_info()[1]  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("reason", "exc", "expected"),
    [
        ("not a valid Avro ScheduleCommand: EOF", DecodeError("x"), "undecodable"),
        (
            "DELETE acme/x: DELETE of schedule 'acme/x', which does not exist",
            CommandRejected("x"),
            "rejected",
        ),
        (
            "INSERT acme/x: trigger.expression: not a cron expression",
            InvalidSchedule("trigger", "x"),
            "invalid",
        ),
        ("unknown eventType 'nope'", InvalidEvent("x"), "invalid"),
        ("unknown dataset 'acme.clicks': no schedule triggers on it", None, "unknown_dataset"),
        ("internal error: RuntimeError: boom", RuntimeError("boom"), "internal"),
        ("bad trigger-index update: 'paths'", KeyError("paths"), "internal"),
        ("something else", None, "other"),
        ("something else", OSError("disk"), "internal"),
    ],
)
def test_dead_letter_reasons_fall_in_a_fixed_set_of_classes(
    reason: str, exc: BaseException | None, expected: str
) -> None:
    assert reason_class(reason, exc and _raised(exc)) == expected
    assert expected in REASON_CLASSES


def test_dead_letter_labels_stay_bounded_whatever_the_messages_say() -> None:
    counts = WorkerCounts()
    for i in range(1_000):
        counts.dead_letter("app-commands", f"not a valid Avro ScheduleCommand: byte {i}", DecodeError(str(i)))
        counts.dead_letter("app-events", f"unknown dataset 'ds{i}': no schedule triggers on it", None)
    assert counts.dead_letters == Counter(
        {("app-commands", "undecodable"): 1_000, ("app-events", "unknown_dataset"): 1_000}
    )
    assert counts.dead_letters_total == 2_000


def test_commands_are_counted_by_action_and_result() -> None:
    counts = WorkerCounts()
    for action, result in [("INSERT", "applied"), ("INSERT", "applied"), ("DELETE", "rejected")]:
        counts.command(action, result)
    counts.command("unknown", "dead_lettered")
    assert counts.commands_applied == 2
    assert counts.commands[("DELETE", "rejected")] == 1 and counts.commands[("unknown", "dead_lettered")] == 1


def _job(job_id: str, state: str = "PENDING_CONSTRAINT", blocked_by: str = "") -> Job:
    return Job(
        job_id,
        "acme/s",
        1,
        "acme/app/spark/p",
        "launches",
        {},
        0,
        (),
        None,
        state=state,
        blocked_by=blocked_by,
    )


def test_jobs_by_state_follow_the_queues_of_the_owned_partitions() -> None:
    counts = WorkerCounts()
    q1 = ProgramQueue(
        "p1", jobs=[_job("a", blocked_by="ConcurrencyConstraint"), _job("b", blocked_by="DelayConstraint")]
    )
    q2 = ProgramQueue("p2", jobs=[_job("c", blocked_by="TimeWindowConstraint")])
    counts.jobs_assigned(0, [(b"p1", q1)])
    counts.jobs_assigned(1, [(b"p2", q2)])
    counts.job_queue_changed(5, b"px", q1)  # a partition not ours: ignored
    assert counts.jobs_by_state() == Counter(
        {
            ("PENDING_CONSTRAINT", "concurrency"): 1,
            ("PENDING_CONSTRAINT", "delay"): 1,
            ("PENDING_CONSTRAINT", "timeWindow"): 1,
        }
    )
    counts.job_queue_changed(0, b"p1", ProgramQueue("p1"))  # both launched or dropped
    counts.jobs_revoked(1)
    assert counts.jobs_by_state() == Counter()


def test_blocked_by_label_is_the_constraint_kind() -> None:
    assert [blocked_by_label(b) for b in ("", "LastRunConstraint", "RateConstraint", "whatever")] == [
        "none",
        "lastRun",
        "rate",
        "other",
    ]


# --- table sizes on real RocksDB ---------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _table(tmp_path: Path, name: str, rows: dict[int, int]) -> Any:
    """A stand-in for a Faust table: its store's per-partition RocksDB (with Faust's offset key)."""
    dbs = {}
    for partition, n in rows.items():
        db = rocksdict.Rdict(str(tmp_path / f"{name}-{partition}"))
        for i in range(n):
            db[f"key-{i:07d}".encode()] = b"v"
        db[OFFSET_KEY] = b"42"
        dbs[partition] = db
    return SimpleNamespace(data=SimpleNamespace(_dbs=dbs, offset_key=OFFSET_KEY))


async def test_table_sizes_count_owned_partitions_without_the_offset_key(tmp_path: Path) -> None:
    sizes = TableSizes(
        {"schedules": _table(tmp_path, "s", {0: 3, 1: 5, 2: 7}), "empty": _table(tmp_path, "e", {})}
    )
    await sizes.refresh({0, 1})
    assert sizes.sizes({0, 1}) == {"schedules": 8, "empty": 0}


async def test_table_sizes_walk_at_most_the_budget_per_scrape_and_reuse_counts(tmp_path: Path) -> None:
    table = _table(tmp_path, "s", {0: 2_500, 1: 1_000})
    clock = FakeClock()
    sizes = TableSizes({"schedules": table}, budget_keys=1_000, max_age_s=30, chunk_keys=300, clock=clock)
    walked: list[int] = []
    for _ in range(4):
        await sizes.refresh({0, 1})
        walked.append(sizes.sizes({0, 1})["schedules"])
    # 3,502 keys with the offset keys, 1,000 a scrape: partition 0 is known after the 3rd, 1 after the 4th
    assert walked == [0, 0, 2_500, 3_500]
    table.data._dbs[1][b"key-new"] = b"v"
    await sizes.refresh({0, 1})
    assert sizes.sizes({0, 1})["schedules"] == 3_500  # counted less than 30 s ago: reused
    clock.now = 31  # both stale: walked again, the old counts reported meanwhile
    for _ in range(3):
        await sizes.refresh({0, 1})
        assert sizes.sizes({0, 1})["schedules"] == 3_500
    await sizes.refresh({0, 1})
    assert sizes.sizes({0, 1})["schedules"] == 3_501
    await sizes.refresh({0})  # partition 1 revoked
    assert sizes.sizes({0})["schedules"] == 2_500


async def test_a_small_partitions_count_follows_every_scrape(tmp_path: Path) -> None:
    table = _table(tmp_path, "s", {0: 3, 1: 150})
    sizes = TableSizes({"schedules": table}, max_age_s=30, clock=FakeClock(), fresh_below=100)
    await sizes.refresh({0, 1})
    assert sizes.sizes({0, 1})["schedules"] == 153
    table.data._dbs[0][b"key-new"] = b"v"
    table.data._dbs[1][b"key-new"] = b"v"
    await sizes.refresh({0, 1})  # (the clock has not moved: only the small one is walked again)
    assert sizes.sizes({0, 1})["schedules"] == 154


async def test_concurrent_scrapes_walk_once(tmp_path: Path) -> None:
    table = _table(tmp_path, "s", {0: 20_000})
    sizes = TableSizes({"schedules": table}, chunk_keys=1_000)
    await asyncio.gather(*(sizes.refresh({0}) for _ in range(3)))
    assert sizes.sizes({0}) == {"schedules": 20_000}


# --- the exposition ------------------------------------------------------------------------------------------


def _fake_worker(stats: FireCounts, counts: WorkerCounts, partitions: set[int]) -> Any:
    counts.fires = stats
    counts.events.update({"launches": 2, "invalidTransitions": 1, "events": 9})
    return SimpleNamespace(
        counts=counts,
        active_partitions=lambda: partitions,
        faust_app=SimpleNamespace(rebalancing=False),
        settings=SimpleNamespace(partitions=8),
        assigned=True,
        liveness=Liveness(states={"commands": LoopState(stalls=2, heals=1)}),
    )


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_exposition_in_prometheus_text_format(tmp_path: Path) -> None:
    from prometheus_client import generate_latest

    stats = FireCounts()
    stats.fires_by_unit[TimeUnit.SECONDS] += 5
    stats.catch_up_by_unit[TimeUnit.MINUTES] += 1
    stats.missed["coalesced"] += 3
    for ms in (3, 40, 1_500):
        stats.lateness.observe(ms)
    counts = WorkerCounts()
    counts.command("INSERT", "applied")
    counts.command("unknown", "dead_lettered")
    counts.dead_letter("app-commands", "not a valid Avro", DecodeError("x"))
    counts.runs["COMPLETED"] += 2
    counts.rebalances = 3
    counts.jobs_assigned(0, [(b"p", ProgramQueue("p", jobs=[_job("a", blocked_by="RateConstraint")]))])
    # the oldest waiting job of a (state, constraint), over the queues of every owned partition
    older = [dataclasses.replace(_job("b", blocked_by="RateConstraint"), triggered_at=-5_000)]
    counts.jobs_assigned(1, [(b"q", ProgramQueue("q", jobs=older))])
    sizes = TableSizes({"schedules": _table(tmp_path, "s", {0: 4, 1: 6})})
    await sizes.refresh({0, 1})
    text = generate_latest(build_registry(_fake_worker(stats, counts, {0, 1}), sizes)).decode()
    s = _samples(text)
    assert s[("scheduler_fires_total", (("kind", "scheduled"), ("unit", "seconds")))] == 5
    assert s[("scheduler_fires_total", (("kind", "catch_up"), ("unit", "minutes")))] == 1
    assert s[("scheduler_fire_lateness_seconds_count", ())] == 3
    assert s[("scheduler_fire_lateness_seconds_sum", ())] == pytest.approx(1.543)
    assert s[("scheduler_fire_lateness_seconds_bucket", (("le", "0.05"),))] == 2
    assert s[("scheduler_fire_lateness_seconds_bucket", (("le", "+Inf"),))] == 3
    assert s[("scheduler_missed_fires_total", (("reason", "coalesced"),))] == 3
    assert s[("scheduler_commands_total", (("action", "INSERT"), ("result", "applied")))] == 1
    assert s[("scheduler_commands_total", (("action", "unknown"), ("result", "dead_lettered")))] == 1
    assert s[("scheduler_dead_letters_total", (("reason", "undecodable"), ("topic", "app-commands")))] == 1
    assert s[("scheduler_jobs", (("blocked_by", "rate"), ("state", "PENDING_CONSTRAINT")))] == 2
    oldest = (
        "scheduler_jobs_oldest_triggered_timestamp_seconds",
        (("blocked_by", "rate"), ("state", "PENDING_CONSTRAINT")),
    )
    assert s[oldest] == -5.0
    assert s[("scheduler_partitions", ())] == 8
    assert s[("scheduler_launches_total", ())] == 2
    assert s[("scheduler_runs_total", (("status", "COMPLETED"),))] == 2
    assert s[("scheduler_run_invalid_transitions_total", ())] == 1
    assert s[("scheduler_partitions_owned", ())] == 2
    assert s[("scheduler_rebalances_total", ())] == 3
    assert s[("scheduler_ready", ())] == 1
    assert s[("scheduler_loop_stalled", (("loop", "commands"),))] == 0
    assert s[("scheduler_loop_stalls_total", (("loop", "commands"),))] == 2
    assert s[("scheduler_loop_heals_total", (("loop", "commands"),))] == 1
    assert s[("scheduler_table_entries", (("table", "schedules"),))] == 10
    assert "# TYPE scheduler_fire_lateness_seconds histogram" in text
    assert ("process_resident_memory_bytes", ()) in s or sys.platform != "linux"


def test_each_worker_has_its_own_registry(tmp_path: Path) -> None:
    from prometheus_client import REGISTRY, generate_latest

    a, b = WorkerCounts(), WorkerCounts()
    a.rebalances, b.rebalances = 1, 7
    sizes = TableSizes({})
    ra = build_registry(_fake_worker(FireCounts(), a, set()), sizes)
    rb = build_registry(_fake_worker(FireCounts(), b, set()), sizes)
    assert _samples(generate_latest(ra).decode())[("scheduler_rebalances_total", ())] == 1
    assert _samples(generate_latest(rb).decode())[("scheduler_rebalances_total", ())] == 7
    assert "scheduler_rebalances_total" not in generate_latest(REGISTRY).decode()


# --- JSON logs -------------------------------------------------------------------------------------------------


def test_json_log_lines_carry_the_fields_extras_and_the_traceback() -> None:
    formatter = JsonFormatter()
    logger = logging.getLogger("scheduler.test")
    record = logger.makeRecord(
        "scheduler.test",
        logging.WARNING,
        __file__,
        1,
        "dead-lettered %s",
        ("x\ny",),
        None,
        extra={"partition": 3},
    )
    line = formatter.format(record)
    assert "\n" not in line
    out = json.loads(line)
    assert out["level"] == "WARNING" and out["logger"] == "scheduler.test"
    assert out["message"] == "dead-lettered x\ny" and out["partition"] == 3
    assert out["ts"].endswith("+00:00")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record = logger.makeRecord("scheduler.test", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    out = json.loads(formatter.format(record))
    assert "RuntimeError: boom" in out["exc_info"] and "Traceback" in out["exc_info"]


def test_text_format_leaves_faust_its_own_logging() -> None:
    assert logging_config("text", "info") is None
    config = logging_config("json", "info")
    assert config is not None and config["root"]["level"] == logging.INFO


@pytest.mark.parametrize("level", ["warning", "error"])
def test_a_quiet_log_level_does_not_turn_the_root_logger_to_debug(tmp_path: Path, level: str) -> None:
    """Faust's spinner set the root logger to DEBUG at WARNING and above: every library's debug call then
    built a record. The worker's runner has no spinner, so the level stays the one configured."""
    import faust

    from scheduler.cli.cli import faust_runner
    from scheduler.kafka.config import Settings

    settings = Settings(app_id="spinner-test", data_dir=tmp_path, auth="off", log_level=level)
    runner = faust_runner(faust.App("spinner-test"), settings)
    root = logging.getLogger()
    saved_level, saved_handlers = root.level, list(root.handlers)
    try:
        root.handlers = [logging.NullHandler()]
        root.setLevel(logging.WARNING)
        runner.on_setup_root_logger(root, logging.getLevelName(level.upper()))
        assert root.level != logging.DEBUG
        assert not logging.getLogger("aiokafka").isEnabledFor(logging.DEBUG)
    finally:
        root.setLevel(saved_level)
        root.handlers = saved_handlers


def test_punctuator_stats_start_at_zero() -> None:
    p = Punctuator(lambda *a: None, lambda *a: None, lambda *a: None)  # type: ignore[arg-type,return-value]
    assert (p.stats.fires, p.stats.catch_up_fires, p.stats.skipped, p.stats.lateness.count) == (0, 0, 0, 0)


def test_the_lateness_histogram_keeps_the_last_hour_per_minute() -> None:
    from scheduler.worker.counters import LATENESS_BUCKETS_MS, MinuteHistogram, quantile_ms

    now = [1_795_000_000_000]
    hist = MinuteHistogram(wall_ms=lambda: now[0])
    hist.observe(3, 98)
    hist.observe(400, 2)
    now[0] += 60_000
    hist.observe(40)
    minute = 1_795_000_000_000 // 60_000 * 60_000
    history = hist.history(60)
    assert sorted(history) == [minute, minute + 60_000]
    assert sum(history[minute]) == 100 and sum(history[minute + 60_000]) == 1
    assert quantile_ms(LATENESS_BUCKETS_MS, history[minute], 0.5) == 5  # 3 ms is in the (2, 5] bucket
    assert quantile_ms(LATENESS_BUCKETS_MS, history[minute], 0.99) == 500
    assert quantile_ms(LATENESS_BUCKETS_MS, [0] * len(history[minute]), 0.5) is None
    assert hist.count == 101  # the whole histogram as before
    now[0] += 61 * 60_000  # an hour later: the old minutes are gone, their slots reused
    hist.observe(1)
    assert sorted(hist.history(60)) == [(now[0] // 60_000) * 60_000]
