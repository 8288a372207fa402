"""Apache Pulsar end to end on the local standalone: every format in both modes (on the native send loop, and on the
Python loop), a non-persistent cell, and the native loop's producers, on both of its paths (Pulsar's binary protocol
spoken by the loop, and the C API the cells with faults use): what the partitions hold, each receipt taken once, one
in flight in single mode, and which client the broker saw; and the consumer that speaks the protocol itself: each
partition read once in order, its acknowledgements taken, a lost connection made again."""

import socket
import time

import pulsar
import pytest

from brokerbench import spec
from brokerbench.drivers import BrokerUnavailable
from brokerbench.registry import get_driver
from brokerbench.reports.results import build_results
from brokerbench.worker.framing import unpack_many
from inline_run import execute_run
from brokerbench.brokers.pulsar import wire, wire_consumer
from native_sends import assert_python_loop_cells, python_producer, python_sends, send_all
from steady import assert_sent_on_schedule, p50_known_or_bound

TINY = {"brokers": ["pulsar"], "sizes": [1024], "rates": [200], "duration_s": 1, "warmup_s": 0.2,
        "warmup_until_steady": False, "drain_timeout_s": 2}


def run(request, endpoints, store):
    outcome = execute_run(request, endpoints, store)
    events = store.read(outcome.run_id)
    return outcome, events, build_results(events)


def test_every_format_in_both_modes_arrives_whole_and_the_broker_count_reconciles(extra_brokers, store):
    endpoints = extra_brokers("pulsar")
    request = {**TINY, "name": "it-pulsar", "formats": ["json", "avro", "protobuf", "msgpack", "raw"],
               "modes": ["batch", "single"], "partitions": 2}
    outcome, events, results = run(request, endpoints, store)
    assert outcome.status == "completed" and len(results["cells"]) == 10
    for cell in results["cells"]:
        assert cell["status"] == "completed", cell.get("reason")
        assert cell["sent"] == cell["received"] > 0 and cell["lost"] == cell["duplicated"] == 0
        if cell["mode"] == "batch":  # single mode keeps one send in flight: on a busy machine it falls behind 200/s
            assert_sent_on_schedule(cell, 200)
        # What the broker says it stored (msgInCounter) is what the producers were told it stored, probes included.
        assert cell["broker_count"]["difference"] == 0 and cell["broker_count"]["observed"] > cell["sent"]
        assert 0 < p50_known_or_bound(cell["end_to_end_latency_us"]) < 1_000_000  # a bound: see there
        assert cell["publish_latency_us"]["p50"] > 0
    ends = [e["data"] for e in events if e["type"] == "CellCompleted"]
    assert all(end["send_loop"] == "native" for end in ends)  # the default where the native loop is built
    # the standalone's one broker serves both partitions at a plain address: the consumers read their own sockets
    assert all(end["delivery_stamps"] == "arrival" for end in ends), {end["delivery_stamps"] for end in ends}
    backlogs = [e["data"]["backlog"] for e in events if e["type"] == "IntervalMeasured"]
    assert all(isinstance(b, int) for b in backlogs) and backlogs[-1] == 0  # counted by the broker, drained
    target = results["environment"]["brokers"]["pulsar"]
    assert target["client_library"] == "pulsar-client" and target["broker_version"].startswith("4.0")
    settings = events[1]["data"]["targets"]["pulsar"]["settings"]
    assert settings["persistence"]["topic_type"] == "persistent" and settings["modes"]["single"]["batching"] is False
    # The local standalone's ack quorum of 1 as its admin API reports it, and its bookie's journalSyncData=false.
    durability = results["durability"]["pulsar"]
    assert (durability["fsync"], durability["replicas"], durability["memory_only"]) == (False, 0, False), durability


