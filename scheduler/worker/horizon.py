"""The horizon: the due-time index loaded into memory ahead of now, per time unit, a chunk at a time (the
punctuator asks for it before it stages what comes due). An entry that is stale when loaded (its schedule
gone, disabled or of another version) is deleted from the index instead of armed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from scheduler.domain.model import ScheduleState, TimeUnit
from scheduler.kafka.due_index import Due, DueIndex, bound
from scheduler.worker.collector import freeze_long_lived
from scheduler.worker.held import Compiled, Held, Unreadable, compile_schedule, loaded_until

log = logging.getLogger(__name__)

#: index entries loaded per step before the rest of the worker runs again
LOAD_CHUNK = 1000
#: schedules compiled by the loader since the collector last froze what lives: once a load is done with this
#: many, they are frozen (freeze_long_lived). A takeover freezes what it builds, but most schedules come into
#: memory in the minute after it, as they come due: unfrozen, every full collection walked them again
#: (~100 ms at 100,000 schedules: a burst of fires that late behind it)
FREEZE_AFTER = 5000
#: (partition, key) -> the schedule's current state, read from the local table (None: gone). Raises
#: Unreadable when the partition's store cannot be read; anything else it raises means undecodable
Load = Callable[[int, bytes], "ScheduleState | None"]
#: (partition, unit, key, path, due) -> arm the entry in memory
Push = Callable[[Held, TimeUnit, bytes, str, int], None]
#: (partition, index writes) -> written with the schedule writes (see Punctuator's index_put)
IndexPut = Callable[[int, list[tuple[bytes, bytes | None]]], None]


class Horizon:
    """Loads the index of the partitions the punctuator holds (`parts`: its own dict, shared) into their
    heaps (`push`)."""

    def __init__(
        self, parts: dict[int, Held], index: DueIndex, index_put: IndexPut, load: Load, push: Push
    ) -> None:
        self.parts = parts
        self._index = index
        self._index_put = index_put
        self._load = load
        self._push = push
        self.unfrozen = 0  # schedules compiled since the last freeze (FREEZE_AFTER)

    def loaded(self, partition: int, key: bytes) -> ScheduleState | None:
        """The schedule an index entry names, from the table (None: gone, or undecodable: never fired, its
        entry is dropped). Unreadable is raised: a store that cannot be read drops nothing."""
        try:
            return self._load(partition, key)
        except Unreadable:
            raise
        except Exception:
            log.exception("the schedule state of an index entry of partition %d is undecodable", partition)
            return None

    def compile_loaded(self, part: Held, partition: int, key: bytes) -> Compiled | None:
        """A schedule not in memory yet (an elapsed trigger its agent armed): read it from the table."""
        state = self._load(partition, key)
        if state is None or not state.firing:
            return None
        entry = part.compiled[key] = compile_schedule(state, key)
        self.unfrozen += 1
        return entry

    def lowest_loaded(self, unit: TimeUnit) -> int | None:
        """The least instant up to which every owned partition's index of `unit` is in memory."""
        loaded = [loaded_until(part.loaded[unit]) for part in self.parts.values() if unit in part.loaded]
        return min(loaded) if loaded else None

    def load(self, unit: TimeUnit, until: int) -> bool:
        """Load up to LOAD_CHUNK index entries of `unit` due at or before `until` into the heaps. Returns
        whether some are left to load."""
        budget = LOAD_CHUNK
        stop = bound(unit, until + 1)
        for partition, part in list(self.parts.items()):
            start = part.loaded.get(unit)
            if start is None or start >= stop:
                continue
            stale: list[tuple[bytes, bytes | None]] = []
            last = None
            for e in self._index.scan(partition, unit, start, until):
                last = e.raw
                budget -= 1
                self._load_entry(partition, part, unit, e, stale)
                if budget <= 0:
                    break
            part.loaded[unit] = last + b"\x00" if budget <= 0 and last is not None else stop
            if stale:
                self._index_put(partition, stale)
            if budget <= 0:
                return True
        if self.unfrozen >= FREEZE_AFTER:
            self.unfrozen = 0
            freeze_long_lived()
        return False

    def _load_entry(
        self,
        partition: int,
        part: Held,
        unit: TimeUnit,
        e: Due,
        stale: list[tuple[bytes, bytes | None]],
    ) -> None:
        if (path_live := part.live.get(e.key)) and (held := path_live.get(e.path)) and held[1] <= e.due:
            # in memory already, due then or earlier: this entry is its own copy (a command's entry held at
            # once, before its commit), or a successor written by an owner that staged the earlier one and
            # lost the partition before firing it (the earlier one writes it again when it fires)
            return
        state = self.loaded(partition, e.key)
        if state is None or not state.firing or not e.names(state.created_at, state.version):
            stale.append((e.raw, None))  # (with the schedule writes: never ahead of an update's commit)
            return
        entry = part.compiled.get(e.key)
        if entry is None or entry.version != state.version:
            entry = compile_schedule(state, e.key)
            self.unfrozen += 1
        if entry.leaf(e.path) is None:
            stale.append((e.raw, None))
            return
        part.compiled[e.key] = entry
        self._push(part, unit, e.key, e.path, e.due)

    async def fill(self, unit: TimeUnit, until: int) -> None:
        """Load the horizon of `unit` up to `until`, a chunk at a time."""
        while self.load(unit, until):
            await asyncio.sleep(0)
