"""Serialization formats behind one small interface, and the registry that finds them.

A codec turns a benchmark record into its native in-memory object once (`prepare`, outside
the timed path), then `encode` and `decode` are what the worker times per message. `decode`
materializes every field, so lazy formats are not credited with work they skipped.
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
