"""What each schedule command does to the schedules table. Pure: (state, command, now) -> new state.

- INSERT creates the schedule (disabled unless `enabled` is true). INSERT of an existing key with the
  same definition (whatever its `enabled` flag) is a no-op, so a replayed INSERT is harmless and does not
  undo a later DISABLE; with another definition it is refused.
- UPDATE replaces the definition of an existing schedule; it keeps the schedule enabled or disabled as it
  was (ENABLE/DISABLE change that) and restarts its timing from now: no catch-up for the old definition.
- DELETE removes the schedule; no fire is due after it is applied.
- ENABLE resumes a disabled schedule from now: fires missed while it was disabled are not caught up.
- DISABLE pauses it. ENABLE of an enabled and DISABLE of a disabled schedule are no-ops.
- UPDATE, DELETE, ENABLE and DISABLE of a schedule that does not exist are refused.
A refused command raises CommandRejected and changes nothing; the worker dead-letters it.
"""

from __future__ import annotations

import dataclasses

from scheduler.model import Action, InvalidSchedule, ScheduleCommand, ScheduleState


class CommandRejected(ValueError):
    pass


def validate_command(cmd: ScheduleCommand) -> None:
    """Raise InvalidSchedule / CommandRejected for a command that is wrong whatever the table holds."""
    cmd.key.validate()
    if cmd.action in (Action.INSERT, Action.UPDATE):
        if cmd.schedule is None:
            raise InvalidSchedule("schedule", f"{cmd.action.value} needs a schedule")
        if cmd.schedule.key != cmd.key:
            raise InvalidSchedule(
                "schedule", f"schedule {cmd.schedule.key.id!r} does not match command key {cmd.key.id!r}"
            )
        cmd.schedule.validate()


def apply_command(current: ScheduleState | None, cmd: ScheduleCommand, now_ms: int) -> ScheduleState | None:
    """The table's new value for the command's key (None: deleted)."""
    validate_command(cmd)
    action = cmd.action
    if action is Action.INSERT:
        assert cmd.schedule is not None
        if current is not None:
            if dataclasses.replace(cmd.schedule, enabled=current.schedule.enabled) == current.schedule:
                return current  # a replay, or a re-INSERT that must not undo a later DISABLE/ENABLE
            raise CommandRejected(f"schedule {cmd.key.id!r} already exists (use UPDATE)")
        return ScheduleState(cmd.schedule, created_at=now_ms, updated_at=now_ms, active_since=now_ms)
    if current is None:
        raise CommandRejected(f"{action.value} of schedule {cmd.key.id!r}, which does not exist")
    if action is Action.UPDATE:
        assert cmd.schedule is not None
        schedule = dataclasses.replace(cmd.schedule, enabled=current.schedule.enabled)
        return dataclasses.replace(
            current, schedule=schedule, updated_at=now_ms, active_since=now_ms, version=current.version + 1
        )
    if action is Action.DELETE:
        return None
    enable = action is Action.ENABLE
    if current.schedule.enabled == enable:
        return current
    return dataclasses.replace(
        current,
        schedule=dataclasses.replace(current.schedule, enabled=enable),
        updated_at=now_ms,
        active_since=now_ms if enable else current.active_since,
        version=current.version + 1,
    )
