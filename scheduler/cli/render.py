"""What the CLI prints: aligned tables, times and spans for people, and the server's words about
triggers and jobs. Pure text: no request (scheduler.cli.client makes those)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduler.client.http import BulkResult


def iso(ms: int | None) -> str:
    """Epoch ms as ISO-8601 UTC ('2026-11-22T10:00:00Z'; milliseconds only when there are any)."""
    if ms is None:
        return "-"
    dt = datetime.fromtimestamp(ms / 1000, UTC)
    text = dt.strftime("%Y-%m-%dT%H:%M:%S")
    return f"{text}.{ms % 1000:03d}Z" if ms % 1000 else f"{text}Z"


def duration(ms: int) -> str:
    """A span for people: 950ms, 12s, 5m 3s, 2h 5m, 3d 4h."""
    if ms < 1000:
        return f"{ms}ms"
    s = ms // 1000
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if s >= size:
            rest = (s % size) // sub_size
            return f"{s // size}{unit} {rest}{sub}" if rest else f"{s // size}{unit}"
    return f"{s}s"


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value).replace("\n", " ")


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Aligned columns, two spaces apart; numbers right-aligned; None as '-'."""
    raw = [list(r) for r in rows]
    text = [[cell(v) for v in r] for r in raw]
    widths = [len(h) for h in headers]
    for r in text:
        for i, v in enumerate(r):
            widths[i] = max(widths[i], len(v))
    numeric = [
        bool(raw) and all(isinstance(r[i], int | float) and not isinstance(r[i], bool) for r in raw)
        for i in range(len(headers))
    ]

    def line(values: Sequence[str], align: Sequence[bool]) -> str:
        return "  ".join(
            v.rjust(widths[i]) if align[i] else v.ljust(widths[i]) for i, v in enumerate(values)
        ).rstrip()

    return "\n".join([line(headers, numeric), *(line(r, numeric) for r in text)])


def fields_table(obj: dict[str, Any], times: Iterable[str] = ()) -> str:
    """One object as 'field  value' lines; the fields named in `times` (epoch ms) also in ISO-8601."""
    time_fields = set(times)
    rows = []
    for k, v in obj.items():
        if k in time_fields and isinstance(v, int):
            v = f"{iso(v)} ({v})"
        rows.append((k, cell(v)))
    width = max((len(k) for k, _ in rows), default=0)
    return "\n".join(f"{k.ljust(width)}  {v}".rstrip() for k, v in rows)


def paused_text(paused: dict[str, Any], short: bool = False) -> str:
    """A schedule's pause in words: `paused until <when>: <note>` (short: for a table cell), then since
    when and by whom."""
    until = paused.get("until")
    head = "paused" + ("" if until is None else f" until {iso(until)}")
    note = paused.get("note")
    if short:
        return head + ("" if not note else f": {note if len(note) <= 40 else note[:39] + '…'}")
    by = paused.get("by")
    since = f" (since {iso(paused['at'])}{'' if by is None else f' by {by}'})"
    return head + ("" if not note else f": {note}") + since


def trigger_summary(schedule: dict[str, Any]) -> str:
    """A schedule's trigger in words: the server's `triggerText` (each trigger kind describes itself)."""
    return str(schedule.get("triggerText") or cell(schedule.get("trigger")))


def explain_trigger(node: dict[str, Any], depth: int = 0) -> list[str]:
    """GET /schedules/{t}/{n}/trigger's tree in words, one line a trigger, [x] when satisfied."""
    pad = "  " * depth
    mark = "[x]" if node.get("satisfied") else "[ ]"
    if "op" in node:
        head = f"{pad}{mark} {'all' if node['op'] == 'AND' else 'any'} of:"
        return [head, *(line for c in node.get("triggers", []) for line in explain_trigger(c, depth + 1))]
    return [f"{pad}{mark} {node.get('text') or node.get('type')}"]


def explain_job(job: dict[str, Any], now_ms: int) -> str:
    """Why one pending job has not launched, in a sentence."""
    state = job.get("state")
    attempt = job.get("attempt") or 1
    retry = f", attempt {attempt} (run {job.get('runId')})" if attempt > 1 else ""
    head = f"{job['jobId']} ({state}{retry}, triggered {iso(job.get('triggeredAt'))})"
    if state == "PENDING_LAUNCH":
        return f"{head}: every constraint met; its launch request is being produced"
    blocked = job.get("blockedBy") or "a constraint"
    reason = f": {job['reason']}" if job.get("reason") else ""
    check_at = job.get("checkAt")
    if check_at is None:
        when = "checked again when a run of the program changes"
    else:
        when = f"checked again at {iso(check_at)}" + (
            f" (in {duration(check_at - now_ms)})" if check_at > now_ms else ""
        )
    return f"{head}: blocked by {blocked}{reason}; {when}"


@dataclass
class ProgressLine:
    """'n/total, rate, failures' on stderr: rewritten in place on a terminal, a line a second otherwise."""

    write: Callable[[str], Any]
    tty: bool
    verb: str = "sent"
    _last: float = 0.0

    def __call__(self, result: BulkResult, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self._last < (0.1 if self.tty else 1.0):
            return
        self._last = now
        text = (
            f"{self.verb} {result.done}/{result.total}  {result.rate:,.0f}/s  {len(result.failures)} failed"
        )
        if self.tty:
            self.write(f"\r{text}\033[K" + ("\n" if final else ""))
        else:
            self.write(text + "\n")


def print_answer(args: Any, data: Any, text: str | None) -> None:
    """`data` as JSON with --json, else the readable `text`."""
    if args.json:
        print(json.dumps(data, indent=2, ensure_ascii=False))
    elif text:
        print(text)
