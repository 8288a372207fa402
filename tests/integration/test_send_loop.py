"""The native send loop against real Kafka and Redis: what reaches the broker, what comes back, bad input.

The cells in test_engine.py run on the native loop (the default where it is built); the last tests here
run the same small cell on both loops and check that each is recorded and counts alike.
"""

import random
import threading
import time

import numpy as np
import pytest
import redis
from confluent_kafka import Consumer, TopicPartition

from brokerbench import native
from brokerbench.codecs import get_codec
from brokerbench.drivers import BrokerUnavailable
from brokerbench.events import new_run_id
from brokerbench.local.stack import free_port
from brokerbench.records import sized_record
from brokerbench.registry import get_driver
from brokerbench.reports.results import build_results, stamps_note
from brokerbench.worker.cell import topic_name
from brokerbench.worker.framing import HEADER, unpack_many
from inline_run import execute_run
from steady import assert_rate_of_the_offered_magnitude, assert_sent_on_schedule


CLIENT = {"acks": "1", "linger_ms": 1, "batch_bytes": 1048576, "compression": "none", "pipeline_depth": 10,
          "read_count": 100}
SECOND_NS = 1_000_000_000


def drain(sender, seq, count):
    """Send messages seq..seq+count-1 on the sender's schedule; the interval's records, taken after a flush."""
    far = time.monotonic_ns() + 60 * SECOND_NS
    next_seq, why = sender.send_until(seq, seq + count, far, far)
    assert (next_seq, why) == (seq + count, native.module().STOP_LIMIT)
    assert sender.flush(30) == 0
    started, handed, acked_seq, acked_ns, failed = sender.take()
    return [np.frombuffer(b, dtype=np.int64) for b in (started, handed, acked_seq, acked_ns)] + [failed_count(failed)]


def failed_count(failed_seqs: bytes) -> int:
    """take() names the failed sends by sequence number; each is reported once."""
    seqs = np.frombuffer(failed_seqs, dtype=np.int64)
    assert np.unique(seqs).size == seqs.size
    return int(seqs.size)


def kafka_messages(bootstrap, topic, partitions, count):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{new_run_id()}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, deadline = [], time.monotonic() + 30
    while len(out) < count and time.monotonic() < deadline:
        out += [m for m in consumer.consume(1000, 1) if m.error() is None]
    consumer.close()
    return out


@pytest.fixture
def kafka(endpoints):
    driver = get_driver("kafka", endpoints["kafka"], CLIENT)
    topic = f"native-{new_run_id()}"
    driver.create_topic(topic, 2)
    yield driver, topic
    driver.delete_topic(topic, 2)


def test_kafka_messages_carry_the_header_and_payload_on_the_schedule(kafka, endpoints):
    driver, topic = kafka
    sender = driver.native_sender(topic, 2, "batch")
    pool = [random.Random(i).randbytes(100 + i) for i in range(4)]
    period = 200_000.0  # 5,000 msgs/s
    base = time.monotonic_ns() + 2_000_000
    sender.configure(pool, None, 7, base, period)
    started, handed, acked_seq, acked_ns, failed = drain(sender, 0, 300)
    sender.close()

    assert failed == 0 and started.size == handed.size == 300
    assert sorted(acked_seq.tolist()) == list(range(300))  # every message acknowledged once
    # each stamped on librdkafka's broker thread as it handled the produce response, not as its report was served,
    # with the kernel's receive time of the response's read
    assert sender.handled_stamps == sender.arrival_stamps == 300 and sender.stamps == "arrival"
    intended = base + (np.arange(300) * period).astype(np.int64)
    assert (started >= intended).all() and (handed >= started).all()  # never early: the open-loop schedule
    messages = kafka_messages(endpoints["kafka"]["bootstrap_servers"], topic, 2, 300)
    headers = unpack_many([m.key() for m in messages])
    assert sorted(headers["seq"].tolist()) == list(range(300)) and set(headers["producer"].tolist()) == {7}
    for message, seq, when in zip(messages, headers["seq"].tolist(), headers["intended_ns"].tolist()):
        assert message.value() == pool[seq % 4]
        assert message.partition() == seq % 2
        assert when == base + int(seq * period)


