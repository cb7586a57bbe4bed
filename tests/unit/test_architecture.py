"""The layering scheduler/ARCHITECTURE.md describes, checked on the source: the import graph of the package
(imports inside functions and under TYPE_CHECKING included) has no cycle, every import points to the
module's own layer or one below, services take ports instead of the Worker, and a worker that only
schedules imports neither PySpark nor matplotlib."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parents[2] / "scheduler"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules `name` imports, wherever the import statement is."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([node.module] if node.module else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {m for m in found if m in known and m != name}


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.add(w)
                        if w == v:
                            break
                    if len(component) > 1:
                        out.append(component)
    return out


def test_the_cycle_finder_finds_a_cycle_and_only_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [{"a", "b", "c"}]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_relative_and_function_level_imports_are_seen(tmp_path: Path) -> None:
    known = {
        "scheduler.domain.model": PACKAGE / "model.py",
        "scheduler.domain.triggers.cron": PACKAGE / "triggers/cron.py",
    }
    source = tmp_path / "x.py"
    source.write_text(
        "def f():\n    from ..model import ScheduleKey\n    from scheduler.domain.triggers import cron\n"
    )
    assert imports_of("scheduler.domain.triggers.x", source, known) == {
        "scheduler.domain.model",
        "scheduler.domain.triggers.cron",
    }


def test_no_import_cycle() -> None:
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    assert not cycles(graph), f"import cycles: {[sorted(c) for c in cycles(graph)]}"


#: the layers of ARCHITECTURE.md, bottom up, each a folder of scheduler/: a module imports its own layer's
#: and those below only (the worker, the launcher and the client library side by side; the examples are
#: programs it launches)
LAYERS = ["domain", "wire", "kafka", "worker", "launcher", "client", "http", "cli"]
RANK = {
    "domain": 0,
    "wire": 1,
    "kafka": 2,
    "worker": 3,
    "launcher": 3,
    "client": 3,
    "examples": 3,
    "http": 4,
    "cli": 5,
}


def layer_of(module: str) -> int:
    """The rank of a module's layer: its folder's; the package itself and `python -m scheduler` are cli."""
    parts = module.split(".")
    return RANK[parts[1]] if len(parts) > 1 and parts[1] != "__main__" else RANK["cli"]


def test_the_folders_are_the_layers() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert folders == set(LAYERS) | {"examples"}
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert not loose, f"modules outside a layer's folder: {loose}"


def test_every_import_points_to_the_same_layer_or_one_below() -> None:
    known = modules()
    upward = [
        f"{name} -> {imp}"
        for name, path in sorted(known.items())
        for imp in sorted(imports_of(name, path, known))
        if layer_of(imp) > layer_of(name)
    ]
    assert not upward, upward


def test_only_the_composition_and_the_entry_points_import_the_worker() -> None:
    """Services take a port (scheduler.worker.ports), never the Worker."""
    known = modules()
    importers = {
        name for name, path in known.items() if "scheduler.worker.app" in imports_of(name, path, known)
    }
    assert importers <= {"scheduler.cli.cli", "scheduler"}, importers


def test_a_worker_that_only_schedules_imports_neither_spark_nor_matplotlib() -> None:
    code = (
        "import sys\n"
        "import scheduler.worker.app, scheduler.cli.cli, scheduler.launcher.launcher, scheduler.http.web\n"
        "print(sorted(m for m in ('pyspark', 'matplotlib') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_the_domain_imports_nothing_outside_itself() -> None:
    known = modules()
    domain = {name for name in known if name.startswith("scheduler.domain")}
    assert {"scheduler.domain.model", "scheduler.domain.triggers.kinds"} <= domain
    outside = {name: sorted(imports_of(name, known[name], known) - domain) for name in sorted(domain)}
    assert not {n: o for n, o in outside.items() if o}, outside


#: the trigger kinds some module names beside their own: the time kinds (the punctuator's fast path and
#: the hand-written Avro reader), the elapsed kind (its timers) and AND/OR (the tree walks)
SPECIAL_KINDS = {"CronTrigger", "FrequencyTrigger", "ElapsedTrigger", "CompositeTrigger"}


def test_no_module_but_the_kinds_names_an_event_trigger_kind() -> None:
    """A trigger kind is one class: nothing else dispatches on it (model.py re-exports the old names)."""
    from scheduler.domain.triggers.kinds import TRIGGER_KINDS

    kinds = {k.__name__ for k in TRIGGER_KINDS.values()} - SPECIAL_KINDS
    assert {"PartitionTrigger", "ProgramRunsTrigger", "ProgramStartedTrigger"} <= kinds
    named: dict[str, set[str]] = {}
    for name, path in modules().items():
        if name == "scheduler.domain.model" or name.split(".")[:4] == [
            "scheduler",
            "domain",
            "triggers",
            "kinds",
        ]:
            continue  # (the kinds' package: one module per family of kinds, and their registry)
        for node in ast.walk(ast.parse(path.read_text())):
            ident = node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)
            if ident in kinds:
                named.setdefault(name, set()).add(ident)
            if isinstance(node, ast.ImportFrom):
                named.setdefault(name, set()).update(a.name for a in node.names if a.name in kinds)
    assert not {n: k for n, k in named.items() if k}, named
