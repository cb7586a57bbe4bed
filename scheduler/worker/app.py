"""The worker: a Faust app with its agents, the commands ingest, the schedules and fire-progress tables, the
punctuator and the HTTP views. Thin: decode, call the pure logic (commands, triggers), write, emit.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
from collections.abc import Iterator
from typing import Any, cast

import faust

from scheduler.domain.model import Action, ScheduleState, TimeUnit
from scheduler.kafka import bulk_restore
from scheduler.kafka.config import Settings, apply_transport_fixes, broker_profile
from scheduler.kafka.consumers import FOLLOW_FETCH_MAX_WAIT_MS, apply_consumer_profile, consumer_options
from scheduler.kafka.due_index import DueIndex
from scheduler.kafka.group import (
    request_rejoin,
    track_recovery_generation,
)
from scheduler.kafka.partitioner import kafka_partition as partition_for
from scheduler.kafka.producer import BatchedProducer, TopicCreator
from scheduler.kafka.recovery import (
    keep_changelog_events_on_resume,
    seek_no_offset_below_the_start,
)
from scheduler.kafka.staged import StagedTable
from scheduler.kafka.tables import (
    collect_only_what_was_closed,
    keep_newest_generation,
    partition_db,
    partition_items,
    raw_table,
    skip_applied_records,
    start_tables_at_once,
)
from scheduler.kafka.transactions import Transactions
from scheduler.wire.codec import (
    decode_state,
    state_version,
)
from scheduler.worker.calendars import CalendarRegistry
from scheduler.worker.clocks import monotonic_ms, wall_clock_ms
from scheduler.worker.command_handler import CommandHandler
from scheduler.worker.counters import WorkerCounts
from scheduler.worker.delayed import DelayedMessages
from scheduler.worker.event_routing import EventRouting
from scheduler.worker.failpoints import failing_reads
from scheduler.worker.following import Following
from scheduler.worker.freeze import FreezeGuard
from scheduler.worker.held import Unreadable
from scheduler.worker.hops import agent
from scheduler.worker.ingest import CommandIngest
from scheduler.worker.job_queue import JobQueueAgent
from scheduler.worker.journal import Journal
from scheduler.worker.liveness import (
    LEAVE_GRACE_S,
    Counted,
    Liveness,
    exit_after,
)
from scheduler.worker.notifier import Notifications
from scheduler.worker.output import Output
from scheduler.worker.ownership import Ownership
from scheduler.worker.programs import ProgramRegistry
from scheduler.worker.punctuator import Punctuator
from scheduler.worker.retention import Retention
from scheduler.worker.schedule_store import ScheduleStore, index_restored_states, schedules_db
from scheduler.worker.sensors import Sensors
from scheduler.worker.services import Timers, Watchdog
from scheduler.worker.trigger_agent import (
    TriggerAgent,
    progress_generation,
)
from scheduler.worker.vouched import Vouched
from scheduler.worker.watermarks import TransactionalWatermarks, progress_record

log = logging.getLogger(__name__)

SCHEDULES_TABLE = "schedules"
PROGRESS_TABLE = "fire-progress"


#: the tables the agents write: with transactions, held per partition and written in its transaction
STAGED_TABLES = (
    "trigger_index",
    "trigger_progress",
    "job_queue",
    "run_records",
    "recent_events",
    "schedule_history",
    "delayed",
)


class Worker:
    """Everything one worker process runs; `faust_app` is what `faust.Worker` drives."""

    def __init__(self, settings: Settings, clock: Any = wall_clock_ms) -> None:
        self.settings = settings
        self.clock = clock
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        apply_consumer_profile(settings.broker_profile, read_committed=settings.transactional)
        apply_transport_fixes()
        track_recovery_generation()
        app = self.faust_app = faust.App(
            settings.app_id,
            broker=[f"kafka://{h.strip()}" for h in settings.bootstrap_servers.split(",")],
            store="rocksdb://",
            datadir=str(settings.data_dir / settings.app_id),
            topic_partitions=settings.partitions,
            topic_replication_factor=settings.replication_factor,
            table_standby_replicas=settings.standby_replicas,
            processing_guarantee="at_least_once",
            web_enabled=True,
            web_bind=settings.web_bind,
            web_host=settings.web_host,
            web_port=settings.web_port,
            **{
                **broker_profile(settings.broker_profile),
                **(
                    {"broker_session_timeout": settings.session_timeout_s}
                    if settings.session_timeout_s
                    else {}
                ),
            },
        )
        keep_changelog_events_on_resume(app)
        seek_no_offset_below_the_start(app)
        start_tables_at_once(app)
        collect_only_what_was_closed()
        raw: dict[str, Any] = {
            "key_type": bytes,
            "value_type": bytes,
            "key_serializer": "raw",
            "value_serializer": "raw",
        }
        self.light_topic = app.topic(
            settings.light_topic, partitions=settings.partitions, internal=True, **raw
        )
        self.schedules = raw_table(app, SCHEDULES_TABLE, settings.partitions, settings.rocksdb_cache_mb)
        self.progress = raw_table(app, PROGRESS_TABLE, settings.partitions, settings.rocksdb_cache_mb)
        events_topic, index_topic, trigger_topic, jobs_topic, status_topic = (
            app.topic(name, partitions=settings.partitions, internal=True, **raw)
            for name in (
                settings.events_topic,
                settings.index_topic,
                settings.trigger_topic,
                settings.jobs_topic,
                settings.program_status_topic,
            )
        )
        self.delayed_topic = app.topic(
            settings.delayed_topic, partitions=settings.partitions, internal=True, **raw
        )
        # delayed messages, pending (scheduler.worker.delayed)
        self.delayed: Any = raw_table(
            app, "delayed", settings.partitions, settings.rocksdb_cache_mb, memtable_bloom=True
        )
        self.trigger_index: Any = raw_table(
            app, "trigger-index", settings.partitions, settings.rocksdb_cache_mb
        )
        self.trigger_progress: Any = raw_table(
            app, "trigger-progress", settings.partitions, settings.rocksdb_cache_mb
        )
        # a frozen owner's late writes never replace the next owner's (its job numbers would go back)
        keep_newest_generation(self.trigger_progress, progress_generation)
        if not settings.transactional:  # (nor an update applied meanwhile: see freeze.py)
            keep_newest_generation(self.schedules, state_version, stamp="version")
        # every schedule's next dues, in the schedules table's RocksDB (kafka.due_index)
        self._read_faults = failing_reads()
        self.due_index = DueIndex(functools.partial(schedules_db, self.schedules))
        index_restored_states(self.schedules, self.due_index, self._fired_up_to)
        # a partition far behind its changelog is restored in bulk first (then Faust's loop reads the tail)
        bulk_restore.install(
            app,
            [self.schedules, self.delayed],
            settings.bootstrap_servers,
            consumer_options(settings.broker_profile),
            settings.bulk_restore_min_records,
            self._bulk_restored,
        )
        self.job_queue: Any = raw_table(app, "job-queue", settings.partitions, settings.rocksdb_cache_mb)
        self.run_records: Any = raw_table(app, "run-records", settings.partitions, settings.rocksdb_cache_mb)
        self.recent_events: Any = raw_table(
            app, "recent-events", settings.partitions, settings.rocksdb_cache_mb
        )
        self.schedule_history: Any = raw_table(
            app, "schedule-history", settings.partitions, settings.rocksdb_cache_mb
        )
        follows = settings.broker_profile  # (how long the followers' fetches wait)
        # one consumer for the topics followed whole (worker/following.py): programs, calendars, notification
        # rules and deliveries, sensor states (those in transactions where there are any)
        self.following = Following(
            settings.bootstrap_servers,
            FOLLOW_FETCH_MAX_WAIT_MS[follows],
            read_committed=settings.transactional,
        )
        self.registry = ProgramRegistry(
            settings.bootstrap_servers,
            settings.programs_topic,
            settings.programs_file,
            follows,
            self.following,
        )
        self.calendars = CalendarRegistry(
            settings.bootstrap_servers, settings.calendars_topic, profile=follows, following=self.following
        )
        self.topics = TopicCreator(
            settings.bootstrap_servers, settings.partitions, settings.replication_factor
        )
        # what is not in a transaction (a topic deleted since it was created is created again)
        self.producer = BatchedProducer(settings.bootstrap_servers, missing_topic=self.topics.present)
        # a transaction per partition (Kafka): what a partition's work produces commits with its progress
        self.txns = (
            Transactions(
                settings.bootstrap_servers,
                settings.app_id,
                interval_s=settings.commit_interval_ms / 1000,
                before_commit=self._before_commit,
                on_failed=self._partition_failed,
                missing_topic=self.topics.present,
                released=lambda ms: self.counts.fires.held_commit_lag.observe(ms),
            )
            if settings.transactional
            else None
        )
        # the command path's schedule writes, held until RocksDB (and the changelog) get them
        self._staged: list[StagedTable] = []  # with transactions: the agents' tables, written in them
        self.store = ScheduleStore(self.schedules, self.progress, self.producer, self.txns, self._staged)
        self.journal = Journal(settings.journal_path) if settings.journal_path else None
        self.counts = WorkerCounts()  # every counter of the worker: /metrics and /health
        # what the worker produces, in its partitions' transactions or outside any (output.py)
        # (the HTTP writes' commands it vouches for are applied without decoding them again: vouched.py)
        vouched = Vouched(lambda: self.active_partitions())
        out = self.output = Output(settings, self.producer, self.txns, self.counts, clock, vouched)
        self.partition_of, self.produce, self.produce_many = out.partition_of, out.produce, out.produce_many
        self.publish, self.send_keyed, self.send_command = out.publish, out.send_keyed, out.send_command
        self.submit_command = out.submit_command
        self.send_fire, self.dead_letter = out.send_fire, out.dead_letter
        # the schedule writes, held (schedule_store.py); what HTTP reads of them
        store = self.store
        self.write_schedule, self.schedule_bytes, self.write_local = (
            store.write,
            store.read,
            store.write_local,
        )
        self.writes_held, self.take_writes = store.writes_held, store.take_writes
        self.write_changelog, self.stage_commit = store.write_changelog, store.stage_commit
        self.local_states, self.states_from = store.local_states, store.states_from
        self.sensors: Sensors = Sensors(self)  # (polling sensors: worker/sensors.py)
        self.retention: Retention = Retention(self)  # (finished schedules deleted: worker/retention.py)
        self.notifications: Notifications = Notifications(  # (webhooks: worker/notifier.py)
            settings,
            lambda topic, key, value: self.send_keyed(topic, key, value, partition=None),
            self.counts.events,
            self.following,
        )
        # the freezes this worker stood still past its session: with transactions an assignment made before
        # one is not taken up (ownership.py); without them nothing else fences its writes (freeze.py)
        self.freezes = FreezeGuard(app, app.conf.broker_session_timeout, app.conf.broker_heartbeat_interval)
        self.freeze = self.freezes if self.txns is None else None
        self.punctuator = Punctuator(
            self.send_fire,
            self._load,
            self._save_progress,
            clock,
            trigger_topic=settings.trigger_topic,
            send_batch=out.send_batch,
            partition_count=out.partition_count,
            # an injected clock (tests) jumps by design: jumps are told only against the real one
            monotonic=monotonic_ms if clock is wall_clock_ms else None,
            stats=self.counts.fires,
            transactional=self.txns is not None,
            work=self.unit_of_work,
            hold=self.may_work if self.freeze is not None else None,
            excluded=self.calendars.excluding,
            index=self.due_index,
            index_put=self.store.index_put,
            give_up=self._give_up_unreadable,
            # (transactions: a tick's watermarks go into the transaction with its fires, watermarks.py)
            fired=(lambda unit, parts: cast(TransactionalWatermarks, self.watermarks).fired(unit, parts))
            if self.txns is not None
            else None,
            # (an injected clock does not say when an instant comes: nothing is sent ahead of it)
            hold_commit=self.txns.hold if self.txns is not None and clock is wall_clock_ms else None,
        )
        self.watermarks: TransactionalWatermarks | None = (
            TransactionalWatermarks(self.txns, self.punctuator, self.progress)
            if self.txns is not None
            else None
        )
        if self.txns is not None:
            for name in STAGED_TABLES:
                staged = StagedTable(getattr(self, name), self.txns)
                self._staged.append(staged)
                setattr(self, name, staged)
        self.routing = EventRouting(self)
        self.triggers = TriggerAgent(self)
        self.jobs: JobQueueAgent = JobQueueAgent(self)
        self._progress_sent: list[Any] = []
        self.commands = commands = CommandHandler(self, vouched)  # the command path
        self.handle_command, self.tenant_full = commands.handle_command, commands.tenant_full
        self.schedule_count, self.forget_tenant_counts = (
            commands.schedule_count,
            commands.forget_tenant_counts,
        )
        self.delayed_messages: DelayedMessages = DelayedMessages(
            self, send_ahead=self.txns is not None and clock is wall_clock_ms
        )
        hops = {
            settings.light_topic: self.commands.handle_task_definition,
            settings.index_topic: self.routing.handle_index_update,
            settings.events_topic: self.routing.handle_event,
            settings.program_status_topic: self.routing.handle_transition,
            settings.trigger_topic: self.triggers.handle,
            settings.jobs_topic: self.jobs.handle,
            settings.delayed_topic: self.delayed_messages.handle,
        }
        # the commands topic, a fetch at a time (not a Faust agent); with transactions the hops too
        self.ingest: CommandIngest = CommandIngest(
            self, hops=hops if self.txns is not None else None, firing=self.punctuator
        )
        self.liveness: Liveness = Liveness(
            stall_after_s=settings.stall_after_s, leave_after_s=settings.leave_after_s, on_leave=self._leave
        )
        self.liveness.reachable = self.ingest.cluster_answers
        self.liveness.watch(self.ingest)
        self.liveness.watch(self.registry)  # (its followers: programs, calendars)
        self.liveness.watch(self.calendars)
        self.liveness.watch(self.notifications.notifier)
        fires = self.counts.fires
        self.liveness.watch(
            Counted(
                "punctuator",
                self.punctuator.overdue,
                lambda: fires.fires + fires.excluded + sum(fires.missed.values()),
                "time units with an instant past due",
            )
        )

        self.liveness.watch(
            Counted(
                "delayed",
                self.delayed_messages.overdue,
                lambda: self.counts.events["delayedDelivered"],
                "partitions with a delayed message past due",
            )
        )

        self.ownership = Ownership(self)
        self.ownership.membership().watched_by(self.liveness)
        app.add_dependency(Watchdog(self.liveness, self.freezes))  # (from the app's start: see Membership)

        if self.txns is None:  # each hop a Faust agent, at-least-once (see hops.py)
            for topic, name in (
                (self.light_topic, "light-scheduler-agent"),
                (index_topic, "trigger-index-agent"),
                (events_topic, "event-agent"),
                (status_topic, "program-status-agent"),
                (trigger_topic, "trigger-agent"),
                (jobs_topic, "job-queue-agent"),
                (self.delayed_topic, "delayed-agent"),
            ):
                app.agent(topic, name=name)(agent(hops[topic.get_topic_name()], self.may_work))
        for table in app.tables.values():  # (last: the other wrappers see only what is applied)
            skip_applied_records(table)
        self.ownership.install()
        self.timers = Timers(self)
        app.service(self.timers)  # type: ignore[arg-type]  # an instance is accepted too

    # --- agents ---------------------------------------------------------------------------------

    def stored_items(self, table: Any, partition: int) -> Iterator[tuple[bytes, bytes]]:
        return partition_items(table, partition)

    # --- punctuator plumbing --------------------------------------------------------------------

    def _load(self, partition: int, key: bytes) -> ScheduleState | None:
        try:
            if self._read_faults is not None:
                self._read_faults()
            raw = self.store.read(partition, key)
        except Unreadable:
            raise
        except Exception as exc:  # (a get of a database that is open does not fail: see schedules_db)
            raise Unreadable(partition, exc) from exc
        return None if raw is None else decode_state(raw)

    async def _give_up_unreadable(self, partition: int, exc: BaseException) -> None:
        """The punctuator could not read the partition's store: its open transaction (fires sent for it)
        never commits, and a rejoin assigns it again, here or elsewhere (see punctuator.Unreadable).
        Without transactions its commands go on being applied until the rebalance revokes it (its fires
        are at least once: the next owner catches up from the watermark)."""
        self.jobs.checker.revoke(partition)
        if self.txns is not None and self.txns.owns(partition):
            await self.txns.fail(partition, exc)  # (-> _partition_failed: drops what it held, rejoins)
            return
        request_rejoin(self.faust_app)

    def start_firing(self) -> None:
        """(OwnerPort) A partition is taken up: the punctuator fires it from now on (see services.Timers)."""
        self.timers.start_firing()

    async def ensure_own_topics(self) -> None:
        """The app's own topics exist, each with its configs (created once, before anything reads them: a
        follower's consumer must not have a broker create one on first use, uncompacted)."""
        topics = self.settings.own_topics()
        await self.topics.ensure(*topics, configs=topics)

    async def read_calendars(self) -> None:
        """(OwnerPort) Before a take-up: the calendars are read (once; at most a few seconds), so its
        catch-up and the fires before the worker's services start (Faust starts them after its first
        recovery, the calendars' reader among them) skip the days they hold. A broker that does not
        answer is logged: the take-up goes on."""
        try:
            await self.ensure_own_topics()
            await self.calendars.start()
        except Exception:
            log.warning("the calendars could not be read before the take-up: it goes on", exc_info=True)

    async def await_progress_sent(self, timeout_s: float = 5.0) -> None:
        """The watermarks just saved reach the changelog before the partitions move."""
        sent, self._progress_sent = self._progress_sent, []
        futures = [asyncio.ensure_future(f) for f in sent]
        if futures:
            await asyncio.wait(futures, timeout=timeout_s)

    def _save_progress(self, partition: int, unit: TimeUnit, fired_up_to: int) -> None:
        self.save_progress_record(partition, *progress_record(partition, unit, fired_up_to))

    def save_progress_record(self, partition: int, key: bytes, value: bytes) -> None:
        """A fire-progress table write from outside a Faust event (a timer, the commands ingest): Faust's
        table API refuses those, so send the changelog record ourselves and put the same value in the
        local store, as a table write would."""
        self._progress_sent.append(self.progress.send_changelog(partition, key, value))
        del self._progress_sent[:-256]
        partition_db(self.progress, partition)[key] = value

    def progress_db(self, partition: int) -> Any:
        return partition_db(self.progress, partition)

    def _fired_up_to(self, partition: int) -> dict[TimeUnit, int]:
        return self.ownership.fired_up_to(partition)

    def _bulk_restored(self, records: int) -> None:
        self.counts.events["bulkRestoredRecords"] += records

    async def _before_commit(self, partition: int) -> None:
        """Transactions: the fires a command made owed at an instant sent ahead (owed.py), the staged table
        writes of the partition's work, and the watermarks that cover the fires in its transaction (those no
        tick sent already: watermarks.py), go into it."""
        txns, watermarks = self.txns, self.watermarks
        assert txns is not None and watermarks is not None
        await self.punctuator.settle(partition)
        for table in self._staged:
            await table.stage(txns, partition)
        await watermarks.before_commit(partition)

    async def _partition_failed(self, partition: int, exc: BaseException, fenced: bool) -> None:
        """Transactions: the partition's transaction was given up (see kafka.transactions). Drop everything
        held for it — its heaps, staged fires, held schedule writes, its commands position — and rejoin the
        group: it comes back (here or elsewhere) from what was committed."""
        self.counts.events["partitionsFenced" if fenced else "transactionsFailed"] += 1
        self.punctuator.revoke(partition)
        self.drop_held(partition)
        self.ingest.drop(partition)
        request_rejoin(self.faust_app)

    def drop_held(self, partition: int) -> None:
        """Transactions: forget the writes held for the partition's open transaction (given up)."""
        self.store.drop(partition)
        if self.watermarks is not None:
            self.watermarks.drop(partition)
        for table in self._staged:
            table.drop(partition)

    def active_partitions(self) -> set[int]:
        return self.ownership.active_partitions()

    @property
    def assigned(self) -> bool:
        """A first assignment was taken up (possibly of no partition)."""
        return self.ownership.assigned

    # --- reads ----------------------------------------------------------------------------------

    def local_state(self, key: bytes) -> ScheduleState | None:
        """A schedule's state as HTTP reads it (ScheduleStore.committed_state)."""
        return self.store.committed_state(self.partition_of(key), key)

    def changelog_distribution(self) -> dict[Any, dict[str, list[int]]]:
        """Which worker (web URL) owns which partitions of which changelog, per the last assignment."""
        return dict(cast(Any, self.faust_app.assignor).changelog_distribution)

    def generation(self) -> int:
        return self.ownership.generation()

    async def may_work(self) -> bool:
        """Before a unit of work without transactions: False to drop it (see freeze.py)."""
        return True if self.freeze is None else await self.freeze.hold()

    def unit_of_work(self) -> Any:
        """A unit of work no commit splits (see kafka.transactions); nothing without transactions."""
        return self.txns.work() if self.txns is not None else contextlib.nullcontext()

    async def _leave(self, why: str) -> None:
        """A loop stayed stalled (liveness.py): stop as SIGTERM would (the group is left at once, so the
        partitions move now); the process then exits with LEFT_EXIT_CODE (cli.run_worker), at once if that
        stop has not ended within LEAVE_GRACE_S."""
        exit_after(LEAVE_GRACE_S)
        os.kill(os.getpid(), signal.SIGTERM)

    async def stop(self) -> None:
        await self.ingest.stop()
        if self.txns is not None:
            await self.txns.stop()
        else:
            await self.punctuator.drain()
            await self.await_progress_sent()
        await self.producer.stop()
        await self.registry.stop()
        await self.calendars.stop()
        await self.notifications.stop()
        await self.sensors.stop()
        await self.following.stop()
        await self.retention.stop()
        if self.journal is not None:
            self.journal.close()


__all__ = ["Action", "Worker", "partition_for"]