def test_kafka_encode_callable_sends_the_codecs_bytes(kafka, endpoints):
    driver, topic = kafka
    codec = get_codec("json")
    objects = [codec.prepare(sized_record(i, 300, lambda r: len(codec.encode(r)))) for i in range(3)]
    sender = driver.native_sender(topic, 2, "single")  # single: each message acknowledged before the next
    sender.configure(objects, codec.encode, 1, time.monotonic_ns(), 0.0)
    started, handed, acked_seq, _, failed = drain(sender, 0, 30)
    sender.close()
    assert failed == 0 and acked_seq.tolist() == list(range(30))  # single mode: acknowledged in order
    assert sender.handled_stamps == sender.arrival_stamps == 30  # at the response's arrival, in single mode too
    assert (handed - started > 0).all()  # the encode is timed
    for message in kafka_messages(endpoints["kafka"]["bootstrap_servers"], topic, 2, 30):
        seq = int(unpack_many([message.key()])["seq"][0])
        assert message.value() == codec.encode(objects[seq % 3])


@pytest.mark.parametrize("mode", ["batch", "single"])
def test_python_loop_kafka_acknowledgements_are_stamped_on_the_broker_thread(mode, kafka):
    """The Python loop's producer loads the native extension as librdkafka's plugin: each acknowledgement is stamped on
    librdkafka's broker thread as it handles the produce response, with the kernel's receive time of the response's
    read (librdkafka's reads go through the extension's recvmsg), after its send and before the report reached
    Python, as the native loop stamps it."""
    driver, topic = kafka
    plugins_before = native.module().plugin_inits()
    acks, served = [], {}
    sent = {}

    def on_ack(header, ok, at_ns):
        acks.append((header, ok, at_ns, time.monotonic_ns()))

    producer = driver.producer(topic, 2, mode, on_ack)
    assert native.module().rdkafka_reads_hooked() >= 1  # librdkafka's recvmsg is the extension's
    assert producer.stamps == "arrival"  # what they will be, before any
    # librdkafka dlopen()ed the module Python imported (the same object: its count of conf_init calls moved)
    assert native.module().plugin_inits() == plugins_before + 1
    delivered = producer._delivered

    def served_at(err, msg):  # the report as it reaches Python: the broker thread stamped it before
        served[msg.key()] = time.monotonic_ns()
        delivered(err, msg)

    producer._delivered = served_at
    for seq in range(200):
        header = HEADER.pack(5, seq, time.monotonic_ns())
        sent[header] = time.monotonic_ns()
        producer.send(header, b"x" * 100, seq % 2)
        if mode == "single":
            assert producer.flush(10) == 0
        elif seq % 50 == 49:
            producer.poll(0)
    assert producer.flush(10) == 0
    producer.close()
    assert len(acks) == 200 and all(ok for _, ok, _, _ in acks)
    assert producer.handled_stamps == producer._stamps.arrival == 200  # every one at the kernel's arrival
    assert producer.stamps == "arrival"
    for header, _, at_ns, handed_ns in acks:
        assert sent[header] < at_ns <= served[header] <= handed_ns


