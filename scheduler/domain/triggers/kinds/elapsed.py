"""Waiting kinds: time elapsed (after the last job, or after an event's quiet), and a polling sensor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from scheduler.domain.basics import (
    InvalidSchedule,
    ProgramId,
    dataset_tenant,
    validate_dataset,
)
from scheduler.domain.events import (
    SensorEvent,
    dataset_key,
    program_key,
    sensor_key,
)
from scheduler.domain.triggers.kinds.programs import (
    _validate_program,
)
from scheduler.domain.triggers.kinds.trigger import (
    MAX_ELAPSED_MS,
    In,
    LeafProgress,
    ProgramField,
    Reached,
    Trigger,
    _iso,
    _span,
    program_from_avro,
    program_to_avro,
)


class ElapsedTriggerIn(In):
    """ms since the last job ("at least every"), or since the last event of a dataset or program."""

    type: Literal["elapsed"]
    ms: int = Field(ge=1_000, le=MAX_ELAPSED_MS)
    dataset: str | None = None
    program: ProgramField | None = None


@dataclass(frozen=True, slots=True)
class ElapsedTrigger(Trigger):
    """`ms` has passed: since the schedule's last job ("at least every T"), or, with a dataset or a program,
    since the last event of it without another one (a quiet period: "T since the last event")."""

    ms: int
    dataset: str | None = None
    program: ProgramId | None = None

    tags = ("elapsed",)
    avro_name = "scheduler.ElapsedTrigger"
    body = ElapsedTriggerIn

    def to_json(self) -> dict[str, Any]:
        program = None if self.program is None else self.program.id
        return {"type": "elapsed", "ms": self.ms, "dataset": self.dataset, "program": program}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ElapsedTrigger:
        program = d.get("program")
        return cls(d["ms"], d.get("dataset"), None if program is None else ProgramId.parse(program))

    def to_avro(self) -> dict[str, Any]:
        program = None if self.program is None else program_to_avro(self.program)
        return {"ms": self.ms, "dataset": self.dataset, "program": program}

    @classmethod
    def from_avro(cls, rec: dict[str, Any]) -> ElapsedTrigger:
        program = None if rec["program"] is None else program_from_avro(rec["program"])
        return cls(rec["ms"], rec["dataset"], program)

    def describe(self) -> str:
        of = self.dataset or (self.program.id if self.program is not None else None)
        return f"{_span(self.ms)} since the last event of {of}" if of else f"at least every {_span(self.ms)}"

    def validate(self, field: str) -> None:
        if not 1_000 <= self.ms <= MAX_ELAPSED_MS:
            raise InvalidSchedule(f"{field}.ms", f"must be between 1000 and {MAX_ELAPSED_MS}")
        if self.dataset is not None and self.program is not None:
            raise InvalidSchedule(field, "wait after a dataset or a program, not both")
        if self.dataset is not None:
            validate_dataset(self.dataset, f"{field}.dataset")

    def event_keys(self) -> tuple[str, ...]:
        if self.dataset is not None:
            return (dataset_key(self.dataset),)
        if self.program is not None:
            return (program_key(self.program),)
        return ()

    def tenants(self) -> set[str]:
        if self.dataset is not None:
            return {dataset_tenant(self.dataset)}
        return set() if self.program is None else {self.program.namespace}

    def due(self, lp: LeafProgress | None, since_job: int) -> int | None:
        """When it comes due: `ms` after the last job (or activation), or after its last event."""
        if self.dataset is None and self.program is None:
            return since_job + self.ms
        return None if lp is None or lp.since is None else lp.since + self.ms

    def record(self, lp: LeafProgress, reached: Reached) -> bool:
        if reached.event is not None:
            lp.since, lp.fired = reached.now, False
            return False
        # Only the due instant armed last counts: an event since then moved it.
        counted = reached.due is not None and reached.due == self.due(lp, reached.since_job)
        lp.fired = lp.fired or counted
        return counted

    def progress_json(self, lp: LeafProgress, last_job_at: int | None) -> dict[str, Any]:
        return {
            "type": "elapsed",
            "ms": self.ms,
            "fired": lp.fired,
            "since": lp.since,
            "lastJobAt": last_job_at,
            "text": self.progress_text(lp),
        }

    def progress_text(self, lp: LeafProgress) -> str:
        if lp.fired:
            return f"{_span(self.ms)} elapsed: yes"
        if lp.since is not None:
            return f"{_span(self.ms)} of quiet after the last event at {_iso(lp.since)}: not yet"
        return f"{self.describe()}: not yet"


class SensorTriggerIn(In):
    """Each time the polling sensor (a program of kind sensor, evaluated by the workers) says so."""

    type: Literal["sensor"]
    sensor: ProgramField


@dataclass(frozen=True, slots=True)
class SensorTrigger(Trigger):
    """Each time the sensor `sensor` says so: a program of kind `sensor`, a check of the user's that the
    worker owning it runs every interval with the cursor it returned last (worker/sensors.py)."""

    sensor: ProgramId

    tags = ("sensor",)
    avro_name = "scheduler.SensorTrigger"
    body = SensorTriggerIn

    def to_json(self) -> dict[str, Any]:
        return {"type": "sensor", "sensor": self.sensor.id}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SensorTrigger:
        return cls(ProgramId.parse(d["sensor"]))

    def to_avro(self) -> dict[str, Any]:
        return {"sensor": program_to_avro(self.sensor)}

    @classmethod
    def from_avro(cls, rec: dict[str, Any]) -> SensorTrigger:
        return cls(program_from_avro(rec["sensor"]))

    def describe(self) -> str:
        return f"when sensor {self.sensor.id} says so"

    def validate(self, field: str) -> None:
        _validate_program(self.sensor, f"{field}.sensor")

    def event_keys(self) -> tuple[str, ...]:
        return (sensor_key(self.sensor),)

    def tenants(self) -> set[str]:
        return {self.sensor.namespace}

    def record(self, lp: LeafProgress, reached: Reached) -> bool:
        if not (isinstance(reached.event, SensorEvent) and reached.event.sensor == self.sensor):
            return False
        lp.fired = True
        return True

    def progress_text(self, lp: LeafProgress) -> str:
        return f"sensor {self.sensor.id} said so: {'yes' if lp.fired else 'not yet'}"
