"""A stored delayed message's Avro by hand (scheduler/wire/delayed_codec.py) against fastavro's: the same
bytes written, the same message read, and anything else left to the Avro reader."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduler.domain.delayed import DelayedMessage
from scheduler.wire.codec import decode, encode
from scheduler.wire.delayed_codec import decode_delayed, encode_delayed
from scheduler.wire.fires import zigzag_long
from scheduler.worker.delayed import decode_message

pytestmark = pytest.mark.unit

LONGS = st.integers(min_value=-(2**63), max_value=2**63 - 1)
# (lengths on both sides of 64: below it the reader reads a length's one byte in the line, else read_long;
# values on both sides of 2,048: below it the writer takes a length's bytes from a table)
messages = st.builds(
    DelayedMessage,
    st.binary(max_size=100),
    LONGS,
    st.text(max_size=80),
    st.none() | st.binary(max_size=100),
    st.none() | st.binary(max_size=300) | st.binary(min_size=2_040, max_size=2_060),
    st.lists(st.tuples(st.text(max_size=80), st.none() | st.binary(max_size=100)), max_size=5).map(tuple),
    LONGS,
)


@given(messages)
def test_a_message_is_written_as_the_avro_writer_writes_it_and_read_back(m: DelayedMessage) -> None:
    raw = encode("DelayedMessage", m.to_record())
    assert encode_delayed(m) == raw
    assert decode_delayed(raw) == m == DelayedMessage.from_record(decode("DelayedMessage", raw))


@given(messages, st.data())
def test_bytes_cut_short_or_with_more_after_are_left_to_the_avro_reader(m: DelayedMessage, data) -> None:
    raw = encode_delayed(m)
    cut = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    assert decode_delayed(raw[:cut]) is None
    assert decode_delayed(raw + b"\x00") is None


def test_what_the_hand_reader_does_not_read_the_avro_reader_reads_or_refuses() -> None:
    m = DelayedMessage(b"id-1", 1_796_083_200_000, "orders", None, b"v", (("h", b"x"),), 1_796_083_100_000)
    # the headers in a block that gives its size (a negative count: valid Avro other writers write)
    tail = zigzag_long(m.received_at)
    fields = encode_delayed(m._replace(headers=()))[: -len(tail) - 1]  # id … value
    header = zigzag_long(1) + b"h" + b"\x02" + zigzag_long(1) + b"x"
    sized = fields + zigzag_long(-1) + zigzag_long(len(header)) + header + b"\x00" + tail
    assert decode_delayed(sized) is None
    assert decode_message(sized) == m  # (the Avro reader's)
    assert decode_delayed(b"\x00\x01garbage") is None
