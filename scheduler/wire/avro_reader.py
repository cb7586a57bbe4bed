"""Avro's binary encoding read by hand, for the readers of the hot paths (commands and schedule states in
codec.py, stored delayed messages in delayed_codec.py). Such a reader reads only bytes laid out as the Avro
writer writes its records and raises Defer (or IndexError, UnicodeDecodeError) on anything else: the Avro
reader then reads them, or names what is wrong."""

from __future__ import annotations

import builtins


class Defer(Exception):
    """Not what a hand reader reads: the Avro reader decides."""


def read_long(buf: bytes, pos: int) -> tuple[int, int]:
    """The Avro int or long (a zigzag varint) at `pos`: its value and the position after it (to read one
    field of a record without decoding the rest). Any length of varint, unlike AvroReader.long."""
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


class AvroReader:
    """A record's fields read in order from `data`, `pos` after the last one read."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def long(self) -> int:
        data, pos = self.data, self.pos
        b = data[pos]
        n, shift = b & 0x7F, 7
        while b & 0x80:
            if shift > 56:  # a tenth byte (a long past ±2**62): fastavro's reader decides what it is
                raise Defer
            pos += 1
            b = data[pos]
            n |= (b & 0x7F) << shift
            shift += 7
        self.pos = pos + 1
        return (n >> 1) ^ -(n & 1)

    def bytes(self) -> bytes:
        n = self.long()
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise Defer
        value = self.data[self.pos : end]
        self.pos = end
        return value

    def string(self) -> str:
        return self.bytes().decode()

    def optional_bytes(self) -> builtins.bytes | None:  # (`bytes` here is the method above)
        """A union of null and bytes, its branch as the Avro writer writes it (one byte: 0, or 2)."""
        branch = self.data[self.pos]
        self.pos += 1
        if branch == 0:
            return None
        if branch != 2:
            raise Defer
        return self.bytes()

    def index(self, size: int) -> int:
        """An enum symbol's or a union branch's index."""
        i = self.long()
        if not 0 <= i < size:
            raise Defer
        return i

    def string_map(self) -> dict[str, str]:
        out: dict[str, str] = {}
        while count := self.long():
            if count < 0:  # a block with its size in bytes
                count = -count
                self.long()
            for _ in range(count):
                key = self.string()
                out[key] = self.string()
        return out
