"""HTTP for exclusion calendars: PUT and DELETE on the calendars topic (compacted; every worker follows
it), GET and list from the registry every worker holds."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Protocol

from scheduler.domain.calendars import Calendar, CalendarIn, calendar_key
from scheduler.domain.model import InvalidSchedule, ScheduleKey
from scheduler.http import auth
from scheduler.http import responses as out
from scheduler.http.calls import Call

if TYPE_CHECKING:
    from faust.web import Response

    from scheduler.worker.ports import WebPort


class Handlers(Protocol):
    """What these handlers use of the HTTP handlers (scheduler.http.web)."""

    worker: WebPort


async def put_calendar(h: Handlers, call: Call) -> Response:
    """Create or replace an exclusion calendar: on the calendars topic, which every worker follows."""
    body: CalendarIn = call.body
    tenant, name = call.params["tenant"], call.params["name"]
    calendar = Calendar.from_body(tenant, name, body)
    try:
        ScheduleKey(tenant, "x").validate()
        calendar.validate()
    except InvalidSchedule as exc:
        return call.field_error(exc.field, exc.message)
    value = json.dumps(calendar.to_json()).encode()
    await h.worker.publish(h.worker.settings.calendars_topic, calendar.id.encode(), value, partition=None)
    return call.answer(out.CalendarAccepted, {"calendar": calendar.id, "action": "PUT"}, 202)


async def delete_calendar(h: Handlers, call: Call) -> Response:
    key = calendar_key(call.params["tenant"], call.params["name"])
    await h.worker.calendars.start()
    if await h.worker.calendars.lookup(key) is None:
        return call.error(404, error="not found", calendar=key)
    await h.worker.publish(h.worker.settings.calendars_topic, key.encode(), None, partition=None)
    return call.answer(out.CalendarAccepted, {"calendar": key, "action": "DELETE"}, 202)


async def get_calendar(h: Handlers, call: Call) -> Response:
    await h.worker.calendars.start()
    calendar = await h.worker.calendars.lookup(calendar_key(call.params["tenant"], call.params["name"]))
    if calendar is None:
        return call.error(404, error="not found")
    return call.answer(out.CalendarOut, calendar.to_json())


async def list_calendars(h: Handlers, call: Call) -> Response:
    await h.worker.calendars.start()
    who = auth.principal_of(call.request)
    tenant = call.request.query.get("tenant")
    calendars = [
        c.to_json()
        for _, c in sorted(h.worker.calendars.all().items())
        if who.sees(c.tenant) and (tenant is None or c.tenant == tenant)
    ]
    return call.answer(out.Calendars, {"calendars": calendars})
