"""RabbitMQ end to end on one local node: every format in both modes through a stream and through a quorum queue,
with the accounting set beside the broker's own figures; the native send loops (an AMQP connection of their own, a
stream-protocol connection of their own): what the queues and streams hold, a publish the queue rejects, one in
flight in single mode, a refused login, a stream that does not exist."""

import threading
import time
import urllib.parse

import pytest

from brokerbench import native, spec
from brokerbench.brokers.rabbitmq import amqp, management
from brokerbench.brokers.rabbitmq_quorum.driver import QuorumProducer
from brokerbench.brokers.rabbitmq_streams.driver import StreamsWireConsumer, StreamsWireProducer
from brokerbench.drivers import BrokerUnavailable
from brokerbench.registry import get_driver
from brokerbench.reports.results import build_results
from brokerbench.worker.framing import unpack_many
from inline_run import execute_run
from native_sends import assert_python_loop_cells, python_producer, python_sends, send_all
from steady import p50_known_or_bound

TINY = {"sizes": [1024], "rates": [200], "duration_s": 1, "warmup_s": 0.2, "warmup_until_steady": False,
        "drain_timeout_s": 2, "partitions": 2}
FORMATS = ["json", "avro", "protobuf", "msgpack", "raw"]


@pytest.fixture(scope="module")
def rabbit(extra_brokers, stack):
    """The run's endpoints with the one RabbitMQ node (and its pids) under both of its rows."""
    endpoints = extra_brokers("rabbitmq")
    node = stack.endpoint("rabbitmq")
    return {**endpoints, "rabbitmq-streams": node, "rabbitmq-quorum": node}


def run(request, endpoints, store):
    outcome = execute_run(request, endpoints, store)
    events = store.read(outcome.run_id)
    return outcome, events, build_results(events)


@pytest.mark.parametrize("broker", ["rabbitmq-streams", "rabbitmq-quorum"])
def test_every_format_in_both_modes_arrives_whole_and_the_broker_figures_agree(broker, rabbit, store):
    request = {**TINY, "name": f"it-{broker}", "brokers": [broker], "formats": FORMATS, "modes": ["batch", "single"]}
    outcome, events, results = run(request, rabbit, store)
    assert len(results["cells"]) == 10
    for cell in results["cells"]:
        assert cell["status"] == "completed", (cell["format"], cell["mode"], cell.get("reason"))
        assert cell["sent"] == cell["received"] > 0 and cell["lost"] == cell["duplicated"] == 0, cell
        assert 0 < p50_known_or_bound(cell["end_to_end_latency_us"]) < 1_000_000  # a bound: see there
        assert cell["publish_latency_us"]["p50"] > 0
        # What the streams hold, and what the management API counts routed into the quorum queues, is what the
        # producers were confirmed, with the readiness probes.
        assert cell["broker_count"]["difference"] == 0 and cell["broker_count"]["observed"] > cell["sent"], cell
    intervals = [e["data"] for e in events if e["type"] == "IntervalMeasured"]
    backlogs = [i["backlog"] for i in intervals]
    assert all(isinstance(b, int) for b in backlogs) and backlogs[-1] == 0, backlogs  # counted by the broker
    # The broker's processes were sampled: the node's beam.smp and its epmd.
    assert any(i.get("resources", {}).get("broker", {}).get("rss_mb", 0) > 10 for i in intervals)
    assert results["environment"]["brokers"][broker]["broker_version"].startswith("3.10")
    settings = events[1]["data"]["targets"][broker]["settings"]
    assert settings["persistence"]["fsync"] is (broker == "rabbitmq-quorum")
    assert settings["modes"]["single"]["in_flight"] == 1
    loops = {e["data"]["send_loop"] for e in events if e["type"] == "CellCompleted"}
    assert loops == {"native"}  # the default where it is built


