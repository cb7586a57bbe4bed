"""A polling sensor's answers and state (scheduler/domain/sensors.py), and the runner that calls a Python
check (scheduler/launcher/sensor_runner.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.domain.sensors import (
    RESULT_MARKER,
    Answer,
    BadAnswer,
    SensorState,
    answer_in,
    answer_line,
    answer_of,
    state_json,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("value", "answer"),
    [
        (None, Answer()),
        (False, Answer()),
        (True, Answer(fire=True)),
        ({"fire": False, "reason": "empty"}, Answer(reason="empty")),
        ({"runKeys": ["a"], "cursor": "a"}, Answer(True, ("a",), "a", keeps_cursor=False)),
        ({"fire": True, "cursor": None}, Answer(True, (), None, keeps_cursor=False)),
    ],
)
def test_what_a_check_returns_is_an_answer(value: object, answer: Answer) -> None:
    assert answer_of(value) == answer
    assert answer_in(["noise", answer_line(answer)]) == answer


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (3, "not int"),
        ({"fires": True}, "unknown field 'fires'"),
        ({"fire": "yes"}, "fire must be true or false"),
        ({"runKeys": "a"}, "runKeys must be a list of strings"),
        ({"cursor": 5}, "cursor must be a string"),
        ({"cursor": "x" * 70_000}, "cursor longer than"),
        ({"runKeys": ["k"] * 1_001}, "at most 1000 keys"),
    ],
)
def test_what_is_not_an_answer_says_why(value: object, why: str) -> None:
    with pytest.raises(BadAnswer, match=why):
        answer_of(value)


def test_an_argv_check_answers_on_its_last_marker_line_or_says_nothing_new() -> None:
    assert answer_in(["hello"]) == Answer()
    lines = [RESULT_MARKER + '{"fire": true}', RESULT_MARKER + '{"fire": false, "reason": "late"}']
    assert answer_in(lines) == Answer(reason="late")
    with pytest.raises(BadAnswer, match="not JSON"):
        answer_in([RESULT_MARKER + "{"])


def test_the_state_keeps_the_cursor_unless_the_answer_names_one_and_counts_what_happened() -> None:
    s0 = SensorState()
    s1 = s0.after(Answer(True, ("a",), "a", keeps_cursor=False), began=1_000, took_ms=5)
    assert (s1.cursor, s1.outcome, s1.fires, s1.evaluations, s1.run_keys) == ("a", "FIRED", 1, 1, ["a"])
    s2 = s1.after(Answer(reason="nothing"), began=2_000, took_ms=5)
    assert (s2.cursor, s2.outcome, s2.reason, s2.fires, s2.evaluations) == (
        "a",
        "NOTHING_NEW",
        "nothing",
        1,
        2,
    )
    s3 = s2.after(None, began=3_000, took_ms=5, failure="boom")
    assert (s3.cursor, s3.outcome, s3.reason, s3.failures, s3.evaluations) == ("a", "FAILED", "boom", 1, 3)
    assert SensorState.from_json({**s3.to_json(), "later": 1}) == s3
    shown = state_json("acme/l/sensor/s", 10_000, s3)
    assert shown["nextAt"] == 13_000 and shown["outcome"] == "FAILED"
    assert state_json("acme/l/sensor/s", 10_000, None)["outcome"] == "NEVER_EVALUATED"


def test_the_runner_calls_the_check_with_its_cursor_and_prints_its_answer(tmp_path: Path) -> None:
    (tmp_path / "checks.py").write_text(
        "def with_cursor(cursor):\n    return {'runKeys': [cursor or 'first'], 'cursor': 'next'}\n"
        "def without():\n    return True\n"
        "def wrong(cursor):\n    return 42\n"
    )

    def run(target: str, cursor: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        env.pop("SCHEDULER_SENSOR_CURSOR", None)
        if cursor is not None:
            env["SCHEDULER_SENSOR_CURSOR"] = cursor
        return subprocess.run([sys.executable, "-m", "scheduler.launcher.sensor_runner", target], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=60)  # fmt: skip

    first = run("checks:with_cursor")
    assert answer_in(first.stdout.splitlines()) == Answer(True, ("first",), "next", keeps_cursor=False)
    assert answer_in(run("checks:with_cursor", "c7").stdout.splitlines()).run_keys == ("c7",)
    assert answer_in(run("checks:without").stdout.splitlines()) == Answer(fire=True)
    wrong = run("checks:wrong")
    assert wrong.returncode == 1 and "not an answer" in wrong.stderr
