"""raw: pre-built bytes, the no-serialization baseline."""


class RawCodec:
    name = "raw"
    library = "none"
    prebuilt = True

    def prepare(self, record: bytes) -> bytes:
        return bytes(record)

    def encode(self, obj: bytes) -> bytes:
        return obj

    def decode(self, data: bytes) -> bytes:
        return data

    def to_record(self, obj: bytes) -> bytes:
        return bytes(obj)


CODEC = RawCodec
