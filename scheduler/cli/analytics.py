"""Run analytics on Spark (`scheduler report`, or schedulable as the pyspark program
`scheduler.cli.analytics:report_program`).

The sink exports the run history (run records from the scheduler's HTTP API) and the data events (partition
events from the events topic) as Parquet datasets `scheduler.runs` and `scheduler.data_events`; a PySpark
job then reports per schedule: runs, success rate, trigger-to-start latency, due-to-launch lateness of
time-triggered runs, and runs that found no new data — time-triggered runs of a schedule that names its
input datasets (`inputs` in its data, comma-separated) when none of them got a partition since the
schedule's previous run: the waste cron-only scheduling causes (CDAP user story 3). Output: a Markdown
table and a PNG chart.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Any

import httpx

from scheduler.worker.datasets import dataset_path

_DUE = re.compile(r"@(\d+)$")
RUN_FIELDS = [
    "run_id",
    "program",
    "schedule",
    "status",
    "created_at",
    "triggered_at",
    "started_at",
    "ended_at",
    "due_at",
    "trigger",
    "inputs",
]


def fetch_runs(url: str) -> list[dict[str, Any]]:
    """Every run record the scheduler keeps, flattened for the dataset."""
    rows = []
    with httpx.Client(base_url=url, timeout=30) as client:
        for program in client.get("/programs").json():
            for run in client.get(f"/programs/{program}/runs").json()["runs"]:
                due = _DUE.search(run.get("job_id") or "")
                args = run.get("arguments") or {}
                rows.append(
                    {
                        "run_id": run["run_id"],
                        "program": program,
                        "schedule": run.get("schedule") or "(manual)",
                        "status": run["status"],
                        "created_at": run["created_at"],
                        "triggered_at": run.get("triggered_at"),
                        "started_at": run.get("started_at"),
                        "ended_at": run.get("ended_at"),
                        "due_at": int(due.group(1)) if due else None,
                        "trigger": args.get("trigger.eventType", "time"),
                        "inputs": args.get("inputs", ""),
                    }
                )
    return rows


def fetch_data_events(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Partition and data events on the events topic, from the beginning to now."""
    from aiokafka import AIOKafkaConsumer

    from scheduler.wire.codec import DecodeError, decode

    async def read() -> list[dict[str, Any]]:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                    enable_auto_commit=False, fetch_max_wait_ms=100)  # fmt: skip
        await consumer.start()
        rows: list[dict[str, Any]] = []
        try:
            while True:
                batch = await consumer.getmany(timeout_ms=1500)
                if not batch:
                    return rows
                for records in batch.values():
                    for msg in records:
                        try:
                            n = decode("Notification", msg.value)
                        except DecodeError:
                            continue
                        if n["eventType"] in ("partition", "data") and "datasetId" in n["payload"]:
                            rows.append({"dataset": n["payload"]["datasetId"], "at": n["timestamp"]})
        finally:
            await consumer.stop()

    return asyncio.run(read())


