"""The job queue's constraint checker: a next-check heap per owned partition (the earliest instant a waiting
job may pass: a delay ending, a window opening, a timeout); when one comes due it sends a check to the
program's queue agent (job_queue.py). Like the punctuator's heaps it is rebuilt from the table on
assignment and dropped on revocation.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from scheduler.domain.jobs import ProgramQueue
from scheduler.domain.legacy_groups import legacy_group
from scheduler.wire.messages import CheckConstraints, encode_job_queue_message

if TYPE_CHECKING:
    from scheduler.worker.ports import JobQueuePort

log = logging.getLogger(__name__)


class CheckTimer:
    """Next-check heap per owned partition; sends a check for a program when its instant comes."""

    def __init__(
        self, worker: JobQueuePort, next_check: Callable[[int, bytes, ProgramQueue], int | None]
    ) -> None:
        self.worker = worker
        self._next_check = next_check
        self.taken_at: dict[int, int] = {}  # partition -> when this worker took it (a lease's first renewal)
        self._heaps: dict[int, list[tuple[int, int, bytes]]] = {}
        self._live: dict[int, dict[bytes, int]] = {}
        self._seq = itertools.count()
        self._wakeup = asyncio.Event()

    def assign(self, partition: int, queues: list[tuple[bytes, ProgramQueue]]) -> None:
        self._heaps[partition], self._live[partition] = [], {}
        self.taken_at[partition] = self.worker.clock()
        for key, queue in queues:
            # a shared group queue is checked at once: the agent hands it over to its tenants' queues
            at = 0 if legacy_group(queue.program) is not None else self._next_check(partition, key, queue)
            self.schedule(partition, key, at)
        self.worker.counts.jobs_assigned(partition, queues)

    def revoke(self, partition: int) -> None:
        self._heaps.pop(partition, None)
        self._live.pop(partition, None)
        self.taken_at.pop(partition, None)
        self.worker.counts.jobs_revoked(partition)

    def schedule(self, partition: int, key: bytes, at: int | None) -> None:
        live = self._live.get(partition)
        if live is None:
            return
        if at is None:
            live.pop(key, None)
            return
        seq = next(self._seq)
        live[key] = seq
        heapq.heappush(self._heaps[partition], (at, seq, key))
        self._wakeup.set()

    async def run(self, idle_s: float = 1.0) -> None:
        while True:
            now = self.worker.clock()
            earliest: int | None = None
            for partition, heap in list(self._heaps.items()):
                live = self._live[partition]
                while heap and heap[0][0] <= now:
                    _, seq, key = heapq.heappop(heap)
                    if live.get(key) == seq:
                        del live[key]
                        try:
                            await self.worker.send_keyed(
                                self.worker.settings.jobs_topic,
                                key,
                                encode_job_queue_message(CheckConstraints()),
                                partition,
                            )
                        except Exception:
                            log.exception("could not send a constraint check")
                            live[key] = seq
                            heapq.heappush(heap, (now + 1000, seq, key))
                if heap:
                    earliest = heap[0][0] if earliest is None else min(earliest, heap[0][0])
            self._wakeup.clear()
            timeout = idle_s if earliest is None else max(0.0, min(idle_s, (earliest - now) / 1000))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)
