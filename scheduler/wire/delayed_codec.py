"""A stored delayed message's Avro (`DelayedMessage`) written and read by hand: the delayed messages' ingest
writes one per record and their delivery reads one per message, and fastavro took ~10 µs to write one and
as long to read it (a quarter of the ingest's CPU). Byte-identical to the Avro writer; the reader reads only
bytes of the current schema laid out as it writes them and says None for anything else (another release's
bytes, garbage), which the Avro reader then reads or refuses. Unit-tested against fastavro both ways."""

from __future__ import annotations

from scheduler.domain.delayed import DelayedMessage
from scheduler.wire.avro_reader import Defer, read_long
from scheduler.wire.avro_writer import zigzag as zigzag_long

_NULL = b"\x00"  # a union's null branch; an array's end
_SOME = b"\x02"  # a union's second branch (bytes)
#: the Avro long of a length below 2,048 (one byte below 64: ids, topics, header names and values; two
#: above: most payloads), written without a call
_SHORT = [zigzag_long(n) for n in range(2_048)]
#: header names as written (name → its Avro string): a producer's records repeat the same few names
_NAMES: dict[str, bytes] = {}
#: header names as read (their bytes → the name)
_NAME_OF: dict[bytes, str] = {}
#: instants as written (ms → its Avro long): a load's records repeat the same due and receive instants
_INSTANTS: dict[int, bytes] = {}
_CACHED = 4_096  # entries each cache holds at most (then it starts again)


def _bytes(b: bytes) -> bytes:
    n = len(b)
    return (_SHORT[n] if n < 2_048 else zigzag_long(n)) + b


def _name(name: str) -> bytes:
    out = _NAMES.get(name)
    if out is None:
        if len(_NAMES) >= _CACHED:
            _NAMES.clear()
        out = _NAMES[name] = _bytes(name.encode())
    return out


def _instant(ms: int) -> bytes:
    out = _INSTANTS.get(ms)
    if out is None:
        if len(_INSTANTS) >= _CACHED:
            _INSTANTS.clear()
        out = _INSTANTS[ms] = zigzag_long(ms)
    return out


def encode_delayed(m: DelayedMessage) -> bytes:
    """As the Avro writer writes it: id, deliverAt, topic, key, value, headers (one block), receivedAt.
    (_bytes and _optional written out in the line: a message's dozen calls were a sixth of its cost.)"""
    id_, key, value, headers = m.id, m.key, m.value, m.headers
    n = len(id_)
    out = [_SHORT[n] if n < 2_048 else zigzag_long(n), id_, _instant(m.deliver_at), _name(m.topic)]
    if key is None:
        out.append(_NULL)
    else:
        n = len(key)
        out += (_SOME, _SHORT[n] if n < 2_048 else zigzag_long(n), key)
    if value is None:
        out.append(_NULL)
    else:
        n = len(value)
        out += (_SOME, _SHORT[n] if n < 2_048 else zigzag_long(n), value)
    if headers:
        n = len(headers)
        out.append(_SHORT[n] if n < 2_048 else zigzag_long(n))
        for name, raw in headers:
            if raw is None:
                out += (_name(name), _NULL)
            else:
                n = len(raw)
                out += (_name(name), _SOME, _SHORT[n] if n < 2_048 else zigzag_long(n), raw)
    out += (_NULL, _instant(m.received_at))
    return b"".join(out)


def _field(raw: bytes, pos: int) -> tuple[bytes, int]:
    """Bytes (or a string's) at `pos`, and the position after them; a length under 64 is one byte."""
    size = raw[pos]
    if size < 0x80 and not size & 1:
        size >>= 1
        pos += 1
    else:
        size, pos = read_long(raw, pos)
        if size < 0:
            raise Defer
    end = pos + size
    if end > len(raw):
        raise Defer
    return raw[pos:end], end


def decode_delayed(raw: bytes) -> DelayedMessage | None:
    """The message, or None when the bytes are not what encode_delayed writes. Written out in one function:
    a length below 64 (ids, topics, header names and values) is one even byte, read in the line; anything
    else goes through _field / read_long (a helper's call a field was two thirds of a delivery's decode:
    8.3 → 4.3 µs a message). A length past the end leaves `pos` past it: the next byte read raises
    IndexError, or the last check fails."""
    try:
        n = raw[0]
        if n < 0x80 and not n & 1:
            pos = 1 + (n >> 1)
            id_ = raw[1:pos]
        else:
            id_, pos = _field(raw, 0)
        deliver_at, pos = read_long(raw, pos)  # (any long: AvroReader.long defers on ten bytes)
        n = raw[pos]
        if n < 0x80 and not n & 1:
            start = pos + 1
            pos = start + (n >> 1)
            topic = raw[start:pos]
        else:
            topic, pos = _field(raw, pos)
        branch = raw[pos]
        if branch == 0:
            key = None
            pos += 1
        elif branch != 2:
            return None
        elif (n := raw[pos + 1]) < 0x80 and not n & 1:
            start = pos + 2
            pos = start + (n >> 1)
            key = raw[start:pos]
        else:
            key, pos = _field(raw, pos + 1)
        branch = raw[pos]
        if branch == 0:
            value = None
            pos += 1
        elif branch != 2:
            return None
        else:
            value, pos = _field(raw, pos + 1)
        headers: list[tuple[str, bytes | None]] = []
        names = _NAME_OF
        while True:
            count = raw[pos]
            if count < 0x80 and not count & 1:
                count >>= 1
                pos += 1
            else:
                count, pos = read_long(raw, pos)
                if count < 0:  # (a block with its size: not what the writer here writes)
                    return None
            if not count:
                break
            for _ in range(count):
                n = raw[pos]
                if n < 0x80 and not n & 1:
                    start = pos + 1
                    pos = start + (n >> 1)
                    raw_name = raw[start:pos]
                else:
                    raw_name, pos = _field(raw, pos)
                name = names.get(raw_name)
                if name is None:
                    if len(names) >= _CACHED:
                        names.clear()
                    name = names[raw_name] = raw_name.decode()
                branch = raw[pos]
                if branch == 0:
                    headers.append((name, None))
                    pos += 1
                    continue
                if branch != 2:
                    return None
                n = raw[pos + 1]
                if n < 0x80 and not n & 1:
                    start = pos + 2
                    pos = start + (n >> 1)
                    headers.append((name, raw[start:pos]))
                else:
                    header, pos = _field(raw, pos + 1)
                    headers.append((name, header))
        received_at, pos = read_long(raw, pos)
        if pos != len(raw):
            return None
        return DelayedMessage(id_, deliver_at, topic.decode(), key, value, tuple(headers), received_at)
    except (Defer, IndexError, UnicodeDecodeError):
        return None
