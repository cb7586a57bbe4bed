"""A run's output kept by the launcher (scheduler/launcher/run_logs.py): the head whole, the tail rotating,
offsets over everything printed, what was dropped said, the total bounded."""

from __future__ import annotations

import pytest

from scheduler.launcher.run_logs import RunLogs

pytestmark = pytest.mark.unit


def test_a_short_log_reads_back_whole_and_pages_by_offset(tmp_path):
    logs = RunLogs(tmp_path)
    assert logs.read("acme/a@1") is None
    for i in range(3):
        logs.append("acme/a@1", f"line {i}")
    whole = logs.read("acme/a@1")
    assert whole is not None and whole.text == "line 0\nline 1\nline 2\n" and whole.size == 21
    page = logs.read("acme/a@1", offset=7, limit=7)
    assert page is not None and (page.text, page.offset, page.next, page.dropped) == ("line 1\n", 7, 14, 0)
    end = logs.read("acme/a@1", offset=21)
    assert end is not None and (end.text, end.next) == ("", 21)


def test_a_long_log_keeps_its_head_and_its_latest_tail_and_says_what_was_dropped(tmp_path):
    logs = RunLogs(tmp_path, head_bytes=20, tail_bytes=40)
    lines = [f"l{i:03d}" for i in range(100)]  # (5 bytes each with the newline)
    for line in lines:
        logs.append("r", line)
    kept = logs.read("r")
    assert kept is not None and kept.size == 500
    assert kept.text.startswith("l000\nl001\nl002\nl003\n") and kept.dropped == 0
    assert kept.next == 20, "the first read ends at the gap"
    after = logs.read("r", offset=kept.next)
    assert after is not None and after.dropped > 0 and after.text.endswith("l099\n")
    assert after.offset == 20 + after.dropped and after.next == 500
    assert 20 <= len(after.text) <= 40


def test_the_total_is_bounded_the_runs_changed_longest_ago_go_first(tmp_path):
    import os
    import time

    logs = RunLogs(tmp_path, max_total_bytes=400)  # (each run: 240 bytes of output and its meta)
    for n, run in enumerate(("old", "mid", "new")):
        for i in range(30):
            logs.append(run, f"{run} {i:03d}")
        stamp = time.time() - 100 + n * 10
        for path in tmp_path.iterdir():
            if logs._base(run).name == path.stem:  # noqa: SLF001
                os.utime(path, (stamp, stamp))
    assert logs.sweep() > 0
    assert logs.read("old") is None and logs.read("mid") is None and logs.read("new") is not None


def test_a_run_that_began_reads_empty_until_it_prints_and_its_end_makes_it_complete(tmp_path):
    logs = RunLogs(tmp_path)
    logs.begin("r")
    empty = logs.read("r")
    assert empty is not None and (empty.text, empty.size, empty.complete) == ("", 0, False)
    logs.append("r", "done")
    logs.end("r")
    whole = logs.read("r")
    assert whole is not None and (whole.text, whole.complete) == ("done\n", True)


async def test_a_follower_is_answered_when_output_comes_or_the_run_ends_not_at_its_deadline(tmp_path):
    import asyncio
    import time

    logs = RunLogs(tmp_path)
    logs.begin("r")

    async def later() -> None:
        await asyncio.sleep(0.3)
        logs.append("r", "hello")
        await asyncio.sleep(0.3)
        logs.end("r")

    task = asyncio.create_task(later())
    began = time.monotonic()
    first = await logs.read_when_more("r", 0, wait_s=30)
    assert first is not None and first.text == "hello\n" and not first.complete
    second = await logs.read_when_more("r", first.next, wait_s=30)
    assert second is not None and second.text == "" and second.complete
    assert time.monotonic() - began < 10, "the follower waited out its deadline"
    await task
    assert (await logs.read_when_more("other", 0, wait_s=30)) is None


async def test_a_launchers_log_server_serves_its_runs_and_without_tokens_says_why_instead_of_failing(
    tmp_path,
):
    import aiohttp

    from scheduler.http.log_server import serve
    from scheduler.kafka.config import Settings
    from scheduler.launcher.run_logs import log_key

    path = "/programs/acme/etl/command/x/runs/acme/x@1/logs"
    logs = RunLogs(tmp_path / "logs")
    logs.begin(log_key("acme/etl/command/x", "acme/x@1"))
    logs.append(log_key("acme/etl/command/x", "acme/x@1"), "hello")
    open_settings = Settings(auth="off", data_dir=tmp_path, launcher_logs_port=0)
    locked = Settings(auth="on", auth_tokens_file=tmp_path / "missing.yaml", data_dir=tmp_path)
    async with aiohttp.ClientSession() as http:
        for settings, status, says in ((open_settings, 200, "hello"), (locked, 503, "no usable tokens")):
            runner, url = await serve(settings, logs)
            try:
                async with http.get(url + path) as answer:
                    assert answer.status == status and says in await answer.text()
                async with http.get(url + path.replace("x@1", "x@2")) as other:
                    assert other.status == (404 if status == 200 else 503)
            finally:
                await runner.cleanup()


def test_what_a_writer_appends_is_read_at_once_by_another_reader_across_rotations(tmp_path):
    writer, reader = RunLogs(tmp_path, head_bytes=20, tail_bytes=40), RunLogs(tmp_path)
    writer.begin("r")
    printed = b""
    for i in range(60):
        line = f"l{i:03d}"
        writer.append("r", line)
        printed += f"{line}\n".encode()
        got = reader.read("r", offset=max(len(printed) - 5, 0))
        assert got is not None and got.size == len(printed) and got.text == printed[-5:].decode()
    head = reader.read("r")
    assert head is not None and head.text == printed[:20].decode()
