"""Pure logic of auth (token config, the middleware's decisions), tenancy, RUN / BACKFILL instants."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from scheduler.domain.commands import (
    MAX_BACKFILL_FIRES,
    CommandRejected,
    apply_command,
    manual_fires,
    validate_command,
)
from scheduler.domain.events import DataEvent, ProgramStatusEvent
from scheduler.domain.model import (
    Action,
    CompositeTrigger,
    CronTrigger,
    ElapsedTrigger,
    FrequencyTrigger,
    InvalidSchedule,
    PartitionTrigger,
    ProgramId,
    ProgramStatusTrigger,
    Schedule,
    ScheduleCommand,
    ScheduleKey,
    ScheduleState,
    TimeUnit,
)
from scheduler.domain.tenancy import event_key_tenant, event_tenant, partition_share, schedule_tenants
from scheduler.http import auth
from scheduler.kafka.config import Settings

pytestmark = pytest.mark.unit

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _entry(token: str, scopes: list[str], tenants: list[str], name: str = "t") -> dict:
    return {"name": name, "sha256": auth.hash_token(token), "scopes": scopes, "tenants": tenants}


# --- token configuration -------------------------------------------------------------------------


def test_tokens_parse_to_principals_keyed_by_hash():
    tokens = auth.parse_tokens(
        {"tokens": [_entry("a", ["sched:r"], ["acme"]), _entry("b", ["sched:r", "sched:w"], ["*"])]}
    )
    a = tokens[auth.hash_token("a")]
    assert a.can("sched:r") and not a.can("sched:w") and a.sees("acme") and not a.sees("beta")
    b = tokens[auth.hash_token("b")]
    assert b.all_tenants and b.sees("anything")
    assert "a" not in tokens  # never keyed by the token itself


@pytest.mark.parametrize(
    ("raw", "complaint"),
    [
        ({}, "non-empty list"),
        ({"tokens": []}, "non-empty list"),
        ({"tokens": ["x"]}, "mapping"),
        ({"tokens": [{"sha256": "abc", "scopes": ["sched:r"], "tenants": ["*"]}]}, "64-hex"),
        ({"tokens": [{**_entry("a", ["sched:r"], ["*"]), "token": "a"}]}, "plain-text"),
        ({"tokens": [_entry("a", ["admin"], ["*"])]}, "scopes"),
        ({"tokens": [_entry("a", [], ["*"])]}, "scopes"),
        ({"tokens": [_entry("a", ["sched:r"], [])]}, "tenants"),
        ({"tokens": [_entry("a", ["sched:r"], [""])]}, "tenants"),
    ],
)
def test_a_bad_token_config_is_refused_with_the_reason(raw, complaint):
    with pytest.raises(auth.AuthConfigError, match=complaint):
        auth.parse_tokens(raw)


def test_auth_is_on_by_default_and_needs_tokens(tmp_path: Path):
    with pytest.raises(auth.AuthConfigError, match="no tokens are configured"):
        auth.load_tokens(Settings())
    assert auth.load_tokens(Settings(auth="off")) is None
    f = tmp_path / "tokens.yaml"
    f.write_text(
        "tokens:\n  - name: x\n    sha256: "
        + auth.hash_token("s")
        + "\n    scopes: [sched:r]\n    tenants: ['*']\n"
    )
    assert auth.hash_token("s") in auth.load_tokens(Settings(auth_tokens_file=f))  # type: ignore[operator]
    env = json.dumps([_entry("s", ["sched:r"], ["acme"])])
    assert auth.hash_token("s") in auth.load_tokens(Settings(auth_tokens=env))  # type: ignore[operator]
    with pytest.raises(auth.AuthConfigError, match="not valid JSON"):
        auth.load_tokens(Settings(auth_tokens="{"))
    with pytest.raises(auth.AuthConfigError, match="No such file"):
        auth.load_tokens(Settings(auth_tokens_file=tmp_path / "missing.yaml"))


def test_new_tokens_are_random_and_long():
    a, b = auth.new_token(), auth.new_token()
    assert a != b and len(a) >= 40


# --- the middleware ---------------------------------------------------------------------------------

TOKENS = auth.parse_tokens(
    [
        _entry("rw-acme", ["sched:r", "sched:w"], ["acme"]),
        _entry("r-all", ["sched:r"], ["*"]),
    ]
)


async def _call(
    method: str, path: str, token: str | None = None, tokens=TOKENS
) -> tuple[int, auth.Principal | None]:
    seen: list[auth.Principal] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(auth.principal_of(request))
        return web.json_response({})

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = await auth.middleware(tokens)(make_mocked_request(method, path, headers=headers), handler)
    return response.status, (seen[0] if seen else None)


@pytest.mark.parametrize(
    ("method", "path", "token", "status"),
    [
        ("GET", "/schedules", None, 401),
        ("GET", "/schedules", "wrong", 401),
        ("GET", "/schedules", "rw-acme", 200),
        ("POST", "/schedules", "rw-acme", 200),
        ("POST", "/schedules", "r-all", 403),  # scope
        ("DELETE", "/schedules/acme/x", "r-all", 403),
        ("GET", "/metrics", "rw-acme", 403),  # not tenant-aware: needs every tenant
        ("GET", "/metrics", "r-all", 200),
        ("GET", "/router", "rw-acme", 403),  # Faust's own pages too
        ("GET", "/health", None, 200),
        ("GET", "/openapi.json", None, 200),
        ("GET", "/ui", None, 200),
        ("GET", "/ui/admin.js", None, 200),
        ("GET", "/uix", None, 401),
    ],
)
async def test_middleware_decides_401_403_by_token_scope_and_route(method, path, token, status):
    assert (await _call(method, path, token))[0] == status


async def test_middleware_with_auth_off_lets_everyone_act_for_every_tenant():
    status, who = await _call("DELETE", "/schedules/acme/x", None, tokens=None)
    assert status == 200 and who is auth.ANYONE and who.all_tenants


async def test_401_says_bearer():
    response = await auth.middleware(TOKENS)(
        make_mocked_request("GET", "/jobs"),
        lambda r: web.json_response({}),  # type: ignore[arg-type,return-value]
    )
    assert response.status == 401 and response.headers["WWW-Authenticate"].startswith("Bearer")


# --- tenancy ---------------------------------------------------------------------------------------


def _schedule(trigger, program: str | None = None, tenant: str = "acme") -> Schedule:
    return Schedule(
        ScheduleKey(tenant, "s"),
        trigger,
        topic="out",
        program=None if program is None else ProgramId.parse(program),
    )


def test_a_schedule_touches_its_tenant_its_program_and_everything_its_triggers_watch():
    trigger = CompositeTrigger(
        "AND",
        (
            PartitionTrigger("beta.raw"),
            CompositeTrigger("OR", (ProgramStatusTrigger(ProgramId.parse("gamma/a/workflow/p")),)),
            ElapsedTrigger(60_000, dataset="delta.x"),
            CronTrigger("0 * * * * *"),
        ),
    )
    assert schedule_tenants(_schedule(trigger, "eps/a/workflow/p")) == {
        "acme",
        "beta",
        "gamma",
        "delta",
        "eps",
    }
    assert schedule_tenants(_schedule(CronTrigger("0 * * * * *"))) == {"acme"}


def test_events_and_event_keys_belong_to_their_namespace():
    assert event_tenant(DataEvent("acme.raw", 1, 0)) == "acme"
    assert event_tenant(ProgramStatusEvent(ProgramId.parse("beta/a/workflow/p"), "r", "COMPLETED")) == "beta"
    assert event_key_tenant("partition:acme.raw.x") == "acme"
    assert event_key_tenant("program:beta/a/workflow/p") == "beta"
    assert event_key_tenant("other:zzz") == ""


@pytest.mark.parametrize(("limit", "partitions", "share"), [(3, 1, 3), (100_000, 8, 13_750), (10, 4, 3)])
def test_partition_share_of_the_tenant_limit(limit, partitions, share):
    assert partition_share(limit, partitions) == share
    assert share * partitions >= limit  # a tenant can always reach its limit when spread evenly


# --- RUN / BACKFILL ----------------------------------------------------------------------------------


def _state(trigger) -> ScheduleState:
    return ScheduleState(_schedule(trigger), created_at=T0, updated_at=T0, active_since=T0)


def _cmd(action: Action, start: int, end: int) -> ScheduleCommand:
    return ScheduleCommand(ScheduleKey("acme", "s"), action, fire_range=(start, end))


def test_run_fires_once_at_its_instant_and_changes_nothing():
    state = _state(PartitionTrigger("acme.raw"))
    cmd = _cmd(Action.RUN, T0 + 5, T0 + 5)
    assert manual_fires(state, cmd) == [T0 + 5]
    assert apply_command(state, cmd, T0 + 10) is state
    with pytest.raises(CommandRejected, match="does not exist"):
        apply_command(None, cmd, T0)


def test_backfill_fires_every_due_instant_in_the_range_both_ends_included():
    state = _state(CronTrigger("0 */15 * * * *"))
    assert manual_fires(state, _cmd(Action.BACKFILL, T0, T0 + 3_600_000)) == [
        T0 + i * 900_000 for i in range(5)
    ]
    both = _state(
        CompositeTrigger("OR", (CronTrigger("0 0 * * * *"), FrequencyTrigger(TimeUnit.MINUTES, 30, T0)))
    )
    assert manual_fires(both, _cmd(Action.BACKFILL, T0, T0 + 3_600_000)) == [
        T0,
        T0 + 1_800_000,
        T0 + 3_600_000,
    ]


def test_backfill_refuses_too_many_fires_and_schedules_without_time_triggers():
    with pytest.raises(CommandRejected, match=str(MAX_BACKFILL_FIRES)):
        manual_fires(_state(CronTrigger("* * * * * *")), _cmd(Action.BACKFILL, T0, T0 + 86_400_000))
    with pytest.raises(CommandRejected, match="no time trigger"):
        manual_fires(_state(PartitionTrigger("acme.raw")), _cmd(Action.BACKFILL, T0, T0 + 1))


@pytest.mark.parametrize(
    ("cmd", "field"),
    [
        (ScheduleCommand(ScheduleKey("acme", "s"), Action.RUN), "fireRange"),
        (_cmd(Action.BACKFILL, T0, T0 - 1), "to"),
        (_cmd(Action.RUN, -1, -1), "from"),
        (_cmd(Action.BACKFILL, T0, 2**62), "to"),
        (ScheduleCommand(ScheduleKey("acme", "s"), Action.DELETE, fire_range=(T0, T0)), "fireRange"),
    ],
)
def test_fire_ranges_are_validated(cmd, field):
    with pytest.raises(InvalidSchedule) as exc:
        validate_command(cmd)
    assert exc.value.field == field
