"""The data kinds: partitions of a dataset, and its size."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from scheduler.domain.basics import (
    InvalidSchedule,
    dataset_tenant,
    validate_dataset,
)
from scheduler.domain.events import (
    DataEvent,
    dataset_key,
)
from scheduler.domain.triggers.kinds.trigger import (
    MAX_AMOUNT,
    In,
    LeafProgress,
    Reached,
    Trigger,
    _plural,
)


class PartitionTriggerIn(In):
    type: Literal["partition"]
    dataset: str
    minPartitions: int = Field(1, ge=1, le=MAX_AMOUNT)


def _validate_amount(amount: int, field: str) -> None:
    if not 1 <= amount < MAX_AMOUNT:
        raise InvalidSchedule(field, "must be at least 1")


@dataclass(frozen=True, slots=True)
class PartitionTrigger(Trigger):
    """At least `min_partitions` new partitions of `dataset` ('<namespace>.<dataset>')."""

    dataset: str
    min_partitions: int = 1

    tags = ("partition",)
    avro_name = "scheduler.PartitionTrigger"
    body = PartitionTriggerIn

    def to_json(self) -> dict[str, Any]:
        return {"type": "partition", "dataset": self.dataset, "minPartitions": self.min_partitions}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PartitionTrigger:
        return cls(d["dataset"], d.get("minPartitions", 1))

    def to_avro(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "minPartitions": self.min_partitions}

    @classmethod
    def from_avro(cls, rec: dict[str, Any]) -> PartitionTrigger:
        return cls(rec["dataset"], rec["minPartitions"])

    def describe(self) -> str:
        return f"{_plural(self.min_partitions, 'new partition')} of {self.dataset}"

    def validate(self, field: str) -> None:
        validate_dataset(self.dataset, f"{field}.dataset")
        _validate_amount(self.min_partitions, f"{field}.minPartitions")

    def event_keys(self) -> tuple[str, ...]:
        return (dataset_key(self.dataset),)

    def tenants(self) -> set[str]:
        return {dataset_tenant(self.dataset)}

    def record(self, lp: LeafProgress, reached: Reached) -> bool:
        if not (isinstance(reached.event, DataEvent) and reached.event.partitions):
            return False
        lp.partitions += reached.event.partitions
        return True

    def satisfied(self, lp: LeafProgress) -> bool:
        return lp.partitions >= self.min_partitions

    def progress_json(self, lp: LeafProgress, last_job_at: int | None) -> dict[str, Any]:
        return {
            "type": "partition",
            "dataset": self.dataset,
            "partitions": lp.partitions,
            "needs": self.min_partitions,
            "text": self.progress_text(lp),
        }

    def progress_text(self, lp: LeafProgress) -> str:
        return f"{lp.partitions} of {self.min_partitions} new partitions of {self.dataset}"


class DataSizeTriggerIn(In):
    type: Literal["dataSize"]
    dataset: str
    minBytes: int = Field(ge=1, le=MAX_AMOUNT)


@dataclass(frozen=True, slots=True)
class DataSizeTrigger(Trigger):
    """At least `min_bytes` of new data in `dataset` (partition and data events both count)."""

    dataset: str
    min_bytes: int

    tags = ("dataSize",)
    avro_name = "scheduler.DataSizeTrigger"
    body = DataSizeTriggerIn

    def to_json(self) -> dict[str, Any]:
        return {"type": "dataSize", "dataset": self.dataset, "minBytes": self.min_bytes}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> DataSizeTrigger:
        return cls(d["dataset"], d["minBytes"])

    def to_avro(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "minBytes": self.min_bytes}

    @classmethod
    def from_avro(cls, rec: dict[str, Any]) -> DataSizeTrigger:
        return cls(rec["dataset"], rec["minBytes"])

    def describe(self) -> str:
        return f"{self.min_bytes} new bytes of {self.dataset}"

    def validate(self, field: str) -> None:
        validate_dataset(self.dataset, f"{field}.dataset")
        _validate_amount(self.min_bytes, f"{field}.minBytes")

    event_keys = PartitionTrigger.event_keys
    tenants = PartitionTrigger.tenants

    def record(self, lp: LeafProgress, reached: Reached) -> bool:
        if not (isinstance(reached.event, DataEvent) and reached.event.bytes):
            return False
        lp.bytes += reached.event.bytes
        return True

    def satisfied(self, lp: LeafProgress) -> bool:
        return lp.bytes >= self.min_bytes

    def progress_json(self, lp: LeafProgress, last_job_at: int | None) -> dict[str, Any]:
        return {
            "type": "dataSize",
            "dataset": self.dataset,
            "bytes": lp.bytes,
            "needs": self.min_bytes,
            "text": self.progress_text(lp),
        }

    def progress_text(self, lp: LeafProgress) -> str:
        return f"{lp.bytes} of {self.min_bytes} new bytes of {self.dataset}"
