"""Finished schedules deleted past their retention (domain/retention.py says which): each worker looks
through the schedules of its partitions a batch at a time, and sends a DELETE for each one past it — through
the commands topic like any delete (`by: retention`, on the version it judged), so the history, the trigger
index, the tenant's count and the changelog follow as for a user's delete."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from typing import TYPE_CHECKING

from scheduler.domain.model import Action, ScheduleCommand
from scheduler.domain.retention import past_retention
from scheduler.wire.codec import key_from_bytes
from scheduler.wire.command_headers import command_headers

if TYPE_CHECKING:
    from scheduler.worker.ports import RetentionPort

log = logging.getLogger(__name__)

SWEEP_EVERY_S = 30.0  # (or half the retention, if shorter): ~0.5 % of a core at 1,000 per partition
BATCH = 1_000  # schedules looked at per partition per sweep (a pass over 1M schedules takes about an hour)
BY = "retention"


class Retention:
    def __init__(self, worker: RetentionPort) -> None:
        self.worker = worker
        self._after: dict[int, bytes | None] = {}  # partition -> where its pass goes on
        self._sent: dict[bytes, int] = {}  # key -> the version a DELETE was sent for (not applied yet)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.worker.settings.finished_retention_ms > 0 and self._task is None:
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    async def _run(self) -> None:
        every_s = min(SWEEP_EVERY_S, max(self.worker.settings.finished_retention_ms / 2000, 1.0))
        while True:
            await asyncio.sleep(every_s)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:  # (a partition closed under a revocation meanwhile: the next sweep sees)
                log.debug("retention sweep failed", exc_info=True)

    async def sweep(self) -> int:
        """One batch of each partition owned here; the DELETEs sent."""
        worker = self.worker
        retention = worker.settings.finished_retention_ms
        now = worker.clock()
        sent = 0
        for partition in sorted(worker.punctuator.partitions):
            after = self._after.get(partition)
            batch = list(itertools.islice(worker.states_from(partition, [b""], after), BATCH))
            self._after[partition] = (
                batch[-1][0] if len(batch) == BATCH else None
            )  # (the end: from the start)
            for key, state in batch:
                if not past_retention(state, now, retention) or self._sent.get(key) == state.version:
                    continue
                cmd = ScheduleCommand(key_from_bytes(key), Action.DELETE)
                await worker.send_command(cmd, headers=command_headers(if_version=state.version, by=BY))
                self._sent[key] = state.version
                worker.counts.events["retentionDeletes"] += 1
                sent += 1
            await asyncio.sleep(0)  # (a partition's batch at a time: the loop's other work goes on between)
        if len(self._sent) > 100_000:
            self._sent.clear()  # (applied long since: a repeat would only be refused by its version)
        return sent


__all__ = ["Retention"]
