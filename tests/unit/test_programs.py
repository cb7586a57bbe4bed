"""ProgramSpec validation and the in-memory ProgramRegistry (file load, apply of topic records). No Kafka:
the registry's consumer is never started."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from scheduler.worker.programs import ProgramRegistry, ProgramSpec, child_env, program_env

pytestmark = pytest.mark.unit

NIGHTLY = "acme/etl/pyspark/nightly"
BACKUP = "acme/ops/command/backup"


def spec_bytes(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


def registry(file: Path | None = None) -> ProgramRegistry:
    return ProgramRegistry("127.0.0.1:1", "programs-never-consumed", file)


# --- ProgramSpec -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"kind": "pyspark", "target": "pipelines.nightly:run"},
        {"kind": "pyspark", "target": "/opt/jobs/nightly.py", "master": "local[2]"},
        {"kind": "command", "argv": ["/bin/echo", "hi"]},
        {"kind": "external"},
    ],
    ids=["pyspark-module", "pyspark-script", "command", "external"],
)
def test_valid_specs_have_no_problems(fields: dict[str, Any]) -> None:
    spec = ProgramSpec.model_validate(fields)
    assert spec.kind == fields["kind"]
    assert spec.problems() == []


def test_defaults() -> None:
    spec = ProgramSpec(kind="external")
    assert (spec.target, spec.argv, spec.master, spec.env, spec.description) == ("", [], None, {}, "")


@pytest.mark.parametrize("kind", ["shell", "PYSPARK", "", None, 3])
def test_unknown_kind_refused(kind: Any) -> None:
    with pytest.raises(ValidationError):
        ProgramSpec.model_validate({"kind": kind})


def test_kind_required() -> None:
    with pytest.raises(ValidationError):
        ProgramSpec.model_validate({"target": "m:f"})


@pytest.mark.parametrize("extra", [{"image": "x"}, {"Kind": "command"}, {"args": ["a"]}])
def test_extra_fields_refused(extra: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="xtra"):
        ProgramSpec.model_validate({"kind": "command", "argv": ["true"], **extra})


def test_extra_fields_refused_in_json_too() -> None:
    with pytest.raises(ValidationError):
        ProgramSpec.model_validate_json(spec_bytes(kind="external", surprise=True))


def test_spec_is_frozen() -> None:
    spec = ProgramSpec(kind="command", argv=["true"])
    with pytest.raises(ValidationError):
        spec.kind = "external"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("fields", "bad"),
    [
        ({"kind": "pyspark", "target": "x" * 1025}, "target"),
        ({"kind": "command", "argv": ["a"] * 257}, "argv"),
        ({"kind": "pyspark", "target": "m:f", "master": "m" * 513}, "master"),
        ({"kind": "external", "description": "d" * 1025}, "description"),
        ({"kind": "external", "env": {f"K{i}": "v" for i in range(129)}}, "env"),
    ],
)
def test_limits(fields: dict[str, Any], bad: str) -> None:
    with pytest.raises(ValidationError, match=bad):
        ProgramSpec.model_validate(fields)


def test_pyspark_without_target_is_a_problem() -> None:
    problems = ProgramSpec(kind="pyspark").problems()
    assert len(problems) == 1
    assert problems[0][0] == "target"
    assert "target" in problems[0][1]


def test_pyspark_with_only_argv_still_needs_a_target() -> None:
    assert [f for f, _ in ProgramSpec(kind="pyspark", argv=["x"]).problems()] == ["target"]


def test_command_without_argv_is_a_problem() -> None:
    problems = ProgramSpec(kind="command", target="m:f").problems()
    assert len(problems) == 1
    assert problems[0][0] == "argv"
    assert "argv" in problems[0][1]


def test_external_needs_nothing() -> None:
    assert ProgramSpec(kind="external").problems() == []


def test_program_env_has_the_values_and_the_resolved_secrets_in_place_of_their_references() -> None:
    spec = ProgramSpec.model_validate(
        {"kind": "command", "argv": ["true"], "env": {"A": "1", "B": {"secretRef": "acme/b"}}}
    )
    assert program_env(spec, {"B": "s3cret"}) == {"A": "1", "B": "s3cret"}


# --- ProgramRegistry: file -------------------------------------------------------------------------


def test_registry_without_file_is_empty() -> None:
    assert registry().all() == {}


def test_registry_with_missing_file_is_empty(tmp_path: Path) -> None:
    assert registry(tmp_path / "nope.json").all() == {}


def test_registry_loads_file(tmp_path: Path) -> None:
    file = tmp_path / "programs.json"
    file.write_text(
        json.dumps(
            {
                NIGHTLY: {"kind": "pyspark", "target": "pipelines.nightly:run", "env": {"X": "1"}},
                BACKUP: {"kind": "command", "argv": ["/usr/bin/backup", "--all"]},
            }
        )
    )
    reg = registry(file)
    assert set(reg.all()) == {NIGHTLY, BACKUP}
    nightly = reg.get(NIGHTLY)
    assert nightly == ProgramSpec(kind="pyspark", target="pipelines.nightly:run", env={"X": "1"})
    backup = reg.get(BACKUP)
    assert backup is not None and backup.argv == ["/usr/bin/backup", "--all"]
    assert reg.get("acme/etl/pyspark/other") is None


def test_registry_file_with_invalid_spec_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "programs.json"
    file.write_text(json.dumps({NIGHTLY: {"kind": "pyspark", "bogus": 1}}))
    with pytest.raises(ValidationError):
        registry(file)


def test_all_returns_a_copy(tmp_path: Path) -> None:
    reg = registry()
    reg.apply(NIGHTLY.encode(), spec_bytes(kind="external"))
    snapshot = reg.all()
    snapshot.clear()
    assert set(reg.all()) == {NIGHTLY}


# --- ProgramRegistry: apply ------------------------------------------------------------------------


def test_apply_adds() -> None:
    reg = registry()
    reg.apply(NIGHTLY.encode(), spec_bytes(kind="pyspark", target="a:b"))
    assert reg.get(NIGHTLY) == ProgramSpec(kind="pyspark", target="a:b")


def test_apply_latest_wins(tmp_path: Path) -> None:
    file = tmp_path / "programs.json"
    file.write_text(json.dumps({NIGHTLY: {"kind": "pyspark", "target": "from.file:run"}}))
    reg = registry(file)
    reg.apply(NIGHTLY.encode(), spec_bytes(kind="pyspark", target="v2:run"))
    reg.apply(NIGHTLY.encode(), spec_bytes(kind="command", argv=["v3"]))
    assert reg.get(NIGHTLY) == ProgramSpec(kind="command", argv=["v3"])
    assert list(reg.all()) == [NIGHTLY]


def test_apply_tombstone_deletes() -> None:
    reg = registry()
    reg.apply(NIGHTLY.encode(), spec_bytes(kind="external"))
    reg.apply(BACKUP.encode(), spec_bytes(kind="command", argv=["b"]))
    reg.apply(NIGHTLY.encode(), None)
    assert reg.get(NIGHTLY) is None
    assert set(reg.all()) == {BACKUP}


def test_tombstone_deletes_a_program_from_the_file(tmp_path: Path) -> None:
    file = tmp_path / "programs.json"
    file.write_text(json.dumps({NIGHTLY: {"kind": "external"}}))
    reg = registry(file)
    reg.apply(NIGHTLY.encode(), None)
    assert reg.all() == {}


def test_tombstone_for_unknown_program_is_harmless() -> None:
    reg = registry()
    reg.apply(b"acme/x/y/z", None)
    assert reg.all() == {}


def test_readd_after_tombstone() -> None:
    reg = registry()
    reg.apply(NIGHTLY.encode(), spec_bytes(kind="external"))
    reg.apply(NIGHTLY.encode(), None)
    reg.apply(NIGHTLY.encode(), spec_bytes(kind="command", argv=["again"]))
    assert reg.get(NIGHTLY) == ProgramSpec(kind="command", argv=["again"])


@pytest.mark.parametrize("value", [spec_bytes(kind="external"), None])
def test_apply_ignores_a_record_without_key(value: bytes | None) -> None:
    reg = registry()
    reg.apply(NIGHTLY.encode(), spec_bytes(kind="command", argv=["keep"]))
    reg.apply(None, value)
    assert reg.all() == {NIGHTLY: ProgramSpec(kind="command", argv=["keep"])}


@pytest.mark.parametrize(
    "value",
    [
        b"not json",
        b"",
        b"\xff\xfe\x00",
        b"[]",
        b"null",
        spec_bytes(kind="shell"),
        spec_bytes(kind="command", argv=["x"], bogus=1),
        spec_bytes(target="m:f"),
    ],
    ids=["text", "empty", "binary", "array", "null", "bad-kind", "extra-field", "no-kind"],
)
def test_apply_ignores_undecodable_value_and_keeps_previous(
    value: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    reg = registry()
    previous = ProgramSpec(kind="command", argv=["keep"])
    reg.apply(NIGHTLY.encode(), previous.model_dump_json().encode())
    reg.apply(NIGHTLY.encode(), value)
    reg.apply(BACKUP.encode(), value)
    assert reg.all() == {NIGHTLY: previous}
    assert "undecodable program definition" in caplog.text


def test_apply_key_is_decoded_leniently() -> None:
    reg = registry()
    reg.apply(b"acme/\xff/t/n", spec_bytes(kind="external"))
    assert reg.get("acme/\ufffd/t/n") == ProgramSpec(kind="external")


def test_a_programs_process_inherits_the_environment_but_no_secret_it_does_not_name(monkeypatch) -> None:
    monkeypatch.setenv("SCHEDULER_SECRET_ACME__DB", "other-programs-secret")
    monkeypatch.setenv("PLAIN_INHERITED", "yes")
    spec = ProgramSpec.model_validate(
        {"kind": "command", "argv": ["true"], "env": {"A": "1", "B": {"secretRef": "acme/b"}}}
    )
    env = child_env(spec, {"B": "s3cret"})
    assert env["PLAIN_INHERITED"] == "yes" and (env["A"], env["B"]) == ("1", "s3cret")
    assert not any(k.startswith("SCHEDULER_SECRET_") for k in env)
