"""Local journal of accepted schedule commands, so schedules survive a restart of the embedded broker.

The embedded broker keeps its topics in memory. With SCHEDULER_JOURNAL set, the worker appends every
command it accepted; `scheduler run` folds the journal into one INSERT per live schedule and produces
those into the fresh broker before the worker starts. Only for the embedded single-worker runner: a
real Kafka cluster keeps the commands and changelogs itself.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from scheduler.domain.commands import CommandRejected, apply_command
from scheduler.domain.model import Action, InvalidSchedule, ScheduleCommand, ScheduleState
from scheduler.wire.codec import DecodeError, decode_command, encode_command, key_bytes

_LEN = struct.Struct(">I")


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: BinaryIO = open(path, "ab")  # noqa: SIM115

    def append(self, key: bytes, value: bytes) -> None:
        self._file.write(_LEN.pack(len(key)) + key + _LEN.pack(len(value)) + value)
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_journal(path: Path) -> Iterator[tuple[bytes, bytes]]:
    """Every complete (key, value) record; a torn last record (crash mid-write) is ignored."""
    if not path.exists():
        return
    data = path.read_bytes()
    pos = 0
    while pos + 4 <= len(data):
        (klen,) = _LEN.unpack_from(data, pos)
        if pos + 4 + klen + 4 > len(data):
            return
        key = data[pos + 4 : pos + 4 + klen]
        pos += 4 + klen
        (vlen,) = _LEN.unpack_from(data, pos)
        if pos + 4 + vlen > len(data):
            return
        yield key, data[pos + 4 : pos + 4 + vlen]
        pos += 4 + vlen


def fold(records: Iterator[tuple[bytes, bytes]]) -> dict[bytes, ScheduleState]:
    states: dict[bytes, ScheduleState] = {}
    for _key, value in records:
        try:
            cmd = decode_command(value)
            kb = key_bytes(cmd.key)
            new = apply_command(states.get(kb), cmd, 0)
        except (DecodeError, CommandRejected, InvalidSchedule):
            continue
        if new is None:
            states.pop(kb, None)
        else:
            states[kb] = new
    return states


def compact_journal(path: Path) -> list[tuple[bytes, bytes]]:
    """Rewrite the journal as one INSERT per live schedule; return those (key, value) commands."""
    commands = [
        (kb, encode_command(ScheduleCommand(st.schedule.key, Action.INSERT, st.schedule)))
        for kb, st in fold(read_journal(path)).items()
    ]
    tmp = path.with_suffix(".tmp")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "wb") as f:
        for key, value in commands:
            f.write(_LEN.pack(len(key)) + key + _LEN.pack(len(value)) + value)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return commands
