"""Faust's tables as the worker uses them: bytes to bytes, read and written per partition straight in
RocksDB. The only module that reaches into Faust's RocksDB store (its private members), so a Faust upgrade
that changes them breaks here and nowhere else."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def raw_table(app: Any, name: str, partitions: int) -> Any:
    """A table of bytes to bytes: we encode (Avro) ourselves. Faust would pick json for `bytes`."""
    table: Any = app.Table(name, partitions=partitions, key_type=bytes, value_type=bytes)
    table.key_serializer = table.value_serializer = "raw"
    return table


def partition_db(table: Any, partition: int) -> Any:
    """The RocksDB database of one partition of a table (opened if it was not)."""
    return table.data._db_for_partition(partition)


def opened_partition_db(table: Any, partition: int) -> Any | None:
    """The same if it is open already; None never opens one (a partition not opened has nothing)."""
    return table.data._dbs.get(partition)


def partition_items(table: Any, partition: int) -> Iterator[tuple[bytes, bytes]]:
    """The entries of one partition of a table, without Faust's offset bookkeeping."""
    store = table.data
    yield from store._visible_items(store._db_for_partition(partition))
