"""LauncherJournal (append-only JSONL of start/pid/end, folded on open and rewritten), program_key_bytes and
stop_request. No Kafka: only the journal and the pure helpers of scheduler.launcher.launcher are used."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from scheduler.domain.model import InvalidSchedule
from scheduler.launcher import launcher
from scheduler.launcher.launcher import (
    MAX_STARTED_REMEMBERED,
    LauncherJournal,
    program_key_bytes,
    stop_request,
)

pytestmark = pytest.mark.unit

PROG = "acme/etl/pyspark/nightly"
OTHER = "acme/ops/command/backup"


@contextmanager
def opened(path: Path) -> Iterator[LauncherJournal]:
    journal = LauncherJournal(path)
    try:
        yield journal
    finally:
        journal.close()


def start(job: str, program: str = PROG) -> dict[str, Any]:
    return {"op": "start", "jobId": job, "program": program}


def pid(job: str, pgid: int) -> dict[str, Any]:
    return {"op": "pid", "jobId": job, "pgid": pgid}


def end(job: str) -> dict[str, Any]:
    return {"op": "end", "jobId": job}


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "launcher" / "app.jsonl"


def test_new_journal_is_empty_and_creates_its_directory(path: Path) -> None:
    assert not path.parent.exists()
    with opened(path) as j:
        assert j.started == []
        assert j.in_flight == {}
    assert path.exists()
    assert path.read_text() == ""


def test_record_folds_immediately(path: Path) -> None:
    with opened(path) as j:
        j.record(start("j1"))
        assert j.started == ["j1"]
        assert j.in_flight == {"j1": {"program": PROG, "pgid": None}}
        j.record(pid("j1", 4242))
        assert j.in_flight["j1"]["pgid"] == 4242
        j.record(end("j1"))
        assert j.started == ["j1"]
        assert j.in_flight == {}


def test_record_is_appended_and_flushed(path: Path) -> None:
    with opened(path) as j:
        j.record(start("j1"))
        j.record(pid("j1", 7))
        # readable by another reader before close: each record is flushed
        assert lines(path) == [start("j1"), pid("j1", 7)]


def test_started_and_in_flight_survive_reopening(path: Path) -> None:
    with opened(path) as j:
        j.record(start("done"))
        j.record(pid("done", 100))
        j.record(end("done"))
        j.record(start("running", OTHER))
        j.record(pid("running", 200))
        j.record(start("launching"))

    with opened(path) as j:
        assert j.started == ["done", "running", "launching"]
        assert j.in_flight == {
            "running": {"program": OTHER, "pgid": 200},
            "launching": {"program": PROG, "pgid": None},
        }


def test_end_removes_from_in_flight_but_keeps_started(path: Path) -> None:
    with opened(path) as j:
        j.record(start("j1"))
        j.record(pid("j1", 11))
    with opened(path) as j:
        assert "j1" in j.in_flight
        j.record(end("j1"))
        assert j.in_flight == {}
        assert j.started == ["j1"]
    with opened(path) as j:
        assert j.in_flight == {}
        assert j.started == ["j1"]


def test_state_is_stable_over_many_reopens(path: Path) -> None:
    with opened(path) as j:
        j.record(start("a"))
        j.record(pid("a", 1))
        j.record(start("b"))
        j.record(end("b"))
    with opened(path):
        pass
    compacted = path.read_text()
    for _ in range(3):
        with opened(path) as j:
            assert j.started == ["a", "b"]
            assert j.in_flight == {"a": {"program": PROG, "pgid": 1}}
        assert path.read_text() == compacted  # the rewrite is idempotent


def test_pid_recorded_and_last_pid_wins(path: Path) -> None:
    with opened(path) as j:
        j.record(start("j1"))
        j.record(pid("j1", 10))
        j.record(pid("j1", 20))
    with opened(path) as j:
        assert j.in_flight["j1"]["pgid"] == 20


def test_pid_for_unknown_or_ended_job_is_ignored(path: Path) -> None:
    with opened(path) as j:
        j.record(pid("ghost", 10))
        j.record(start("j1"))
        j.record(end("j1"))
        j.record(pid("j1", 20))
        assert j.in_flight == {}
    with opened(path) as j:
        assert j.in_flight == {}
        assert j.started == ["j1"]


def test_end_for_unknown_job_is_harmless(path: Path) -> None:
    with opened(path) as j:
        j.record(end("ghost"))
        assert j.started == [] and j.in_flight == {}
    with opened(path) as j:
        assert j.started == [] and j.in_flight == {}


def test_rewrite_on_open_compacts_to_start_pid_end(path: Path) -> None:
    with opened(path) as j:
        j.record(start("done"))
        j.record(pid("done", 5))
        j.record(end("done"))
        j.record(start("live"))
        j.record(pid("live", 6))
        j.record(pid("live", 7))
    with opened(path):
        pass
    ops = lines(path)
    assert ops == [
        {"op": "start", "jobId": "done", "program": ""},
        end("done"),
        start("live"),
        pid("live", 7),
    ]
    assert not path.with_suffix(".tmp").exists()


def test_appends_after_reopen_are_kept(path: Path) -> None:
    with opened(path) as j:
        j.record(start("a"))
    with opened(path) as j:
        j.record(end("a"))
        j.record(start("b"))
    with opened(path) as j:
        assert j.started == ["a", "b"]
        assert set(j.in_flight) == {"b"}


@pytest.mark.parametrize(
    "garbage",
    [
        "this is not json",
        '{"op": "start", "jobId": "torn", "prog',  # a write cut short
        "\x00\x00\x00\x00",  # zero-filled block after a crash
        "",
        "{}",  # no jobId
        '{"op": "start", "jobId": "noprog"}',  # no program
        '{"op": "pid", "jobId": "a"}',  # no pgid
        '{"jobId": "a"}',  # no op
    ],
    ids=["text", "torn", "nul", "blank", "empty-object", "start-no-program", "pid-no-pgid", "no-op"],
)
def test_garbage_line_in_the_middle_is_skipped(path: Path, garbage: str) -> None:
    path.parent.mkdir(parents=True)
    body = [
        json.dumps(start("a")),
        json.dumps(pid("a", 9)),
        garbage,
        json.dumps(start("b")),
        json.dumps(end("b")),
    ]
    path.write_text("\n".join(body) + "\n")
    with opened(path) as j:
        assert j.in_flight == {"a": {"program": PROG, "pgid": 9}}
        assert "b" in j.started
        assert j.started[0] == "a"
    # the rewrite leaves only well-formed lines behind
    for op in lines(path):
        assert op["op"] in {"start", "pid", "end"}


def test_torn_last_line_is_skipped_and_journal_stays_appendable(path: Path) -> None:
    path.parent.mkdir(parents=True)
    full = json.dumps(start("a")) + "\n" + json.dumps(pid("a", 3)) + "\n"
    torn = json.dumps(end("a"))[:-5]  # the crash hit while the end of "a" was being written
    path.write_text(full + torn)
    with opened(path) as j:
        assert j.started == ["a"]
        assert j.in_flight == {"a": {"program": PROG, "pgid": 3}}  # the end never made it
        j.record(end("a"))
        j.record(start("b"))
    with opened(path) as j:
        assert j.started == ["a", "b"]
        assert set(j.in_flight) == {"b"}


@pytest.mark.parametrize("garbage", ["null", "42", "[1, 2]", '"start"'])
def test_non_object_json_line_is_skipped(path: Path, garbage: str) -> None:
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(start("a")) + "\n" + garbage + "\n")
    with opened(path) as j:
        assert j.started == ["a"]


def test_rewrite_keeps_at_most_max_started_remembered(path: Path) -> None:
    n = MAX_STARTED_REMEMBERED + 25
    path.parent.mkdir(parents=True)
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps(start(f"job-{i:05d}")) + "\n")
            f.write(json.dumps(end(f"job-{i:05d}")) + "\n")
    with opened(path) as j:
        assert len(j.started) == MAX_STARTED_REMEMBERED
        assert j.started[0] == "job-00025"  # the oldest are forgotten
        assert j.started[-1] == f"job-{n - 1:05d}"
    starts = [op["jobId"] for op in lines(path) if op["op"] == "start"]
    assert len(starts) == MAX_STARTED_REMEMBERED
    assert starts[0] == "job-00025"
    with opened(path) as j:
        assert len(j.started) == MAX_STARTED_REMEMBERED
        assert j.in_flight == {}


def test_max_started_is_applied_on_each_open(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher, "MAX_STARTED_REMEMBERED", 3)
    with opened(path) as j:
        for i in range(5):
            j.record(start(f"j{i}"))
            j.record(end(f"j{i}"))
        assert len(j.started) == 5  # not trimmed while open
    with opened(path) as j:
        assert j.started == ["j2", "j3", "j4"]
    assert len([op for op in lines(path) if op["op"] == "start"]) == 3


def test_old_in_flight_run_survives_trimming(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher, "MAX_STARTED_REMEMBERED", 3)
    with opened(path) as j:
        j.record(start("long", OTHER))
        j.record(pid("long", 777))
        for i in range(3):
            j.record(start(f"j{i}"))
            j.record(end(f"j{i}"))
    with opened(path) as j:
        assert j.in_flight == {"long": {"program": OTHER, "pgid": 777}}
    # the launcher dies again before it got to recover()
    with opened(path) as j:
        assert j.in_flight == {"long": {"program": OTHER, "pgid": 777}}


# --- helpers ---------------------------------------------------------------------------------------


def test_program_key_bytes() -> None:
    assert program_key_bytes("a/b/c/d") == b"program:a/b/c/d"
    assert program_key_bytes(PROG) == f"program:{PROG}".encode()


@pytest.mark.parametrize("bad", ["a/b/c", "a/b/c/d/e", "a//c/d", "", "/a/b/c"])
def test_program_key_bytes_rejects_bad_program_id(bad: str) -> None:
    with pytest.raises(InvalidSchedule):
        program_key_bytes(bad)


def test_stop_request_shape() -> None:
    raw = stop_request("run-1", PROG)
    assert isinstance(raw, bytes)
    assert json.loads(raw) == {"type": "stop", "runId": "run-1", "program": PROG}


def test_stop_request_is_compact_utf8() -> None:
    raw = stop_request("r-é", "ns/app/type/né")
    assert b" " not in raw
    assert json.loads(raw.decode("utf-8")) == {"type": "stop", "runId": "r-é", "program": "ns/app/type/né"}
