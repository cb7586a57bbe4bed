"""The CLI's client side without a server: files, instants, tables, words, argument errors, 503 retries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from scheduler.cli import cli
from scheduler.cli.client import (
    UsageError,
    load_document,
    objects_of,
    parse_instant,
    parse_payload,
    parse_program,
    parse_schedule_ref,
    schedule_body,
    validate_locally,
)
from scheduler.cli.render import (
    duration,
    explain_job,
    explain_trigger,
    fields_table,
    iso,
    table,
    trigger_summary,
)
from scheduler.client.http import ApiError
from scheduler.client.http import HttpClient as Client
from scheduler.domain.events import DataEvent, ProgramStatusEvent
from scheduler.domain.model import ProgramId, Schedule, ScheduleKey, ScheduleState
from scheduler.domain.triggers.kinds import trigger_from_json
from scheduler.domain.triggers.progress import TriggerProgress, apply, describe
from scheduler.http import auth
from scheduler.http.api import schedule_json

pytestmark = pytest.mark.unit

CRON = {"tenant": "acme", "name": "a", "trigger": {"type": "cron", "expression": "0 * * * *"}, "topic": "out"}


# --- files ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("suffix", "text"),
    [
        (".yaml", "tenant: acme\nname: a\ntrigger: {type: cron, expression: '0 * * * *'}\ntopic: out\n"),
        (".yaml", "- " + json.dumps(CRON)),
        (".json", json.dumps({"schedules": [CRON], "total": 1})),
        (".json", json.dumps([CRON])),
    ],
)
def test_a_file_holds_one_schedule_a_list_or_the_listing_of_get_schedules(
    tmp_path: Path, suffix: str, text: str
) -> None:
    path = tmp_path / f"s{suffix}"
    path.write_text(text)
    assert objects_of(load_document(str(path)), "schedules") == [CRON]


def test_standard_input_is_read_for_a_dash() -> None:
    assert load_document("-", stdin_text=lambda: json.dumps(CRON)) == CRON


def test_the_fields_the_server_adds_are_dropped_so_a_listing_imports_again() -> None:
    listed = {**CRON, "key": "acme/a", "version": 3, "createdAt": 1, "updatedAt": 2, "activeSince": 2}
    body = schedule_body({**listed, "nextFireAt": None})
    assert body == CRON and validate_locally(body) == []


def test_unreadable_and_malformed_files_are_usage_errors_that_say_where(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read .*missing.yaml"):
        load_document(str(tmp_path / "missing.yaml"))
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("tenant: [unclosed\n")
    with pytest.raises(UsageError, match="bad.yaml: not valid YAML"):
        load_document(str(bad_yaml))
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{'single': 'quotes'}")
    with pytest.raises(UsageError, match="bad.json: not valid JSON"):
        load_document(str(bad_json))
    with pytest.raises(UsageError, match="f.yaml: item 1: expected a mapping, got str"):
        objects_of([CRON, "oops"], "schedules", "f.yaml")
    with pytest.raises(UsageError, match="no schedules"):
        objects_of([], "schedules")


def test_local_validation_names_the_offending_field_like_the_server() -> None:
    assert validate_locally({**CRON, "trigger": {"type": "cron", "expression": "0 * *"}}) == [
        {
            "field": "trigger.expression",
            "message": "invalid cron expression '0 * *': cron needs 5 or 6 fields (second first), got 3",
        }
    ]
    problems = validate_locally({**CRON, "trigger": {"type": "frequency", "timeUnit": "SECONDS", "time": 0}})
    assert [p["field"] for p in problems] == ["trigger.time"]
    assert [p["field"] for p in validate_locally({**CRON, "colour": "red"})] == ["colour"]
    assert [p["field"] for p in validate_locally({**CRON, "tenant": "a/b"})] == ["tenant"]
    # an update's body has no key; a program schedule's topic is filled in by the server
    body = {"trigger": {"type": "partition", "dataset": "acme.clicks"}, "program": "acme/app/spark/etl"}
    assert validate_locally(body, with_key=False) == []


# --- arguments --------------------------------------------------------------------------------------


def test_schedule_and_program_references() -> None:
    assert parse_schedule_ref("acme/nightly") == ("acme", "nightly")
    for bad in ("acme", "acme/", "/x", "a/b/c"):
        with pytest.raises(UsageError, match="TENANT/NAME"):
            parse_schedule_ref(bad)
    assert parse_program("acme/app/spark/etl run") == "acme/app/spark/etl%20run"
    with pytest.raises(UsageError, match="namespace/application/type/name"):
        parse_program("acme/app/etl")


def test_event_payload_from_key_value_arguments() -> None:
    assert parse_payload(["datasetId=acme.clicks", 'partitionKeys=["a=1"]']) == {
        "datasetId": "acme.clicks",
        "partitionKeys": '["a=1"]',
    }
    with pytest.raises(UsageError, match="expected key=value, got 'oops'"):
        parse_payload(["oops"])


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("2026-11-22T10:00:00Z", 1795341600000),
        ("2026-11-22T11:00:00+01:00", 1795341600000),
        ("2026-11-22T10:00:00", 1795341600000),  # naive is UTC
        ("2026-11-22T10:00:00.250Z", 1795341600250),
        ("2026-11-22", 1795305600000),
        ("1795341600000", 1795341600000),
        ("now", 42),
        ("+30s", 30_042),
        ("+1.5m", 90_042),
        ("+2h", 7_200_042),
        ("+1d", 86_400_042),
        ("+250ms", 292),
    ],
)
def test_instants_are_iso_8601_epoch_ms_now_or_from_now(text: str, ms: int) -> None:
    assert parse_instant(text, now_ms=42) == ms


def test_a_bad_instant_says_what_is_accepted() -> None:
    with pytest.raises(UsageError, match="ISO-8601"):
        parse_instant("yesterday")
    with pytest.raises(UsageError, match=r"\+30s"):
        parse_instant("+30 s")


def test_iso_shows_milliseconds_only_when_there_are_any() -> None:
    assert iso(1795341600000) == "2026-11-22T10:00:00Z"
    assert iso(1795341600250) == "2026-11-22T10:00:00.250Z"
    assert iso(None) == "-"
    assert parse_instant(iso(1795341600250)) == 1795341600250
    assert [duration(ms) for ms in (950, 12_000, 303_000, 7_500_000, 3 * 86_400_000)] == [
        "950ms",
        "12s",
        "5m 3s",
        "2h 5m",
        "3d",
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["schedules"],
        ["schedules", "create"],  # -f is required
        ["schedules", "next", "acme/a", "-n", "many"],
        ["schedules", "backfill", "acme/a", "--from", "2026-01-01"],  # --to is required
        ["runs", "stop", "acme/app/spark/etl"],
        ["token", "new", "--name", "x"],  # --tenants is required
    ],
)
def test_argument_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    assert "error" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["schedules", "get", "acme"], "expected TENANT/NAME, got 'acme'"),
        (
            ["schedules", "backfill", "acme/a", "--from", "2026-01-02", "--to", "2026-01-01"],
            "is before --from",
        ),
        (["schedules", "run", "acme/a", "--at", "tomorrow"], "not an instant"),
        (["events", "publish"], "give TYPE key=value... or -f FILE"),
        (["events", "publish", "partition", "datasetId"], "expected key=value"),
        (["runs", "list", "a/b/c"], "namespace/application/type/name"),
        (["schedules", "create", "-f", "/nonexistent/s.yaml"], "cannot read /nonexistent/s.yaml"),
        (["token", "new", "--name", "x", "--scopes", "admin", "--tenants", "a"], "--scopes"),
    ],
)
def test_usage_errors_found_after_parsing_exit_2_before_any_request(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCHEDULER_URL", "http://127.0.0.1:9")  # nothing listens: a request would exit 1
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_dry_run_lists_every_invalid_schedule_with_its_field_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    bad = {**CRON, "name": "b", "trigger": {"type": "cron", "expression": "61 * * * *"}}
    path.write_text(yaml.safe_dump({"schedules": [CRON, bad]}))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["schedules", "create", "-f", str(path), "--dry-run", "--url", "http://127.0.0.1:9"])
    assert exit_.value.code == 1
    out = capsys.readouterr()
    assert "1 of 2 schedules valid (nothing sent)" in out.out
    assert "#1 acme/b:" in out.err and "trigger.expression:" in out.err


def test_token_new_prints_a_token_and_an_entry_the_worker_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    cli.main(["token", "new", "--name", "etl team", "--scopes", "sched:r,sched:w", "--tenants", "acme,*"])
    out = capsys.readouterr().out
    token = out.splitlines()[1]
    entry = out.split("under `tokens:`:\n")[1]
    principals = auth.parse_tokens(yaml.safe_load("tokens:\n" + entry))
    principal = principals[auth.hash_token(token)]
    assert principal.name == "etl team" and principal.all_tenants and principal.can("sched:w")
    assert token.startswith("sch_") and out.count(token) == 1


# --- output -----------------------------------------------------------------------------------------


def test_tables_align_columns_and_right_align_numbers() -> None:
    text = table(
        ["KEY", "N", "ENABLED", "NEXT"], [("acme/a", 5, True, None), ("acme/long-name", 120, False, "x")]
    )
    assert text.splitlines() == [
        "KEY               N  ENABLED  NEXT",
        "acme/a            5  yes      -",
        "acme/long-name  120  no       x",
    ]
    assert table(["A"], []) == "A"


def test_one_object_as_fields_with_times_in_iso() -> None:
    text = fields_table({"key": "acme/a", "nextFireAt": 1795341600000, "data": {"a": "1"}}, ["nextFireAt"])
    assert text.splitlines() == [
        "key         acme/a",
        "nextFireAt  2026-11-22T10:00:00Z (1795341600000)",
        'data        {"a":"1"}',
    ]


def test_trigger_summaries_are_the_words_each_trigger_kind_gives() -> None:
    composite = {
        "type": "and",
        "triggers": [
            {"type": "partition", "dataset": "acme.clicks", "minPartitions": 2},
            {"type": "frequency", "timeUnit": "HOURS", "time": 1, "start": None},
            {"type": "elapsed", "ms": 3_600_000, "dataset": None, "program": None},
        ],
    }
    answer = schedule_json(_state(composite), None)
    assert trigger_summary(answer) == "(2 new partitions of acme.clicks AND every 1 h AND at least every 1 h)"
    cron = {"type": "cron", "expression": "*/5 * * * * *", "timezone": "Europe/Paris"}
    assert trigger_summary(schedule_json(_state(cron), None)) == "cron */5 * * * * * (Europe/Paris)"


def _state(trigger: dict[str, Any]) -> ScheduleState:
    program = None if trigger["type"] in ("cron", "frequency") else ProgramId.parse("acme/etl/spark/load")
    schedule = Schedule(ScheduleKey("acme", "s"), trigger_from_json(trigger), "out", program=program)
    schedule.validate()
    return ScheduleState(schedule, 0, 0, 0)


def test_trigger_progress_and_pending_jobs_in_words() -> None:
    tree = trigger_from_json(
        {
            "type": "and",
            "triggers": [
                {"type": "partition", "dataset": "acme.d", "minPartitions": 2},
                {"type": "programStatus", "program": "a/b/c/d", "on": ["SUCCEEDED"]},
            ],
        }
    )
    progress = TriggerProgress(1)
    apply(tree, progress, "0.0", DataEvent("acme.d", 1, 0), {})
    apply(tree, progress, "0.1", ProgramStatusEvent(ProgramId.parse("a/b/c/d"), "r1", "COMPLETED"), {})
    assert explain_trigger(describe(tree, progress)) == [
        "[ ] all of:",
        "  [ ] 1 of 2 new partitions of acme.d",
        "  [x] a/b/c/d reaching SUCCEEDED: seen",
    ]
    job = {
        "jobId": "acme/etl#1",
        "state": "PENDING_CONSTRAINT",
        "triggeredAt": 1795341600000,
        "blockedBy": "timeWindow",
        "reason": "outside 22:00-06:00 Europe/Paris",
        "checkAt": 1795341600000 + 90_000,
    }
    assert explain_job(job, now_ms=1795341600000) == (
        "acme/etl#1 (PENDING_CONSTRAINT, triggered 2026-11-22T10:00:00Z): blocked by timeWindow: "
        "outside 22:00-06:00 Europe/Paris; checked again at 2026-11-22T10:01:30Z (in 1m 30s)"
    )
    assert "when a run of the program changes" in explain_job({**job, "checkAt": None}, now_ms=0)


# --- HTTP behaviour -----------------------------------------------------------------------------------


async def test_503_is_retried_after_retry_after_then_the_answer_is_returned() -> None:
    answers = [
        httpx.Response(503, json={"error": "unavailable"}, headers={"Retry-After": "2"}),
        httpx.Response(503, json={"error": "unavailable"}, headers={"Retry-After": "0.5"}),
        httpx.Response(200, json={"schedules": [], "total": 0}),
    ]
    seen: list[httpx.Request] = []
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers[len(seen) - 1]

    async with Client("http://x", "tok", transport=httpx.MockTransport(handler), sleep=sleep) as client:
        assert await client.schedules("acme") == {"schedules": [], "total": 0}
    assert slept == [2.0, 0.5]
    assert seen[0].headers["Authorization"] == "Bearer tok" and seen[0].url.params["tenant"] == "acme"


async def test_503_that_persists_fails_with_the_servers_reason() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            503, json={"error": "unavailable", "reason": "rebalancing"}, headers={"Retry-After": "2"}
        )

    async def sleep(s: float) -> None:
        pass

    async with Client("http://x", transport=httpx.MockTransport(handler), sleep=sleep, retries=2) as client:
        with pytest.raises(ApiError) as err:
            await client.schedules()
    assert err.value.status == 503 and err.value.lines() == ["GET /schedules: 503 unavailable: rebalancing"]


def batching(single: Any) -> Any:
    """A mock server's handler of single POSTs that answers POST /schedules:batch as the worker does: each
    item through `single`, one result each (what a POST of it alone would have answered)."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/schedules:batch":
            return single(request)
        items = json.loads(request.content)["schedules"]
        results = []
        for i, item in enumerate(items):
            one = single(httpx.Request("POST", "http://x/schedules", json=item))
            results.append({"index": i, "status": one.status_code, **one.json()})
        return httpx.Response(200, json={"total": len(items), "results": results})

    return handler