def test_the_python_loop_serves_the_same_cells(rabbit, store, monkeypatch):
    """Where the native loop cannot run (TLS, not built) the Python loops do (AMQP and the stream protocol spoken by
    the drivers themselves on one node reached directly)."""
    monkeypatch.setenv("BROKERBENCH_SEND_LOOP", "python")  # the cell's processes start with the worker's environment
    request = {**TINY, "name": "it-rabbitmq-python", "brokers": ["rabbitmq-quorum", "rabbitmq-streams"],
               "formats": ["json"], "modes": ["batch", "single"]}
    _, events, results = run(request, rabbit, store)
    assert_python_loop_cells(events, results)


CLIENT = spec.validate({"brokers": ["rabbitmq-quorum"], "sizes": [512], "rates": [100], "formats": ["raw"],
                        "client": {"rabbitmq_in_flight": 10}})["client"]


def drain_queue(endpoint: dict, queue: str) -> list[bytes]:
    """Every message the queue holds, taken with pika (independently of the loop), in order."""
    connection = amqp.connect(endpoint)
    try:
        channel, bodies = connection.channel(), []
        while (got := channel.basic_get(queue, auto_ack=True))[0] is not None:
            bodies.append(got[2])
        return bodies
    finally:
        connection.close()


def assert_queues_hold(endpoint: dict, topic: str, pool: list[bytes]) -> None:
    """The three queues hold producer 5's 257 messages in order, lane by lane in turn, the worker's header then the
    payload from `pool`."""
    for lane in range(3):
        bodies = drain_queue(endpoint, f"{topic}-{lane}")
        frames = unpack_many([body[:20] for body in bodies])
        assert frames["seq"].tolist() == list(range(lane, 257, 3)) and set(frames["producer"].tolist()) == {5}
        assert [body[20:] for body in bodies] == [pool[seq % 5] for seq in frames["seq"].tolist()]


def test_the_native_loop_publishes_each_message_once_and_takes_each_confirm(rabbit):
    """257 messages over three quorum queues with a window of 10, payloads larger than one frame among them: every
    one confirmed once (RabbitMQ confirms several at once: `multiple`), none before it was handed over, and each queue
    holds its messages in order, the worker's header then the payload."""
    endpoint = rabbit["rabbitmq-quorum"]
    driver = get_driver("rabbitmq-quorum", endpoint, CLIENT)
    topic = f"bb-native-{time.monotonic_ns()}"
    driver.create_topic(topic, 3)
    try:
        sender = driver.native_sender(topic, 3, "batch")
        pool = [bytes([i]) * (300 + i) for i in range(4)] + [b"L" * 300_000]  # 300 KB: three frames of 128 KB
        sender.configure(pool, None, 5, time.monotonic_ns(), 0.0)
        handed, acked, acked_ns, failed = send_all(sender, 257)
        sender.close()
        assert failed.size == 0 and sorted(acked.tolist()) == list(range(257))
        assert (acked_ns >= handed[acked]).all()
        assert_queues_hold(endpoint, topic, pool)
    finally:
        driver.delete_topic(topic, 3)


def test_publishes_a_full_queue_rejects_fail_and_single_mode_keeps_one_in_flight(rabbit):
    """A quorum queue of at most 5 messages that rejects publishes past them (x-overflow reject-publish): the broker
    answers the publishes past its limit with Basic.Nack, and each is a failed send; in single mode each message is handed
    over only after the previous one's confirm came."""
    endpoint = rabbit["rabbitmq-quorum"]
    queue = f"bb-native-full-{time.monotonic_ns()}"
    connection = amqp.connect(endpoint)
    connection.channel().queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum", "x-max-length": 5,
                                                                       "x-overflow": "reject-publish"})
    try:
        user, password = amqp.credentials(endpoint)
        sender = native.amqp_sender(endpoint["host"], int(endpoint["amqp_port"]), user, password, "/",
                                    [queue.encode()], 1)
        sender.configure([b"abc"], None, 0, time.monotonic_ns(), 0.0)
        handed, acked, acked_ns, failed = send_all(sender, 10)
        sender.close()
        # A quorum queue applies the limit once it is reached, so the publish that fills it past 5 may still be
        # taken: what the queue holds is what was confirmed, and every later publish was refused.
        kept = connection.channel().queue_declare(queue, passive=True).method.message_count
        assert kept in (5, 6) and acked.tolist() == list(range(kept)) and sorted(failed.tolist()) == list(range(kept, 10))
        assert (handed[1:kept] >= acked_ns[:kept - 1]).all()  # one in flight: sent after the previous confirm came
    finally:
        connection.channel().queue_delete(queue)
        connection.close()


