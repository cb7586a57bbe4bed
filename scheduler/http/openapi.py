"""The OpenAPI 3.1 document of the HTTP API (GET /openapi.json).

Request bodies come from the pydantic models that validate them (scheduler.http.api,
scheduler.worker.programs), so the document cannot disagree with the validation; the paths' parameters,
words and answers are written in openapi_paths.py (their building blocks in openapi_parts.py), after what
scheduler.http.web answers. It is built once when the worker starts; tests check that it names every route
and no other.
"""

from __future__ import annotations

import json
import re
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from faust.web import Request, Response, View
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from scheduler.domain.calendars import CalendarIn
from scheduler.domain.notifications import RuleIn
from scheduler.http import responses, run_responses
from scheduler.http.api import (
    BackfillIn,
    BackfillsIn,
    EventIn,
    PauseIn,
    RunIn,
    ScheduleBody,
    ScheduleIn,
    TaskDefinitionIn,
)
from scheduler.http.batch import BatchIn
from scheduler.http.messages import MessageIn
from scheduler.http.openapi_parts import (
    _BODY_RULES,
    _DRY_RUN,
    _ERRORS,
    _REF,
    _STR,
    _WAIT,
    _WRITE_CONDITIONS,
    EXAMPLES,
    PATH,
    _json,
    _ref,
)
from scheduler.http.openapi_paths import _paths
from scheduler.worker.programs import ProgramSpec

if TYPE_CHECKING:
    from scheduler.worker.ports import WebPort

_BODY_MODELS: tuple[type[BaseModel], ...] = (
    ScheduleIn,
    ScheduleBody,
    RunIn,
    PauseIn,
    BackfillIn,
    BackfillsIn,
    TaskDefinitionIn,
    EventIn,
    MessageIn,
    ProgramSpec,
    CalendarIn,
    RuleIn,
    BatchIn,
)


def register_routes(worker: WebPort) -> None:
    """Add GET /openapi.json (public: see auth.PUBLIC_PATHS) to the worker's web app."""
    document = json.dumps(build_spec(), separators=(",", ":")).encode()

    @worker.faust_app.page(PATH)
    class OpenApi(View):
        async def get(self, request: Request) -> Response:
            return self.bytes(document, content_type="application/json")


def build_spec() -> dict[str, Any]:
    """The OpenAPI 3.1 document of every route scheduler.http.web registers (HEAD, which Faust adds to every
    route and answers as GET, is left implicit)."""
    _, defs = models_json_schema(
        [(m, "validation") for m in _BODY_MODELS]
        + [(m, "serialization") for m in responses.MODELS + run_responses.MODELS],
        ref_template=_REF,
    )
    schemas = defs["$defs"]
    for model, rules in _BODY_RULES.items():
        for field_name, extra in rules.items():
            schemas[model]["properties"][field_name].update(extra)
    paths = _paths()
    for path, ops in paths.items():
        for method, op in ops.items():
            op["operationId"] = _operation_id(method, path)
            if "requestBody" in op:
                op["responses"]["413"] = _ERRORS[413]
            if path.startswith(("/schedules", "/schedulers")) and method != "get":  # a write: its conditions
                op["parameters"] = [*op["parameters"], *_WRITE_CONDITIONS]
                op["responses"].update({str(s): _ERRORS[s] for s in (408, 412)})
            if path.startswith("/schedules") and method != "get":  # and a dry run, and wait=applied
                op["parameters"] = [*op["parameters"], _DRY_RUN, *_WAIT]
                if path == "/schedules:batch":  # (each item's answer is one of these, in its result)
                    continue
                op["responses"]["200"] = _json(
                    {"anyOf": [_ref("DryRun"), _ref("Accepted")]},
                    "dryRun=true: what the write would do; wait=applied: the write, applied",
                )
                op["responses"]["504"] = _ERRORS[504]
    one = paths["/schedules/{tenant}/{name}"]["get"]["responses"]["200"]
    one["headers"] = {"ETag": {"description": 'the schedule\'s version ("3"), for If-Match', "schema": _STR}}
    _link(paths, "post", "/schedules", {"tenant": "$request.body#/tenant", "name": "$request.body#/name"})
    program = "/programs/{namespace}/{application}/{type}/{name}"
    _link(
        paths, "put", program, {p: f"$request.path.{p}" for p in ("namespace", "application", "type", "name")}
    )
    try:
        app_version = version("kafka-job-scheduler")
    except PackageNotFoundError:
        app_version = "0"
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Kafka-native job scheduler",
            "version": app_version,
            "description": (
                "Writes are asynchronous: 202 means the command is on the commands topic. Any worker "
                "answers any query; while partitions move between workers a query answers 503 with "
                "Retry-After. Bearer tokens carry scopes sched:r (GET) and sched:w (other methods) and "
                "the tenants they may access; /health, /ui and /openapi.json are public."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": (
                        "Scopes (listed as roles in each operation's security requirement): sched:r "
                        "reads, sched:w writes. A token is bound to tenants, or to every tenant ('*')."
                    ),
                }
            },
        },
        "security": [{"bearer": []}],
    }


def _link(paths: dict[str, Any], method: str, path: str, parameters: dict[str, str]) -> None:
    """OpenAPI links from a write's 202 to the operations on what it created (stateful testing follows
    them): every operation under `path` that takes exactly these parameters."""
    prefix = "/schedules/{tenant}/{name}" if path == "/schedules" else path
    links = {
        op["operationId"]: {"operationId": op["operationId"], "parameters": parameters}
        for target, ops in paths.items()
        if target.startswith(prefix) and target.count("{") == len(parameters)
        for op in ops.values()
    }
    op = paths[path][method]
    op["responses"]["202"] = {**op["responses"]["202"], "links": links}


def _operation_id(method: str, path: str) -> str:
    """getSchedulesTenantName, postProgramsNamespaceApplicationTypeNameRunsRunIdStop, getOpenapiJson."""
    return method + "".join(w[:1].upper() + w[1:] for w in re.split(r"[^A-Za-z0-9]+", path) if w)


__all__ = ["build_spec", "register_routes"]

__all__ = ["EXAMPLES", "PATH", "build_spec", "register_routes"]
