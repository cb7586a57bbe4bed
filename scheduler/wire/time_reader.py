"""The commands' and schedule states' Avro read by hand (the counterpart of command_writer.py): a command with
no schedule, or one with a cron or frequency trigger and every other field at its default, and the state of
such a schedule — the bulk of a large tenant's commands, and what a takeover or a restore decodes once per
schedule. A reader here returns None (or raises nothing) for anything else, and codec.py's Avro reader then
decodes it or names what is wrong. Unit-tested: equal to the Avro reader's result on every command and
state the fuzz generators make (tests/unit/test_fast_encoding.py)."""

from __future__ import annotations

from typing import Any

from scheduler.domain.model import (
    Action,
    CatchUpPolicy,
    CronTrigger,
    FrequencyTrigger,
    OutputFormat,
    Schedule,
    ScheduleCommand,
    ScheduleKey,
    ScheduleState,
    TimeUnit,
)
from scheduler.wire.avro_reader import AvroReader, Defer
from scheduler.wire.avro_writer import INT_MAX, INT_MIN


class Symbols:
    """Enum symbols and union branches of the writer schemas, by index, as the command reader needs them."""

    def __init__(self, s: dict[str, Any]) -> None:
        """`s`: the writer schemas by name (codec.schemas())."""
        fields = {f["name"]: f["type"] for f in s["Schedule"]["fields"]}
        self.actions = [Action(x) for x in s["ScheduleAction"]["symbols"]]
        self.outputs = [OutputFormat(x) for x in s["OutputFormat"]["symbols"]]
        self.catch_up = [CatchUpPolicy(x) for x in s["CatchUpPolicy"]["symbols"]]
        self.units = [TimeUnit(x) for x in s["TimeUnit"]["symbols"]]
        self.cron = fields["trigger"].index("scheduler.CronTrigger")
        self.frequency = fields["trigger"].index("scheduler.FrequencyTrigger")


def read_time_command(data: bytes, sym: Symbols) -> tuple[ScheduleCommand, bytes | None] | None:
    """decode_command_with_schedule by hand for a command with no schedule, or one with a cron or frequency
    trigger and no program, constraints, timeout, retry, time limit, bounds, spread nor jitter (~3x faster
    than fastavro's reader plus building the model from its dicts). None for anything else, and for anything unusual in the bytes: the Avro reader
    then decodes it, or raises the DecodeError. Unit-tested: equal to the Avro reader's result on every
    command the fuzz generators make, valid or not."""
    r = AvroReader(data)
    try:
        key = ScheduleKey(r.string(), r.string())
        action = sym.actions[r.index(len(sym.actions))]
        schedule, start, end = None, 0, 0
        if r.index(2):
            start = r.pos
            schedule = read_time_schedule(r, sym, key)
            end = r.pos
        fire_range = (r.long(), r.long()) if r.index(2) else None
        arguments = r.string_map()
        if r.index(2):  # (bytes of a release before `pause` end before it: the Avro reader reads them)
            raise Defer  # (a pause: the Avro reader reads it)
    except (Defer, IndexError, UnicodeDecodeError):
        return None
    if r.pos != len(data):
        return None
    cmd = ScheduleCommand(key, action, schedule, fire_range, arguments)
    return cmd, data[start:end] if schedule is not None and fire_range is None and not arguments else None


def read_time_schedule(r: AvroReader, sym: Symbols, key: ScheduleKey | None = None) -> Schedule:
    """A Schedule record with a cron or frequency trigger and nothing else the commands reader defers on
    (see read_time_command); `key` is reused when the record names the same one. Raises Defer,
    IndexError or UnicodeDecodeError for anything else."""
    tenant, name = r.string(), r.string()
    branch = r.long()
    trigger: CronTrigger | FrequencyTrigger
    if branch == sym.cron:
        trigger = CronTrigger(r.string(), r.string())
    elif branch == sym.frequency:
        unit, time = sym.units[r.index(len(sym.units))], r.long()
        trigger = FrequencyTrigger(unit, time, r.long() if r.index(2) else None)
        if not INT_MIN <= time <= INT_MAX:
            raise Defer
    else:
        raise Defer
    topic, data_map = r.string(), r.string_map()
    enabled = r.data[r.pos]
    if enabled > 1:
        raise Defer
    r.pos += 1
    catch_up = sym.catch_up[r.index(len(sym.catch_up))]
    window = r.long()
    # program, constraints (an empty array), timeout, retry, timeLimitMs: 0 each (a byte; fastavro's
    # reader decides anything longer)
    pos = r.pos
    if r.data[pos : pos + 5] != _ZEROS[:5]:
        raise Defer
    r.pos = pos + 5
    output = sym.outputs[r.index(len(sym.outputs))]
    # notBefore, notAfter, spreadMs, jitterMs (null), priority (0), completeWithinMs,
    # fireAtLeastEveryMs (null), excludeCalendars (an empty array), description (null), labels (empty),
    # pauseOnFailure, maxFires, overlap (null)
    pos = r.pos
    if r.data[pos : pos + 13] != _ZEROS:
        raise Defer
    r.pos = pos + 13
    same = key is not None and tenant == key.tenant and name == key.name
    return Schedule(
        key if same and key is not None else ScheduleKey(tenant, name),
        trigger,
        topic,
        data_map,
        enabled == 1,
        catch_up,
        window,
        output=output,
    )


_ZEROS = bytes(13)


def read_time_state(data: bytes, sym: Symbols) -> ScheduleState | None:
    """decode_state by hand for the states of the schedules read_time_command reads (~4x faster: a
    takeover and a restore decode every state once). None for anything else, or anything unusual: the Avro
    reader then decodes it (or names what is wrong). Unit-tested: equal to the Avro reader's result on
    every state the fuzz generators make."""
    r = AvroReader(data)
    try:
        schedule = read_time_schedule(r, sym)
        created, updated, active, version = r.long(), r.long(), r.long(), r.long()
        if r.index(2):  # (bytes of a release before `paused` end before it: the Avro reader reads them)
            raise Defer  # (paused: the Avro reader reads it)
        fires = r.long()  # (a state of release 0.4.0 ends before it: the Avro reader reads that)
    except (Defer, IndexError, UnicodeDecodeError):
        return None
    if r.pos != len(data) or not INT_MIN <= version <= INT_MAX or fires < 0:
        return None
    return ScheduleState(schedule, created, updated, active, version, fires=fires)


def skip_long(data: bytes, pos: int) -> int:
    """Where the varint at `pos` ends."""
    while data[pos] & 0x80:
        pos += 1
    return pos + 1


def skip_string(data: bytes, pos: int) -> int:
    """Where the string (its length's varint, then its bytes) at `pos` ends."""
    end = skip_long(data, pos)
    n = 0
    for i, b in enumerate(data[pos:end]):
        n |= (b & 0x7F) << (7 * i)
    return end + ((n >> 1) ^ -(n & 1))
