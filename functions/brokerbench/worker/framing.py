"""The per-message header every driver carries: producer id, sequence, intended send time (ns)."""

import struct

import numpy as np

HEADER = struct.Struct("<IQQ")
HEADER_DTYPE = np.dtype([("producer", "<u4"), ("seq", "<u8"), ("intended_ns", "<u8")])


def unpack_many(headers: list[bytes]) -> np.ndarray:
    """Headers to a structured array in one step (producer, seq, intended_ns)."""
    return np.frombuffer(b"".join(headers), dtype=HEADER_DTYPE)
