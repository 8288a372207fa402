"""Payload pools: pre-built objects for a cell, sized by the cell's size basis."""

from __future__ import annotations

import math
from math import gcd

from ..codecs import get_codec, prebuilt
from ..records import SIZE_TOLERANCE, PayloadPool, SizeError, make_record, sized_record
from ..spec import lanes

POOL_SIZE = 16
# Compressed cells: enough distinct payloads that none repeats inside one producer batch, so the
# compressor only finds what is inside the records themselves. A batch holds at most
# message.max.bytes (16 MiB, the producer's setting) whatever batch.size says.
MAX_BATCH_BYTES = 16 * 1024 * 1024
MAX_POOL_SIZE = 8192  # covers every record size (158 B and up) at the default batch.size of 1 MiB
# A seed whose record cannot be sized within ±1% is skipped; this many tries per wanted payload at most.
SEEDS_PER_PAYLOAD = 4


def _length_function(fmt: str, size_basis: str):
    codec = get_codec(fmt)
    basis_codec = get_codec("json") if size_basis == "record" else codec

    def length_of(record: dict) -> int:
        return len(basis_codec.encode(basis_codec.prepare(record)))

    return codec, length_of


def pool_size_for(cell: dict) -> int:
    """How many distinct payloads the cell's producers need.

    Without compression the broker sees every byte as sent, and POOL_SIZE payloads are plenty. With
    compression (Kafka compression.type), a pool that repeats inside a batch lets the compressor
    replace whole messages by back-references and flatters the format: then the pool holds one payload
    more than the largest batch can carry (batch.size / the format's encoded size + 1), at most about
    MAX_POOL_SIZE. Message i goes to lane i % lanes (a partition, of one of client.topics topics) and
    carries payload i % pool size, so the size is made coprime with the lane count: each partition's
    batches then cycle through the whole pool. The same rule applies to every broker of the run, so they
    all send the same payloads.
    """
    client = cell.get("client") or {}
    if client.get("compression", "none") == "none":
        return POOL_SIZE
    batch_bytes = min(int(client.get("batch_bytes", MAX_BATCH_BYTES)), MAX_BATCH_BYTES)
    codec, length_of = _length_function(cell["format"], cell["size_basis"])
    if prebuilt(cell["format"]):
        encoded = cell["size_bytes"]
    else:
        encoded = len(codec.encode(codec.prepare(_sized(0, cell["size_bytes"], length_of, 1)[0])))
    smallest = max(1.0, encoded * (1 - SIZE_TOLERANCE))  # the pool's records vary by up to ±1%
    size = max(POOL_SIZE, min(MAX_POOL_SIZE, math.ceil(batch_bytes / smallest) + 1))
    while gcd(size, max(1, lanes(cell))) != 1:
        size += 1
    return size


def _sized(first_seed: int, size_bytes: int, length_of, count: int) -> list[dict]:
    """`count` records sized to `size_bytes`, from consecutive seeds, skipping seeds that cannot be sized."""
    records: list[dict] = []
    seed, last_error = first_seed, None
    while len(records) < count:
        if seed - first_seed >= count * SEEDS_PER_PAYLOAD + 8:
            raise SizeError(f"only {len(records)} of {count} records could be sized to {size_bytes} B: {last_error}")
        try:
            records.append(sized_record(seed, size_bytes, length_of))
        except SizeError as exc:
            last_error = exc
        seed += 1
    return records


def raw_payloads(size_bytes: int, count: int) -> list[bytes]:
    """`count` distinct payloads of exactly `size_bytes`: the JSON text of the benchmark records (the same
    seeds as every format's pool), sized to `size_bytes` by JSON and then cut or padded with JSON whitespace
    to the exact length. Random bytes do not compress at all while every format's records do (a 1 KB
    JSON record about 2:1 with gzip), so under compression a random baseline would show the broker
    carrying more bytes than any format; text made the same way as the JSON record compresses like it.
    Without compression nothing reads the bytes, and the baseline's cost is the same whatever they hold.
    Where records cannot be sized that small, each payload is the start of a record's JSON with a long note."""
    encode = get_codec("json").encode
    try:
        texts = [encode(r) for r in _sized(0, size_bytes, lambda r: len(encode(r)), count)]
    except SizeError:
        texts = [encode(make_record(seed, 0, size_bytes)) for seed in range(count)]
    return [text[:size_bytes].ljust(size_bytes) for text in texts]


def payload_pool(fmt: str, size_basis: str, size_bytes: int, count: int = POOL_SIZE) -> PayloadPool:
    """`count` distinct ready-to-encode objects; record basis sizes by JSON, wire basis by `fmt` itself.

    The pre-built baseline (raw) gets `raw_payloads`: text, not random bytes, so that under compression it
    compresses like the formats it is the baseline of."""
    if prebuilt(fmt):
        objects = raw_payloads(size_bytes, count)
        return PayloadPool(objects, [len(o) for o in objects])
    codec, length_of = _length_function(fmt, size_basis)
    objects = [codec.prepare(record) for record in _sized(0, size_bytes, length_of, count)]
    return PayloadPool(objects, [len(codec.encode(o)) for o in objects])
