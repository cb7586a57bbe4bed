"""The CLI's side of the HTTP API: its arguments, schedule files and instants (the requests themselves are
the client library's, scheduler.client.http). What the commands print is scheduler.cli.render's."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

#: fields GET /schedules adds to a schedule; dropped from files so a listing can be imported again
OUTPUT_ONLY = frozenset(
    {
        "key",
        "createdAt",
        "updatedAt",
        "activeSince",
        "version",
        "nextFireAt",
        "triggerText",
        "finished",
        "fires",
        "firesLeft",
        "paused",
    }
)


class UsageError(Exception):
    """The command line (or the file it names) is wrong: exit code 2."""


# --- arguments ------------------------------------------------------------------------------------


def parse_schedule_ref(ref: str) -> tuple[str, str]:
    """TENANT/NAME (neither may contain '/')."""
    tenant, sep, name = ref.partition("/")
    if not sep or not tenant or not name or "/" in name:
        raise UsageError(f"expected TENANT/NAME, got {ref!r}")
    return tenant, name


def parse_program(ref: str) -> str:
    """namespace/application/type/name."""
    parts = ref.split("/")
    if len(parts) != 4 or not all(parts):
        raise UsageError(f"expected a program as namespace/application/type/name, got {ref!r}")
    return "/".join(quote(p, safe="") for p in parts)


def parse_payload(pairs: Iterable[str]) -> dict[str, str]:
    """key=value arguments (the value may contain '=')."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"expected key=value, got {pair!r}")
        out[key] = value
    return out


def parse_list(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def parse_instant(text: str, now_ms: int | None = None) -> int:
    """Epoch ms from ISO-8601 (naive = UTC; a date alone = its midnight UTC), digits (epoch ms), 'now', or
    from now: +90s, +5m, +2h, +1d."""
    text = text.strip()
    now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
    if text == "now":
        return now
    later = re.fullmatch(r"\+(\d+(?:\.\d+)?)(ms|s|m|h|d)", text)
    if later:
        unit = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}[later.group(2)]
        return now + round(float(later.group(1)) * unit)
    if text.isdigit():
        return int(text)
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"not an instant: {text!r} (ISO-8601 like 2026-11-22T10:00:00Z, epoch ms, 'now', or +30s, +5m, +2h)"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


# --- files ----------------------------------------------------------------------------------------


def load_document(path: str, stdin_text: Callable[[], str] | None = None) -> Any:
    """A YAML or JSON file ('-': standard input). YAML parses JSON too; JSON first for its messages."""
    import yaml

    if path == "-":
        import sys

        text = stdin_text() if stdin_text is not None else sys.stdin.read()
    else:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    if path.endswith(".json"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}: not valid JSON: {exc}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: not valid YAML: {exc}") from None


def objects_of(doc: Any, plural: str, path: str = "file") -> list[dict[str, Any]]:
    """One object, a list of them, or {plural: [...]} (what GET /schedules answers)."""
    if isinstance(doc, dict) and set(doc) <= {plural, "total", "next"} and isinstance(doc.get(plural), list):
        doc = doc[plural]
    items = doc if isinstance(doc, list) else [doc]
    if not items:
        raise UsageError(f"{path}: no {plural} in it")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            where = f"{path}: item {i}" if isinstance(doc, list) else path
            raise UsageError(
                f"{where}: expected a mapping, got {type(item).__name__} "
                f"(a file holds one object, a list, or {{{plural}: [...]}})"
            )
    return items


def schedule_body(item: dict[str, Any]) -> dict[str, Any]:
    """A POST /schedules body from a file's object: without the fields the server adds to its answers."""
    return {k: v for k, v in item.items() if k not in OUTPUT_ONLY}


def validate_locally(body: dict[str, Any], with_key: bool = True) -> list[dict[str, str]]:
    """The field errors the server would answer 400 with, found without it (--dry-run)."""
    from pydantic import ValidationError

    from scheduler.domain.commands import CommandRejected, validate_command
    from scheduler.domain.model import Action, InvalidSchedule, ScheduleCommand, ScheduleKey
    from scheduler.http.api import ScheduleBody, ScheduleIn, validation_errors

    try:
        if with_key:
            parsed_in = ScheduleIn.model_validate(body)
            key = parsed_in.key()
            schedule = parsed_in.to_schedule(key)
        else:
            parsed = ScheduleBody.model_validate(body)
            key = ScheduleKey("tenant", "name")
            schedule = parsed.to_schedule(key)
        if schedule.program is not None and not schedule.topic:
            from dataclasses import replace

            schedule = replace(schedule, topic="launches")  # the server fills in its launch topic
        validate_command(ScheduleCommand(key, Action.INSERT, schedule))
    except ValidationError as exc:
        return validation_errors(exc)
    except InvalidSchedule as exc:
        return [{"field": exc.field, "message": exc.message}]
    except CommandRejected as exc:
        return [{"field": "body", "message": str(exc)}]
    return []


__all__ = [
    "UsageError",
    "load_document",
    "objects_of",
    "parse_instant",
    "parse_program",
    "parse_schedule_ref",
    "validate_locally",
]
