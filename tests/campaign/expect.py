"""The campaign's schedules and, independently of the scheduler (not from its /next, nor through its
cron library), every instant each one must fire: frequencies from their start, 6-field cron expressions on
second, minute and hour matched against the local time of their zone, one-shot instants, and bounded
schedules (notBefore/notAfter). All use the EACH catch-up policy, so every instant must fire: late is
allowed, missing is not; but those sent as light-scheduler TaskDefinitions, which cannot say so, COALESCE.
Event-driven schedules (a partition trigger, a program, a delay constraint) have no instants: each event
sent to their dataset must be in exactly one launch request."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from scheduler.domain.model import Action, ScheduleCommand, ScheduleKey
from scheduler.http.api import ScheduleIn
from tests.helpers import light_encode

TENANT = "campaign"
#: (a cron expression's second field, its zone): the hour field is made to hold the zone's local hour now
CRON_ZONES = (
    ("*/2", "Europe/Paris"),
    ("*/3", "Asia/Kolkata"),  # (+05:30: a wrong zone moves the hour)
    ("1,31", "Australia/Adelaide"),  # (+09:30 or +10:30)
    ("*/5", "America/New_York"),
    ("*/4", "Asia/Kathmandu"),  # (+05:45)
)


@dataclass(frozen=True)
class Definition:
    name: str
    kind: str
    trigger: dict[str, Any]
    not_before: int  # epoch ms: the first instant that must fire is the first one at or after it
    not_after: int | None = None
    program: str | None = None  # (event-driven: launched, through a delay constraint)
    max_fires: int | None = None  # (limited: its first this many instants fire, then none)

    def body(self, topic: str, data: dict[str, str] | None = None) -> dict[str, Any]:
        """Its HTTP body (POST /schedules)."""
        body: dict[str, Any] = {
            "tenant": TENANT, "name": self.name, "trigger": self.trigger, "topic": topic, "enabled": True,
            "data": data or {},
        }  # fmt: skip
        if self.program is not None:
            return {**body, "program": self.program, "constraints": [{"type": "delay", "delayMs": 1000}]}
        body.update(catchUp="EACH", notBefore=self.not_before)
        if self.not_after is not None:
            body["notAfter"] = self.not_after
        if self.max_fires is not None:
            body["maxFires"] = self.max_fires
        return body

    def task_definition(self, topic: str) -> tuple[bytes, bytes]:
        """Its INSERT as light-scheduler sends it (key, value): a frequency from its start, enabled."""
        t = self.trigger
        key = {"host": TENANT, "name": self.name}
        value = {**key, "action": "INSERT", "frequency": {"timeUnit": t["timeUnit"], "time": t["time"]},
                 "topic": topic, "start": t["start"], "data": None}  # fmt: skip
        return light_encode("TaskDefinitionKey", key), light_encode("TaskDefinition", value)

    def command(self, topic: str) -> ScheduleCommand:
        """Its INSERT on the commands topic (the same definition as the HTTP body)."""
        key = ScheduleKey(TENANT, self.name)
        return ScheduleCommand(
            key, Action.INSERT, ScheduleIn.model_validate(self.body(topic)).to_schedule(key)
        )

    def expected(
        self, hi: int, since: int = 0, coalesced: bool = False, windows: Sequence[tuple[int, int]] = ()
    ) -> list[int]:
        """Every instant it must fire before hi, from `since` (when it was applied: the scheduler fires no
        instant before its schedule existed); `coalesced` (COALESCE), but those in a fault's window."""
        instants = self.instants(since, hi)
        if coalesced:
            instants = [t for t in instants if not any(lo <= t < end for lo, end in windows)]
        return instants

    def instants(self, lo: int, hi: int) -> list[int]:
        """Every instant it must fire in [lo, hi) (epoch ms); a limited one's, of its first max_fires from lo."""
        lo = max(lo, self.not_before)
        if self.not_after is not None:
            hi = min(hi, self.not_after + 1)
        if lo >= hi:
            return []
        if self.max_fires is not None:
            end = lo + (self.max_fires + 1) * 1000 * self.trigger["time"]  # (past its last instant)
            return [t for t in _instants(self.trigger, lo, end)[: self.max_fires] if t < hi]
        return _instants(self.trigger, lo, hi)

    def beyond(self, fired: Sequence[int], since: int) -> list[int]:
        """Instants it fired that it must not have: a limited one's past its first max_fires."""
        if self.max_fires is None:
            return []
        allowed = set(self.instants(since, max(fired, default=since) + 1))
        return sorted(t for t in fired if t not in allowed)