def test_a_non_persistent_cell_delivers_everything_and_claims_no_broker_count(extra_brokers, store):
    endpoints = extra_brokers("pulsar")
    request = {**TINY, "formats": ["raw"], "modes": ["batch"], "client": {"pulsar_topic_type": "non-persistent"}}
    _, events, results = run(request, endpoints, store)
    [cell] = results["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    assert cell["sent"] == cell["received"] > 0 and cell["lost"] == 0
    assert cell["broker_count"] is None  # a non-persistent topic stores nothing to count
    assert all(e["data"]["backlog"] is None for e in events if e["type"] == "IntervalMeasured")
    assert events[1]["data"]["targets"]["pulsar"]["settings"]["persistence"]["topic_type"] == "non-persistent"


def test_the_python_loop_serves_the_same_cells(extra_brokers, store, monkeypatch):
    """Where the native loop is not built the Python loop runs (its producer and its consumer speaking Pulsar's binary
    protocol): the same cells, counted alike."""
    monkeypatch.setenv("BROKERBENCH_SEND_LOOP", "python")  # the cell's processes start with the worker's environment
    endpoints = extra_brokers("pulsar")
    request = {**TINY, "name": "it-pulsar-python", "formats": ["json"], "modes": ["batch", "single"]}
    _, events, results = run(request, endpoints, store)
    assert_python_loop_cells(events, results)


# Each native path, and the client the broker reports for its producers (its clientVersion): the loop's own protocol
# on a standalone, whose one broker serves every partition; the C++ client under the C API.
NATIVE_PATHS = [("native_sender", "brokerbench"), ("native_failover_sender", "Pulsar-CPP-")]


def publishers(driver, topic: str, partitions: int) -> list[str]:
    """The client versions of the producers the broker has on the topic's partitions now."""
    return [p.get("clientVersion") for name in driver.partitions_of(topic, range(partitions))
            for p in driver.admin.stats(name)["publishers"]]


@pytest.mark.parametrize("make, client_version", NATIVE_PATHS)
def test_the_native_loop_sends_each_message_to_its_partition_and_takes_each_receipt_once(extra_brokers, make,
                                                                                         client_version):
    """3,001 messages over three partitions with batching on: each acknowledged once, none before it was handed
    over, and each partition holds its messages in order, with the header and the payload (read back with the Python
    client, independently of the loop). The C API path hands each body over without a copy, from blocks it uses
    again once a message's receipt came, so a block reused too early would show here as a wrong body; the protocol
    path builds each batch itself, so a batch framed wrong (a size, a count, the checksum) would too. The broker
    stored them in batches: fewer entries than messages."""
    endpoint = extra_brokers("pulsar")["pulsar"]
    client_settings = spec.validate({"brokers": ["pulsar"], "sizes": [512], "rates": [100], "formats": ["raw"]})["client"]
    driver = get_driver("pulsar", endpoint, client_settings)
    topic = f"bb-native-{time.monotonic_ns()}"
    driver.create_topic(topic, 3)
    try:
        sender = getattr(driver, make)(topic, 3, "batch")
        assert all(v.startswith(client_version) for v in publishers(driver, topic, 3)) and len(publishers(driver, topic, 3)) == 3
        pool = [bytes([i]) * (300 + i) for i in range(5)]
        sender.configure(pool, None, 4, time.monotonic_ns(), 0.0)
        handed, acked, acked_ns, failed = send_all(sender, 3001)
        sender.close()
        entries = sum(driver.admin.call("GET", driver.admin.path(name) + "/internalStats")["numberOfEntries"]
                      for name in driver.partitions_of(topic, range(3)))
        assert 3 <= entries < 3001 / 10, entries
        assert failed.size == 0 and sorted(acked.tolist()) == list(range(3001))
        assert (acked_ns >= handed[acked]).all()
        client = pulsar.Client(endpoint["service_url"], listener_name=endpoint.get("listener_name"))
        try:
            for lane, name in enumerate(driver.partitions_of(topic, range(3))):
                reader = client.create_reader(name, pulsar.MessageId.earliest)
                bodies = [reader.read_next(10_000).data() for _ in range(len(range(lane, 3001, 3)))]
                assert not reader.has_message_available()
                frames = unpack_many([body[1:21] for body in bodies])
                assert frames["seq"].tolist() == list(range(lane, 3001, 3)) and set(frames["producer"].tolist()) == {4}
                assert [body[21:] for body in bodies] == [pool[seq % 5] for seq in frames["seq"].tolist()]
        finally:
            client.close()
    finally:
        driver.delete_topic(topic, 3)


@pytest.mark.parametrize("make, client_version", NATIVE_PATHS)
def test_the_native_loop_in_single_mode_keeps_one_message_in_flight(extra_brokers, make, client_version):
    endpoint = extra_brokers("pulsar")["pulsar"]
    client_settings = spec.validate({"brokers": ["pulsar"], "sizes": [512], "rates": [100], "formats": ["raw"]})["client"]
    driver = get_driver("pulsar", endpoint, client_settings)
    topic = f"bb-native-single-{time.monotonic_ns()}"
    driver.create_topic(topic, 1)
    try:
        sender = getattr(driver, make)(topic, 1, "single")
        assert [v[:len(client_version)] for v in publishers(driver, topic, 1)] == [client_version]
        sender.configure([b"abc"], None, 0, time.monotonic_ns(), 0.0)
        handed, acked, acked_ns, failed = send_all(sender, 30)
        sender.close()
        assert failed.size == 0 and acked.tolist() == list(range(30))
        assert (handed[1:] >= acked_ns[:-1]).all()  # each handed over after the previous one's receipt came
        assert driver.message_count(topic, 1) == 30
    finally:
        driver.delete_topic(topic, 1)


def test_a_cell_says_which_native_path_its_producers_took(extra_brokers, store):
    """A cell on the standalone (one broker serves every partition): its producers speak Pulsar's binary protocol,
    and the cell's end, its results and the report's header say so (`sender`). A cell with faults takes the C API
    path instead (its client follows a topic to the broker that serves it next), and its producer's sender says so:
    the producer's own choice (worker.producer), made with the cell's faults on a real sender to this broker (the
    run request takes no Pulsar faults on a local target, so the cell is given one as another target's would carry)."""
    from brokerbench.reports.markdown import send_loop_header
    from brokerbench.reports.model import build_report
    from brokerbench.reports.rows import report as typed_report
    from brokerbench.worker.producer import ProducerTask, _native_sender, sender_path

    endpoints = extra_brokers("pulsar")
    request = {**TINY, "name": "it-pulsar-sender", "formats": ["raw"], "modes": ["batch"], "partitions": 2,
               "consumers": 0}
    _, events, results = run(request, endpoints, store)
    [cell] = results["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    [end] = [e["data"] for e in events if e["type"] == "CellCompleted"]
    assert (end["send_loop"], end["sender"], cell["sender"]) == ("native", "native-pwire", "native-pwire")
    assert (end["ack_stamps"], cell["ack_stamps"], cell["delivery_stamps"]) == ("arrival", "arrival", None)
    assert send_loop_header(typed_report(build_report(events))) == " · native C loop (Pulsar binary protocol)"

    endpoint = endpoints["pulsar"]
    faulted = {**spec.expand(spec.validate({**TINY, "formats": ["raw"], "modes": ["batch"]}))[0],
               "faults": [{"kind": "kill", "target": "leader", "at_s": 1}]}
    driver = get_driver("pulsar", endpoint, faulted["client"])
    topic = f"bb-sender-{time.monotonic_ns()}"
    driver.create_topic(topic, 1)
    try:
        for cell_faults, path, stamps in (([], "native-pwire", "arrival"),
                                          (faulted["faults"], "native-capi", "client:pulsar-c")):
            task = ProducerTask({**faulted, "faults": cell_faults}, endpoint, topic, 0, None, None)
            sender = _native_sender(driver, task)
            try:
                assert (sender_path(sender), sender.stamps) == (path, stamps)  # the C API's in its client's thread
                assert all(v.startswith("brokerbench" if path == "native-pwire" else "Pulsar-CPP-")
                           for v in publishers(driver, topic, 1))  # what the broker saw connect
            finally:
                sender.close()
    finally:
        driver.delete_topic(topic, 1)


def read_back(endpoint: dict, driver, topic: str, lanes: int, count: int) -> list[list[bytes]]:
    """Each partition's message bodies, read back with the Python client (independently of the producer)."""
    client = pulsar.Client(endpoint["service_url"], listener_name=endpoint.get("listener_name"))
    try:
        out = []
        for lane, name in enumerate(driver.partitions_of(topic, range(lanes))):
            reader = client.create_reader(name, pulsar.MessageId.earliest)
            out.append([reader.read_next(10_000).data() for _ in range(len(range(lane, count, lanes)))])
            assert not reader.has_message_available()
        return out
    finally:
        client.close()


@pytest.mark.parametrize("mode", ["batch", "single"])
def test_the_python_loops_producer_speaks_the_protocol_and_takes_each_receipt_once(extra_brokers, mode):
    """The Python loop's producer on the standalone speaks Pulsar's binary protocol on its own socket (the broker
    names its client 'brokerbench'): every message of three partitions acknowledged once and not before it was handed
    over, each partition holding its messages in order with the header and the payload; batched, the broker stored
    fewer entries than messages, and batches held more than one partition's turn; single mode, one entry each."""
    endpoint = extra_brokers("pulsar")["pulsar"]
    client_settings = spec.validate({"brokers": ["pulsar"], "sizes": [512], "rates": [100], "formats": ["raw"],
                                     "client": {"pulsar_batch_messages": 50}})["client"]
    driver = get_driver("pulsar", endpoint, client_settings)
    topic = f"bb-wire-{mode}-{time.monotonic_ns()}"
    count = 1001 if mode == "batch" else 60
    driver.create_topic(topic, 3)
    try:
        producer = python_producer(driver, topic, 3, mode)
        assert isinstance(producer, wire.WireProducer)
        assert [v for v in publishers(driver, topic, 3)] == ["brokerbench"] * 3
        handed = python_sends(producer, count, lambda seq: bytes([seq % 251]) * (300 + seq % 7), lanes=3,
                              producer_id=4, flush_each=mode == "single")
        producer.close()
        answers = producer.answers
        assert sorted(answers) == list(range(count)) and all(ok for ok, _ in answers.values())
        assert all(answers[seq][1] >= handed[seq] for seq in answers)
        entries = sum(driver.admin.call("GET", driver.admin.path(name) + "/internalStats")["numberOfEntries"]
                      for name in driver.partitions_of(topic, range(3)))
        if mode == "batch":  # at most 50 messages a batch: at least 334 / 50 per partition
            assert 3 * 7 <= entries < count / 2, entries
        else:
            assert entries == count
        for lane, bodies in enumerate(read_back(endpoint, driver, topic, 3, count)):
            frames = unpack_many([body[1:21] for body in bodies])
            assert frames["seq"].tolist() == list(range(lane, count, 3)) and set(frames["producer"].tolist()) == {4}
            assert [body[21:] for body in bodies] == [bytes([s % 251]) * (300 + s % 7) for s in frames["seq"].tolist()]
        assert driver.message_count(topic, 3) == count
    finally:
        driver.delete_topic(topic, 3)


def test_a_send_the_broker_refuses_fails_and_ends_the_connection(extra_brokers, monkeypatch):
    """A SEND whose checksum does not match its content is refused by the broker (a SEND_ERROR): its message fails,
    the connection is given up with the broker's reason, and a later send fails at once; nothing was stored."""
    endpoint = extra_brokers("pulsar")["pulsar"]
    client_settings = spec.validate({"brokers": ["pulsar"], "sizes": [512], "rates": [100], "formats": ["raw"]})["client"]
    driver = get_driver("pulsar", endpoint, client_settings)
    topic = f"bb-wire-refused-{time.monotonic_ns()}"
    driver.create_topic(topic, 1)
    real = wire.send_frame
    try:
        producer = python_producer(driver, topic, 1, "single")

        def corrupted(*args):
            frame = bytearray(real(*args))
            frame[-1] ^= 0xFF  # the last byte of the payload: the checksum no longer matches
            return bytes(frame)

        monkeypatch.setattr(wire, "send_frame", corrupted)
        python_sends(producer, 1, lambda seq: b"abc", flush_each=True)
        monkeypatch.undo()
        assert producer.answers[0][0] is False
        assert producer.error.startswith("Pulsar refused a send"), producer.error
        python_sends(producer, 1, lambda seq: b"abc", first=1)
        assert producer.answers[1][0] is False and producer.flush(1) == 0
        producer.close()
        assert driver.message_count(topic, 1) == 0
    finally:
        driver.delete_topic(topic, 1)


def test_a_producer_the_broker_refuses_is_named(extra_brokers):
    """A producer on a topic of a namespace that does not exist is refused, with the broker's reason."""
    endpoint = extra_brokers("pulsar")["pulsar"]
    host, port = endpoint["service_url"][len("pulsar://"):].rsplit(":", 1)
    with pytest.raises(wire.Refused, match="refused a producer on persistent://public/nowhere/t-partition-0: .+"):
        wire.Connection(host, int(port), ["persistent://public/nowhere/t-partition-0"], 10)


def subscribers(driver, topic: str, partitions: int, group: str) -> list[str]:
    """The client versions of the group's consumers the broker has on the topic's partitions now."""
    return [c.get("clientVersion") for name in driver.partitions_of(topic, range(partitions))
            for c in ((driver.admin.stats(name).get("subscriptions") or {}).get(group) or {}).get("consumers", [])]


def read_all(consumer, count: int, timeout_s: float = 30) -> list[tuple[bytes, bytes, int, int, int]]:
    """(header, payload, lane, arrived_ns, poll's return) of each message until `count` came (or timeout_s)."""
    out, deadline = [], time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        messages = consumer.poll(0.2)
        polled = time.monotonic_ns()
        out += [(header, payload, lane, consumer.arrived_ns, polled) for header, payload, lane in messages]
    return out


@pytest.mark.parametrize("mode", ["batch", "single"])
def test_the_consumer_speaks_the_protocol_and_reads_each_partition_once_in_order(extra_brokers, mode):
    """The driver's consumer on the standalone (one broker, a plain address) speaks Pulsar's binary protocol on its
    own socket (the broker names its client 'brokerbench'): every message of three partitions, batched or not, comes
    once, on its partition's lane, in the order sent, each stamped no later than its poll returned; once it is
    closed, the broker's own backlog of the subscription is 0 (its cumulative acknowledgements were taken)."""
    endpoint = extra_brokers("pulsar")["pulsar"]
    client_settings = spec.validate({"brokers": ["pulsar"], "sizes": [512], "rates": [100], "formats": ["raw"],
                                     "client": {"pulsar_batch_messages": 40}})["client"]
    driver = get_driver("pulsar", endpoint, client_settings)
    topic, group = f"bb-wire-read-{mode}-{time.monotonic_ns()}", "readers"
    count = 900 if mode == "batch" else 90
    driver.create_topic(topic, 3)
    try:
        consumer = driver.consumer(topic, group, [0, 1, 2])
        assert isinstance(consumer, wire_consumer.WireConsumer) and consumer.stamps == "arrival"
        assert subscribers(driver, topic, 3, group) == ["brokerbench"] * 3
        producer = python_producer(driver, topic, 3, mode)
        python_sends(producer, count, lambda seq: bytes([seq % 251]) * (200 + seq % 5), lanes=3, producer_id=2,
                     flush_each=mode == "single")
        producer.close()
        got = read_all(consumer, count)
        frames = unpack_many([header for header, *_ in got])
        assert sorted(frames["seq"].tolist()) == list(range(count))  # each once
        for lane in range(3):
            seqs = [int(s) for s, (_, _, at_lane, _, _) in zip(frames["seq"], got) if at_lane == lane]
            assert seqs == list(range(lane, count, 3))  # its partition's, in order
        assert all(payload == bytes([s % 251]) * (200 + s % 5) for s, (_, payload, *_) in zip(frames["seq"], got))
        assert all(0 < arrived <= polled for *_, arrived, polled in got)
        assert consumer.poll(0.3) == []
        consumer.close()
        assert driver.backlog(topic, group, 3) == 0
    finally:
        driver.delete_topic(topic, 3)


def test_a_consumer_whose_connection_is_lost_subscribes_again_and_misses_nothing(extra_brokers):
    """The consumer's socket cut under it mid-stream: it connects and subscribes again (the broker's Exclusive
    subscription free once the old connection is gone), and every message comes, those it had not acknowledged
    again (duplicates, which the worker counts), none missing; the broker's backlog is 0 after close."""
    endpoint = extra_brokers("pulsar")["pulsar"]
    client_settings = spec.validate({"brokers": ["pulsar"], "sizes": [512], "rates": [100], "formats": ["raw"]})["client"]
    driver = get_driver("pulsar", endpoint, client_settings)
    topic, group = f"bb-wire-again-{time.monotonic_ns()}", "readers"
    driver.create_topic(topic, 1)
    try:
        consumer = driver.consumer(topic, group, [0])
        producer = python_producer(driver, topic, 1, "batch")
        python_sends(producer, 200, lambda seq: b"first")
        got = read_all(consumer, 200)
        consumer._link.sock.shutdown(socket.SHUT_RDWR)  # lost, with the last poll's entries not acknowledged
        python_sends(producer, 200, lambda seq: b"second", first=200)
        producer.close()
        got += read_all(consumer, 300)
        seqs = unpack_many([header for header, *_ in got])["seq"].tolist()
        assert set(seqs) == set(range(400))  # nothing missing
        # the last poll before the cut was never acknowledged (its ACK would have gone with the next poll): it came again
        assert len(seqs) > 400 and consumer._link is not None
        consumer.close()
        assert driver.backlog(topic, group, 1) == 0
    finally:
        driver.delete_topic(topic, 1)


def test_a_cell_over_tls_delivers_everything_stamped_at_arrival(extra_brokers, store, session_certificate,
                                                                monkeypatch):
    """The standalone's TLS port (pulsar+ssl://, the session's certificate trusted through SSL_CERT_FILE as a managed
    Pulsar's is through the system's store): the Python loop's producer and the consumer speak TLS over their own
    sockets (socket_buffer.TlsSocket) to the lookup's brokerUrlTls, every message arrives once, the broker's own count
    agrees, and receipts and deliveries are stamped at the ciphertext's arrival, where pulsar-client stamped them in
    its callback and at the receive's return. The default loop is the Python one: the native loop does not speak TLS
    (its C API path would stamp receipts in the client's callback)."""
    monkeypatch.setenv("SSL_CERT_FILE", str(session_certificate["ca"]))
    endpoints = extra_brokers("pulsar")
    tls = {**endpoints, "pulsar": {**endpoints["pulsar"], "service_url": endpoints["pulsar"]["tls_service_url"]}}
    assert tls["pulsar"]["service_url"].startswith("pulsar+ssl://127.0.0.1:")
    _, events, results = run({**TINY, "formats": ["raw"], "modes": ["batch"], "partitions": 2}, tls, store)
    [cell] = results["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    assert cell["sent"] == cell["received"] > 0 and cell["lost"] == cell["duplicated"] == 0
    assert cell["broker_count"]["difference"] == 0
    [end] = [e["data"] for e in events if e["type"] == "CellCompleted"]
    assert end["send_loop"] == "python"  # chosen: the native loop does not speak TLS to one broker
    assert (end["ack_stamps"], end["delivery_stamps"]) == ("arrival", "arrival")
    # a plain connection to the TLS port is not answered as Pulsar: the cell's clients spoke TLS there
    host, port = tls["pulsar"]["service_url"][len("pulsar+ssl://"):].split(":")
    with pytest.raises((OSError, ValueError)):
        wire.Connection(host, int(port), ["persistent://public/default/bb-ready"], 3)


def test_a_tls_broker_whose_certificate_is_not_trusted_is_refused_at_once_by_name(extra_brokers, tmp_path,
                                                                                 monkeypatch):
    """The same TLS port with another authority trusted: the producer and the consumer fail at the handshake with
    why (pulsar-client's would have tried until its 30 s operation timeout and said "TimeOut")."""
    import trustme

    stranger = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(stranger))
    monkeypatch.setenv("SSL_CERT_FILE", str(stranger))
    endpoint = extra_brokers("pulsar")["pulsar"]
    client = spec.validate({"brokers": ["pulsar"], "sizes": [1024], "rates": [1], "formats": ["raw"]})["client"]
    driver = get_driver("pulsar", {**endpoint, "service_url": endpoint["tls_service_url"]}, client)
    topic = f"untrusted-{time.monotonic_ns()}"
    driver.create_topic(topic, 1)
    try:
        with pytest.raises(BrokerUnavailable, match="TLS failed: CERTIFICATE_VERIFY_FAILED.*SSL_CERT_FILE"):
            driver.producer(topic, 1, "batch", lambda header, ok, at_ns: None)
        with pytest.raises(BrokerUnavailable, match="TLS failed: CERTIFICATE_VERIFY_FAILED"):
            driver.consumer(topic, "g", [0])  # (the words are the handshake's: never pulsar-client's "TimeOut")
    finally:
        driver.delete_topic(topic, 1)
