"""Protocol Buffers with the upb backend; code generated from schemas/records/telemetry.proto.

Like the other codecs, `encode` starts from the record as a dict: building the message from it is
part of what a producer of dicts pays (keyword construction, the fastest way measured here), and
`decode` reads every field back into a dict.
"""

from .telemetry_pb2 import TelemetryRecord

_SCALARS = ("device_id", "ts_ms", "seq", "site", "kind", "value", "count", "ok", "note")


class ProtobufCodec:
    name = "protobuf"
    library = "protobuf"
    prebuilt = False

    def prepare(self, record: dict) -> dict:
        return record

    def encode(self, obj: dict) -> bytes:
        return TelemetryRecord(**obj).SerializeToString()

    def decode(self, data: bytes) -> dict:
        message = TelemetryRecord.FromString(data)
        # Read every field, as the other codecs' decoders do.
        fields = {name: getattr(message, name) for name in _SCALARS}
        fields["samples"] = list(message.samples)
        return fields

    def to_record(self, obj: dict) -> dict:
        return obj


CODEC = ProtobufCodec
