"""A ScheduleCommand's Avro written by hand for what the commands' hand reader reads (time_reader.read_time_command):
no schedule, or one with a cron or frequency trigger and every field it does not write at its default, and no
pause. A command created over HTTP is encoded once to be produced: fastavro took ~21 µs (3.5 by hand) of the
worker's ~200 µs per schedule of `POST /schedules:batch`. Byte-identical to the Avro writer, unit-tested against it
(tests/unit/test_fast_encoding.py); None for anything else, which codec.encode_command leaves to fastavro."""

from __future__ import annotations

from dataclasses import MISSING, fields
from functools import cache
from operator import attrgetter
from typing import Any

from scheduler.domain.model import CronTrigger, FrequencyTrigger, Schedule, ScheduleCommand
from scheduler.wire.avro_writer import INT_MAX as _INT_MAX
from scheduler.wire.avro_writer import INT_MIN as _INT_MIN
from scheduler.wire.avro_writer import NULL as _NULL
from scheduler.wire.avro_writer import avro_map as _map
from scheduler.wire.avro_writer import avro_string as _string
from scheduler.wire.avro_writer import zigzag as _long

_SECOND = b"\x02"  # a union's second branch
#: program, constraints, timeout, retry, timeLimitMs at their defaults (null, empty, null, null, null)
_BEFORE_OUTPUT = bytes(5)
#: notBefore .. overlap at their defaults (see time_reader.read_time_schedule)
_AFTER_OUTPUT = bytes(13)
#: the fields this writer writes; every other one must be at its default (a field added later is too, so a
#: schedule that sets it goes to fastavro; its bytes at the default are the unit tests' to catch)
_WRITTEN = {"key", "trigger", "topic", "data", "enabled", "catch_up", "catch_up_window_ms", "output"}
_REST = [f for f in fields(Schedule) if f.name not in _WRITTEN]
_rest = attrgetter(*(f.name for f in _REST))
_REST_DEFAULTS = tuple(f.default_factory() if f.default is MISSING else f.default for f in _REST)  # type: ignore[misc,operator]


@cache
def _indexes(sym: Any) -> Any:
    return (
        {a: i for i, a in enumerate(sym.actions)},
        {o: i for i, o in enumerate(sym.outputs)},
        {c: i for i, c in enumerate(sym.catch_up)},
        {u: i for i, u in enumerate(sym.units)},
        _long(sym.cron),
        _long(sym.frequency),
    )


def write_time_command(cmd: ScheduleCommand, sym: Any) -> bytes | None:
    """The command as the Avro writer writes it, or None where fastavro should (see the module doc). `sym`:
    the writer schemas' enum symbols and trigger branches (codec._symbols())."""
    if cmd.pause is not None:
        return None
    actions, outputs, catch_ups, units, cron, frequency = _indexes(sym)
    try:
        out = [_string(cmd.key.tenant), _string(cmd.key.name), _long(actions[cmd.action])]
        s = cmd.schedule
        if s is None:
            out.append(_NULL)
        else:
            schedule = _schedule(s, outputs, catch_ups, units, cron, frequency)
            if schedule is None:
                return None
            out += (_SECOND, schedule)
        if cmd.fire_range is None:
            out.append(_NULL)
        else:
            out += (_SECOND, _long(cmd.fire_range[0]), _long(cmd.fire_range[1]))
        out += (_map(cmd.arguments), _NULL)  # (the arguments; pause: null)
    except (UnicodeEncodeError, KeyError, TypeError, AttributeError):  # (fastavro says what is wrong)
        return None
    return b"".join(out)


def _schedule(
    s: Schedule,
    outputs: dict[Any, int],
    catch_ups: dict[Any, int],
    units: dict[Any, int],
    cron: bytes,
    frequency: bytes,
) -> bytes | None:
    trigger = s.trigger
    if type(trigger) is CronTrigger:
        written = [cron, _string(trigger.expression), _string(trigger.timezone)]
    elif type(trigger) is FrequencyTrigger and _INT_MIN <= trigger.time <= _INT_MAX:
        written = [frequency, _long(units[trigger.unit]), _long(trigger.time)]
        written.append(_NULL if trigger.start_ms is None else _SECOND + _long(trigger.start_ms))
    else:
        return None
    if _rest(s) != _REST_DEFAULTS or type(s.enabled) is not bool:  # (see _REST)
        return None
    return b"".join(
        (
            _string(s.key.tenant),
            _string(s.key.name),
            *written,
            _string(s.topic),
            _map(s.data),
            b"\x01" if s.enabled else _NULL,
            _long(catch_ups[s.catch_up]),
            _long(s.catch_up_window_ms),
            _BEFORE_OUTPUT,
            _long(outputs[s.output]),
            _AFTER_OUTPUT,
        )
    )
