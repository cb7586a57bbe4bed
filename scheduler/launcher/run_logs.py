"""A run's output, kept by the launcher that runs it (issue 40 item 5; not wired yet): every line the
program prints (stdout and stderr, its secrets masked), in a file of the run under
`<SCHEDULER_DATA_DIR>/run-logs/`, bounded per run and in all.

Per run: the first `head_bytes` are kept whole (how it began), then the most recent `tail_bytes` (how it
ended) in two rotating halves; a reader is told how many bytes in between were dropped. In all: past
`max_total_bytes`, the files of the runs that ended longest ago are deleted first. Offsets a reader pages
with are over everything the run ever printed, so `read(offset=…)` after a rotation skips what is gone and
says so, rather than repeating or jumping."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Chunk:
    text: str  # what was kept from `offset` on (at most `limit` bytes)
    offset: int  # where `text` begins, over everything the run printed (>= the asked offset)
    next: int  # the offset to ask next
    dropped: int  # bytes between the asked offset and `offset` that are no longer kept
    size: int  # everything the run printed so far


class RunLogs:
    def __init__(self, root: Path, head_bytes: int = 256 * 1024, tail_bytes: int = 768 * 1024,
                 max_total_bytes: int = 1 << 30) -> None:  # fmt: skip
        self.root = root
        self.head_bytes = head_bytes
        self.tail_bytes = tail_bytes
        self.max_total_bytes = max_total_bytes

    def _base(self, run_id: str) -> Path:
        return self.root / hashlib.sha256(run_id.encode()).hexdigest()[:32]

    def _meta(self, run_id: str) -> dict[str, int]:
        path = self._base(run_id).with_suffix(".json")
        try:
            return dict(json.loads(path.read_text()))
        except (OSError, ValueError):
            return {"size": 0, "head": 0, "tail_start": 0, "old_start": 0}

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
        meta = self._meta(run_id)
        base = self._base(run_id)
        if meta["size"] == 0 and not base.with_suffix(".head").exists():
            return None
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
        return Chunk(out.decode(errors="replace"), start, start + len(out), start - offset, meta["size"])

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