def test_a_refused_login_is_named_and_tls_stays_on_the_python_loop(rabbit):
    endpoint = rabbit["rabbitmq-quorum"]
    with pytest.raises(OSError, match="ACCESS_REFUSED"):
        native.amqp_sender(endpoint["host"], int(endpoint["amqp_port"]), "guest", "not-the-password", "/", [b"q"], 1)
    with pytest.raises(native.Unsupported, match="TLS"):
        get_driver("rabbitmq-quorum", {**endpoint, "tls": True}, CLIENT).native_sender("t", 1, "batch")


def test_the_python_loops_quorum_producer_speaks_amqp_itself_and_takes_each_confirm_once(rabbit):
    """The Python loop's quorum-queue producer (rabbitmq.wire: AMQP on a connection of its own), as the native loop
    above: 257 messages over three queues with a window of 10, a 300 KB payload (three frames) among them, each
    confirmed once with a stamp no earlier than its send, and each queue holds its messages in order. Then a queue of
    at most 5 that rejects publishes past them, in single mode: what it kept was confirmed, each later publish
    refused (Basic.Nack: a failed send), each sent after the previous one's confirm came."""
    endpoint = rabbit["rabbitmq-quorum"]
    driver = get_driver("rabbitmq-quorum", endpoint, CLIENT)
    topic = f"bb-python-{time.monotonic_ns()}"
    driver.create_topic(topic, 3)
    pool = [bytes([i]) * (300 + i) for i in range(4)] + [b"L" * 300_000]
    try:
        producer = python_producer(driver, topic, 3)
        assert isinstance(producer, QuorumProducer)
        handed = python_sends(producer, 257, lambda seq: pool[seq % 5], lanes=3, producer_id=5)
        producer.close()
        answers = producer.answers
        assert sorted(answers) == list(range(257)) and all(ok for ok, _ in answers.values())
        assert all(at >= handed[seq] for seq, (_, at) in answers.items())
        assert_queues_hold(endpoint, topic, pool)
    finally:
        driver.delete_topic(topic, 3)
    topic = f"bb-python-full-{time.monotonic_ns()}"
    connection = amqp.connect(endpoint)
    connection.channel().queue_declare(f"{topic}-0", durable=True, arguments={
        "x-queue-type": "quorum", "x-max-length": 5, "x-overflow": "reject-publish"})
    try:
        producer = python_producer(driver, topic, 1, "single")
        handed = python_sends(producer, 10, lambda seq: b"abc", flush_each=True)
        producer.close()
        answers = producer.answers
        kept = connection.channel().queue_declare(f"{topic}-0", passive=True).method.message_count
        assert kept in (5, 6) and [answers[seq][0] for seq in range(10)] == [True] * kept + [False] * (10 - kept)
        assert all(handed[seq + 1] >= answers[seq][1] for seq in range(9))
    finally:
        connection.channel().queue_delete(f"{topic}-0")
        connection.close()


