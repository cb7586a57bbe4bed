"""The worker's long-running services, started with its Faust app: the loops' watchdog and the freeze guard
(from the app's start), and the timers, followers and loops that run once partitions are taken up.
"""

from __future__ import annotations

from typing import Any

from mode import Service

from scheduler.domain.model import TimeUnit
from scheduler.kafka.recovery import watch_recovery
from scheduler.worker.freeze import FreezeGuard
from scheduler.worker.liveness import Liveness
from scheduler.worker.ports import ServicesPort


class Watchdog(Service):
    """The loops' watchdog (liveness.py) and the freeze guard (freeze.py), started with the app: before its
    first assignment is taken up too."""

    def __init__(self, liveness: Liveness, freezes: FreezeGuard, **kwargs: Any) -> None:
        self.liveness = liveness
        self.freezes = freezes
        super().__init__(**kwargs)

    async def on_start(self) -> None:
        self.freezes.start()
        self.add_future(self.liveness.run())

    async def on_stop(self) -> None:
        self.freezes.stop()


class Timers(Service):
    """Runs the per-time-unit punctuator timers and the progress flusher with the app."""

    def __init__(self, worker: ServicesPort, **kwargs: Any) -> None:
        self.worker = worker
        self._firing = False
        super().__init__(**kwargs)

    def start_firing(self) -> None:
        """The punctuator's timers and what commits their fires, once: when the first partition is taken
        up, or when this service starts, whichever comes first. Faust starts this service only after its
        first recovery, which ends when every partition is taken up (each caught up from its index): a
        restarted worker with a million schedules due would otherwise fire nothing for the half minute
        its eight partitions take, instead of firing each one once it is taken up."""
        if self._firing:
            return
        self._firing = True
        p = self.worker.punctuator
        for unit in TimeUnit:
            self.add_future(p.run_timer(unit))
        txns = self.worker.txns
        if txns is None:
            self.add_future(p.run_progress(self.worker.settings.progress_interval_ms / 1000))
        else:
            self.add_future(txns.run())

    async def on_start(self) -> None:
        await self.worker.ensure_own_topics()
        self.start_firing()
        self.add_future(self.worker.jobs.checker.run())
        self.add_future(self.worker.delayed_messages.run())
        self.add_future(self.worker.registry.start())
        self.add_future(self.worker.calendars.start())
        self.add_future(self.worker.notifications.start())
        self.add_future(self.worker.sensors.start())
        self.add_future(self.worker.retention.start())
        self.add_future(self.worker.ingest.run())
        self.add_future(watch_recovery(self.worker.faust_app))
        if self.worker.settings.launcher == "embedded":
            from scheduler.launcher.launcher import Launcher

            settings = self.worker.settings  # (its runs' output is read from this worker's HTTP)
            self.launcher = Launcher(settings, self.worker.registry, logs_url=settings.web_url)
            self.worker.liveness.watch(self.launcher.launches)
            self.add_future(self.launcher.run())

    async def on_stop(self) -> None:
        self.worker.delayed_messages.stop()
        launcher = getattr(self, "launcher", None)
        if launcher is not None:
            await launcher.stop()
        await self.worker.stop()
