"""The benchmark record and payload pools sized to an exact encoded size.

One telemetry-like record (ids, timestamps, numbers, strings, a list of floats), generated
deterministically from a seed. Sizing fills a share of the budget with samples and tops up
the `note` string until the chosen encoding hits the target length.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

SIZE_TOLERANCE = 0.01
# Share of the byte budget (above the empty record) given to the float samples.
SAMPLES_SHARE = 0.5
KINDS = ("temperature", "pressure", "humidity", "vibration", "current")
SITES = ("eu-west-1a", "eu-west-1b", "us-east-1c", "ap-south-1a")


class SizeError(ValueError):
    """The requested size cannot be reached with this record and encoding."""


def make_record(seed: int, n_samples: int, note_len: int) -> dict:
    rng = random.Random(seed)
    return {
        "device_id": f"dev-{rng.randrange(1_000_000):06d}",
        "ts_ms": 1_700_000_000_000 + rng.randrange(10**9),
        "seq": seed,
        "site": rng.choice(SITES),
        "kind": rng.choice(KINDS),
        "value": round(rng.uniform(-50.0, 150.0), 3),
        "count": rng.randrange(1, 10_000),
        "ok": rng.random() < 0.9,
        "note": "".join(rng.choices("abcdefghijklmnopqrstuvwxyz0123456789 ", k=note_len)),
        "samples": [round(rng.uniform(-1000.0, 1000.0), 4) for _ in range(n_samples)],
    }


def smallest_size(length_of: Callable[[dict], int]) -> int:
    """Encoded length of the record with no samples and an empty note."""
    return length_of(make_record(0, 0, 0))


def sized_record(seed: int, target: int, length_of: Callable[[dict], int]) -> dict:
    """The record for `seed` whose `length_of` is `target` bytes (exactly where possible, else ±1%)."""
    empty = length_of(make_record(seed, 0, 0))
    if empty > target * (1 + SIZE_TOLERANCE):
        raise SizeError(f"{target} B is below the smallest record ({empty} B)")
    per_sample = (length_of(make_record(seed, 16, 0)) - empty) / 16
    n_samples = max(0, int((target - empty) * SAMPLES_SHARE / per_sample))
    note = 0
    best: tuple[int, dict] | None = None
    for _ in range(12):
        record = make_record(seed, n_samples, note)
        size = length_of(record)
        error = size - target
        if best is None or abs(error) < best[0]:
            best = (abs(error), record)
        if error == 0:
            break
        note -= error
        if note < 0:  # samples overshoot: give their bytes back to the note
            n_samples = max(0, n_samples - int(-note / per_sample) - 1)
            note = 0
    assert best is not None
    if best[0] > target * SIZE_TOLERANCE:
        raise SizeError(f"could not size a record to {target} B (closest was off by {best[0]} B)")
    return best[1]


@dataclass(frozen=True)
class PayloadPool:
    """Pre-built, ready-to-encode objects for one cell, and their encoded sizes."""

    objects: list
    encoded_sizes: list[int]

    @property
    def mean_encoded_bytes(self) -> float:
        return sum(self.encoded_sizes) / len(self.encoded_sizes)
