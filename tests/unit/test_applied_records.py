"""A changelog record at or below the offset a partition's RocksDB holds is never applied again
(kafka.tables.skip_applied_records), on Faust's own RocksDB store: a record of an active partition that
reached Faust's recovery buffer after its restore ended was flushed at the next revocation over two minutes
of newer state (the fault campaign, seed 3016: a fire watermark went back, 438 fires came again)."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import faust
import pytest
from faust.types import TP

from scheduler.kafka.tables import (
    forget_persisted_offset,
    partition_db,
    raw_table,
    skip_applied_records,
)

pytestmark = pytest.mark.unit

TOPIC = "applied-progress-changelog"


def record(offset: int, key: bytes, value: bytes | None, partition: int = 0) -> Any:
    tp = TP(TOPIC, partition)
    return SimpleNamespace(
        message=SimpleNamespace(tp=tp, topic=TOPIC, partition=partition, offset=offset, key=key, value=value)
    )


@pytest.fixture
def table(tmp_path: Path) -> Any:
    app = faust.App("applied", broker="kafka://127.0.0.1:1", store="rocksdb://", datadir=str(tmp_path))
    table = raw_table(app, "progress", 2)
    skip_applied_records(table)
    return table


def stored(table: Any, key: bytes, partition: int = 0) -> bytes | None:
    return partition_db(table, partition).get(key)


def test_records_past_the_stored_offset_are_applied(table: Any) -> None:
    table.apply_changelog_batch(
        [record(0, b"mark", b"10:00"), record(1, b"mark", b"10:01"), record(2, b"x", b"1")]
    )
    assert stored(table, b"mark") == b"10:01" and stored(table, b"x") == b"1"
    assert table.data.persisted_offset(TP(TOPIC, 0)) == 2


def test_a_record_below_the_stored_offset_changes_nothing(
    table: Any, caplog: pytest.LogCaptureFixture
) -> None:
    table.apply_changelog_batch([record(110, b"mark", b"01:17:44")])
    table.apply_changelog_batch([record(432, b"mark", b"01:19:42")])  # the owner's later commits
    with caplog.at_level(logging.WARNING):
        table.apply_changelog_batch([record(110, b"mark", b"01:17:44")])  # flushed at the next revocation
    assert stored(table, b"mark") == b"01:19:42"
    assert table.data.persisted_offset(TP(TOPIC, 0)) == 432
    assert "partition 0: 1 from offset 110 (stored 432)" in caplog.text


def test_a_batch_applies_only_what_is_past_the_stored_offset_of_each_partition(table: Any) -> None:
    table.apply_changelog_batch([record(5, b"a", b"5"), record(7, b"a", b"7", partition=1)])
    table.apply_changelog_batch(
        [
            record(5, b"a", b"again"),  # (the restore seeks to the stored offset: it comes again)
            record(6, b"a", b"6"),
            record(8, b"a", b"8", partition=1),
            record(6, b"a", b"stale", partition=1),
        ]
    )
    assert stored(table, b"a") == b"6" and stored(table, b"a", partition=1) == b"8"
    assert table.data.persisted_offset(TP(TOPIC, 0)) == 6
    assert table.data.persisted_offset(TP(TOPIC, 1)) == 8


def test_a_partition_whose_offset_was_forgotten_replays_everything(table: Any) -> None:
    table.apply_changelog_batch([record(3, b"a", b"3"), record(4, b"a", b"4")])
    forget_persisted_offset(table, 0)  # (a restore from the start: freeze.py)
    table.apply_changelog_batch([record(0, b"a", b"0"), record(3, b"a", b"3")])
    assert stored(table, b"a") == b"3"
    assert table.data.persisted_offset(TP(TOPIC, 0)) == 3


def test_a_delete_below_the_stored_offset_deletes_nothing(table: Any) -> None:
    table.apply_changelog_batch([record(9, b"a", b"9")])
    table.apply_changelog_batch([record(2, b"a", None)])
    assert stored(table, b"a") == b"9"


@pytest.mark.parametrize("bloom", [False, True])
def test_a_table_asked_for_a_memtable_bloom_filter_opens_its_databases_with_one(
    tmp_path: Path, bloom: bool
) -> None:
    app = faust.App("bloom", broker="kafka://127.0.0.1:1", store="rocksdb://", datadir=str(tmp_path))
    table = raw_table(app, "delayed", 2, memtable_bloom=bloom)
    partition_db(table, 1)[b"k"] = b"v"
    [written] = list(
        Path(table.data.partition_path(1)).glob("OPTIONS-*")
    )  # (RocksDB's record of its options)
    options = written.read_text()
    ratio = "0.020000" if bloom else "0.000000"
    assert f"memtable_prefix_bloom_size_ratio={ratio}" in options
    assert f"memtable_whole_key_filtering={'true' if bloom else 'false'}" in options
