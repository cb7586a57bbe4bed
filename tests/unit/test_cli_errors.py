"""The CLI with bad input: every failure is a message on stderr (one line; argparse's usage errors end
with theirs) and a non-zero exit, never a traceback. Nothing answers on the URLs and brokers named here,
so no command gets as far as a server."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from scheduler.cli.cli import main

pytestmark = pytest.mark.unit

NOWHERE = "http://127.0.0.1:1"  # (nothing listens on port 1)


@pytest.fixture(autouse=True)
def _logging_as_it_was():  # type: ignore[no-untyped-def]
    """main() configures logging for its process (the Kafka client's level among it): undone after."""
    kafka, root = logging.getLogger("aiokafka"), logging.getLogger()
    levels, handlers = (kafka.level, root.level), list(root.handlers)
    yield
    kafka.setLevel(levels[0])
    root.setLevel(levels[1])
    root.handlers[:] = handlers


def bad_inputs(tmp: Path) -> dict[str, list[str]]:
    (tmp / "bad.json").write_text('{"tenant": ')
    (tmp / "binary.json").write_bytes(b"\xff\xfe\x00")
    (tmp / "number.json").write_text("42")
    (tmp / "folder.json").mkdir()
    client = ["--url", NOWHERE]
    return {
        "a port that is not a number": ["schedules", "list", "--url", "http://127.0.0.1:60199:1"],
        "a URL of another protocol": ["schedules", "list", "--url", "ftp://example.org"],
        "nothing at the URL": ["schedules", "list", *client],
        "a key without its tenant": ["schedules", "get", "nope", *client],
        "a file that does not exist": ["schedules", "create", "-f", str(tmp / "missing.json"), *client],
        "a folder for a file": ["schedules", "create", "-f", str(tmp / "folder.json"), *client],
        "a file of broken JSON": ["schedules", "create", "-f", str(tmp / "bad.json"), *client],
        "a file that is not text": ["schedules", "create", "-f", str(tmp / "binary.json"), *client],
        "a file of a number": ["schedules", "create", "-f", str(tmp / "number.json"), *client],
        "an instant that is not one": ["schedules", "run", "acme/x", "--at", "notatime", *client],
        "a backfill from a word": [
            "schedules",
            "backfill",
            "acme/x",
            "--from",
            "yesterday",
            "--to",
            "5",
            *client,
        ],
        "a count below one": ["schedules", "next", "acme/x", "-n", "-1", *client],
        "an event payload without =": ["events", "publish", "partition", "notakv", *client],
        "an event time that is a word": [
            "events",
            "publish",
            "--timestamp",
            "soon",
            "partition",
            "a=b",
            *client,
        ],
        "a scope that does not exist": [
            "token",
            "new",
            "--name",
            "x",
            "--tenants",
            "a",
            "--scopes",
            "sched:x",
        ],
        "a program id of one part": ["runs", "stop", "p", "r", *client],
        "no broker to tail": ["tail", "--bootstrap", "127.0.0.1:1", "some-topic"],
        "a schema that does not exist": ["tail", "--schema", "NoSuch", "some-topic"],
        "a timeout that is not a number": ["schedules", "list", "--timeout", "abc"],
        "a command that does not exist": ["nosuch"],
    }


def test_twenty_kinds_of_bad_input_each_fail_with_a_message_and_no_traceback(tmp_path, capsys):
    cases = bad_inputs(tmp_path)
    assert len(cases) == 20
    wrong = {}
    for name, argv in cases.items():
        try:
            main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        lines = err.strip().splitlines()
        said = bool(lines) and lines[-1].startswith("scheduler") and ": " in lines[-1]
        one_line = len(lines) == 1 or lines[0].startswith("usage:")  # (argparse: its usage, then its error)
        if code == 0 or "Traceback" in err or not said or not one_line or out:
            wrong[name] = (code, err[-600:], out[-200:])
    assert not wrong, wrong


def test_a_setting_out_of_range_is_a_usage_error_naming_it_not_a_traceback(capsys, monkeypatch):
    from scheduler.cli import cli

    with pytest.raises(SystemExit) as exited:
        cli.main(["worker", "--web-port", "0"])
    assert exited.value.code == 2
    assert (
        "scheduler: --web-port or SCHEDULER_WEB_PORT: Input should be greater than or equal to 1 (got 0)"
        in (capsys.readouterr().err)
    )
    monkeypatch.setenv("SCHEDULER_PARTITIONS", "0")
    with pytest.raises(SystemExit) as exited:
        cli.main(["worker"])
    assert exited.value.code == 2 and "scheduler: SCHEDULER_PARTITIONS: " in capsys.readouterr().err