def test_the_quorum_consumer_speaks_amqp_itself_reads_each_message_once_in_order_and_acknowledges_at_close(rabbit):
    """The quorum-queue consumer (rabbitmq.wire.Consuming: AMQP on a connection of its own) on three queues of 257
    messages in all, a 300 KB payload (three frames) among them, with a prefetch of 16 so that it reads on only as it
    acknowledges: held, it takes nothing and the queues keep all; then every message comes once, in order per lane,
    whole. Closed, it has acknowledged its last poll: the queues are empty by the broker's count."""
    endpoint = rabbit["rabbitmq-quorum"]
    client = {**CLIENT, "rabbitmq_prefetch": 16}
    driver = get_driver("rabbitmq-quorum", endpoint, client)
    topic = f"bb-consume-{time.monotonic_ns()}"
    driver.create_topic(topic, 3)
    pool = [bytes([i]) * (300 + i) for i in range(4)] + [b"L" * 300_000]
    try:
        producer = python_producer(driver, topic, 3)
        python_sends(producer, 257, lambda seq: pool[seq % 5], lanes=3, producer_id=5)
        producer.close()
        consumer = driver.consumer(topic, "bb-check", [0, 1, 2])
        assert driver.describe()["client_library"].startswith("rabbitmq.wire")
        consumer.hold(True)
        assert consumer.poll(0.3) == [] and driver.backlog(topic, "bb-check", 3) == 257
        consumer.hold(False)
        got, polls, deadline = [], 0, time.monotonic() + 30
        while len(got) < 257 and time.monotonic() < deadline:
            got += consumer.poll(1.0)
            polls += 1
        assert polls > 257 // (3 * 16)  # the prefetch held it to what it acknowledged
        assert driver.backlog(topic, "bb-check", 3) == 0  # all delivered (the last poll's not acknowledged yet)
        consumer.close()
        assert amqp.counts(endpoint, topic, 3) == [0, 0, 0]
        # nothing was left unacknowledged: a new consumer finds nothing
        again = driver.consumer(topic, "bb-check", [0, 1, 2])
        assert again.poll(0.5) == []
        again.close()
    finally:
        driver.delete_topic(topic, 3)
    for lane in range(3):
        mine = [(header, payload) for header, payload, at in got if at == lane]
        frames = unpack_many([header for header, _ in mine])
        assert frames["seq"].tolist() == list(range(lane, 257, 3)) and set(frames["producer"].tolist()) == {5}
        assert [payload for _, payload in mine] == [pool[seq % 5] for seq in frames["seq"].tolist()]


def test_the_quorum_consumer_on_a_queue_that_does_not_exist_is_broker_unavailable(rabbit):
    """The broker closes the channel of a consume on a queue it does not have (404): on one node reached directly the
    consumer's poll raises BrokerUnavailable naming it."""
    driver = get_driver("rabbitmq-quorum", rabbit["rabbitmq-quorum"], CLIENT)
    consumer = driver.consumer(f"bb-none-{time.monotonic_ns()}", "bb-check", [0])
    with pytest.raises(BrokerUnavailable, match="404"):
        for _ in range(20):
            consumer.poll(0.2)
    consumer.close()


def assert_streams_hold(driver, topic: str, pool: list[bytes]) -> None:
    """The three streams, read back by the driver's consumer (rstream), hold in order producer 6's 257 messages (lane
    by lane in turn, payloads from `pool`) and, on lane 0 after them, producer 7's 20 of b"abc"."""
    consumer = driver.consumer(topic, "bb-check", [0, 1, 2])
    got, deadline = [], time.monotonic() + 30
    try:
        while len(got) < 277 and time.monotonic() < deadline:
            got += consumer.poll(1.0)
    finally:
        consumer.close()
    for lane in range(3):
        mine = [(header, payload) for header, payload, at in got if at == lane]
        frames = unpack_many([header for header, _ in mine])
        expected = [(6, seq) for seq in range(lane, 257, 3)] + ([(7, seq) for seq in range(20)] if lane == 0 else [])
        assert list(zip(frames["producer"].tolist(), frames["seq"].tolist())) == expected
        assert [payload for _, payload in mine] == [pool[seq % 5] if pid == 6 else b"abc" for pid, seq in expected]