async def test_bulk_create_keeps_going_and_reports_failures_in_file_order() -> None:
    @batching
    def handler(request: httpx.Request) -> httpx.Response:
        body: dict[str, Any] = json.loads(request.content)
        if body["name"].startswith("bad"):
            fields = [{"field": "trigger.expression", "message": "invalid"}]
            return httpx.Response(400, json={"error": "invalid request", "fields": fields})
        return httpx.Response(202, json={"key": f"acme/{body['name']}", "action": "INSERT"})

    bodies = [{**CRON, "name": n} for n in ["a", "bad-1", "b", "c", "bad-2"] * 10]
    progress: list[int] = []
    async with Client("http://x", transport=httpx.MockTransport(handler)) as client:
        result = await client.create_many(
            bodies, concurrency=4, on_progress=lambda r: progress.append(r.done)
        )
    assert (result.total, result.accepted, len(result.failures)) == (50, 30, 20)
    assert [i for i, _, _ in result.failures][:4] == [1, 4, 6, 9]
    _, key, error = result.failures[0]
    assert key == "acme/bad-1" and error.lines()[1:] == ["  trigger.expression: invalid"]
    assert error.summary() == "400 invalid request"
    assert progress[-1] == 50 and progress == sorted(progress)


async def test_a_bulk_create_sends_batches_and_one_post_each_to_a_worker_without_them() -> None:
    paths: list[str] = []

    def accept(request: httpx.Request) -> httpx.Response:
        return httpx.Response(202, json={"key": "acme/x", "action": "INSERT"})

    def new_worker(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.path)
        return batching(accept)(request)

    def old_worker(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.path)
        if request.url.path == "/schedules:batch":
            return httpx.Response(405, json={"error": "method not allowed"})
        return accept(request)

    bodies = [{**CRON, "name": f"n{i}"} for i in range(1200)]
    async with Client("http://x", transport=httpx.MockTransport(new_worker), wait_applied=False) as client:
        result = await client.create_many(bodies)
    assert result.accepted == 1200 and paths == ["/schedules:batch"] * 3  # (500 a request)
    paths.clear()
    async with Client("http://x", transport=httpx.MockTransport(old_worker), wait_applied=False) as client:
        result = await client.create_many(bodies[:600], batch_size=500)
    assert result.accepted == 600 and not result.failures
    assert paths.count("/schedules:batch") >= 1 and paths.count("/schedules") == 600


