"""Fires a command makes owed (or unsure) at an instant sent ahead, or being sent (worker/owed.py): which."""

from __future__ import annotations

import dataclasses

import pytest

from scheduler.domain.model import FrequencyTrigger, TimeUnit
from scheduler.worker.owed import Before, Due, fired_before, owed_dues
from tests.unit.test_punctuator import T0, S, state

pytestmark = pytest.mark.unit

MS = TimeUnit.MILLISECONDS


def owed(*args: object, **kwargs: object) -> list[Due]:
    """The owed dues only (what owed_dues says is unsure: the tests below that name it)."""
    return owed_dues(*args, **kwargs)[0]  # type: ignore[arg-type]


def test_a_new_schedule_owes_the_instant_sent_ahead_and_nothing_after_the_watermark():
    new = state("n")  # every 10 s from T0
    assert owed({S: T0}, new, None, T0 - 30, 50) == [(S, "0", T0)]
    assert owed({S: T0 - 1}, new, None, T0 - 30, 50) == []  # (not sent yet: armed as usual)
    assert owed({}, new, None, T0 - 30, 50) == []


def test_every_instant_up_to_the_watermark_is_owed_when_several_fall_in_it():
    fast = state("f", FrequencyTrigger(MS, 20, T0 - 200))
    assert owed({MS: T0}, fast, None, T0 - 45, 50) == [
        (MS, "0", T0 - 40),
        (MS, "0", T0 - 20),
        (MS, "0", T0),
    ]


def test_a_watermark_further_ahead_than_sending_ahead_owes_nothing():
    """The wall clock stepped back: the dues it passed are skipped, as without sending ahead."""
    assert owed({S: T0}, state("n"), None, T0 - 3_600_000, 50) == []


def test_what_the_previous_version_came_due_at_is_not_owed_again():
    old = state("a")
    moved = state("a", FrequencyTrigger(S, 10, T0 + 5_000))
    assert fired_before(old, "0", T0)
    assert owed({S: T0}, dataclasses.replace(old, version=old.version + 1), old, T0 - 30, 50) == []
    assert owed({S: T0}, old, moved, T0 - 30, 50) == [(S, "0", T0)]  # (moved did not come due at T0)
    assert owed({S: T0}, old, state("a", enabled=False), T0 - 30, 50) == [(S, "0", T0)]
    assert owed({S: T0}, state("a", enabled=False), None, T0 - 30, 50) == []


def test_a_schedule_active_only_after_the_instant_owes_nothing():
    late = state("l", active_since=T0 + 1)
    assert owed({S: T0}, late, None, T0 - 30, 50) == []


def test_while_an_instant_is_being_sent_what_the_previous_version_came_due_at_is_unsure():
    """Its staged fire may not be emitted yet: unsure (owed if it is dropped), not owed, not forgotten."""
    old = state("a")
    new = dataclasses.replace(old, version=old.version + 1)
    assert owed_dues({S: T0}, new, old, T0 - 30, 50, {S: T0}) == ([], [(S, "0", T0)])
    assert owed_dues({S: T0}, new, old, T0 - 30, 50, {S: T0 - 10_000}) == ([], [])  # (another instant's)
    assert owed_dues({S: T0}, new, None, T0 - 30, 50, {S: T0}) == ([(S, "0", T0)], [])


def test_what_was_owed_or_unsure_stays_so_while_the_schedule_still_comes_due_there():
    """An earlier command's version owed its fire (or was unsure of it): that version's fire there was not
    sent, whatever it came due at, so a later version owes it the same way."""
    old = state("a")
    new = dataclasses.replace(old, version=old.version + 1)
    one = [(S, "0", T0)]
    was_owed = Before([(old, d) for d in one], None, None)
    was_unsure = Before(None, [(old, d, None) for d in one], None)
    assert owed_dues({S: T0}, new, old, T0 - 30, 50, None, was_owed) == (one, [])
    assert owed_dues({S: T0}, new, old, T0 - 30, 50, None, was_unsure) == ([], one)
    moved = state("a", FrequencyTrigger(S, 10, T0 + 5_000))
    assert owed_dues({S: T0}, moved, old, T0 - 30, 50, None, was_owed) == ([], [])  # (not due there now)
