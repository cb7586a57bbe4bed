"""Runs one `python` program for the launcher: `python -m scheduler.launcher.python_runner
package.module:function`, the function called with the job's runtime arguments (SCHEDULER_ARGS, a JSON
object of strings). An exception fails the run (exit 1, its traceback on the run's output); what the
function returns is printed. The programs the `@schedule` decorators declare (scheduler/client/code.py)."""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any


def target_of(argv: list[str], runner: str) -> Any:
    """The function `package.module:function` (argv's one argument) names; None (usage said) if it is not
    one argument of that shape."""
    if len(argv) != 1 or ":" not in argv[0]:
        print(f"usage: python -m scheduler.launcher.{runner} package.module:function", file=sys.stderr)
        return None
    module_name, _, name = argv[0].partition(":")
    sys.path.insert(0, os.getcwd())  # (a module of the working directory, as `python -m` finds it)
    found: Any = importlib.import_module(module_name)
    for part in name.split("."):
        found = getattr(found, part)
    return found


def main(argv: list[str]) -> int:
    found = target_of(argv, "python_runner")
    if found is None:
        return 2
    result = found(json.loads(os.environ.get("SCHEDULER_ARGS") or "{}"))
    if result is not None:
        print(result, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
