"""Delayed messages (domain/delayed.py): held in the partition's `delayed` table, delivered when due.

Input: the delayed topic (`<app>-delayed`), co-partitioned with the schedules. With transactions its records
are a hop of the commands ingest (ingest.py): a record's table writes and the position after it commit in
its partition's transaction. Without them a Faust agent reads it, at least once (a record applied twice
writes the same entries again).

Delivery: at the first pending message's instant the loop scans, for each partition this worker has taken
up, the table's due keys up to now (a RocksDB seek: only what is due is read, whatever is pending) and
delivers them in due order, at most BATCH per partition and turn. Between instants, once a scan found
nothing due, it sleeps until something changes (a write landed, a partition was taken up or given up: each
wakes it) or the next instant is near, and scans then, or after QUIET_MAX_S (a wall clock that jumped
forward): an idle worker's loop wakes once a second, not each TICK_S.

With transactions every partition's delivery of an instant is one unit of work (their transactions commit
together); its records go out as whole batches per target partition with the table's deletes beside them
(StagedTable.send_now); PREPARE_AHEAD_MS before the instant what it delivers is read and decoded already
(prepare); each partition's scans start at its floor, where its last delivery ended, lowered by any write
before it as it lands (the keys in front are deleted ones). A delivery — the record sent to its target topic and both
entries deleted — commits in the partition's transaction with the fires, so a read_committed consumer sees
each message once across failovers; a delete held for the commit hides the entry from the next scan
(StagedTable.get). Without them the record is sent, then (once the broker has it) the entries are deleted
in the changelog and the store: a crash in between delivers it again, with the same `scheduler-id` header.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from scheduler.domain.delayed import (
    DUE,
    DelayedMessage,
    InvalidDelayed,
    delivered_at,
    due_key,
    due_until,
    from_delayed_record,
    id_key,
    instant_of,
)
from scheduler.kafka.tables import partition_db, partition_items_from, write_local
from scheduler.kafka.transactions import PartitionGone, owned_by
from scheduler.wire.avro_reader import read_long
from scheduler.wire.codec import decode
from scheduler.wire.delayed_codec import decode_delayed, encode_delayed
from scheduler.worker.hops import safely
from scheduler.worker.ports import DelayedPort

log = logging.getLogger(__name__)

TICK_S = 0.05
#: how long before a message's instant its delivery is read and decoded (prepare)
PREPARE_AHEAD_MS = 250
#: how long before a message's instant, with transactions, its delivery is sent: its partition's transaction
#: is held until the instant (Transactions.hold), so at the instant only the commit is left
SEND_AHEAD_MS = 50
BATCH = 2_000  # messages delivered per partition and tick (the rest the next tick: other work runs between)
#: pending messages a tick's count of a partition taken up reads (domain/delayed_counts.py)
COUNT_CHUNK = 5_000
#: due keys a partition's scans keep the topic of for the counts (_stored) at most (then it starts again)
READ_KEPT = 8 * BATCH
#: the longest the loop goes without scanning while nothing seems to change: what wakes it (a write landing,
#: a partition taken up or given up, the next instant near) is every change a scan would see but a wall
#: clock that jumps forward, so this bounds what a jump (or a missed change) could cost; liveness.py calls a
#: partition late past 2 s. (A quarter of a second, four scans a second idle, while a second's messages due
#: during a turn still waited for it: f8df5af.)
QUIET_MAX_S = 1.0


NOTHING = ""  # (_stored: RocksDB holds no message under the key; no topic is named "")

#: a message due: its due key, the message, and whether its id entry names it (else a newer one replaced it)
_Due = tuple[bytes, DelayedMessage, bool]


@dataclass
class _Quiet:
    """What the last turn saw when it found nothing due (DelayedMessages._quiet_now)."""

    owned: list[tuple[int, object]]  # the partitions taken up, each with its transaction (or None)
    first: int | None  # the next instant a message is due at (None: none is pending)
    scan_by: float  # (monotonic) when the next scan is due whatever happens


@dataclass
class _Prepared:
    """What a partition delivers at an instant, read ahead (DelayedMessages.prepare)."""

    until: bytes  # every pending key below it was read
    token: tuple[int, object]  # the partition's write count and transaction when it was read
    entries: list[_Due]


def decode_message(raw: bytes) -> DelayedMessage:
    fast = decode_delayed(raw)
    return fast if fast is not None else DelayedMessage.from_record(decode("DelayedMessage", raw))


def topic_of(raw: bytes) -> str:
    """The target topic of a stored DelayedMessage, read without decoding the rest (the counts read one per
    write): its third field, after `id` (bytes) and `deliverAt` (long) — a schema only adds fields last."""
    size = raw[0]  # (an id, and then a topic, shorter than 64 bytes: its length is one byte)
    at = 1 + (size >> 1) if size < 0x80 else sum(read_long(raw, 0))
    while raw[at] & 0x80:  # (deliverAt skipped, not decoded)
        at += 1
    size = raw[at + 1]
    if size < 0x80:
        return raw[at + 2 : at + 2 + (size >> 1)].decode()
    size, at = read_long(raw, at + 1)
    return raw[at : at + size].decode()


class DelayedMessages:
    def __init__(self, worker: DelayedPort, send_ahead: bool = False) -> None:
        """`send_ahead` (transactions, the real clock): an instant's deliveries are sent SEND_AHEAD_MS before
        it, their partitions' transactions held until it."""
        self.worker = worker
        self.send_ahead = send_ahead and worker.txns is not None
        self._stopped = False
        self._writes: dict[int, int] = {}  # partition -> writes to its messages (a prepared read's validity)
        self._prepared: dict[int, _Prepared] = {}
        #: partition -> (its transaction, a due key no pending message is below): the scans start there,
        #: not at the front of the keys, which after many deliveries is a run of RocksDB tombstones (each
        #: seek from it walked all of them until a compaction: 8% of a delivering worker's time)
        self._floor: dict[int, tuple[object, bytes]] = {}
        #: partition -> due key -> the target topic of the message RocksDB holds under it, as a scan read
        #: it (NOTHING: none, a new message's key): the counts (_landing) take what a landing write replaces
        #: from here instead of reading it back (a RocksDB get and a decode a delivered message: a tenth of a
        #: delivery's CPU). Right until the key's next landing, which pops it, or a restore of the partition
        #: (moved: all forgotten)
        self._stored: dict[int, dict[bytes, str]] = {}
        self._quiet: _Quiet | None = None  # (set by a turn that found nothing due)
        self._landed = False  # a write reached the store since the last turn began
        self._changed = asyncio.Event()  # set by a write landing and by a partition taken up or given up
        worker.punctuator.moved.append(self._moved)
        self._found_due = False  # the last deliver_due found a message due
        self.pending_counts = worker.counts.delayed_pending
        if worker.txns is not None:  # (the store gets a partition's writes when its transaction committed)
            worker.delayed.committing.append(self._landing)

    def _moved(self) -> None:
        """A partition taken up (its store restored) or given up."""
        self._stored.clear()
        self._changed.set()

    @property
    def table(self) -> Any:
        return self.worker.delayed

    # --- input --------------------------------------------------------------------------------------

    async def handle(self, event: Any) -> None:
        """A record of the delayed topic (a Faust event, or the ingest's): held, replaced, or cancelled."""
        await safely(self.worker, event, "a delayed message", self._handle)

    async def _handle(self, event: Any) -> None:
        msg = event.message
        counts = self.worker.counts.events
        key = b"" if msg.key is None else bytes(msg.key)
        try:
            m = from_delayed_record(key, msg.value, getattr(msg, "headers", None), self.worker.clock())
        except InvalidDelayed as exc:
            counts["delayedRefused"] += 1
            await self.worker.dead_letter(event, str(exc))
            return
        # (created here: a cluster that creates no topic on first use)
        topics = self.worker.topics
        if m is not None and not topics.known(m.topic) and (why := await topics.refusal(m.topic)):
            counts["delayedRefused"] += 1
            await self.worker.dead_letter(event, why)
            return
        partition = msg.partition
        by_id = id_key(key)
        # (whether this work wrote its id: with transactions the writes wait in the StagedTable)
        written, raw = (
            (False, self.table.get(by_id))
            if self.worker.txns is None
            else self.table.lookup(partition, by_id)
        )
        replaced = raw is not None
        if replaced:  # (the message of this id pending: forgotten)
            self._write(partition, {due_key(int.from_bytes(raw, "big"), key): None, by_id: None})
        if m is None:
            counts["delayedCancelled" if replaced else "delayedCancelsUnknown"] += 1
            return
        due = due_key(m.deliver_at, m.id)
        if not replaced and not written:
            # no entry of its id anywhere, so none of its due key: the counts need not ask RocksDB (_landing;
            # an absent key's get walks every file's bloom filter: ~2.5 µs with 125,000 in a partition)
            self._stored.setdefault(partition, {})[due] = NOTHING
        self._write(partition, {due: encode_delayed(m), by_id: m.deliver_at.to_bytes(8, "big")})
        counts["delayedReplaced" if replaced else "delayedHeld"] += 1

    def _write(self, partition: int, writes: dict[bytes, bytes | None]) -> None:
        """Writes of the table (None: a delete). With transactions they are held for the partition's commit
        (and counted then: _landing); without them they are in the store at once, and counted here."""
        self._writes[partition] = self._writes.get(partition, 0) + len(writes)
        if self.worker.txns is not None:
            self.table.put_all(writes)  # (a StagedTable)
            return
        self._landing(partition, writes)
        table = self.table
        for key, value in writes.items():
            if value is None:
                del table[key]
            else:
                table[key] = value

    # --- counts --------------------------------------------------------------------------------------

    def _landing(self, partition: int, writes: dict[bytes, bytes | None]) -> None:
        """Writes about to reach the partition's store: the pending counts follow them, and the next
        tick scans."""
        self._landed = True
        self._changed.set()
        counted = self.pending_counts.of(partition)
        changes: list[tuple[bytes, str, int]] = []  # (due key, topic, +1 or -1) for the counts
        get = None
        read = self._stored.get(partition, {})
        floor = self._floor.get(partition)
        prepared = self._prepared.get(partition)
        for key, value in writes.items():
            if not key.startswith(DUE):
                continue
            if floor is not None and value is not None and key < floor[1]:
                # a message due before the floor: scans see it. Lowered as it lands, not as it is written:
                # a delivery between its write and its commit read RocksDB without it and raised the floor
                floor = self._floor[partition] = (floor[0], key)
            if prepared is not None and value is not None and key < prepared.until:
                # what was read ahead read RocksDB without it (a write held for this commit): read again
                # (else the delivery took the prepared entries, read on from their end, and raised the
                # floor over it: held until the partition was assigned again)
                del self._prepared[partition]
                prepared = None
            old_topic = read.pop(key, None)
            if counted is None or not counted.covers(key):
                continue
            if old_topic is None:  # (not read since it landed: what RocksDB holds)
                get = get or partition_db(self.table, partition).get
                old = get(key)
                old_topic = NOTHING if old is None else topic_of(old)
            if old_topic:  # (NOTHING: none)
                changes.append((key, old_topic, -1))
            if value is not None:
                changes.append((key, topic_of(value), 1))
        if counted is not None and changes:
            counted.changed(changes)

    def count_some(self) -> None:
        """The partitions taken up are followed, and a chunk of each one's scan read (domain/delayed_counts)."""
        counts = self.pending_counts
        counts.follow(self.worker.punctuator.partitions)
        for partition, after in counts.to_scan():
            entries: list[tuple[bytes, str]] = []
            try:
                for key, value in partition_items_from(self.table, partition, DUE, after):
                    entries.append((key, topic_of(value)))
                    if len(entries) >= COUNT_CHUNK:
                        break
            except Exception:  # (a partition closed under a revocation meanwhile: the next turn sees)
                log.debug("delayed count of partition %d failed", partition, exc_info=True)
                continue
            counts.scanned(partition, entries, done=len(entries) < COUNT_CHUNK)

    # --- reads ---------------------------------------------------------------------------------------

    def pending(self, partition: int, id: bytes) -> DelayedMessage | None:
        """The message of this id pending in the partition (committed), None if there is none."""
        db_get = partition_db(self.table, partition).get
        raw = db_get(id_key(id))
        if raw is None:
            return None
        stored = db_get(due_key(int.from_bytes(raw, "big"), id))
        return None if stored is None else decode_message(stored)

    def pending_from(
        self, partition: int, after: bytes | None = None
    ) -> Iterator[tuple[bytes, DelayedMessage]]:
        """The partition's pending messages (committed) in due order, from the first after the due-order
        key `after` (a list's cursor)."""
        for key, value in partition_items_from(self.table, partition, b"d", after):
            yield key, decode_message(value)

    def overdue(self, late_ms: int = 2_000) -> int:
        """Partitions taken up here whose first message was due more than late_ms ago (liveness.py)."""
        bound = due_until(self.worker.clock() - late_ms)
        late = 0
        for partition in sorted(self.worker.punctuator.partitions):
            try:
                first = next(partition_items_from(self.table, partition, DUE, at=self._from(partition)), None)
            except Exception:  # (a partition closed under a revocation meanwhile)
                continue
            late += first is not None and first[0] < bound
        return late

    # --- delivery ------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Deliver what is due until stop(): a turn at the next message's instant, and whenever something
        changed (turns at least TICK_S apart; while quiet, see _until_changed); a failed turn is logged and
        the next goes on."""
        while not self._stopped:
            pause_s = TICK_S
            try:
                if self._quiet_now():
                    self._changed.clear()  # (what woke the loop changed nothing a scan would see)
                else:
                    pause_s = await self.turn()
            except asyncio.CancelledError:
                raise
            except Exception:
                self._quiet = None
                log.exception("a delayed-messages turn failed: going on")
            await asyncio.sleep(pause_s)
            await self._until_changed()

    async def _until_changed(self) -> None:
        """While the last scan found nothing due: wait until something changes (a write landed, a partition
        taken up or given up), the next instant is PREPARE_AHEAD_MS away, or the scan is QUIET_MAX_S old."""
        quiet = self._quiet
        if quiet is None or self._landed:
            return
        wait_s = quiet.scan_by - time.monotonic()
        if quiet.first is not None:
            wait_s = min(wait_s, (quiet.first - PREPARE_AHEAD_MS - self.worker.clock()) / 1000)
        if wait_s > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await self._changed.wait()

    async def turn(self) -> float:
        """Deliver what is due, count on, read the next instant ahead; how long to pause before the next."""
        self._landed, self._quiet = False, None
        self._changed.clear()
        owned = self._owned()
        now = self.worker.clock()
        delivered = await self.deliver_due(now)
        self.count_some()
        if delivered >= BATCH:
            return 0.0  # (more are due: the next turn at once, after what else waits to run)
        # after the instant the delivery read, not after the clock now: a message due in between (the clock
        # crossed a whole second while this turn ran) is the next turn's at once, not QUIET_MAX_S later
        first = self.next_due(after=now)
        if not self._found_due and not self.pending_counts.to_scan():
            self._quiet = _Quiet(owned, first, time.monotonic() + QUIET_MAX_S)
        if first is None:
            return TICK_S
        ahead_ms = first - self.worker.clock()
        if ahead_ms <= PREPARE_AHEAD_MS and self.worker.txns is not None:
            await self.prepare(first)
            ahead_ms = first - self.worker.clock()
            if self.send_ahead and 0 < ahead_ms <= SEND_AHEAD_MS:  # sent now, committed at the instant
                if await self.deliver_due(first, release=time.monotonic() + ahead_ms / 1000) >= BATCH:
                    return 0.0
                ahead_ms = first - self.worker.clock()
            elif self.send_ahead and ahead_ms > SEND_AHEAD_MS:
                ahead_ms -= SEND_AHEAD_MS  # (back in time to send it ahead)
        return min(TICK_S, max(0.0, ahead_ms / 1000))

    def _owned(self) -> list[tuple[int, object]]:
        txns = self.worker.txns
        return [
            (p, None if txns is None else txns.current(p)) for p in sorted(self.worker.punctuator.partitions)
        ]

    def _quiet_now(self) -> bool:
        """Whether nothing can be due that the last turn did not see: no write landed since, the same
        partitions are taken up with the same transactions, the next instant is not near, and the last
        scan is less than QUIET_MAX_S old."""
        quiet = self._quiet
        if quiet is None or self._landed or time.monotonic() >= quiet.scan_by:
            return False
        if quiet.first is not None and self.worker.clock() >= quiet.first - PREPARE_AHEAD_MS:
            return False
        owned = self._owned()
        return len(owned) == len(quiet.owned) and all(
            p == q and t is u for (p, t), (q, u) in zip(owned, quiet.owned, strict=True)
        )

    def next_due(self, after: int | None = None) -> int | None:
        """The first instant after `after` (default: now) a message pending in the partitions taken up here
        is due at (None: none is). Those due by then were delivered by the turn before, or their delivery
        waits for its commit, or for the next turn (TICK_S)."""
        first: bytes | None = None
        after_now = due_until(self.worker.clock() if after is None else after)
        for partition in self.worker.punctuator.partitions:
            try:
                entry = next(partition_items_from(self.table, partition, DUE, at=after_now), None)
            except Exception:  # (a partition closed under a revocation meanwhile)
                continue
            if entry is not None and (first is None or entry[0] < first):
                first = entry[0]
        return None if first is None else instant_of(first)

    def stop(self) -> None:
        self._stopped = True
        self._changed.set()

    async def deliver_due(self, now: int | None = None, release: float | None = None) -> int:
        """Deliver every message due by `now` (default: the clock's) in the partitions taken up here; how many
        were delivered. With transactions every partition's delivery is one unit of work: their transactions
        commit together; with `release` (time.monotonic(): `now` is ahead of the clock), not before it."""
        now = self.worker.clock() if now is None else now
        partitions = sorted(self.worker.punctuator.partitions)
        txns = self.worker.txns
        if txns is None:
            scans = [(p, scan) for p in partitions if (scan := self._due(p, now))]
            self._found_due = bool(scans)
            return sum([await self._deliver_at_least_once(p, scan, now) for p, scan in scans])
        until = due_until(now)
        self._found_due = any(self._has_due(p, until) for p in partitions)
        if not self._found_due:
            return 0
        delivered = 0
        async with txns.work():
            for partition in partitions:
                with owned_by(partition):
                    due = self._prepared_due(partition, until)
                    if due is None:
                        continue
                    txn = txns.current(partition)
                    if txn is not None:  # (every pending key below it was read; a write lowers it)
                        self._floor[partition] = (txn, until if len(due) < BATCH else due[-1][0])
                    if due:
                        try:
                            delivered += await self._deliver(partition, due, now)
                        finally:  # (sent ahead: not seen before the instant, whatever failed)
                            if release is not None:
                                txns.hold(partition, release)
        return delivered

    def _has_due(self, partition: int, until: bytes) -> bool:
        prepared = self._prepared.get(partition)
        if prepared is not None and prepared.until <= until and prepared.entries:
            return True
        try:
            first = next(partition_items_from(self.table, partition, DUE, at=self._from(partition)), None)
        except Exception:  # (a partition closed under a revocation meanwhile: the next turn sees)
            return False
        return first is not None and first[0] < until

    def _from(self, partition: int) -> bytes | None:
        """Where the partition's scans start: its floor, while its transaction is the one that set it."""
        floor = self._floor.get(partition)
        txns = self.worker.txns
        if floor is None or txns is None or floor[0] is not txns.current(partition):
            return None
        return floor[1]

    # --- preparing the next instant's deliveries ----------------------------------------------------------

    async def prepare(self, instant: int) -> None:
        """Transactions: read and decode, ahead of `instant`, what each partition taken up here delivers at
        it, so the delivery itself only sends (the records' batches, the deletes). Used at the instant if
        nothing was written to the partition's messages meanwhile and it is still owned by the same
        transaction (_token); else the delivery reads them again. A unit of work of its own: never read in
        the middle of a commit (whose writes are then neither held nor in RocksDB yet)."""
        txns = self.worker.txns
        assert txns is not None
        until = due_until(instant)
        async with txns.work():
            for partition in self.worker.punctuator.partitions:
                token = self._token(partition)
                prepared = self._prepared.get(partition)
                if prepared is not None and prepared.until == until and prepared.token == token:
                    continue
                with owned_by(partition):
                    entries = self._read_due(partition, until, at=self._from(partition))
                if entries is not None:
                    self._prepared[partition] = _Prepared(until, token, entries)

    def _token(self, partition: int) -> tuple[int, object]:
        txns = self.worker.txns
        return self._writes.get(partition, 0), None if txns is None else txns.current(partition)

    def _prepared_due(self, partition: int, until: bytes) -> list[_Due] | None:
        """(Inside the partition's work) its messages due by `until`: those prepared if still valid, and any
        due after them (None: the partition could not be read)."""
        prepared = self._prepared.get(partition)
        if prepared is not None and prepared.token != self._token(partition):
            del self._prepared[partition]  # (written to, or owned anew, since it was read)
            prepared = None
        if prepared is None or prepared.until > until:  # (none, or for an instant still to come)
            return self._read_due(partition, until, at=self._from(partition))
        del self._prepared[partition]
        if len(prepared.entries) >= BATCH:
            return prepared.entries
        more = self._read_due(partition, until, at=prepared.until)
        return None if more is None else prepared.entries + more

    def _read_due(self, partition: int, until: bytes, at: bytes | None = None) -> list[_Due] | None:
        """(Inside the partition's work) its pending messages below `until` (from `at`), decoded, oldest
        first, at most BATCH: each with whether its id entry still names it (None: it could not be read)."""
        keys: list[bytes] = []
        messages: list[DelayedMessage] = []
        written = self.table.written
        read = self._stored.get(partition)
        if read is None or len(read) > READ_KEPT:
            read = self._stored[partition] = {}
        try:
            for key, raw in partition_items_from(self.table, partition, DUE, at=at):
                if key >= until or len(keys) >= BATCH:
                    break
                staged, value = written(partition, key)
                if staged:  # (written since it reached RocksDB: that write is what it holds now)
                    if value is None:  # delivered or cancelled: its delete waits for the commit
                        continue
                    m = decode_message(value)  # (replaced by a message of the same id and instant)
                else:
                    m = decode_message(raw)
                    read[key] = m.topic
                keys.append(key)
                messages.append(m)
            named = self.table.get_many(partition, [id_key(m.id) for m in messages])
        except Exception:  # (a partition closed under a revocation meanwhile: the next turn sees)
            log.debug("delayed scan of partition %d failed", partition, exc_info=True)
            return None
        return [(key, m, instant == key[1:9]) for key, m, instant in zip(keys, messages, named, strict=True)]

    def _due(self, partition: int, now: int) -> list[tuple[bytes, bytes]]:
        until = due_until(now)
        out: list[tuple[bytes, bytes]] = []
        try:
            for key, value in partition_items_from(self.table, partition, b"d"):
                if key >= until or len(out) >= BATCH:
                    break
                out.append((key, value))
        except Exception:  # (a partition closed under a revocation meanwhile: the next turn sees)
            log.debug("delayed scan of partition %d failed", partition, exc_info=True)
            return []
        return out

    async def _deliver(self, partition: int, due: list[_Due], now: int) -> int:
        """Transactions (inside the partition's work): its due messages in its transaction, as whole batches
        per target topic; their deletes go in with them (send_now: the commit is one round trip less)."""
        by_topic: dict[str, list[tuple[bytes, bytes, list[tuple[str, bytes]]]]] = {}
        deletes: dict[bytes, bytes | None] = {}
        at = delivered_at(now)
        try:
            for key, m, names_it in due:
                headers = m.delivered_headers(now, at)
                by_topic.setdefault(m.topic, []).append((m.delivered_key, m.value or b"", headers))
                deletes[key] = None
                if names_it:  # (the id entry too, unless it names a newer message)
                    deletes[id_key(m.id)] = None
            self._write(partition, deletes)
            for topic, records in by_topic.items():
                await self.worker.produce_many(topic, records)
            await self.table.send_now(partition)
        except PartitionGone:  # given up meanwhile: its next owner delivers what did not commit
            return 0
        self.worker.counts.events["delayedDelivered"] += len(due)
        return len(due)

    async def _deliver_at_least_once(self, partition: int, due: list[tuple[bytes, bytes]], now: int) -> int:
        if not await self.worker.may_work():  # frozen past the session and a rebalance followed
            return 0
        sent = []
        for key, raw in due:
            m = decode_message(raw)
            sent.append(
                (key, m, await self.worker.produce(
                    m.topic, m.delivered_key, m.value or b"", headers=m.delivered_headers(now)
                ))
            )  # fmt: skip
        delivered = 0
        for key, m, future in sent:
            try:
                await future
            except Exception:
                log.warning(
                    "a delayed message was not acknowledged: delivered again next turn", exc_info=True
                )
                continue
            writes: dict[bytes, bytes | None] = {key: None}
            if partition_db(self.table, partition).get(id_key(m.id)) == key[1:9]:  # (not replaced meanwhile)
                writes[id_key(m.id)] = None
            for k in writes:
                self.table.send_changelog(partition, k, None)
            self._landing(partition, writes)
            write_local(self.table, partition, writes)
            delivered += 1
        self.worker.counts.events["delayedDelivered"] += delivered
        return delivered
