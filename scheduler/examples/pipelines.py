"""The example pipelines. Each is `function(spark, args)`, run by scheduler.launcher.spark_runner for the launcher;
they exchange data through Parquet datasets and announce what they wrote as partition events."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from scheduler.worker.datasets import dataset_path, read_dataset, write_partitions


def feed_ingest(spark: Any, args: dict[str, str]) -> None:
    """Synthetic click feed: one partition per day, `days` days ending at `end` (default today)."""
    from pyspark.sql import functions as F

    days = int(args.get("days", "3"))
    end = dt.date.fromisoformat(args["end"]) if "end" in args else dt.date.today()
    dates = [(end - dt.timedelta(days=i)).isoformat() for i in range(days)]
    df = (
        spark.range(0, 300 * days)
        .withColumn(
            "day", F.element_at(F.array(*[F.lit(d) for d in dates]), (F.col("id") % days + 1).cast("int"))
        )
        .withColumn("user", (F.col("id") * 7919 % 50).cast("string"))
        .withColumn("clicks", (F.col("id") % 5 + 1).cast("int"))
        .drop("id")
    )
    written = write_partitions(df, args.get("dataset", "demo.clicks"), ["day"])
    print(f"ingested {written.partition_keys} ({written.bytes} bytes)")


def transform(spark: Any, args: dict[str, str]) -> None:
    """Daily totals of the click feed, written as the daily_clicks dataset."""
    from pyspark.sql import functions as F

    clicks = read_dataset(spark, args.get("input", "demo.clicks"))
    totals = clicks.groupBy("day").agg(
        F.sum("clicks").alias("clicks"), F.countDistinct("user").alias("users")
    )
    written = write_partitions(totals, args.get("output", "demo.daily_clicks"), ["day"])
    print(f"transformed {written.partition_keys}")


def report(spark: Any, args: dict[str, str]) -> None:
    """A CSV report of the daily totals, one file per run."""
    daily = read_dataset(spark, args.get("input", "demo.daily_clicks")).orderBy("day")
    rows = daily.collect()
    out = dataset_path(args.get("output", "demo.reports"))
    out.mkdir(parents=True, exist_ok=True)
    path = (
        out / f"report-{os.environ.get('SCHEDULER_RUN_ID', 'manual').replace('/', '_').replace('#', '_')}.csv"
    )
    path.write_text("day,clicks,users\n" + "".join(f"{r['day']},{r['clicks']},{r['users']}\n" for r in rows))
    print(f"report {path}: {len(rows)} days")


def fail(spark: Any, args: dict[str, str]) -> None:
    """Always fails (for tests and demos of FAILED triggers)."""
    spark.range(1).count()
    raise RuntimeError(args.get("message", "this pipeline always fails"))
