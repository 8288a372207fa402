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


def test_protobuf_encodes_from_the_record_dict_like_the_others():
    codec = get_codec("protobuf")
    record = VECTORS[1]["record"]
    assert codec.prepare(record) is record  # nothing built outside the timed encode
    encoded = codec.encode(dict(record))
    from brokerbench.codecs.telemetry_pb2 import TelemetryRecord

    assert encoded == TelemetryRecord(**record).SerializeToString()
    assert codec.decode(encoded) == record  # every field read back


@pytest.mark.parametrize("fmt", RECORD_FORMATS)
def test_record_formats_take_the_same_dict_input(fmt):
    record = VECTORS[1]["record"]
    codec = get_codec(fmt)
    assert isinstance(codec.prepare(record), dict)
    assert codec.to_record(codec.decode(codec.encode(record))) == record


@pytest.mark.parametrize("loop", ["native", "python", "mixed"])
def test_call_floor_is_measured_and_never_negative(loop):
    from brokerbench.codecs.floor import call_floor_ns

    floor = call_floor_ns(loop, calls=2_000, rounds=2)
    assert floor["encode_ns"] >= 0 and floor["decode_ns"] >= 0
    assert floor["encode_loop"] == ("python" if loop == "python" or not _native_built() else "native")
    assert floor["decode_loop"] in ("native", "python")


def _native_built() -> bool:
    from brokerbench import native

    return native._sendloop is not None
