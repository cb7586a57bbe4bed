"""Benchmarks (`make bench`): they report, never assert."""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path
from typing import Any


def write_result(out: Path, module: str, payload: dict[str, Any]) -> None:
    """A bench's result as JSON, with the day, the Python and the command line that made it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "python": platform.python_version(),
        "command": " ".join([f"python -m {module}", *sys.argv[1:]]),
    }
    out.write_text(json.dumps({**meta, **payload}, indent=2))
