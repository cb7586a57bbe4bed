"""What a partition holds armed in memory for one time unit: its entries grouped by due instant.

The punctuator's heap of (due, seq, key, path) entries cost a heap pop and a push per fire: at 100,000
every-second schedules ~1 µs of the ~6.5 µs a fire costs the tick (timeit: pop + push on a heap of 12,500,
a partition's share), each pop sifting through ~14 levels of tuples whose first items are equal. An
instant's entries are taken together, so a heap of the distinct instants and, per instant, its entries in
arming order hold the same order — (due, seq): seqs only grow, so appending keeps an instant's entries in
seq order — for an append per arming and one heap operation per instant (~0.3 µs).

An instant's entries are three parallel lists (seqs, keys, paths), not a tuple per entry: an entry then
allocates nothing the cyclic collector tracks. And an instant's lists, once taken and staged, are emptied
and kept for a later instant (`recycle`): lists made anew every second are young for the collector, and
with a tuple per entry held for the whole instant the collector's share of a fire went from ~1.4 to ~2.5
µs (`python -m tests.bench.tick`); the lists kept live as long as the partition, in the collector's
oldest generation (frozen after a load: collector.py), which its young collections do not walk.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator


class Instant:
    """One instant's entries, in arming order: seqs[i], keys[i], paths[i] (schedule key, time-trigger path)."""

    __slots__ = ("seqs", "keys", "paths")

    def __init__(self) -> None:
        self.seqs: list[int] = []
        self.keys: list[bytes] = []
        self.paths: list[str] = []

    def __len__(self) -> int:
        return len(self.seqs)

    def cut(self, start: int) -> Instant:
        """Entries from `start` on, moved out into a new Instant (this one keeps those before)."""
        rest = Instant()
        rest.seqs, rest.keys, rest.paths = self.seqs[start:], self.keys[start:], self.paths[start:]
        del self.seqs[start:], self.keys[start:], self.paths[start:]
        return rest


class Armed:
    """Entries by due instant: `dues` a heap of the instants that have entries, `at` instant -> its entries.
    Every instant in `dues` has a non-empty Instant in `at`, and the reverse."""

    __slots__ = ("dues", "at", "_spare")

    #: emptied Instants kept for later instants (an instant or two are armed at a time per partition)
    SPARE = 4

    def __init__(self) -> None:
        self.dues: list[int] = []
        self.at: dict[int, Instant] = {}
        self._spare: list[Instant] = []

    def __bool__(self) -> bool:
        return bool(self.dues)

    def __len__(self) -> int:
        return sum(len(instant) for instant in self.at.values())

    def push(self, due: int, seq: int, key: bytes, path: str) -> None:
        """File an entry under `due` (its seq greater than every seq armed before it)."""
        instant = self.at.get(due)
        if instant is None:
            instant = self.at[due] = self._spare.pop() if self._spare else Instant()
            heapq.heappush(self.dues, due)
        instant.seqs.append(seq)
        instant.keys.append(key)
        instant.paths.append(path)

    def first(self) -> int | None:
        """The earliest instant with entries (None: none)."""
        return self.dues[0] if self.dues else None

    def take(self) -> tuple[int, Instant]:
        """The earliest instant and all its entries, out of here (IndexError when empty); `recycle` it once
        done with."""
        due = heapq.heappop(self.dues)
        return due, self.at.pop(due)

    def recycle(self, instant: Instant) -> None:
        """An Instant `take` returned, done with: emptied, and kept for a later instant."""
        if len(self._spare) < self.SPARE:
            del instant.seqs[:], instant.keys[:], instant.paths[:]
            self._spare.append(instant)

    def put_back(self, due: int, instant: Instant) -> None:
        """Entries taken from `due` and not handled (an Instant of their own, `cut`): back in front of
        whatever was armed there since."""
        if not instant.seqs:
            return
        later = self.at.get(due)
        if later is None:
            heapq.heappush(self.dues, due)
        else:
            instant.seqs += later.seqs
            instant.keys += later.keys
            instant.paths += later.paths
        self.at[due] = instant

    def entries(self) -> Iterator[tuple[int, int, bytes, str]]:
        """Every entry as (due, seq, key, path), in no particular order (tests, inspection)."""
        for due, instant in self.at.items():
            yield from (
                (due, *entry) for entry in zip(instant.seqs, instant.keys, instant.paths, strict=True)
            )
