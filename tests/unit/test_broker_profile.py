"""The embedded broker's profile: which fetches count as a table restore (they may wait longer), and the
Faust settings each broker gets."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from aiokafka import TopicPartition

from scheduler.kafka.config import broker_profile
from scheduler.kafka.consumers import (
    FETCH_LOOP_WAKE_MS,
    KAFKA_SETTLE_S,
    TANSU_RESTORE_LAG,
    SettledWaits,
    faust_consumer_options,
    fetched_lags,
    recovery_fetch,
    started,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("lags", "expected"),
    [
        ({"app-schedules-changelog": 12_000, "app-commands": 0}, True),  # a restore: far behind
        ({"app-schedules-changelog": 3, "app-commands": 0}, False),  # at the tail: the short poll
        ({"app-schedules-changelog": None, "app-commands": 0}, False),  # not known before a first fetch
        ({"app-commands": 50_000}, False),  # an agent's backlog is not a restore
        ({"app-schedules-changelog": TANSU_RESTORE_LAG}, False),
        ({"app-schedules-changelog": TANSU_RESTORE_LAG + 1}, True),
        ({}, False),
    ],
)
def test_a_fetch_is_a_restore_while_a_changelog_is_far_behind(
    lags: dict[str, int | None], expected: bool
) -> None:
    assert recovery_fetch(lags) is expected


def _state(position: int | None, highwater: int | None, paused: bool = False) -> SimpleNamespace:
    return SimpleNamespace(
        position=position, highwater=highwater, paused=paused, has_valid_position=position is not None
    )


def test_only_partitions_the_next_fetch_asks_for_count_toward_a_restore() -> None:
    changelog, events = "app-schedules-changelog", "app-events"
    behind = TopicPartition(changelog, 0)
    states = [
        (behind, _state(100, 100 + TANSU_RESTORE_LAG * 4)),
        (TopicPartition(changelog, 1), _state(5, 7)),
        (TopicPartition(events, 0), _state(None, None)),
    ]
    assert fetched_lags(states, buffered=set()) == {changelog: TANSU_RESTORE_LAG * 4, events: None}
    assert recovery_fetch(fetched_lags(states, buffered=set()))
    # a live table's changelog: its last fetch sits unread in the buffer, its lag frozen; not a restore
    assert fetched_lags(states, buffered={behind}) == {changelog: 2, events: None}
    assert not recovery_fetch(fetched_lags(states, buffered={behind}))
    states[0] = (behind, _state(100, 100 + TANSU_RESTORE_LAG * 4, paused=True))
    assert not recovery_fetch(fetched_lags(states, buffered=set()))


def test_changelogs_keep_the_producers_batching_on_every_broker() -> None:
    for profile in ("tansu", "kafka"):
        assert "producer_max_batch_size" not in broker_profile(profile)
    assert broker_profile("tansu")["broker_session_timeout"] <= 10


def test_no_leader_topic_keeps_an_idle_workers_faust_consumer_fetching_on_either_broker() -> None:
    for profile in ("tansu", "kafka"):
        assert broker_profile(profile)["topic_disable_leader"] is True


def test_a_takeover_waits_for_no_long_poll_on_kafka() -> None:
    """A takeover's recovery asks for offsets behind the consumer's fetch in progress (one request of a
    connection at a time), and a rebalance waits for the member that hears of it last: Faust's 1.5 s
    fetch wait and a 3 s heartbeat cost ~6.5 s of a 13.9 s takeover. Fetches wait 100 ms from each new
    assignment until it settled, then 500 ms (an idle worker's empty answers cost it CPU)."""
    assert faust_consumer_options("kafka", read_committed=True) == {
        "fetch_max_wait_ms": 500,
        "consumer_timeout_ms": FETCH_LOOP_WAKE_MS,
        "isolation_level": "read_committed",
    }
    waits, first, second = SettledWaits(), object(), object()
    assert waits.wait_ms(first, now=1_000.0) == 100, "a start: its recovery is the takeover's"
    assert waits.wait_ms(first, now=1_000.0 + KAFKA_SETTLE_S - 1) == 100
    assert waits.wait_ms(first, now=1_000.0 + KAFKA_SETTLE_S) == 500, "settled"
    assert waits.wait_ms(second, now=2_000.0) == 100, "a rebalance: a new assignment"
    assert waits.wait_ms(second, now=2_000.0 + KAFKA_SETTLE_S) == 500
    assert faust_consumer_options("tansu", read_committed=False) == {
        "fetch_max_wait_ms": 10,
        "consumer_timeout_ms": FETCH_LOOP_WAKE_MS,
    }
    kafka = broker_profile("kafka")
    assert kafka["broker_heartbeat_interval"] <= 1 and kafka["broker_session_timeout"] == 10


async def test_topic_creation_asks_each_broker_until_one_answers():
    """Faust asked the first broker only: a worker starting while it restarted died (NodeNotReadyError)."""
    from aiokafka.errors import NodeNotReadyError

    from scheduler.kafka.config import _answering_controller

    asked: list[int] = []

    class Client:
        cluster = SimpleNamespace(brokers=lambda: [SimpleNamespace(nodeId=n) for n in (1, 2, 3)])

        async def send(self, node_id, request):
            asked.append(node_id)
            if node_id == 1:
                raise NodeNotReadyError("restarting")
            return SimpleNamespace(controller_id=3)

        async def force_metadata_update(self):
            return None

    class Owner:
        async def wait(self, coro, timeout):
            return SimpleNamespace(stopped=False, result=await coro)

    assert await _answering_controller(None, Owner(), Client()) == 3
    assert asked == [1, 2]


class _Starting:
    """A consumer's start and stop, as far as `started` uses them."""

    def __init__(self, start_fails: type[BaseException] | None) -> None:
        self.start_fails, self.stopped = start_fails, False

    async def start(self) -> None:
        if self.start_fails is not None:
            raise self.start_fails()

    async def stop(self) -> None:
        self.stopped = True


@pytest.mark.parametrize("fails", [ConnectionError, asyncio.CancelledError])
async def test_a_consumer_whose_start_fails_or_is_cancelled_is_stopped(fails: type[BaseException]) -> None:
    consumer = _Starting(fails)
    with pytest.raises(fails):
        await started(consumer)
    assert consumer.stopped


async def test_a_consumer_that_starts_is_handed_back_running() -> None:
    consumer = _Starting(None)
    assert await started(consumer) is consumer and not consumer.stopped
