"""GET /schedules' filters: `label` (a selector: `team=data,tier!=bronze,critical,!deprecated`), `enabled`,
`paused`, `finished` (true|false), `trigger` (its kind: cron, frequency, once, partition, … and, or),
`program` and `topic` (exact), `nextBefore` / `nextAfter` (epoch ms: its next fire at or before / at or
after it; a schedule that fires no more, or on events only, matches neither). Every one must hold. A parameter the list does not know is a 400 naming it, never
ignored. None of them is indexed (the tenant is: a key prefix): each worker reads its schedules in key
order until it has a page of matches."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from scheduler.domain.labels import parse_selector
from scheduler.domain.model import ScheduleState
from scheduler.domain.triggers.kinds import TRIGGER_KINDS

#: the list's own parameters (tenant, paging, and `local`: a worker asking another for its part)
LIST_PARAMS = frozenset({"tenant", "limit", "cursor", "local"})
FILTERS = ("label", "enabled", "paused", "finished", "trigger", "program", "topic", "nextBefore", "nextAfter")
_BOOLS = {"true": True, "false": False}


class BadFilter(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Filters:
    """The filters a list request asked for (`query`: as they came, to pass on to the other workers)."""

    query: dict[str, str]
    match: Callable[[ScheduleState], bool] | None  # None: no filter


NO_FILTERS = Filters({}, None)


def parse_filters(
    params: Mapping[str, str],
    next_fire: Callable[[ScheduleState], int | None] = lambda st: None,
    clock: Callable[[], int] = lambda: 0,
) -> Filters:
    """The filters of a GET /schedules query (BadFilter names the parameter that is wrong or unknown);
    `next_fire`: a schedule's next fire instant, `clock`: now (its owner's)."""
    unknown = sorted(set(params) - LIST_PARAMS - set(FILTERS))
    if unknown:
        known = ", ".join(sorted(LIST_PARAMS - {"local"}) + list(FILTERS))
        raise BadFilter(unknown[0], f"not a filter of this list (it takes {known})")
    query = {k: params[k] for k in FILTERS if params.get(k)}
    tests: list[Callable[[ScheduleState], bool]] = []
    if "label" in query:
        try:
            selector = parse_selector(query["label"])
        except ValueError as exc:
            raise BadFilter("label", f"not a label selector: {exc}") from None
        tests.append(lambda st: selector.matches(st.schedule.labels))

    def finished(st: ScheduleState) -> bool:
        return st.finished(clock())

    for name, of in (("enabled", _enabled), ("paused", _paused), ("finished", finished)):
        if name in query:
            if query[name] not in _BOOLS:
                raise BadFilter(name, "must be true or false")
            tests.append(_is(of, _BOOLS[query[name]]))
    if "trigger" in query:
        kind = query["trigger"]
        if kind not in TRIGGER_KINDS:
            raise BadFilter("trigger", f"not a trigger kind (one of {', '.join(sorted(TRIGGER_KINDS))})")
        tests.append(lambda st: st.schedule.trigger.to_json()["type"] == kind)
    if "program" in query:
        program = query["program"]
        tests.append(lambda st: st.schedule.program is not None and st.schedule.program.id == program)
    if "topic" in query:
        topic = query["topic"]
        tests.append(lambda st: st.schedule.topic == topic)
    for name, holds in (("nextBefore", lambda at, t: at <= t), ("nextAfter", lambda at, t: at >= t)):
        if name in query:
            try:
                instant = int(query[name])
            except ValueError:
                raise BadFilter(name, "must be an instant in epoch milliseconds") from None
            tests.append(_next_test(next_fire, holds, instant))
    if not tests:
        return Filters(query, None)
    return Filters(query, lambda st: all(t(st) for t in tests))


def _next_test(
    next_fire: Callable[[ScheduleState], int | None], holds: Callable[[int, int], bool], instant: int
) -> Callable[[ScheduleState], bool]:
    def test(st: ScheduleState) -> bool:
        at = next_fire(st)
        return at is not None and holds(at, instant)

    return test


def _is(of: Callable[[ScheduleState], bool], want: bool) -> Callable[[ScheduleState], bool]:
    return lambda st: of(st) is want


def _enabled(st: ScheduleState) -> bool:
    return st.schedule.enabled


def _paused(st: ScheduleState) -> bool:
    return st.paused is not None
