"""Schedules as code: a directory of YAML/JSON files (and the `@schedule` decorators of modules,
client/code.py) is the truth, `apply` makes the scheduler match it.

`read_sources` reads the files (`programs: {id: spec}` and `schedules: [...]`, or one schedule, or a list
of them); `plan` compares them with what the scheduler holds, by key, on the definitions' canonical form
(each parsed and written back as the server would, so a field left at its default equals it spelled out):
create what is new, update what differs (with the version read, If-Match), leave what is equal, and —
with `prune` — delete the schedules of the files' tenants that no file holds (only those a selector
matches, when one is given). `apply_plan` carries it out. Applying a plan twice changes nothing the
second time.

Two choices, documented in docs/how-to/schedules-as-code.md: a schedule paused by an operator (a
disable with a note or an end) stays paused, whatever `enabled` its file says (an incident's pause is
not undone by a deploy); programs are registered or re-registered, never pruned (a program may be run
by schedules of other tenants)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from scheduler.client.http import ApiError, HttpClient

SUFFIXES = (".yaml", ".yml", ".json")
Verb = Literal["create", "update", "delete", "unchanged", "register"]


class SourceError(Exception):
    """The files are wrong (unreadable, a key held twice, a definition the server would refuse)."""


@dataclass
class Sources:
    """What the files say: schedules by key ("tenant/name") and programs by id, each with its file."""

    schedules: dict[str, dict[str, Any]] = field(default_factory=dict)
    programs: dict[str, dict[str, Any]] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)  # key or program id -> the file it is in

    @property
    def tenants(self) -> set[str]:
        return {key.partition("/")[0] for key in self.schedules}


@dataclass(frozen=True)
class Change:
    verb: Verb
    key: str  # a schedule's "tenant/name", a program's id
    what: Literal["schedule", "program"] = "schedule"
    body: dict[str, Any] | None = None  # what is sent: a POST/PUT body
    version: int | None = None  # the version an update or delete is made over (If-Match)
    diff: tuple[str, ...] = ()
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"verb": self.verb, "what": self.what, "key": self.key}
        if self.diff:
            out["diff"] = list(self.diff)
        if self.version is not None:
            out["version"] = self.version
        if self.note:
            out["note"] = self.note
        return out


def source_files(paths: Iterable[str]) -> list[Path]:
    """The files named, and the *.yaml/*.yml/*.json under each directory named (recursively, sorted)."""
    found: list[Path] = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
        elif path.exists():
            found.append(path)
        else:
            raise SourceError(f"{text}: no such file or directory")
    return found


def read_sources(paths: Iterable[str], modules: Iterable[str] = ()) -> Sources:
    """The files' definitions, and those the decorated functions of `modules` declare (client/code.py)."""
    from scheduler.cli.client import UsageError, load_document, objects_of

    sources = Sources()
    if modules:
        from scheduler.client.code import collect

        try:
            programs, schedules, origin = collect(modules)
        except Exception as exc:  # (importing runs the module's code: whatever it raises, said in a line)
            raise SourceError(f"--module {', '.join(modules)}: {type(exc).__name__}: {exc}") from None
        for program, spec in programs.items():
            _hold(sources, "program", program, origin[program])
            sources.programs[program] = spec
        for item in schedules:
            key = f"{item['tenant']}/{item['name']}"
            _hold(sources, "schedule", key, origin[key])
            sources.schedules[key] = item
    for path in source_files(paths):
        try:
            doc = load_document(str(path))
        except UsageError as exc:
            raise SourceError(str(exc)) from None
        if doc is None:
            continue  # (an empty file)
        if isinstance(doc, dict) and "programs" in doc:
            programs = doc["programs"]
            if not isinstance(programs, dict):
                raise SourceError(f"{path}: programs: expected a mapping of program id -> its spec")
            for program, spec in programs.items():
                _hold(sources, "program", str(program), path)
                sources.programs[str(program)] = dict(spec) if isinstance(spec, dict) else spec
            doc = {"schedules": doc.get("schedules") or []}
        try:
            items = objects_of(doc, "schedules", str(path)) if doc != {"schedules": []} else []
        except UsageError as exc:
            raise SourceError(str(exc)) from None
        for item in items:
            tenant, name = item.get("tenant"), item.get("name")
            if not isinstance(tenant, str) or not isinstance(name, str):
                raise SourceError(f"{path}: a schedule without a tenant and a name: {item}")
            _hold(sources, "schedule", f"{tenant}/{name}", path)
            sources.schedules[f"{tenant}/{name}"] = item
    return sources


def _hold(sources: Sources, what: str, key: str, path: Path | str) -> None:
    if key in sources.origin:
        raise SourceError(
            f"{what} {key} is in {sources.origin[key]} and in {path}: one place holds it (a decorator's "
            "name= tells two of a function apart)"
        )
    sources.origin[key] = str(path)


def invalid(sources: Sources) -> list[str]:
    """Every definition the server would refuse, as "file: key: field: message" (nothing is sent then)."""
    from pydantic import ValidationError

    from scheduler.cli.client import schedule_body, validate_locally
    from scheduler.domain.model import ProgramId
    from scheduler.worker.programs import ProgramSpec

    problems: list[str] = []
    for program, spec in sources.programs.items():
        where = f"{sources.origin[program]}: program {program}"
        try:
            ProgramId.parse(program)
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
        try:
            problems += [f"{where}: {f}: {m}" for f, m in ProgramSpec.model_validate(spec).problems(program)]
        except ValidationError as exc:
            problems += [f"{where}: {'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
    for key, item in sources.schedules.items():
        for f in validate_locally(schedule_body(item)):
            problems.append(f"{sources.origin[key]}: {key}: {f['field']}: {f['message']}")
    return problems


def canonical(body: Mapping[str, Any]) -> dict[str, Any]:
    """A schedule's definition as the server writes it back (PUT's body shape; defaults spelled out)."""
    from scheduler.domain.model import ScheduleKey
    from scheduler.http.api import ScheduleBody, schedule_body_json

    fields = {k: v for k, v in body.items() if k in ScheduleBody.model_fields}
    return schedule_body_json(ScheduleBody.model_validate(fields).to_schedule(ScheduleKey("t", "n")))


def canonical_program(spec: Mapping[str, Any]) -> dict[str, Any]:
    from scheduler.worker.programs import ProgramSpec

    return ProgramSpec.model_validate(dict(spec)).model_dump()


def differences(old: Any, new: Any, path: str = "") -> list[str]:
    """`field.sub: old -> new` for each leaf that differs (lists compared whole)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted(set(old) | set(new), key=str):
            out += differences(old.get(k), new.get(k), f"{path}.{k}" if path else str(k))
        return out
    if old == new:
        return []
    return [f"{path}: {_short(old)} -> {_short(new)}"]


def _short(value: Any) -> str:
    import json

    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def plan(
    sources: Sources,
    current: Mapping[str, dict[str, Any]],
    programs: Mapping[str, dict[str, Any] | None],
    *,
    prune: bool = False,
    selector: str | None = None,
) -> list[Change]:
    """The changes that make the scheduler hold what `sources` say. `current`: the schedules of the
    sources' tenants as GET answers them, by key; `programs`: the registered spec of each program the
    sources name (None: not registered)."""
    from scheduler.cli.client import schedule_body
    from scheduler.domain.labels import parse_selector

    changes: list[Change] = []
    for program, spec in sorted(sources.programs.items()):
        wanted = canonical_program(spec)
        held = programs.get(program)
        if held is None:
            changes.append(Change("register", program, "program", wanted))
        elif canonical_program(held) != wanted:
            diff = tuple(differences(canonical_program(held), wanted))
            changes.append(Change("register", program, "program", wanted, diff=diff))
        else:
            changes.append(Change("unchanged", program, "program"))
    for key, item in sorted(sources.schedules.items()):
        body = schedule_body(item)
        now = current.get(key)
        if now is None:
            changes.append(Change("create", key, body=body))
            continue
        note = None
        if "topic" not in body and body.get("program") and now.get("program"):
            body["topic"] = now["topic"]  # (the server's launch topic: the file need not spell it)
        if now.get("paused") is not None and body.get("enabled", False) != now["enabled"]:
            paused = now["paused"]
            note = f"paused by {paused.get('by') or 'someone'}" + (
                f" ({paused['note']})" if paused.get("note") else ""
            )
            note += ": left paused, whatever enabled its file says"
            body["enabled"] = now["enabled"]
        wanted, held = canonical(body), canonical(now)
        put = {k: v for k, v in body.items() if k not in ("tenant", "name")}
        if wanted == held:
            changes.append(Change("unchanged", key, version=now["version"], note=note))
        else:
            diff = tuple(differences(held, wanted))
            changes.append(Change("update", key, body=put, version=now["version"], diff=diff, note=note))
    if prune:
        chosen = parse_selector(selector) if selector else None
        for key, now in sorted(current.items()):
            if key not in sources.schedules and (chosen is None or chosen.matches(now.get("labels") or {})):
                changes.append(Change("delete", key, version=now["version"]))
    return changes


async def read_current(
    client: HttpClient, tenants: Iterable[str], programs: Iterable[str]
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any] | None]]:
    """The schedules of `tenants` (by key) and the spec of each of `programs` (None: not registered)."""
    from scheduler.client.http import ApiError

    schedules: dict[str, dict[str, Any]] = {}
    for tenant in sorted(set(tenants)):
        async for s in client.all_schedules(tenant):
            schedules[s["key"]] = s
    specs: dict[str, dict[str, Any] | None] = {}
    for program in programs:
        try:
            specs[program] = await client.program(program)
        except ApiError as exc:
            if exc.status != 404:
                raise
            specs[program] = None
    return schedules, specs


@dataclass
class Outcome:
    done: dict[str, int] = field(default_factory=dict)  # verb -> how many
    failed: list[tuple[Change, ApiError]] = field(default_factory=list)


async def apply_plan(client: HttpClient, changes: Sequence[Change], concurrency: int = 16) -> Outcome:
    """Programs first (a schedule names a registered program), then the creates in batches (create_many),
    then the updates and deletes, `concurrency` in flight; a write that fails (a 412: changed since the plan)
    is reported, not retried."""
    from scheduler.client.http import ApiError

    outcome = Outcome()
    gate = asyncio.Semaphore(max(concurrency, 1))

    async def one(change: Change) -> None:
        tenant, _, name = change.key.partition("/")
        async with gate:
            try:
                if change.what == "program":
                    await client.register_program(change.key, change.body or {})
                elif change.verb == "update":
                    await client.update(tenant, name, change.body or {}, if_version=change.version)
                else:
                    await client.delete(tenant, name, if_version=change.version)
            except ApiError as exc:
                outcome.failed.append((change, exc))
                return
        outcome.done[change.verb] = outcome.done.get(change.verb, 0) + 1

    todo = [c for c in changes if c.verb != "unchanged"]
    await asyncio.gather(*(one(c) for c in todo if c.what == "program"))
    creates = [c for c in todo if c.what == "schedule" and c.verb == "create"]
    if creates:  # (in batches: POST /schedules:batch)
        made = await client.create_many([c.body or {} for c in creates], concurrency)
        failed = {i: exc for i, _, exc in made.failures}
        outcome.failed += [(creates[i], exc) for i, exc in sorted(failed.items())]
        if len(creates) > len(failed):
            outcome.done["create"] = len(creates) - len(failed)
    await asyncio.gather(*(one(c) for c in todo if c.what == "schedule" and c.verb != "create"))
    return outcome
