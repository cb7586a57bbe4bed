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
from typing import TYPE_CHECKING

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

    def _meta(self, run_id: str) -> dict[str, int]:
        return self._found(run_id) or {"size": 0, "head": 0, "tail_start": 0, "old_start": 0}

    def _found(self, run_id: str) -> dict[str, int] | None:
        path = self._base(run_id).with_suffix(".json")
        try:
            return dict(json.loads(path.read_text()))
        except (OSError, ValueError):
            return None

    def begin(self, run_id: str) -> None:
        """The run starts: its log exists (empty) from now on."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._save(run_id, self._meta(run_id))

    def end(self, run_id: str) -> None:
        """The run ended: its log is complete (a follower stops waiting)."""
        meta = self._found(run_id)
        if meta is not None:
            meta["ended"] = 1
            self._save(run_id, meta)

    def _save(self, run_id: str, meta: dict[str, int]) -> None:
        path = self._base(run_id).with_suffix(".json")
        path.write_text(json.dumps(meta))

    def append(self, run_id: str, line: str) -> None:
        """One line of the run's output (its secrets already masked)."""
        self.root.mkdir(parents=True, exist_ok=True)
        data = (line.rstrip("\n") + "\n").encode()
        meta = self._meta(run_id)
        base = self._base(run_id)
        if meta["head"] < self.head_bytes:
            with open(base.with_suffix(".head"), "ab") as f:
                f.write(data)
            meta["head"] += len(data)
            meta["tail_start"] = meta["old_start"] = meta["head"]
        else:
            tail = base.with_suffix(".tail")
            if tail.exists() and tail.stat().st_size + len(data) > self.tail_bytes // 2:
                os.replace(tail, base.with_suffix(".old"))  # (the older half goes; this one becomes it)
                meta["old_start"] = meta["tail_start"]
                meta["tail_start"] = meta["size"]
            with open(tail, "ab") as f:
                f.write(data)
        meta["size"] += len(data)
        self._save(run_id, meta)

    def read(self, run_id: str, offset: int = 0, limit: int = 1 << 20) -> Chunk | None:
        """What is kept of the run's output from `offset` on; None if nothing of the run is here."""
        meta = self._found(run_id)
        if meta is None:
            return None
        base = self._base(run_id)
        pieces: list[tuple[int, Path]] = [(0, base.with_suffix(".head"))]
        old = base.with_suffix(".old")
        if old.exists():
            pieces.append((meta["old_start"], old))
        pieces.append((meta["tail_start"], base.with_suffix(".tail")))
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
            start = max(offset, meta["size"])
        return Chunk(
            out.decode(errors="replace"),
            start,
            start + len(out),
            start - offset,
            meta["size"],
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
