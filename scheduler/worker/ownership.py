"""Which partitions this worker owns, and what taking them up and giving them back does.

Faust assigns the partitions; their tables are restored (recovery); then `on_recovered` *takes them up*:
with transactions each partition's producer fences its previous owner first, then the punctuator builds
the partition's heap of due instants (catching up what its previous owner had not fired), the job queue's
checker and the elapsed triggers are armed, and the commands ingest takes the partitions. The punctuator
fires a partition once it is taken up (the first take-up starts it: see services.Timers.start_firing), while
the next ones are taken up; the calendars are read before the first. A revocation
gives them back: the ingest's last fetch is written, the transactions committed (or given up), the
punctuator forgets them. The group membership is watched as a loop (liveness.Membership): a take-up
that never ends makes the worker leave.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from scheduler.domain.model import TimeUnit
from scheduler.kafka.group import (
    PreviousMembers,
    app_member,
    membership_progress,
    recovery_is_current,
    request_rejoin,
)
from scheduler.kafka.tables import forget_persisted_offset, partition_db
from scheduler.kafka.transactions import PartitionGone
from scheduler.wire.codec import decode
from scheduler.worker.collector import freeze_long_lived
from scheduler.worker.failpoints import maybe_freeze_at_assignment, maybe_hang_take_up, maybe_slow_take_up
from scheduler.worker.held import Unreadable
from scheduler.worker.liveness import Membership, not_serving_because
from scheduler.worker.ports import OwnerPort

log = logging.getLogger(__name__)

#: how long a rebalance waits for the new partitions' producers to fence their previous owners before their
#: tables are restored (a partition fenced later is restored again: see on_recovered)
FENCE_BEFORE_RESTORE_S = 5.0


class Ownership:
    """The partitions the worker owns: taken up once their tables are restored, given back on revocation."""

    def __init__(self, worker: OwnerPort) -> None:
        self.worker = worker
        self.assigned = False  # a first assignment was taken up (possibly of no partition)
        self.take_ups = 0  # assignments taken up to the end
        self.partitions_taken_up = 0
        self.owned: set[int] = set()  # the partitions of the last assignment restored
        self.fenced_late: set[int] = set()  # partitions of this rebalance fenced after their restore began
        self._taking_up = asyncio.Lock()  # (see on_recovered)
        self._assignment = (-1, 0)  # (consumer generation, the app's rebalance count) of the last assignment
        self._members: PreviousMembers | None = None  # (install)
        self._actives: frozenset[int] = frozenset()  # (active_partitions: of the assignment _actives_of)
        self._actives_of: object = None

    def install(self) -> None:
        """Hook into the app: the schedules table's recovery, revocations, and the tables' rebalance."""
        w = self.worker
        w.schedules.on_recover(self.on_recovered)
        w.faust_app.on_partitions_revoked.connect(self.on_revoked)
        self._members = PreviousMembers(w.settings.data_dir)
        w.faust_app.on_partitions_assigned.connect(self._remember_member)
        if w.txns is not None:
            self._start_transactions_before_recovery()
        else:
            self._restore_whole_after_a_freeze()

    async def _remember_member(self, app: Any, assigned: Any, **_: Any) -> None:
        """The member id each assignment came to, written down for a restart after a crash (kafka/group.py)."""
        if self._members is not None:
            self._members.remember(app_member(app))

    def membership(self) -> Membership:
        """The group membership as a watched loop (see liveness.Membership)."""
        w = self.worker
        app = w.faust_app
        return Membership(
            lambda: not_serving_because(app, self.assigned) is None,
            # (a take-up of millions of due entries takes minutes: each partition, each thousand entries
            # caught up, is progress too)
            lambda: hash(
                (
                    membership_progress(app),
                    self.take_ups,
                    self.partitions_taken_up,
                    w.punctuator.caught_up_entries,
                )
            ),
            floor_s=2 * app.conf.broker_session_timeout,
            joined=lambda: app.rebalancing_count > 0,
        )

    def active_partitions(self) -> set[int]:
        """The partitions this worker holds active: read once per assignment (Faust's assignor replaces its
        assignment object at each one; every HTTP write asks)."""
        w = self.worker
        assignment = getattr(w.faust_app.assignor, "_assignment", None)
        if assignment is None or assignment is not self._actives_of:
            topic = w.schedules.changelog_topic.get_topic_name()
            actives = w.faust_app.assignor.assigned_actives()
            self._actives = frozenset(tp.partition for tp in actives if tp.topic == topic)
            self._actives_of = assignment
        return set(self._actives)

    def fired_up_to(self, partition: int) -> dict[TimeUnit, int]:
        db = partition_db(self.worker.progress, partition)
        out: dict[TimeUnit, int] = {}
        for unit in TimeUnit:
            raw = db.get(f"{partition}:{unit.value}".encode())
            if raw is not None:
                out[unit] = decode("FireProgress", raw)["firedUpTo"]
        return out

    def generation(self) -> int:
        return int(getattr(self.worker.faust_app, "consumer_generation_id", 0) or 0)

    def _rebalance_of(self, generation: int) -> int:
        """The app's rebalance count when the assignment of this generation was made."""
        assigned, rebalance = self._assignment
        return rebalance if assigned == generation else int(self.worker.faust_app.rebalancing_count)

    def _stale(self, rebalance: int) -> bool:
        """Whether this worker stood still past its session since that rebalance began (freeze.py): the group
        may have given its assignment to others, whose producers its own would fence. It is not taken up: a
        rejoin is asked for, and the next assignment is."""
        if not self.worker.freezes.stale(rebalance):
            return False
        self.worker.counts.events["assignmentsStale"] += 1
        log.warning(
            "this worker stood still past its session during rebalance %d: its assignment is not taken up "
            "(its producers would fence the partitions' current owners); a rejoin is requested",
            rebalance,
        )
        request_rejoin(self.worker.faust_app)
        return True

    def _current(self, rebalance: int) -> Callable[[], bool]:
        """Asked by each producer of the assignment before it starts and once started (Transactions.assign):
        a revocation since the assignment, or a freeze while it started, makes it stop unused."""
        app = self.worker.faust_app
        return lambda: int(app.rebalancing_count) == rebalance and not self.worker.freezes.stale(rebalance)

    # --- before the restore ------------------------------------------------------------------------

    def _start_transactions_before_recovery(self) -> None:
        """Start the transactional producers of newly assigned partitions before their tables are
        restored: each fences the previous owner first, so nothing it still had open can commit after the
        restore read the changelogs (a paused owner waking up at that moment)."""
        tables = self.worker.faust_app.tables
        on_rebalance = tables.on_rebalance
        txns = self.worker.txns
        assert txns is not None

        async def start_then_rebalance(*args: Any, **kwargs: Any) -> None:
            await maybe_freeze_at_assignment(bool(self.active_partitions()))
            rebalance = int(self.worker.faust_app.rebalancing_count)
            self._assignment = (self.generation(), rebalance)
            partitions = self.active_partitions()
            if not self._stale(rebalance):
                starting = asyncio.ensure_future(txns.assign(partitions, self._current(rebalance)))
                await asyncio.wait(
                    [starting], timeout=FENCE_BEFORE_RESTORE_S
                )  # (on_recovered waits for the rest)
            self.fenced_late = {p for p in partitions if not txns.owns(p)}
            await on_rebalance(*args, **kwargs)

        tables.on_rebalance = start_then_rebalance

    def _restore_whole_after_a_freeze(self) -> None:
        """Without transactions: the first rebalance after a freeze that outlived the session (see
        freeze.py) restores the partitions this worker owned from the start of their changelogs.

        Faust stores a table partition's offset as each of its own changelog writes is acknowledged. A
        frozen owner's writes still held by its producer go out when it wakes, after the writes of the
        partition's next owner, and their acknowledgement moves the stored offset past those: when the
        partition came back, its restore began after them and the next owner's writes were never applied
        (a trigger progress's job sequence went back from 188 to ~100, and the jobs numbered again were
        dropped as launched already: 123 of 1,689 events launched nothing, in 1 of 4 runs on Tansu). Each
        rebalance until an assignment is restored does it again (a restore cut short by the next rebalance
        leaves an acknowledgement's offset behind)."""
        tables = self.worker.faust_app.tables
        on_rebalance = tables.on_rebalance
        freeze = self.worker.freeze
        assert freeze is not None

        async def restore_then_rebalance(*args: Any, **kwargs: Any) -> None:
            self._assignment = (self.generation(), int(self.worker.faust_app.rebalancing_count))
            if self.owned and freeze.suspect():
                log.warning(
                    "partitions %s were written before a freeze: their tables are restored from the start "
                    "of their changelogs", sorted(self.owned),
                )  # fmt: skip
                for table in tables.values():
                    for partition in self.owned:
                        forget_persisted_offset(table, partition)
            await on_rebalance(*args, **kwargs)

        tables.on_rebalance = restore_then_rebalance

    # --- taking up ---------------------------------------------------------------------------------

    async def on_recovered(self) -> None:
        w = self.worker
        if not recovery_is_current(w.faust_app):
            # an earlier rebalance's recovery, completing after the next assignment (a worker woken from a
            # pause): its tables are not restored yet; the current recovery calls again when they are
            log.info("recovery of an earlier rebalance completed: the current one is awaited")
            return
        generation = self.generation()
        rebalance = self._rebalance_of(generation)
        if w.txns is not None:  # each fences its previous owner (long while a broker is away: not locked)
            if self._superseded(generation, rebalance) or self._stale(rebalance):
                return
            await w.txns.assign(self.active_partitions(), self._current(rebalance))
        # One recovery's take-up at a time, and only while its assignment is the current one: Faust runs this
        # in a task of its own that a newer rebalance does not cancel. An older take-up that went on would
        # assign partitions from its own view of the tables while the newer one assigned them again: both
        # caught up from the same watermark into one transaction (campaign seed 4000: 3 instants fired twice).
        async with self._taking_up:
            await self._take_up(generation, rebalance)

    def _superseded(self, generation: int, rebalance: int) -> bool:
        """Whether the assignment being taken up is no longer this worker's: a newer one was made, or its
        partitions were revoked since (Faust counts a rebalance at the revocation, before the group's next
        generation: a take-up held up meanwhile, behind a network cut, must not hand them to the ingest or the
        punctuator after on_revoked took them back: campaign seed 52, 174 fires twice)."""
        if self.generation() == generation and int(self.worker.faust_app.rebalancing_count) == rebalance:
            return False
        log.info("the take-up of generation %d stops: its partitions were revoked since", generation)
        return True

    async def _take_up(self, generation: int, rebalance: int) -> None:
        if self._superseded(generation, rebalance) or (
            self.worker.txns is not None and self._stale(rebalance)
        ):
            return
        await maybe_hang_take_up()
        w = self.worker
        if w.freeze is not None:
            w.freeze.recovered()  # (before Faust resumes the streams)
        self.assigned = True
        active = self.active_partitions()
        self.owned = set(active)
        w.forget_tenant_counts()
        owing = set()  # (a fire owed and dropped here: its watermark must not commit without it, owed.py)
        for partition in w.punctuator.partitions - active:
            if w.punctuator.revoke(partition):
                owing.add(partition)
            w.jobs.checker.revoke(partition)
        if w.txns is not None:
            for partition in w.txns.partitions - active:
                await w.txns.revoke([partition], commit=partition not in owing)
            await w.txns.assign(active, self._current(rebalance))  # each fenced its previous owner
            if self._superseded(generation, rebalance) or self._stale(rebalance):
                return  # (revoked, or it stood still, while they started: none of them is used)
            late, self.fenced_late = self.fenced_late & active, set()
            if late:
                # fenced only after their restore began: what the previous owner committed meanwhile may
                # be missing from the restored tables; given back, they are restored again after a rejoin
                log.warning("partitions %s fenced their previous owner late: restored again", sorted(late))
                await w.txns.revoke(late, commit=False)
                request_rejoin(w.faust_app)
                active -= late
        if active - w.punctuator.partitions:
            await w.read_calendars()  # (their days are skipped by the catch-ups and the fires from now)
        superseded = functools.partial(self._superseded, generation, rebalance)
        for partition in sorted(active - w.punctuator.partitions):
            if superseded():
                return
            await self._take_up_partition(partition, superseded)
        if superseded():
            return
        # (no await between: a revocation from now on waits for the ingest's lock after this assignment)
        await w.ingest.assign(active if w.txns is None else active & w.txns.partitions)
        self.take_ups += 1
        freeze_long_lived()  # the rebuilt heaps and compiled schedules

    async def _take_up_partition(self, partition: int, superseded: Callable[[], bool]) -> None:
        w = self.worker
        await maybe_slow_take_up()
        started = time.monotonic()
        if w.txns is not None:
            w.drop_held(partition)  # (a new ownership starts from what committed, nothing else)
        try:
            async with w.unit_of_work():
                complete = w.due_index.complete(partition)  # (else built from the table, once)
                built = await w.punctuator.assign(
                    partition,
                    None if complete else w.local_states(partition),
                    self.fired_up_to(partition),
                )
            if built:  # a data dir from before the index (a restored partition is indexed as restored)
                w.counts.events["dueIndexBuilds"] += 1
            w.jobs.checker.assign(partition, w.jobs.local_queues(partition))
            for key, state in w.punctuator.elapsed_schedules(partition):
                w.triggers.arm_elapsed(partition, key, state)
        except Unreadable as exc:  # (given up, a rejoin requested: caught up from its index when back)
            await w.punctuator.unreadable(exc)
            return
        except PartitionGone as exc:
            # its producer did not start or was fenced meanwhile (a rejoin is requested): the other
            # partitions still start firing now, not after the next rebalance
            log.info("partition %d not taken up: %s", partition, exc)
            w.punctuator.revoke(partition)
            w.jobs.checker.revoke(partition)
            return
        if superseded():  # (revoked while it was built: on_revoked forgot it before it was there)
            w.punctuator.revoke(partition)
            w.jobs.checker.revoke(partition)
            return
        self.partitions_taken_up += 1
        w.start_firing()  # (the first recovery goes on with the other partitions meanwhile)
        log.info(
            "partition %d assigned in %.3fs (%d schedules due within the horizon, fired up to %s)",
            partition,
            time.monotonic() - started,
            w.punctuator.compiled_count(partition),
            {u.value: t for u, t in self.fired_up_to(partition).items()},
        )

    # --- giving back -------------------------------------------------------------------------------

    async def on_revoked(self, app: Any, revoked: Any, **_: Any) -> None:
        w = self.worker
        w.forget_tenant_counts()
        # (a revocation is eager: every topic's partitions at once; the schedules' changelog is always there)
        sources = (w.settings.light_topic, w.schedules.changelog_topic.get_topic_name())
        partitions = {tp.partition for tp in revoked if tp.topic in sources}
        whole = await w.ingest.revoke(partitions)  # its last fetch's writes and offsets are sent
        if w.txns is not None:
            # committed, producers stopped: nothing left open (given up uncommitted if their work is stuck)
            await w.txns.revoke(partitions, commit=whole)
            for partition in partitions:  # what a partition given up uncommitted held must not outlive it
                w.drop_held(partition)
        elif w.freeze is None or not w.freeze.suspect():  # (a frozen worker's watermarks are stale)
            await w.punctuator.drain()
            await w.await_progress_sent()
        for partition in partitions:
            w.punctuator.revoke(partition)
            w.jobs.checker.revoke(partition)
