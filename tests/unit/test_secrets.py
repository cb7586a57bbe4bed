"""Secrets a program's env references (scheduler/launcher/secrets.py): the stores, their order, a missing
one named without a value, masking, and a reference outside the program's namespace refused."""

from __future__ import annotations

import pytest

from scheduler.kafka.config import Settings
from scheduler.launcher.secrets import EnvSecrets, FileSecrets, SecretMissing, Secrets, masked
from scheduler.worker.programs import ProgramSpec, program_env

pytestmark = pytest.mark.unit


def _spec(**env: object) -> ProgramSpec:
    return ProgramSpec.model_validate({"kind": "command", "argv": ["true"], "env": env})


def test_files_then_env_the_first_store_that_holds_it_answers(tmp_path, monkeypatch):
    (tmp_path / "acme").mkdir()
    (tmp_path / "acme" / "db-password").write_text("from-file\n")
    monkeypatch.setenv("SCHEDULER_SECRET_ACME__DB_PASSWORD", "from-env")
    monkeypatch.setenv("SCHEDULER_SECRET_ACME__API_KEY", "key-from-env")
    secrets = Secrets.from_settings(Settings(secrets_dir=tmp_path))
    spec = _spec(DB={"secretRef": "acme/db-password"}, KEY={"secretRef": "acme/api.key"}, PLAIN="p")
    resolved = secrets.resolve(spec)
    assert resolved == {"DB": "from-file", "KEY": "key-from-env"}
    assert program_env(spec, resolved) == {"DB": "from-file", "KEY": "key-from-env", "PLAIN": "p"}
    env_first = Secrets.from_settings(Settings(secrets="env,files", secrets_dir=tmp_path))
    assert env_first.resolve(spec)["DB"] == "from-env"
    assert EnvSecrets.variable("my-team", "s3.key") == "SCHEDULER_SECRET_MY_TEAM__S3_KEY"


def test_a_secret_no_store_holds_fails_naming_the_reference_and_the_stores_never_a_value(tmp_path):
    secrets = Secrets([FileSecrets(tmp_path), EnvSecrets({})])
    with pytest.raises(
        SecretMissing, match=r"secret acme/gone \(env DB\) is in none of the secret stores \(files, env\)"
    ):
        secrets.resolve(_spec(DB={"secretRef": "acme/gone"}))
    assert FileSecrets(None).get("acme", "x") is None and FileSecrets(tmp_path).get("..", "etc") is None


def test_a_store_of_ones_own_is_named_module_and_factory():
    secrets = Secrets.from_settings(Settings(secrets="tests.unit.test_secrets:vault_like"))
    assert secrets.resolve(_spec(X={"secretRef": "acme/token"})) == {"X": "vault:acme/token"}
    with pytest.raises(ValueError, match="'vault' is not files, env nor module:factory"):
        Secrets.from_settings(Settings(secrets="vault"))


class _Vault:
    name = "vault"

    def get(self, tenant: str, name: str) -> str | None:
        return f"vault:{tenant}/{name}"


def vault_like(settings: Settings) -> _Vault:
    return _Vault()


def test_output_lines_are_masked_longest_value_first():
    assert masked("pw=hunter22 and hunter2", ["hunter2", "hunter22"]) == "pw=*** and ***"
    assert masked("nothing here", ["", "x-y"]) == "nothing here"


def test_a_reference_is_a_secret_of_the_programs_namespace_and_well_formed():
    spec = _spec(DB={"secretRef": "globex/db"})
    assert spec.problems("acme/etl/command/pull") == [
        ("env.DB", "secret globex/db is not of the program's namespace acme")
    ]
    assert spec.problems("globex/etl/command/pull") == []
    with pytest.raises(ValueError, match="secretRef"):
        _spec(DB={"secretRef": "no-slash"})
    with pytest.raises(ValueError):
        _spec(DB={"secretRef": "acme/db", "value": "x"})
