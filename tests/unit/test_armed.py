"""The punctuator's armed entries filed by instant (worker/armed.py): the order a heap of (due, seq) would
pop them in, and nothing lost or reordered when entries taken are put back."""

from __future__ import annotations

import heapq
import random

import pytest

from scheduler.worker.armed import Armed

pytestmark = pytest.mark.unit


def _drain(armed: Armed) -> list[tuple[int, int, bytes, str]]:
    out = []
    while armed:
        due, instant = armed.take()
        out += [(due, *e) for e in zip(instant.seqs, instant.keys, instant.paths, strict=True)]
        armed.recycle(instant)
    return out


def test_instants_come_out_earliest_first_each_in_arming_order_as_a_heap_of_due_and_seq_would():
    rng = random.Random(7)
    armed, heap = Armed(), []
    for seq in range(2_000):
        due = rng.choice([5, 1, 9, 3, 3, 7])
        entry = (due, seq, f"k{rng.randrange(50)}".encode(), rng.choice(["0", "1.0"]))
        armed.push(*entry)
        heapq.heappush(heap, entry)
    assert len(armed) == 2_000 and armed.first() == 1
    assert sorted(armed.entries()) == sorted(heap)
    assert _drain(armed) == [heapq.heappop(heap) for _ in range(len(heap))]
    assert not armed and armed.first() is None and len(armed) == 0


def test_entries_put_back_go_before_what_was_armed_at_their_instant_since():
    armed = Armed()
    for seq in range(6):
        armed.push(10, seq, b"k%d" % seq, "0")
    due, instant = armed.take()
    armed.push(10, 6, b"k6", "0")  # armed while the instant was out (a command)
    armed.push(20, 7, b"k7", "0")
    armed.put_back(due, instant.cut(4))  # the first 4 handled, 2 not
    assert instant.seqs == [0, 1, 2, 3]
    armed.recycle(instant)
    assert [(d, s) for d, s, _, _ in _drain(armed)] == [(10, 4), (10, 5), (10, 6), (20, 7)]


def test_an_instant_put_back_alone_is_armed_again_and_nothing_empty_is_put_back():
    armed = Armed()
    armed.push(10, 0, b"a", "0")
    armed.push(10, 1, b"b", "0")
    due, instant = armed.take()
    assert not armed
    armed.put_back(due, instant.cut(2))  # (nothing left over)
    assert not armed
    armed.put_back(due, instant.cut(1))
    assert armed.first() == 10 and list(armed.entries()) == [(10, 1, b"b", "0")]


def test_a_recycled_instant_comes_back_empty_for_a_later_instant():
    armed = Armed()
    armed.push(10, 0, b"a", "0")
    due, instant = armed.take()
    armed.recycle(instant)
    armed.push(11, 1, b"b", "1")
    assert armed.at[11] is instant and list(armed.entries()) == [(11, 1, b"b", "1")]
