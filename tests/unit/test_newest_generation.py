"""A restore of the trigger progress never takes a write of an earlier group generation over a later one
(kafka.tables.keep_newest_generation): without transactions, what a frozen owner's producers held lands in
the changelog after the next owner's writes of the same keys."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from scheduler.domain.triggers.progress import TriggerProgress
from scheduler.kafka.tables import keep_newest_generation
from scheduler.worker.trigger_agent import progress_generation, progress_record

pytestmark = pytest.mark.unit


class _Table:
    def __init__(self) -> None:
        self.applied: list[Any] = []

    def apply_changelog_batch(self, batch: Any) -> None:
        self.applied.extend(batch)


def _record(key: bytes, seq: int, generation: int | None, partition: int = 0) -> Any:
    progress = TriggerProgress(1)
    progress.seq = seq
    value = None if seq < 0 else progress_record(progress, generation or 0)
    if generation is None and value is not None:
        value = value.replace(b', "generation": 0', b"").replace(b',"generation":0', b"")
    return SimpleNamespace(message=SimpleNamespace(partition=partition, key=key, value=value))


def _seqs(table: _Table) -> list[int | None]:
    return [
        None if e.message.value is None else TriggerProgress.from_json(_json(e)).seq for e in table.applied
    ]


def _json(e: Any) -> Any:
    from scheduler.wire.codec import decode_json

    return decode_json(e.message.value)


def test_a_frozen_owners_late_write_does_not_replace_the_next_owners() -> None:
    table = _Table()
    keep_newest_generation(table, progress_generation, stored=lambda p, k: None)
    table.apply_changelog_batch(
        [
            _record(b"f3", 22, generation=3),  # A, before it froze
            _record(b"f3", 23, generation=4),  # B took the partition over in the next generation
            _record(b"f3", 181, generation=4),
            _record(b"f3", 23, generation=3),  # A's write, held by its producer while frozen, lands late
            _record(b"f4", 7, generation=3),  # another key: nothing newer of it, applied
            _record(b"f3", 182, generation=5),  # the next rebalance's owner
        ]
    )
    assert _seqs(table) == [22, 23, 181, 7, 182]


def test_the_key_in_the_database_counts_and_a_delete_or_an_older_record_always_applies() -> None:
    table = _Table()
    stored = {(0, b"f3"): progress_record(TriggerProgress(1), 6)}
    keep_newest_generation(table, progress_generation, stored=lambda p, k: stored.get((p, k)))
    table.apply_changelog_batch(
        [
            _record(b"f3", 9, generation=5),  # older than what the database holds: skipped
            _record(b"f3", 10, generation=None),  # written before generations were recorded: applied
            _record(b"f3", 11, generation=5),  # (the key's generation is unknown again: applied)
            _record(b"f3", -1, generation=None),  # a delete: applied
            _record(b"f3", 12, generation=2),
        ]
    )
    assert _seqs(table) == [10, 11, None, 12]


def test_a_record_without_a_generation_reads_as_none() -> None:
    assert progress_generation(b'{"version": 1, "seq": 3}') is None
    assert progress_generation(b"not json") is None
    assert progress_generation(progress_record(TriggerProgress(1), 7)) == 7


@pytest.mark.parametrize("version", [1, 2, 63, 64, 65, 127, 128, 300, 8191, 8192, 2**20, 2**31 - 1])
def test_a_schedule_states_version_is_read_from_its_last_bytes(version: int) -> None:
    from dataclasses import replace

    from scheduler.domain.model import (
        FrequencyTrigger,
        Paused,
        Schedule,
        ScheduleKey,
        ScheduleState,
        TimeUnit,
    )
    from scheduler.wire.codec import decode_state, encode_state, state_version

    for created, updated in ((1795662985081, 1795662985081), (1795662985081, 1795662999999), (0, 300)):
        st = ScheduleState(
            Schedule(ScheduleKey("acme", "s"), FrequencyTrigger(TimeUnit.SECONDS, 1), "out"),
            created_at=created,
            updated_at=updated,
            active_since=updated,
            version=version,
        )
        raw = encode_state(st)
        assert state_version(raw) == decode_state(raw).version == version
        paused = encode_state(
            replace(st, paused=Paused(updated, "why", None, 2**40 if version % 2 else None))
        )
        assert paused[-2] != 0 and state_version(paused) == version  # (decoded whole)
        limited = encode_state(replace(st, schedule=replace(st.schedule, max_fires=9), fires=5))
        assert limited[-1] != 0 and state_version(limited) == version  # (decoded whole)
        # (states written by releases 0.3.0 and 0.4.0, before `paused` and `fires`: test_codec)
    assert state_version(b"") is None
    assert state_version(b"\x81") is None  # (cut short: a varint cannot end with its high bit set)


def test_a_frozen_owners_late_schedule_write_does_not_bring_back_the_version_before_an_update() -> None:
    """Without transactions: A applied version 1 and froze with that write still in its producer; B took
    the partition over and applied the update (version 2, acknowledged); A's write lands after B's. A
    restore must keep version 2."""
    from scheduler.domain.model import FrequencyTrigger, Schedule, ScheduleKey, ScheduleState, TimeUnit
    from scheduler.wire.codec import encode_state, state_version

    def state(version: int) -> Any:
        st = ScheduleState(
            Schedule(
                ScheduleKey("acme", "u1"), FrequencyTrigger(TimeUnit.SECONDS, 1), "out", {"v": str(version)}
            ),
            created_at=1,
            updated_at=version,
            active_since=version,
            version=version,
        )
        return SimpleNamespace(message=SimpleNamespace(partition=0, key=b"u1", value=encode_state(st)))

    table = _Table()
    keep_newest_generation(table, state_version, stored=lambda p, k: None, stamp="version")
    deleted = SimpleNamespace(message=SimpleNamespace(partition=0, key=b"u1", value=None))
    table.apply_changelog_batch([state(1), state(2), state(1), deleted, state(1)])
    versions = [None if e.message.value is None else state_version(e.message.value) for e in table.applied]
    assert versions == [1, 2, None, 1]  # (after a delete, an INSERT starts again at 1)
