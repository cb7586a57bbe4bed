"""The OpenAPI document: valid 3.1, the same routes and methods as the worker's router, request examples
the models accept, response schemas the handlers' JSON conforms to, security as the auth middleware does."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import jsonschema_rs
import pytest
import schemathesis

from scheduler.domain.calendars import CalendarIn
from scheduler.domain.jobs import Job
from scheduler.domain.model import ScheduleState
from scheduler.domain.notifications import RuleIn
from scheduler.domain.runs import RunRecord
from scheduler.http import auth
from scheduler.http.api import (
    BackfillIn,
    BackfillsIn,
    EventIn,
    PauseIn,
    RunIn,
    ScheduleBody,
    ScheduleIn,
    TaskDefinitionIn,
    schedule_json,
)
from scheduler.http.batch import BatchIn
from scheduler.http.jobs import job_json as _job_json
from scheduler.http.messages import MessageIn
from scheduler.http.openapi import EXAMPLES, build_spec
from scheduler.http.web import register_views
from scheduler.kafka.config import Settings
from scheduler.wire.light import task_definition_from_schedule
from scheduler.worker.app import Worker
from scheduler.worker.programs import ProgramSpec

pytestmark = pytest.mark.unit

SPEC = build_spec()
METHODS = {"get", "put", "post", "delete", "patch", "options", "trace"}
# Faust's built-in pages (faust.web.apps: router, tables, production index), mounted when the web server
# starts. They are Faust's, not this API: left out of the document (auth lets only all-tenant tokens in).
FAUST_PAGES = ("/router/", "/table/")
FAUST_INDEX = "/"


def _router_operations(tmp_path: Path) -> set[tuple[str, str]]:
    """(path, method) of every route of a worker's aiohttp app, Faust's blueprints applied as at start."""
    worker = Worker(Settings(app_id="openapi-test", data_dir=tmp_path, auth="off"))
    register_views(worker)  # as the worker's entry point does
    web = cast(Any, worker.faust_app.web)
    web.init_server()  # what Faust does when the web server starts: mounts its blueprints
    out = set()
    for resource in web.web_app.router.resources():
        path = resource.canonical
        if path == FAUST_INDEX or path.startswith(FAUST_PAGES):
            continue
        for route in resource:
            # Faust adds HEAD to every view (answered as GET): implicit in the document
            if route.method != "HEAD":
                out.add((path, route.method.lower()))
    return out


def _spec_operations() -> set[tuple[str, str]]:
    return {(path, method) for path, ops in SPEC["paths"].items() for method in ops if method in METHODS}


def test_the_document_names_every_route_and_no_other(tmp_path):
    routes = _router_operations(tmp_path)
    spec = _spec_operations()
    assert routes - spec == set(), "routes missing from the OpenAPI document"
    assert spec - routes == set(), "operations in the OpenAPI document that no route serves"


def test_the_document_is_valid_openapi_3_1():
    assert SPEC["openapi"] == "3.1.0"
    schemathesis.openapi.from_dict(SPEC).validate()  # raises on any violation of the 3.1 meta-schema
    ids = [op["operationId"] for ops in SPEC["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids))


def test_every_reference_names_a_schema_of_the_document():
    """A `$ref` to a schema the document lacks leaves that answer undocumented (client generators stop on
    it; schemathesis skipped those parts): the notification rules' and the batch's answers did."""
    refs: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            refs.update([node["$ref"]] if isinstance(node.get("$ref"), str) else [])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(SPEC)
    schemas = {f"#/components/schemas/{name}" for name in SPEC["components"]["schemas"]}
    assert refs and refs - schemas == set()


def test_every_path_parameter_is_declared():
    for path, ops in SPEC["paths"].items():
        names = {part.strip("{}") for part in path.split("/") if part.startswith("{")}
        for method, op in ops.items():
            declared = {p["name"] for p in op["parameters"] if p["in"] == "path"}
            assert declared == names, f"{method.upper()} {path}"


def test_request_bodies_are_the_models_schemas_and_their_examples_validate():
    models = {
        "ScheduleIn": ScheduleIn,
        "ScheduleBody": ScheduleBody,
        "RunIn": RunIn,
        "BackfillIn": BackfillIn,
        "BackfillsIn": BackfillsIn,
        "TaskDefinitionIn": TaskDefinitionIn,
        "EventIn": EventIn,
        "PauseIn": PauseIn,
        "MessageIn": MessageIn,
        "ProgramSpec": ProgramSpec,
        "CalendarIn": CalendarIn,
        "RuleIn": RuleIn,
        "BatchIn": BatchIn,
    }
    seen = set()
    for ops in SPEC["paths"].values():
        for op in ops.values():
            if "requestBody" not in op:
                continue
            media = op["requestBody"]["content"]["application/json"]
            name = media["schema"]["$ref"].rsplit("/", 1)[1]
            seen.add(name)
            models[name].model_validate(media["example"])
            _validate(name, media["example"])
    assert seen == set(models)
    # the model's own fields and constraints, plus the rules Schedule.validate adds
    fields = SPEC["components"]["schemas"]["ScheduleIn"]["properties"]
    assert set(fields) == set(ScheduleIn.model_fields)
    assert fields["tenant"]["maxLength"] == 128 and fields["name"]["maxLength"] == 256
    assert SPEC["components"]["schemas"]["ScheduleIn"]["additionalProperties"] is False


def _validate(schema_name: str, instance: Any) -> None:
    root = {"$ref": f"#/components/schemas/{schema_name}", "components": SPEC["components"]}
    jsonschema_rs.Draft202012Validator(root).validate(instance)


def _state(body: dict[str, Any]) -> ScheduleState:
    parsed = ScheduleIn.model_validate(body)
    return ScheduleState(parsed.to_schedule(parsed.key()), 1_000, 2_000, 2_000, 3)


CRON = EXAMPLES["ScheduleIn"]  # the README's first schedule
PROGRAM = {
    "tenant": "acme",
    "name": "clicks-etl",
    "trigger": {
        "type": "and",
        "triggers": [
            {"type": "partition", "dataset": "acme.clicks", "minPartitions": 2},
            {"type": "elapsed", "ms": 60_000},
        ],
    },
    "program": "acme/pipelines/spark/clicks-etl",
    "topic": "scheduler-launches",
    "constraints": [
        {"type": "concurrency", "maxRuns": 1},
        {"type": "timeWindow", "start": "22:00", "end": "06:00", "timezone": "Europe/Paris"},
    ],
    "timeout": {"timeoutMs": 60_000, "action": "FORCE_START"},
}
FREQUENCY = {
    "tenant": "acme",
    "name": "every-minute",
    "trigger": {"type": "frequency", "timeUnit": "MINUTES", "time": 1},
    "topic": "acme-fires",
}


@pytest.mark.parametrize("body", [CRON, PROGRAM, FREQUENCY], ids=["cron", "program", "frequency"])
def test_a_schedule_as_the_api_shows_it_conforms(body):
    state = _state(body)
    _validate("Schedule", schedule_json(state, 5_000))
    _validate("Schedule", schedule_json(state, None))
    _validate("ScheduleList", {"schedules": [schedule_json(state, None)], "total": 1})


def test_a_task_definition_conforms():
    td = task_definition_from_schedule(_state(FREQUENCY).schedule)
    _validate("TaskDefinition", td)


def test_runs_and_jobs_conform():
    run = RunRecord("acme/clicks-etl@v1.1", "acme/pipelines/spark/clicks-etl", "RUNNING", created_at=5)
    run.transitions.append(["RUNNING", 7])
    _validate("Run", run.to_json())
    _validate("Runs", {"program": run.program, "runs": [run.to_json()]})
    job = Job("acme/clicks-etl@v1.1", "acme/clicks-etl", 1, run.program, "t", {"a": "b"}, 5, (), None)
    _validate("Jobs", {"jobs": [_job_json(job)], "recent": []})


def test_public_operations_are_the_auth_public_paths_and_scopes_follow_the_method():
    public = set()
    for path, ops in SPEC["paths"].items():
        for method, op in ops.items():
            if op["security"] == []:
                public.add(path)
                continue
            scope = auth.READ if method == "get" else auth.WRITE
            assert op["security"] == [{"bearer": [scope]}], f"{method.upper()} {path}"
            assert {"401", "403"} <= set(op["responses"]), f"{method.upper()} {path}"
    # the middleware lets these in without a token: PUBLIC_PATHS and the admin page's files under /ui/
    assert public == {p for p in SPEC["paths"] if p in auth.PUBLIC_PATHS or p.startswith("/ui/")}
    assert "/openapi.json" in public


def test_a_query_that_can_meet_a_rebalance_documents_503_with_retry_after():
    for path in ("/schedules", "/schedules/{tenant}/{name}", "/jobs", "/triggers"):
        response = SPEC["paths"][path]["get"]["responses"]["503"]
        assert response["headers"]["Retry-After"]["required"] is True
    assert set(SPEC["components"]["schemas"]["ValidationError"]["required"]) == {"error", "fields"}


def test_the_schemas_reject_what_the_api_rejects():
    # also a test of _validate itself: it must be able to fail
    with pytest.raises(jsonschema_rs.ValidationError):
        _validate("ScheduleIn", {**CRON, "tenant": "a/b"})
    with pytest.raises(jsonschema_rs.ValidationError):
        _validate("Schedule", {"key": "acme/x"})
