"""The timed call's own cost: what an encode or decode figure holds before any codec work.

The worker times each encode (producer) and decode (consumer) as two clock reads around one call.
Those reads and the call itself cost tens of ns (more in the Python send loop) whatever the codec
does, so small records would credit a codec with time it never spent. The floor is the same timed
call around a no-op codec, measured on the same path as the cell's (the native step where it runs,
else the Python statements), median of many calls like the cell's p50:

- decode: the consumer's own step (`native.timed_decode_function()`) with the no-op as decode;
- encode, native loop: that same C step (two `clock_gettime` reads around `PyObject_CallOneArg`, which is
  what the native send loop does around its encode call); Python loop: the loop's statements
  (clock, encode of the pool's next object, clock).

The no-op is the builtin `callable`: one C call that returns at once for any object, so the floor is
the smallest cost any codec's call can have and net figures (measured − floor) are never flattered.
A worker stores the floor with the cell's codec figures (CellCompleted.codec_floor_ns); reports show
encode and decode both as measured and net of it.
"""

from __future__ import annotations

import time

import numpy as np

from .. import native

NOOP = callable
CALLS = 20_000
ROUNDS = 3


def _median(t0: np.ndarray, t1: np.ndarray) -> float:
    return float(np.median(t1 - t0))


def _step_ns(timed, calls: int) -> float:
    """`timed` is the consumer's step: timed_decode(decode, messages, headers), native or Python."""
    messages = [(b"", b"x", 0)] * calls
    records = np.frombuffer(timed(NOOP, messages, []), dtype=np.int64).reshape(-1, 4)
    return _median(records[:, 0], records[:, 1])


def _python_encode_ns(calls: int) -> float:
    """The Python send loop's timed statements around encode (worker/producer.py), with the no-op."""
    clock, encode = time.monotonic_ns, NOOP
    objects, pool_size = [{}] * 16, 16
    started, handed = np.empty(calls, np.int64), np.empty(calls, np.int64)
    for seq in range(calls):
        t0 = clock()
        encode(objects[seq % pool_size])
        t1 = clock()
        started[seq], handed[seq] = t0, t1
    return _median(started, handed)


def call_floor_ns(send_loop: str, calls: int = CALLS, rounds: int = ROUNDS) -> dict:
    """The floor of the encode figures under `send_loop` ("native", "python" or "mixed": the lower, native)
    and of the decode figures on this process's decode path; the lowest median of `rounds` runs."""
    timed_decode = native.timed_decode_function()
    decode_loop = "python" if timed_decode is native._python_timed_decode else "native"
    encode_loop = "python" if send_loop == "python" or native._sendloop is None else "native"
    if encode_loop == "native":
        encode = min(_step_ns(native._sendloop.timed_decode, calls) for _ in range(rounds))
    else:
        encode = min(_python_encode_ns(calls) for _ in range(rounds))
    decode = min(_step_ns(timed_decode, calls) for _ in range(rounds))
    return {"encode_ns": max(0.0, encode), "decode_ns": max(0.0, decode), "encode_loop": encode_loop,
            "decode_loop": decode_loop, "noop": "builtins.callable", "calls": calls}
