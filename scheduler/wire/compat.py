"""Avro schema compatibility by the specification's resolution rules: can a reader with schema R read what
a writer wrote with schema W? Backward compatibility of a new schema = it reads what the released one wrote
(R new, W released); forward = the released one reads what the new one writes (R released, W new).

`problems(reader, writer, names_r, names_w)` returns every place the two do not resolve, each as a path
from the top record down to the field (`FiredTask.data`, `Schedule.trigger[CronTrigger].timezone`) and
why, so a breaking change names its field. `load(directory)` reads a directory of .avsc files into the
named types they define (full names)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fastavro

from scheduler.wire.codec import parse_schema_files

#: writer type -> the reader types it may be read as (the specification's promotions)
PROMOTIONS = {
    "int": {"int", "long", "float", "double"},
    "long": {"long", "float", "double"},
    "float": {"float", "double"},
    "string": {"string", "bytes"},
    "bytes": {"bytes", "string"},
}
PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def load(directory: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(file stem -> its parsed schema, full name -> every named type the files define), as written."""
    return parse_schema_files(
        directory, lambda _, raw, named: fastavro.parse_schema(raw, named_schemas=named, _write_hint=False)
    )


def _type(schema: Any, names: dict[str, Any]) -> Any:
    """A named reference resolved; a {"type": primitive} unwrapped (logical types read as their base)."""
    if isinstance(schema, str) and schema not in PRIMITIVES:
        return names[schema]
    if isinstance(schema, dict) and schema.get("type") in PRIMITIVES:
        return schema["type"]
    return schema


def _kind(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, str):
        return schema
    return str(schema["type"])


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _label(schema: Any) -> str:
    kind = _kind(schema)
    return _short(schema["name"]) if kind in ("record", "enum", "fixed") else kind


def problems(
    reader: Any, writer: Any, names_r: dict[str, Any], names_w: dict[str, Any], path: str = ""
) -> list[str]:
    """Where data written with `writer` cannot be read with `reader` (empty: compatible)."""
    return _check(reader, writer, names_r, names_w, path, set())


def _check(
    reader: Any, writer: Any, nr: dict[str, Any], nw: dict[str, Any], path: str, seen: set[tuple[str, str]]
) -> list[str]:
    r, w = _type(reader, nr), _type(writer, nw)
    kr, kw = _kind(r), _kind(w)
    if kw == "union":
        out = []
        for branch in w:
            b = _type(branch, nw)
            if kr == "union":
                match = _union_match(r, b, nr)
                if match is None:
                    out.append(f"{path}: the writer's union branch {_label(b)} is not in the reader's union")
                    continue
                out += _check(match, b, nr, nw, f"{path}[{_label(b)}]", seen)
            else:
                out += _check(r, b, nr, nw, f"{path}[{_label(b)}]", seen)
        return out
    if kr == "union":
        match = _union_match(r, w, nr)
        if match is None:
            return [f"{path}: the writer's {_label(w)} is in none of the reader's union branches"]
        return _check(match, w, nr, nw, path, seen)
    if kw in PRIMITIVES:
        if kr not in PROMOTIONS.get(kw, {kw}):
            return [f"{path}: the writer's {kw} cannot be read as {_label(r)}"]
        return []
    if kr != kw:
        return [f"{path}: the writer's {_label(w)} cannot be read as {_label(r)}"]
    if kw in ("record", "enum", "fixed") and _short(r["name"]) != _short(w["name"]):
        return [f"{path}: the writer's {kw} {_short(w['name'])} is not the reader's {_short(r['name'])}"]
    if kw == "record":
        pair = (r["name"], w["name"])
        if pair in seen:  # a recursive type: this pair is being checked further up
            return []
        seen = seen | {pair}
        here = path or _short(r["name"])
        written = {f["name"]: f for f in w["fields"]}
        out = []
        for field in r["fields"]:
            names = [field["name"], *field.get("aliases", [])]
            source = next((written[n] for n in names if n in written), None)
            where = f"{here}.{field['name']}"
            if source is None:
                if "default" not in field:
                    out.append(f"{where}: the reader's field has no default and the writer does not write it")
                continue
            out += _check(field["type"], source["type"], nr, nw, where, seen)
        return out
    if kw == "enum":
        missing = [s for s in w["symbols"] if s not in r["symbols"]]
        if missing and "default" not in r:
            return [
                f"{path or _short(r['name'])}: the reader's enum has no symbol {', '.join(missing)} (and no default)"
            ]
        return []
    if kw == "fixed":
        return [] if r["size"] == w["size"] else [f"{path}: fixed size {w['size']} read as {r['size']}"]
    if kw == "array":
        return _check(r["items"], w["items"], nr, nw, f"{path}[]", seen)
    if kw == "map":
        return _check(r["values"], w["values"], nr, nw, f"{path}{{}}", seen)
    return [f"{path}: unknown type {kw}"]


def _union_match(union: list[Any], writer: Any, names: dict[str, Any]) -> Any | None:
    """The reader's branch a writer's (non-union) type resolves to: the same named type or kind first,
    then the first a primitive promotes to."""
    kw = _kind(writer)
    for branch in union:
        b = _type(branch, names)
        if _kind(b) == kw and (
            kw not in ("record", "enum", "fixed") or _short(b["name"]) == _short(writer["name"])
        ):
            return b
    for branch in union:
        b = _type(branch, names)
        if kw in PRIMITIVES and _kind(b) in PROMOTIONS.get(kw, set()):
            return b
    return None
