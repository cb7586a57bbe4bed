"""The due-time index: every enabled schedule's next due instant per time trigger, in RocksDB, keyed by the
instant, so the punctuator holds in memory only what comes due within its horizon and a worker's memory
does not grow with the number of schedules.

It lives in the schedules table's own RocksDB database of each partition, under keys no schedule key can
have (a schedule key is the Avro ScheduleKey: its first byte is a zigzag length, never 0xff), so an
index write goes into the same write batch as the schedule write it follows (both land or neither does).
The index is local derived state: never in a changelog. It is written

- by the commands ingest, next to each schedule write (the next due of the new version);
- by the punctuator as it fires: the next due at once; every entry due at or before the fire-progress
  watermark is deleted (one range delete) each time the watermark is saved — none of them is anyone's next
  due any more. A crash in between leaves the fired entries, which the next assignment finds at or before
  the watermark and drops; never a fire lost because the index ran ahead of the watermark;
- by the restore of the schedules changelog (a new owner, a standby), from each restored state.

An entry names its schedule's version, and its value the schedule's creation (`created`: its createdAt, 8
bytes; empty in an index written before 2026-12-07); one whose schedule has another version or another
creation, is disabled or deleted, is dropped when the punctuator reaches it (a schedule update does not
look for its old entries). The creation tells a schedule deleted and inserted again from the one deleted:
an INSERT numbers its versions from 1 again, and an entry of the deleted version 1 was loaded as the new
one's, firing it at an instant of the deleted definition (test_fire_once_through_updates found it).

Key: 0xff, unit (1 byte), due (8 bytes, big-endian), the schedule key, the trigger path, 0x00, version
(8 bytes). Other keys under 0xff 0x00: the schedules with elapsed triggers or an SLA watchdog (0xff 0x00
then the schedule key; re-armed from their progress on assignment) and the index's completeness marker.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from rocksdict import WriteBatch

from scheduler.domain.basics import TimeUnit
from scheduler.kafka.tables import LOCAL_KEYS
from scheduler.wire.avro_reader import read_long

PREFIX = LOCAL_KEYS
#: 0xff 0x00 + schedule key: the schedule has elapsed triggers or an SLA watchdog
ELAPSED = b"\xff\x00"
#: the index holds an entry for every schedule of the partition's table (written when it was built whole,
#: or when the database was created empty and every state came through the index)
COMPLETE = b"\xff\x00\x00complete"
_UNIT_BYTE = {unit: bytes([i + 1]) for i, unit in enumerate(TimeUnit)}
_BYTE_UNIT = {b[0]: unit for unit, b in _UNIT_BYTE.items()}
_MAX_DUE = 2**64 - 1


def created(created_at: int) -> bytes:
    """An entry's value: the creation of the schedule it names."""
    return created_at.to_bytes(8, "big")


def due_key(unit: TimeUnit, due: int, key: bytes, path: str, version: int) -> bytes:
    return b"".join((_bound(unit, due), key, path.encode(), b"\x00", version.to_bytes(8, "big")))


@lru_cache(maxsize=1024)
def _bound(unit: TimeUnit, due: int) -> bytes:
    """bound, remembered: the punctuator writes the index keys of many schedules due at one instant in a row."""
    return bound(unit, due)


def bound(unit: TimeUnit, due: int) -> bytes:
    """The least index key of `unit` due at `due` or later."""
    return PREFIX + _UNIT_BYTE[unit] + min(max(due, 0), _MAX_DUE).to_bytes(8, "big")


def elapsed_key(key: bytes) -> bytes:
    return ELAPSED + key


def _schedule_key_end(buf: bytes, pos: int) -> int:
    """Where the schedule key (two Avro strings) that starts at `pos` ends."""
    for _ in range(2):
        length, pos = read_long(buf, pos)
        pos += length
    return pos


@dataclass(frozen=True, slots=True)
class Due:
    unit: TimeUnit
    due: int
    key: bytes
    path: str
    version: int
    raw: bytes  # the index key itself (to delete it)
    created: bytes = b""  # the value: the schedule's creation (empty: not known, an older index)

    def names(self, created_at: int, version: int) -> bool:
        """Whether the entry is of this version of the schedule created at `created_at`."""
        return self.version == version and (not self.created or self.created == created(created_at))


