"""The commands ingest outlives a broker it cannot reach (it keeps its partitions waiting and retries), and
freezes what the commands it applied built."""

from __future__ import annotations

import asyncio
import gc
import logging
from types import SimpleNamespace

import pytest

from scheduler.broker import free_port
from scheduler.config import Settings
from scheduler.ingest import FREEZE_AFTER, CommandIngest
from scheduler.producer import TopicCreator

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


async def test_an_assignment_waits_and_retries_while_the_broker_cannot_be_reached(caplog) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"  # nothing listens there
    settings = Settings(app_id="nobroker", bootstrap_servers=bootstrap, commands_topic="nobroker-commands")
    worker = SimpleNamespace(settings=settings, topics=TopicCreator(bootstrap, 4, 1), progress_db=dict)
    ingest = CommandIngest(worker)
    caplog.set_level(logging.WARNING, logger="scheduler.ingest")
    run = asyncio.ensure_future(ingest.run())
    try:
        await ingest.assign({0, 1})
        for _ in range(100):
            if sum("could not take the commands partitions" in r.message for r in caplog.records) >= 2:
                break
            await asyncio.sleep(0.1)
        assert not run.done(), run  # alive, not crashed
        assert sum("could not take the commands partitions" in r.message for r in caplog.records) >= 2
        assert ingest._wanted == {0, 1}  # still to be taken
        await ingest.revoke({1})
        assert ingest._wanted == {0}
    finally:
        await ingest.stop()
        await asyncio.wait_for(run, 10)


def test_applied_commands_are_frozen_when_the_topic_is_quiet_or_every_freeze_after() -> None:
    ingest = CommandIngest(SimpleNamespace(settings=Settings(app_id="settle")))
    frozen = gc.get_freeze_count()
    try:
        assert not ingest.settle(quiet=True)  # nothing applied since the last freeze
        ingest.unfrozen = FREEZE_AFTER - 1
        assert not ingest.settle(quiet=False)  # a flow goes on: not yet
        assert ingest.settle(quiet=True)
        assert ingest.unfrozen == 0 and gc.get_freeze_count() > frozen
        ingest.unfrozen = FREEZE_AFTER
        assert ingest.settle(quiet=False)
    finally:
        gc.unfreeze()
