"""CI's time budget: the bounds `.ci/run` gives its test passes add up to 55 minutes at most (45 until the
unit suites on Python 3.12 and 3.13 joined, issue 37), so the suite stays well inside CI's 90-minute limit (a
landing whose CI runs past it does not land at all), and a change that needs more must make the suite
faster rather than raise a bound past it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

CI_RUN = Path(__file__).parents[2] / ".ci" / "run"
#: what the passes' bounds may add up to, in seconds
BUDGET_S = 55 * 60


def bounds() -> dict[str, int]:
    """NAME_PASS_S=seconds assignments of .ci/run."""
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+_PASS_S)=(\d+)", CI_RUN.read_text(), re.M)}


def test_the_bounds_of_the_test_passes_add_up_to_55_minutes_at_most() -> None:
    found = bounds()
    assert set(found) == {"KAFKA_PASS_S", "EMBEDDED_PASS_S", "VERSIONS_PASS_S"}, found
    assert sum(found.values()) <= BUDGET_S, f"{found}: {sum(found.values())} s > {BUDGET_S} s"


def test_every_pass_runs_under_its_bound() -> None:
    """Each bound is used by the pass it names (a bound nobody applies would bound nothing)."""
    text = CI_RUN.read_text()
    for name in bounds():
        assert re.search(rf'^[^#\n]*bounded "[^"]+" "\${name}" make ', text, re.M), name


def test_ci_runs_every_python_the_package_says_it_supports() -> None:
    """pyproject's classifiers = the Makefile's default PYTHON + OTHER_PYTHONS (whose unit suites CI runs);
    the last one is the newest, which test_wheel.py's end-to-end smoke installs the wheel on."""
    root = CI_RUN.parents[1]
    classified = re.findall(
        r'"Programming Language :: Python :: (3\.\d+)"', (root / "pyproject.toml").read_text()
    )
    makefile = (root / "Makefile").read_text()
    default = re.search(r"^PYTHON \?= python(3\.\d+)$", makefile, re.M)
    others = re.search(r"^OTHER_PYTHONS \?= (.+)$", makefile, re.M)
    assert default and others, "PYTHON / OTHER_PYTHONS not found in the Makefile"
    assert classified == [default[1], *others[1].split()], classified
    newest = re.search(r'^NEWEST = "(3\.\d+)"$', (root / "tests/integration/test_wheel.py").read_text(), re.M)
    assert newest and newest[1] == classified[-1], classified