def export(
    spark: Any, runs: list[dict[str, Any]], events: list[dict[str, Any]], root: Path | None = None
) -> None:
    """The sink: the run history and the data events as Parquet datasets."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    run_schema = StructType(
        [StructField(f, LongType() if f.endswith("_at") else StringType()) for f in RUN_FIELDS]
    )
    event_schema = StructType([StructField("dataset", StringType()), StructField("at", LongType())])
    spark.createDataFrame([[r[f] for f in RUN_FIELDS] for r in runs], run_schema).write.mode(
        "overwrite"
    ).parquet(str(dataset_path("scheduler.runs", root)))
    spark.createDataFrame([[e["dataset"], e["at"]] for e in events], event_schema).write.mode(
        "overwrite"
    ).parquet(str(dataset_path("scheduler.data_events", root)))


def analyse(spark: Any, root: Path | None = None) -> list[dict[str, Any]]:
    """Per schedule: runs, success rate, trigger-to-start, lateness, runs that found no new data."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    runs = spark.read.parquet(str(dataset_path("scheduler.runs", root)))
    events = spark.read.parquet(str(dataset_path("scheduler.data_events", root)))
    ordered = Window.partitionBy("schedule").orderBy("created_at")
    runs = runs.withColumn("previous_at", F.lag("created_at").over(ordered))
    inputs = runs.withColumn("input", F.explode_outer(F.split("inputs", ","))).withColumn(
        "input", F.trim("input")
    )
    arrived = (
        inputs.filter((F.col("input") != "") & (F.col("trigger") == "time"))
        .join(events, (events.dataset == inputs.input) & (events.at > F.coalesce("previous_at", F.lit(0))) & (events.at <= inputs.created_at), "left")
        .groupBy("run_id")
        .agg(F.count(events.at).alias("new_data_events"))
    )  # fmt: skip
    report = (
        runs.join(arrived, "run_id", "left")
        .groupBy("schedule")
        .agg(
            F.count("*").alias("runs"),
            F.sum(F.when(F.col("status") == "COMPLETED", 1).otherwise(0)).alias("succeeded"),
            F.sum(F.when(F.col("status") == "FAILED", 1).otherwise(0)).alias("failed"),
            F.avg(F.col("started_at") - F.col("triggered_at")).alias("trigger_to_start_ms"),
            F.max(F.col("started_at") - F.col("triggered_at")).alias("trigger_to_start_max_ms"),
            F.avg(F.when(F.col("due_at").isNotNull(), F.col("created_at") - F.col("due_at"))).alias(
                "lateness_ms"
            ),
            F.sum(F.when(F.col("new_data_events") == 0, 1).otherwise(0)).alias("no_new_data"),
        )
        .orderBy("schedule")
    )
    rows = [r.asDict() for r in report.collect()]
    for r in rows:
        r["success_rate"] = round(r["succeeded"] / r["runs"], 3) if r["runs"] else None
    return rows


def render(rows: list[dict[str, Any]], out_dir: Path) -> tuple[Path, Path]:
    """The report as a Markdown table and a PNG chart."""
    try:
        import matplotlib
    except ImportError as exc:
        raise SystemExit(
            f"matplotlib is not installed ({exc}): pip install 'kafka-job-scheduler[spark]'"
        ) from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)

    def ms(v: float | None) -> str:
        return "" if v is None else f"{v:.0f}"

    lines = [
        "| schedule | runs | succeeded | failed | success rate | trigger→start avg ms | max ms | lateness avg ms | runs with no new data |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['schedule']} | {r['runs']} | {r['succeeded']} | {r['failed']} | {r['success_rate']} | "
            f"{ms(r['trigger_to_start_ms'])} | {ms(r['trigger_to_start_max_ms'])} | {ms(r['lateness_ms'])} | "
            f"{r['no_new_data'] or 0} |"
        )
    table = out_dir / "run-analytics.md"
    table.write_text("\n".join(lines) + "\n")
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, max(3, 0.5 * len(rows) + 2)))
    names = [r["schedule"] for r in rows]
    y = range(len(rows))
    left.barh([i - 0.2 for i in y], [r["succeeded"] for r in rows], height=0.4, label="succeeded")
    left.barh([i + 0.2 for i in y], [r["no_new_data"] or 0 for r in rows], height=0.4, label="no new data")
    left.set_yticks(list(y), names)
    left.set_xlabel("runs")
    left.legend()
    right.barh(names, [r["trigger_to_start_ms"] or 0 for r in rows])
    right.set_xlabel("trigger → start, ms (avg)")
    fig.tight_layout()
    chart = out_dir / "run-analytics.png"
    fig.savefig(chart, dpi=100)
    plt.close(fig)
    return table, chart


def run_report(spark: Any, url: str, bootstrap: str, events_topic: str, out_dir: Path) -> tuple[Path, Path]:
    export(spark, fetch_runs(url), fetch_data_events(bootstrap, events_topic))
    rows = analyse(spark)
    table, chart = render(rows, out_dir)
    print(table.read_text(), end="")
    print(f"chart: {chart}")
    return table, chart


def report_program(spark: Any, args: dict[str, str]) -> None:
    """The report as a scheduled pyspark program: args `url` (the scheduler's HTTP), `out` (a directory)."""
    run_report(
        spark,
        args.get("url", "http://127.0.0.1:6066"),
        os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
        os.environ.get("SCHEDULER_EVENTS_TOPIC", "scheduler-events"),
        Path(args.get("out", str(dataset_path("scheduler.reports")))),
    )


def main(url: str, bootstrap: str, events_topic: str, out_dir: Path) -> None:
    from scheduler.launcher.spark_runner import spark_session

    spark = spark_session("scheduler-report")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        run_report(spark, url, bootstrap, events_topic, out_dir)
    finally:
        spark.stop()


__all__ = ["main", "report_program"]
