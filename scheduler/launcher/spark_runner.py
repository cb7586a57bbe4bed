"""Runs one PySpark program for the launcher: `python -m scheduler.launcher.spark_runner TARGET`.

TARGET is `package.module:function` (called as `function(spark, args)`) or a path to a script (run with
`spark` and `args` in its globals). The Spark master comes from SCHEDULER_SPARK_MASTER (`local[*]` by
default; a cluster URL in production), the runtime arguments from SCHEDULER_ARGS (JSON). It tells the
launcher where the run is with lines `SCHEDULER-RUN-STATE <STATE>` (seed 004's user stories 1 and 5):
REQUESTING_RESOURCES while the session starts and, on a cluster, until an executor is granted;
INITIALIZING while the program's code loads; RUNNING once it is called.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
import time
from collections.abc import Callable
from typing import Any

#: a line `SCHEDULER-RUN-STATE <STATE>` on a run's output reports its state to the launcher
STATE_MARKER = "SCHEDULER-RUN-STATE "


def report(state: str) -> None:
    print(f"{STATE_MARKER}{state}", flush=True)


def spark_session(app_name: str) -> Any:
    """A Spark session on SCHEDULER_SPARK_MASTER (local[*] by default), quiet and without its web UI."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # (Spark's Python workers: this interpreter)
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise SystemExit(
            f"PySpark is not installed ({exc}): pip install 'kafka-job-scheduler[spark]'"
        ) from None

    spark = (
        SparkSession.builder.master(os.environ.get("SCHEDULER_SPARK_MASTER", "local[*]"))
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark


def wait_for_executors(spark: Any, master: str) -> None:
    """On a cluster, until the master granted at least one executor (local modes have theirs at once)."""
    if master.startswith("local"):
        return
    tracker = spark.sparkContext.statusTracker()
    while len(tracker.getExecutorInfos()) <= 1:  # (the driver is one of them)
        time.sleep(0.2)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(
            "usage: python -m scheduler.launcher.spark_runner package.module:function | script.py",
            file=sys.stderr,
        )
        return 2
    target = argv[0]
    args = json.loads(os.environ.get("SCHEDULER_ARGS", "{}"))
    report("REQUESTING_RESOURCES")
    spark = spark_session(os.environ.get("SCHEDULER_PROGRAM", target))
    try:
        wait_for_executors(spark, os.environ.get("SCHEDULER_SPARK_MASTER", "local[*]"))
        report("INITIALIZING")
        program: Callable[[], Any]
        if target.endswith(".py"):
            globals_ = {"spark": spark, "args": args}
            program = lambda: runpy.run_path(target, init_globals=globals_, run_name="__main__")  # noqa: E731
        else:
            module_name, _, function = target.partition(":")
            call = getattr(importlib.import_module(module_name), function or "main")
            program = lambda: call(spark, args)  # noqa: E731
        report("RUNNING")
        program()
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
