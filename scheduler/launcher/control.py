"""The launcher control topic's requests: stop, suspend, resume or terminate a run (keyed by its run id).

Produced by the HTTP routes (a user's stop, suspend, resume) and by the job queues (an overlap policy's
terminate, a schedule's stop); read by every launcher from the topic's beginning (scheduler.launcher.launcher),
the one that holds the run acting on it."""

from __future__ import annotations

from typing import Literal

from scheduler.domain.runs import RunStatus
from scheduler.wire.codec import encode_json

RunAction = Literal["stop", "suspend", "resume", "terminate"]  # (terminate: an overlap policy's kill)
#: the state a run must be in for a user's suspend or resume (a stop takes any live run)
RUN_ACTION_NEEDS: dict[str, RunStatus] = {"suspend": RunStatus.RUNNING, "resume": RunStatus.SUSPENDED}


def control_request(action: RunAction, run_id: str, program: str, reason: str = "") -> bytes:
    """A request of the launcher control topic (keyed by run id); `reason`: what the run's end says."""
    request = {"type": action, "runId": run_id, "program": program}
    return encode_json({**request, "reason": reason} if reason else request)
