"""Schemas that evolve safely: every schema of avro/ reads what each released version (avro/released/<v>/,
kept as fixtures) wrote — backward — and the released consumers of what we publish read what we write
now — forward; a breaking change fails here naming the field. Then the checker itself on mutations."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import fastavro
import pytest

from scheduler.wire import compat
from scheduler.wire.codec import avro_dir

pytestmark = pytest.mark.unit

AVRO = avro_dir()
RELEASED = sorted((p for p in (AVRO / "released").iterdir() if p.is_dir()), key=lambda p: p.name)
#: what consumers outside the scheduler read (output topics, launchers, alert and dead-letter readers):
#: an old consumer must read what a new worker writes. Definitions (schedules, commands, triggers) are
#: backward only: a new trigger kind or enum symbol is a union branch or symbol an older worker cannot
#: read, so workers are upgraded before producers use them (README, "Schemas that change").
FORWARD = ("FiredTask", "LaunchRequest", "DeadLetter", "Notification", "Alert", "FireProgress")


def test_there_are_released_versions_to_check_against() -> None:
    assert [p.name for p in RELEASED] >= ["0.1.0", "0.2.0"], RELEASED
    for version in RELEASED:
        assert len(list(version.glob("*.avsc"))) >= 30, version


@pytest.mark.parametrize("version", RELEASED, ids=lambda p: p.name)
def test_every_schema_reads_what_a_released_version_wrote(version: Path) -> None:
    current, names_now = compat.load(AVRO)
    released, names_then = compat.load(version)
    assert released.keys() <= current.keys(), (
        f"schemas removed since {version.name}: {released.keys() - current.keys()}"
    )
    broken = {
        stem: found
        for stem, schema in released.items()
        if (found := compat.problems(current[stem], schema, names_now, names_then))
    }
    assert not broken, f"avro/ cannot read what {version.name} wrote:\n" + json.dumps(broken, indent=1)


@pytest.mark.parametrize("version", RELEASED, ids=lambda p: p.name)
def test_released_consumers_read_what_is_written_now(version: Path) -> None:
    current, names_now = compat.load(AVRO)
    released, names_then = compat.load(version)
    checked = [stem for stem in FORWARD if stem in released]
    assert "FiredTask" in checked and "LaunchRequest" in checked, checked
    broken = {
        stem: found
        for stem in checked
        if (found := compat.problems(released[stem], current[stem], names_then, names_now))
    }
    assert not broken, f"a {version.name} consumer cannot read what avro/ writes:\n" + json.dumps(
        broken, indent=1
    )


# --- the checker, on changes that break and changes that do not ------------------------------------


def fired(change: Any = None) -> tuple[Any, dict[str, Any]]:
    """FiredTask as avro/ has it, after `change(raw)`, parsed with the other current types."""
    raw = json.loads((AVRO / "FiredTask.avsc").read_text())
    if change is not None:
        change(raw)
    _, names = compat.load(AVRO)
    names = {k: v for k, v in names.items() if k != "scheduler.FiredTask"}
    return fastavro.parse_schema(raw, named_schemas=names, _write_hint=False), names


def field(raw: dict[str, Any], name: str) -> dict[str, Any]:
    return next(f for f in raw["fields"] if f["name"] == name)


def test_a_field_added_without_a_default_breaks_backward_and_names_it() -> None:
    old, names = fired()
    new, names_new = fired(lambda r: r["fields"].append({"name": "priority", "type": "int"}))
    assert compat.problems(new, old, names_new, names) == [
        "FiredTask.priority: the reader's field has no default and the writer does not write it"
    ]
    with_default, names_d = fired(
        lambda r: r["fields"].append({"name": "priority", "type": "int", "default": 0})
    )
    assert compat.problems(with_default, old, names_d, names) == []
    assert compat.problems(old, with_default, names, names_d) == []  # an old reader skips it


def test_a_changed_type_names_the_field_and_promotions_are_allowed() -> None:
    old, names = fired()
    as_int, names_i = fired(lambda r: field(r, "jobId").update(type="int"))
    assert compat.problems(as_int, old, names_i, names) == [
        "FiredTask.jobId: the writer's string cannot be read as int"
    ]
    wider, names_w = fired(lambda r: field(r, "missed").update(type="long"))
    assert compat.problems(wider, old, names_w, names) == []  # int -> long
    assert compat.problems(old, wider, names, names_w) == [
        "FiredTask.missed: the writer's long cannot be read as int"
    ]


def test_a_removed_field_breaks_forward_when_the_old_reader_has_no_default() -> None:
    old, names = fired()
    without, names_wo = fired(lambda r: r.update(fields=[f for f in r["fields"] if f["name"] != "dueAt"]))
    assert compat.problems(without, old, names_wo, names) == []  # a new reader ignores what it does not know
    assert compat.problems(old, without, names, names_wo) == [
        "FiredTask.dueAt: the reader's field has no default and the writer does not write it"
    ]


def test_enum_symbols_and_union_branches_are_checked_by_path(tmp_path: Path) -> None:
    current, names = compat.load(AVRO)
    changed = copy.deepcopy(json.loads((AVRO / "TimeUnit.avsc").read_text()))
    changed["symbols"] = [s for s in changed["symbols"] if s != "DAYS"]
    folder = tmp_path
    for p in AVRO.glob("*.avsc"):
        (folder / p.name).write_text(p.read_text())
    (folder / "TimeUnit.avsc").write_text(json.dumps(changed))
    fewer, names_f = compat.load(folder)
    found = compat.problems(fewer["Schedule"], current["Schedule"], names_f, names)
    assert (
        "Schedule.trigger[FrequencyTrigger].frequency.timeUnit: the reader's enum has no symbol DAYS (and no default)"
        in found
    )
    schedule = json.loads((AVRO / "Schedule.avsc").read_text())
    trigger = next(f for f in schedule["fields"] if f["name"] == "trigger")
    trigger["type"] = [t for t in trigger["type"] if not str(t).endswith("OnceTrigger")]
    (folder / "Schedule.avsc").write_text(json.dumps(schedule))
    narrower, names_n = compat.load(folder)
    found = compat.problems(narrower["Schedule"], current["Schedule"], names_n, names)
    assert "Schedule.trigger: the writer's union branch OnceTrigger is not in the reader's union" in found
