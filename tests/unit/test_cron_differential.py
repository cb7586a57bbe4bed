"""Our cron evaluator against one we did not write (cronsim 2.8), on random expressions of the whole
dialect, in zones with every kind of transition, over the years 2016-2036.

The matching of wall-clock times must agree exactly with cronsim on naive local time. Time zones are
where we deliberately differ from cronsim (which mimics Debian cron's DST quirks for some 5-field
expressions), so the zoned oracle is cronsim's wall-clock matches mapped to instants by our documented
rules, written out here:
  RULE 1: a wall time that exists once fires at that instant.
  RULE 2: a wall time in a spring-forward gap fires at the instant zoneinfo gives it with fold=0: shifted
          forward by the length of the gap (as java.time does).
  RULE 3: a wall time repeated by a fall-back fires at its first occurrence (fold=0), and when the hour
          field holds a `*`, at its second occurrence (fold=1) too.
  RULE 4: two wall times that map to one instant fire once.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim, CronSimError
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from scheduler.domain.triggers.cron import CronEvaluator
from scheduler.domain.triggers.cron_fields import CronFields, wall_fields, wall_ms

pytestmark = pytest.mark.unit

ZONES = [
    "UTC",
    "America/New_York",  # 1 h DST at 02:00
    "Europe/Paris",  # 1 h DST at 02:00 / 03:00
    "Australia/Lord_Howe",  # 30-minute DST
    "Antarctica/Troll",  # 2 h DST
    "America/Havana",  # transitions at midnight
    "America/Santiago",  # southern hemisphere, rules changed several times
    "America/Sao_Paulo",  # DST at midnight until it was abolished in 2019
    "Africa/Casablanca",  # DST suspended for Ramadan each year: four transitions a year
    "Asia/Tehran",  # DST until 2022
    "Pacific/Apia",  # DST until 2021 (and a whole day skipped in 2011)
    "Pacific/Chatham",  # +12:45 / +13:45
    "Asia/Kolkata",  # +05:30, no DST
]
START = datetime(2016, 1, 1, tzinfo=UTC)
END = datetime(2036, 1, 1, tzinfo=UTC)
_MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
_DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
BOUNDS = [(0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]


@st.composite
def _value(draw: st.DrawFn, index: int) -> str:
    lo, hi = BOUNDS[index]
    v = draw(st.integers(lo, hi))
    if index == 4 and draw(st.booleans()):
        return _MONTHS[v - 1]
    if index == 5 and v < 7 and draw(st.integers(0, 3)) == 0:
        return _DAYS[v]
    return str(v)


@st.composite
def _term(draw: st.DrawFn, index: int) -> str:
    lo, hi = BOUNDS[index]
    kind = draw(st.sampled_from(["star", "value", "range", "star-step", "range-step", "from-step"]))
    step = draw(st.integers(1, max(1, hi - lo)))
    if kind == "star":
        return "*"
    if kind == "value":
        return draw(_value(index))
    if kind == "star-step":
        return f"*/{step}"
    if kind == "from-step":
        return f"{draw(_value(index))}/{step}"
    a = draw(st.integers(lo, hi - 1))
    b = draw(st.integers(a + 1, hi))
    # a one-value range with a step (`7-7/2`) is left out: cronsim reads it as `7/2` (7 to the maximum)
    text = f"{a}-{b}"
    return text if kind == "range" else f"{text}/{step}"


@st.composite
def _field(draw: st.DrawFn, index: int) -> str:
    special = draw(st.integers(0, 9)) == 0
    if special and index == 3:
        return draw(st.sampled_from(["L", "LW"]))
    if special and index == 5:
        day = draw(st.integers(0, 7))
        return draw(st.sampled_from([f"{day}L", f"{day}#{draw(st.integers(1, 5))}"]))
    terms = draw(st.lists(_term(index), min_size=1, max_size=3))
    return ",".join(terms)


@st.composite
def expressions(draw: st.DrawFn) -> str:
    seconds = draw(st.booleans())
    # keep most expressions sparse enough that a year of matches is cheap to enumerate
    fields = [draw(_field(i)) for i in range(6)]
    if draw(st.integers(0, 3)) > 0:
        fields[0] = draw(st.sampled_from(["0", "30", "0,30", "*/20"]))
    if draw(st.integers(0, 2)) > 0:
        fields[1] = draw(st.sampled_from(["0", "15", "*/15", "0,30", "1-3", "59"]))
    return " ".join(fields if seconds else fields[1:])


def _naive(ms: int) -> datetime:
    return datetime(*wall_fields(ms))


def _cronsim_walls(expression: str, after: datetime, until: datetime, limit: int = 10**6) -> list[datetime]:
    out = []
    for wall in CronSim(expression, after):
        if wall > until or len(out) == limit:
            break
        out.append(wall)
    return out


@functools.cache
def transitions(zone: str) -> list[int]:
    """Every instant (ms) in 2016-2036 where the zone's UTC offset changes: day steps, then bisection."""
    tz = ZoneInfo(zone)

    def offset(s: int) -> timedelta | None:
        return datetime.fromtimestamp(s, tz).utcoffset()

    found = []
    lo = int(START.timestamp())
    while lo < END.timestamp():
        hi = lo + 86_400
        if offset(hi) != offset(lo):
            a, b = lo, hi
            while b - a > 1:
                mid = (a + b) // 2
                a, b = (mid, b) if offset(mid) == offset(a) else (a, mid)
            found.append(b * 1000)
        lo = hi
    return found


