"""Avro (schemaless binary, the schema travels out of band) with fastavro."""

import json
from io import BytesIO

import fastavro

from ..paths import RECORD_AVRO_SCHEMA


class AvroCodec:
    name = "avro"
    library = "fastavro"
    prebuilt = False

    def __init__(self) -> None:
        self._schema = fastavro.parse_schema(json.loads(RECORD_AVRO_SCHEMA.read_text()))

    def prepare(self, record: dict) -> dict:
        return record

    def encode(self, obj: dict) -> bytes:
        buffer = BytesIO()
        fastavro.schemaless_writer(buffer, self._schema, obj)
        return buffer.getvalue()

    def decode(self, data: bytes) -> dict:
        return fastavro.schemaless_reader(BytesIO(data), self._schema, None)

    def to_record(self, obj: dict) -> dict:
        return obj


CODEC = AvroCodec
