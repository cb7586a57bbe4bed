"""Where a launcher's run logs are read: the holder's side of GET /programs/.../runs/{id}/logs.

A worker answers that route for any run (http/run_logs.py): it finds the run's record, and reads the output
where the record's `logsUrl` says — itself, for its embedded launcher, or a standalone launcher's log
server, which this module also is (`scheduler launcher` starts it on SCHEDULER_LAUNCHER_LOGS_PORT, 0: any
free port, and reports its URL with every run). The holder is asked on the same path with LOGS_HOLDER_HEADER
and answers from its own files; it checks the caller's token like a worker does (the worker passes the
caller's along)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from scheduler.http import auth
from scheduler.kafka.config import Settings
from scheduler.launcher.run_logs import Chunk, RunLogs, log_key

log = logging.getLogger(__name__)

LOGS_HOLDER_HEADER = "X-Scheduler-Logs-Holder"
MAX_LIMIT = 1 << 20
FOLLOW_WAIT_S = 20.0  # a follower's long poll (`follow=true`)
LOGS: web.AppKey[RunLogs] = web.AppKey("logs", RunLogs)
RUN_LOGS_PATH = r"/programs/{namespace}/{application}/{type}/{name}/runs/{run_id:[\s\S]+}/logs"


@dataclass(frozen=True)
class LogQuery:
    offset: int = 0
    limit: int = MAX_LIMIT
    wait_s: float = 0.0

    def params(self) -> dict[str, str]:
        """As the holder is asked (its wait in seconds: `wait`)."""
        return {"offset": str(self.offset), "limit": str(self.limit), "wait": f"{self.wait_s:g}"}


def parse_query(query: Mapping[str, str]) -> LogQuery | tuple[str, str]:
    """The query of a logs request, or (field, what is wrong with it)."""
    numbers: dict[str, int] = {}
    for name, default, most in (("offset", 0, None), ("limit", MAX_LIMIT, MAX_LIMIT)):
        raw = query.get(name, str(default))
        if not raw.isdigit() or (most is not None and not 1 <= int(raw) <= most):
            bound = f"from 1 to {most:,}" if most else "0 or more"
            return name, f"must be a whole number of bytes, {bound} (got {raw!r})"
        numbers[name] = int(raw)
    follow = query.get("follow", "false").lower()
    if follow not in ("true", "false", "1", "0"):
        return "follow", f"must be true or false (got {query['follow']!r})"
    wait_s = FOLLOW_WAIT_S if follow in ("true", "1") else 0.0
    if "wait" in query:  # (the holder's form: a worker passes the follower's wait on)
        try:
            wait_s = min(max(float(query["wait"]), 0.0), 2 * FOLLOW_WAIT_S)
        except ValueError:
            return "wait", f"must be seconds (got {query['wait']!r})"
    return LogQuery(numbers["offset"], numbers["limit"], wait_s)


def chunk_json(chunk: Chunk) -> dict[str, Any]:
    return {
        "text": chunk.text,
        "offset": chunk.offset,
        "next": chunk.next,
        "dropped": chunk.dropped,
        "size": chunk.size,
        "complete": chunk.complete,
    }


async def holder_answer(logs: RunLogs, program: str, run_id: str, query: LogQuery) -> dict[str, Any] | None:
    """The holder's answer: what it keeps of the run's output past the offset (waiting for more up to the
    query's wait while the run goes on); None if it keeps nothing of the run."""
    key = log_key(program, run_id)
    if query.wait_s > 0:
        chunk = await logs.read_when_more(key, query.offset, query.wait_s, query.limit)
    else:
        chunk = logs.read(key, query.offset, query.limit)
    return None if chunk is None else chunk_json(chunk)


async def _answer(request: web.Request) -> web.Response:
    logs = request.app[LOGS]
    namespace = request.match_info["namespace"]
    if not auth.principal_of(request).sees(namespace):
        return web.json_response({"error": "forbidden", "reason": f"not a token of {namespace}"}, status=403)
    query = parse_query(request.query)
    if isinstance(query, tuple):
        return web.json_response({"error": "invalid", "field": query[0], "reason": query[1]}, status=400)
    program = "/".join(request.match_info[p] for p in ("namespace", "application", "type", "name"))
    body = await holder_answer(logs, program, request.match_info["run_id"], query)
    if body is None:
        return web.json_response({"error": "not found", "runId": request.match_info["run_id"]}, status=404)
    return web.json_response(body)


def _no_tokens(why: str) -> Any:
    async def refuse(request: web.Request) -> web.Response:
        return web.json_response(
            {"error": "unavailable", "reason": f"this launcher's log server has no usable tokens: {why}"},
            status=503,
        )

    return refuse


async def serve(settings: Settings, logs: RunLogs) -> tuple[web.AppRunner, str]:
    """A standalone launcher's log server, started; and the URL it is reached at (reported with its runs).
    Its token configuration unusable (auth on, no tokens file where it says): it answers 503 saying so, and
    the launcher runs its programs all the same."""
    try:
        tokens = auth.load_tokens(settings)
    except auth.AuthConfigError as exc:
        log.error("run logs will not be served: %s", exc)
        app = web.Application()
        app.router.add_get(RUN_LOGS_PATH, _no_tokens(str(exc)))
    else:
        app = web.Application(middlewares=[auth.middleware(tokens)])
        app[LOGS] = logs
        app.router.add_get(RUN_LOGS_PATH, _answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings.web_bind or settings.web_host, settings.launcher_logs_port)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://{settings.web_host}:{port}"


__all__ = ["LOGS_HOLDER_HEADER", "LogQuery", "holder_answer", "parse_query", "serve"]
