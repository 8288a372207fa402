import pytest

from brokerbench.codecs import FORMATS, get_codec
from brokerbench.records import SizeError, make_record, sized_record
from brokerbench.worker.payloads import payload_pool

SIZES = [200, 512, 1024, 1176, 4096, 65536]


def test_records_are_deterministic():
    assert make_record(7, 10, 20) == make_record(7, 10, 20)
    assert make_record(7, 10, 20) != make_record(8, 10, 20)


@pytest.mark.parametrize("size", SIZES)
def test_record_basis_gives_every_format_the_same_records_sized_by_json(size):
    json_codec = get_codec("json")
    pools = {f: payload_pool(f, "record", size, count=4) for f in FORMATS if f != "raw"}
    for encoded in (json_codec.encode(o) for o in pools["json"].objects):
        assert abs(len(encoded) - size) <= size * 0.01
    for fmt, pool in pools.items():  # same data, each format's own size
        assert [get_codec(fmt).to_record(get_codec(fmt).decode(get_codec(fmt).encode(o))) for o in pool.objects] == \
               [json_codec.decode(json_codec.encode(o)) for o in pools["json"].objects]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("size", SIZES)
def test_wire_basis_sizes_each_format_by_its_own_encoding(fmt, size):
    pool = payload_pool(fmt, "wire", size, count=4)
    assert len(pool.objects) == 4
    for encoded_size in pool.encoded_sizes:
        assert abs(encoded_size - size) <= size * 0.01, (fmt, size, encoded_size)


def test_pool_objects_differ():
    pool = payload_pool("json", "record", 1024, count=4)
    assert len({get_codec("json").encode(o) for o in pool.objects}) == 4


def test_too_small_a_size_is_refused_with_the_smallest_size():
    codec = get_codec("json")
    with pytest.raises(SizeError, match="below the smallest record"):
        sized_record(0, 64, lambda r: len(codec.encode(r)))


@pytest.mark.parametrize("size", [16, 100, 200, 1024, 65536])
def test_raw_payloads_are_distinct_text_of_the_exact_size(size):
    pool = payload_pool("raw", "wire", size, count=4)
    assert pool.encoded_sizes == [size] * 4
    assert all(isinstance(p, bytes) and len(p) == size for p in pool.objects)
    if size >= 100:
        assert len(set(pool.objects)) == 4
    assert all(p.decode("ascii").isprintable() for p in pool.objects)


def test_raw_payloads_compress_like_the_json_records_not_like_random_bytes():
    import os
    import zlib

    count, size = 64, 1024
    raw = b"".join(payload_pool("raw", "wire", size, count=count).objects)
    json_codec = get_codec("json")
    records = b"".join(json_codec.encode(o) for o in payload_pool("json", "record", size, count=count).objects)
    ratio = lambda data: len(data) / len(zlib.compress(data, 6))  # noqa: E731
    assert ratio(os.urandom(len(raw))) < 1.01  # random bytes do not compress
    assert ratio(raw) > 1.3
    assert ratio(raw) == pytest.approx(ratio(records), rel=0.1)
