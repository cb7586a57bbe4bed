"""The installable package: the wheel built from this repository, installed with pip into a fresh virtualenv
outside it, gives a `scheduler` that runs a worker — its Avro schemas (and the released versions it reads),
the admin page's files and the Kafka pom come inside the wheel, nothing is read from the checkout. The
virtualenv runs the newest supported Python (NEWEST: the suite itself runs on the oldest), so this is also
the end-to-end smoke on it: the dependencies' ranges resolve there from PyPI, a worker fires, HTTP answers."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.helpers import TopicReader, WorkerProcess, fires_of

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
#: the newest Python the package supports (the last of pyproject's classifiers)
NEWEST = "3.13"


def newest_python() -> str:
    """Its interpreter, on PATH or pyenv's (.ci/find-python); a test fails, naming it, where it is missing."""
    found = subprocess.run(
        ["bash", str(ROOT / ".ci" / "find-python"), NEWEST], capture_output=True, text=True
    )
    assert found.returncode == 0, found.stderr
    return found.stdout.strip()


def run(*argv: str | Path, cwd: Path, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    r = subprocess.run(
        list(map(str, argv)), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s
    )
    assert r.returncode == 0, (
        f"{' '.join(map(str, argv))}: rc {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    )
    return r


BUILD_OUTPUT: list[str] = []  # what building the wheel printed


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the wheel, the `python` of a fresh virtualenv it is installed in, with its dependencies from PyPI)."""
    tmp = tmp_path_factory.mktemp("wheel")
    built = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", tmp / "dist", ROOT, cwd=tmp)
    BUILD_OUTPUT.append(built.stdout + built.stderr)
    (wheel,) = (tmp / "dist").glob("kafka_job_scheduler-*.whl")
    run(newest_python(), "-m", "venv", tmp / "venv", cwd=tmp)
    python = tmp / "venv" / "bin" / "python"
    assert (
        run(python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])", cwd=tmp).stdout.strip()
        == NEWEST
    )
    run(python, "-m", "pip", "install", "--quiet", wheel, cwd=tmp)
    return wheel, python


def test_the_wheel_builds_without_a_packaging_warning(installed: tuple[Path, Path]) -> None:
    (output,) = BUILD_OUTPUT
    assert "Warning" not in output and "would be ignored" not in output, output[-4000:]


def test_the_wheel_carries_the_schemas_the_page_and_the_pom(installed: tuple[Path, Path]) -> None:
    wheel, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    schemas = {p.name for p in (ROOT / "avro").glob("*.avsc")}
    assert schemas and all(f"scheduler/avro/{name}" in names for name in schemas), sorted(names)[:50]
    released = [p.relative_to(ROOT / "avro") for p in (ROOT / "avro" / "released").rglob("*.avsc")]
    missing = [str(p) for p in released if f"scheduler/avro/{p}" not in names]
    assert released and not missing, missing
    page = [p.name for p in (ROOT / "scheduler" / "http" / "static").iterdir()]
    assert all(f"scheduler/http/static/{name}" in names for name in page), page
    assert "scheduler/kafka/kafka_server/pom.xml" in names
    packages = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "scheduler").rglob("__init__.py")}
    assert all(f"{package}/__init__.py" in names for package in packages), packages


async def test_the_installed_scheduler_runs_a_worker_that_fires(
    installed: tuple[Path, Path], worker_env: dict[str, str], tmp_path: Path
) -> None:
    """From a directory outside the repository: the CLI answers, a worker starts with the wheel's own files
    (it would fail on its first schema outside the checkout before), a schedule made over HTTP fires, and
    the admin page is served."""
    _, python = installed
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = run(python, "-c", "import scheduler.wire.codec as c; print(c.avro_dir())", cwd=elsewhere).stdout
    schemas = Path(where.strip())  # the wheel's copy inside the installed package, not the checkout's
    assert schemas.is_relative_to(python.parents[1]) and schemas.parts[-2:] == ("scheduler", "avro"), where
    assert (schemas / "FiredTask.avsc").is_file() and (schemas / "released").is_dir(), where
    assert "worker" in run(python.parent / "scheduler", "--help", cwd=elsewhere).stdout
    worker = WorkerProcess(worker_env, tmp_path / "worker.log", python=str(python), cwd=elsewhere)
    worker.env = {k: v for k, v in worker.env.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    try:
        worker.start()
        worker.wait_ready(timeout_s=180)
        topic = f"{worker_env['SCHEDULER_APP_ID']}-out"
        async with TopicReader(worker_env["KAFKA_BOOTSTRAP_SERVERS"], topic) as reader:
            body = {"tenant": "acme", "name": "installed", "topic": topic, "enabled": True,
                    "trigger": {"type": "frequency", "timeUnit": "SECONDS", "time": 1}}  # fmt: skip
            r = httpx.post(f"{worker.url}/schedules", json=body, timeout=10)
            assert r.status_code == 202, r.text
            deadline = time.monotonic() + 60
            while not fires_of(reader.records, "installed"):
                assert time.monotonic() < deadline, f"no fire in 60 s:\n{worker.log_tail()}"
                await asyncio.sleep(0.2)
        page = httpx.get(f"{worker.url}/ui", timeout=10, follow_redirects=True)
        assert page.status_code == 200 and "<html" in page.text.lower(), page.text[:300]
        assert "Traceback" not in worker.log_tail(10_000)
    finally:
        worker.kill()
