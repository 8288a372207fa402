"""Serialization formats behind one small interface, and the registry that finds them.

Every record format encodes from the same input, the record as a dict (`prepare`, outside the timed
path, hands it over as it is; the pre-built baseline's is the payload's bytes), so building a
format's own object (a protobuf message) is part of its encode. `encode` and `decode` are what the
worker times per message; `decode` materializes every field, so lazy formats are not credited with
work they skipped. The timed call's own cost, the same around a no-op, is measured apart
(`floor.call_floor_ns`) and stored beside the figures, so they can be read net of it.
A format is one module here exposing `CODEC` (its class); the run request's format list is
generated from the registry (brokerbench.schema).
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import Any, Protocol


class Codec(Protocol):
    name: str
    library: str  # the distribution whose version each run records ("none": no library)
    prebuilt: bool  # True: the payload is bytes of the exact size, not a record (nothing to size or encode)

    def prepare(self, record: Any) -> Any: ...

    def encode(self, obj: Any) -> bytes: ...

    def decode(self, data: bytes) -> Any: ...

    def to_record(self, obj: Any) -> Any: ...


@cache
def codecs() -> dict[str, type]:
    """Every registered codec class by format name, in name order: each module here with a CODEC."""
    found = {}
    for info in pkgutil.iter_modules(__path__):
        codec = getattr(importlib.import_module(f"{__name__}.{info.name}"), "CODEC", None)
        if codec is not None:
            found[codec.name] = codec
    return dict(sorted(found.items()))


FORMATS = tuple(codecs())


def get_codec(name: str) -> Codec:
    try:
        return codecs()[name]()
    except KeyError:
        raise ValueError(f"unknown format {name!r}; expected one of {', '.join(FORMATS)}") from None


def prebuilt(name: str) -> bool:
    """Whether the format sends pre-built bytes (the no-serialization baseline) instead of an encoded record."""
    return codecs()[name].prebuilt
