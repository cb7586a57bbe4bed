"""Commands this worker validated and produced itself (its HTTP writes), kept by their bytes until it applies
them: a write whose key it owns is applied here, from the commands topic, and decoding those bytes and
validating the command again cost about a fifth of what the worker spends on a schedule created over HTTP.

The command path takes a record's command from here when its value is the very bytes this worker produced
(`take`), and decodes and validates every other record as before. The bytes are what the command decodes to
(the codec's round trip, unit-tested on every shape), and the validation was the owner's own code, a moment
before, in the same process. Only the partitions the worker holds active are kept (another worker applies
the rest), and at most LIMIT commands. When full, a new command is not kept (it is decoded as any other
when applied): the ones kept are the oldest, the next the command path reaches, so a bulk load that runs
ahead of the command path still finds most of its commands here. A command kept for STALE_S (its partition
moved, its produce failed) is forgotten to make room.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Set

from scheduler.domain.model import ScheduleCommand
from scheduler.wire.codec import command_schedule_bytes

#: the most commands kept (~1 KB each): more than the writes of 16 batches of 500 in flight at once
LIMIT = 20_000
#: a command kept this long was not applied here: it may be forgotten
STALE_S = 60.0


class Vouched:
    def __init__(
        self, active_partitions: Callable[[], Set[int]], monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._active = active_partitions
        self._monotonic = monotonic
        self._commands: dict[bytes, tuple[ScheduleCommand, bytes | None, float]] = {}

    def vouch(self, partition: int, value: bytes, cmd: ScheduleCommand) -> None:
        """`cmd`, validated, is produced as `value` to `partition` of the commands topic."""
        if partition not in self._active():
            return
        now = self._monotonic()
        if len(self._commands) >= LIMIT:
            oldest = next(iter(self._commands))
            if self._commands[oldest][2] > now - STALE_S:
                return
            del self._commands[oldest]
        self._commands[value] = (cmd, command_schedule_bytes(cmd, value), now)

    def take(self, value: bytes | None) -> tuple[ScheduleCommand, bytes | None] | None:
        """The command (and its schedule's bytes) this worker vouched for as `value`, once; None if not."""
        if not self._commands or value is None:
            return None
        found = self._commands.pop(value, None)
        return None if found is None else (found[0], found[1])

    def __len__(self) -> int:
        return len(self._commands)
