"""The scheduler's HTTP API from Python (what `scheduler`'s commands use): bearer auth, 503s (partitions
moving between workers) retried after their Retry-After, each write with a deadline so a write its caller
gave up on is never applied later, bulk creation, pages of schedules.

Every schedule write waits until the worker that owns its key has applied it (`?wait=applied`: a read
right after it shows it), unless the client is made with `wait_applied=False` (answered once the command
is on the commands topic: 202). A bulk creation waits once, at its end, for the last command of every
partition it wrote.

    async with HttpClient("http://127.0.0.1:6066", token) as api:
        await api.create({"tenant": "acme", "name": "nightly", "topic": "acme-fires",
                          "trigger": {"type": "cron", "expression": "0 0 2 * * *"}})
        async for schedule in api.all_schedules("acme"):
            print(schedule["key"], schedule["nextFireAt"])
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

DEFAULT_URL = "http://127.0.0.1:6066"
MAX_RETRY_AFTER_S = 30.0
BATCH_SIZE = 500  # schedules a POST /schedules:batch (the server takes up to 1,000)
BATCHES_IN_FLIGHT = 4

# httpx logs every request at INFO: a caller's output is its own.
logging.getLogger("httpx").setLevel(logging.WARNING)


class ApiError(Exception):
    """The API refused (4xx/5xx) or could not be reached (status 0) (the CLI exits 1)."""

    def __init__(
        self,
        status: int,
        error: str,
        reason: str = "",
        fields: Sequence[dict[str, Any]] = (),
        request: str = "",
    ) -> None:
        self.status = status
        self.error = error
        self.reason = reason
        self.fields = list(fields)
        self.request = request
        super().__init__(self.summary())

    @classmethod
    def from_response(cls, response: httpx.Response) -> ApiError:
        request = f"{response.request.method} {response.request.url.raw_path.decode()}"
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return cls(
                response.status_code, response.reason_phrase or "error", response.text[:200], (), request
            )
        reason = body.get("reason") or ""
        for extra in ("key", "runId"):  # the 404s name what was not found
            if not reason and body.get(extra):
                reason = str(body[extra])
        fields = [f for f in body.get("fields") or [] if isinstance(f, dict)]
        return cls(response.status_code, str(body.get("error") or "error"), str(reason), fields, request)

    def summary(self) -> str:
        head = f"{self.status} {self.error}" if self.status else self.error
        return f"{head}: {self.reason}" if self.reason else head

    def lines(self) -> list[str]:
        """What the CLI prints: the status and message, then one line per offending field."""
        where = f"{self.request}: " if self.request else ""
        out = [where + self.summary()]
        out += [f"  {f.get('field', 'body')}: {f.get('message', '')}" for f in self.fields]
        if self.status == 401:
            out.append("  (pass --token or set SCHEDULER_TOKEN)")
        return out


def _retry_after_s(response: httpx.Response) -> float:
    try:
        return min(max(float(response.headers.get("Retry-After", "1")), 0.0), MAX_RETRY_AFTER_S)
    except ValueError:  # an HTTP date: not sent by the scheduler
        return 1.0


@dataclass
class BulkResult:
    total: int
    done: int = 0
    accepted: int = 0
    failures: list[tuple[int, str, ApiError]] = field(default_factory=list)  # (index, key, error)
    started: float = field(default_factory=time.monotonic)
    seconds: float = 0.0
    applied: bool | None = None  # every accepted write applied by its owner (None: not waited for)
    # partition -> (the last offset accepted, a key of that partition): what the end waits for
    last: dict[int, tuple[int, str, str]] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        elapsed = self.seconds or time.monotonic() - self.started
        return self.done / elapsed if elapsed > 0 else 0.0


class HttpClient:
    """The scheduler's HTTP API. 503 (partitions moving between workers) is retried after Retry-After."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        token: str | None = None,
        *,
        timeout_s: float = 30.0,
        retries: int = 5,
        concurrency: int = 16,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        wait_applied: bool = True,
    ) -> None:
        self.url = url.rstrip("/")
        self.wait_applied = wait_applied
        self.timeout_s = timeout_s
        self.retries = retries
        self.sleep = sleep
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers=headers,
            timeout=timeout_s,
            transport=transport,
            limits=httpx.Limits(max_connections=max(concurrency, 1), max_keepalive_connections=concurrency),
        )

    async def __aenter__(self) -> HttpClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """The decoded JSON answer of a 2xx; ApiError otherwise (after the 503 retries)."""
        query = {k: v for k, v in (params or {}).items() if v is not None}
        for attempt in range(self.retries + 1):
            try:
                response = await self._http.request(
                    method,
                    path,
                    params=query or None,
                    json=body,
                    headers={**(self._deadline(method) or {}), **(headers or {})} or None,
                )
            except httpx.TransportError as exc:
                raise ApiError(0, f"cannot reach {self.url}", str(exc) or type(exc).__name__) from None
            if response.status_code == 503 and attempt < self.retries:
                await self.sleep(_retry_after_s(response))
                continue
            if response.status_code >= 400:
                raise ApiError.from_response(response)
            return response.json() if response.content else None
        raise AssertionError("unreachable")

    def _deadline(self, method: str) -> dict[str, str] | None:
        """A write this client will have given up on is never produced, even by a worker that took it and
        was then paused (it would apply it later, over a newer one): its deadline, a second before this
        client's timeout (epoch ms, by this machine's clock)."""
        if method == "GET":
            return None
        deadline = time.time_ns() // 1_000_000 + max(int(self.timeout_s * 1000) - 1000, 1)
        return {"X-Request-Deadline": str(deadline)}

    # --- schedules ----------------------------------------------------------------------------

    def _wait(self) -> dict[str, Any] | None:
        """A schedule write's query: answered once applied, within this client's timeout."""
        if not self.wait_applied:
            return None
        return {"wait": "applied", "waitMs": min(max(int(self.timeout_s * 1000) - 2000, 0), 15_000)}

    async def create(self, body: dict[str, Any]) -> Any:
        return await self.request("POST", "/schedules", body=body, params=self._wait())

    async def applied(self, tenant: str, name: str, offset: int, wait_ms: int = 0) -> bool:
        """Whether the owner of the key has applied its partition's commands up to `offset` (a 202's)."""
        params = {"offset": offset, "waitMs": wait_ms}
        answer = await self.request("GET", schedule_path(tenant, name, "applied"), params=params)
        return bool(answer["applied"])

    async def create_many(
        self,
        bodies: Sequence[dict[str, Any]],
        concurrency: int = 16,
        on_progress: Callable[[BulkResult], None] | None = None,
        batch_size: int = BATCH_SIZE,
    ) -> BulkResult:
        """Create every body: `batch_size` a request (POST /schedules:batch), at most `concurrency` (and at
        most BATCHES_IN_FLIGHT) requests in flight, one POST each against a worker without the batch
        endpoint; failures are collected, not raised. An item the cluster answered 503 (its partition
        moving) is sent again, as a 503 to a single POST is."""
        result = BulkResult(total=len(bodies))
        todo = iter(range(0, len(bodies), max(batch_size, 1)))
        batched = True

        async def one(i: int, body: dict[str, Any]) -> None:
            try:
                answer = await self.request("POST", "/schedules", body=body)
                result.accepted += 1
                _note_last(result, body, answer)
            except ApiError as exc:
                result.failures.append((i, schedule_label(body), exc))
            result.done += 1

        async def in_batches(start: int, chunk: list[dict[str, Any]]) -> bool:
            """False: the worker has no batch endpoint (one POST each, then)."""
            left = list(range(len(chunk)))
            for attempt in range(self.retries + 1):
                try:
                    answer = await self.request(
                        "POST", "/schedules:batch", body={"schedules": [chunk[j] for j in left]}
                    )
                except ApiError as exc:
                    if exc.status in (404, 405):
                        return False
                    for j in left:
                        result.failures.append((start + j, schedule_label(chunk[j]), exc))
                    result.done += len(left)
                    return True
                moving = []
                for r in answer["results"]:
                    j = left[r["index"]]
                    if r["status"] == 503 and attempt < self.retries:
                        moving.append(j)
                        continue
                    if r["status"] < 300:
                        result.accepted += 1
                        _note_last(result, chunk[j], r)
                    else:
                        result.failures.append((start + j, schedule_label(chunk[j]), _item_error(r)))
                    result.done += 1
                if on_progress is not None:
                    on_progress(result)
                if not moving:
                    return True
                left = moving
                await self.sleep(1.0)
            return True

        singles: list[int] = []  # (what goes one POST each: a worker without the batch endpoint)

        async def batches() -> None:
            nonlocal batched
            for start in todo:
                chunk = list(bodies[start : start + batch_size])
                if batched and len(chunk) > 1:
                    batched = await in_batches(start, chunk)
                    if batched:
                        continue
                singles.extend(range(start, start + len(chunk)))

        async def posts(mine: Iterator[int]) -> None:
            for i in mine:
                await one(i, bodies[i])
                if on_progress is not None:
                    on_progress(result)

        lanes = max(1, min(concurrency, BATCHES_IN_FLIGHT, -(-len(bodies) // max(batch_size, 1))))
        await asyncio.gather(*(batches() for _ in range(lanes)))
        each = iter(sorted(singles))
        await asyncio.gather(*(posts(each) for _ in range(max(1, min(concurrency, len(singles))))))
        if self.wait_applied and result.accepted:
            result.applied = await self._all_applied(result)
        result.seconds = time.monotonic() - result.started
        result.failures.sort(key=lambda f: f[0])
        return result

    async def _all_applied(self, result: BulkResult) -> bool:
        """Until the last accepted command of every partition is applied (within this client's timeout)."""
        deadline = time.monotonic() + self.timeout_s
        for offset, tenant, name in result.last.values():
            while True:
                left_ms = int((deadline - time.monotonic()) * 1000)
                if left_ms <= 0:
                    return False
                try:
                    if await self.applied(tenant, name, offset, min(left_ms, 10_000)):
                        break
                except ApiError as exc:  # (503: partitions moving; unreachable a moment: ask again)
                    if exc.status not in (0, 502, 503, 504):
                        raise
                    await self.sleep(0.5)
        return True

    async def schedules(
        self,
        tenant: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        **filters: str | None,
    ) -> Any:
        """A page of the schedules (`next`: the cursor of the page after it, None on the last); `filters`:
        label (a selector: team=data,tier!=bronze), enabled, paused ("true"/"false"), trigger (a kind),
        program, topic."""
        params = {"tenant": tenant, "limit": limit, "cursor": cursor, **filters}
        return await self.request("GET", "/schedules", params=params)

    async def all_schedules(
        self, tenant: str | None = None, limit: int | None = None, **filters: str | None
    ) -> AsyncIterator[Any]:
        """Every schedule (of `tenant`, filtered), a page after the other."""
        cursor = None
        while True:
            page = await self.schedules(tenant, limit, cursor, **filters)
            for schedule in page["schedules"]:
                yield schedule
            cursor = page.get("next")
            if not cursor:
                return

    async def schedule(self, tenant: str, name: str, what: str = "", **params: Any) -> Any:
        return await self.request("GET", schedule_path(tenant, name, what), params=params)

    async def update(
        self, tenant: str, name: str, body: dict[str, Any], if_version: int | None = None
    ) -> Any:
        """PUT the definition; with `if_version`, only over that version (If-Match: 412 otherwise)."""
        headers = None if if_version is None else {"If-Match": f'"{if_version}"'}
        return await self.request(
            "PUT", schedule_path(tenant, name), body=body, headers=headers, params=self._wait()
        )

    async def delete(self, tenant: str, name: str, if_version: int | None = None) -> Any:
        """DELETE the schedule; with `if_version`, only if it is at that version (If-Match: 412 otherwise)."""
        headers = None if if_version is None else {"If-Match": f'"{if_version}"'}
        return await self.request("DELETE", schedule_path(tenant, name), headers=headers, params=self._wait())

    async def disable(self, tenant: str, name: str, note: str | None = None, until: int | None = None) -> Any:
        """Pause the schedule: with a note for people, and an instant (epoch ms) it resumes at by itself."""
        body = {k: v for k, v in (("note", note), ("until", until)) if v is not None}
        return await self.action(tenant, name, "disable", body or None)

    async def action(self, tenant: str, name: str, action: str, body: Any = None) -> Any:
        """POST /schedules/{tenant}/{name}/{enable|disable|run|backfill}."""
        return await self.request("POST", schedule_path(tenant, name, action), body=body, params=self._wait())

    # --- backfill objects --------------------------------------------------------------------

    async def start_backfill(
        self,
        tenant: str,
        name: str,
        start: int,
        end: int,
        *,
        reprocess: str = "none",
        max_concurrent: int = 1,
        order: str = "oldest",
        overlap: str | None = None,
        dry_run: bool = False,
    ) -> Any:
        """POST /schedules/{tenant}/{name}/backfills: the instants of [start, end] (epoch ms) less what ran
        (`reprocess`: none, failed, all), at most `max_concurrent` at a time; {id, instants, leftOut, next}."""
        body: dict[str, Any] = {"from": start, "to": end, "reprocess": reprocess,
                                "maxConcurrent": max_concurrent, "order": order, "dryRun": dry_run}  # fmt: skip
        if overlap is not None:
            body["overlap"] = overlap
        return await self.request("POST", schedule_path(tenant, name, "backfills"), body=body)

    async def backfills(self, tenant: str, name: str) -> Any:
        """GET /schedules/{tenant}/{name}/backfills: its backfills, newest first, with their progress."""
        return await self.request("GET", schedule_path(tenant, name, "backfills"))

    async def backfill(self, tenant: str, name: str, backfill_id: str) -> Any:
        return await self.request(
            "GET", schedule_path(tenant, name, f"backfills/{quote(backfill_id, safe='')}")
        )

    async def cancel_backfill(self, tenant: str, name: str, backfill_id: str) -> Any:
        """DELETE: no more of its instants launch (ApiError 409 when it ended already)."""
        path = schedule_path(tenant, name, f"backfills/{quote(backfill_id, safe='')}")
        return await self.request("DELETE", path)

    # --- jobs, runs, events -------------------------------------------------------------------

    async def jobs(self, **query: str | None) -> Any:
        return await self.request("GET", "/jobs", params=query)

    async def cancel_job(self, job_id: str) -> Any:
        """DELETE /jobs/{id}: cancel a pending job (ApiError 404 when it is not pending)."""
        return await self.request("DELETE", f"/jobs/{quote(job_id, safe='/@')}")

    async def runs(self, program: str, status: str | None = None) -> Any:
        return await self.request("GET", f"/programs/{program}/runs", params={"status": status})

    async def register_program(self, program: str, spec: dict[str, Any]) -> Any:
        """PUT /programs/{namespace/application/type/name}: `kind` (pyspark, command, external), `target`
        or `argv`, ... (see docs/content/concepts/programs.md)."""
        return await self.request("PUT", f"/programs/{program}", body=spec)

    async def program(self, program: str) -> Any:
        return await self.request("GET", f"/programs/{program}")

    async def program_status(self, program: str) -> Any:
        return await self.request("GET", f"/programs/{program}/status")

    async def control_run(self, program: str, run_id: str, action: str) -> Any:
        """Stop, suspend or resume a run."""
        # run ids are job ids ("tenant/name@dueAt"): the route matches them with their slashes
        return await self.request("POST", f"/programs/{program}/runs/{quote(run_id, safe='/@')}/{action}")

    async def run_logs(self, program: str, run_id: str, offset: int = 0, follow: bool = False) -> Any:
        """One page of a run's output from `offset` (`follow`: once there is more, the run ended, or 20 s
        passed): {text, offset, next, dropped, size, complete, status, ...}."""
        params = {"offset": str(offset), "follow": "true" if follow else None}
        return await self.request(
            "GET", f"/programs/{program}/runs/{quote(run_id, safe='/@')}/logs", params=params
        )

    async def log_pages(
        self, program: str, run_id: str, offset: int = 0, follow: bool = False
    ) -> AsyncIterator[dict[str, Any]]:
        """The pages of a run's output from `offset` to what is kept now, or (`follow`) to the run's end."""
        while True:
            page = await self.run_logs(program, run_id, offset, follow=follow)
            yield page
            stuck, offset = page["next"] <= offset, page["next"]
            if offset >= page["size"] and (page["complete"] or not follow) or (stuck and not follow):
                return

    async def publish(self, event: dict[str, Any]) -> Any:
        return await self.request("POST", "/events", body=event)

    # --- delayed messages ---------------------------------------------------------------------

    async def send_at(
        self,
        id: str,
        topic: str,
        value: bytes | str | None,
        at_ms: int,
        *,
        key: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """POST /messages: `value` delivered to `topic` at `at_ms` (epoch ms); the same id replaces it."""
        body: dict[str, Any] = {
            "id": id,
            "topic": topic,
            "deliverAt": at_ms,
            "key": key,
            "headers": headers or {},
        }
        if isinstance(value, bytes):
            body["valueBase64"] = base64.b64encode(value).decode()
        else:
            body["value"] = value
        return await self.request("POST", "/messages", body=body)

    async def message(self, id: str) -> Any:
        """GET /messages/{id}: the message, while it is pending (404 once delivered or cancelled)."""
        return await self.request("GET", f"/messages/{quote(id, safe='')}")

    async def cancel(self, id: str) -> Any:
        return await self.request("DELETE", f"/messages/{quote(id, safe='')}")

    async def messages(
        self,
        due_before: int | None = None,
        topic: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Any:
        """GET /messages: a page of the delayed messages pending, due first (`next`: the next page's cursor)."""
        params = {"dueBefore": due_before, "topic": topic, "limit": limit, "cursor": cursor}
        return await self.request("GET", "/messages", params=params)

    async def message_stats(self, limit: int | None = None) -> Any:
        """GET /stats/messages: the delayed messages pending, by target topic and by due minute (the
        earliest `limit`, then how many are due later)."""
        return await self.request("GET", "/stats/messages", params={"limit": limit})

    async def all_messages(
        self, due_before: int | None = None, topic: str | None = None, limit: int | None = None
    ) -> AsyncIterator[Any]:
        """Every delayed message pending (due before, to topic), due first, a page after the other."""
        cursor = None
        while True:
            page = await self.messages(due_before, topic, limit, cursor)
            for message in page["messages"]:
                yield message
            cursor = page.get("next")
            if not cursor:
                return


def _item_error(r: dict[str, Any]) -> ApiError:
    """A batch item's refusal, as a single POST's would read."""
    reason = str(r.get("reason") or r.get("key") or "")
    fields = [f for f in r.get("fields") or [] if isinstance(f, dict)]
    return ApiError(
        int(r["status"]), str(r.get("error") or "error"), reason, fields, "POST /schedules"
    )  # (its own, in a batch)


def _note_last(result: BulkResult, body: dict[str, Any], answer: Any) -> None:
    """Keep the highest offset accepted per partition (and a key of it: how the owner is asked)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("offset"), int):
        return  # (a worker from before 202s said where)
    partition, offset = answer.get("partition", 0), answer["offset"]
    if partition not in result.last or result.last[partition][0] < offset:
        result.last[partition] = (offset, str(body.get("tenant")), str(body.get("name")))


def schedule_path(tenant: str, name: str, what: str = "") -> str:
    path = f"/schedules/{quote(tenant, safe='')}/{quote(name, safe='')}"
    return f"{path}/{what}" if what else path


def schedule_label(body: Any) -> str:
    if isinstance(body, dict) and isinstance(body.get("tenant"), str) and isinstance(body.get("name"), str):
        return f"{body['tenant']}/{body['name']}"
    return "?"
