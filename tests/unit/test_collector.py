"""The worker's collector thresholds (scheduler/worker/collector.py)."""

from __future__ import annotations

import gc

import pytest

from scheduler.worker.collector import YOUNG_THRESHOLD, tune_collector

pytestmark = pytest.mark.unit


def test_a_worker_collects_its_youngest_generation_less_often_and_leaves_the_older_ones_as_they_were():
    before = gc.get_threshold()
    gc.set_threshold(700, 11, 12)
    try:
        tune_collector()
        assert gc.get_threshold() == (YOUNG_THRESHOLD, 11, 12)
        assert YOUNG_THRESHOLD > 700
    finally:
        gc.set_threshold(*before)
