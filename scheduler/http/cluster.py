"""Which worker answers an HTTP query, and how a query gets there.

A query about one key (a schedule, an event key, a program) is answered by the worker that owns the key's
partition: any other worker forwards it there, once (the forwarded request carries ROUTED_HEADER). A list
query fans out to every worker (`?local=1`) and merges. While partitions move between workers, or when a
partition has no owner, a query cannot be answered right: `Unavailable` (the handlers answer 503).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import aiohttp

if TYPE_CHECKING:
    from faust.web import Request

    from scheduler.worker.ports import WebPort

ROUTED_HEADER = "X-Scheduler-Routed"


class Unavailable(Exception):
    """The query cannot be answered right now (partitions moving, an owner not answering)."""


class Cluster:
    def __init__(self, worker: WebPort) -> None:
        self.worker = worker

    def _moving(self) -> None:
        app = self.worker.faust_app
        if app.rebalancing or getattr(app, "in_recovery", False):
            raise Unavailable("partitions are moving between workers (rebalancing)")

    def owner_of(self, partition: int) -> str | None:
        """Base URL of the worker owning `partition`, None if that is this worker."""
        self._moving()
        if partition in self.worker.active_partitions():
            return None
        topic = self.worker.schedules.changelog_topic.get_topic_name()
        for host, topics in self.worker.changelog_distribution().items():
            if partition in topics.get(topic, ()):
                if same_url(host, self.worker.settings.web_url):
                    break
                return str(host).rstrip("/")
        raise Unavailable(f"partition {partition} has no owner right now (rebalancing)")

    def owner(self, key: bytes) -> str | None:
        """Base URL of the worker owning the partition of `key`, None if that is this worker."""
        return self.owner_of(self.worker.partition_of(key))

    async def get(
        self,
        url: str,
        request: Request | None = None,
        timeout_s: float = 10,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """GET another worker's answer (the request's token goes along: the owner checks it too)."""
        headers = {ROUTED_HEADER: "1", **(headers or {})}
        if request is not None and "Authorization" in request.headers:
            headers["Authorization"] = request.headers["Authorization"]
        try:
            async with self.worker.faust_app.http_client.get(
                url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)
            ) as response:
                return response.status, await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, json.JSONDecodeError) as exc:
            raise Unavailable(f"owner {url} did not answer: {exc}") from None

    async def forward(self, request: Request, key: bytes) -> tuple[int, Any] | None:
        """The owner's answer to this request, or None if this worker owns `key`."""
        owner = self.owner(key)
        if owner is None:
            return None
        if request.headers.get(ROUTED_HEADER):
            raise Unavailable("forwarded to a worker that does not own the key")
        status, body = await self.get(owner + request.path_qs, request)  # type: ignore[attr-defined]
        if status == 503:  # the owner is moving partitions too: say when to retry, as it did
            raise Unavailable(str(body.get("reason") if isinstance(body, dict) else "owner unavailable"))
        return status, body

    async def fan_out_bodies(
        self, request: Request, path: str, query: dict[str, str], local: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """`local` (this worker's answer) and every other worker's answer to `path?local=1`; Unavailable
        unless every partition answered. With `local` in the request: `local` alone."""
        self._moving()
        if request.query.get("local"):
            return [local]
        topic = self.worker.schedules.changelog_topic.get_topic_name()
        covered = set(self.worker.active_partitions())
        results = [local]
        for host, topics in self.worker.changelog_distribution().items():
            partitions = set(topics.get(topic, ()))
            if not partitions or same_url(host, self.worker.settings.web_url):
                continue
            status, body = await self.get(
                f"{str(host).rstrip('/')}{path}?{urlencode({'local': '1', **query})}", request
            )
            if status != 200:
                raise Unavailable(f"worker {host} answered {status}")
            results.append(body)
            covered |= partitions
        if covered != set(range(self.worker.settings.partitions)):
            raise Unavailable("not every partition has an owner right now (rebalancing)")
        return results


def same_url(a: Any, b: str) -> bool:
    return str(a).rstrip("/") == b.rstrip("/")
