"""light-scheduler's TaskDefinition, the wire format this product reads and writes beside its own: a
definition as a command (the light topic's records and `POST /schedulers`), and a schedule as a definition
(`GET /schedulers`)."""

from __future__ import annotations

from typing import Any

from scheduler.domain.model import (
    Action,
    FrequencyTrigger,
    InvalidSchedule,
    OutputFormat,
    Schedule,
    ScheduleCommand,
    ScheduleKey,
    TimeUnit,
)
from scheduler.wire.codec import MAX_MESSAGE_BYTES, decode


def command_from_task_definition(data: bytes | None) -> ScheduleCommand:
    """light-scheduler's TaskDefinition as a command: INSERT and UPDATE schedule it, enabled, its fires
    TaskDefinitions as light-scheduler sends them."""
    rec = decode("TaskDefinition", data, MAX_MESSAGE_BYTES)
    return command_from_task_definition_record(rec)


def command_from_task_definition_record(rec: dict[str, Any]) -> ScheduleCommand:
    key = ScheduleKey(rec["host"], rec["name"])
    action = Action(rec["action"])
    if action is Action.DELETE:
        return ScheduleCommand(key, action)
    freq = rec.get("frequency")
    if freq is None:
        raise InvalidSchedule("frequency", f"{action.value} needs a frequency")
    schedule = Schedule(
        key=key,
        trigger=FrequencyTrigger(TimeUnit(freq["timeUnit"]), freq["time"], rec.get("start")),
        topic=rec["topic"],
        data=dict(rec.get("data") or {}),
        enabled=True,
        output=OutputFormat.TASK_DEFINITION,
    )
    return ScheduleCommand(key, action, schedule)


def task_definition_from_schedule(s: Schedule) -> dict[str, Any] | None:
    """The light-scheduler view of a schedule; None for triggers it cannot express (cron)."""
    if not isinstance(s.trigger, FrequencyTrigger):
        return None
    return {
        "host": s.key.tenant,
        "name": s.key.name,
        "action": "INSERT",
        "frequency": {"timeUnit": s.trigger.unit.value, "time": s.trigger.time},
        "topic": s.topic,
        "start": s.trigger.start_ms,
        "data": dict(s.data) or None,
    }
