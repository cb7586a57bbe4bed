"""Program runs: seed 004's run state machine, the one judge of every status a run is reported in, and the
run record. Pure.

PENDING -> PREPARING -> STARTING -> [REQUESTING_RESOURCES ->] [INITIALIZING ->] RUNNING
RUNNING -> SUSPENDING -> SUSPENDED -> RESUMING -> RUNNING;  any live state -> STOPPING -> STOPPED
Ends: COMPLETED (success), FAILED (an error, a lost launcher, a failed stop), STOPPED (a user's stop),
KILLED (killed from outside or past its time limit). The job queue's accounting and the run records both
go through `judge`, so the two views of one run never disagree; a status that is not a valid transition
(a reordered or replayed event, a second launcher's claim) changes neither.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class RunStatus(StrEnum):
    PENDING = "PENDING"  # launched by the job queue; no launcher has taken it yet
    PREPARING = "PREPARING"  # a launcher took it (its claim) and builds the run's environment
    STARTING = "STARTING"  # the program's process is spawned
    REQUESTING_RESOURCES = "REQUESTING_RESOURCES"  # a Spark program waits for its cluster's executors
    INITIALIZING = "INITIALIZING"  # resources granted: the program's code is being loaded
    RUNNING = "RUNNING"
    SUSPENDING = "SUSPENDING"
    SUSPENDED = "SUSPENDED"
    RESUMING = "RESUMING"
    STOPPING = "STOPPING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"
    KILLED = "KILLED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    @property
    def program_status(self) -> str:
        """Seed 004's user-facing ProgramStatus of this (internal) state."""
        return _USER_FACING.get(self, self.value)


TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.STOPPED, RunStatus.KILLED})
LIVE = frozenset(RunStatus) - TERMINAL
#: seed 004's internal states shown as the user-facing status they belong to (the others are their own)
_USER_FACING = {
    RunStatus.SUSPENDING: "RUNNING",
    RunStatus.STOPPING: "RUNNING",
    RunStatus.RESUMING: "SUSPENDED",
}

S = RunStatus
_ENDS = {S.FAILED, S.KILLED}  # every live state may fail, or be killed from outside
TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    S.PENDING: frozenset({S.PREPARING, S.STARTING, S.STOPPING, S.STOPPED, *_ENDS}),
    # (ours) its launcher was lost before it started the program: launched again, for another to take
    S.PREPARING: frozenset({S.STARTING, S.PENDING, S.STOPPING, S.STOPPED, *_ENDS}),
    # a started program may end before it was seen running
    S.STARTING: frozenset(
        {S.REQUESTING_RESOURCES, S.INITIALIZING, S.RUNNING, S.STOPPING, S.COMPLETED, *_ENDS}
    ),
    S.REQUESTING_RESOURCES: frozenset({S.INITIALIZING, S.RUNNING, S.STOPPING, S.COMPLETED, *_ENDS}),
    S.INITIALIZING: frozenset({S.RUNNING, S.STOPPING, S.COMPLETED, *_ENDS}),
    S.RUNNING: frozenset({S.SUSPENDING, S.SUSPENDED, S.STOPPING, S.COMPLETED, *_ENDS}),
    S.SUSPENDING: frozenset({S.SUSPENDED, S.RUNNING, S.STOPPING, *_ENDS}),
    S.SUSPENDED: frozenset({S.RESUMING, S.STOPPING, *_ENDS}),
    S.RESUMING: frozenset({S.RUNNING, S.STOPPING, *_ENDS}),
    S.STOPPING: frozenset({S.STOPPED, S.COMPLETED, *_ENDS}),  # (it may end otherwise before the stop bites)
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset(),
    S.STOPPED: frozenset(),
    S.KILLED: frozenset(),
}


class InvalidTransition(ValueError):
    pass


def check_transition(current: RunStatus | None, new: RunStatus) -> None:
    """Raise InvalidTransition unless a run may go from `current` to `new`. A run first seen (`current`
    None) may be in any state: one started elsewhere (by hand, by another system) is first reported
    mid-flight, and counts from then on; a late report of a run known to have ended is refused by `judge`."""
    if current is None:
        return
    if new not in TRANSITIONS[current]:
        raise InvalidTransition(f"{current.value} -> {new.value} is not a valid run transition")


class Verdict(StrEnum):
    ACCEPTED = "ACCEPTED"  # a transition: applied, published, fires triggers
    REPEAT = "REPEAT"  # the status the run is in, from its holder (or nobody's): a heartbeat, or a replay
    REFUSED = "REFUSED"  # invalid, stale, or from a launcher that does not hold the run: counted


def judge(
    current: RunStatus | None,
    new: RunStatus,
    *,
    ended: bool = False,
    holder: str = "",
    launcher: str = "",
    judged: bool = False,
) -> tuple[Verdict, str]:
    """What a status report of a run does. `current`: the run's status (None: not seen); `ended`: it is
    known to have ended (its record went); `holder`: the launcher whose claim was accepted; `launcher`: the
    one reporting (empty: the job queue itself, an external system, an operator); `judged`: the transition
    was accepted already (by the run's record), only staleness, holder and repeats are left to check."""
    if ended and current is None:
        return Verdict.REFUSED, f"{new.value} for a run that already ended"
    if holder and launcher and launcher != holder:
        return Verdict.REFUSED, f"{new.value} from launcher {launcher}: the run is held by {holder}"
    if current is new:
        return Verdict.REPEAT, ""
    if not judged:
        try:
            check_transition(current, new)
        except InvalidTransition as exc:
            return Verdict.REFUSED, str(exc)
    return Verdict.ACCEPTED, ""


MAX_RUNS_KEPT = 100  # ended run records kept per program, newest last (live ones are always kept)


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
    launcher: str = ""  # the launcher that holds (held) it

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["program_status"] = RunStatus(self.status).program_status
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RunRecord:
        return cls(**{k: v for k, v in d.items() if k in _RECORD_FIELDS})


_RECORD_FIELDS = frozenset(f.name for f in dataclasses.fields(RunRecord))


def apply_transition(record: RunRecord, status: str, at: int, error: str = "", launcher: str = "") -> bool:
    """Move a run record to `status`; False (record unchanged) if it is not an accepted transition."""
    new = RunStatus(status)
    verdict, _ = judge(RunStatus(record.status), new, holder=record.launcher, launcher=launcher)
    if verdict is not Verdict.ACCEPTED:
        return False
    record.status = new.value
    record.transitions.append([new.value, at])
    if new is RunStatus.PENDING:
        record.launcher = ""  # launched again: for any launcher to claim
    elif launcher and not record.launcher:
        record.launcher = launcher
    if new is RunStatus.STARTING:
        record.started_at = at
    elif new is RunStatus.RUNNING and record.running_at is None:
        record.running_at = at
    elif new.terminal:
        record.ended_at = at
        if error:
            record.error = error
    return True


def keep_records(records: list[RunRecord]) -> list[RunRecord]:
    """The records kept: every live run, and the newest MAX_RUNS_KEPT ended ones, in their order."""
    ended = [r for r in records if RunStatus(r.status).terminal]
    dropped = {id(r) for r in ended[:-MAX_RUNS_KEPT]} if len(ended) > MAX_RUNS_KEPT else set()
    return [r for r in records if id(r) not in dropped]
