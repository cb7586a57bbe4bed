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
    # (an external system that reports only how a run it took ended: COMPLETED at once)
    S.PENDING: frozenset({S.PREPARING, S.STARTING, S.STOPPING, S.STOPPED, S.COMPLETED, *_ENDS}),
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


MAX_ATTEMPTS = 100
MAX_RETRY_DELAY_MS = 7 * 86_400_000
MAX_TIME_LIMIT_MS = 7 * 86_400_000


class InvalidRunPolicy(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A FAILED run of a job runs again (a new run of the same job, its attempt number one more) after a
    backoff, until `max_attempts` runs were made. STOPPED (a user's stop) and KILLED are never retried."""

    max_attempts: int
    initial_delay_ms: int = 10_000
    multiplier: float = 2.0
    max_delay_ms: int = 600_000

    def delay_ms(self, attempt: int) -> int:
        """The backoff before attempt `attempt` (2 for the first retry)."""
        return int(min(self.max_delay_ms, self.initial_delay_ms * self.multiplier ** max(attempt - 2, 0)))

    def retries(self, attempt: int, status: RunStatus) -> bool:
        """Whether a run of attempt `attempt` that ended `status` is run again."""
        return status is RunStatus.FAILED and attempt < self.max_attempts

    def validate(self, field: str = "retry") -> None:
        if not 1 <= self.max_attempts <= MAX_ATTEMPTS:
            raise InvalidRunPolicy(f"{field}.maxAttempts", f"must be between 1 and {MAX_ATTEMPTS}")
        for name, value in (("initialDelayMs", self.initial_delay_ms), ("maxDelayMs", self.max_delay_ms)):
            if not 0 <= value <= MAX_RETRY_DELAY_MS:
                raise InvalidRunPolicy(f"{field}.{name}", f"must be between 0 and {MAX_RETRY_DELAY_MS}")
        if not 1.0 <= self.multiplier <= 100.0:
            raise InvalidRunPolicy(f"{field}.multiplier", "must be between 1 and 100")

    def to_json(self) -> dict[str, Any]:
        return {
            "maxAttempts": self.max_attempts,
            "initialDelayMs": self.initial_delay_ms,
            "multiplier": self.multiplier,
            "maxDelayMs": self.max_delay_ms,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RetryPolicy:
        return cls(d["maxAttempts"], d["initialDelayMs"], float(d["multiplier"]), d["maxDelayMs"])


def run_id_of(job_id: str, attempt: int) -> str:
    """A run's id: its job's id for the first attempt, `<job id>~<attempt>` for a retry."""
    return job_id if attempt <= 1 else f"{job_id}~{attempt}"


MAX_RUNS_KEPT = 100  # ended run records kept per program by default, newest last (live ones: always)
MAX_RUN_AGE_MS = 30 * 86_400_000  # and for how long by default


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
    attempt: int = 1  # 1 for the first run of its job, 2 for its first retry, ...
    time_limit_ms: int | None = None  # its schedule's time limit (launched again: the same)
    logs_url: str = ""  # where its launcher serves its output (GET .../runs/{id}/logs reads it there)

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
        record.launcher = record.logs_url = ""  # launched again: for any launcher to claim
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


def keep_records(
    records: list[RunRecord], now: int, max_runs: int = MAX_RUNS_KEPT, max_age_ms: int = MAX_RUN_AGE_MS
) -> list[RunRecord]:
    """The records kept: every live run, and of the ended ones the newest `max_runs` that ended within
    `max_age_ms` of `now`, in their order."""
    ended = [r for r in records if RunStatus(r.status).terminal]
    recent = [r for r in ended if (r.ended_at or r.created_at) >= now - max_age_ms]
    kept = {id(r) for r in recent[len(recent) - max_runs :]} if max_runs > 0 else set()
    return [r for r in records if not RunStatus(r.status).terminal or id(r) in kept]
