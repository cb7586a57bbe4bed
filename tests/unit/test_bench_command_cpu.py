"""The command-path benchmark applies what it says it measures (it reports CPU per command: every INSERT
must be applied, else it raises), with transactions and without; and so does its delayed-records mode (every
record held and in RocksDB)."""

from __future__ import annotations

import pytest

from tests.bench.command_cpu import command_cpu

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("transactions", [False, True])
async def test_every_insert_is_applied_and_its_cpu_counted(transactions: bool):
    row = await command_cpu(300, rounds=2, transactions=transactions)
    assert row["commands"] == 300 and len(row["each_round_us"]) == 2
    assert row["transactions"] is transactions
    assert row["cpu_us_per_command"] == min(row["each_round_us"]) > 0


async def test_every_delayed_record_is_held_and_its_cpu_counted():
    row = await command_cpu(300, rounds=1, delayed=True)
    assert row["records"] == "delayed" and row["transactions"] is True
    assert row["cpu_us_per_command"] == row["each_round_us"][0] > 0
