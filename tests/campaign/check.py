"""What the campaign checks in the records it read (read_committed), apart from how a seed runs them:
fired instants per schedule, events in launch requests, and the longest lateness around each fault."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from typing import Any, NamedTuple

from tests.campaign.expect import Definition

#: a fault's window: from this long before it until this long after it healed (COALESCE may fire only the
#: latest instant of those due in it; lateness is measured in it)
BEFORE_MS, AFTER_MS = 2_000, 30_000
#: COALESCE: a takeover fires the latest of the instants due since the previous owner's last commit, which
#: may lag the fault by more than BEFORE_MS on a loaded machine (seed 2021: 2.65 s): the instants missed just
#: before the one coalesced fire in a fault's window count as coalesced, back to this long before its window
COALESCE_LAG_MS = 10_000


class Arrived(NamedTuple):
    """A record as a read_committed reader got it: when (epoch ms), and what."""

    at: int
    record: Any


def arrived(reader: Any) -> list[Arrived]:
    """A tests.helpers.TopicReader's records with when each reached it."""
    return [Arrived(at, r) for at, r in zip(reader.received, reader.records, strict=False)]


def due_of(record: Any) -> tuple[str, int]:
    """(schedule name, due instant) of a FiredTask or of light-scheduler's TaskDefinition (`start`)."""
    if isinstance(record, dict):
        return record["name"], record["start"]
    return record.key.name, record.due_at


class Fired(dict[str, Counter[int]]):
    """schedule name -> how many times each due instant fired."""

    @classmethod
    def of(cls, *topics: Iterable[Arrived]) -> Fired:
        out = cls()
        for records in topics:
            for r in records:
                name, due = due_of(r.record)
                out.setdefault(name, Counter())[due] += 1
        return out

    def duplicates(self) -> int:
        return sum(c - 1 for counts in self.values() for c in counts.values() if c > 1)

    def duplicate_examples(self, schedules: int = 5, instants: int = 10) -> dict[str, list[int]]:
        """A few schedules' instants that fired more than once (where to look in the workers' logs)."""
        out: dict[str, list[int]] = {}
        for name in sorted(self):
            twice = sorted(t for t, c in self[name].items() if c > 1)
            if twice and len(out) < schedules:
                out[name] = twice[:instants]
        return out


def fault_windows(faults: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(f["at"] - BEFORE_MS, f["healedAt"] + AFTER_MS) for f in faults if "healedAt" in f]


def missing_instants(
    got: Fired,
    defs: list[Definition],
    window_end: int,
    applied: dict[str, int],
    light: set[str],
    windows: list[tuple[int, int]],
) -> dict[str, list[int]]:
    """Per schedule, the instants it must have fired before window_end and did not (`applied`: when each
    schedule shown became active; one not shown is lost: every instant of it counts)."""
    out: dict[str, list[int]] = {}
    for d in defs:
        fired = got.get(d.name, Counter())
        expected = d.expected(window_end, applied.get(d.name, 0), d.name in light, windows)
        lost = [t for t in expected if t not in fired]
        if lost and d.name in light:
            lost = _not_coalesced(lost, d.instants(applied.get(d.name, 0), window_end), fired, windows)
        if lost:
            out[d.name] = lost
    return out


def _not_coalesced(
    lost: list[int], instants: list[int], fired: Counter[int], windows: list[tuple[int, int]]
) -> list[int]:
    """Of a COALESCE schedule's missing instants, those not in a run that its coalesced fire ends: the next
    instant that fired after the run is due in a fault's window, and the run began at most COALESCE_LAG_MS
    before that window."""
    later = sorted(t for t in instants if t in fired)
    out = []
    for t in lost:
        nxt = next((f for f in later if f > t), None)
        window = None if nxt is None else next(((lo, end) for lo, end in windows if lo <= nxt < end), None)
        if window is None or t < window[0] - COALESCE_LAG_MS:
            out.append(t)
    return out


def _launched(launches: list[Arrived]) -> dict[str, set[tuple[str, str]]]:
    """event (its partition key) -> the (schedule, job id) of every launch request that carries it."""
    out: dict[str, set[tuple[str, str]]] = {}
    for r in (a.record for a in launches):
        for e in r["events"]:
            for part in json.loads(e["payload"].get("partitionKeys", "[]")):
                out.setdefault(part, set()).add((r["schedule"]["name"], r["jobId"]))
    return out


def missing_events(
    launches: list[Arrived], events: dict[str, tuple[str, int]], applied: dict[str, int]
) -> list[str]:
    """The acknowledged events in no launch request of their schedule (of those sent after it was applied:
    the events and commands topics are not ordered with each other)."""
    launched = _launched(launches)
    return [
        p
        for p, (name, sent) in events.items()
        if sent >= applied.get(name, 0) and name not in {n for n, _ in launched.get(p, ())}
    ]


def tally_events(
    launches: list[Arrived], events: dict[str, tuple[str, int]], applied: dict[str, int]
) -> dict[str, Any]:
    """Events sent, missed (in no launch of their schedule), and repeated (in two launches; a launch request
    sent twice)."""
    launched = _launched(launches)
    repeats = sum(c - 1 for c in Counter(r.record["jobId"] for r in launches).values())
    repeats += sum(len({j for _, j in launched.get(p, ())}) - 1 for p in events if launched.get(p))
    missed = missing_events(launches, events, applied)
    return {
        "eventsChecked": len(events),
        "launches": len(launches),
        "eventsMissed": len(missed),
        "eventsMissedExamples": missed[:5],
        "eventDuplicates": repeats,
    }


def gaps(records: list[Arrived], faults: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per fault kind, the instant a read_committed reader waited for longest (arrived - due) of those due in
    its window, or until just before the next fault if that comes first: {ms, schedule, due}."""
    dues = [(*due_of(r.record), r.at) for r in records]
    out: dict[str, dict[str, Any]] = {}
    starts = sorted(f["at"] for f in faults)
    for f in faults:
        if "skipped" in f:
            continue
        later = [t - BEFORE_MS for t in starts if t > f["at"]]
        lo, hi = f["at"] - BEFORE_MS, min([f["healedAt"] + AFTER_MS, *later[:1]])
        late = [(at - due, name, due) for name, due, at in dues if lo <= due < hi]
        if late:
            ms, name, due = max(late)
            if ms > out.get(f["kind"], {}).get("ms", -1):
                out[f["kind"]] = {"ms": ms, "schedule": name, "due": due}
    return out
