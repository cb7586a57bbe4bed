"""Journal of accepted commands: append/read, torn tails, and compaction to one INSERT per live schedule."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from scheduler.domain.model import (
    Action,
    CronTrigger,
    FrequencyTrigger,
    Schedule,
    ScheduleCommand,
    ScheduleKey,
    TimeUnit,
)
from scheduler.wire.codec import decode_command, encode_command, key_bytes
from scheduler.worker.journal import Journal, compact_journal, fold, read_journal

pytestmark = pytest.mark.unit


def sched(name: str, **changes: Any) -> Schedule:
    s = Schedule(ScheduleKey("acme", name), FrequencyTrigger(TimeUnit.MINUTES, 1), "out", {"n": name})
    return dataclasses.replace(s, **changes)


def cmd(name: str, action: Action, schedule: Schedule | None = None) -> tuple[bytes, bytes]:
    key = ScheduleKey("acme", name)
    return key_bytes(key), encode_command(ScheduleCommand(key, action, schedule))


def write(path: Path, records: list[tuple[bytes, bytes]]) -> None:
    journal = Journal(path)
    try:
        for key, value in records:
            journal.append(key, value)
    finally:
        journal.close()


def test_appended_records_read_back_in_order(tmp_path: Path) -> None:
    records = [(b"k1", b"v1"), (b"", b""), (b"key-2", b"\x00" * 1000), (b"k3", b"value three")]
    path = tmp_path / "sub" / "journal.bin"  # the parent directory is created
    write(path, records)
    assert list(read_journal(path)) == records


def test_a_reopened_journal_appends_after_what_is_there(tmp_path: Path) -> None:
    path = tmp_path / "journal.bin"
    write(path, [(b"a", b"1")])
    write(path, [(b"b", b"2")])
    assert list(read_journal(path)) == [(b"a", b"1"), (b"b", b"2")]


def test_reading_a_missing_journal_gives_nothing(tmp_path: Path) -> None:
    assert list(read_journal(tmp_path / "nope.bin")) == []


def test_a_torn_last_record_is_ignored_wherever_it_was_cut(tmp_path: Path) -> None:
    complete = [(b"k1", b"v1"), (b"k2", b"v2" * 10)]
    path = tmp_path / "journal.bin"
    write(path, complete)
    whole = path.read_bytes()
    last = (4).to_bytes(4, "big") + b"torn" + (8).to_bytes(4, "big") + b"12345678"
    for cut in range(1, len(last)):
        path.write_bytes(whole + last[:cut])
        assert list(read_journal(path)) == complete, f"cut after {cut} bytes"
    path.write_bytes(whole + last)
    assert list(read_journal(path))[-1] == (b"torn", b"12345678")


def test_compaction_folds_each_schedule_history_into_one_insert_with_its_final_state(tmp_path: Path) -> None:
    path = tmp_path / "journal.bin"
    a_v2 = sched("a", topic="out-v2", trigger=CronTrigger("*/5 * * * * *", "Europe/Paris"))
    write(
        path,
        [
            cmd("a", Action.INSERT, sched("a")),  # created disabled
            cmd("b", Action.INSERT, sched("b", enabled=True)),
            cmd("a", Action.ENABLE),
            cmd("c", Action.INSERT, sched("c", enabled=True)),
            cmd("a", Action.UPDATE, a_v2),  # keeps a enabled, whatever the command's flag
            cmd("b", Action.DISABLE),
            cmd("c", Action.DELETE),
            cmd("a", Action.INSERT, sched("a")),  # already exists, different: rejected, ignored
            cmd("d", Action.UPDATE, sched("d")),  # does not exist: rejected, ignored
            cmd("e", Action.DELETE),  # does not exist: rejected, ignored
            cmd("b", Action.INSERT, sched("b", topic="bad topic!")),  # invalid: ignored
            (b"k", b"not avro at all"),  # undecodable: ignored
        ],
    )
    compacted = compact_journal(path)

    by_key = {kb: decode_command(value) for kb, value in compacted}
    assert len(compacted) == len(by_key) == 2
    assert by_key[key_bytes(ScheduleKey("acme", "a"))] == ScheduleCommand(
        ScheduleKey("acme", "a"), Action.INSERT, dataclasses.replace(a_v2, enabled=True)
    )
    assert by_key[key_bytes(ScheduleKey("acme", "b"))] == ScheduleCommand(
        ScheduleKey("acme", "b"), Action.INSERT, sched("b", enabled=False)
    )
    # the file now holds exactly those commands
    assert list(read_journal(path)) == compacted


def test_compacting_a_compacted_journal_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "journal.bin"
    write(
        path,
        [
            cmd("a", Action.INSERT, sched("a", enabled=True)),
            cmd("b", Action.INSERT, sched("b")),
            cmd("a", Action.DISABLE),
            cmd("b", Action.ENABLE),
            cmd("a", Action.UPDATE, sched("a", topic="elsewhere")),
        ],
    )
    first = compact_journal(path)
    first_bytes = path.read_bytes()
    second = compact_journal(path)
    assert second == first
    assert path.read_bytes() == first_bytes
    assert {s.schedule.key.name: s.schedule.enabled for s in fold(read_journal(path)).values()} == {
        "a": False,
        "b": True,
    }


def test_compaction_after_everything_was_deleted_leaves_an_empty_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.bin"
    write(path, [cmd("a", Action.INSERT, sched("a")), cmd("a", Action.DELETE)])
    assert compact_journal(path) == []
    assert path.read_bytes() == b""
    assert not path.with_suffix(".tmp").exists()


def test_a_deleted_then_reinserted_schedule_is_kept_with_its_new_definition(tmp_path: Path) -> None:
    path = tmp_path / "journal.bin"
    write(
        path,
        [
            cmd("a", Action.INSERT, sched("a")),
            cmd("a", Action.DELETE),
            cmd("a", Action.INSERT, sched("a", topic="reborn", enabled=True)),
        ],
    )
    [(kb, value)] = compact_journal(path)
    assert kb == key_bytes(ScheduleKey("acme", "a"))
    assert decode_command(value).schedule == sched("a", topic="reborn", enabled=True)


def test_compaction_keeps_the_complete_records_of_a_journal_with_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "journal.bin"
    write(path, [cmd("a", Action.INSERT, sched("a", enabled=True))])
    key, value = cmd("b", Action.INSERT, sched("b", enabled=True))
    with open(path, "ab") as f:
        f.write(len(key).to_bytes(4, "big") + key + len(value).to_bytes(4, "big") + value[:-3])
    [(kb, _)] = compact_journal(path)
    assert kb == key_bytes(ScheduleKey("acme", "a"))