def burst_acknowledgements(loop, driver, topic, count):
    """`count` messages sent at once on either loop over 2 partitions: [(seq, partition, sent_ns, stamp_ns)]."""
    if loop == "native":
        sender = driver.native_sender(topic, 2, "batch")
        sender.configure([b"x" * 100], None, 9, time.monotonic_ns(), 0.0)  # no wait between sends
        started, _, acked_seq, acked_ns, failed = drain(sender, 0, count)
        handled = sender.handled_stamps
        sender.close()
        assert failed == 0 and handled == count
        return [(int(q), int(q) % 2, int(started[q]), int(at)) for q, at in zip(acked_seq, acked_ns)]
    acks, sent = [], {}
    producer = driver.producer(topic, 2, "batch", lambda header, ok, at: acks.append((header, ok, at)))
    for seq in range(count):
        header = HEADER.pack(9, seq, 0)
        sent[header] = time.monotonic_ns()
        producer.send(header, b"x" * 100, seq % 2)
    assert producer.flush(10) == 0
    handled = producer.handled_stamps
    producer.close()
    assert all(ok for _, ok, _ in acks) and handled == count
    return [(HEADER.unpack(h)[1], HEADER.unpack(h)[1] % 2, sent[h], at) for h, _, at in acks]


@pytest.mark.parametrize("loop", ["native", "python"])
def test_kafka_acknowledgements_are_stamped_at_their_produce_responses_read(loop, kafka):
    """librdkafka's broker thread notes when it has read a Produce response in full, just before it handles it, and
    each acknowledgement the response carries is stamped there, not as the handler comes to it after the parse and the
    acknowledgements before it: a burst's messages, acknowledged by a few responses each carrying a batch per
    partition, share a few stamps; under one stamp each partition's messages are one batch (consecutive seqs); a stamp
    comes after every message it acknowledged was sent."""
    driver, topic = kafka
    acks = burst_acknowledgements(loop, driver, topic, 400)
    assert sorted(seq for seq, *_ in acks) == list(range(400))  # every message acknowledged once
    by_stamp = {}
    for seq, partition, sent_ns, at in acks:
        by_stamp.setdefault(at, []).append((seq, partition, sent_ns))
    # stamped one by one, 400 acknowledgements would carry 400 stamps; a linger of 1 ms batches a burst of 400
    assert len(by_stamp) <= 400 // 4, f"{len(by_stamp)} stamps for 400 acknowledgements"
    for at, messages in by_stamp.items():
        assert max(sent for *_, sent in messages) < at
        for partition in (0, 1):
            seqs = sorted(seq for seq, p, _ in messages if p == partition)
            assert seqs == list(range(seqs[0], seqs[0] + 2 * len(seqs), 2)) if seqs else True


@pytest.mark.parametrize("loop", ["native", "python"])
def test_kafka_acknowledgements_without_a_response_are_stamped_as_handled(loop, endpoints):
    """With acks 0 no Produce response comes: librdkafka acknowledges each request as it is sent, and its messages are
    stamped then, after their send, on the broker thread (none at a response read of the past)."""
    driver = get_driver("kafka", endpoints["kafka"], {**CLIENT, "acks": "0"})
    topic = f"native-{new_run_id()}"
    driver.create_topic(topic, 2)
    try:
        acks = burst_acknowledgements(loop, driver, topic, 200)
    finally:
        driver.delete_topic(topic, 2)
    assert sorted(seq for seq, *_ in acks) == list(range(200))
    assert all(sent < at for _, _, sent, at in acks)


def test_python_loop_kafka_without_the_plugin_stamps_as_served_and_says_so(kafka, monkeypatch):
    """Where the plugin cannot load (here: the extension says librdkafka has no interceptors), the producer is made
    without it, stamps each report as it is served and records that stamp apart."""
    from brokerbench.brokers.kafka import driver as kafka_driver

    driver, topic = kafka

    def unsupported():
        raise native.Unsupported("librdkafka without interceptors")

    monkeypatch.setattr(native, "kafka_ack_stamps", unsupported)
    acks = []
    producer = driver.producer(topic, 2, "batch", lambda header, ok, at: acks.append((header, ok, at)))
    assert producer.stamps == kafka_driver.REPORT_STAMPS == "client:librdkafka-report"
    assert producer.handled_stamps is None
    for seq in range(20):
        producer.send(HEADER.pack(5, seq, 0), b"x", 0)
    assert producer.flush(10) == 0
    producer.close()
    assert len(acks) == 20 and all(ok for _, ok, _ in acks)


