"""Prometheus metrics of a worker (GET /metrics, text exposition format).

The hot paths count in plain ints (scheduler.worker.counters.WorkerCounts, the worker's one registry) and a custom collector turns
them into metric families at scrape time: no prometheus_client Counter, lock or label lookup per fire.
Every label takes values from a fixed set (time units, actions, reason classes, run states, the worker's
own topics and tables), never from message contents. One CollectorRegistry per worker, not the global one.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, GCCollector, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from scheduler.domain.delayed_counts import within
from scheduler.kafka.tables import LOCAL_KEYS, opened_partition_db
from scheduler.worker.counters import (
    LATENESS_BUCKETS_MS,
    MISSED_REASONS,
    REASON_CLASSES,
    Histogram,
    WorkerCounts,
    blocked_by_label,
    count_missed,
    reason_class,
)
from scheduler.worker.liveness import not_ready_because

if TYPE_CHECKING:
    from scheduler.worker.ports import MetricsPort

__all__ = [
    "LATENESS_BUCKETS_MS",
    "MISSED_REASONS",
    "REASON_CLASSES",
    "Histogram",
    "WorkerCounts",
    "blocked_by_label",
    "count_missed",
    "reason_class",
]

PATH = "/metrics"

# --- table sizes: counted by walking keys, within a budget per scrape ----------------------------------


class TableSizes:
    """Entries of each table in the owned partitions. A partition is counted by walking its keys (no
    values), at most `budget_keys` per scrape in chunks that yield to the event loop, and a count is reused
    for `max_age_s`: a scrape never walks a million rows, and a large table's count is at most a few
    scrapes old. A partition of fewer than `fresh_below` entries is counted again at every scrape (that
    walk costs microseconds): a few schedules just written show at once, not up to `max_age_s` later. No
    iterator is held across a yield (a partition may be revoked meanwhile)."""

    def __init__(
        self,
        tables: dict[str, Any],
        budget_keys: int = 100_000,
        max_age_s: float = 30.0,
        chunk_keys: int = 5_000,
        clock: Any = time.monotonic,
        fresh_below: int = 100,
    ) -> None:
        self.tables = tables  # name -> Faust table (its store: table.data)
        self.budget_keys = budget_keys
        self.max_age_s = max_age_s
        self.fresh_below = fresh_below
        self.chunk_keys = chunk_keys
        self.clock = clock
        self._counts: dict[tuple[str, int], tuple[int, float]] = {}  # (table, partition) -> (n, at)
        self._walk: tuple[str, int, bytes, int] | None = None  # unfinished: table, partition, last key, n
        self._lock = asyncio.Lock()

    def sizes(self, partitions: set[int]) -> dict[str, int]:
        out = dict.fromkeys(self.tables, 0)
        for (table, partition), (n, _) in self._counts.items():
            if partition in partitions:
                out[table] += n
        return out

    async def refresh(self, partitions: set[int]) -> None:
        async with self._lock:
            for tp in [tp for tp in self._counts if tp[1] not in partitions]:
                del self._counts[tp]
            now = self.clock()
            never = (0, float("-inf"))  # (not counted yet: stale whatever the clock, and walked first)
            counted = {(t, p): self._counts.get((t, p), never) for t in self.tables for p in partitions}
            stale = sorted(
                (at, t, p)
                for (t, p), (n, at) in counted.items()
                if now - at >= self.max_age_s or n < self.fresh_below
            )
            todo = [(t, p) for _, t, p in stale]
            if self._walk is not None and (self._walk[0], self._walk[1]) in todo:
                todo.remove((self._walk[0], self._walk[1]))
                todo.insert(0, (self._walk[0], self._walk[1]))  # finish what the last scrape started
            budget = self.budget_keys
            for table, partition in todo:
                if budget <= 0:
                    break
                budget = await self._count(table, partition, budget)

    async def _count(self, table: str, partition: int, budget: int) -> int:
        after, n = None, 0
        if self._walk is not None and self._walk[:2] == (table, partition):
            _, _, after, n = self._walk
        self._walk = None
        store = self.tables[table].data
        while budget > 0:
            db = opened_partition_db(self.tables[table], partition)
            if db is None:
                break
            seen, visible, last = _walk_keys(db, store.offset_key, after, min(self.chunk_keys, budget))
            n, budget = n + visible, budget - seen
            if last is None:
                break  # the end of the partition
            after = last
            if budget <= 0:
                self._walk = (table, partition, after, n)  # go on at the next scrape
                return 0
            await asyncio.sleep(0)
        self._counts[(table, partition)] = (n, self.clock())
        return budget


def _walk_keys(db: Any, offset_key: bytes, after: bytes | None, limit: int) -> tuple[int, int, bytes | None]:
    """Up to `limit` keys after `after`: (keys seen, of them visible, the last one or None at the end)."""
    seen = visible = 0
    last = None
    for key in db.keys(from_key=after) if after is not None else db.keys():
        if key == after:
            continue
        if key >= LOCAL_KEYS:  # the due-time index: no table entries from there on
            break
        seen += 1
        visible += key != offset_key
        last = key
        if seen >= limit:
            return seen, visible, last
    return seen, visible, None


# --- the collector ---------------------------------------------------------------------------------------

#: the horizons of scheduler_delayed_pending_due{within}
DUE_WITHIN = (("1m", 60_000), ("10m", 600_000), ("1h", 3_600_000), ("1d", 86_400_000))


def _delayed_pending(counts: WorkerCounts, now: int) -> Iterable[Metric]:
    pending = counts.delayed_pending
    by_topic = GaugeMetricFamily(
        "scheduler_delayed_pending",
        "Delayed messages pending in the partitions owned here, by target topic",
        labels=["topic"],
    )
    for topic, n in sorted(pending.by_topic().items()):
        by_topic.add_metric([topic], n)
    yield by_topic
    due = GaugeMetricFamily(
        "scheduler_delayed_pending_due",
        "Delayed messages pending here by how soon they are due, at minute grain, cumulative: overdue (due in "
        "a minute already ended), within 1m, 10m, 1h, 1d, all",
        labels=["within"],
    )
    for label, n in within(pending.by_minute(), now, DUE_WITHIN).items():
        due.add_metric([label], n)
    yield due
    yield GaugeMetricFamily(
        "scheduler_delayed_pending_counting",
        "Partitions owned here whose delayed messages are still being counted after their take-up (the two "
        "gauges above are partial until it is 0)",
        value=len(pending.counting()),
    )


class WorkerCollector(Collector):
    """Reads the worker's counters at scrape time and yields the metric families."""

    def __init__(self, worker: MetricsPort, sizes: TableSizes) -> None:
        self.worker = worker
        self.sizes = sizes

    def collect(self) -> Iterable[Metric]:
        from scheduler.domain.jobs import JOB_OUTCOMES
        from scheduler.domain.model import TimeUnit
        from scheduler.domain.runs import RunStatus

        w = self.worker
        stats = w.counts.fires
        counts = w.counts

        fires = CounterMetricFamily(
            "scheduler_fires",
            "Fires produced by the punctuator, by time unit and kind (scheduled: its due time came; "
            "catch_up: due while no worker owned the schedule, fired on takeover)",
            labels=["unit", "kind"],
        )
        for unit in TimeUnit:
            fires.add_metric([unit.value.lower(), "scheduled"], stats.fires_by_unit[unit])
            fires.add_metric([unit.value.lower(), "catch_up"], stats.catch_up_by_unit[unit])
        yield fires

        lateness = stats.lateness
        yield HistogramMetricFamily(
            "scheduler_fire_lateness_seconds",
            "Fire wall time minus due time of scheduled (not catch-up) fires",
            buckets=lateness.cumulative_s(),
            sum_value=lateness.sum_ms / 1000,
        )

        held = stats.held_commit_lag
        yield HistogramMetricFamily(
            "scheduler_held_commit_lag_seconds",
            "With transactions: from the instant fires or delayed deliveries were sent ahead of to their "
            "transaction's commit answered (a read_committed reader sees them then)",
            buckets=held.cumulative_s(),
            sum_value=held.sum_ms / 1000,
        )

        missed = CounterMetricFamily(
            "scheduler_missed_fires",
            "Due instants missed while no worker owned the schedule (or a clock jump passed over) that did not become a fire of their "
            "own: coalesced into one catch-up fire, or skipped (skip_policy, outside_window, each_limit)",
            labels=["reason"],
        )
        for reason in MISSED_REASONS:
            missed.add_metric([reason], stats.missed[reason])
        yield missed
        yield _counter(
            "scheduler_fire_send_failures", "Fires the producer gave up on (re-sent)", stats.failed_sends
        )
        yield _counter(
            "scheduler_excluded_fires",
            "Due instants not fired: an exclusion calendar of their schedule held their day",
            stats.excluded,
        )
        yield _counter(
            "scheduler_partitions_unreadable",
            "Partitions given up because their schedules could not be read from the local store (kept, "
            "caught up when assigned again)",
            stats.unreadable,
        )
        jumps = CounterMetricFamily(
            "scheduler_clock_jumps",
            "Steps of the wall clock against the monotonic clock over 1 s (forward: the dues passed over "
            "followed their catch-up policy; backward: nothing fired again)",
            labels=["direction"],
        )
        for direction in ("forward", "backward"):
            jumps.add_metric([direction], stats.clock_jumps[direction])
        yield jumps

        commands = CounterMetricFamily(
            "scheduler_commands",
            "Commands from the commands topic, by action and result (applied; rejected: refused by the "
            "command rules; dead_lettered: undecodable or an internal error)",
            labels=["action", "result"],
        )
        for (action, result), n in sorted(counts.commands.items()):
            commands.add_metric([action, result], n)
        yield commands

        dead = CounterMetricFamily(
            "scheduler_dead_letters",
            f"Messages sent to the dead-letter topic, by source topic and reason class ({', '.join(REASON_CLASSES)})",
            labels=["topic", "reason"],
        )
        for (topic, reason), n in sorted(counts.dead_letters.items()):
            dead.add_metric([topic, reason], n)
        yield dead

        jobs = GaugeMetricFamily(
            "scheduler_jobs",
            "Jobs waiting in the job queues of the owned partitions, by state and blocking constraint",
            labels=["state", "blocked_by"],
        )
        for (state, blocked_by), n in sorted(counts.jobs_by_state().items()):
            jobs.add_metric([state, blocked_by], n)
        yield jobs
        oldest = GaugeMetricFamily(
            "scheduler_jobs_oldest_triggered_timestamp_seconds",
            "When the oldest job waiting in the owned job queues was triggered (Unix time), by state and "
            "blocking constraint: time() minus it is how long that job has waited",
            labels=["state", "blocked_by"],
        )
        for (state, blocked_by), at in sorted(counts.jobs_oldest().items()):
            oldest.add_metric([state, blocked_by], at / 1000)
        yield oldest
        yield _counter(
            "scheduler_launches", "Launch requests produced by the job queue", counts.events["launches"]
        )
        yield _counter(
            "scheduler_run_cap_asks",
            "Run slots the cap queue owned here was asked for (SCHEDULER_MAX_ACTIVE_RUNS, _TENANT_MAX_ACTIVE_RUNS)",
            counts.events["runCapAsks"],
        )
        yield _counter(
            "scheduler_run_cap_releases",
            "Run slots given back to the cap queue owned here (a run ended, an asking job cancelled)",
            counts.events["runCapReleases"],
        )
        yield _counter(
            "scheduler_overlap_stops",
            "Runs an overlap policy (CANCEL_OTHER, TERMINATE_OTHER) asked to stop or be killed",
            counts.events["overlapStops"],
        )
        notified = CounterMetricFamily(
            "scheduler_notifications",
            "Notification deliveries (webhooks) this worker ended: DELIVERED, FAILED (a 4xx, or maxAttempts "
            "calls), DROPPED (its endpoint's queue full)",
            labels=["outcome"],
        )
        for outcome in ("DELIVERED", "FAILED", "DROPPED"):
            notified.add_metric([outcome], counts.events[f"notifications{outcome}"])
        yield notified
        yield _counter(
            "scheduler_retention_deletes",
            "Finished schedules this worker deleted past SCHEDULER_FINISHED_RETENTION_MS",
            counts.events["retentionDeletes"],
        )
        evaluated = CounterMetricFamily(
            "scheduler_sensor_evaluations",
            "Polling sensor evaluations this worker ran, by outcome: FIRED, NOTHING_NEW, FAILED",
            labels=["outcome"],
        )
        for outcome in ("FIRED", "NOTHING_NEW", "FAILED"):
            evaluated.add_metric([outcome], counts.events[f"sensor{outcome}"])
        yield evaluated
        yield _counter(
            "scheduler_notification_retries",
            "Webhook calls that are tried again",
            counts.events["notificationRetries"],
        )
        outcomes = CounterMetricFamily(
            "scheduler_job_outcomes",
            "What happened to jobs in the owned job queues: LAUNCHED, FORCED (launched by a pending timeout's "
            "FORCE_START), SKIP and DISCARD (by a constraint or a pending timeout), CANCELLED (a schedule's update, "
            "disable or delete, or a user's DELETE /jobs/{id}), RETRIED (a new attempt after a FAILED run)",
            labels=["outcome"],
        )
        for outcome in JOB_OUTCOMES:
            outcomes.add_metric([outcome], counts.job_outcomes[outcome])
        yield outcomes
        runs = CounterMetricFamily(
            "scheduler_runs",
            "Run states recorded in the run records of the owned partitions (accepted transitions)",
            labels=["status"],
        )
        for status in RunStatus:
            runs.add_metric([status.value], counts.runs[status.value])
        yield runs
        yield _counter(
            "scheduler_run_invalid_transitions",
            "Run state transitions refused by the run state machine",
            counts.events["invalidTransitions"],
        )
        yield _counter("scheduler_events", "Events applied by the event agent", counts.events["events"])
        delayed = CounterMetricFamily(
            "scheduler_delayed",
            "Delayed messages (the delayed topic and POST /messages), by outcome: held, replaced (a record "
            "of a pending id), cancelled (a tombstone of one), cancel_unknown (of none), delivered, refused "
            "(dead-lettered)",
            labels=["outcome"],
        )
        for outcome, name in DELAYED_OUTCOMES:
            delayed.add_metric([outcome], counts.events[name])
        yield delayed
        yield from _delayed_pending(counts, int(time.time() * 1000))
        yield _counter(
            "scheduler_partitions_fenced",
            "Partitions whose transaction was given up because another producer of its transactional id "
            "took over (this worker was fenced: its partition has a new owner, or a zombie woke)",
            counts.events["partitionsFenced"],
        )
        yield _counter(
            "scheduler_transactions_failed",
            "Partitions whose transaction was given up for another failure (redone from the last commit)",
            counts.events["transactionsFailed"],
        )
        yield _counter(
            "scheduler_assignments_stale",
            "Assignments not taken up because this worker stood still past its session after they were "
            "made (a rejoin is asked for instead: see freeze.py)",
            counts.events["assignmentsStale"],
        )
        alerts = CounterMetricFamily(
            "scheduler_alerts", "SLA misses raised (Alert records on the alerts topic)", labels=["kind"]
        )
        for kind in ("DEADLINE_MISSED", "NOT_FIRED"):
            alerts.add_metric([kind], counts.alerts[kind])
        yield alerts
        yield _counter(
            "scheduler_events_unwatched",
            "Events of an event key no schedule watched when they came (kept a while for one that will)",
            counts.events["unwatched"],
        )
        yield _counter(
            "scheduler_events_replayed",
            "Recent events handed to a trigger whose index entry came after them (see event_routing)",
            counts.events["eventsReplayed"],
        )

        partitions = w.active_partitions()
        yield GaugeMetricFamily(
            "scheduler_partitions_owned", "Partitions this worker owns (active)", value=len(partitions)
        )
        yield GaugeMetricFamily(
            "scheduler_partitions",
            "Partitions of the app (SCHEDULER_PARTITIONS): with no worker down, the workers' "
            "scheduler_partitions_owned add up to it",
            value=w.settings.partitions,
        )
        yield GaugeMetricFamily(
            "scheduler_ready",
            "1 when the worker is in the group, neither rebalancing nor recovering (queries are answered), "
            "and no loop of it is stalled",
            value=float(not_ready_because(w.faust_app, w.assigned, w.liveness) is None),
        )
        stalled = GaugeMetricFamily(
            "scheduler_loop_stalled",
            "1 while the loop has work waiting and has done none for SCHEDULER_STALL_AFTER_S",
            labels=["loop"],
        )
        stalls = CounterMetricFamily(
            "scheduler_loop_stalls", "Times the loop was found stalled", labels=["loop"]
        )
        heals = CounterMetricFamily(
            "scheduler_loop_heals", "Kafka clients of the loop replaced while it was stalled", labels=["loop"]
        )
        for loop, seen in w.liveness.states.items():
            stalled.add_metric([loop], float(seen.stalled_since_ms is not None))
            stalls.add_metric([loop], seen.stalls)
            heals.add_metric([loop], seen.heals)
        yield stalled
        yield stalls
        yield heals
        yield _counter(
            "scheduler_rebalances", "Partition assignments this worker received", counts.rebalances
        )
        yield _counter(
            "scheduler_commands_yielded",
            "Times the commands being applied stepped aside for the punctuator staging or firing (fires"
            " keep their time during a bulk load; commands wait at most 100 ms each time)",
            counts.commands_yielded,
        )
        tables = GaugeMetricFamily(
            "scheduler_table_entries",
            "Entries of each table in the owned partitions (a partition of 100 entries or more is counted"
            " at most every 30 s)",
            labels=["table"],
        )
        for table, n in self.sizes.sizes(partitions).items():
            tables.add_metric([table], n)
        yield tables
        yield GaugeMetricFamily(
            "scheduler_gc_frozen_objects",
            "Objects in the garbage collector's permanent generation (what lived after a recovery and"
            " after applied commands went quiet: full collections skip them)",
            value=gc.get_freeze_count(),
        )
        yield GaugeMetricFamily(
            "scheduler_gc_frozen_commands",
            "Commands applied when what they built was last frozen (it follows the applied commands once"
            " the commands topic is quiet)",
            value=counts.commands_frozen,
        )


