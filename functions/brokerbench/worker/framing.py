"""The per-message header every driver carries: producer id, sequence, intended send time (ns)."""

import struct

import numpy as np

HEADER = struct.Struct("<IQQ")
HEADER_DTYPE = np.dtype([("producer", "<u4"), ("seq", "<u8"), ("intended_ns", "<u8")])


def unpack_many(headers: list[bytes]) -> np.ndarray:
    """Headers to a structured array in one step (producer, seq, intended_ns)."""
    return np.frombuffer(b"".join(headers), dtype=HEADER_DTYPE)

# The readiness probe's producer id: one message per partition before a cell starts, never measured.
PROBE_PRODUCER = 0xFFFFFFFF


def probe_header(partition: int) -> bytes:
    return HEADER.pack(PROBE_PRODUCER, partition, 0)


def is_probe(header: bytes) -> bool:
    return HEADER.unpack(header)[0] == PROBE_PRODUCER