def test_python_loop_kafka_deliveries_are_stamped_at_the_fetch_response(kafka):
    """The Kafka consumer loads the native extension as librdkafka's plugin, which notes on librdkafka's broker thread
    when each Fetch response arrived (the kernel's receive time of the read that completed it: librdkafka reads through
    the extension's recvmsg): a poll's deliveries are stamped at the latest before the poll returned, which is after
    each of its messages was sent (the response that carried it arrived after that) and no later than the poll's
    return."""
    driver, topic = kafka
    plugins_before = native.module().plugin_inits()
    consumer = driver.consumer(topic, f"t-{new_run_id()}", [0, 1])
    assert consumer.stamps == "client:librdkafka-fetch-arrival"  # what they will be, before any
    assert native.module().plugin_inits() == plugins_before + 1  # librdkafka initialised this module for it
    sent, polls = {}, []
    producer = driver.producer(topic, 2, "batch", lambda *ack: None)
    deadline = time.monotonic() + 30
    for seq in range(300):
        header = HEADER.pack(6, seq, 0)
        sent[header] = time.monotonic_ns()
        producer.send(header, b"x" * 100, seq % 2)
        producer.poll(0)
        time.sleep(0.002)  # about 500 a second: polls of one message and of a few
        if (messages := consumer.poll(0)):
            polls.append((consumer.arrived_ns, time.monotonic_ns(), consumer.arrival_responses, messages))
    assert producer.flush(10) == 0
    producer.close()
    while sum(len(p[3]) for p in polls) < 300 and time.monotonic() < deadline:
        if (messages := consumer.poll(0.5)):
            polls.append((consumer.arrived_ns, time.monotonic_ns(), consumer.arrival_responses, messages))
    responses, arrival, stamps = consumer.fetch_responses, consumer._fetch.arrival, consumer.stamps
    consumer.close()
    assert arrival == responses and stamps == "client:librdkafka-fetch-arrival"  # each at the kernel's arrival
    assert sorted(key for *_, messages in polls for key, _, _ in messages) == sorted(sent)
    assert responses >= len(polls) > 0  # the broker thread noted at least one Fetch response per poll with messages
    for arrived, returned, count, messages in polls:
        assert arrived is not None and count >= 0
        assert max(sent[key] for key, _, _ in messages) < arrived <= returned


def test_kafka_consumer_without_the_plugin_stamps_as_its_poll_returns(kafka, monkeypatch):
    """Where the plugin cannot load, the consumer is made without it and says its deliveries are stamped as the poll
    returns: no arrival of its own (the worker takes the poll's return)."""
    driver, topic = kafka

    def unsupported():
        raise native.Unsupported("librdkafka without interceptors")

    monkeypatch.setattr(native, "kafka_fetch_stamps", unsupported)
    consumer = driver.consumer(topic, f"t-{new_run_id()}", [0, 1])
    assert consumer.stamps == "client:librdkafka" and consumer.fetch_responses is None
    producer = driver.producer(topic, 2, "batch", lambda *ack: None)
    for seq in range(5):
        producer.send(HEADER.pack(6, seq, 0), b"x", 0)
    assert producer.flush(10) == 0
    producer.close()
    got, deadline = [], time.monotonic() + 30
    while len(got) < 5 and time.monotonic() < deadline:
        got += consumer.poll(0.5)
        assert consumer.arrived_ns is None
    consumer.close()
    assert len(got) == 5