def parse(raw: bytes, value: bytes = b"") -> Due:
    unit = _BYTE_UNIT[raw[1]]
    due = int.from_bytes(raw[2:10], "big")
    end = _schedule_key_end(raw, 10)
    path_end = raw.index(b"\x00", end)
    return Due(
        unit,
        due,
        raw[10:end],
        raw[end:path_end].decode(),
        int.from_bytes(raw[path_end + 1 :], "big"),
        raw,
        value,
    )


class MemoryDB:
    """What DueIndex needs of a RocksDB database, in memory (unit tests, the core bench without disk)."""

    def __init__(self) -> None:
        self._keys: list[bytes] = []
        self._data: dict[bytes, bytes] = {}

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        if key not in self._data:
            bisect.insort(self._keys, key)
        self._data[key] = value

    def delete(self, key: bytes) -> None:
        if self._data.pop(key, None) is not None:
            del self._keys[bisect.bisect_left(self._keys, key)]

    def items(self, from_key: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        i = bisect.bisect_left(self._keys, from_key)
        while i < len(self._keys):
            key = self._keys[i]
            yield key, self._data[key]
            if i < len(self._keys) and self._keys[i] == key:
                i += 1
            else:  # (deleted while iterating: the next key took its place)
                i = bisect.bisect_left(self._keys, key)

    def write(self, batch: list[tuple[bytes, bytes | None]]) -> None:
        for key, value in batch:
            if value is None:
                self.delete(key)
            else:
                self.put(key, value)


class DueIndex:
    """The index of each partition, in the database `db_for(partition)` returns (a RocksDB one, or a
    MemoryDB). Writes that must land with a schedule write go through the caller's batch (`entry`/`marker`
    give the keys); the punctuator's own writes go straight in (`write`)."""

    def __init__(self, db_for: Callable[[int], Any] | None = None) -> None:
        self._memory: dict[int, MemoryDB] = {}
        self._db_for = db_for or self._memory_db

    def _memory_db(self, partition: int) -> MemoryDB:
        db = self._memory.get(partition)
        if db is None:
            db = self._memory[partition] = MemoryDB()
        return db

    def scan(self, partition: int, unit: TimeUnit, start: bytes, until: int) -> Iterator[Due]:
        """Entries of `unit` from the index key `start` (inclusive: see `bound`) to those due at `until`,
        earliest first."""
        db = self._db_for(partition)
        stop = bound(unit, until + 1)
        for raw, value in db.items(from_key=max(start, bound(unit, 0))):
            if raw >= stop:
                return
            yield parse(raw, value)

    def elapsed(self, partition: int) -> Iterator[bytes]:
        """The schedule keys marked as having elapsed triggers or an SLA watchdog."""
        db = self._db_for(partition)
        for raw, _ in db.items(
            from_key=ELAPSED + b"\x01"
        ):  # (past COMPLETE: a schedule key's first byte is >= 2)
            if not raw.startswith(ELAPSED):
                return
            yield raw[len(ELAPSED) :]

    def drop_before(self, partition: int, unit: TimeUnit, due: int) -> None:
        """Delete every entry of `unit` due at or before `due` (one range tombstone, not a delete each)."""
        db = self._db_for(partition)
        begin, end = bound(unit, 0), bound(unit, due + 1)
        if isinstance(db, MemoryDB):
            db.write([(raw, None) for raw, _ in db.items(from_key=begin) if raw < end])
        else:
            db.delete_range(begin, end)

    def complete(self, partition: int) -> bool:
        return self._db_for(partition).get(COMPLETE) is not None

    def write(self, partition: int, writes: list[tuple[bytes, bytes | None]]) -> None:
        """Puts (value bytes) and deletes (None), as one batch."""
        if not writes:
            return
        db = self._db_for(partition)
        if isinstance(db, MemoryDB):
            db.write(writes)
            return
        batch = WriteBatch(raw_mode=True)
        for key, value in writes:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        db.write(batch)
