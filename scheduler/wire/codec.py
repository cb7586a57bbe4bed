"""Avro wire format: the schemas in avro/, and the one place records convert to and from them.

Messages are schemaless Avro (fastavro), as light-scheduler's producers write them. A payload framed
the Confluent way (magic byte 0 + 4-byte schema id) is accepted too: the frame is stripped.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import fastavro

from scheduler.domain.constraints import (
    Constraint,
    PendingTimeout,
)
from scheduler.domain.events import Notification
from scheduler.domain.model import (
    MAX_TRIGGER_DEPTH,
    Action,
    CatchUpPolicy,
    OutputFormat,
    OverlapPolicy,
    Paused,
    PauseRequest,
    Schedule,
    ScheduleCommand,
    ScheduleKey,
    ScheduleState,
)
from scheduler.domain.runs import RetryPolicy
from scheduler.domain.triggers.kinds import (
    program_from_avro,
    program_to_avro,
    trigger_from_avro,
    trigger_to_avro,
)
from scheduler.wire.avro_writer import NULL as _NULL
from scheduler.wire.avro_writer import avro_string as _avro_string
from scheduler.wire.avro_writer import zigzag as _zigzag
from scheduler.wire.command_writer import write_time_command
from scheduler.wire.time_reader import Symbols, read_time_command, read_time_state, skip_long, skip_string

__all__ = ["program_from_avro", "program_to_avro", "trigger_from_avro", "trigger_to_avro"]


class DecodeError(ValueError):
    """Bytes that are not a valid message of the expected schema."""


def avro_dir() -> Path:
    """Where the schemas are: SCHEDULER_AVRO_DIR if set; else the copy an installed wheel carries
    (`scheduler/avro`, see pyproject.toml); else the repository's avro/ (a checkout, an editable install)."""
    if os.environ.get("SCHEDULER_AVRO_DIR"):
        return Path(os.environ["SCHEDULER_AVRO_DIR"])
    packaged = Path(__file__).resolve().parents[1] / "avro"
    return packaged if packaged.is_dir() else Path(__file__).resolve().parents[2] / "avro"


#: Largest input message (commands, light-scheduler, events) the worker decodes: a larger one is
#: dead-lettered unread. A valid schedule or event is far smaller (data and payload are at most 64 KiB).
MAX_MESSAGE_BYTES = 256 * 1024
#: AND/OR nesting the Avro reader follows at most; validation refuses more than MAX_TRIGGER_DEPTH anyway.
READER_TRIGGER_DEPTH = 2 * MAX_TRIGGER_DEPTH


@cache
def schemas() -> dict[str, Any]:
    """The schemas of avro/, as written (what we encode with)."""
    return _parse_schemas(avro_dir(), reader=False)


@cache
def _reader_schemas() -> dict[str, Any]:
    """The same with CompositeTrigger unrolled to READER_TRIGGER_DEPTH levels (what we decode with)."""
    return _parse_schemas(avro_dir(), reader=True)


@cache
def released_schemas() -> list[tuple[str, dict[str, Any]]]:
    """The schemas of each released version (avro/released/<version>/), newest first: what an older
    producer (a worker, launcher or client not yet upgraded) wrote, and older changelog records hold."""
    released = avro_dir() / "released"
    versions = sorted(
        (p for p in released.iterdir() if p.is_dir()) if released.is_dir() else (),
        key=lambda p: tuple(int(x) for x in p.name.split(".")),
        reverse=True,
    )
    return [(v.name, _parse_schemas(v, reader=True)) for v in versions]


def _parse_schemas(directory: Path, reader: bool) -> dict[str, Any]:
    """Every schema of `directory`; `reader`: CompositeTrigger unrolled (see _composite_levels)."""

    def parse(name: str, raw: dict[str, Any], named: dict[str, Any]) -> Any:
        if reader and name == "CompositeTrigger":
            *deeper, raw = _composite_levels(raw, READER_TRIGGER_DEPTH)
            for level in deeper:
                fastavro.parse_schema(level, named_schemas=named)
        return fastavro.parse_schema(raw, named_schemas=named)

    return parse_schema_files(directory, parse)[0]