def _instants(t: dict[str, Any], lo: int, hi: int) -> list[int]:
    """Every instant of trigger `t` in [lo, hi)."""
    if t["type"] == "partition":
        return []  # (its events are checked)
    if t["type"] == "or":  # (each instant once, whichever of its triggers makes it)
        return sorted({d for leaf in t["triggers"] for d in _instants(leaf, lo, hi)})
    if t["type"] == "once":
        return [t["at"]] if lo <= t["at"] < hi else []
    if t["type"] == "frequency":
        period = t["time"] * 1000
        first = t["start"] + max(0, -(-(lo - t["start"]) // period)) * period
        return list(range(first, hi, period))
    seconds, minutes, hours = t["expression"].split()[:3]
    zone = ZoneInfo(t["timezone"])
    out = []
    for s in range(-(-lo // 1000), -(-hi // 1000)):
        local = datetime.fromtimestamp(s, UTC).astimezone(zone)
        if (
            _matches(seconds, local.second)
            and _matches(minutes, local.minute)
            and _matches(hours, local.hour)
        ):
            out.append(s * 1000)
    return out


def _matches(field: str, value: int) -> bool:
    """A cron field of *, */n, a, a-b, a-b/n and lists of them (the forms the campaign writes)."""
    for part in field.split(","):
        step = 1
        if "/" in part:
            part, raw = part.split("/")
            step = int(raw)
        if part == "*":
            low, high = 0, 59
        elif "-" in part:
            low, high = (int(x) for x in part.split("-"))
        else:
            low = high = int(part)
        if low <= value <= high and (value - low) % step == 0:
            return True
    return False


def definitions(
    kinds: dict[str, int],
    not_before: int,
    horizon_s: float,
    rnd: random.Random,
    later: random.Random | None = None,
) -> list[Definition]:
    """`kinds[kind]` schedules of each kind, the first instant of each at or after not_before, their instants
    within horizon_s of it (`later`: what the kinds added later draw, plan.LATER_KINDS)."""
    later = later or random.Random(0)
    out: list[Definition] = []
    base = not_before - not_before % 1000
    for kind, n in kinds.items():
        for i in range(n):
            name = f"{kind}-{i:04d}"
            if kind == "frequency":
                every = rnd.choice((1, 2, 3, 5))
                trigger = {"type": "frequency", "timeUnit": "SECONDS", "time": every,
                           "start": base - rnd.randrange(every) * 1000}  # fmt: skip
                out.append(Definition(name, kind, trigger, not_before))
            elif kind == "cron_zone":
                second, zone = rnd.choice(CRON_ZONES)
                hour = datetime.fromtimestamp(not_before / 1000, UTC).astimezone(ZoneInfo(zone)).hour
                hours = f"{hour},{(hour + 1) % 24}"  # (a campaign lasts well under an hour)
                trigger = {"type": "cron", "expression": f"{second} * {hours} * * *", "timezone": zone}
                out.append(Definition(name, kind, trigger, not_before))
            elif kind == "once":
                at = base + 1000 * rnd.randrange(1, max(2, int(horizon_s))) + rnd.randrange(1000)
                out.append(Definition(name, kind, {"type": "once", "at": at}, not_before))
            elif kind == "event":
                trigger = {"type": "partition", "dataset": f"{TENANT}.ds{i:03d}", "minPartitions": 1}
                program = f"{TENANT}/camp/workflow/p{i:03d}"
                out.append(Definition(name, kind, trigger, not_before, program=program))
            elif kind == "bounded":
                until = not_before + 1000 * rnd.randrange(5, max(6, int(horizon_s)))
                trigger = {"type": "frequency", "timeUnit": "SECONDS", "time": 1, "start": base}
                out.append(Definition(name, kind, trigger, not_before, until))
            elif kind == "union":
                a, b = later.sample((2, 3, 4, 5), 2)
                leaves = [{"type": "frequency", "timeUnit": "SECONDS", "time": every,
                           "start": base - later.randrange(every) * 1000} for every in (a, b)]  # fmt: skip
                out.append(Definition(name, kind, {"type": "or", "triggers": leaves}, not_before))
            elif kind == "limited":
                every = later.choice((1, 2))
                trigger = {"type": "frequency", "timeUnit": "SECONDS", "time": every, "start": base}
                n = later.randint(3, max(4, int(horizon_s) // (2 * every)))
                out.append(Definition(name, kind, trigger, not_before, max_fires=n))
            else:
                raise ValueError(kind)
    return out
