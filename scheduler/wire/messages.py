"""The internal messages of the event path, typed: one dataclass per message with its encoder and decoder.

They travel on the worker's internal topics (JSON: they change with the code and nobody else reads them)
and their JSON is the one the worker wrote before they were typed, so records in flight during an upgrade
still decode:

- index updates (key: event key) from the commands ingest to the index agent, and the trigger-index
  table's entries they build;
- trigger-fired messages (key: schedule) from the event agent and the punctuator to the trigger agent;
- job-queue messages (key: program, or a tenant's concurrency group) to the job queue agent: a job
  triggered, a run's status, a cancel, a queue handed over, a constraint check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler.wire.codec import decode_json, encode_json

# --- the trigger index ------------------------------------------------------------------------------

#: index entries with this path prefix are group memberships, not triggers; the entry's schedule says
#: which tenant's group (the path names the group alone, as schedules written before tenant scoping did)
GROUP_PREFIX = "group:"


@dataclass(frozen=True, slots=True)
class IndexUpdate:
    """The paths of one schedule's triggers that listen to `event_key` now (none: it no longer listens)."""

    event_key: str
    schedule: str  # schedule id (tenant/name)
    schedule_key: bytes  # the schedules table's key
    version: int  # 0 when the schedule was deleted
    paths: tuple[str, ...]
    #: when the change was asked for (its command's record timestamp): the events of `event_key` recorded
    #: since then that the index agent finds in the recent events reach the new version's triggers (0: none)
    since: int = 0

    def encode(self) -> bytes:
        d = {
            "eventKey": self.event_key,
            "schedule": self.schedule,
            "scheduleKey": self.schedule_key.hex(),
            "version": self.version,
            "paths": list(self.paths),
        }
        if self.since:
            d["since"] = self.since
        return encode_json(d)

    @classmethod
    def decode(cls, value: bytes | None) -> IndexUpdate:
        d = decode_json(value)
        return cls(
            d["eventKey"],
            d["schedule"],
            bytes.fromhex(d["scheduleKey"]),
            d["version"],
            tuple(d["paths"]),
            d.get("since", 0),
        )


@dataclass(frozen=True, slots=True)
class IndexedTrigger:
    """One trigger (or group membership) of a schedule in a trigger-index entry."""

    schedule: str
    schedule_key: bytes
    version: int
    path: str

    def to_json(self) -> dict[str, Any]:
        return {
            "schedule": self.schedule,
            "scheduleKey": self.schedule_key.hex(),
            "version": self.version,
            "path": self.path,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> IndexedTrigger:
        return cls(d["schedule"], bytes.fromhex(d["scheduleKey"]), d["version"], d["path"])


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """What the trigger-index table holds for one event key: `<schedule>#<path>` -> the trigger."""

    triggers: dict[str, IndexedTrigger] = field(default_factory=dict)

    def added_by(self, update: IndexUpdate) -> list[IndexedTrigger]:
        """The triggers the update adds (new, or of a newer version), group memberships aside."""
        known = {k: t.version for k, t in self.triggers.items()}
        return [
            IndexedTrigger(update.schedule, update.schedule_key, update.version, path)
            for path in update.paths
            if not path.startswith(GROUP_PREFIX)
            and known.get(f"{update.schedule}#{path}", -1) < update.version
        ]

    def applied(self, update: IndexUpdate) -> IndexEntry:
        """This entry with the update's schedule's triggers replaced by the update's."""
        triggers = {k: t for k, t in self.triggers.items() if t.schedule != update.schedule}
        for path in update.paths:
            triggers[f"{update.schedule}#{path}"] = IndexedTrigger(
                update.schedule, update.schedule_key, update.version, path
            )
        return IndexEntry(triggers)

    def encode(self) -> bytes:
        return encode_json({"triggers": {k: t.to_json() for k, t in self.triggers.items()}})

    @classmethod
    def decode(cls, value: bytes | None) -> IndexEntry:
        if value is None:
            return cls()
        return cls({k: IndexedTrigger.from_json(t) for k, t in decode_json(value)["triggers"].items()})


# --- the recent events of an event key -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecentEvent:
    """An event (or an accepted run transition) the event agent routed: where it was (`source`: "e<events
    partition>" or "s<program-status partition>", `position`: its offset), its record's timestamp, and the
    Notification (Avro-shaped JSON)."""

    source: str
    position: int
    recorded_at: int
    notification: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"s": self.source, "o": self.position, "t": self.recorded_at, "n": self.notification}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RecentEvent:
        return cls(d["s"], d["o"], d["t"], d["n"])


