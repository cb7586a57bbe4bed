"""The documentation site (docs/): its generated reference pages come from the code and say everything it
has, the hand-written configuration page describes every setting, and the README stays a front page. The
site's links, anchors and pages are checked by `make docs` (mkdocs build --strict) in CI."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from scheduler.cli.cli import build_parser
from scheduler.http.openapi import build_spec
from scheduler.kafka.config import ENV_VARS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs" / "content"


def hooks():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_setting_is_described_on_the_configuration_page():
    page = (DOCS / "reference" / "configuration.md").read_text()
    assert [v for v in ENV_VARS if f"`{v}`" not in page] == []


def test_the_generated_settings_page_lists_every_variable_with_its_default():
    page = hooks().settings_reference()
    for var in ENV_VARS:
        assert f"| `{var}` |" in page
    assert "| `SCHEDULER_PARTITIONS` | `partitions` | int | `8` | ge 1, le 1024 |" in page


def test_the_generated_http_page_has_every_operation_of_the_openapi_document():
    page = hooks().http_reference()
    operations = [(m.upper(), p) for p, ms in build_spec()["paths"].items() for m in ms]
    assert operations and [op for op in operations if f"## `{op[0]} {op[1]}`" not in page] == []


def test_the_generated_cli_page_has_every_command_with_its_help():
    page = hooks().cli_reference()
    assert "## `scheduler schedules create`" in page and "## `scheduler runs suspend`" in page
    assert build_parser().format_usage().split()[1] in page  # (the usage line of `scheduler` itself)


def test_the_generated_avro_page_has_every_schema_and_field():
    page = hooks().avro_reference()
    for path in (ROOT / "avro").glob("*.avsc"):
        schema = json.loads(path.read_text())
        assert f"## {schema['name']}\n" in page
        for field in schema.get("fields", []):
            assert f"| `{field['name']}` |" in page


def test_the_readme_is_a_front_page_whose_links_into_the_site_resolve():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert links and [link for link in links if not (ROOT / link).exists()] == []


def _session(text: str) -> str:
    """The "A first session" section, its links' targets left out (relative to where the page is)."""
    start = text.index("\n## A first session\n")
    end = text.index("\n## ", start + 1)
    return re.sub(r"\]\([^)]*\)", "]()", text[start:end]).strip()


def test_the_getting_started_page_has_the_readme_session_that_the_integration_test_runs():
    readme, page = (ROOT / "README.md").read_text(), (DOCS / "getting-started.md").read_text()
    assert _session(page) == _session(readme)