def test_send_until_stops_at_the_boundary_and_at_the_end(kafka):
    driver, topic = kafka
    sender = driver.native_sender(topic, 2, "batch")
    base = time.monotonic_ns()
    sender.configure([b"x" * 10], None, 0, base, 1_000_000.0)  # 1,000 msgs/s
    seq, why = sender.send_until(0, 1 << 62, base + 50_000_000, base + 80_000_000)
    # Only messages due before the boundary (50 on an idle host); a sender behind schedule when the clock passes
    # the boundary returns there and sends the rest in its next call (49 on a loaded host: a timing, not a defect)
    assert why == native.module().STOP_BOUNDARY and 0 < seq <= 50
    assert time.monotonic_ns() >= base + 50_000_000
    first = seq
    seq, why = sender.send_until(seq, 1 << 62, base + 200_000_000, base + 80_000_000)
    # none due at or after the end is sent; a sender still behind at the end stops there (a loaded host's
    # shortfall, the same rule as a cell's: 42 of the 80 due at load 12 in CI, 80 on an idle host)
    assert why == native.module().STOP_END and first <= seq <= 80
    sender.flush(10)
    assert np.frombuffer(sender.take()[0], dtype=np.int64).size == seq  # every message sent, once
    sender.close()


def test_kafka_bad_settings_name_the_setting(endpoints):
    driver = get_driver("kafka", endpoints["kafka"], {**CLIENT, "compression": "zip"})
    with pytest.raises(ValueError, match="compression.type"):
        driver.native_sender("t", 1, "batch")


def test_redis_entries_and_acknowledgements(endpoints):
    driver = get_driver("redis-streams", endpoints["redis-streams"], CLIENT)
    topic = f"native-{new_run_id()}"
    sender = driver.native_sender(topic, 3, "batch")
    pool = [bytes([i]) * (500 + i) for i in range(5)]
    sender.configure(pool, None, 3, time.monotonic_ns(), 0.0)
    started, handed, acked_seq, acked_ns, failed = drain(sender, 0, 257)  # 25 full pipelines and a partial one
    sender.close()
    assert failed == 0 and acked_seq.tolist() == list(range(257))
    assert (acked_ns >= handed[acked_seq]).all()
    client = redis.Redis(host="127.0.0.1", port=int(endpoints["redis-streams"]["port"]))
    for partition in range(3):
        entries = client.xrange(f"{topic}-{partition}")
        frames = unpack_many([fields[b"h"] for _, fields in entries])
        assert frames["seq"].tolist() == list(range(partition, 257, 3))  # in order within a stream
        assert set(frames["producer"].tolist()) == {3}
        assert [fields[b"d"] for _, fields in entries] == [pool[s % 5] for s in frames["seq"].tolist()]
    client.delete(*(f"{topic}-{p}" for p in range(3)))


def test_redis_error_replies_count_as_failed_sends(endpoints):
    driver = get_driver("redis-streams", endpoints["redis-streams"], CLIENT)
    topic = f"native-{new_run_id()}"
    client = redis.Redis(host="127.0.0.1", port=int(endpoints["redis-streams"]["port"]))
    client.set(f"{topic}-1", "not a stream")  # XADD to partition 1 answers WRONGTYPE
    sender = driver.native_sender(topic, 2, "batch")
    sender.configure([b"abc"], None, 0, time.monotonic_ns(), 0.0)
    _, _, acked_seq, _, failed = drain(sender, 0, 40)
    sender.close()
    assert failed == 20 and acked_seq.tolist() == list(range(0, 40, 2))
    client.delete(f"{topic}-0", f"{topic}-1")


def test_redis_that_stops_answering_fails_what_is_in_flight(endpoints):
    endpoint = endpoints["redis-streams"]
    topic = f"native-{new_run_id()}"
    sender = native.redis_sender(endpoint["host"], int(endpoint["port"]), None, [f"{topic}-0".encode()], 10,
                                 timeout_s=0.5)
    sender.configure([b"abc"], None, 0, time.monotonic_ns(), 0.0)
    client = redis.Redis(host="127.0.0.1", port=int(endpoint["port"]))
    client.execute_command("CLIENT", "PAUSE", 2000, "WRITE")  # real Redis holds every write for 2 s
    try:
        _, _, acked_seq, _, failed = drain(sender, 0, 25)
    finally:
        client.execute_command("CLIENT", "UNPAUSE")
    assert acked_seq.size == 0 and failed == 25  # the window timed out; nothing counted twice or lost
    sender.close()
    client.delete(f"{topic}-0")


