"""Partitioned Parquet datasets: dataset_path, write_partitions (publish=False: no Kafka) and read_dataset,
against one local SparkSession shared by the module."""

from __future__ import annotations

import datetime as dt
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler.domain.model import InvalidSchedule
from scheduler.worker import datasets
from scheduler.worker.datasets import PartitionsWritten, dataset_path, read_dataset, write_partitions

pytestmark = pytest.mark.unit

DATASET = "ns.events"
DAYS = ["2026-11-20", "2026-11-21", "2026-11-22"]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPARK_LOCAL_IP", "127.0.0.1")
        mp.setenv("PYSPARK_PYTHON", sys.executable)  # (Spark's workers: this Python, not the PATH's python3)
        assert os.environ["SPARK_LOCAL_IP"] == "127.0.0.1"
        from pyspark.sql import SparkSession

        session = (
            SparkSession.builder.master("local[1]")
            .appName("scheduler-unit-datasets")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "1")
            .config("spark.default.parallelism", "1")
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("ERROR")
        try:
            yield session
        finally:
            session.stop()


@pytest.fixture(autouse=True)
def no_publishing(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("publish=False must not produce an event")

    monkeypatch.setattr(datasets, "publish_event", refuse)


def events(spark: Any, rows: list[tuple[int, str, str]]) -> Any:
    return spark.createDataFrame(rows, "id INT, day STRING, payload STRING")


def parquet_files(directory: Path) -> set[Path]:
    return set(directory.rglob("*.parquet"))


def rows_of(df: Any) -> set[tuple[Any, ...]]:
    # Spark infers the type of a partition column on read: "2026-11-20" comes back as a date
    return {(r["id"], str(r["day"]), r["payload"]) for r in df.collect()}


INITIAL = [
    (3, "2026-11-22", "c"),  # deliberately not in day order
    (1, "2026-11-20", "a"),
    (2, "2026-11-21", "b"),
    (4, "2026-11-20", "a2"),
]


# --- dataset_path (no Spark) -----------------------------------------------------------------------


def test_dataset_path_under_root(tmp_path: Path) -> None:
    assert dataset_path(DATASET, tmp_path) == tmp_path / "ns" / "events"
    assert dataset_path(DATASET, str(tmp_path)) == tmp_path / "ns" / "events"


def test_dataset_path_name_may_contain_dots(tmp_path: Path) -> None:
    assert dataset_path("ns.events.v2", tmp_path) == tmp_path / "ns" / "events.v2"


def test_dataset_path_defaults_to_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCHEDULER_DATASETS_DIR", str(tmp_path / "from-env"))
    assert dataset_path(DATASET) == tmp_path / "from-env" / "ns" / "events"


def test_dataset_path_without_env_is_relative(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SCHEDULER_DATASETS_DIR", raising=False)
    assert dataset_path(DATASET) == Path("data/datasets/ns/events")


@pytest.mark.parametrize(
    "bad",
    ["events", "", ".events", "ns.", "ns/x.events", "ns.ev/ents", "../ns.events", "ns.ev ents", "n s.events"],
)
def test_dataset_path_rejects_bad_dataset_id(bad: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidSchedule):
        dataset_path(bad, tmp_path)


@pytest.mark.parametrize("bad", ["ns..", "ns..."])
def test_dataset_path_rejects_dot_segment_names(bad: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidSchedule):
        dataset_path(bad, tmp_path)


# --- write_partitions / read_dataset ---------------------------------------------------------------


def test_write_returns_sorted_keys_and_bytes(spark: Any, tmp_path: Path) -> None:
    written = write_partitions(events(spark, INITIAL), DATASET, ["day"], root=tmp_path, publish=False)

    assert isinstance(written, PartitionsWritten)
    assert written.dataset == DATASET
    assert written.partition_keys == [f"day={d}" for d in DAYS]
    base = tmp_path / "ns" / "events"
    for day in DAYS:
        assert parquet_files(base / f"day={day}"), f"no parquet files for {day}"
    assert written.bytes > 0
    assert written.bytes == sum(f.stat().st_size for f in parquet_files(base))


def test_read_dataset_returns_all_rows(spark: Any, tmp_path: Path) -> None:
    write_partitions(events(spark, INITIAL), DATASET, ["day"], root=tmp_path, publish=False)
    df = read_dataset(spark, DATASET, root=tmp_path)
    assert set(df.columns) == {"id", "day", "payload"}
    assert df.count() == len(INITIAL)
    assert rows_of(df) == set(INITIAL)


def test_rewriting_one_day_replaces_only_that_partition(spark: Any, tmp_path: Path) -> None:
    base = tmp_path / "ns" / "events"
    write_partitions(events(spark, INITIAL), DATASET, ["day"], root=tmp_path, publish=False)
    before = {day: parquet_files(base / f"day={day}") for day in DAYS}
    untouched_sizes = {f: f.stat().st_size for day in ("2026-11-20", "2026-11-22") for f in before[day]}

    replacement = [(20, "2026-11-21", "b-new"), (21, "2026-11-21", "b-newer")]
    written = write_partitions(events(spark, replacement), DATASET, ["day"], root=tmp_path, publish=False)

    assert written.partition_keys == ["day=2026-11-21"]
    after_21 = parquet_files(base / "day=2026-11-21")
    assert after_21 and after_21.isdisjoint(before["2026-11-21"])  # old files of that day are gone
    assert written.bytes == sum(f.stat().st_size for f in after_21)
    for day in ("2026-11-20", "2026-11-22"):  # the other days were not touched
        assert parquet_files(base / f"day={day}") == before[day]
    assert {f: f.stat().st_size for f in untouched_sizes} == untouched_sizes

    rows = rows_of(read_dataset(spark, DATASET, root=tmp_path))
    assert rows == {r for r in INITIAL if r[1] != "2026-11-21"} | set(replacement)


def test_writing_a_new_day_adds_a_partition(spark: Any, tmp_path: Path) -> None:
    write_partitions(events(spark, INITIAL), DATASET, ["day"], root=tmp_path, publish=False)
    written = write_partitions(
        events(spark, [(9, "2026-11-23", "d")]), DATASET, ["day"], root=tmp_path, publish=False
    )
    assert written.partition_keys == ["day=2026-11-23"]
    assert rows_of(read_dataset(spark, DATASET, root=tmp_path)) == set(INITIAL) | {(9, "2026-11-23", "d")}


def test_datasets_are_separate(spark: Any, tmp_path: Path) -> None:
    write_partitions(events(spark, INITIAL), DATASET, ["day"], root=tmp_path, publish=False)
    write_partitions(
        events(spark, [(7, "2026-11-20", "x")]), "ns.other", ["day"], root=tmp_path, publish=False
    )
    assert rows_of(read_dataset(spark, DATASET, root=tmp_path)) == set(INITIAL)
    assert rows_of(read_dataset(spark, "ns.other", root=tmp_path)) == {(7, "2026-11-20", "x")}


def test_multi_column_partition_keys(spark: Any, tmp_path: Path) -> None:
    df = spark.createDataFrame(
        [(1, "2026-11-21", "us"), (2, "2026-11-20", "us"), (3, "2026-11-20", "eu"), (4, "2026-11-20", "eu")],
        "id INT, day STRING, region STRING",
    )
    written = write_partitions(df, "ns.sales", ["day", "region"], root=tmp_path, publish=False)
    assert written.partition_keys == [
        "day=2026-11-20/region=eu",
        "day=2026-11-20/region=us",
        "day=2026-11-21/region=us",
    ]
    base = tmp_path / "ns" / "sales"
    for key in written.partition_keys:
        assert parquet_files(base / key)
    assert written.bytes == sum(f.stat().st_size for f in parquet_files(base))


def test_date_and_int_partition_columns(spark: Any, tmp_path: Path) -> None:
    df = spark.createDataFrame(
        [(1, dt.date(2026, 11, 20), 7), (2, dt.date(2026, 11, 21), 12)], "id INT, day DATE, hour INT"
    )
    written = write_partitions(df, "ns.typed", ["day", "hour"], root=tmp_path, publish=False)
    assert written.partition_keys == ["day=2026-11-20/hour=7", "day=2026-11-21/hour=12"]
    assert written.bytes > 0
    base = tmp_path / "ns" / "typed"
    for key in written.partition_keys:
        assert parquet_files(base / key)


@pytest.mark.parametrize(
    ("schema", "value", "directory"),
    [
        ("STRING", "2026-11-20T10:00", "part=2026-11-20T10%3A00"),
        ("BOOLEAN", True, "part=true"),
        ("STRING", None, "part=__HIVE_DEFAULT_PARTITION__"),
    ],
    ids=["colon", "boolean", "null"],
)
def test_keys_and_bytes_match_what_spark_wrote(
    spark: Any, tmp_path: Path, schema: str, value: Any, directory: str
) -> None:
    df = spark.createDataFrame([(1, value)], f"id INT, part {schema}")
    written = write_partitions(df, "ns.odd", ["part"], root=tmp_path, publish=False)
    base = tmp_path / "ns" / "odd"
    assert parquet_files(base / directory)  # where Spark actually put the data
    assert written.bytes > 0
    for key in written.partition_keys:
        assert parquet_files(base / key)


def test_write_rejects_bad_dataset_before_writing(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(InvalidSchedule):
        write_partitions(events(spark, INITIAL), "not-a-dataset", ["day"], root=tmp_path, publish=False)
    assert list(tmp_path.iterdir()) == []
