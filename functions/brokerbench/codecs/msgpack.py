"""MessagePack with msgspec."""

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
