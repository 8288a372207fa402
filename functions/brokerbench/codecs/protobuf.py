"""Protocol Buffers with the upb backend; code generated from schemas/records/telemetry.proto."""

from google.protobuf.message import Message

from .telemetry_pb2 import TelemetryRecord

_SCALARS = ("device_id", "ts_ms", "seq", "site", "kind", "value", "count", "ok", "note")


class ProtobufCodec:
    name = "protobuf"
    library = "protobuf"
    prebuilt = False

    def prepare(self, record: dict) -> Message:
        return TelemetryRecord(**record)

    def encode(self, obj: Message) -> bytes:
        return obj.SerializeToString()

    def decode(self, data: bytes) -> dict:
        message = TelemetryRecord.FromString(data)
        # Read every field, as the other codecs' decoders do.
        fields = {name: getattr(message, name) for name in _SCALARS}
        fields["samples"] = list(message.samples)
        return fields

    def to_record(self, obj) -> dict:
        return obj if isinstance(obj, dict) else self.decode(obj.SerializeToString())


CODEC = ProtobufCodec
