"""What every HTTP handler works with: the request as a `Call`, and answers through the response models."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any, cast

from faust.web import Request, Response, View
from pydantic import BaseModel, ValidationError

from scheduler.domain.model import ScheduleKey
from scheduler.http import auth
from scheduler.http import responses as out
from scheduler.http.api import validation_errors

#: the most items one page of a list answers (the default of `limit` where a list has one)
MAX_LIST = 10_000
#: the header a list that answers a bare map or list (programs, light-scheduler's) puts its next cursor in
NEXT_CURSOR_HEADER = "X-Next-Cursor"


def cursor_text(key: bytes) -> str:
    """A list's `next`: the last key of the page, base64url (opaque to clients)."""
    return base64.urlsafe_b64encode(key).decode().rstrip("=")


@dataclass(frozen=True)
class Call:
    """One request as a handler sees it: its view (to answer), the request, the path's parameters and
    the parsed body (None if the route takes none, or took an empty one)."""

    view: View
    request: Request
    params: dict[str, str] = field(default_factory=dict)
    body: Any = None
    received_at: int = 0  # epoch ms when the handling began (an HTTP write's deadline counts from it)

    @property
    def key(self) -> ScheduleKey:
        return ScheduleKey(self.params["tenant"], self.params["name"])

    @property
    def program(self) -> str:
        return "/".join(self.params[p] for p in ("namespace", "application", "type", "name"))

    def answer(self, model: type[BaseModel], body: Any, status: int = 200) -> Response:
        return answer(self.view, model, body, status)

    def error(self, status: int, **fields: Any) -> Response:
        return answer(self.view, out.Error, fields, status)

    def field_error(self, name: str, message: str) -> Response:
        return field_error(self.view, name, message)

    def unavailable(self, why: str) -> Response:
        response = self.error(503, error="unavailable", reason=why)
        response.headers["Retry-After"] = "2"
        return response


def answer(view: View, model: type[BaseModel], body: Any, status: int = 200) -> Response:
    """`body` through its response model (scheduler.http.responses): validated, then dumped with the keys it
    was given. The OpenAPI document's response schemas are these models'."""
    typed = model.model_validate(body)
    return view.json(typed.model_dump(mode="json", exclude_unset=True), status=status)


def field_error(view: View, name: str, message: str, status: int = 400) -> Response:
    errors = {"error": "invalid request", "fields": [{"field": name, "message": message}]}
    return answer(view, out.ValidationError, errors, status)


def deny_tenants(view: View, request: Request, *tenants: str) -> Response | None:
    """403 unless the request's token holds every one of `tenants`."""
    who = auth.principal_of(request)
    for tenant in sorted(set(tenants)):
        if not who.sees(tenant):
            reason = f"this token may not access tenant {tenant!r}"
            return answer(view, out.Error, {"error": "forbidden", "reason": reason}, status=403)
    return None


async def parse_body(
    view: View, request: Request, model: type[BaseModel], empty_ok: bool = False
) -> tuple[Any, Response | None]:
    """The body validated by `model`, or the 400 naming the field that is wrong."""
    if empty_ok and not await cast(Any, request).read():
        return None, None
    try:
        raw = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError, RecursionError):  # 10k-deep JSON
        return None, field_error(view, "body", "not valid JSON")
    try:
        return model.model_validate(raw), None
    except ValidationError as exc:
        errors = {"error": "invalid request", "fields": validation_errors(exc)}
        return None, answer(view, out.ValidationError, errors, status=400)
