"""Serialization formats behind one small interface.

A codec turns a benchmark record into its native in-memory object once (`prepare`, outside
the timed path), then `encode` and `decode` are what the worker times per message. `decode`
materializes every field, so lazy formats are not credited with work they skipped.
"""

from __future__ import annotations

from typing import Any, Protocol

FORMATS = ("raw", "json", "msgpack", "avro", "protobuf")


class Codec(Protocol):
    name: str
    library: str

    def prepare(self, record: Any) -> Any: ...

    def encode(self, obj: Any) -> bytes: ...

    def decode(self, data: bytes) -> Any: ...

    def to_record(self, obj: Any) -> Any: ...


def get_codec(name: str) -> Codec:
    if name == "raw":
        from .raw import RawCodec
        return RawCodec()
    if name == "json":
        from .json import JsonCodec
        return JsonCodec()
    if name == "msgpack":
        from .msgpack import MsgpackCodec
        return MsgpackCodec()
    if name == "avro":
        from .avro import AvroCodec
        return AvroCodec()
    if name == "protobuf":
        from .protobuf import ProtobufCodec
        return ProtobufCodec()
    raise ValueError(f"unknown format {name!r}; expected one of {', '.join(FORMATS)}")

