"""The HTTP routes' shared steps and handlers through the web port, with no broker and no server: a fake
worker that owns every partition, a fake view that keeps what is answered, mocked requests."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request
from aiohttp.web_urldispatcher import UrlDispatcher

from scheduler.domain.model import Action, ScheduleCommand
from scheduler.http.auth import PRINCIPAL, Principal
from scheduler.http.web import ROUTES, Handlers, _view_method
from scheduler.kafka.config import Settings
from scheduler.worker.counters import WorkerCounts
from scheduler.worker.programs import ProgramSpec

pytestmark = pytest.mark.unit


@dataclass
class FakeWorker:
    settings: Settings
    counts: WorkerCounts = field(default_factory=WorkerCounts)
    commands: list[ScheduleCommand] = field(default_factory=list)
    faust_app: Any = field(default_factory=lambda: SimpleNamespace(rebalancing=False))
    registry: Any = None

    def __post_init__(self) -> None:
        programs = {"acme/etl/spark/load": ProgramSpec(kind="pyspark", target="x.y:z")}

        async def start() -> None:
            return None

        async def lookup(program: str) -> ProgramSpec | None:
            return programs.get(program)

        self.registry = SimpleNamespace(start=start, get=programs.get, lookup=lookup, all=lambda: programs)

    def clock(self) -> int:
        return 1_795_000_000_000

    def partition_of(self, key: bytes) -> int:
        return 0

    def active_partitions(self) -> set[int]:
        return {0}

    def local_state(self, key: bytes) -> Any:
        return None

    def tenant_full(self, partition: int, tenant: str) -> bool:
        return False

    def submit_command(self, cmd: ScheduleCommand, headers: Any = None) -> asyncio.Future[object]:
        self.commands.append(cmd)
        acknowledged: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        acknowledged.set_result(SimpleNamespace(partition=0, offset=len(self.commands) - 1))
        return acknowledged


class FakeView:
    def json(self, value: Any, status: int = 200) -> Any:
        return SimpleNamespace(status=status, body=value, headers={})


@pytest.fixture
def worker(tmp_path: Path) -> FakeWorker:
    return FakeWorker(Settings(app_id="handlers", data_dir=tmp_path, auth="off"))


async def call(
    worker: FakeWorker,
    method: str,
    path: str,
    body: Any = None,
    tenants: frozenset[str] | None = None,
    query: str = "",
    headers: dict[str, str] | None = None,
    **params: str,
) -> Any:
    route = next(r for r in ROUTES if r.method == method and r.path == path)
    raw = b"" if body is None else json.dumps(body).encode()
    target = f"{path}?{query}" if query else path
    request = make_mocked_request(method, target, headers=headers, payload=None)
    request._read_bytes = raw  # what request.read() / request.json() answer
    request[PRINCIPAL] = Principal("t", frozenset({"sched:r", "sched:w"}), tenants)
    return await _view_method(Handlers(worker), route)(FakeView(), request, **params)  # type: ignore[arg-type]


CRON = {"tenant": "acme", "name": "a", "trigger": {"type": "cron", "expression": "0 * * * *"}, "topic": "out"}


async def test_a_valid_schedule_is_a_command_and_202(worker: FakeWorker) -> None:
    answer = await call(worker, "POST", "/schedules", CRON)
    assert (answer.status, answer.body) == (
        202,
        {"key": "acme/a", "action": "INSERT", "partition": 0, "offset": 0},
    )
    [cmd] = worker.commands
    assert cmd.action is Action.INSERT and cmd.schedule is not None and cmd.schedule.topic == "out"


async def test_the_shared_parse_names_the_field_and_sends_nothing(worker: FakeWorker) -> None:
    bad = {**CRON, "trigger": {"type": "programRuns", "program": "acme/etl/spark/load", "runs": 0}}
    answer = await call(worker, "POST", "/schedules", bad)
    assert answer.status == 400 and answer.body["fields"][0]["field"] == "trigger.runs"
    not_json = await call(worker, "POST", "/schedules", None)
    assert not_json.status == 400 and not_json.body["fields"] == [
        {"field": "body", "message": "not valid JSON"}
    ]
    assert worker.commands == []


async def test_the_tenant_guard_answers_403_before_the_handler(worker: FakeWorker) -> None:
    answer = await call(
        worker, "GET", "/schedules/{tenant}/{name}", tenants=frozenset({"beta"}), tenant="acme", name="a"
    )
    assert answer.status == 403 and "acme" in answer.body["reason"]
    program = "/programs/{namespace}/{application}/{type}/{name}"
    params = {"namespace": "acme", "application": "etl", "type": "spark", "name": "load"}
    assert (await call(worker, "GET", program, tenants=frozenset({"beta"}), **params)).status == 403
    assert (await call(worker, "GET", program, tenants=frozenset({"acme"}), **params)).status == 200


async def test_a_write_touching_another_tenants_program_is_refused(worker: FakeWorker) -> None:
    body = {
        **CRON,
        "trigger": {"type": "programStarted", "program": "beta/etl/spark/x"},
        "program": "acme/etl/spark/load",
    }
    answer = await call(worker, "POST", "/schedules", body, tenants=frozenset({"acme"}))
    assert answer.status == 403 and "beta" in answer.body["reason"] and worker.commands == []


async def test_a_missing_schedule_is_404_naming_it(worker: FakeWorker) -> None:
    answer = await call(worker, "DELETE", "/schedules/{tenant}/{name}", tenant="acme", name="gone")
    assert (answer.status, answer.body) == (404, {"error": "not found", "key": "acme/gone"})


async def test_every_route_has_one_handler_and_the_stop_route_comes_before_the_run_route() -> None:
    assert len({(r.method, r.path) for r in ROUTES}) == len(ROUTES)
    paths = [r.path for r in ROUTES]
    stop = next(i for i, p in enumerate(paths) if p.endswith("/stop"))
    one_run = next(i for i, p in enumerate(paths) if p.endswith("{run_id:[\\s\\S]+}"))
    assert stop < one_run


async def test_an_id_with_a_line_break_reaches_its_handler_and_a_message_id_of_one_is_400(
    worker: FakeWorker,
) -> None:
    """Found by schemathesis: '.' in a route's pattern stops at a line break, so DELETE /messages/%0A…
    matched no route (a 404 the document does not list); the handler answers 400 naming the field."""

    async def handler(request: Any) -> None:
        return None

    router = UrlDispatcher()
    for route in ROUTES:
        router.add_route(route.method, route.path, handler)
    for method, path, canonical, name in [
        ("DELETE", "/messages/%0Aa%2Fb", "/messages/{id}", "id"),
        (
            "GET",
            "/programs/a/b/c/d/runs/x%0A/y/logs",
            "/programs/{namespace}/{application}/{type}/{name}/runs/{run_id}/logs",
            "run_id",
        ),
    ]:
        match = await router.resolve(make_mocked_request(method, path))
        assert match.route.resource is not None and match.route.resource.canonical == canonical, path
        assert "\n" in match[name]
    for method in ("GET", "DELETE"):
        answer = await call(worker, method, r"/messages/{id:[\s\S]+}", id="\na/b")
        assert answer.status == 400 and answer.body["fields"][0]["field"] == "id", answer.body


async def test_a_dry_run_validates_as_the_write_and_answers_what_it_would_do_producing_nothing(
    worker: FakeWorker,
) -> None:
    from datetime import datetime
    from zoneinfo import ZoneInfo

    paris = {**CRON, "trigger": {"type": "cron", "expression": "0 30 9 * * *", "timezone": "Europe/Paris"}}
    answer = await call(worker, "POST", "/schedules", paris, query="dryRun=true")
    assert answer.status == 200, answer.body
    assert answer.body["dryRun"] is True and answer.body["key"] == "acme/a" and answer.body["triggerText"]
    nexts = [datetime.fromtimestamp(t / 1000, ZoneInfo("Europe/Paris")) for t in answer.body["next"]]
    assert len(nexts) == 10 and all((d.hour, d.minute) == (9, 30) for d in nexts)
    assert nexts[0].timestamp() * 1000 > worker.clock()
    bad = {**CRON, "trigger": {"type": "cron", "expression": "0 61 9 * * *"}}
    refused = await call(worker, "POST", "/schedules", bad, query="dryRun=true")
    assert refused.status == 400 and refused.body["fields"][0]["field"].startswith("trigger")
    odd = await call(worker, "POST", "/schedules", paris, query="dryRun=maybe")
    assert odd.status == 400 and odd.body["fields"][0]["field"] == "dryRun"
    assert worker.commands == []  # nothing produced by any of them
    assert (await call(worker, "POST", "/schedules", paris, query="dryRun=false")).status == 202
    assert len(worker.commands) == 1


async def test_a_write_is_answered_202_only_once_the_broker_has_it(worker: FakeWorker) -> None:
    """PUT /programs (as calendars, rules, events, a queue's or a run's orders) answers once the broker
    acknowledged the record: a schedule naming the program right after finds it (the registry reads its
    topic to the end as of then), and nothing answered 202 is lost with the worker. The worker's `publish`
    waits for the producer's acknowledgement (output.Output), the handler for `publish`."""
    from scheduler.worker.output import Output

    sent: list[tuple[str, bytes, int | None]] = []
    acks: list[asyncio.Future[object]] = []

    async def send(topic: str, key: bytes, value: bytes | None, partition: int | None = None) -> Any:
        sent.append((topic, key, partition))
        acks.append(asyncio.get_running_loop().create_future())
        return acks[-1]  # (batched: what the broker will say, later)

    real = Output.__new__(Output)
    real._producer = SimpleNamespace(send=send)  # type: ignore[assignment]
    real.partition_of = worker.partition_of  # type: ignore[method-assign]
    worker.publish = real.publish  # type: ignore[attr-defined]
    body = {"kind": "pyspark", "target": "x.y:z"}
    program = "/programs/{namespace}/{application}/{type}/{name}"
    writes = [
        call(worker, "PUT", program, body, namespace="acme", application="etl", type="spark", name="more"),
        call(worker, "POST", "/events", {"eventType": "data", "payload": {"datasetId": "acme.orders"}}),
    ]
    for write, (topic, partition) in zip(writes, [(worker.settings.programs_topic, None),
                                                  (worker.settings.events_topic, 0)], strict=True):  # fmt: skip
        answering = asyncio.create_task(write)
        for _ in range(20):
            await asyncio.sleep(0)
        assert (sent[-1][0], sent[-1][2]) == (topic, partition) and not answering.done(), sent
        acks[-1].set_result(SimpleNamespace(partition=0, offset=7))
        assert (await asyncio.wait_for(answering, 5)).status == 202


