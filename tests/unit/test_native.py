"""The native consumer step gives the same records as its Python fallback, and checks its input."""

import numpy as np
import orjson
import pytest

from brokerbench import native

MESSAGES = [(bytes([i]) * 20, orjson.dumps({"i": i, "pad": "x" * i}), i % 3) for i in range(50)]


@pytest.mark.parametrize("timed_decode", [native.module().timed_decode, native._python_timed_decode],
                         ids=["native", "python"])
def test_timed_decode_records_each_message(timed_decode):
    headers = [b"earlier"]
    decoded = []
    records = np.frombuffer(timed_decode(lambda b: decoded.append(orjson.loads(b)), MESSAGES, headers),
                            dtype=np.int64).reshape(-1, 4)
    assert headers == [b"earlier", *(m[0] for m in MESSAGES)]  # appended, in order
    assert [d["i"] for d in decoded] == list(range(50))  # decode ran once per message
    assert records[:, 2].tolist() == [m[2] for m in MESSAGES]
    assert records[:, 3].tolist() == [len(m[1]) for m in MESSAGES]
    assert (records[:, 1] >= records[:, 0]).all() and (np.diff(records[:, 0]) >= 0).all()


def test_timed_decode_names_a_bad_message_and_passes_decode_errors_on():
    with pytest.raises(TypeError, match=r"messages\[1\]: expected a \(header, payload, partition\) tuple"):
        native.module().timed_decode(len, [MESSAGES[0], (b"h", b"p")], [])
    with pytest.raises(orjson.JSONDecodeError):
        native.module().timed_decode(orjson.loads, [(b"h", b"{not json", 0)], [])


def test_python_choice_uses_the_python_step(monkeypatch):
    monkeypatch.setenv("BROKERBENCH_SEND_LOOP", "python")
    assert native.timed_decode_function() is native._python_timed_decode
    monkeypatch.setenv("BROKERBENCH_SEND_LOOP", "auto")
    assert native.timed_decode_function() is native.module().timed_decode


def test_schedule_probe_measures_each_tick_and_checks_its_input():
    late = np.frombuffer(native.module().schedule_probe(2000, 0.05), dtype=np.int64)
    assert late.size == 100 and (late >= 0).all()  # never early: each tick waits for its time
    with pytest.raises(ValueError, match="rate: must be positive"):
        native.module().schedule_probe(0, 1)
    with pytest.raises(ValueError, match="seconds"):
        native.module().schedule_probe(1000, -1)
