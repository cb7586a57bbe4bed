"""Read your writes: whether a command a write produced has been applied by the worker that owns its key.

A write is answered 202 once its command is on the commands topic (acknowledged by every in-sync replica):
it cannot be lost, but the owner applies it a little later (0.1-0.3 s on an idle cluster; longer while
partitions move). A read in between still shows the schedule as it was, and a write that depends on the
first one (create, then disable) can be refused as "not found". So:

- every 202 names where its command is (`partition`, `offset` on the commands topic);
- `GET /schedules/{tenant}/{name}/applied?offset=N[&waitMs=M]` answers whether the owner has applied the
  commands of the key's partition up to that offset (waiting up to `waitMs` for it);
- a write with `?wait=applied[&waitMs=M]` is answered only once its command is applied: 200 with the
  schedule's new version, or 504 (accepted, not applied within `waitMs`: it still will be).

"Applied" means a read answers with it: without transactions once the owner wrote it to its local store,
with transactions once the partition's transaction that holds it committed.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING
from urllib.parse import quote

from scheduler.http.cluster import Cluster, Unavailable

if TYPE_CHECKING:
    from faust.web import Request

    from scheduler.domain.model import ScheduleKey
    from scheduler.worker.ports import WebPort

WAIT_DEFAULT_MS = 10_000
WAIT_MAX_MS = 15_000  # a long poll: a client loops for longer (HTTP clients and proxies time out at 30-60 s)
HOP_WAIT_MS = 8_000  # one long poll to the owner (the cluster's own requests time out after 10 s)
RETRY_S = 0.2  # while the key's partition has no owner (rebalancing)


def wait_ms(raw: str | None) -> int:
    """`waitMs` as asked (ValueError: not an integer of 0 to WAIT_MAX_MS)."""
    if raw is None:
        return WAIT_DEFAULT_MS
    value = int(raw)
    if not 0 <= value <= WAIT_MAX_MS:
        raise ValueError(value)
    return value


class AppliedWaits:
    def __init__(self, worker: WebPort, cluster: Cluster) -> None:
        self.worker = worker
        self.cluster = cluster

    async def here(self, partition: int, offset: int, timeout_ms: int) -> bool | None:
        """On the owner: whether the partition's commands up to `offset` are applied (waiting up to
        timeout_ms); None if this worker does not consume the partition (it moved)."""
        ingest = self.worker.ingest
        if ingest.applied_offset(partition) is None:
            return None
        if await ingest.wait_applied(partition, offset, timeout_ms / 1000):
            return True
        return None if ingest.applied_offset(partition) is None else False

    async def anywhere(
        self, key: ScheduleKey, kb: bytes, offset: int, timeout_ms: int, request: Request
    ) -> bool:
        """Whether the key's owner applied the commands of its partition up to `offset` within timeout_ms,
        wherever the owner is (and wherever it moves meanwhile)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        partition = self.worker.partition_of(kb)
        while (left_ms := int((deadline - loop.time()) * 1000)) > 0:
            try:
                owner = self.cluster.owner(kb)
                if owner is None:
                    applied = await self.here(partition, offset, left_ms)
                else:
                    path = f"/schedules/{quote(key.tenant, safe='')}/{quote(key.name, safe='')}/applied"
                    hop = min(left_ms, HOP_WAIT_MS)
                    status, body = await self.cluster.get(
                        f"{owner}{path}?offset={offset}&waitMs={hop}", request
                    )
                    applied = bool(body.get("applied")) if status == 200 and isinstance(body, dict) else None
            except Unavailable:
                applied = None
            if applied:
                return True
            if applied is None:  # (moving: ask the next owner in a moment)
                await asyncio.sleep(min(RETRY_S, max(0.0, deadline - loop.time())))
        return False
