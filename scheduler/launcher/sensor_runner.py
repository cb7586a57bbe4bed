"""Runs one evaluation of a `sensor` program for the worker that owns it: `python -m
scheduler.launcher.sensor_runner package.module:function`, the function called with the sensor's cursor
(SCHEDULER_SENSOR_CURSOR; None before its first answer kept one), or with none if it takes no argument. What
it returns is printed as the line `SCHEDULER-SENSOR-RESULT {json}` the worker reads (domain/sensors.py says
what it may return); an exception fails the evaluation (exit 1, its traceback in the sensor's reason)."""

from __future__ import annotations

import inspect
import os
import sys

from scheduler.domain.sensors import BadAnswer, answer_line, answer_of
from scheduler.launcher.python_runner import target_of


def main(argv: list[str]) -> int:
    found = target_of(argv, "sensor_runner")
    if found is None:
        return 2
    cursor = os.environ.get("SCHEDULER_SENSOR_CURSOR")
    takes_cursor = bool(inspect.signature(found).parameters)
    try:
        answer = answer_of(found(cursor) if takes_cursor else found())
    except BadAnswer as exc:
        print(f"{argv[0]} answered what is not an answer: {exc}", file=sys.stderr)
        return 1
    print(answer_line(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