async def test_a_batch_reads_its_requests_options_once_for_every_item(worker: FakeWorker) -> None:
    items = [{**CRON, "name": "b1"}, {**CRON, "name": "b2"}]
    bad = await call(
        worker, "POST", "/schedules:batch", {"schedules": items}, headers={"X-Request-Timeout-Ms": "x"}
    )
    assert bad.status == 200 and [r["status"] for r in bad.body["results"]] == [400, 400]
    assert {r["fields"][0]["field"] for r in bad.body["results"]} == {"X-Request-Timeout-Ms"}
    late = await call(
        worker, "POST", "/schedules:batch", {"schedules": items}, headers={"X-Request-Deadline": "1"}
    )
    assert [r["status"] for r in late.body["results"]] == [408, 408]
    atomic = {"schedules": items, "atomic": True}
    odd = await call(worker, "POST", "/schedules:batch", atomic, query="wait=soon")
    assert [r["fields"][0]["field"] for r in odd.body["results"]] == ["wait", "wait"]
    assert worker.commands == []
    fine = await call(worker, "POST", "/schedules:batch", atomic, headers={"X-Request-Timeout-Ms": "5000"})
    assert [r["status"] for r in fine.body["results"]] == [202, 202]
    assert [c.key.name for c in worker.commands] == ["b1", "b2"]
