"""HTTP auth: bearer tokens with scopes and tenants.

Tokens are configured as SHA-256 hashes (never in plain text), in a YAML/JSON file
(SCHEDULER_AUTH_TOKENS_FILE) or as JSON in SCHEDULER_AUTH_TOKENS:

    tokens:
      - name: etl-team            # shown in logs, never the token
        sha256: 9f86d08...        # sha256 hex of the token (`scheduler token new` prints both)
        scopes: [sched:r, sched:w]
        tenants: [acme, acme-dev] # or ["*"]: every tenant

Scopes follow light-scheduler's OpenAPI: `sched:r` reads (GET/HEAD), `sched:w` changes (every other
method). No or an unknown token: 401 with `WWW-Authenticate: Bearer`; a known token without the scope, or
asking about another tenant: 403. /health, /ui and /openapi.json are public (they carry no tenant data);
/metrics and Faust's own pages need a token for every tenant ("*").

SCHEDULER_AUTH=off turns all of it off (local development; `scheduler run` does it unless tokens are set):
every request then acts as an all-tenant, all-scope principal.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from scheduler.kafka.config import Settings

log = logging.getLogger(__name__)

READ, WRITE = "sched:r", "sched:w"
SCOPES = frozenset({READ, WRITE})
ALL_TENANTS = "*"
#: reachable with no token: liveness probes, the admin page's static shell, the API description
PUBLIC_PATHS = frozenset({"/health", "/ui", "/openapi.json"})
#: routes whose handlers check tenants themselves; any other route needs an all-tenant token
TENANT_AWARE_PREFIXES = (
    "/schedules",
    "/schedulers",
    "/events",
    "/triggers",
    "/jobs",
    "/programs",
    "/sensors",
)
PRINCIPAL = "scheduler.principal"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class AuthConfigError(ValueError):
    """The token configuration is missing or malformed (the worker refuses to start)."""


@dataclass(frozen=True)
class Principal:
    name: str
    scopes: frozenset[str]
    tenants: frozenset[str] | None  # None: every tenant

    def can(self, scope: str) -> bool:
        return scope in self.scopes

    def sees(self, tenant: str) -> bool:
        return self.tenants is None or tenant in self.tenants

    @property
    def all_tenants(self) -> bool:
        return self.tenants is None


ANYONE = Principal("auth-off", SCOPES, None)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A random token (256 bits): high entropy is what makes a plain SHA-256 hash safe to store."""
    return "sch_" + secrets.token_urlsafe(32)


def parse_tokens(raw: Any) -> dict[str, Principal]:
    """{sha256 hex: principal} from the parsed configuration (a mapping with `tokens`, or the list)."""
    entries = raw.get("tokens") if isinstance(raw, dict) else raw
    if not isinstance(entries, list) or not entries:
        raise AuthConfigError("token configuration: expected a non-empty list under 'tokens'")
    out: dict[str, Principal] = {}
    for i, entry in enumerate(entries):
        where = f"tokens[{i}]"
        if not isinstance(entry, dict):
            raise AuthConfigError(f"{where}: expected a mapping")
        digest = str(entry.get("sha256", "")).lower()
        if not _HEX64.match(digest):
            raise AuthConfigError(f"{where}.sha256: expected the 64-hex-digit SHA-256 of the token")
        if "token" in entry:
            raise AuthConfigError(f"{where}: plain-text tokens are not accepted; store its sha256")
        scopes = entry.get("scopes")
        if not isinstance(scopes, list) or not scopes or not set(scopes) <= SCOPES:
            raise AuthConfigError(f"{where}.scopes: a non-empty list of {sorted(SCOPES)}")
        tenants = entry.get("tenants")
        if not isinstance(tenants, list) or not tenants or not all(isinstance(t, str) and t for t in tenants):
            raise AuthConfigError(f"{where}.tenants: a non-empty list of tenant names, or ['*']")
        name = str(entry.get("name") or f"token-{i}")
        out[digest] = Principal(
            name, frozenset(scopes), None if ALL_TENANTS in tenants else frozenset(tenants)
        )
    return out


def load_tokens(settings: Settings) -> dict[str, Principal] | None:
    """The configured tokens; None when auth is off. Raises AuthConfigError when on and unusable."""
    if settings.auth == "off":
        return None
    if settings.auth_tokens_file is not None:
        path = Path(settings.auth_tokens_file)
        try:
            text = path.read_text()
        except OSError as exc:
            raise AuthConfigError(f"SCHEDULER_AUTH_TOKENS_FILE {path}: {exc}") from None
        try:
            import yaml

            raw = yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
        except Exception as exc:  # noqa: BLE001 - any parse error is a config error
            raise AuthConfigError(f"SCHEDULER_AUTH_TOKENS_FILE {path}: not valid: {exc}") from None
        return parse_tokens(raw)
    if settings.auth_tokens:
        try:
            raw = json.loads(settings.auth_tokens)
        except json.JSONDecodeError as exc:
            raise AuthConfigError(f"SCHEDULER_AUTH_TOKENS: not valid JSON: {exc}") from None
        return parse_tokens(raw)
    raise AuthConfigError(
        "HTTP auth is on but no tokens are configured: set SCHEDULER_AUTH_TOKENS_FILE (or "
        "SCHEDULER_AUTH_TOKENS), or SCHEDULER_AUTH=off for local development"
    )


def principal_of(request: Any) -> Principal:
    """Who is asking (set by the middleware; ANYONE when auth is off)."""
    try:
        return request[PRINCIPAL]  # type: ignore[no-any-return]
    except (KeyError, TypeError):
        return ANYONE


def _deny(status: int, error: str, message: str) -> web.Response:
    response = web.json_response({"error": error, "reason": message}, status=status)
    if status == 401 or error == "insufficient_scope":
        response.headers["WWW-Authenticate"] = f'Bearer realm="scheduler", error="{error}"'
    return response


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def middleware(tokens: dict[str, Principal] | None) -> Any:
    """aiohttp middleware: authenticates every request but the public paths, checks the method's scope."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if tokens is None:
            request[PRINCIPAL] = ANYONE
            return await handler(request)
        path = request.path.rstrip("/") or "/"
        if path in PUBLIC_PATHS or path.startswith("/ui/"):
            return await handler(request)
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if not header:
            return _deny(401, "invalid_request", "missing Authorization: Bearer <token>")
        if scheme.lower() != "bearer" or not token.strip():
            return _deny(401, "invalid_request", "expected Authorization: Bearer <token>")
        principal = tokens.get(hash_token(token.strip()))
        if principal is None:
            return _deny(401, "invalid_token", "unknown token")
        scope = READ if request.method in ("GET", "HEAD", "OPTIONS") else WRITE
        if not principal.can(scope):
            return _deny(403, "insufficient_scope", f"this token lacks scope {scope}")
        if not path.startswith(TENANT_AWARE_PREFIXES) and not principal.all_tenants:
            return _deny(403, "forbidden", "this route needs a token for every tenant ('*')")
        request[PRINCIPAL] = principal
        return await handler(request)

    return check


__all__ = [
    "ALL_TENANTS",
    "ANYONE",
    "AuthConfigError",
    "Principal",
    "hash_token",
    "load_tokens",
    "middleware",
    "new_token",
    "parse_tokens",
    "principal_of",
]