async def test_writes_wait_until_applied_unless_told_not_to_and_a_bulk_waits_once_per_partition() -> None:
    seen: list[httpx.Request] = []
    offsets = iter(range(100))

    @batching
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith("/applied"):
            return httpx.Response(200, json={"key": "k", "offset": 0, "applied": True})
        body: dict[str, Any] = json.loads(request.content) if request.content else {}
        name = str(body.get("name", "0"))
        partition = int(name[-1]) % 2 if name[-1].isdigit() else 0
        accepted = {"key": "acme/x", "action": "INSERT", "partition": partition, "offset": next(offsets)}
        return httpx.Response(202, json=accepted)

    async with Client("http://x", transport=httpx.MockTransport(handler), timeout_s=12) as client:
        await client.create({**CRON, "name": "one"})
        await client.action("acme", "one", "disable")
        assert [dict(r.url.params) for r in seen] == [{"wait": "applied", "waitMs": "10000"}] * 2
        seen.clear()
        result = await client.create_many([{**CRON, "name": f"n{i}"} for i in range(6)], concurrency=1)
    assert result.applied is True and all("wait" not in r.url.params for r in seen[:6])
    asked = sorted((r.url.path, r.url.params["offset"]) for r in seen[6:])
    assert asked == [("/schedules/acme/n4/applied", "6"), ("/schedules/acme/n5/applied", "7")], asked
    seen.clear()
    async with Client("http://x", transport=httpx.MockTransport(handler), wait_applied=False) as client:
        await client.delete("acme", "one")
        result = await client.create_many([{**CRON, "name": "n1"}])
    assert result.applied is None and [dict(r.url.params) for r in seen] == [{}, {}]


