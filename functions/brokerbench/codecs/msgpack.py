"""MessagePack with msgspec.

msgspec.msgpack is the fastest MessagePack implementation measured here (bench/harness.py, ~1 KB
record, encode/decode net of the loop's own cost, best of short interleaved rounds under load):
msgspec 434–458 / 1,250–1,298 ns, ormsgpack 561–579 / 1,291–1,356 ns, msgpack 1,686+ / 2,116+ ns;
at ~10 KB msgspec's lead grows (1.8 / 10.4 µs against ormsgpack's 2.9 / 12.1 µs). All three write
the same bytes. An earlier single run that had ormsgpack ahead (604 / 1,428 against 987 / 2,612 ns)
timed long rounds one implementation after the other, which a busy spell of the shared machine
skews.
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
