"""PreviousMembers (kafka/group.py): the member id a data dir's process held in each group, for a restart
after a crash to take out of the group before it joins."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.kafka.group import MEMBERS_DIR, PreviousMembers, leave_previous_members

pytestmark = pytest.mark.unit


def test_a_member_is_written_once_per_join_and_read_back_by_group(tmp_path: Path) -> None:
    members = PreviousMembers(tmp_path)
    members.remember(None)  # (not joined yet)
    members.remember(("app", "m-1"))
    path = tmp_path / MEMBERS_DIR / "app.json"
    written = path.stat().st_mtime_ns
    members.remember(("app", "m-1"))  # the same member: not written again
    assert path.stat().st_mtime_ns == written
    members.remember(("app-notifier", "n-1"))
    members.remember(("app", "m-2"))  # a new join
    again = PreviousMembers(tmp_path)  # (the next process on this data dir)
    assert again.recorded(["app", "app-notifier", "app-launcher"]) == {"app": "m-2", "app-notifier": "n-1"}


def test_an_unreadable_record_is_no_member(tmp_path: Path) -> None:
    (tmp_path / MEMBERS_DIR).mkdir()
    (tmp_path / MEMBERS_DIR / "app.json").write_text("{not json")
    (tmp_path / MEMBERS_DIR / "other.json").write_text('{"group": "other"}')
    assert PreviousMembers(tmp_path).recorded(["app", "other"]) == {}


def test_a_start_without_a_record_asks_nothing_and_one_without_a_broker_goes_on(tmp_path: Path) -> None:
    said: list[str] = []
    assert leave_previous_members("127.0.0.1:1", tmp_path, ["app"], say=said.append) == {}
    PreviousMembers(tmp_path).remember(("app", "m-1"))
    outcomes = leave_previous_members("127.0.0.1:1", tmp_path, ["app"], timeout_s=1, say=said.append)
    assert outcomes["app"].startswith("not asked"), outcomes
    assert said == [f"the member this data dir held in app (m-1): {outcomes['app']}"]