async def test_an_unreachable_server_is_an_api_error_naming_the_url() -> None:
    async with Client("http://127.0.0.1:9", retries=0) as client:
        with pytest.raises(ApiError, match=r"cannot reach http://127.0.0.1:9"):
            await client.schedules()


async def test_runs_logs_of_a_job_run_id_alone_reads_the_program_its_schedule_launches(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from scheduler.cli.jobs import cmd_runs_logs

    run_id = "acme/nightly report@1796083200000"
    page = {"text": "done\n", "next": 5, "size": 5, "complete": True, "dropped": 0, "status": "COMPLETED"}
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.raw_path.decode())
        if request.url.path.startswith("/schedules/"):
            return httpx.Response(200, json={**CRON, "program": "acme/etl/command/report"})
        return httpx.Response(200, json=page)

    args = cli.build_parser().parse_args(["runs", "logs", run_id])
    async with Client("http://x", transport=httpx.MockTransport(handler)) as client:
        await cmd_runs_logs(client, args)
    assert asked == [
        "/schedules/acme/nightly%20report",
        "/programs/acme/etl/command/report/runs/acme/nightly%20report@1796083200000/logs?offset=0",
    ], asked
    assert capsys.readouterr().out == "done\n"


def test_the_fields_only_answers_carry_are_every_field_of_a_schedule_answer_a_body_refuses() -> None:
    """A schedule as GET answers it, saved to a file, is a body POST takes (schedule_body drops the rest)."""
    from scheduler.cli.client import OUTPUT_ONLY
    from scheduler.http import responses
    from scheduler.http.api import ScheduleIn

    assert set(responses.Schedule.model_fields) - set(ScheduleIn.model_fields) == OUTPUT_ONLY