def oracle(expression: str, zone: str, after_ms: int, until_ms: int) -> list[int]:
    """The due instants in (after_ms, until_ms], by RULES 1-4 over cronsim's wall-clock matches."""
    tz = ZoneInfo(zone)
    fixed_hour = "*" not in expression.split()[-4]
    # wall times that can map into the window: widened by the largest offsets around it
    step = 3_600_000 if until_ms - after_ms < 3 * 86_400_000 else 86_400_000
    offsets = [
        datetime.fromtimestamp(t / 1000, tz).utcoffset() or timedelta(0)
        for t in range(after_ms - 2 * 86_400_000, until_ms + 2 * 86_400_000, step)
    ]
    lo = _naive(after_ms) + min(offsets) - timedelta(seconds=1)
    hi = _naive(until_ms) + max(offsets)
    instants: set[int] = set()
    try:
        walls = _cronsim_walls(expression, lo, hi)
    except CronSimError:  # cronsim refuses a day that no month has (`0 0 31 2 *`): it never fires
        return []
    for wall in walls:
        first = wall.replace(tzinfo=tz, fold=0)
        instants.add(round(first.timestamp() * 1000))  # RULES 1, 2, 3 (first occurrence)
        second = wall.replace(tzinfo=tz, fold=1)
        repeated = (first.utcoffset() or timedelta(0)) > (second.utcoffset() or timedelta(0))
        if repeated and not fixed_hour:
            instants.add(round(second.timestamp() * 1000))  # RULE 3 (second occurrence)
    return sorted(t for t in instants if after_ms < t <= until_ms)  # RULE 4: a set


def ours(expression: str, zone: str, after_ms: int, count: int, horizon_ms: int) -> list[int]:
    evaluator = CronEvaluator(expression, zone)
    out: list[int] = []
    t: int | None = after_ms
    while len(out) < count:
        t = evaluator.next_due(t)  # type: ignore[arg-type]
        if t is None or t > horizon_ms:
            break
        out.append(t)
    return out


def _accepted_by_cronsim(expression: str) -> bool:
    try:
        CronSim(expression, datetime(2020, 1, 1))
    except CronSimError:
        return False
    return True


SETTINGS = settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


@SETTINGS
@given(expression=expressions(), start=st.integers(int(START.timestamp()), int(END.timestamp())))
@example(expression="0 0 */5 * *", start=int(datetime(2027, 2, 20).timestamp()))  # finding 4
@example(expression="6,29 12 * 12/2 *", start=int(datetime(2026, 11, 1).timestamp()))  # finding 3
@example(expression="0 0 23/2 * * *", start=int(datetime(2026, 11, 1).timestamp()))
@example(expression="0 0 0 * * 7", start=int(datetime(2026, 11, 1).timestamp()))  # finding 5
@example(expression="0 0 */2 * 1", start=int(datetime(2026, 11, 1).timestamp()))  # finding 6
def test_wall_clock_matches_agree_with_cronsim(expression: str, start: int) -> None:
    fields = CronFields.parse(expression)
    if not _accepted_by_cronsim(expression):  # only a day-of-month no month has: never fires
        assert fields.first_at_or_after(2020, 1, 1, 0, 0, 0) is None, expression
        return
    after = wall_ms(*wall_fields(start * 1000))
    got: list[datetime] = []
    for _ in range(12):
        found = fields.first_at_or_after(*wall_fields(after + 1000))
        if found is None:
            break
        got.append(datetime(*found))
        after = wall_ms(*found)
    horizon = datetime(*wall_fields(start * 1000)) + timedelta(days=366 * 50)
    expected = _cronsim_walls(expression, datetime(*wall_fields(start * 1000)), horizon, 12) if got else []
    assert got == expected, expression


def _zoned_case(expression: str, zone: str, after_ms: int) -> None:
    horizon = after_ms + 3 * 366 * 86_400_000
    got = ours(expression, zone, after_ms, 40, horizon)
    until = got[-1] if len(got) == 40 else horizon
    assert got == oracle(expression, zone, after_ms, until), (expression, zone, after_ms)


@SETTINGS
@given(
    expression=expressions(),
    zone=st.sampled_from(ZONES),
    start=st.integers(int(START.timestamp()), int(END.timestamp())),
)
def test_due_instants_in_a_zone_follow_the_documented_rules_at_random_instants(
    expression: str, zone: str, start: int
) -> None:
    _zoned_case(expression, zone, start * 1000)


@SETTINGS
@given(
    expression=expressions(),
    zone=st.sampled_from([z for z in ZONES if z not in ("UTC", "Asia/Kolkata")]),
    which=st.integers(0, 10_000),
    before_s=st.integers(-2 * 3600, 36 * 3600),
)
@example(expression="*/4 1 * * *", zone="America/New_York", which=0, before_s=86_400)  # finding 1
@example(expression="*/15 2 * * *", zone="America/New_York", which=0, before_s=3600)  # finding 6
@example(expression="30 1 * 11 0", zone="America/New_York", which=0, before_s=86_400)  # finding 2
def test_due_instants_in_a_zone_follow_the_documented_rules_around_transitions(
    expression: str, zone: str, which: int, before_s: int
) -> None:
    moments = transitions(zone)
    _zoned_case(expression, zone, moments[which % len(moments)] - before_s * 1000)
