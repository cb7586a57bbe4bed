"""Program runs: the run state machine of seed 004 and the run record. Pure.

PENDING -> STARTING -> RUNNING -> (SUSPENDED <-> RESUMING) -> STOPPING -> COMPLETED / FAILED / KILLED.
Any live state may fail or be killed; a stop request goes through STOPPING to KILLED. Every transition
here is user-facing and is published as a program-status event. An invalid transition is rejected.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class RunStatus(StrEnum):
    PENDING = "PENDING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    RESUMING = "RESUMING"
    STOPPING = "STOPPING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    KILLED = "KILLED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.KILLED})
_ENDS = {RunStatus.FAILED, RunStatus.KILLED}
TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    RunStatus.PENDING: frozenset({RunStatus.STARTING, RunStatus.STOPPING, *_ENDS}),
    RunStatus.STARTING: frozenset({RunStatus.RUNNING, RunStatus.STOPPING, *_ENDS}),
    RunStatus.RUNNING: frozenset({RunStatus.SUSPENDED, RunStatus.STOPPING, RunStatus.COMPLETED, *_ENDS}),
    RunStatus.SUSPENDED: frozenset({RunStatus.RESUMING, RunStatus.STOPPING, *_ENDS}),
    RunStatus.RESUMING: frozenset({RunStatus.RUNNING, RunStatus.STOPPING, *_ENDS}),
    RunStatus.STOPPING: frozenset({RunStatus.COMPLETED, *_ENDS}),
    RunStatus.COMPLETED: frozenset(),
    RunStatus.FAILED: frozenset(),
    RunStatus.KILLED: frozenset(),
}


class InvalidTransition(ValueError):
    pass


def check_transition(current: RunStatus | None, new: RunStatus) -> None:
    """Raise InvalidTransition unless a run may go from `current` (None: not seen yet) to `new`."""
    if current is None:
        if new is not RunStatus.PENDING and new is not RunStatus.STARTING and not new.terminal:
            raise InvalidTransition(f"a run cannot begin in {new.value}")
        return
    if new not in TRANSITIONS[current]:
        raise InvalidTransition(f"{current.value} -> {new.value} is not a valid run transition")


MAX_RUNS_KEPT = 100  # run records kept per program, newest last


@dataclass
class RunRecord:
    run_id: str
    program: str
    status: str
    job_id: str = ""
    schedule: str = ""
    arguments: dict[str, str] = field(default_factory=dict)
    created_at: int = 0  # launched (PENDING) or first seen
    triggered_at: int | None = None  # when its schedule's trigger was satisfied
    started_at: int | None = None  # STARTING
    running_at: int | None = None  # RUNNING
    ended_at: int | None = None
    error: str = ""
    transitions: list[list[Any]] = field(default_factory=list)  # [status, at]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def apply_transition(record: RunRecord, status: str, at: int, error: str = "") -> bool:
    """Move a run record to `status`; False (record unchanged) if the transition is invalid or a repeat."""
    new = RunStatus(status)
    current = RunStatus(record.status)
    if new is current:
        return False  # a replayed event
    try:
        check_transition(current, new)
    except InvalidTransition:
        return False
    record.status = new.value
    record.transitions.append([new.value, at])
    if new is RunStatus.STARTING:
        record.started_at = at
    elif new is RunStatus.RUNNING and record.running_at is None:
        record.running_at = at
    elif new.terminal:
        record.ended_at = at
        if error:
            record.error = error
    return True
