"""MessagePack with msgspec.

msgspec.msgpack is the fastest MessagePack implementation measured here (bench/harness.py: encode
and decode from the same dict, net of the loop's own cost, best of short interleaved rounds). At
~1 KB it is a little ahead of ormsgpack (460 / 1,254 ns against 546 / 1,242), at ~10 KB clearly
(1.7 / 10.7 µs against 2.9 / 12.1); msgpack is far behind. All three write the same bytes.
"""

import msgspec


class MsgpackCodec:
    name = "msgpack"
    library = "msgspec"
    prebuilt = False

    def __init__(self) -> None:
        self.encode = msgspec.msgpack.Encoder().encode
        self.decode = msgspec.msgpack.Decoder().decode

    def prepare(self, record: dict) -> dict:
        return record

    def to_record(self, obj: dict) -> dict:
        return obj


CODEC = MsgpackCodec