def encode_recent(events: list[RecentEvent]) -> bytes:
    """The recent-events table's value of a key: the newest record timestamp first (8 bytes, big-endian:
    the sweep reads nothing else), then the events as JSON, oldest first."""
    newest = max((e.recorded_at for e in events), default=0)
    return newest.to_bytes(8, "big", signed=True) + encode_json([e.to_json() for e in events])


def decode_recent(value: bytes | None) -> list[RecentEvent]:
    if not value:
        return []
    return [RecentEvent.from_json(d) for d in decode_json(value[8:])]


def recent_newest(value: bytes) -> int:
    """The newest record timestamp of an encoded recent-events value."""
    return int.from_bytes(value[:8], "big", signed=True)


# --- a schedule's history ------------------------------------------------------------------------------

MAX_HISTORY = 100  # entries kept per schedule, newest


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One applied command of a schedule: the version it made (RUN / BACKFILL: the one it fired), when
    (its record's time), who sent it, and the definition it left (Avro `Schedule`; None: deleted, or a
    command that does not change it)."""

    version: int
    at: int
    by: str
    action: str
    schedule: bytes | None = None
    fires: int | None = None  # RUN / BACKFILL: how many
    note: str | None = None  # DISABLE: its pause's note
    until: int | None = None  # DISABLE: when its pause ends; ENABLE: the pause it resumed

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"v": self.version, "at": self.at, "by": self.by, "action": self.action}
        if self.schedule is not None:
            d["schedule"] = self.schedule.hex()
        for name, value in (("fires", self.fires), ("note", self.note), ("until", self.until)):
            if value is not None:
                d[name] = value
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> HistoryEntry:
        raw = d.get("schedule")
        return cls(
            d["v"],
            d["at"],
            d["by"],
            d["action"],
            None if raw is None else bytes.fromhex(raw),
            d.get("fires"),
            d.get("note"),
            d.get("until"),
        )


#: a history's value holds up to this many entries before its oldest are dropped. An append adds the
#: entry's JSON to the value's bytes without reading them: a value of 100 entries (~20 KB) took ~210 µs to
#: read and write again (tests.bench.history), twice a whole INSERT. Its entries are counted (by their
#: braces: a scan of ~10 µs at 20 KB) only when it grows past a multiple of COUNT_EVERY_BYTES, and once
#: they reach HISTORY_SLACK it is read and cut back to the newest MAX_HISTORY. Reads take the newest
#: MAX_HISTORY.
HISTORY_SLACK = MAX_HISTORY + MAX_HISTORY // 2
COUNT_EVERY_BYTES = 4_096


def add_history(value: bytes | None, entry: HistoryEntry) -> bytes:
    """The history table's value with `entry` appended (see HISTORY_SLACK)."""
    new = encode_json(entry.to_json())
    if not value or value == b"[]":
        return b"[" + new + b"]"
    if value.startswith(b"[{") and value.endswith(b"}]"):
        grown = value[:-1] + b"," + new + b"]"
        # (a brace in a note or a name counts too: the value is cut sooner, never later)
        if len(grown) // COUNT_EVERY_BYTES == len(value) // COUNT_EVERY_BYTES or (
            grown.count(b"{") < HISTORY_SLACK
        ):
            return grown
    entries = decode_json(value)[-(MAX_HISTORY - 1) :]
    entries.append(entry.to_json())
    return encode_json(entries)