def parse_schema_files(
    directory: Path, parse: Callable[[str, dict[str, Any], dict[str, Any]], Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every schema of `directory`, each parsed (`parse(file stem, its JSON, the named types so far)`) once
    the types it names are: a file may name any other. -> (file stem -> parsed, full name -> named type)."""
    named: dict[str, Any] = {}
    parsed: dict[str, Any] = {}
    pending = {p.stem: json.loads(p.read_text()) for p in sorted(directory.glob("*.avsc"))}
    while pending:
        before = len(pending)
        for name, raw in list(pending.items()):
            trial = dict(named)  # a failed parse may have named some types already
            try:
                schema = parse(name, raw, trial)
            except fastavro.schema.UnknownType:
                continue
            named, parsed[name] = trial, schema
            del pending[name]
        if len(pending) == before:
            raise ValueError(f"{directory}: {sorted(pending)} name types no schema defines")
    return parsed, named


#: in place of AND/OR below the deepest level the reader follows: a union of no branch, which no
#: message can select (reading it raises the IndexError of an out-of-range union branch)
_TOO_DEEP = {"type": "record", "name": "CompositeTriggerTooDeep", "fields": [{"name": "refused", "type": []}]}


def _composite_levels(raw: dict[str, Any], depth: int) -> list[dict[str, Any]]:
    """The recursive CompositeTrigger as `depth` records, deepest first, each naming the next level in
    its union and the deepest none: fastavro's C reader recurses once per level with no limit, and a
    hostile message nested a few thousand deep overflows the stack (the process dies, SIGSEGV). The
    binary form is the same; a deeper message reads an out-of-range union branch and is refused."""
    recursive = f"{raw['namespace']}.{raw['name']}"
    fields = {f["name"]: f for f in raw["fields"]}
    levels = []
    for level in range(depth, 0, -1):
        name = raw["name"] if level == 1 else f"{raw['name']}{level}"
        deeper = f"{recursive}{level + 1}"
        branches = fields["triggers"]["type"]["items"]
        if level == depth:  # the branch keeps its index (later kinds follow it) but reads nothing valid
            items = [_TOO_DEEP if b == recursive else b for b in branches]
        else:
            items = [deeper if b == recursive else b for b in branches]
        op = fields["op"]["type"]  # an enum defined inline: once, at the deepest level; named after
        op_type = op if level == depth else f"{raw['namespace']}.{op['name']}"
        levels.append(
            {
                **raw,
                "name": name,
                "fields": [
                    {**fields["op"], "type": op_type},
                    {**fields["triggers"], "type": {"type": "array", "items": items}},
                ],
            }
        )
    return levels


def encode(schema_name: str, record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schemas()[schema_name], record)
    return buf.getvalue()


def decode(schema_name: str, data: bytes | None, max_bytes: int | None = None) -> dict[str, Any]:
    return _decode(schema_name, data, max_bytes)[0]


def _decode(
    schema_name: str, data: bytes | None, max_bytes: int | None
) -> tuple[dict[str, Any], bytes | None]:
    """The record, and the bytes it was read from (the message's, or those after Confluent framing; None
    when an older released schema wrote them: the record then has the defaults of the fields added
    since). A schema evolves by fields added at the end of a record, each with a default, and enum symbols
    added at the end: bytes of a released version then never read as the current one (they end before
    its new fields), and are read with that version as the writer's schema."""
    if data is None:
        raise DecodeError("message has no value")
    if max_bytes is not None and len(data) > max_bytes:
        raise DecodeError(f"message of {len(data)} bytes is larger than the limit ({max_bytes} bytes)")
    candidates = [data]
    if len(data) > 5 and data[0] == 0:
        candidates.append(data[5:])  # Confluent framing
    reader = _reader_schemas()[schema_name]
    error: Exception | None = None
    for writers in (_reader_schemas(), *(w for _, w in released_schemas())):
        writer = writers.get(schema_name)
        if writer is None:
            continue
        for payload in candidates:
            try:
                return _read(payload, writer, reader), payload if writers is _reader_schemas() else None
            except Exception as exc:  # fastavro raises many types on garbage
                error = exc if error is None else error  # (what the current schema found wrong)
    if isinstance(error, DecodeError):
        raise DecodeError(f"not a valid Avro {schema_name}: {error}")
    raise DecodeError(f"not a valid Avro {schema_name}: {type(error).__name__}: {error}")


def _read(payload: bytes, writer: Any, reader: Any) -> dict[str, Any]:
    buf = io.BytesIO(payload)
    try:
        record = fastavro.schemaless_reader(
            buf,
            writer,
            None if reader is writer else reader,
            return_record_name=True,
            return_record_name_override=True,
        )
    except IndexError:
        raise DecodeError(
            "unknown enum symbol or union branch (an action or unit this schema does not have, "
            f"or AND/OR triggers nested deeper than {READER_TRIGGER_DEPTH})"
        ) from None
    if buf.tell() != len(payload):
        raise DecodeError(f"{len(payload) - buf.tell()} trailing bytes")
    assert isinstance(record, dict)
    return record


def encode_json(obj: Any) -> bytes:
    """Internal topics and tables (trigger index, trigger progress, job queue) hold compact JSON."""
    return _JSON.encode(obj).encode()


#: json.dumps with these options builds an encoder per call (~40 % of a small record's encoding)
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def decode_json(data: bytes | None) -> Any:
    if data is None:
        raise DecodeError("message has no value")
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise DecodeError(f"not valid JSON: {exc}") from None


def notification_to_avro(n: Notification) -> dict[str, Any]:
    return {"timestamp": n.timestamp, "eventType": n.event_type, "payload": dict(n.payload)}


def decode_notification(data: bytes | None) -> Notification:
    rec = decode("Notification", data, MAX_MESSAGE_BYTES)
    return Notification(rec["timestamp"], rec["eventType"], dict(rec["payload"]))


# --- records <-> Avro dicts -------------------------------------------------------------------


def key_to_avro(key: ScheduleKey) -> dict[str, Any]:
    return {"tenant": key.tenant, "name": key.name}


def key_bytes(key: ScheduleKey) -> bytes:
    """Kafka key of every schedule-keyed topic and table (== light-scheduler's TaskDefinitionKey): the Avro
    ScheduleKey, two strings, encoded by hand (byte-identical to fastavro's, unit-tested; 10x cheaper)."""
    return _avro_string(key.tenant) + _avro_string(key.name)


def tenant_prefix(tenant: str) -> bytes:
    """What every key of the tenant's schedules starts with (key_bytes: the tenant comes first)."""
    return _avro_string(tenant)


def key_from_bytes(data: bytes) -> ScheduleKey:
    rec = decode("ScheduleKey", data)
    return ScheduleKey(rec["tenant"], rec["name"])


def schedule_to_avro(s: Schedule) -> dict[str, Any]:
    return {
        "tenant": s.key.tenant,
        "name": s.key.name,
        "trigger": trigger_to_avro(s.trigger),
        "topic": s.topic,
        "data": dict(s.data),
        "enabled": s.enabled,
        "catchUp": s.catch_up.value,
        "catchUpWindowMs": s.catch_up_window_ms,
        # a union's record as (full name, record): the writer skips matching it against every branch
        "program": None if s.program is None else ("scheduler.ProgramId", program_to_avro(s.program)),
        "constraints": [c.to_avro() for c in s.constraints],
        "timeout": None if s.timeout is None else ("scheduler.PendingTimeout", s.timeout.to_json()),
        "retry": None if s.retry is None else ("scheduler.RetryPolicy", s.retry.to_json()),
        **s.plain_fields(),
    }


def schedule_from_avro(rec: dict[str, Any]) -> Schedule:
    timeout = rec.get("timeout")
    return Schedule(
        key=ScheduleKey(rec["tenant"], rec["name"]),
        trigger=trigger_from_avro(rec["trigger"]),
        topic=rec["topic"],
        data=dict(rec["data"] or {}),
        enabled=rec["enabled"],
        catch_up=CatchUpPolicy(rec["catchUp"]),
        catch_up_window_ms=rec["catchUpWindowMs"],
        program=None if rec.get("program") is None else program_from_avro(rec["program"]),
        constraints=tuple(Constraint.from_avro(c) for c in rec.get("constraints") or ()),
        timeout=None if timeout is None else PendingTimeout.from_json(timeout),
        retry=None if rec.get("retry") is None else RetryPolicy.from_json(rec["retry"]),
        time_limit_ms=rec.get("timeLimitMs"),
        output=OutputFormat(rec.get("output") or "FIRED_TASK"),
        not_before=rec.get("notBefore"),
        not_after=rec.get("notAfter"),
        spread_ms=rec.get("spreadMs"),
        jitter_ms=rec.get("jitterMs"),
        priority=rec.get("priority") or 0,
        complete_within_ms=rec.get("completeWithinMs"),
        fire_at_least_every_ms=rec.get("fireAtLeastEveryMs"),
        exclude_calendars=tuple(rec.get("excludeCalendars") or ()),
        description=rec.get("description"),
        labels=dict(rec.get("labels") or {}),
        pause_on_failure=rec.get("pauseOnFailure"),
        max_fires=rec.get("maxFires"),
        overlap=None if rec.get("overlap") is None else OverlapPolicy(rec["overlap"]),
    )


def encode_schedule(s: Schedule) -> bytes:
    """A schedule's definition alone (Avro `Schedule`): what its history keeps of each version."""
    return encode("Schedule", schedule_to_avro(s))


def decode_schedule(data: bytes) -> Schedule:
    return schedule_from_avro(decode("Schedule", data))


def encode_command(cmd: ScheduleCommand) -> bytes:
    # (written by hand where it can: a cron or frequency schedule's INSERT or UPDATE, a command without one)
    fast = write_time_command(cmd, _symbols())
    return fast if fast is not None else _avro_command(cmd)


def _avro_command(cmd: ScheduleCommand) -> bytes:
    return encode(
        "ScheduleCommand",
        {
            "key": key_to_avro(cmd.key),
            "action": cmd.action.value,
            # (full name, record): the writer skips matching the record against every branch (~2x faster)
            "schedule": None
            if cmd.schedule is None
            else ("scheduler.Schedule", schedule_to_avro(cmd.schedule)),
            "fireRange": None
            if cmd.fire_range is None
            else ("scheduler.FireRange", {"fromMs": cmd.fire_range[0], "toMs": cmd.fire_range[1]}),
            "arguments": cmd.arguments,
            "pause": None
            if cmd.pause is None
            else ("scheduler.PauseRequest", {"note": cmd.pause.note, "untilMs": cmd.pause.until_ms}),
        },
    )


@cache
def _symbols() -> Symbols:
    return Symbols(schemas())


def _hand_readable(data: bytes | None) -> bool:
    return bool(data) and data[0] != 0 and len(data) <= MAX_MESSAGE_BYTES  # type: ignore[index,arg-type]
    # (a zero first byte may be Confluent framing)


def _read_time_command(data: bytes | None) -> tuple[ScheduleCommand, bytes | None] | None:
    """The command by the hand reader (time_reader.py), or None where the Avro reader decides."""
    return read_time_command(data, _symbols()) if _hand_readable(data) else None  # type: ignore[arg-type]


def _read_time_state(data: bytes) -> ScheduleState | None:
    """The state by the hand reader (time_reader.py), or None where the Avro reader decides."""
    return read_time_state(data, _symbols()) if _hand_readable(data) else None


def decode_command(data: bytes | None) -> ScheduleCommand:
    return decode_command_with_schedule(data)[0]


def decode_command_with_schedule(data: bytes | None) -> tuple[ScheduleCommand, bytes | None]:
    """The command, and its schedule's own Avro bytes (for encode_state) when it carries one. A record
    is its fields' encodings end to end, so they are the bytes between the key, action and union branch
    at the head and the null fireRange, empty arguments and null pause (a byte each) at the tail: what
    INSERT and UPDATE carry."""
    fast = _read_time_command(data)
    return fast if fast is not None else _avro_command_with_schedule(data)


def _avro_command_with_schedule(data: bytes | None) -> tuple[ScheduleCommand, bytes | None]:
    rec, payload = _decode("ScheduleCommand", data, MAX_MESSAGE_BYTES)
    cmd = _command(rec, rec["schedule"])
    return cmd, None if payload is None else command_schedule_bytes(cmd, payload)  # (current bytes only)


def command_schedule_bytes(cmd: ScheduleCommand, data: bytes) -> bytes | None:
    """The schedule's own Avro bytes within `data`, `cmd`'s bytes as this release writes them: an INSERT's
    or UPDATE's (what decode_command_with_schedule gives beside the command); None for other commands."""
    if cmd.schedule is None or cmd.fire_range is not None or cmd.arguments or cmd.pause is not None:
        return None
    start = skip_string(data, skip_string(data, 0))  # the key: tenant, name
    start = skip_long(data, skip_long(data, start))  # the action, the union branch
    return data[start:-3]  # (then a null fireRange, empty arguments, a null pause: a byte each)


def _command(rec: dict[str, Any], sched: dict[str, Any] | None) -> ScheduleCommand:
    return ScheduleCommand(
        key=ScheduleKey(rec["key"]["tenant"], rec["key"]["name"]),
        action=Action(rec["action"]),
        schedule=None if sched is None else schedule_from_avro(sched),
        fire_range=None
        if rec.get("fireRange") is None
        else (rec["fireRange"]["fromMs"], rec["fireRange"]["toMs"]),
        arguments=dict(rec.get("arguments") or {}),
        pause=None
        if rec.get("pause") is None
        else PauseRequest(rec["pause"]["note"], rec["pause"]["untilMs"]),
    )


def encode_state(st: ScheduleState, schedule_avro: bytes | None = None) -> bytes:
    """ScheduleState: the schedule's record (`schedule_avro` when its bytes are known already, see
    decode_command_with_schedule), then the longs and the int, as zigzag varints (unit-tested against
    fastavro's writer)."""
    if schedule_avro is None:
        schedule_avro = encode("Schedule", schedule_to_avro(st.schedule))
    created = _zigzag(st.created_at)  # an INSERT's three instants are one
    updated = created if st.updated_at == st.created_at else _zigzag(st.updated_at)
    active = created if st.active_since == st.created_at else _zigzag(st.active_since)
    paused = _NULL if st.paused is None else _encode_paused(st.paused)
    fires = _NULL if not st.fires else _zigzag(st.fires)
    return b"".join((schedule_avro, created, updated, active, _zigzag(st.version), paused, fires))


def _encode_paused(p: Paused) -> bytes:
    """The `paused` union's record branch (1), as the Avro writer writes it."""
    out = [b"\x02"]
    for text in (p.note, p.by):
        if text is None:
            out.append(_NULL)
        else:
            raw = text.encode()
            out += [b"\x02", _zigzag(len(raw)), raw]
    out.append(_NULL if p.until_ms is None else b"\x02" + _zigzag(p.until_ms))
    out.append(_zigzag(p.at_ms))
    return b"".join(out)


def state_version(data: bytes) -> int | None:
    """A ScheduleState's version without decoding the rest, for a state that is not paused and counted no
    fires: then the record ends with the version's varint, the null `paused` and `fires` 0 (two zero
    bytes; a paused state's `paused` ends with its atMs, a positive varint, whose last byte is never zero).
    Anything else (paused, a limited schedule's, written by an earlier release, or not a state) is decoded
    whole; None if it does not decode."""
    if len(data) >= 3 and data[-1] == 0 and data[-2] == 0 and not data[-3] & 0x80:
        start = len(data) - 3
        while start > 0 and data[start - 1] & 0x80:
            start -= 1
        n = 0
        for shift, byte in enumerate(data[start:-2]):
            n |= (byte & 0x7F) << (7 * shift)
        return (n >> 1) ^ -(n & 1)
    try:
        return decode_state(data).version
    except DecodeError:
        return None


def decode_state(data: bytes) -> ScheduleState:
    fast = _read_time_state(data)
    if fast is not None:
        return fast
    rec = decode("ScheduleState", data)
    return ScheduleState(
        schedule=schedule_from_avro(rec["schedule"]),
        created_at=rec["createdAt"],
        updated_at=rec["updatedAt"],
        active_since=rec["activeSince"],
        version=rec["version"],
        paused=None if rec.get("paused") is None else _paused(rec["paused"]),
        fires=rec.get("fires") or 0,
    )


def _paused(rec: dict[str, Any]) -> Paused:
    return Paused(rec["atMs"], rec["note"], rec["by"], rec["untilMs"])
