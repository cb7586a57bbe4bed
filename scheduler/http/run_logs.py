"""GET /programs/{namespace}/{application}/{type}/{name}/runs/{run_id}/logs: a run's output.

Any worker answers: it finds the run's record (here, or from the worker owning the program's partition),
then reads the output where the launcher that ran it keeps it (the record's `logs_url`: this worker for its
embedded launcher, another worker's, or a standalone launcher's log server — http/log_server.py). Pages
go by byte offsets over everything the run printed (`offset`, the answer's `next`); `follow=true` is a long
poll: the answer comes when there is output past the offset, the run ends, or 20 s pass. `scheduler runs
logs PROGRAM RUN_ID -f` and the admin page follow a run that way."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from scheduler.domain.runs import RunStatus
from scheduler.http import run_responses as out
from scheduler.http.cluster import Unavailable, same_url
from scheduler.http.log_server import LOGS_HOLDER_HEADER, holder_answer, parse_query
from scheduler.http.programs import the_run
from scheduler.launcher.run_logs import RunLogs

if TYPE_CHECKING:
    from faust.web import Response

    from scheduler.http.calls import Call
    from scheduler.http.programs import Handlers

#: the holder may take the whole wait, then answer: the worker waits that much longer for it
HOLDER_SLACK_S = 10.0


async def run_logs(h: Handlers, call: Call) -> Response:
    query = parse_query(call.request.query)
    if isinstance(query, tuple):
        return call.field_error(*query)
    program, run_id = call.program, call.params["run_id"]
    logs = RunLogs.from_settings(h.worker.settings)
    if call.request.headers.get(LOGS_HOLDER_HEADER):  # (asked as the holder: its embedded launcher's)
        held = await holder_answer(logs, program, run_id, query)
        if held is None:
            return call.error(404, error="not found", runId=run_id)
        return call.view.json(held)
    run = await the_run(h, call)
    if not isinstance(run, dict):
        return run
    ended = RunStatus(run["status"]).terminal
    if ended:  # (nothing more will come, even where its launcher died before it said so)
        query = dataclasses.replace(query, wait_s=0.0)
    url, launcher = run.get("logs_url") or "", run.get("launcher") or None
    body: dict[str, Any] | None = None
    reason = "no output yet: the run has not started" if not ended else "the run never started"
    if url and same_url(url, h.worker.settings.web_url):
        body = await holder_answer(logs, program, run_id, query)
    elif url:
        path = call.request.path_qs.split("?", 1)[0]  # type: ignore[attr-defined]
        try:
            status, body = await h.cluster.get(
                f"{url.rstrip('/')}{path}?{urlencode(query.params())}",
                call.request,
                timeout_s=query.wait_s + HOLDER_SLACK_S,
                headers={LOGS_HOLDER_HEADER: "1"},
            )
        except Unavailable:
            return call.unavailable(f"the launcher that ran it ({launcher} at {url}) does not answer")
        if status == 404:
            body = None
        elif status != 200:
            return call.unavailable(f"the launcher that ran it ({launcher} at {url}) answered {status}")
    if url and body is None:
        reason = f"its launcher ({launcher}) keeps none of its output (removed past the logs' bound, or lost)"
    if body is None:
        body = {"text": "", "offset": query.offset, "next": query.offset, "dropped": 0, "size": 0,
                "complete": ended, "reason": reason}  # fmt: skip
    if ended:
        body["complete"] = True
    return call.answer(
        out.RunLogs,
        {"runId": run_id, "program": program, "status": run["status"], "launcher": launcher, **body},
    )


__all__ = ["run_logs"]
