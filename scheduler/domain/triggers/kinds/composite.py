"""AND / OR: the tree's inner node."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler.domain.basics import (
    InvalidSchedule,
)
from scheduler.domain.triggers.kinds.trigger import (
    Trigger,
    trigger_from_avro,
    trigger_from_json,
    trigger_to_avro,
)


@dataclass(frozen=True, slots=True)
class CompositeTrigger(Trigger):
    """AND: every child must have fired since the last job; OR: any child."""

    op: str  # "AND" | "OR"
    triggers: tuple[Trigger, ...]

    tags = ("and", "or")
    avro_name = "scheduler.CompositeTrigger"

    def to_json(self) -> dict[str, Any]:
        return {"type": self.op.lower(), "triggers": [c.to_json() for c in self.triggers]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CompositeTrigger:
        return cls(d["type"].upper(), tuple(trigger_from_json(c) for c in d["triggers"]))

    def to_avro(self) -> dict[str, Any]:
        return {"op": self.op, "triggers": [trigger_to_avro(c) for c in self.triggers]}

    @classmethod
    def from_avro(cls, rec: dict[str, Any]) -> CompositeTrigger:
        return cls(rec["op"], tuple(trigger_from_avro(c) for c in rec["triggers"]))

    def describe(self) -> str:
        return "(" + f" {self.op} ".join(c.describe() for c in self.triggers) + ")"

    def validate(self, field: str) -> None:
        if self.op not in ("AND", "OR"):
            raise InvalidSchedule(f"{field}.op", "must be AND or OR")
        if not self.triggers:
            raise InvalidSchedule(f"{field}.triggers", "a composite trigger needs at least one trigger")
        for i, child in enumerate(self.triggers):
            child.validate(f"{field}.triggers.{i}")
