"""How many delayed messages are pending, by target topic and by due minute, in the partitions taken up here.

Pure bookkeeping (worker/delayed.py reads the store and tells it what changes). A partition taken up is
counted by a scan of its due entries in key order, a chunk at a time between deliveries (a partition of
millions must not stall the loop), while writes go on: a write to a key the scan has passed is counted as
it lands in the store (a key `covered`), one ahead of the scan is left to the scan, which reads the store
after it. Writes are told just before they reach the store (with transactions: when their transaction
committed), with the value they replace, so the counts are the store's, exact, at every moment; a
partition still being scanned is reported as `counting`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeVar

MINUTE_MS = 60_000


K = TypeVar("K")


def _apply(counter: Counter[K], deltas: dict[K, int]) -> None:
    for k, n in deltas.items():
        if (left := counter[k] + n) > 0:
            counter[k] = left
        else:
            counter.pop(k, None)


@dataclass
class _Partition:
    after: bytes | None = None  # the last due key the scan counted (None: none yet)
    done: bool = False
    topics: Counter[str] = field(default_factory=Counter)
    minutes: Counter[int] = field(default_factory=Counter)

    def covers(self, due: bytes) -> bool:
        return self.done or (self.after is not None and due <= self.after)

    def changed(self, changes: list[tuple[bytes, str, int]]) -> None:
        """Entries counted or writes about to land: (due key, topic, +1 or -1) each, summed by topic and
        minute first (a scan's chunk or a delivery's thousands of deletes touch a few of each)."""
        topics: dict[str, int] = {}
        minutes: dict[int, int] = {}
        for due, topic, n in changes:
            minute = int.from_bytes(due[1:9], "big") // MINUTE_MS * MINUTE_MS  # (instant_of, in the line)
            topics[topic] = topics.get(topic, 0) + n
            minutes[minute] = minutes.get(minute, 0) + n
        _apply(self.topics, topics)
        _apply(self.minutes, minutes)


class PendingCounts:
    def __init__(self) -> None:
        self._partitions: dict[int, _Partition] = {}

    def follow(self, partitions: Iterable[int]) -> None:
        """The partitions taken up now: a new one is counted from scratch, one given up is forgotten."""
        now = set(partitions)
        for gone in set(self._partitions) - now:
            del self._partitions[gone]
        for new in now - set(self._partitions):
            self._partitions[new] = _Partition()

    def to_scan(self) -> list[tuple[int, bytes | None]]:
        """(partition, the last due key counted) of each partition whose scan has not ended."""
        return [(p, c.after) for p, c in sorted(self._partitions.items()) if not c.done]

    def scanned(self, partition: int, entries: list[tuple[bytes, str]], done: bool) -> None:
        """The scan's next (due key, target topic) entries, in key order; `done`: there are no more."""
        counted = self._partitions.get(partition)
        if counted is None:
            return
        counted.changed([(due, topic, 1) for due, topic in entries])
        if entries:
            counted.after = entries[-1][0]
        counted.done = done

    def of(self, partition: int) -> _Partition | None:
        """The partition's counts (None: not followed): a write of a due key it `covers` is told them."""
        return self._partitions.get(partition)

    def by_topic(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for counted in self._partitions.values():
            total.update(counted.topics)
        return total

    def by_minute(self) -> Counter[int]:
        total: Counter[int] = Counter()
        for counted in self._partitions.values():
            total.update(counted.minutes)
        return total

    def counting(self) -> list[int]:
        """The partitions whose scan has not ended (their counts are partial)."""
        return sorted(p for p, c in self._partitions.items() if not c.done)


def within(by_minute: Counter[int], now: int, horizons_ms: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Pending messages by how soon they are due: label -> count of those due within that horizon from now
    (cumulative, at minute grain; "overdue": due in a minute already ended), and "all"."""
    out = {"overdue": sum(n for m, n in by_minute.items() if m + MINUTE_MS <= now)}
    for label, ms in horizons_ms:
        out[label] = sum(n for m, n in by_minute.items() if m < now + ms)
    out["all"] = sum(by_minute.values())
    return out
