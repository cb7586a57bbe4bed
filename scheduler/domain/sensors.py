"""Polling sensors, the pure part: what a sensor's check answers, and what is kept of a sensor between
its evaluations. Pure.

A sensor is a program of kind `sensor`: a check of the user's (`package.module:function(cursor)`, or an
argv) that the worker owning it runs every `intervalMs`, out of the event loop and within its time limit,
with the cursor it returned last. It answers, as a Python value or as the JSON of a last line
`SCHEDULER-SENSOR-RESULT {...}`:

- `None`, `False`: nothing new (the cursor unchanged);
- `True`: fire once;
- `{"fire": bool, "runKeys": ["..."], "cursor": "...", "reason": "..."}`: fire when `fire` is true or
  `runKeys` names something (what is new: a file, a partition), keep `cursor` for the next evaluation
  (left out: unchanged; null: forgotten), and `reason` says why not, for people.

Each fire is an event `sensor` (its key `sensor:<program>`) that fires the schedules whose trigger is
`{"type": "sensor", "sensor": "<program>"}`; worker/sensors.py runs the checks and keeps the state.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

RESULT_MARKER = "SCHEDULER-SENSOR-RESULT "
DEFAULT_INTERVAL_MS = 30_000
DEFAULT_TIME_LIMIT_MS = 60_000  # an evaluation's bound, unless the sensor's timeLimitMs says otherwise
MAX_CURSOR_CHARS = 64 * 1024
MAX_RUN_KEYS = 1_000
MAX_RUN_KEY_CHARS = 1_024
MAX_REASON_CHARS = 2_000
_ANSWER_KEYS = frozenset({"fire", "runKeys", "cursor", "reason"})


class BadAnswer(ValueError):
    """What a sensor's check answered is not an answer (the evaluation fails, saying why)."""


@dataclass(frozen=True)
class Answer:
    fire: bool = False
    run_keys: tuple[str, ...] = ()
    cursor: str | None = None
    keeps_cursor: bool = True  # the answer left the cursor out: the last one stays
    reason: str = ""


def answer_of(value: Any) -> Answer:
    """A check's answer from what it returned (or the JSON it printed); BadAnswer says what is wrong."""
    if value is None or value is False:
        return Answer()
    if value is True:
        return Answer(fire=True)
    if not isinstance(value, dict):
        raise BadAnswer(f"a sensor answers None, a bool or an object, not {type(value).__name__}")
    unknown = sorted(set(value) - _ANSWER_KEYS)
    if unknown:
        raise BadAnswer(f"unknown field {unknown[0]!r} (a sensor answers fire, runKeys, cursor, reason)")
    fire = value.get("fire", False)
    if not isinstance(fire, bool):
        raise BadAnswer("fire must be true or false")
    keys = value.get("runKeys", [])
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise BadAnswer("runKeys must be a list of strings")
    if len(keys) > MAX_RUN_KEYS or any(len(k) > MAX_RUN_KEY_CHARS for k in keys):
        raise BadAnswer(f"runKeys: at most {MAX_RUN_KEYS} keys of at most {MAX_RUN_KEY_CHARS} characters")
    cursor = value.get("cursor")
    if cursor is not None and not isinstance(cursor, str):
        raise BadAnswer("cursor must be a string (or null)")
    if cursor is not None and len(cursor) > MAX_CURSOR_CHARS:
        raise BadAnswer(f"cursor longer than {MAX_CURSOR_CHARS} characters")
    reason = value.get("reason", "")
    if not isinstance(reason, str):
        raise BadAnswer("reason must be a string")
    return Answer(fire or bool(keys), tuple(keys), cursor, "cursor" not in value, reason[:MAX_REASON_CHARS])


def answer_in(lines: list[str]) -> Answer:
    """The answer an argv check printed: its last `SCHEDULER-SENSOR-RESULT {json}` line (none: nothing
    new)."""
    for line in reversed(lines):
        if line.startswith(RESULT_MARKER):
            try:
                return answer_of(json.loads(line[len(RESULT_MARKER) :]))
            except (json.JSONDecodeError, RecursionError):
                raise BadAnswer(f"its {RESULT_MARKER.strip()} line is not JSON") from None
    return Answer()


def answer_line(answer: Answer) -> str:
    """The line a check prints to give `answer` (scheduler/launcher/sensor_runner.py)."""
    body: dict[str, Any] = {"fire": answer.fire, "runKeys": list(answer.run_keys)}
    if not answer.keeps_cursor:
        body["cursor"] = answer.cursor
    if answer.reason:
        body["reason"] = answer.reason
    return RESULT_MARKER + json.dumps(body)


@dataclass
class SensorState:
    """What is kept of a sensor between evaluations (on the compacted `<app>-sensors` topic, keyed by the
    sensor's program id): its cursor, and how its last evaluation went."""

    cursor: str | None = None
    evaluated_at: int | None = None  # when the last evaluation began
    took_ms: int = 0
    outcome: str = ""  # FIRED, NOTHING_NEW, FAILED
    reason: str = ""  # why it failed, or the sensor's own reason
    run_keys: list[str] = field(default_factory=list)  # what the last fire named
    evaluations: int = 0
    fires: int = 0
    failures: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SensorState:
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def after(self, answer: Answer | None, began: int, took_ms: int, failure: str = "") -> SensorState:
        """The state after an evaluation that began at `began`: its answer, or (None) its failure."""
        s = SensorState(self.cursor, began, took_ms, evaluations=self.evaluations + 1, fires=self.fires,
                        failures=self.failures)  # fmt: skip
        if answer is None:
            s.outcome, s.reason, s.failures = "FAILED", failure[-MAX_REASON_CHARS:], self.failures + 1
            return s
        s.cursor = self.cursor if answer.keeps_cursor else answer.cursor
        s.reason = answer.reason
        if answer.fire:
            s.outcome, s.run_keys, s.fires = "FIRED", list(answer.run_keys), self.fires + 1
        else:
            s.outcome = "NOTHING_NEW"
        return s


def state_json(program: str, interval_ms: int, state: SensorState | None) -> dict[str, Any]:
    """A sensor's state for people (GET /programs/{program}/sensor, `scheduler sensors`)."""
    s = state or SensorState()
    return {
        "sensor": program,
        "intervalMs": interval_ms,
        "cursor": s.cursor,
        "evaluatedAt": s.evaluated_at,
        "nextAt": None if s.evaluated_at is None else s.evaluated_at + interval_ms,
        "tookMs": s.took_ms,
        "outcome": s.outcome or "NEVER_EVALUATED",
        "reason": s.reason,
        "runKeys": s.run_keys,
        "evaluations": s.evaluations,
        "fires": s.fires,
        "failures": s.failures,
    }
