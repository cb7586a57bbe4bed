"""The commands a worker vouches for (scheduler/worker/vouched.py): what the command path takes instead of
decoding must be what it would have decoded, for every shape an HTTP write makes."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.domain.commands import validate_command
from scheduler.domain.model import Action, PauseRequest, ScheduleCommand, ScheduleKey
from scheduler.http.api import ScheduleIn
from scheduler.wire.codec import command_schedule_bytes, decode_command_with_schedule, encode_command
from scheduler.worker import vouched as vouched_module
from scheduler.worker.vouched import Vouched

pytestmark = pytest.mark.unit

T0 = 1_795_306_941_000
PROGRAM = "acme/etl/spark/daily"

#: HTTP bodies of every trigger kind and every option a schedule has
BODIES: list[dict[str, Any]] = [
    {"trigger": {"type": "cron", "expression": "0 5 * * * *"}, "topic": "out"},
    {"trigger": {"type": "cron", "expression": "*/5 * * * *", "timezone": "Europe/Paris"}, "topic": "out",
     "data": {"ü": "✓" * 70, "k": ""}, "enabled": True, "catchUp": "EACH", "catchUpWindowMs": 600_000},
    {"trigger": {"type": "frequency", "timeUnit": "MILLISECONDS", "time": 250, "start": T0}, "topic": "out"},
    {"trigger": {"type": "once", "at": T0 + 60_000}, "topic": "out", "maxFires": 1},
    {"trigger": {"type": "partition", "dataset": "acme.sales", "minPartitions": 2}, "program": PROGRAM,
     "topic": "launches"},
    {"trigger": {"type": "dataSize", "dataset": "acme.sales", "minBytes": 1024}, "program": PROGRAM,
     "topic": "launches"},
    {"trigger": {"type": "and", "triggers": [
        {"type": "cron", "expression": "0 0 * * *"},
        {"type": "or", "triggers": [{"type": "partition", "dataset": "acme.a"}, {"type": "dataSize", "dataset": "acme.b",
                                                                             "minBytes": 5}]}]},
     "program": PROGRAM, "topic": "launches", "description": "nested", "labels": {"team": "data"}},
    {"trigger": {"type": "programStatus", "program": "acme/etl/spark/upstream", "on": ["SUCCEEDED"]},
     "program": PROGRAM, "topic": "launches", "constraints": [
         {"type": "concurrency", "maxRuns": 2, "group": "g", "slots": 1},
         {"type": "delay", "delayMs": 1_000},
         {"type": "timeWindow", "start": "01:00", "end": "05:00", "timezone": "Europe/Paris"},
         {"type": "lastRun", "minMs": 60_000},
         {"type": "rate", "maxRuns": 3, "unit": "HOURS"}],
     "timeout": {"timeoutMs": 60_000, "action": "DISCARD"},
     "retry": {"maxAttempts": 3, "initialDelayMs": 1_000, "multiplier": 1.5, "maxDelayMs": 60_000},
     "timeLimitMs": 3_600_000, "priority": 5, "completeWithinMs": 600_000, "fireAtLeastEveryMs": 86_400_000,
     "pauseOnFailure": 3, "overlap": "SKIP"},
    {"trigger": {"type": "cron", "expression": "0 0 * * *"}, "topic": "out", "notBefore": T0,
     "notAfter": T0 + 86_400_000, "spreadMs": 60_000, "jitterMs": 1_000},
    {"trigger": {"type": "elapsed", "ms": 60_000, "dataset": "acme.sales"}, "program": PROGRAM,
     "topic": "launches"},
]  # fmt: skip


def _commands() -> list[ScheduleCommand]:
    key = ScheduleKey("acmé", "n" * 70)
    out = []
    for body in BODIES:
        item = ScheduleIn.model_validate({"tenant": key.tenant, "name": key.name, **body})
        schedule = item.to_schedule(key)
        out += [ScheduleCommand(key, Action.INSERT, schedule), ScheduleCommand(key, Action.UPDATE, schedule)]
    return out + [
        ScheduleCommand(key, Action.DELETE),
        ScheduleCommand(key, Action.ENABLE),
        ScheduleCommand(key, Action.DISABLE, pause=PauseRequest("a note", T0 + 60_000)),
        ScheduleCommand(key, Action.RUN, fire_range=(T0, T0), arguments={"date": "2026-12-06"}),
        ScheduleCommand(key, Action.BACKFILL, fire_range=(T0, T0 + 60_000)),
    ]


@pytest.mark.parametrize("cmd", _commands(), ids=lambda c: f"{c.action.value}")
def test_a_vouched_command_is_what_its_bytes_decode_to(cmd: ScheduleCommand) -> None:
    validate_command(cmd)  # (what the HTTP write checked before producing it)
    value = encode_command(cmd)
    vouched = Vouched(lambda: {3})
    vouched.vouch(3, value, cmd)
    taken = vouched.take(value)
    assert taken == decode_command_with_schedule(value)
    assert taken is not None and taken[0] == cmd
    assert taken[1] == command_schedule_bytes(cmd, value)
    assert vouched.take(value) is None  # once


def test_only_the_partitions_held_are_kept() -> None:
    held = {1}
    vouched = Vouched(lambda: held)
    cmd = _commands()[0]
    value = encode_command(cmd)
    vouched.vouch(2, value, cmd)
    assert vouched.take(value) is None and len(vouched) == 0
    held.add(2)
    vouched.vouch(2, value, cmd)
    assert len(vouched) == 1
    assert vouched.take(None) is None and vouched.take(b"other") is None
    assert vouched.take(value) is not None


def test_past_the_limit_the_oldest_are_kept_until_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vouched_module, "LIMIT", 3)
    now = [0.0]
    vouched = Vouched(lambda: {0}, monotonic=lambda: now[0])
    cmd = _commands()[0]
    values = [bytes([i]) + encode_command(cmd) for i in range(6)]
    for value in values[:5]:
        vouched.vouch(0, value, cmd)
    assert len(vouched) == 3  # the 4th and 5th were not kept: the first three are the next applied
    assert vouched.take(values[0]) is not None
    vouched.vouch(0, values[3], cmd)  # room again
    now[0] = vouched_module.STALE_S + 1  # the 2nd and 3rd were never applied here
    vouched.vouch(0, values[5], cmd)
    assert [vouched.take(v) is not None for v in values] == [False, False, True, True, False, True]
