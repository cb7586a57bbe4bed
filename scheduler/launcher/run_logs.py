"""A run's output, kept by the launcher that runs it: every line the program prints (stdout and stderr,
its secrets masked), in files of the run under `<SCHEDULER_DATA_DIR>/run-logs/`, bounded per run
(SCHEDULER_RUN_LOG_BYTES) and in all (SCHEDULER_RUN_LOGS_MAX_BYTES). The launcher reports where they are
read (its `logsUrl`: the worker's own HTTP for an embedded launcher, else its log server,
http/log_server.py) and GET /programs/.../runs/{id}/logs reads them there (http/run_logs.py).

Per run: the first `head_bytes` are kept whole (how it began), then the most recent `tail_bytes` (how it
ended) in two rotating halves; a reader is told how many bytes in between were dropped. In all: past
`max_total_bytes`, the files of the runs that ended longest ago are deleted first. Offsets a reader pages
with are over everything the run ever printed, so `read(offset=…)` after a rotation skips what is gone and
says so, rather than repeating or jumping."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduler.kafka.config import Settings

#: how often a follower looks for new output
FOLLOW_POLL_S = 0.25


@dataclass(frozen=True)
class Chunk:
    text: str  # what was kept from `offset` on (at most `limit` bytes)
    offset: int  # where `text` begins, over everything the run printed (>= the asked offset)
    next: int  # the offset to ask next
    dropped: int  # bytes between the asked offset and `offset` that are no longer kept
    size: int  # everything the run printed so far
    complete: bool = False  # the run ended: nothing more will come


def log_key(program: str, run_id: str) -> str:
    """A run's log is the run's within its program (a reader is checked against the program's namespace)."""
    return f"{program}\n{run_id}"


class RunLogs:
    def __init__(self, root: Path, head_bytes: int = 256 * 1024, tail_bytes: int = 768 * 1024,
                 max_total_bytes: int = 1 << 30) -> None:  # fmt: skip
        self.root = root
        self.head_bytes = head_bytes
        self.tail_bytes = tail_bytes
        self.max_total_bytes = max_total_bytes
        self._writers: dict[str, _Writer] = {}  # the runs this process is writing: their open files

    @classmethod
    def from_settings(cls, settings: Settings) -> RunLogs:
        head = settings.run_log_bytes // 4
        return cls(
            settings.data_dir / "run-logs", head, settings.run_log_bytes - head, settings.run_logs_max_bytes
        )

    async def read_when_more(
        self, run_id: str, offset: int, wait_s: float, limit: int = 1 << 20
    ) -> Chunk | None:
        """`read`, once there is output past `offset` or `wait_s` has passed (a follower's long poll)."""
        deadline = time.monotonic() + wait_s
        while True:
            chunk = self.read(run_id, offset, limit)
            if chunk is None or chunk.size > offset or chunk.complete or time.monotonic() >= deadline:
                return chunk
            await asyncio.sleep(FOLLOW_POLL_S)

    def _base(self, run_id: str) -> Path:
        return self.root / hashlib.sha256(run_id.encode()).hexdigest()[:32]

    # On disk, per run: `.head` (its first bytes), `.old` and `.tail` (the latest, in two halves), and `.json`
    # (where the halves begin in all it printed, and whether it ended), written only when those change: a
    # line appended is one write to an open file (a line costs microseconds, not a file rewrite). Sizes
    # are read from the files.

    def _found(self, run_id: str) -> dict[str, int] | None:
        path = self._base(run_id).with_suffix(".json")
        try:
            return dict(json.loads(path.read_text()))
        except (OSError, ValueError):
            return None

    def _save(self, run_id: str, meta: dict[str, int]) -> None:
        self._base(run_id).with_suffix(".json").write_text(json.dumps(meta))

    def begin(self, run_id: str) -> None:
        """The run starts: its log exists (empty) from now on."""
        self.root.mkdir(parents=True, exist_ok=True)
        if self._found(run_id) is None:
            self._save(run_id, {"tail_start": 0, "old_start": 0})

    def end(self, run_id: str) -> None:
        """The run ended: its log is complete (a follower stops waiting)."""
        writer = self._writers.pop(run_id, None)
        if writer is not None:
            writer.close()
        meta = self._found(run_id)
        if meta is not None:
            meta["ended"] = 1
            self._save(run_id, meta)

    def append(self, run_id: str, line: str) -> None:
        """One line of the run's output (its secrets already masked)."""
        data = (line.rstrip("\n") + "\n").encode()
        writer = self._writers.get(run_id)
        if writer is None:
            self.root.mkdir(parents=True, exist_ok=True)
            writer = self._writers[run_id] = _Writer(self._base(run_id), self._found(run_id))
        if writer.head < self.head_bytes:
            writer.write("head", data)
            writer.head += len(data)
            writer.size += len(data)
            if writer.meta is None:
                writer.meta = {"tail_start": 0, "old_start": 0}
                self._save(run_id, writer.meta)
            return
        if (
            writer.meta is None or writer.meta["tail_start"] < writer.head
        ):  # (the head is whole: the tail begins)
            writer.meta = {**(writer.meta or {}), "tail_start": writer.size, "old_start": writer.size}
            self._save(run_id, writer.meta)
        if writer.tail and writer.tail + len(data) > self.tail_bytes // 2:
            writer.rotate()  # (the older half goes; this one becomes it)
            writer.meta = {**writer.meta, "old_start": writer.meta["tail_start"], "tail_start": writer.size}
            self._save(run_id, writer.meta)
        writer.write("tail", data)
        writer.tail += len(data)
        writer.size += len(data)

    def read(self, run_id: str, offset: int = 0, limit: int = 1 << 20) -> Chunk | None:
        """What is kept of the run's output from `offset` on; None if nothing of the run is here."""
        meta = self._found(run_id)
        base = self._base(run_id)
        if meta is None:
            return None
        head, old, tail = (base.with_suffix(s) for s in (".head", ".old", ".tail"))
        head_size = _size(head)
        tail_start = max(meta.get("tail_start", 0), head_size)
        size = tail_start + _size(tail) if tail.exists() else head_size
        pieces: list[tuple[int, Path]] = [(0, head)]
        if old.exists():
            pieces.append((meta.get("old_start", 0), old))
        pieces.append((tail_start, tail))
        out = bytearray()
        start = None
        for begin, path in pieces:
            if not path.exists():
                continue
            blob = path.read_bytes()
            end = begin + len(blob)
            if end <= offset or len(out) >= limit:
                continue
            frm = max(offset, begin)
            if start is None:
                start = frm
            elif frm != start + len(out):
                break  # (a gap after what was read: the next read tells it)
            out += blob[frm - begin : frm - begin + limit - len(out)]
        if start is None:
            start = max(offset, size)
        return Chunk(
            out.decode(errors="replace"),
            start,
            start + len(out),
            start - offset,
            max(size, start + len(out)),
            bool(meta.get("ended")),
        )

    def sweep(self) -> int:
        """Delete the files of the runs changed longest ago until all fit in max_total_bytes; bytes freed."""
        if not self.root.exists():
            return 0
        runs: dict[str, list[Path]] = {}
        for path in self.root.iterdir():
            runs.setdefault(path.stem, []).append(path)
        total = sum(p.stat().st_size for paths in runs.values() for p in paths)
        freed = 0
        for _, paths in sorted(runs.items(), key=lambda kv: max(p.stat().st_mtime for p in kv[1])):
            if total - freed <= self.max_total_bytes:
                break
            for path in paths:
                freed += path.stat().st_size
                path.unlink(missing_ok=True)
        return freed


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class _Writer:
    """A run's log being written: its files open for appending, the sizes so far."""

    def __init__(self, base: Path, meta: dict[str, int] | None) -> None:
        self.base = base
        self.meta = meta
        self.head = _size(base.with_suffix(".head"))
        self.tail = _size(base.with_suffix(".tail"))
        tail_start = 0 if meta is None else meta.get("tail_start", 0)
        self.size = tail_start + self.tail if self.tail else self.head
        self._files: dict[str, Any] = {}

    def write(self, which: str, data: bytes) -> None:
        f = self._files.get(which)
        if f is None:
            f = self._files[which] = open(self.base.with_suffix(f".{which}"), "ab")  # noqa: SIM115
        f.write(data)
        f.flush()

    def rotate(self) -> None:
        f = self._files.pop("tail", None)
        if f is not None:
            f.close()
        os.replace(self.base.with_suffix(".tail"), self.base.with_suffix(".old"))
        self.tail = 0

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
