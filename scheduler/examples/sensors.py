"""An example polling sensor: new files in a directory (SENSOR_DIR in the sensor's env). Its cursor is the
newest file name it has fired for; each evaluation fires once, naming the files that came after it (in name
order: name the files so that they sort by arrival — a timestamp first — as landing zones usually do).

    PUT /programs/acme/landing/sensor/new-files
        {"kind": "sensor", "target": "scheduler.examples.sensors:new_files",
         "intervalMs": 10000, "env": {"SENSOR_DIR": "/data/landing"}}
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def new_files(cursor: str | None) -> dict[str, Any]:
    where = Path(os.environ["SENSOR_DIR"])
    names = sorted(p.name for p in where.iterdir() if p.is_file() and not p.name.startswith("."))
    new = [n for n in names if cursor is None or n > cursor]
    if not new:
        return {"fire": False, "reason": f"no file after {cursor!r} in {where}"}
    return {"runKeys": new, "cursor": new[-1]}