async def test_a_bulk_create_waits_applied_through_a_rebalance_instead_of_failing() -> None:
    """The owner answers 503 while partitions move (Retry-After, then again): the bulk create asks again
    until it is applied, within its timeout (the fault campaign's seed 2016 crashed on it)."""
    asked: list[str] = []

    async def sleep(s: float) -> None:
        return None

    @batching
    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            return httpx.Response(202, json={"key": "acme/a", "partition": 3, "offset": 7})
        asked.append(request.url.path)
        if len(asked) <= 6:  # (more than the request's own 503 retries)
            return httpx.Response(503, json={"error": "unavailable"}, headers={"Retry-After": "1"})
        return httpx.Response(200, json={"applied": True})

    async with Client("http://x", None, transport=httpx.MockTransport(handler), sleep=sleep) as client:
        result = await client.create_many([{"tenant": "acme", "name": "a"}])
    assert result.applied is True and not result.failures and asked[-1] == "/schedules/acme/a/applied"


async def test_a_batch_item_whose_partition_is_moving_is_sent_again() -> None:
    tries: dict[str, int] = {}

    async def sleep(s: float) -> None:
        return None

    @batching
    def handler(request: httpx.Request) -> httpx.Response:
        name = json.loads(request.content)["name"]
        tries[name] = tries.get(name, 0) + 1
        if name == "moving" and tries[name] < 3:
            return httpx.Response(503, json={"error": "unavailable", "reason": "partitions moving"})
        return httpx.Response(202, json={"key": f"acme/{name}", "action": "INSERT"})

    bodies = [{**CRON, "name": n} for n in ("a", "moving", "b")]
    async with Client(
        "http://x", transport=httpx.MockTransport(handler), sleep=sleep, wait_applied=False
    ) as client:
        result = await client.create_many(bodies)
    assert result.accepted == 3 and not result.failures and tries == {"a": 1, "moving": 3, "b": 1}
