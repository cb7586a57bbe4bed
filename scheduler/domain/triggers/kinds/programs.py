"""The program kinds: another program's outcome, its runs, its runs started."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from scheduler.domain.basics import (
    InvalidSchedule,
    ProgramId,
    ProgramOutcome,
)
from scheduler.domain.events import (
    ProgramStatusEvent,
    program_key,
)
from scheduler.domain.triggers.kinds.trigger import (
    MAX_RUNS,
    In,
    LeafProgress,
    ProgramField,
    Reached,
    Trigger,
    _plural,
    program_from_avro,
    program_to_avro,
)


def _validate_program(program: ProgramId, field: str) -> None:
    try:
        ProgramId.parse(program.id)
    except InvalidSchedule as exc:
        raise InvalidSchedule(f"{field}.program", exc.message) from None


class ProgramStatusTriggerIn(In):
    type: Literal["programStatus"]
    program: ProgramField
    on: list[ProgramOutcome] = Field(
        default_factory=lambda: [ProgramOutcome.SUCCEEDED], min_length=1, max_length=len(ProgramOutcome)
    )


@dataclass(frozen=True, slots=True)
class ProgramStatusTrigger(Trigger):
    """Another program reached one of `on` (SUCCEEDED / FAILED / KILLED / FINISHED)."""

    program: ProgramId
    on: tuple[ProgramOutcome, ...] = (ProgramOutcome.SUCCEEDED,)

    tags = ("programStatus",)
    avro_name = "scheduler.ProgramStatusTrigger"
    body = ProgramStatusTriggerIn

    def to_json(self) -> dict[str, Any]:
        return {"type": "programStatus", "program": self.program.id, "on": [o.value for o in self.on]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProgramStatusTrigger:
        return cls(
            ProgramId.parse(d["program"]), tuple(ProgramOutcome(o) for o in d.get("on") or ["SUCCEEDED"])
        )

    def to_avro(self) -> dict[str, Any]:
        return {"program": program_to_avro(self.program), "on": [o.value for o in self.on]}

    @classmethod
    def from_avro(cls, rec: dict[str, Any]) -> ProgramStatusTrigger:
        return cls(program_from_avro(rec["program"]), tuple(ProgramOutcome(o) for o in rec["on"]))

    def describe(self) -> str:
        return f"{self.program.id} {' or '.join(o.value for o in self.on)}"

    def validate(self, field: str) -> None:
        _validate_program(self.program, field)
        if not self.on:
            raise InvalidSchedule(f"{field}.on", "name at least one outcome")

    def event_keys(self) -> tuple[str, ...]:
        return (program_key(self.program),)

    def tenants(self) -> set[str]:
        return {self.program.namespace}

    def watched_program(self) -> ProgramId:
        return self.program

    def record(self, lp: LeafProgress, reached: Reached) -> bool:
        event = reached.event
        if not (isinstance(event, ProgramStatusEvent) and any(o.matches(event.status) for o in self.on)):
            return False
        lp.fired = True
        return True

    def progress_json(self, lp: LeafProgress, last_job_at: int | None) -> dict[str, Any]:
        return {
            "type": "programStatus",
            "program": self.program.id,
            "on": [o.value for o in self.on],
            "fired": lp.fired,
            "text": self.progress_text(lp),
        }

    def progress_text(self, lp: LeafProgress) -> str:
        outcomes = "/".join(o.value for o in self.on)
        return f"{self.program.id} reaching {outcomes}: {'seen' if lp.fired else 'not seen yet'}"


class ProgramRunsTriggerIn(In):
    type: Literal["programRuns"]
    program: ProgramField
    runs: int = Field(ge=1, le=MAX_RUNS)
    on: list[ProgramOutcome] = Field(
        default_factory=lambda: [ProgramOutcome.SUCCEEDED], min_length=1, max_length=len(ProgramOutcome)
    )


@dataclass(frozen=True, slots=True)
class ProgramRunsTrigger(Trigger):
    """A repeated trigger: another program's runs reached one of `on` `runs` times since the schedule's
    last job ("program P succeeded N times"). Each run counts once, however often it is reported."""

    program: ProgramId
    runs: int
    on: tuple[ProgramOutcome, ...] = (ProgramOutcome.SUCCEEDED,)

    tags = ("programRuns",)
    avro_name = "scheduler.ProgramRunsTrigger"
    body = ProgramRunsTriggerIn

    def to_json(self) -> dict[str, Any]:
        outcomes = [o.value for o in self.on]
        return {"type": "programRuns", "program": self.program.id, "runs": self.runs, "on": outcomes}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProgramRunsTrigger:
        outcomes = tuple(ProgramOutcome(o) for o in d.get("on") or ["SUCCEEDED"])
        return cls(ProgramId.parse(d["program"]), d["runs"], outcomes)

    def to_avro(self) -> dict[str, Any]:
        return {"program": program_to_avro(self.program), "runs": self.runs, "on": [o.value for o in self.on]}

    @classmethod
    def from_avro(cls, rec: dict[str, Any]) -> ProgramRunsTrigger:
        return cls(
            program_from_avro(rec["program"]), rec["runs"], tuple(ProgramOutcome(o) for o in rec["on"])
        )

    def describe(self) -> str:
        return f"{self.program.id} {' or '.join(o.value for o in self.on)} {_plural(self.runs, 'time')}"

    def validate(self, field: str) -> None:
        _validate_program(self.program, field)
        if not 1 <= self.runs <= MAX_RUNS:
            raise InvalidSchedule(f"{field}.runs", f"must be between 1 and {MAX_RUNS}")
        if not self.on:
            raise InvalidSchedule(f"{field}.on", "name at least one outcome")

    event_keys = ProgramStatusTrigger.event_keys
    tenants = ProgramStatusTrigger.tenants
    watched_program = ProgramStatusTrigger.watched_program

    def record(self, lp: LeafProgress, reached: Reached) -> bool:
        event = reached.event
        if not (isinstance(event, ProgramStatusEvent) and any(o.matches(event.status) for o in self.on)):
            return False
        if event.run_id in lp.runs:  # a run reported twice (a launcher's restart) counts once
            return False
        lp.runs.append(event.run_id)
        return True

    def satisfied(self, lp: LeafProgress) -> bool:
        return len(lp.runs) >= self.runs

    def progress_json(self, lp: LeafProgress, last_job_at: int | None) -> dict[str, Any]:
        return {
            "type": "programRuns",
            "program": self.program.id,
            "on": [o.value for o in self.on],
            "runs": len(lp.runs),
            "needs": self.runs,
            "text": self.progress_text(lp),
        }

    def progress_text(self, lp: LeafProgress) -> str:
        outcomes = " or ".join(o.value for o in self.on)
        return f"{len(lp.runs)} of {self.runs} runs of {self.program.id} {outcomes}"


class ProgramStartedTriggerIn(In):
    type: Literal["programStarted"]
    program: ProgramField


#: the run status that means a run started: the launcher reports it once a run's program is running
STARTED_STATUS = "RUNNING"


@dataclass(frozen=True, slots=True)
class ProgramStartedTrigger(Trigger):
    """A lifecycle trigger: a run of another program started (its status reached RUNNING)."""

    program: ProgramId

    tags = ("programStarted",)
    avro_name = "scheduler.ProgramStartedTrigger"
    body = ProgramStartedTriggerIn

    def to_json(self) -> dict[str, Any]:
        return {"type": "programStarted", "program": self.program.id}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProgramStartedTrigger:
        return cls(ProgramId.parse(d["program"]))

    def to_avro(self) -> dict[str, Any]:
        return {"program": program_to_avro(self.program)}

    @classmethod
    def from_avro(cls, rec: dict[str, Any]) -> ProgramStartedTrigger:
        return cls(program_from_avro(rec["program"]))

    def describe(self) -> str:
        return f"{self.program.id} started"

    def validate(self, field: str) -> None:
        _validate_program(self.program, field)

    event_keys = ProgramStatusTrigger.event_keys
    tenants = ProgramStatusTrigger.tenants
    watched_program = ProgramStatusTrigger.watched_program

    def record(self, lp: LeafProgress, reached: Reached) -> bool:
        event = reached.event
        if not (isinstance(event, ProgramStatusEvent) and event.status == STARTED_STATUS):
            return False
        lp.fired = True
        return True

    def progress_json(self, lp: LeafProgress, last_job_at: int | None) -> dict[str, Any]:
        return {
            "type": "programStarted",
            "program": self.program.id,
            "fired": lp.fired,
            "text": self.progress_text(lp),
        }

    def progress_text(self, lp: LeafProgress) -> str:
        return f"{self.program.id} starting a run: {'seen' if lp.fired else 'not seen yet'}"
