"""The campaign's schedules and, independently of the scheduler (not from its /next, nor through its
cron library), every instant each one must fire: frequencies from their start, 6-field cron expressions on
second, minute and hour matched against the local time of their zone, one-shot instants, and bounded
schedules (notBefore/notAfter). All use the EACH catch-up policy, so every instant must fire: late is
allowed, missing is not."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from scheduler.domain.model import Action, ScheduleCommand, ScheduleKey
from scheduler.http.api import ScheduleIn

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

    def body(self, topic: str, data: dict[str, str] | None = None) -> dict[str, Any]:
        """Its HTTP body (POST /schedules)."""
        body: dict[str, Any] = {
            "tenant": TENANT, "name": self.name, "trigger": self.trigger, "topic": topic, "enabled": True,
            "catchUp": "EACH", "notBefore": self.not_before, "data": data or {},
        }  # fmt: skip
        if self.not_after is not None:
            body["notAfter"] = self.not_after
        return body

    def command(self, topic: str) -> ScheduleCommand:
        """Its INSERT on the commands topic (the same definition as the HTTP body)."""
        key = ScheduleKey(TENANT, self.name)
        return ScheduleCommand(
            key, Action.INSERT, ScheduleIn.model_validate(self.body(topic)).to_schedule(key)
        )

    def instants(self, lo: int, hi: int) -> list[int]:
        """Every instant it must fire in [lo, hi) (epoch ms)."""
        lo = max(lo, self.not_before)
        if self.not_after is not None:
            hi = min(hi, self.not_after + 1)
        if lo >= hi:
            return []
        t = self.trigger
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
    kinds: dict[str, int], not_before: int, horizon_s: float, rnd: random.Random
) -> list[Definition]:
    """`kinds[kind]` schedules of each kind, the first instant of each at or after not_before, their instants
    within horizon_s of it."""
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
            elif kind == "bounded":
                until = not_before + 1000 * rnd.randrange(5, max(6, int(horizon_s)))
                trigger = {"type": "frequency", "timeUnit": "SECONDS", "time": 1, "start": base}
                out.append(Definition(name, kind, trigger, not_before, until))
            else:
                raise ValueError(kind)
    return out
