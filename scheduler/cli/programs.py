"""`scheduler programs put|get|list`: the registered programs (HTTP API). An env value may name a secret
(`--secret-env NAME=TENANT/SECRET`, or `{"secretRef": ...}` in the file): the launcher resolves it at
each launch; only the reference is stored and answered."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scheduler.cli.render import print_answer

if TYPE_CHECKING:
    from scheduler.client.http import HttpClient


def _program_text(program: str, spec: dict[str, Any]) -> str:
    what = spec.get("target") or " ".join(spec.get("argv") or []) or ""
    env = spec.get("env") or {}
    shown = ", ".join(
        f"{k}=<secret {v['secretRef']}>" if isinstance(v, dict) else k for k, v in sorted(env.items())
    )
    return f"{program}: {spec.get('kind')} {what}".rstrip() + (f"\n  env: {shown}" if shown else "")


async def cmd_put(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import UsageError, load_document, parse_payload, parse_program

    program = parse_program(args.program)
    spec: dict[str, Any] = dict(load_document(args.file)) if args.file else {}
    env = dict(spec.get("env") or {})
    env.update(parse_payload(args.env or ()))
    for name, ref in parse_payload(args.secret_env or ()).items():
        env[name] = {"secretRef": ref}
    if env:
        spec["env"] = env
    if args.kind:
        spec["kind"] = args.kind
    if not spec:
        raise UsageError("give the program's spec: -f FILE (kind, target or argv, env, ...) or --kind")
    answer = await client.register_program(program, spec)
    print_answer(args, answer, f"{args.program}: registered")


async def cmd_get(client: HttpClient, args: argparse.Namespace) -> None:
    from scheduler.cli.client import parse_program

    answer = await client.program(parse_program(args.program))
    print_answer(args, answer, _program_text(args.program, answer))


async def cmd_list(client: HttpClient, args: argparse.Namespace) -> None:
    answer = await client.request("GET", "/programs")
    text = "\n".join(_program_text(p, s) for p, s in sorted(answer.items()))
    print_answer(args, answer, text or "no programs")


def register(sub: Any, leaf: Callable[..., argparse.ArgumentParser]) -> None:
    """The `programs` command group."""
    group = sub.add_parser("programs", help="the registered programs (HTTP API)")
    commands = group.add_subparsers(dest="subcommand", required=True)
    p = leaf(commands, "put", cmd_put, "register or replace a program")
    p.add_argument("program", metavar="PROGRAM", help="namespace/application/type/name")
    p.add_argument("-f", "--file", help="the spec as YAML/JSON: kind, target or argv, env, ...")
    p.add_argument("--kind", help="pyspark, command, python, sensor or external (overrides the file's)")
    p.add_argument("--env", action="append", metavar="NAME=VALUE", help="a plain env value (repeatable)")
    p.add_argument(
        "--secret-env",
        action="append",
        metavar="NAME=TENANT/SECRET",
        help="an env value read from a secret at each launch; only the reference is stored (repeatable)",
    )
    leaf(commands, "get", cmd_get, "a program's spec (secrets as their references)").add_argument(
        "program", metavar="PROGRAM", help="namespace/application/type/name"
    )
    leaf(commands, "list", cmd_list, "every registered program this token sees")
