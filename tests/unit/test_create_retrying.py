"""A topic's creation is retried while the controller it went to is away (kafka.config.create_retrying):
a worker that started while the controller was SIGKILLed died at start (the fault campaign, seed 4000)."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.errors import InvalidReplicationFactorError, NodeNotReadyError, TopicAlreadyExistsError

from scheduler.kafka.config import create_retrying

pytestmark = pytest.mark.unit


class Client:
    def __init__(self) -> None:
        self.refreshed = 0

    async def force_metadata_update(self) -> bool:
        self.refreshed += 1
        return True


def failing(*errors: BaseException) -> tuple[list[int], Any]:
    calls: list[int] = []

    async def create() -> None:
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]

    return calls, create


async def test_a_controller_away_is_waited_for() -> None:
    client = Client()
    calls, create = failing(
        NodeNotReadyError("node 3 not ready"),
        RuntimeError("Invalid controller: 3"),
        InvalidReplicationFactorError("3 > 2 brokers"),
    )
    await create_retrying(create, client, "app-__assignor-__leader", pause_s=0.01)
    assert len(calls) == 4 and client.refreshed == 3


async def test_any_other_error_is_raised_at_once() -> None:
    calls, create = failing(TopicAlreadyExistsError("exists"))
    with pytest.raises(TopicAlreadyExistsError):
        await create_retrying(create, Client(), "t", pause_s=0.01)
    assert len(calls) == 1


async def test_a_controller_away_for_too_long_fails_the_start() -> None:
    calls, create = failing(*[NodeNotReadyError("node 3 not ready")] * 100)
    with pytest.raises(NodeNotReadyError):
        await create_retrying(create, Client(), "t", retry_s=0.05, pause_s=0.01)
    assert 2 <= len(calls) < 100
