"""A page of a table's partition is a RocksDB seek and the steps it reads (kafka.tables.partition_items_from):
the keys of a prefix, in key order, after a cursor; Faust's offset key never among them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rocksdict import Options, Rdict

from scheduler.domain.model import ScheduleKey
from scheduler.kafka.tables import partition_items_from
from scheduler.wire.codec import key_bytes, key_from_bytes, tenant_prefix

pytestmark = pytest.mark.unit

OFFSET_KEY = b"__faust\0offset__"


@pytest.fixture
def table(tmp_path: Path) -> Any:
    db = Rdict(str(tmp_path / "db"), Options(raw_mode=True))
    keys = [
        ScheduleKey(t, n) for t in ("acme", "ac", "beta") for n in ("a", "b", "aa", "z", "feed-10", "feed-9")
    ]
    for key in keys:
        db[key_bytes(key)] = key.id.encode()
    db[OFFSET_KEY] = b"42"
    yield SimpleNamespace(data=SimpleNamespace(offset_key=OFFSET_KEY, _db_for_partition=lambda p: db))
    db.close()


def _ids(items: Any) -> list[str]:
    return [key_from_bytes(k).id for k, _ in items]


def test_a_tenant_prefix_holds_its_keys_alone_shorter_names_first(table: Any) -> None:
    ids = _ids(partition_items_from(table, 0, tenant_prefix("acme")))
    assert ids == ["acme/a", "acme/b", "acme/z", "acme/aa", "acme/feed-9", "acme/feed-10"]
    assert _ids(partition_items_from(table, 0, tenant_prefix("ac"))) == [i.replace("acme", "ac") for i in ids]


def test_a_cursor_starts_after_its_key_and_every_key_comes_once(table: Any) -> None:
    every = list(partition_items_from(table, 0, b""))
    assert OFFSET_KEY not in [k for k, _ in every] and len(every) == 18
    for i, (key, _) in enumerate(every):
        assert list(partition_items_from(table, 0, b"", after=key)) == every[i + 1 :]
    # a cursor before the prefix starts at the prefix; one past it reads nothing
    beta = tenant_prefix("beta")
    assert _ids(partition_items_from(table, 0, beta, after=key_bytes(ScheduleKey("ac", "z"))))[0] == "beta/a"
    assert (
        list(partition_items_from(table, 0, tenant_prefix("ac"), after=key_bytes(ScheduleKey("beta", "a"))))
        == []
    )
