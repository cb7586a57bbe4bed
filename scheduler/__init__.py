"""Kafka-native, horizontally scalable job scheduler.

Public surface: the domain records and the settings. Everything else is internal wiring.
"""

from scheduler.domain.model import (
    Action,
    CatchUpPolicy,
    CronTrigger,
    FiredTask,
    FrequencyTrigger,
    Schedule,
    ScheduleCommand,
    ScheduleKey,
    TimeUnit,
)
from scheduler.kafka.config import Settings

__all__ = [
    "Action",
    "CatchUpPolicy",
    "CronTrigger",
    "FiredTask",
    "FrequencyTrigger",
    "Schedule",
    "ScheduleCommand",
    "ScheduleKey",
    "Settings",
    "TimeUnit",
]
