"""What each schedule command does to the schedules table. Pure: (state, command, now) -> new state.

- INSERT creates the schedule (disabled unless `enabled` is true). INSERT of an existing key with the
  same definition (whatever its `enabled` flag) is a no-op, so a replayed INSERT is harmless and does not
  undo a later DISABLE; with another definition it is refused.
- UPDATE replaces the definition of an existing schedule; it keeps the schedule enabled or disabled as it
  was (ENABLE/DISABLE change that) and restarts its timing from now: no catch-up for the old definition.
- DELETE removes the schedule; no fire is due after it is applied.
- ENABLE resumes a disabled schedule from now: fires missed while it was disabled are not caught up.
- DISABLE pauses it, keeping since when and who sent it, and what its `pause` says: a note, and an instant
  it resumes by itself at (the worker holds an ENABLE carrying that pause as a delayed message; that
  resume enables the schedule only if it is still in that very pause, else it is a no-op). ENABLE of an
  enabled schedule is a no-op; so is DISABLE of a disabled one, unless it brings another note or instant.
- UPDATE, DELETE, ENABLE and DISABLE of a schedule that does not exist are refused.
- RUN fires the schedule once at its instant (a job for a program schedule, a FiredTask otherwise), even
  when it is disabled, with its runtime arguments over the schedule's data; BACKFILL fires every instant
  its time triggers fire it at in the range (at most MAX_BACKFILL_FIRES). Neither changes the schedule; of a schedule that does not exist they are refused.
A refused command raises CommandRejected and changes nothing; the worker dead-letters it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator

from scheduler.domain.basics import MAX_INSTANT_MS
from scheduler.domain.model import (
    MAX_PAUSE_NOTE,
    Action,
    InvalidSchedule,
    Paused,
    PauseRequest,
    ScheduleCommand,
    ScheduleKey,
    ScheduleState,
    validate_string_map,
)
from scheduler.domain.triggers.instants import fire_instants

MAX_BACKFILL_FIRES = 10_000
#: RUN / BACKFILL instants: from 2000-01-01 to 2200-01-01 (epoch ms)
MIN_FIRE_MS, MAX_FIRE_MS = 946_684_800_000, 7_258_118_400_000


class CommandRejected(ValueError):
    pass


#: who a pause's resume is by, and a pause for failed jobs (the schedule's history shows them)
RESUME_BY = "pausedUntil"
PAUSE_ON_FAILURE_BY = "pauseOnFailure"


def resume_id(key: ScheduleKey) -> bytes:
    """The delayed message id of a schedule's resume (one per schedule: a new pause's replaces it)."""
    return f"scheduler.resume/{key.id}".encode()


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
        cmd.schedule.validate_definition()  # its key is the command's, validated above
    if cmd.action in (Action.RUN, Action.BACKFILL):
        if cmd.fire_range is None:
            raise InvalidSchedule("fireRange", f"{cmd.action.value} needs a fire range")
        start, end = cmd.fire_range
        for field, value in (("from", start), ("to", end)):
            if not MIN_FIRE_MS <= value <= MAX_FIRE_MS:
                raise InvalidSchedule(field, "must be epoch milliseconds between 2000 and 2200")
        if end < start:
            raise InvalidSchedule("to", "must not be before 'from'")
        validate_string_map(cmd.arguments, "arguments")
    elif cmd.fire_range is not None:
        raise InvalidSchedule("fireRange", f"{cmd.action.value} takes no fire range")
    elif cmd.arguments:
        raise InvalidSchedule("arguments", f"{cmd.action.value} takes no runtime arguments")
    if cmd.pause is not None:
        _validate_pause(cmd)


def _validate_pause(cmd: ScheduleCommand) -> None:
    pause = cmd.pause
    assert pause is not None
    if cmd.action not in (Action.DISABLE, Action.ENABLE):
        raise InvalidSchedule("pause", f"{cmd.action.value} takes no pause (DISABLE does)")
    if cmd.action is Action.ENABLE and pause.until_ms is None:
        raise InvalidSchedule("until", "the resume of a pause names the instant the pause ends")
    if pause.until_ms is not None and not 0 <= pause.until_ms <= MAX_INSTANT_MS:
        raise InvalidSchedule("until", "must be epoch milliseconds between 1970 and 2200")
    note = pause.note
    if note is not None:
        if len(note) > MAX_PAUSE_NOTE:
            raise InvalidSchedule("note", f"longer than {MAX_PAUSE_NOTE} characters")
        if any(ord(c) < 32 and c not in "\n\t" or ord(c) == 127 for c in note):
            raise InvalidSchedule("note", "has control characters (other than newline and tab)")


def manual_fires(state: ScheduleState, cmd: ScheduleCommand) -> list[int]:
    """The instants a RUN or BACKFILL command fires the schedule at (CommandRejected if too many / none)."""
    out: set[int] = set()
    for due in _manual_dues(state, cmd):
        out.add(due)
        _check_count(cmd, out)
    return sorted(out)


async def manual_fires_yielding(state: ScheduleState, cmd: ScheduleCommand, every: int = 256) -> list[int]:
    """manual_fires, letting the event loop run every `every` instants: a 10,000-fire backfill of a cron
    schedule costs a second of cron evaluation, which must not stall a worker (or its web server)."""
    out: set[int] = set()
    for n, due in enumerate(_manual_dues(state, cmd)):
        out.add(due)
        _check_count(cmd, out)
        if n % every == every - 1:
            await asyncio.sleep(0)
    return sorted(out)


def _check_count(cmd: ScheduleCommand, out: set[int]) -> None:
    if len(out) > MAX_BACKFILL_FIRES:
        raise CommandRejected(
            f"BACKFILL of {cmd.key.id!r}: more than {MAX_BACKFILL_FIRES} fires in the range"
        )


def _manual_dues(state: ScheduleState, cmd: ScheduleCommand) -> Iterator[int]:
    assert cmd.fire_range is not None
    start, end = cmd.fire_range
    if cmd.action is Action.RUN:
        yield start
        return
    if not state.time_leaves():
        raise CommandRejected(f"BACKFILL of {cmd.key.id!r}: it has no time trigger (use RUN)")
    # the instants the schedule fires at (an AND/OR as its tree decides: one instant, one job), its leaves
    # that wait for events left out (AND(a cron, new data) backfills the cron's instants)
    for due in fire_instants(state, start - 1, ignore_events=True):
        if due > end:
            return
        yield due


def check_conditions(
    current: ScheduleState | None,
    *,
    produced_at: int | None,
    deadline_ms: int | None,
    if_version: int | None,
) -> None:
    """A command's conditions (wire.command_headers): produced by its deadline, and meant for the version
    it finds. CommandRejected says which does not hold: nothing changes then."""
    if deadline_ms is not None and produced_at is not None and produced_at > deadline_ms:
        raise CommandRejected(
            f"produced at {produced_at}, {produced_at - deadline_ms} ms after its deadline {deadline_ms}: "
            "its client had given up on it"
        )
    if if_version is not None:
        found = None if current is None else current.version
        if found != if_version:
            raise CommandRejected(f"meant for version {if_version} (If-Match), the schedule is at {found}")


def apply_command(
    current: ScheduleState | None,
    cmd: ScheduleCommand,
    now_ms: int,
    by: str | None = None,
    validated: bool = False,
) -> ScheduleState | None:
    """The table's new value for the command's key (None: deleted); `by`: who sent it (a pause keeps it);
    `validated`: validate_command passed it already (the worker's own HTTP write: worker/vouched.py)."""
    if not validated:
        validate_command(cmd)
    action = cmd.action
    if action is Action.ENABLE and cmd.pause is not None:
        return _resumed(current, cmd.pause, now_ms)
    if action is Action.INSERT:
        assert cmd.schedule is not None
        if current is not None:
            if dataclasses.replace(cmd.schedule, enabled=current.schedule.enabled) == current.schedule:
                return current  # a replay, or a re-INSERT that must not undo a later DISABLE/ENABLE
            raise CommandRejected(f"schedule {cmd.key.id!r} already exists (use UPDATE)")
        return ScheduleState(cmd.schedule, created_at=now_ms, updated_at=now_ms, active_since=now_ms)
    if current is None:
        raise CommandRejected(f"{action.value} of schedule {cmd.key.id!r}, which does not exist")
    if action in (Action.RUN, Action.BACKFILL):
        if action is Action.BACKFILL and not current.time_leaves():
            raise CommandRejected(f"BACKFILL of {cmd.key.id!r}: it has no time trigger (use RUN)")
        return current  # the worker fires it (manual_fires_yielding: too many fires are refused there)
    if action is Action.UPDATE:
        assert cmd.schedule is not None
        schedule = dataclasses.replace(cmd.schedule, enabled=current.schedule.enabled)
        return dataclasses.replace(
            current, schedule=schedule, updated_at=now_ms, active_since=now_ms, version=current.version + 1
        )
    if action is Action.DELETE:
        return None
    enable = action is Action.ENABLE
    if enable:
        if current.schedule.enabled:
            return current
        paused = None
    else:
        request = cmd.pause or PauseRequest()
        was = current.paused
        if not current.schedule.enabled and (
            cmd.pause is None
            or (was is not None and (was.note, was.until_ms) == (request.note, request.until_ms))
        ):
            return current  # (a replay, or a DISABLE that says nothing new)
        paused = Paused(now_ms, request.note, by, request.until_ms)
    return dataclasses.replace(
        current,
        schedule=dataclasses.replace(current.schedule, enabled=enable),
        updated_at=now_ms,
        active_since=now_ms if enable else current.active_since,
        version=current.version + 1,
        paused=paused,
    )


def _resumed(current: ScheduleState | None, pause: PauseRequest, now_ms: int) -> ScheduleState | None:
    """The resume of the pause ending at `pause.until_ms` (delivered then): enabled, if the schedule is still
    in that pause; else nothing changes (enabled, paused again, updated to another pause, or deleted since)."""
    was = None if current is None else current.paused
    if current is None or current.schedule.enabled or was is None or was.until_ms != pause.until_ms:
        return current
    return dataclasses.replace(
        current,
        schedule=dataclasses.replace(current.schedule, enabled=True),
        updated_at=now_ms,
        active_since=now_ms,
        version=current.version + 1,
        paused=None,
    )
