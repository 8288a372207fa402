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


def test_kafka_ack_stamps_read_back_only_their_own_messages():
    """The Python loop's Kafka acknowledgement ring: the extension is librdkafka's plugin (its own file first in the
    producer's settings), and a report whose key has no stamp in its slot is stamped as served, counted apart."""
    from brokerbench.worker.framing import HEADER

    stamps = native.kafka_ack_stamps()
    config = stamps.config
    assert list(config) == ["plugin.library.paths", "brokerbench.ack_stamps"]
    assert config["plugin.library.paths"] == native.module().__file__
    assert stamps.at(HEADER.pack(1, 7, 0)) is None and stamps.at(b"short") is None
    assert (stamps.handled, stamps.missed) == (0, 2)
    with pytest.raises(TypeError):
        stamps.at("not bytes")
    assert native.kafka_ack_stamps().config["brokerbench.ack_stamps"] != config["brokerbench.ack_stamps"]


def test_kafka_plugin_holds_its_ring_and_refuses_an_unknown_one():
    """A producer made with the ring's settings (no broker needed to make one) holds the ring until it is gone; a
    value naming no ring of this process is refused, naming the setting."""
    from confluent_kafka import KafkaException, Producer

    stamps = native.kafka_ack_stamps()
    config = {**stamps.config, "bootstrap.servers": "127.0.0.1:9", "log_level": 0}
    before = native.module().plugin_inits()
    producer = Producer(config)
    assert native.module().plugin_inits() == before + 1  # librdkafka dlopen()ed this very module
    assert stamps.refs == 2
    del producer
    assert stamps.refs == 1
    for bad in ("", "x1", "0", str(int(config["brokerbench.ack_stamps"]) + 1000)):
        with pytest.raises(KafkaException, match="brokerbench.ack_stamps"):
            Producer({**config, "brokerbench.ack_stamps": bad})


def test_kafka_plugin_holds_its_fetch_log_and_refuses_another_kind():
    """A consumer made with a FetchStamps' settings (no broker needed) holds its log until it is gone, and nothing was
    read yet; a value naming an AckStamps, or nothing, under the fetch property is refused, naming the setting. A
    producer and a consumer each name their own, and take() empties what was read since the last."""
    from confluent_kafka import Consumer, KafkaException

    fetch, ring = native.kafka_fetch_stamps(), native.kafka_ack_stamps()
    config = {**fetch.config, "bootstrap.servers": "127.0.0.1:9", "group.id": "g", "log_level": 0}
    assert list(fetch.config) == ["plugin.library.paths", "brokerbench.fetch_stamps"]
    before = native.module().plugin_inits()
    consumer = Consumer(config)
    assert native.module().plugin_inits() == before + 1 and fetch.refs == 2
    assert fetch.take() == (0, 0, 0) and fetch.responses == 0
    consumer.close()
    del consumer
    assert fetch.refs == 1
    # ids come from one count for both kinds: the AckStamps' is another object's, of the other kind
    for bad in ("", "x1", ring.config["brokerbench.ack_stamps"], str(int(config["brokerbench.fetch_stamps"]) + 1000)):
        with pytest.raises(KafkaException, match="brokerbench.fetch_stamps"):
            Consumer({**config, "brokerbench.fetch_stamps": bad})
    assert ring.refs == 1  # refused: not taken by a configuration


def test_kafka_ack_stamps_unsupported_where_librdkafka_cannot_be_resolved(monkeypatch):
    class Unbuilt:
        def load_rdkafka(self, path):
            raise ImportError(f"cannot load librdkafka from {path}")

    monkeypatch.setattr(native, "module", Unbuilt)
    monkeypatch.setattr(native, "rdkafka_path", lambda: "/nowhere/librdkafka.so")
    with pytest.raises(native.Unsupported, match="cannot load librdkafka from /nowhere"):
        native.kafka_ack_stamps()
