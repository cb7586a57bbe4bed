"""Avro's primitive encodings, for the encoders written by hand (codec's state and FiredTask bytes,
command_writer): a long (zigzag varint), a string, a map of strings."""

from __future__ import annotations

NULL = b"\x00"  # a union's null branch (its first), an empty map or array, false, a zero
#: the Avro long of 0..63 (one byte): a short length, a small enum index
ONE_BYTE = [bytes((i,)) for i in range(0x80)]
#: the range of an Avro int (checked before a value is written as one or read as one is trusted)
INT_MIN, INT_MAX = -(2**31), 2**31 - 1


def zigzag(n: int) -> bytes:
    """Avro's encoding of a long. The two common lengths written at once, without the loop: a length or a
    count (two bytes), an epoch in ms (six bytes, until 2039; ~30 % faster than the loop)."""
    n = (n << 1) ^ (n >> 63)
    if n < 0x80:
        return ONE_BYTE[n]
    if n < 0x4000:
        return bytes((n & 0x7F | 0x80, n >> 7))
    if 1 << 35 <= n < 1 << 42:
        return bytes((n & 0x7F | 0x80, n >> 7 & 0x7F | 0x80, n >> 14 & 0x7F | 0x80, n >> 21 & 0x7F | 0x80,
                      n >> 28 & 0x7F | 0x80, n >> 35))  # fmt: skip
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def avro_string(s: str) -> bytes:
    b = s.encode()
    return zigzag(len(b)) + b


def avro_map(m: dict[str, str]) -> bytes:
    """A map of strings as the Avro writer writes it: one block, then the end."""
    if not m:
        return NULL
    out = [zigzag(len(m))]
    for k, v in m.items():
        out += (avro_string(k), avro_string(v))
    out.append(NULL)
    return b"".join(out)