def decode_history(value: bytes | None) -> list[HistoryEntry]:
    """The entries of a history's value, oldest first: the newest MAX_HISTORY."""
    if value is None:
        return []
    return [HistoryEntry.from_json(d) for d in decode_json(value)[-MAX_HISTORY:]]


# --- trigger-fired ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TriggerFired:
    """A leaf of a schedule's trigger tree fired: by an event (`event`, its Notification as Avro-shaped
    JSON) or by a time trigger (`due`, with the punctuator's `missed` and `catch_up`). `source` and
    `position` make a replay harmless: progress remembers the last position applied per source."""

    schedule_key: bytes
    schedule: str
    version: int
    path: str
    source: str  # "e<events partition>" or "t<path>"
    position: int  # the event's offset, or the due instant
    at: int  # when it happened (the event's timestamp, or when the punctuator fired)
    event: dict[str, Any] | None = None
    due: int | None = None
    missed: int = 0
    catch_up: bool = False

    def encode(self) -> bytes:
        d: dict[str, Any] = {
            "scheduleKey": self.schedule_key.hex(),
            "schedule": self.schedule,
            "version": self.version,
            "path": self.path,
            "source": self.source,
            "position": self.position,
        }
        if self.event is not None:
            d["at"] = self.at
            d["event"] = self.event
        else:
            d.update(due=self.due, at=self.at, missed=self.missed, catchUp=self.catch_up)
        return encode_json(d)

    @classmethod
    def decode(cls, value: bytes | None) -> TriggerFired:
        d = decode_json(value)
        return cls(
            bytes.fromhex(d["scheduleKey"]),
            d["schedule"],
            d["version"],
            d["path"],
            d["source"],
            d["position"],
            d.get("at", 0),
            event=d.get("event"),
            due=d.get("due"),
            missed=d.get("missed", 0),
            catch_up=d.get("catchUp", False),
        )


# --- the job queue -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobTriggered:
    """A schedule's trigger was satisfied: its job (`Job.to_json()`) joins the queue."""

    job: dict[str, Any]


@dataclass(frozen=True, slots=True)
class RunStatusChanged:
    """A run of `program` was reported in `status` at `at`; `details` carries what the status event said of
    its job and its holder (RUN_DETAILS), as strings."""

    run_id: str
    status: str
    at: int
    program: str | None = None
    details: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CancelJobs:
    """Drop the schedule's jobs (of versions below `below_version`; all when None), or only the one
    `job_id` (a user's cancel: DELETE /jobs/{id})."""

    schedule: str
    below_version: int | None
    reason: str
    job_id: str | None = None


@dataclass(frozen=True, slots=True)
class AdoptQueue:
    """A share of a legacy queue shared by every tenant, handed to its tenant's queue (`ProgramQueue`'s JSON)."""

    queue: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CheckConstraints:
    """A waiting job's next check instant came: check the queue's constraints again."""


@dataclass(frozen=True, slots=True)
class NoteOutcome:
    """Something that happened to a schedule of the queue, kept among its recent outcomes (an SLA alert
    raised by the schedule's trigger agent): {"jobId", "schedule", "outcome", "reason", "at"}."""

    outcome: dict[str, Any]


@dataclass(frozen=True, slots=True)
class AskSlot:
    """To the cap queue (scheduler.domain.caps): a job of `queue` asks a run slot for `run_id`."""

    run_id: str
    queue: str
    priority: int
    at: int


@dataclass(frozen=True, slots=True)
class ReleaseSlot:
    """To the cap queue: the run ended (or its job was cancelled while it asked): its slot or ask goes."""

    run_id: str


@dataclass(frozen=True, slots=True)
class SlotGranted:
    """From the cap queue to a job's queue: its run may launch."""

    run_id: str


