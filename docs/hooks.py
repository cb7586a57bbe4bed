"""MkDocs hooks: the reference pages made from the code at build time, so they cannot drift from it (the HTTP
API from the OpenAPI document the workers serve, the CLI from its argparse tree, the settings from the
Settings class and its environment variables, the Avro schemas from avro/), and the images kept beside the
tests and the benchmark that make them."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (the generators need no MkDocs: the unit tests call them without it)
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.structure.files import Files

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ("tests/integration/screenshots", "tests/bench/results", "tests/bench/results/scaleout")


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def http_reference() -> str:
    from scheduler.http.openapi import build_spec

    spec = build_spec()
    out = [
        "# HTTP endpoints",
        "",
        "Generated from the OpenAPI document every worker serves at `GET /openapi.json` (see [HTTP API](http.md)"
        " for what the answers mean). Schemas are named as in that document.",
        "",
    ]
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            out += [f"## `{method.upper()} {path}`", "", op.get("summary", ""), ""]
            if op.get("description"):
                out += [op["description"], ""]
            params = op.get("parameters", [])
            if params:
                out += ["| parameter | in | required | meaning |", "| --- | --- | --- | --- |"]
                out += [
                    f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} | "
                    f"{_cell(p.get('description', ''))} |"
                    for p in params
                ]
                out.append("")
            body = op.get("requestBody", {}).get("content", {})
            for content_type, media in body.items():
                ref = media.get("schema", {}).get("$ref", "")
                out += [
                    f"Body: `{content_type}`" + (f", schema `{ref.rsplit('/', 1)[-1]}`" if ref else ""),
                    "",
                ]
            responses = op.get("responses", {})
            if responses:
                out += ["| answer | meaning |", "| --- | --- |"]
                out += [f"| {code} | {_cell(r.get('description', ''))} |" for code, r in responses.items()]
                out.append("")
    return "\n".join(out) + "\n"


def _subcommands(
    parser: argparse.ArgumentParser, prefix: str
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _subcommands(sub, f"{prefix} {name}")


def cli_reference() -> str:
    from scheduler.cli.cli import build_parser

    out = [
        "# CLI commands",
        "",
        "Generated from the `scheduler` command's own argument parser: each command's `--help`, as it prints"
        " it. How the commands are used: [CLI](cli.md).",
        "",
    ]
    for name, parser in _subcommands(build_parser(), "scheduler"):
        parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=100)
        out += [f"## `{name}`", "", "```text", parser.format_help().rstrip(), "```", ""]
    return "\n".join(out) + "\n"


def settings_reference() -> str:
    from scheduler.kafka.config import ENV_VARS, Settings

    out = [
        "# Settings",
        "",
        "Generated from the worker's `Settings` class and the environment variables that set it: every setting,"
        " its type, default and bounds. What each one does: [Configuration](configuration.md).",
        "",
        "| variable | setting | type | default | bounds |",
        "| --- | --- | --- | --- | --- |",
    ]
    fields = Settings.model_fields
    for var, name in ENV_VARS.items():
        f = fields[name]
        kind = getattr(f.annotation, "__name__", None) or str(f.annotation).replace("typing.", "")
        bounds = ", ".join(
            f"{k} {getattr(m, k)}" for m in f.metadata for k in ("ge", "gt", "le", "lt") if hasattr(m, k)
        )
        default = "" if f.default in (None, "") else f"`{f.default}`"
        out.append(f"| `{var}` | `{name}` | {_cell(kind)} | {_cell(default)} | {bounds} |")
    return "\n".join(out) + "\n"


def _avro_type(t: Any) -> str:
    if isinstance(t, list):
        return " \\| ".join(_avro_type(x) for x in t)
    if isinstance(t, dict):
        if t.get("type") == "array":
            return f"array of {_avro_type(t['items'])}"
        if t.get("type") == "map":
            return f"map of {_avro_type(t['values'])}"
        if t.get("type") == "enum":
            return f"enum {t.get('name', '')}: {', '.join(t['symbols'])}"
        return _avro_type(t.get("type"))
    return str(t)


def avro_reference() -> str:
    out = [
        "# Avro schemas",
        "",
        "Generated from `avro/*.avsc`, the schemas of every topic's keys and values (schemaless Avro; see"
        " [Topics](topics.md)). Released versions the workers still read are kept in `avro/released/`.",
        "",
    ]
    for path in sorted((ROOT / "avro").glob("*.avsc")):
        schema = json.loads(path.read_text())
        out += [f"## {schema['name']}", ""]
        if schema.get("doc"):
            out += [schema["doc"], ""]
        if schema.get("type") == "enum":
            out += ["Symbols: " + ", ".join(f"`{s}`" for s in schema["symbols"]), ""]
            continue
        out += ["| field | type | default | meaning |", "| --- | --- | --- | --- |"]
        for f in schema.get("fields", []):
            default = f"`{json.dumps(f['default'])}`" if "default" in f else ""
            out.append(
                f"| `{f['name']}` | {_cell(_avro_type(f['type']))} | {default} | {_cell(f.get('doc', ''))} |"
            )
        out.append("")
    return "\n".join(out) + "\n"


GENERATED: dict[str, Callable[[], str]] = {
    "reference/http-endpoints.md": http_reference,
    "reference/cli-commands.md": cli_reference,
    "reference/settings.md": settings_reference,
    "reference/avro.md": avro_reference,
}


def on_files(files: Files, config: MkDocsConfig) -> Files:
    from mkdocs.structure.files import File

    for uri, render in GENERATED.items():
        files.append(File.generated(config, uri, content=render()))
    for folder in IMAGES:
        for png in sorted((ROOT / folder).glob("*.png")):
            files.append(File.generated(config, f"assets/{folder}/{png.name}", abs_src_path=str(png)))
    return files
