"""Runs one evaluation of a `sensor` program for the worker that owns it: `python -m
scheduler.launcher.sensor_runner package.module:function`, the function called with the sensor's cursor
(SCHEDULER_SENSOR_CURSOR; None before its first answer kept one), or with none if it takes no argument. What
it returns is printed as the line `SCHEDULER-SENSOR-RESULT {json}` the worker reads (domain/sensors.py says
what it may return); an exception fails the evaluation (exit 1, its traceback in the sensor's reason)."""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from typing import Any

from scheduler.domain.sensors import BadAnswer, answer_line, answer_of


def main(argv: list[str]) -> int:
    if len(argv) != 1 or ":" not in argv[0]:
        print("usage: python -m scheduler.launcher.sensor_runner package.module:function", file=sys.stderr)
        return 2
    module_name, _, name = argv[0].partition(":")
    sys.path.insert(0, os.getcwd())  # (a module of the worker's working directory, as `python -m` finds it)
    found: Any = importlib.import_module(module_name)
    for part in name.split("."):
        found = getattr(found, part)
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