def test_the_python_loops_stream_producer_speaks_the_stream_protocol_itself_and_takes_each_confirm_once(rabbit):
    """The Python loop's stream producer on one node reached directly (rabbitmq_streams.wire), as the native stream
    loop below: 257 messages over three streams with a window of 10 and 20 in single mode, each confirmed once with a
    stamp no earlier than its send (single mode: each sent after the previous one's confirm came); each stream
    holds its messages in order, read back by the driver's consumer (rstream)."""
    endpoint = rabbit["rabbitmq-streams"]
    driver = get_driver("rabbitmq-streams", endpoint, CLIENT)
    topic = f"bb-python-streams-{time.monotonic_ns()}"
    driver.create_topic(topic, 3)
    pool = [bytes([i]) * (300 + i) for i in range(5)]
    try:
        producer = python_producer(driver, topic, 3)
        assert isinstance(producer, StreamsWireProducer)
        handed = python_sends(producer, 257, lambda seq: pool[seq % 5], lanes=3, producer_id=6)
        producer.close()
        single = python_producer(driver, topic, 1, "single")
        single_handed = python_sends(single, 20, lambda seq: b"abc", producer_id=7, flush_each=True)
        single.close()
        for answers, sent in ((producer.answers, handed), (single.answers, single_handed)):
            assert sorted(answers) == sorted(sent) and all(ok for ok, _ in answers.values())
            assert all(at >= sent[seq] for seq, (_, at) in answers.items())
        assert all(single_handed[seq + 1] >= single.answers[seq][1] for seq in range(19))
        assert_streams_hold(driver, topic, pool)
    finally:
        driver.delete_topic(topic, 3)


def test_the_stream_consumer_speaks_the_stream_protocol_itself_reads_each_message_once_and_stores_its_offset(
        rabbit):
    """The consumer on one node reached directly (rabbitmq_streams.wire.Subscriptions), with a credit of 2 chunks:
    held, it reads nothing; 3,000 messages over two streams in chunks of at most 10 (the producer's window) are each
    delivered once, in order, with their payloads (2 chunks of credit would stall it unless each chunk's credit came
    back); the broker counts 3,000 and, after close, the group's backlog is 0 (its offsets stored); a new consumer of
    the group reads from the first offset again; a stream deleted under it ends its subscription, and poll, commit
    and close go on without an error."""
    endpoint = rabbit["rabbitmq-streams"]
    driver = get_driver("rabbitmq-streams", endpoint, {**CLIENT, "rabbitmq_prefetch": 2})
    topic = f"bb-stream-consumer-{time.monotonic_ns()}"
    driver.create_topic(topic, 2)
    try:
        producer = python_producer(driver, topic, 2)
        python_sends(producer, 3000, lambda seq: b"payload %d" % seq, lanes=2, producer_id=3)
        producer.close()
        assert len(producer.answers) == 3000 and all(ok for ok, _ in producer.answers.values())
        consumer = driver.consumer(topic, "bb-group", [0, 1])
        assert isinstance(consumer, StreamsWireConsumer)
        consumer.hold(True)
        assert consumer.poll(0.3) == []
        consumer.hold(False)
        got, deadline = [], time.monotonic() + 60
        while len(got) < 3000 and time.monotonic() < deadline:
            got += consumer.poll(1.0)
        assert len(got) == 3000 and consumer.poll(0.5) == []
        for lane in (0, 1):
            mine = [(header, payload) for header, payload, at in got if at == lane]
            frames = unpack_many([header for header, _ in mine])
            assert frames["producer"].tolist() == [3] * 1500
            assert frames["seq"].tolist() == list(range(lane, 3000, 2))
            assert [payload for _, payload in mine] == [b"payload %d" % seq for seq in range(lane, 3000, 2)]
        consumer.commit()
        consumer.close()
        assert driver.message_count(topic, 2) == 3000
        assert driver.backlog(topic, "bb-group", 2) == 0
        again = driver.consumer(topic, "bb-group", [1])
        first = []
        while not first and time.monotonic() < deadline:
            first = again.poll(1.0)
        assert unpack_many([first[0][0]])["seq"].tolist() == [1] and first[0][2] == 1
        amqp.delete_lanes(endpoint, topic, 2)
        ended = time.monotonic() + 30
        while again._connection.active[0] and time.monotonic() < ended:
            again.poll(0.2)  # what was delivered before the deletion, then the broker's MetadataUpdate
        assert again._connection.active == [False] and again.poll(0.2) == []
        again.commit()
        again.close()
    finally:
        driver.delete_topic(topic, 2)


