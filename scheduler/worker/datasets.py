"""Partitioned datasets for pipelines: write partitions of a Parquet dataset with Spark and, once the write
committed, publish the "partition added" event (dataset, partition keys, bytes) that partition and
data-size triggers fire on.

A dataset `<namespace>.<name>` lives under SCHEDULER_DATASETS_DIR/<namespace>/<name>/, partitioned
Hive-style (`day=2026-11-22/`). Events go to SCHEDULER_EVENTS_TOPIC on KAFKA_BOOTSTRAP_SERVERS, both set
by the launcher for the programs it runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler.domain.events import dataset_key, validate_dataset


@dataclass(frozen=True)
class PartitionsWritten:
    dataset: str
    partition_keys: list[str]
    bytes: int


def datasets_root(root: str | Path | None = None) -> Path:
    return Path(root or os.environ.get("SCHEDULER_DATASETS_DIR") or "data/datasets")


def dataset_path(dataset: str, root: str | Path | None = None) -> Path:
    validate_dataset(dataset)
    namespace, name = dataset.split(".", 1)
    return datasets_root(root) / namespace / name


def write_partitions(
    df: Any,
    dataset: str,
    partition_by: list[str],
    *,
    root: str | Path | None = None,
    publish: bool = True,
) -> PartitionsWritten:
    """Write `df` partitioned by `partition_by` (replacing those partitions), then announce them in one event."""
    path = dataset_path(dataset, root)
    before = _parquet_files(path)
    df.write.mode("overwrite").option("partitionOverwriteMode", "dynamic").partitionBy(*partition_by).parquet(
        str(path)
    )
    # The partitions written are the directories holding files this write created; their names are
    # Spark's own (it escapes and normalises values), so the event names what is on disk.
    new = [f for f in _parquet_files(path) if f not in before]
    keys = sorted({f.parent.relative_to(path).as_posix() for f in new})
    size = sum(f.stat().st_size for f in new)
    written = PartitionsWritten(dataset, keys, size)
    if publish and keys:
        publish_partitions(written)
    return written


def _parquet_files(path: Path) -> set[Path]:
    return set(path.rglob("*.parquet")) if path.exists() else set()


def read_dataset(spark: Any, dataset: str, root: str | Path | None = None) -> Any:
    return spark.read.parquet(str(dataset_path(dataset, root)))


def publish_partitions(written: PartitionsWritten) -> None:
    publish_event(
        "partition",
        {
            "datasetId": written.dataset,
            "partitionKeys": json.dumps(written.partition_keys),
            "bytes": str(written.bytes),
        },
        key=dataset_key(written.dataset),
    )


def publish_event(event_type: str, payload: dict[str, str], *, key: str) -> None:
    """Produce one Notification to the events topic and wait for the broker (synchronous, for pipelines)."""
    from aiokafka import AIOKafkaProducer

    from scheduler.wire.codec import encode

    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    topic = os.environ.get("SCHEDULER_EVENTS_TOPIC", "scheduler-events")
    value = encode(
        "Notification",
        {"timestamp": time.time_ns() // 1_000_000, "eventType": event_type, "payload": payload},
    )

    async def send() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(topic, value, key=key.encode())
        finally:
            await producer.stop()

    asyncio.run(send())
