"""Kafka-native, horizontally scalable job scheduler.

Public surface: the domain records and the settings. Everything else is internal wiring.
"""

from scheduler.config import Settings
from scheduler.model import (
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
