"""PreviousMembers (kafka/group.py): the member ids a data dir's processes hold in their groups, each in a
slot file its process keeps locked, so that a process started later removes only the members of processes
that are gone."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.kafka import group as group_module
from scheduler.kafka.group import MEMBERS_DIR, PreviousMembers, leave_previous_members, release_claims

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _released() -> Iterator[None]:
    release_claims()
    yield
    release_claims()


def _another_process(monkeypatch: pytest.MonkeyPatch) -> dict[object, int]:
    """What this process holds stays locked, but it forgets it: the next claim is as another process's.
    The slots it held (os.close each one's descriptor: the process is gone)."""
    held = group_module._held
    monkeypatch.setattr(group_module, "_held", {})
    return held


def _gone(held: dict[object, int]) -> None:
    for fd in held.values():
        os.close(fd)
    held.clear()


def test_a_member_is_written_once_per_join_in_the_processs_own_slot(tmp_path: Path) -> None:
    members = PreviousMembers(tmp_path)
    members.remember(None)  # (not joined yet)
    members.remember(("app", "m-1"))
    path = tmp_path / MEMBERS_DIR / "app.0.json"
    assert json.loads(path.read_text())["memberId"] == "m-1"
    written = path.stat().st_mtime_ns
    members.remember(("app", "m-1"))  # the same member: not written again
    assert path.stat().st_mtime_ns == written
    members.remember(("app", "m-2"))  # a new join
    assert json.loads(path.read_text())["memberId"] == "m-2"


def test_a_live_processs_member_is_never_claimed_a_gone_ones_is_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = PreviousMembers(tmp_path)
    first.remember(("app", "alive"))
    first_held = _another_process(monkeypatch)
    second = PreviousMembers(tmp_path)
    assert second.claim("app") == [], "the first process holds its slot: its member is left alone"
    second.remember(("app", "second"))
    assert json.loads((tmp_path / MEMBERS_DIR / "app.1.json").read_text())["memberId"] == "second"
    _gone(first_held)  # both processes gone (their locks go with them)
    _gone(_another_process(monkeypatch))
    third = PreviousMembers(tmp_path)
    assert sorted(third.claim("app")) == ["alive", "second"]
    _another_process(monkeypatch)
    assert PreviousMembers(tmp_path).claim("app") == [], "a member removed once is forgotten"


def test_an_unreadable_slot_is_no_member(tmp_path: Path) -> None:
    (tmp_path / MEMBERS_DIR).mkdir()
    (tmp_path / MEMBERS_DIR / "app.0.json").write_text("{not json")
    assert PreviousMembers(tmp_path).claim("app") == []


def test_a_start_with_nothing_gone_asks_nothing_and_one_without_a_broker_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    assert leave_previous_members("127.0.0.1:1", tmp_path, ["app"], say=said.append) == {}
    PreviousMembers(tmp_path).remember(("app", "m-1"))
    _gone(_another_process(monkeypatch))
    outcomes = leave_previous_members("127.0.0.1:1", tmp_path, ["app"], timeout_s=1, say=said.append)
    assert outcomes["m-1"].startswith("not asked"), outcomes
    assert said == [f"the member a process gone from this data dir held in app (m-1): {outcomes['m-1']}"]
