"""The launch requests a launcher takes: one consumer in the launchers' group, which heals or says so.

A consumer with a group id can lose its group coordination for good (aiokafka's coordinator routine dies
on an AssertionError when it is re-assigned during a rebalance: seen on the commands ingest, every fetch
then failing with "Unexpected error during coordination"), or stop handing out records while it holds
partitions. So:
- a turn that fails replaces the consumer after a backoff (0.5 s, doubling to 30 s; logged once per
  failure at WARNING): the old one is stopped (it leaves the group, its partitions go to the other
  launchers), a new one joins and reads on from the committed offsets. A launch read twice is harmless:
  its second claim is refused (see launcher.py);
- the loop is watched (`liveness.Watched`, name `launches`; in a worker with the embedded launcher, by
  the worker's watchdog): launch requests behind the end of its partitions and none taken for the bound
  make it stalled (/health says so), and `heal` replaces the consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import ConsumerStoppedError

from scheduler.kafka.config import Settings
from scheduler.kafka.consumers import isolation
from scheduler.kafka.group import PreviousMembers, member_of
from scheduler.worker.failpoints import failpoint, make_deaf
from scheduler.worker.liveness import Work, fetched_to

log = logging.getLogger(__name__)

FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0


class LaunchRequests:
    """Hands every launch request of the launch topic's partitions this launcher holds to `handle`, and
    commits it once handled."""

    name = "launches"  # (liveness.Watched)

    def __init__(self, settings: Settings, handle: Callable[[bytes | None], Awaitable[None]]) -> None:
        self.settings = settings
        self.handle = handle
        self.taken = 0  # launch requests handled: what the watchdog sees move
        self.replaced = 0  # consumers replaced (failed, or stalled)
        self.started = asyncio.Event()  # a first consumer started (launches are being taken)
        self._consumer: AIOKafkaConsumer | None = None
        self._stale: AIOKafkaConsumer | None = None  # the consumer heal gave up on
        self._closing = False
        self.members = PreviousMembers(settings.data_dir)

    def _new_consumer(self) -> AIOKafkaConsumer:
        s = self.settings
        return AIOKafkaConsumer(
            s.launch_topic,
            bootstrap_servers=s.bootstrap_servers,
            group_id=s.launcher_group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=50,
            **isolation(s.broker_profile),
            session_timeout_ms=10_000,
            heartbeat_interval_ms=1_000,
        )

    async def run(self) -> None:
        """Until stop(): a consumer at a time, replaced when it fails or is found stalled."""
        backoff = FIRST_BACKOFF_S
        while not self._closing:
            consumer = self._new_consumer()
            try:
                await consumer.start()
                deaf = failpoint("launches-deaf")
                if deaf == "always" or (deaf == "once" and self.replaced == 0):
                    make_deaf(consumer)
                self._consumer = consumer
                self.started.set()
                await self._take(consumer)
                backoff = FIRST_BACKOFF_S  # (replaced by heal, or stopping)
            except ConsumerStoppedError:
                pass  # (stopped by heal or stop)
            except Exception as exc:
                if self._closing:
                    break
                log.warning("the launches consumer failed (%r): a new one in %.1f s", exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
            finally:
                self._consumer = None
                with contextlib.suppress(Exception):
                    await consumer.stop()  # (leaves the group: the other launchers take its partitions)
            if not self._closing:
                self.replaced += 1

    async def _take(self, consumer: AIOKafkaConsumer) -> None:
        while not self._closing and self._stale is not consumer:
            batch = await consumer.getmany(timeout_ms=500)
            self.members.remember(member_of(consumer))  # (see kafka/group.py)
            for tp, records in batch.items():
                for msg in records:
                    if self._closing or self._stale is consumer:
                        return  # (the rest is read again from the committed offset)
                    await self.handle(msg.value)
                    await consumer.commit({tp: msg.offset + 1})  # once its claim is sent
                    self.taken += 1

    async def stop(self) -> None:
        self._closing = True
        consumer = self._consumer
        if consumer is not None:
            await consumer.stop()

    async def work(self) -> Work:
        """Launch requests behind the end of the partitions held, counting from where the consumer is."""
        consumer = self._consumer
        what = "launch requests behind the end of the launch topic"
        if consumer is None:
            return Work(0, self.taken, what)
        tps = sorted(consumer.assignment())
        ends = await consumer.end_offsets(tps) if tps else {}
        behind = 0
        for tp, end in ends.items():
            at = fetched_to(consumer, tp)
            if at is not None:  # (no position yet: nothing known to wait)
                behind += max(0, end - at)
        return Work(behind, self.taken, what)

    async def heal(self) -> bool:
        """Replace the consumer: the loop stops taking from it and starts a new one."""
        consumer = self._consumer
        if consumer is None or self._closing:
            return False
        self._stale = consumer
        with contextlib.suppress(Exception):
            await consumer.stop()
        return True
