"""The README's "A first session", run as a new user would: `scheduler run` (what `make run` starts), then
every shell block of the section in order, each command exactly as written but for the ports (the HTTP port
in its URLs, and SCHEDULER_URL for the CLI; the broker's through KAFKA_BOOTSTRAP_SERVERS). A command answers
without an error, and as its `# -> ...` comment says where it has one; a `scheduler tail` shows what its
comment shows, and nothing else on the terminal. Then, on the same worker, as a reader who did the first
session, every shell block of each How-to page marked for it (SESSION_MARK). So neither the README nor
those pages can drift from the product again."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import RunProcess

pytestmark = [pytest.mark.integration, pytest.mark.own_broker, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
HOW_TO = ROOT / "docs" / "content" / "how-to"
#: a How-to page that carries this comment has every shell block run by this test, in order
SESSION_MARK = "<!-- session: run by tests/integration/test_readme_session.py -->"


@dataclass
class Command:
    text: str  # as written (continuation lines joined by their newlines)
    expect: str | None = None  # its `# -> STATUS BODY` comment's BODY
    shows: list[str] = field(default_factory=list)  # a tail's comment: the record it prints


def section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.S)


def how_to_sessions() -> list[tuple[str, list[str]]]:
    """(page, its shell blocks) of each How-to page marked SESSION_MARK, by name."""
    pages = sorted(HOW_TO.glob("*.md"))
    return [(p.name, shell_blocks(text)) for p in pages if SESSION_MARK in (text := p.read_text())]


def commands(block: str) -> list[Command]:
    """A block's commands: a line continues while a single quote is open or it ends with a backslash;
    `# ->` comments are the answer of the command before; `# {` … comments after a tail, what it prints."""
    out: list[Command] = []
    pending: list[str] = []
    in_shows = False
    for line in block.splitlines():
        if pending:
            pending.append(line)
        elif line.lstrip().startswith("#"):
            comment = line.lstrip()[1:].strip()
            if comment.startswith("->") and out:
                out[-1].expect = comment[2:].strip()
            elif out and "scheduler tail" in out[-1].text and (comment.startswith("{") or in_shows):
                out[-1].shows.append(comment)
                in_shows = True
            continue
        elif line.strip():
            pending = [line]
            in_shows = False
        else:
            continue
        joined = "\n".join(pending)
        if joined.count("'") % 2 == 0 and not joined.endswith("\\"):
            out.append(
                Command(re.sub(r"\s+#[^'\n]*$", "", joined))
            )  # a trailing comment is not the command's
            pending = []
    assert not pending, f"an unterminated command in the README: {pending}"
    return out


def test_the_readme_parser_reads_the_first_session() -> None:
    """The parser itself: the section has the commands this test runs (a parser that found none would
    make the session test pass on nothing)."""
    cmds = [c for b in shell_blocks(section(README.read_text(), "A first session")) for c in commands(b)]
    texts = [c.text for c in cmds]
    assert len(cmds) >= 12, texts
    assert any(
        c.text.startswith("curl -s -X POST 'localhost:6066/schedules?wait=applied'") and c.expect
        for c in cmds
    )
    assert any("scheduler tail acme-fires" in c.text and c.shows for c in cmds)
    assert all(t.count("'") % 2 == 0 for t in texts)
    marked = {page: [c for b in blocks for c in commands(b)] for page, blocks in how_to_sessions()}
    assert {"calendars.md", "retries.md", "slas.md"} <= marked.keys(), marked.keys()
    assert all(cmds for cmds in marked.values()), marked


@pytest.fixture
def run(tmp_path: Path) -> Iterator[RunProcess]:
    """`scheduler run` with its defaults (app id, launcher, auth off) on ports of its own, on Apache Kafka
    as `make run` picks it where java and mvn are."""
    r = RunProcess(tmp_path / "data", tmp_path / "run.log", broker="kafka", app_id=None)
    try:
        r.start()
        yield r
    finally:
        r.stop()


def as_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def test_every_command_of_a_first_session_works_as_written(run: RunProcess, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCHEDULER_", "KAFKA_"))}
    env["KAFKA_BOOTSTRAP_SERVERS"] = f"127.0.0.1:{run.broker_port}"
    env["SCHEDULER_URL"] = f"http://127.0.0.1:{run.web_port}"  # (the How-to pages' bare `scheduler`)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    tails: list[tuple[Command, subprocess.Popen[str], Path, Path]] = []
    blocks = shell_blocks(section(README.read_text(), "A first session"))
    try:
        for block in blocks:
            for cmd in commands(block):
                text = cmd.text.replace("localhost:6066", f"127.0.0.1:{run.web_port}")
                if "scheduler tail" in text:  # "in another terminal": it keeps running
                    out, err = tmp_path / f"tail{len(tails)}.out", tmp_path / f"tail{len(tails)}.err"
                    with out.open("w") as o, err.open("w") as e:
                        proc = subprocess.Popen(["bash", "-c", f"exec {text}"], cwd=ROOT, env=env, stdout=o,
                                                stderr=e, text=True, start_new_session=True)  # fmt: skip
                    tails.append((cmd, proc, out, err))
                    if cmd.shows:  # the reader watches it print before going on
                        wait_for_line(proc, out, err, cmd.text)
                    continue
                run_one(cmd, text, env)
        for page, page_blocks in how_to_sessions():
            for block in page_blocks:
                for cmd in commands(block):
                    run_one(cmd, cmd.text.replace("localhost:6066", f"127.0.0.1:{run.web_port}"), env, page)
        for cmd, proc, out, err in tails:
            assert proc.poll() is None, f"{cmd.text} exited {proc.returncode}: {err.read_text()}"
            lines = out.read_text().splitlines()
            if cmd.shows:
                want = json.loads(" ".join(cmd.shows))
                got = as_json(lines[0])
                assert isinstance(got, dict) and got.keys() == want.keys(), (lines[0], want)
                for same in ("key", "data", "missed", "catchUp"):
                    assert got[same] == want[same], (same, got, want)
            for line in lines:  # the terminal shows records, one JSON object a line, nothing else
                assert isinstance(as_json(line), dict), (
                    f"{cmd.text} printed a line that is not a record: {line}"
                )
            assert not err.read_text().strip(), f"{cmd.text} wrote to the terminal: {err.read_text()[:2000]}"
    finally:
        for _, proc, _, _ in tails:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def wait_for_line(
    proc: subprocess.Popen[str], out: Path, err: Path, what: str, timeout_s: float = 60
) -> None:
    deadline = time.monotonic() + timeout_s
    while not out.read_text().strip():
        assert proc.poll() is None, f"{what} exited {proc.returncode}: {err.read_text()[-2000:]}"
        assert time.monotonic() < deadline, (
            f"{what} printed nothing in {timeout_s} s: {err.read_text()[-2000:]}"
        )
        time.sleep(0.2)


def run_one(cmd: Command, text: str, env: dict[str, str], page: str = "README.md") -> None:
    """Run a command; it must answer without an error (and as its `# ->` comment says): curl a JSON body
    without an error, the CLI exit status 0. Writes answer 202 and apply a moment later, so a read is run
    again until it shows them, as a reader typing would see them."""
    cli = not text.startswith("curl ")
    reads = not re.search(r"-X (POST|PUT|DELETE)| (put|create|delete|enable|disable|run) ", text)
    deadline = time.monotonic() + (20 if reads else 0)
    while True:
        r = subprocess.run(
            ["bash", "-c", text], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        body = as_json(r.stdout)
        failed = (
            r.returncode != 0
            or "Traceback" in r.stderr
            or (not cli and body is None)
            or (isinstance(body, dict) and ("error" in body or "errors" in body))
        )
        if not failed or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not failed, f"{page}: {cmd.text}\n-> rc {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    if cmd.expect is not None:
        want = as_json(cmd.expect.split(" ", 1)[1])  # "202 {...}": curl -s prints the body only
        assert body == want, f"{cmd.text}\n-> {r.stdout}\n{page} says: {cmd.expect}"