@dataclass(frozen=True, slots=True)
class SlotQueued:
    """From the cap queue to a job's queue: the ask waits, and why."""

    run_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class StartBackfill:
    """A backfill of a schedule of the queue begins (scheduler.domain.backfills: its JSON)."""

    backfill: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CancelBackfill:
    """A user cancels a running backfill: no more of its instants launch."""

    backfill_id: str
    reason: str


JobQueueMessage = (
    JobTriggered
    | RunStatusChanged
    | CancelJobs
    | AdoptQueue
    | CheckConstraints
    | NoteOutcome
    | AskSlot
    | ReleaseSlot
    | SlotGranted
    | SlotQueued
    | StartBackfill
    | CancelBackfill
)

#: what a status event's payload may say of its job, kept with the run's record
RUN_DETAILS = (
    "jobId",
    "schedule",
    "arguments",
    "error",
    "triggeredAt",
    "launcher",
    "leaseMs",
    "attempt",
    "timeLimitMs",
    "logsUrl",
)


def encode_job_queue_message(m: JobQueueMessage) -> bytes:
    if isinstance(m, JobTriggered):
        return encode_json({"type": "triggered", "job": m.job})
    if isinstance(m, RunStatusChanged):
        d: dict[str, Any] = {"type": "status", "runId": m.run_id, "status": m.status, "at": m.at}
        if m.program is not None:
            d["program"] = m.program
        return encode_json({**d, **{k: m.details[k] for k in RUN_DETAILS if k in m.details}})
    if isinstance(m, CancelJobs):
        d = {"type": "cancel", "schedule": m.schedule, "belowVersion": m.below_version, "reason": m.reason}
        return encode_json(d if m.job_id is None else {**d, "jobId": m.job_id})
    if isinstance(m, AdoptQueue):
        return encode_json({"type": "adopt", "queue": m.queue})
    if isinstance(m, NoteOutcome):
        return encode_json({"type": "note", "outcome": m.outcome})
    if isinstance(m, AskSlot):
        return encode_json(
            {"type": "ask", "runId": m.run_id, "queue": m.queue, "priority": m.priority, "at": m.at}
        )
    if isinstance(m, ReleaseSlot):
        return encode_json({"type": "release", "runId": m.run_id})
    if isinstance(m, SlotGranted):
        return encode_json({"type": "granted", "runId": m.run_id})
    if isinstance(m, SlotQueued):
        return encode_json({"type": "queued", "runId": m.run_id, "reason": m.reason})
    if isinstance(m, StartBackfill):
        return encode_json({"type": "backfill", "backfill": m.backfill})
    if isinstance(m, CancelBackfill):
        return encode_json({"type": "cancelBackfill", "id": m.backfill_id, "reason": m.reason})
    return encode_json({"type": "check"})


def decode_job_queue_message(value: bytes | None) -> JobQueueMessage | None:
    """The message, or None for a type this version does not know (ignored, as before)."""
    d = decode_json(value)
    kind = d["type"]
    if kind == "triggered":
        return JobTriggered(d["job"])
    if kind == "status":
        details = {k: d[k] for k in RUN_DETAILS if k in d}
        return RunStatusChanged(d["runId"], d["status"], d["at"], d.get("program"), details)
    if kind == "cancel":
        return CancelJobs(d["schedule"], d.get("belowVersion"), d["reason"], d.get("jobId"))
    if kind == "adopt":
        return AdoptQueue(d["queue"])
    if kind == "check":
        return CheckConstraints()
    if kind == "note":
        return NoteOutcome(d["outcome"])
    if kind == "ask":
        return AskSlot(d["runId"], d["queue"], d["priority"], d["at"])
    if kind == "release":
        return ReleaseSlot(d["runId"])
    if kind == "granted":
        return SlotGranted(d["runId"])
    if kind == "queued":
        return SlotQueued(d["runId"], d["reason"])
    if kind == "backfill":
        return StartBackfill(d["backfill"])
    if kind == "cancelBackfill":
        return CancelBackfill(d["id"], d["reason"])
    return None