def test_the_native_stream_loop_publishes_each_message_once_and_takes_each_confirm(rabbit):
    """257 messages over three streams with a window of 10: every one confirmed once, none before it was handed over,
    each stream holds its messages in order (read back by the Python consumer, rstream), and in single mode each
    message is handed over only after the previous one's confirm came."""
    endpoint = rabbit["rabbitmq-streams"]
    driver = get_driver("rabbitmq-streams", endpoint, CLIENT)
    topic = f"bb-native-streams-{time.monotonic_ns()}"
    driver.create_topic(topic, 3)
    try:
        sender = driver.native_sender(topic, 3, "batch")
        pool = [bytes([i]) * (300 + i) for i in range(5)]
        sender.configure(pool, None, 6, time.monotonic_ns(), 0.0)
        handed, acked, acked_ns, failed = send_all(sender, 257)
        sender.close()
        assert failed.size == 0 and sorted(acked.tolist()) == list(range(257))
        assert (acked_ns >= handed[acked]).all()
        single = driver.native_sender(topic, 1, "single")
        single.configure([b"abc"], None, 7, time.monotonic_ns(), 0.0)
        handed, acked, acked_ns, failed = send_all(single, 20)
        single.close()
        assert failed.size == 0 and acked.tolist() == list(range(20)) and (handed[1:] >= acked_ns[:-1]).all()
        assert_streams_hold(driver, topic, pool)
    finally:
        driver.delete_topic(topic, 3)


def test_a_stream_that_does_not_exist_is_named_when_the_native_loop_starts(rabbit):
    endpoint = rabbit["rabbitmq-streams"]
    with pytest.raises(Exception, match="the stream does not exist"):
        get_driver("rabbitmq-streams", endpoint, CLIENT).native_sender(f"bb-none-{time.monotonic_ns()}", 1, "batch")


def test_a_management_api_too_busy_to_answer_in_time_is_asked_again_for_the_count(rabbit, toxiproxy):
    """The API behind a proxy that holds each answer 6 s (past the client's 5 s timeout), as a node starved of CPU
    does, for the first 8 s of the count: the pids and the count are asked again until it answers, and the count is
    every message routed into the queues (here, where nothing consumed them: what they hold)."""
    endpoint = rabbit["rabbitmq-quorum"]
    driver = get_driver("rabbitmq-quorum", endpoint, CLIENT)
    topic = f"bb-busy-api-{time.monotonic_ns()}"
    driver.create_topic(topic, 2)
    lifted = None
    try:
        sender = driver.native_sender(topic, 2, "batch")
        sender.configure([b"x" * 100], None, 1, time.monotonic_ns(), 0.0)
        _, acked, _, failed = send_all(sender, 40)
        time.sleep(driver.count_settle_s())  # as a cell's producer does: its channel's figures reported before close
        sender.close()
        assert failed.size == 0 and acked.size == 40
        api = urllib.parse.urlsplit(endpoint["management_url"])
        port = toxiproxy.proxy(f"management-{api.port}", api.port)
        busy = {**endpoint, "management_url": f"http://127.0.0.1:{port}"}
        nodes = management.node_pids(busy)
        toxiproxy.latency(f"management-{api.port}", 6000)
        lifted = threading.Timer(8.0, toxiproxy.latency, (f"management-{api.port}", 0))
        lifted.start()
        began = time.monotonic()
        assert management.node_pids(busy, wait_s=0) == nodes
        counted = management.published(busy, topic, 2, lambda: amqp.counts(endpoint, topic, 2))
        assert time.monotonic() - began >= 8.0  # asked through the slow spell, not around it
        assert counted == 40 == sum(amqp.counts(endpoint, topic, 2))
    finally:
        if lifted is not None:
            lifted.join()
        driver.delete_topic(topic, 2)


