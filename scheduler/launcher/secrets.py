"""Secrets a program's env references (`{"secretRef": "tenant/name"}`), resolved by the launcher at each
launch; a definition on the programs topic holds only the reference. A run's output lines have each
resolved value masked before they are kept (its FAILED reason, the run record).

Stores, tried in the order SCHEDULER_SECRETS names them (default `files,env`):
- `files`: `<SCHEDULER_SECRETS_DIR>/<tenant>/<name>`, its text without the trailing newline (a Kubernetes
  Secret mounted per tenant, Docker secrets);
- `env`: the launcher's environment variable `SCHEDULER_SECRET_<TENANT>__<NAME>` (upper case; every
  character but letters and digits as `_`);
- `module:factory`: a callable of the Settings that answers a `SecretStore` (a Vault client, a cloud
  secret manager): `get(tenant, name)` -> the value, or None when it has none.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from scheduler.kafka.config import Settings
    from scheduler.worker.programs import ProgramSpec

# This module imports nothing of ours at load time: spark-submit puts this directory on its executors'
# Python path, where it stands in for the standard library's `secrets` (pydantic imports that).
MASK = "***"


class SecretMissing(LookupError):
    """A referenced secret no store holds: the run FAILS with this, never with a value."""


class SecretStore(Protocol):
    name: str

    def get(self, tenant: str, name: str) -> str | None: ...


class FileSecrets:
    name = "files"

    def __init__(self, root: Path | None) -> None:
        self.root = root

    def get(self, tenant: str, name: str) -> str | None:
        if self.root is None:
            return None
        path = self.root / tenant / name  # (both parts are [A-Za-z0-9._-]: SecretRef's pattern)
        if tenant in (".", "..") or name in (".", "..") or not path.is_file():
            return None
        return path.read_text(encoding="utf-8").removesuffix("\n")


class EnvSecrets:
    name = "env"

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.environ = os.environ if environ is None else environ

    @staticmethod
    def variable(tenant: str, name: str) -> str:
        def part(text: str) -> str:
            return re.sub(r"[^A-Za-z0-9]", "_", text).upper()

        return f"SCHEDULER_SECRET_{part(tenant)}__{part(name)}"  # (worker/programs.SECRET_ENV_PREFIX)

    def get(self, tenant: str, name: str) -> str | None:
        return self.environ.get(self.variable(tenant, name))


class Secrets:
    """The stores in order; `resolve` answers a spec's secrets by env name."""

    def __init__(self, stores: Sequence[SecretStore]) -> None:
        self.stores = list(stores)

    @classmethod
    def from_settings(cls, settings: Settings) -> Secrets:
        stores: list[SecretStore] = []
        for item in (part.strip() for part in settings.secrets.split(",")):
            if item == "files":
                stores.append(FileSecrets(settings.secrets_dir))
            elif item == "env":
                stores.append(EnvSecrets())
            elif ":" in item:
                module, _, factory = item.partition(":")
                stores.append(getattr(importlib.import_module(module), factory)(settings))
            elif item:
                raise ValueError(f"SCHEDULER_SECRETS: {item!r} is not files, env nor module:factory")
        return cls(stores)

    def resolve(self, spec: ProgramSpec) -> dict[str, str]:
        """env name -> the value of the secret it references."""
        return {
            variable: self.value(ref, f" (env {variable})") for variable, ref in spec.secret_refs().items()
        }

    def value(self, ref: str, what: str = "") -> str:
        """The value of the secret "tenant/name" (SecretMissing naming it, never a value)."""
        tenant, _, name = ref.partition("/")
        for store in self.stores:
            found = store.get(tenant, name)
            if found is not None:
                return found
        tried = ", ".join(s.name for s in self.stores) or "none configured"
        raise SecretMissing(f"secret {ref}{what} is in none of the secret stores ({tried})")


def masked(line: str, values: Sequence[str]) -> str:
    """`line` with every secret value in it replaced by ***."""
    for value in sorted((v for v in values if v), key=len, reverse=True):
        line = line.replace(value, MASK)
    return line
