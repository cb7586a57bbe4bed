"""Runs one PySpark program for the launcher: `python -m scheduler.launcher.spark_runner TARGET`.

TARGET is `package.module:function` (called as `function(spark, args)`) or a path to a script (run with
`spark` and `args` in its globals). The Spark master comes from SCHEDULER_SPARK_MASTER (`local[*]` by
default; a cluster URL in production), the runtime arguments from SCHEDULER_ARGS (JSON). The line
SCHEDULER-RUN-RUNNING tells the launcher the Spark session is up: the run is RUNNING from then on.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
from typing import Any


def spark_session(app_name: str) -> Any:
    """A Spark session on SCHEDULER_SPARK_MASTER (local[*] by default), quiet and without its web UI."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
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


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(
            "usage: python -m scheduler.launcher.spark_runner package.module:function | script.py",
            file=sys.stderr,
        )
        return 2
    target = argv[0]
    args = json.loads(os.environ.get("SCHEDULER_ARGS", "{}"))
    spark = spark_session(os.environ.get("SCHEDULER_PROGRAM", target))
    from scheduler.launcher.launcher import RUNNING_MARKER

    print(RUNNING_MARKER, flush=True)
    try:
        if target.endswith(".py"):
            runpy.run_path(target, init_globals={"spark": spark, "args": args}, run_name="__main__")
        else:
            module_name, _, function = target.partition(":")
            getattr(importlib.import_module(module_name), function or "main")(spark, args)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
