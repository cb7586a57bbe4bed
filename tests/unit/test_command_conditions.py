"""A command's conditions: how they travel in record headers (wire.command_headers) and when they refuse it
(domain.commands.check_conditions)."""

from __future__ import annotations

import pytest

from scheduler.domain.commands import CommandRejected, check_conditions
from scheduler.domain.model import FrequencyTrigger, Schedule, ScheduleKey, ScheduleState, TimeUnit
from scheduler.wire.codec import DecodeError
from scheduler.wire.command_headers import (
    DEADLINE_HEADER,
    IF_VERSION_HEADER,
    command_conditions,
    command_headers,
    condition_headers,
)

pytestmark = pytest.mark.unit

T0 = 1_704_067_200_000


def state(version: int) -> ScheduleState:
    schedule = Schedule(ScheduleKey("acme", "nightly"), FrequencyTrigger(TimeUnit.MINUTES, 5), "reports", {})
    return ScheduleState(schedule, T0, T0, T0, version)


# --- headers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("deadline_ms", "if_version"), [(T0, 7), (T0, None), (None, 7), (None, None), (0, 0)]
)
def test_conditions_round_trip_through_headers(deadline_ms: int | None, if_version: int | None) -> None:
    headers = command_headers(deadline_ms=deadline_ms, if_version=if_version)
    assert all(isinstance(n, str) and isinstance(v, bytes) for n, v in headers)
    assert command_conditions(headers) == (deadline_ms, if_version)
    assert command_conditions(dict(headers)) == (deadline_ms, if_version)


def test_no_condition_headers_give_none() -> None:
    assert command_headers() == []
    assert command_conditions(None) == (None, None)
    assert command_conditions([]) == (None, None)
    assert command_conditions({}) == (None, None)
    assert command_conditions([("traceparent", b"00-abc")]) == (None, None)


@pytest.mark.parametrize("header", [DEADLINE_HEADER, IF_VERSION_HEADER])
@pytest.mark.parametrize("value", [b"soon", b"", b"1.5", b"\xff\xfe"])
def test_a_non_integer_condition_is_a_decode_error_naming_its_header(header: str, value: bytes) -> None:
    with pytest.raises(DecodeError, match=header):
        command_conditions([(header, value)])
    with pytest.raises(DecodeError, match=header):
        command_conditions({header: value})


def test_the_first_of_repeated_condition_headers_wins() -> None:
    headers = [
        (DEADLINE_HEADER, b"100"),
        (IF_VERSION_HEADER, b"3"),
        (DEADLINE_HEADER, b"200"),
        (IF_VERSION_HEADER, b"4"),
    ]
    assert command_conditions(headers) == (100, 3)


def test_condition_headers_keeps_only_the_conditions() -> None:
    headers = [
        ("traceparent", b"00-abc"),
        (DEADLINE_HEADER, b"100"),
        ("content-type", b"avro"),
        (IF_VERSION_HEADER, b"3"),
    ]
    assert condition_headers(headers) == [(DEADLINE_HEADER, b"100"), (IF_VERSION_HEADER, b"3")]
    assert condition_headers(dict(headers)) == [(DEADLINE_HEADER, b"100"), (IF_VERSION_HEADER, b"3")]
    assert condition_headers(None) == []


# --- check_conditions ---------------------------------------------------------------------------


@pytest.mark.parametrize("produced_at", [T0 - 1, T0])
def test_a_command_produced_by_its_deadline_passes(produced_at: int) -> None:
    check_conditions(state(1), produced_at=produced_at, deadline_ms=T0, if_version=None)


def test_a_command_produced_after_its_deadline_is_rejected() -> None:
    with pytest.raises(CommandRejected, match="after its deadline"):
        check_conditions(state(1), produced_at=T0 + 1, deadline_ms=T0, if_version=None)


def test_if_match_passes_at_the_version_it_was_meant_for() -> None:
    check_conditions(state(3), produced_at=T0, deadline_ms=None, if_version=3)


@pytest.mark.parametrize("current", [state(4), None], ids=["other version", "no schedule"])
def test_if_match_is_rejected_at_another_version_or_without_a_schedule(current: ScheduleState | None) -> None:
    with pytest.raises(CommandRejected, match="meant for version 3"):
        check_conditions(current, produced_at=T0, deadline_ms=None, if_version=3)


@pytest.mark.parametrize("current", [state(4), None])
def test_no_conditions_never_reject(current: ScheduleState | None) -> None:
    check_conditions(current, produced_at=T0 + 10**9, deadline_ms=None, if_version=None)
    check_conditions(current, produced_at=None, deadline_ms=T0, if_version=None)