def test_the_streams_count_and_backlog_on_the_drivers_own_connection_agree_with_rstreams(rabbit):
    """On one node reached directly the count and the backlog read the streams on a stream-protocol connection of
    the driver's own (rabbitmq_streams.wire.Reader). The truth: 4,000 messages sent over three streams, 2,000 or more
    read and their offsets stored, 300 more sent: the count is 4,300 (the stored offsets take offsets of their own,
    and are not counted), the group's backlog the messages not read plus at most the stored offset of each stream
    (offsets, not messages), a group that stored nothing has every offset behind it, rstream's reading of the same
    streams gives the same figures, and an empty stream counts 0."""
    from brokerbench.brokers.rabbitmq_streams import driver as streams_driver

    endpoint = rabbit["rabbitmq-streams"]
    driver = get_driver("rabbitmq-streams", endpoint, CLIENT)
    topic = f"bb-stream-count-{time.monotonic_ns()}"
    names = [amqp.lane_queue(topic, lane) for lane in range(3)]
    driver.create_topic(topic, 3)
    driver.create_topic(f"{topic}-empty", 1)
    try:
        producer = python_producer(driver, topic, 3)
        python_sends(producer, 4000, lambda seq: b"x" * 100, lanes=3)
        consumer = driver.consumer(topic, "bb-count", [0, 1, 2])
        got, deadline = 0, time.monotonic() + 60
        while got < 2000 and time.monotonic() < deadline:
            got += len(consumer.poll(0.5))
        consumer.close()  # its offsets stored
        python_sends(producer, 300, lambda seq: b"x" * 100, first=4000, lanes=3)
        producer.close()
        assert len(producer.answers) == 4300 and all(ok for ok, _ in producer.answers.values())
        assert driver.message_count(topic, 3) == 4300
        assert driver._on_reader(lambda client: streams_driver._count(client, names), 60) == 4300
        parts = driver._wire_backlog_parts(names, "bb-count")
        assert parts == driver._on_reader(lambda client: streams_driver._backlog_parts(client, names, "bb-count"), 30)
        assert 4300 - got <= driver.backlog(topic, "bb-count", 3) <= 4300 - got + 3, (parts, got)
        assert driver.backlog(topic, "bb-nobody", 3) == sum(last - first + 1 for first, last in parts[0])
        assert driver.message_count(f"{topic}-empty", 1) == 0
    finally:
        driver.close()
        driver.delete_topic(topic, 3)
        driver.delete_topic(f"{topic}-empty", 1)


@pytest.mark.parametrize("broker", ["rabbitmq-quorum", "rabbitmq-streams"])
def test_a_cell_over_tls_delivers_everything_stamped_at_arrival(broker, rabbit, store, session_certificate,
                                                                monkeypatch):
    """The node's TLS listeners (amqps and the stream protocol's TLS port, the session's certificate trusted through
    SSL_CERT_FILE as a managed RabbitMQ's is through the system's store), named by a target with `tls`: the broker
    check, the Python loop's producer and the consumer speak TLS over their own sockets (socket_buffer.TlsSocket),
    every message arrives once, the broker's own count agrees, and confirms and deliveries are stamped at the
    ciphertext's arrival. The default loop is the Python one: the native loops do not speak TLS."""
    monkeypatch.setenv("SSL_CERT_FILE", str(session_certificate["ca"]))
    node = rabbit[broker]
    tls = {**node, "tls": True, "amqp_port": node["tls_amqp_port"], "stream_port": node["tls_stream_port"]}
    _, events, results = run({**TINY, "brokers": [broker], "formats": ["raw"], "modes": ["batch"]},
                             {**rabbit, broker: tls}, store)
    [cell] = results["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    assert cell["sent"] == cell["received"] > 0 and cell["lost"] == cell["duplicated"] == 0
    assert cell["broker_count"]["difference"] == 0
    [end] = [e["data"] for e in events if e["type"] == "CellCompleted"]
    assert end["send_loop"] == "python"
    assert (end["ack_stamps"], end["delivery_stamps"]) == ("arrival", "arrival")
    # what listens there speaks TLS only: a plain stream-protocol session is not answered
    if broker == "rabbitmq-streams":
        from brokerbench.brokers.rabbitmq_streams import wire

        with pytest.raises((OSError, ValueError)):
            wire.Session("127.0.0.1", node["tls_stream_port"], "guest", "guest", "/", 3).close()
