"""What a seed chooses: the cluster, how the workers start, how commands arrive, the schedules' kinds, and
the faults with their times. Everything random comes from the seed, so a failure is replayed by its seed."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

START_MODES = ("together", "one_by_one", "during_load", "joins_mid_run")
PATHS = ("topic", "http", "light")  # light: light-scheduler's TaskDefinitions (frequencies only)
KINDS = ("frequency", "cron_zone", "once", "bounded", "event")  # event: a partition trigger, program, delay
#: kinds added later, drawn from a Random of their own so that the seeds' other draws stay as they were:
#: union = an OR of two frequencies (each instant once), limited = every second with maxFires
LATER_KINDS = ("union", "limited")
WORKER_FAULTS = ("kill", "pause", "cut")  # cut: the worker's network (tests.netns) down both ways
BROKER_FAULTS = ("broker_kill", "controller_kill", "broker_pause")


@dataclass(frozen=True)
class Fault:
    kind: str  # kill, pause, cut (a worker: SIGKILL + restart, SIGSTOP or no network past the session), ...
    at_s: float  # after the fault phase began
    lasts_s: float  # down, paused
    victim: int  # a worker's index, or a broker's node id (0: the active controller, chosen then)


@dataclass(frozen=True)
class Plan:
    seed: int
    workers: int
    standby: int
    brokers: int
    start: str
    paths: tuple[str, ...]  # how the schedules arrive (each schedule by one of them)
    kinds: dict[str, int]  # schedules of each kind
    updates: bool  # definitions updated over HTTP throughout the fault phase
    duration_s: float
    faults: tuple[Fault, ...] = field(default_factory=tuple)

    @property
    def cuts(self) -> bool:
        """Whether it cuts a worker's network (its workers run in network namespaces of their own)."""
        return any(f.kind == "cut" for f in self.faults)

    def describe(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        faults = ", ".join(f"{f.kind}@{f.at_s:.0f}s/{f.lasts_s:.0f}s#{f.victim}" for f in self.faults)
        kinds = " ".join(f"{k}={n}" for k, n in self.kinds.items())
        return (
            f"seed {self.seed}: {self.workers} workers ({self.start}), standby {self.standby}, "
            f"{self.brokers} broker(s), via {'+'.join(self.paths)}, {kinds}, "
            f"updates {'on' if self.updates else 'off'}, {self.duration_s:.0f} s: {faults or 'no fault'}"
        )


def later_random(seed: int) -> random.Random:
    """The Random of what was added to the campaign later (LATER_KINDS and their definitions)."""
    return random.Random(seed * 1_000_003 + 7)


def choose(
    seed: int,
    duration_s: float,
    *,
    brokers: int | None = None,
    scale: float = 1.0,
    workers: int | None = None,
    start: str | None = None,
    paths: tuple[str, ...] | None = None,
    kinds: dict[str, int] | None = None,
    fault_kinds: tuple[str, ...] | None = None,
) -> Plan:
    """The plan of `seed`; what is given is fixed, the rest chosen (`scale`: the schedules' number)."""
    rnd = random.Random(seed)
    chosen_workers = rnd.randint(2, 4)
    chosen_brokers = rnd.choice((1, 3))
    chosen_start = rnd.choice(START_MODES)
    chosen_paths = tuple(p for p in PATHS if rnd.random() < 0.7) or (rnd.choice(PATHS),)
    chosen_kinds = {k: max(1, int(rnd.randint(20, 80) * scale)) for k in KINDS}
    chosen_kinds["once"] = max(1, chosen_kinds["once"] // 4)
    chosen_kinds["event"] = max(1, chosen_kinds["event"] // 6)  # (each gets events all along)
    standby = rnd.choice((0, 1))
    updates = rnd.random() < 0.7  # (all but the faults drawn first: the duration changes only those)
    later = later_random(seed)
    chosen_kinds.update({k: max(1, int(later.randint(10, 40) * scale)) for k in LATER_KINDS})
    workers = workers or chosen_workers
    n_brokers = brokers or chosen_brokers
    start = start or chosen_start
    paths = paths or chosen_paths
    kinds = kinds or chosen_kinds
    kinds_allowed = fault_kinds or WORKER_FAULTS + (BROKER_FAULTS if n_brokers == 3 else ())
    if n_brokers == 1 and set(kinds_allowed) & set(BROKER_FAULTS):
        raise ValueError("broker faults need 3 brokers")
    faults: list[Fault] = []
    t = rnd.uniform(5, 12)
    while t < duration_s - 20:
        kind = rnd.choice(kinds_allowed)
        lasts = {"kill": rnd.uniform(1, 6), "pause": rnd.uniform(8, 16), "cut": rnd.uniform(8, 16)}.get(
            kind, rnd.uniform(4, 12)
        )
        victim = rnd.randrange(workers) if kind in WORKER_FAULTS else rnd.randint(1, n_brokers)
        faults.append(Fault(kind, round(t, 1), round(lasts, 1), victim))
        t += lasts + rnd.uniform(12, 25)  # (the next after the last one healed and settled a little)
    return Plan(
        seed=seed,
        workers=workers,
        standby=standby,
        brokers=n_brokers,
        start=start,
        paths=paths,
        kinds=kinds,
        updates=updates,
        duration_s=duration_s,
        faults=tuple(faults),
    )
