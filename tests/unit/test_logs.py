"""Logs an operator can trust (scheduler/worker/logs.py): what a Kafka client retries by itself is a
WARNING, at most one line per kind a minute with how many more there were; what needs a human stays ERROR."""

from __future__ import annotations

import logging

import pytest

from scheduler.worker.logs import TRANSIENT, TransientErrors, quiet_transients

pytestmark = pytest.mark.unit


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def _record(name: str, level: int, msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord(name, level, "x.py", 1, msg, args, None)


def test_a_retried_client_error_is_a_warning_once_a_window_with_how_many_more() -> None:
    clock = Clock()
    quiet = TransientErrors(window_s=60, clock=clock)
    fetch = "Failed fetch offsets from %s: %s"
    first = _record("aiokafka.consumer.fetcher", logging.ERROR, fetch, 1, "NotLeaderForPartitionError")
    assert quiet.filter(first) and first.levelname == "WARNING" and first.levelno == logging.WARNING
    for t in range(1, 6):
        clock.now = t
        assert not quiet.filter(_record("aiokafka.consumer.fetcher", logging.ERROR, fetch, 1, "x"))
    # another kind is a line of its own
    other = _record("aiokafka.client", logging.ERROR, "Unable connect to node with id %s: %s", 2, "refused")
    assert quiet.filter(other) and other.levelname == "WARNING"
    clock.now = 61
    later = _record("aiokafka.consumer.fetcher", logging.ERROR, fetch, 3, "NotLeaderForPartitionError")
    assert quiet.filter(later)
    assert later.getMessage() == (
        "Failed fetch offsets from 3: NotLeaderForPartitionError (5 more like it in the last 61 s)"
    )


@pytest.mark.parametrize(
    ("name", "msg"),
    [
        ("aiokafka.consumer.group_coordinator", "Unexpected error in coordinator routine"),
        ("aiokafka.consumer.fetcher", "Unexpected error in fetcher routine"),
        ("scheduler.worker.punctuator", "Failed fetch offsets from %s: %s"),  # (the kind is per logger)
    ],
)
def test_what_needs_a_human_stays_an_error_every_time(name: str, msg: str) -> None:
    quiet = TransientErrors(window_s=60, clock=Clock())
    for _ in range(3):
        record = _record(name, logging.ERROR, msg, 1, 2)
        assert quiet.filter(record) and record.levelname == "ERROR"


def test_the_filter_is_on_the_loggers_that_log_transients_once(caplog: pytest.LogCaptureFixture) -> None:
    quiet_transients()
    quiet = quiet_transients()  # (again: still one filter per logger)
    logger = logging.getLogger("aiokafka.consumer.group_coordinator")
    try:
        assert sum(isinstance(f, TransientErrors) for f in logger.filters) == 1
        with caplog.at_level(logging.INFO):
            for _ in range(10):
                logger.error("Group Coordinator Request failed: %s", "GroupCoordinatorNotAvailableError")
    finally:
        for name in TRANSIENT:
            logging.getLogger(name).removeFilter(quiet)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "Group Coordinator Request failed: GroupCoordinatorNotAvailableError")
    ]
