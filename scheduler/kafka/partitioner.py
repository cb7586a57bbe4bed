"""Kafka's default partitioner, as the producers and Faust's router apply it to a keyed record: the
punctuator uses it to send a whole instant's fires per partition, the worker to find a key's partition."""

from __future__ import annotations

import struct


def kafka_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner (murmur2) gives a keyed record (as producers and Faust's
    router use it)."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


_M = 0x5BD1E995
_WORDS = struct.Struct("<I")


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), as aiokafka's pure-Python one
    computes it (unit-tested against it) in a third of the time: whole words, no redundant masks."""
    length = len(data)
    h = 0x9747B28C ^ length
    words = length & ~3
    for (k,) in _WORDS.iter_unpack(data[:words]):
        k = (k * _M) & 0xFFFFFFFF
        k = ((k ^ (k >> 24)) * _M) & 0xFFFFFFFF
        h = ((h * _M) & 0xFFFFFFFF) ^ k
    extra = length & 3
    if extra:
        if extra == 3:
            h ^= data[words + 2] << 16
        if extra >= 2:
            h ^= data[words + 1] << 8
        h = ((h ^ data[words]) * _M) & 0xFFFFFFFF
    h = ((h ^ (h >> 13)) * _M) & 0xFFFFFFFF
    return h ^ (h >> 15)
