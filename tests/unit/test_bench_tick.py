"""The tick benchmark fires what it says it measures (it reports CPU per fire: the count must be right)."""

from __future__ import annotations

import gc

import pytest

from tests.bench.tick import tick_cpu

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("collector", ["tuned", "default", "off"])
async def test_every_schedule_fires_once_a_tick_and_the_collector_is_given_back_as_it_was(collector):
    before = gc.get_threshold(), gc.isenabled(), gc.get_freeze_count()
    row = await tick_cpu(300, ticks=4, rounds=2, collector=collector)
    assert row["fires"] == 300 * 4 and row["collector"] == collector
    assert row["cpu_us_per_fire"] > 0
    assert (gc.get_threshold(), gc.isenabled()) == before[:2] and gc.get_freeze_count() <= before[2]
