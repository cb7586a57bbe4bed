"""Trigger kinds: one class per kind, registered once.

A kind owns everything about itself: its record (a frozen dataclass), its validation, its HTTP body model
and JSON form, its Avro mapping, the event keys it listens to, the tenants it touches, how an event or a
due instant advances its progress, when it is satisfied, and its description in words (the one the CLI,
the admin page and `jobs why` show). Nothing else in the package names a kind, but for the elapsed kind's
timers (the punctuator arms them) and the time kinds' evaluators.

The kinds live by family — `timed` (cron, frequency, once), `data` (partitions, data size), `programs`
(another program's status, runs, runs started), `elapsed` (elapsed, sensor), `composite` (AND/OR) — on the
common ground of `trigger` (the interface, the registry, progress records, dispatch). A new kind is a class
in its family's module (it registers itself by subclassing `Trigger`; this package imports every module, in
the order the registry lists the kinds), its record in `avro/` and its name in the trigger unions of
`avro/Schedule.avsc` and `avro/CompositeTrigger.avsc` (appended: a union branch is stored by its index).
"""

# ruff: noqa: I001  (the import order is the registry's: the kinds register as their module is imported)
from __future__ import annotations

from scheduler.domain.basics import TimeUnit
from scheduler.domain.triggers.kinds.trigger import (
    AVRO_KINDS,
    LONG_MAX,
    MAX_AMOUNT,
    MAX_CRON_LEN,
    MAX_ELAPSED_MS,
    MAX_FREQUENCY_TIME,
    MAX_RUNS,
    MAX_TIMEZONE_LEN,
    TRIGGER_KINDS,
    Event,
    In,
    LeafProgress,
    ProgramField,
    Reached,
    Trigger,
    program_from_avro,
    program_to_avro,
    trigger_from_avro,
    trigger_from_json,
    trigger_to_avro,
)
from scheduler.domain.triggers.kinds.timed import (
    CronTrigger,
    CronTriggerIn,
    FrequencyTrigger,
    FrequencyTriggerIn,
    OnceTrigger,
    OnceTriggerIn,
)
from scheduler.domain.triggers.kinds.data import (
    DataSizeTrigger,
    DataSizeTriggerIn,
    PartitionTrigger,
    PartitionTriggerIn,
)
from scheduler.domain.triggers.kinds.programs import (
    STARTED_STATUS,
    ProgramRunsTrigger,
    ProgramRunsTriggerIn,
    ProgramStartedTrigger,
    ProgramStartedTriggerIn,
    ProgramStatusTrigger,
    ProgramStatusTriggerIn,
)
from scheduler.domain.triggers.kinds.elapsed import (
    ElapsedTrigger,
    ElapsedTriggerIn,
    SensorTrigger,
    SensorTriggerIn,
)
from scheduler.domain.triggers.kinds.composite import (
    CompositeTrigger,
)

__all__ = [
    "AVRO_KINDS",
    "CompositeTrigger",
    "CronTrigger",
    "CronTriggerIn",
    "DataSizeTrigger",
    "DataSizeTriggerIn",
    "ElapsedTrigger",
    "ElapsedTriggerIn",
    "Event",
    "FrequencyTrigger",
    "FrequencyTriggerIn",
    "In",
    "LONG_MAX",
    "LeafProgress",
    "MAX_AMOUNT",
    "MAX_CRON_LEN",
    "MAX_ELAPSED_MS",
    "MAX_FREQUENCY_TIME",
    "MAX_RUNS",
    "MAX_TIMEZONE_LEN",
    "OnceTrigger",
    "OnceTriggerIn",
    "PartitionTrigger",
    "PartitionTriggerIn",
    "ProgramField",
    "ProgramRunsTrigger",
    "ProgramRunsTriggerIn",
    "ProgramStartedTrigger",
    "ProgramStartedTriggerIn",
    "ProgramStatusTrigger",
    "ProgramStatusTriggerIn",
    "Reached",
    "STARTED_STATUS",
    "SensorTrigger",
    "SensorTriggerIn",
    "TRIGGER_KINDS",
    "TimeUnit",
    "Trigger",
    "program_from_avro",
    "program_to_avro",
    "trigger_from_avro",
    "trigger_from_json",
    "trigger_to_avro",
]