def test_redis_that_does_not_answer_is_unavailable():
    driver = get_driver("redis-streams", {"host": "127.0.0.1", "port": free_port()}, CLIENT)
    with pytest.raises(BrokerUnavailable, match="did not answer"):
        driver.native_sender("t", 1, "batch")


def test_endpoints_the_native_loop_cannot_serve_are_unsupported():
    with pytest.raises(native.Unsupported, match="TLS"):
        get_driver("redis-streams", {"host": "h", "port": 1, "tls": True}, CLIENT).native_sender("t", 1, "batch")
    with pytest.raises(native.Unsupported, match="IAM"):
        get_driver("kafka", {"bootstrap_servers": "h:1", "auth": "iam"}, CLIENT).native_sender("t", 1, "batch")


def test_configure_checks_its_input(endpoints):
    sender = get_driver("redis-streams", endpoints["redis-streams"], CLIENT).native_sender("t", 1, "batch")
    with pytest.raises(ValueError, match="objects: the payload pool is empty"):
        sender.configure([], None, 0, 0, 0.0)
    with pytest.raises(TypeError, match=r"objects\[1\]: raw payloads must be bytes"):
        sender.configure([b"a", "b"], None, 0, 0, 0.0)
    with pytest.raises(RuntimeError, match="configure"):
        sender.send_until(0, 1, 0, 0)
    sender.configure([b"a"], None, 0, 0, 0.0)
    with pytest.raises(RuntimeError, match="configure\\(\\) once"):
        sender.configure([b"a"], None, 0, 0, 0.0)
    sender.close()


def test_send_loop_choice_is_checked(monkeypatch):
    monkeypatch.setenv("BROKERBENCH_SEND_LOOP", "fast")
    with pytest.raises(ValueError, match="BROKERBENCH_SEND_LOOP: 'fast' is not one of auto, native, python"):
        native.choice()


@pytest.mark.parametrize("loop", ["native", "python"])
def test_cells_on_either_loop_are_recorded_and_count_alike(loop, endpoints, store, monkeypatch):
    monkeypatch.setenv("BROKERBENCH_SEND_LOOP", loop)  # the cell's processes start with the worker's environment
    spec = {"name": f"loop-{loop}", "brokers": ["kafka", "redis-streams"], "sizes": [512], "rates": [2000],
            "formats": ["raw", "msgpack"], "duration_s": 3, "warmup_s": 1, "warmup_until_steady": False,
            "partitions": 2}
    outcome = execute_run(spec, endpoints, store)
    events = store.read(outcome.run_id)
    completed = [e["data"] for e in events if e["type"] == "CellCompleted"]
    assert len(completed) == 4 and {c["send_loop"] for c in completed} == {loop}
    cells = build_results(events)["cells"]
    assert {c["send_loop"] for c in cells} == {loop}
    # how each side stamped (brokerbench.figures): Kafka's acknowledgements at their response's arrival (read by
    # librdkafka through the extension's recvmsg) and its deliveries in librdkafka on both loops; a Redis reply and a
    # Redis delivery at their arrival
    stamps = {(c["broker"], c["ack_stamps"], c["delivery_stamps"]) for c in cells}
    assert stamps == {("kafka", "arrival", "client:librdkafka-fetch-arrival"), ("redis-streams", "arrival", "arrival")}
    # the Kafka cells' deliveries stamped at the Fetch response: how often that was the carrying one, and by how much
    # later at most where it may not have been (consumer.ArrivalBound); no bound for Redis's arrival stamps
    for data in completed:
        bound = data.get("delivery_stamp_bound")
        if data["delivery_stamps"] == "arrival":
            assert bound is None
            continue
        assert 0 <= bound["single_response_polls"] <= bound["polls"] <= data["totals"]["received"] and bound["polls"] > 0
        several = bound["polls"] > bound["single_response_polls"]
        assert (bound["spread_max_us"] is not None) == several and (bound["spread_p99_us"] is not None) == several
        if several:
            assert 0 <= bound["spread_p99_us"] <= bound["spread_max_us"]
    note = stamps_note(build_results(events))
    assert "kafka raw: deliveries (end-to-end " \
           "latency) at the arrival (the kernel's receive time) of the latest Fetch response read before the poll " \
           "returned " \
           "(at the response that carried them in " in note
    for cell in cells:
        assert cell["status"] == "completed", cell.get("reason")
        # the rate each loop reaches is a timing (bench/harness.py); the schedule and the accounting are not
        assert_sent_on_schedule(cell, 2000)
        assert cell["rate_achieved"] * cell["delivery_window_s"] == pytest.approx(cell["delivered"], rel=1e-5)
        assert_rate_of_the_offered_magnitude(cell["rate_achieved"], 2000)
        assert cell["sent"] == cell["received"] > 0 and cell["lost"] == cell["duplicated"] == 0
        assert cell["publish_latency_us"]["p50"] > 0 and cell["publish_delay_us"]["p50"] >= 0


