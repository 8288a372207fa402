"""Payload pools: pre-built objects for a cell, sized by the cell's size basis."""

from __future__ import annotations

import random

from ..codecs import get_codec
from ..records import PayloadPool, sized_record

POOL_SIZE = 16


def payload_pool(fmt: str, size_basis: str, size_bytes: int, count: int = POOL_SIZE) -> PayloadPool:
    """`count` distinct ready-to-encode objects; record basis sizes by JSON, wire basis by `fmt` itself."""
    codec = get_codec(fmt)
    if fmt == "raw":
        objects = [random.Random(seed).randbytes(size_bytes) for seed in range(count)]
        return PayloadPool(objects, [len(o) for o in objects])
    basis_codec = get_codec("json") if size_basis == "record" else codec

    def length_of(record: dict) -> int:
        return len(basis_codec.encode(basis_codec.prepare(record)))

    objects = [codec.prepare(sized_record(seed, size_bytes, length_of)) for seed in range(count)]
    return PayloadPool(objects, [len(codec.encode(o)) for o in objects])