DELAYED_OUTCOMES = (
    ("held", "delayedHeld"),
    ("replaced", "delayedReplaced"),
    ("cancelled", "delayedCancelled"),
    ("cancel_unknown", "delayedCancelsUnknown"),
    ("delivered", "delayedDelivered"),
    ("refused", "delayedRefused"),
)


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


def build_registry(worker: MetricsPort, sizes: TableSizes) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkerCollector(worker, sizes))
    ProcessCollector(registry=registry)  # process_cpu_seconds_total, resident memory, open fds
    GCCollector(registry=registry)  # python_gc_collections_total{generation}, objects collected
    return registry


def register_routes(worker: MetricsPort) -> None:
    """Add this module's routes to the worker's web app (called by scheduler.http.web.register_views)."""
    from faust.web import Request, Response, View

    sizes = TableSizes(
        {
            "schedules": worker.schedules,
            "fire-progress": worker.progress,
            "trigger-index": worker.trigger_index,
            "trigger-progress": worker.trigger_progress,
            "job-queue": worker.job_queue,
            "run-records": worker.run_records,
            "recent-events": worker.recent_events,
            "schedule-history": worker.schedule_history,
        }
    )
    registry = build_registry(worker, sizes)

    async def on_assigned(app: Any, assigned: Any, **_: Any) -> None:
        worker.counts.rebalances += 1

    worker.faust_app.on_partitions_assigned.connect(on_assigned)  # type: ignore[arg-type]

    @worker.faust_app.page(PATH)
    class Metrics(View):
        async def get(self, request: Request) -> Response:
            await sizes.refresh(worker.active_partitions())
            encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
            return self.bytes(encoder(registry), headers={"Content-Type": content_type})


__all__ = [
    "Histogram",
    "TableSizes",
    "WorkerCollector",
    "WorkerCounts",
    "build_registry",
    "count_missed",
    "reason_class",
    "register_routes",
]