def test_instrumentation_count_is_checked():
    with pytest.raises(ValueError, match="n: must be at least 1"):
        native.module().instrumentation_ns(0)


@pytest.mark.parametrize("loop", ["native", "python"])
def test_acknowledgements_that_come_while_the_producer_closes_are_counted(loop, endpoints, store, monkeypatch):
    """Redis holds every write (CLIENT PAUSE WRITE) from near the end of sending until after the producer's flush
    gave up (1 s without an acknowledgement, drain_timeout_s): the last replies come while the producer closes
    (its last flush waits up to 5 s). They are acknowledgements like any other: none is left unacknowledged,
    and what the producer was told was stored is what the stream holds."""
    monkeypatch.setenv("BROKERBENCH_SEND_LOOP", loop)
    spec = {"name": f"close-{loop}", "brokers": ["redis-streams"], "sizes": [256], "rates": [100], "formats": ["raw"],
            "duration_s": 1, "warmup_s": 0.5, "warmup_until_steady": False, "drain_timeout_s": 1}
    run_id = new_run_id()
    key = f"{topic_name(run_id, {'index': 0})}-0"
    client = redis.Redis(host="127.0.0.1", port=int(endpoints["redis-streams"]["port"]))
    paused, held = threading.Event(), threading.Event()

    def pause_near_the_end():  # 150 messages in all (and the readiness probes): hold the last ~20
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not paused.is_set():
            if client.exists(key) and client.xlen(key) >= 130:
                client.execute_command("CLIENT", "PAUSE", 2500, "WRITE")
                held.set()
                paused.set()
            time.sleep(0.002)

    watcher = threading.Thread(target=pause_near_the_end, daemon=True)
    watcher.start()
    try:
        execute_run(spec, endpoints, store, run_id=run_id)
    finally:
        paused.set()
        watcher.join()
        client.execute_command("CLIENT", "UNPAUSE")
    [cell] = build_results(store.read(run_id))["cells"]
    done = [e["data"] for e in store.read(run_id) if e["type"] == "CellCompleted"]
    assert done, cell.get("reason")
    assert held.is_set(), "Redis was never paused: the close was not exercised"
    # At most the schedule's 100: a loop behind schedule at the end stops on time (on a loaded host the native
    # loop once sent 99), and the shortfall shows as a lower rate, not as unacknowledged messages.
    assert 0 < cell["sent"] <= 100 and cell["unacknowledged"] == 0 and cell["send_errors"] == 0, cell
    assert cell["broker_count"]["difference"] == 0, cell["broker_count"]
    client.delete(key)
