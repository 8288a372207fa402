import json
import subprocess
import sys
from pathlib import Path

import pytest

from brokerbench.codecs import FORMATS, get_codec
from brokerbench.paths import SCHEMAS_DIR

VECTORS = json.loads((SCHEMAS_DIR / "records" / "vectors.json").read_text())["vectors"]
RECORD_FORMATS = [f for f in FORMATS if f != "raw"]


@pytest.mark.parametrize("fmt", RECORD_FORMATS)
@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_round_trip_of_shared_vectors(fmt, vector):
    codec = get_codec(fmt)
    encoded = codec.encode(codec.prepare(vector["record"]))
    assert isinstance(encoded, bytes) and encoded
    assert codec.to_record(codec.decode(encoded)) == vector["record"]


def test_raw_is_the_bytes_themselves():
    codec = get_codec("raw")
    payload = bytes(range(256)) * 4
    assert codec.decode(codec.encode(codec.prepare(payload))) == payload


def test_formats_encode_the_same_record_differently():
    record = VECTORS[1]["record"]
    encodings = {f: get_codec(f).encode(get_codec(f).prepare(record)) for f in RECORD_FORMATS}
    assert len(set(encodings.values())) == len(RECORD_FORMATS)
    assert encodings["json"].startswith(b"{")


def test_unknown_format_is_named():
    with pytest.raises(ValueError, match="yaml"):
        get_codec("yaml")


def test_generated_protobuf_code_matches_the_proto(tmp_path):
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{SCHEMAS_DIR / 'records'}",
                    f"--python_out={tmp_path}", str(SCHEMAS_DIR / "records" / "telemetry.proto")], check=True)
    from brokerbench.codecs import telemetry_pb2

    assert (tmp_path / "telemetry_pb2.py").read_text() == Path(telemetry_pb2.__file__).read_text()
