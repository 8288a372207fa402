"""RabbitMQ as two plug-ins on one local node: registered, in the schema, loopback only, captions that say what a
confirm means; the quorum producer's confirm accounting and AMQP framing without a broker."""

import struct
from collections import OrderedDict

import pytest

from brokerbench import brokers, schema, spec
from brokerbench.brokers.rabbitmq import amqp, local, wire
from brokerbench.brokers.rabbitmq_quorum.driver import QuorumProducer
from brokerbench.brokers.rabbitmq_streams import wire as stream_wire
from brokerbench.brokers.rabbitmq_streams.driver import RabbitMQStreamsDriver
from brokerbench.drivers import BrokerUnavailable
from brokerbench.local.processes import HOST

CLIENT = spec.validate({"brokers": ["rabbitmq-streams"], "sizes": [1024], "rates": [100],
                        "formats": ["json"]})["client"]


def test_two_rows_share_one_local_service_and_their_settings():
    streams, quorum = brokers.plugin("rabbitmq-streams"), brokers.plugin("rabbitmq-quorum")
    assert streams.local is quorum.local and streams.local.name == "rabbitmq"
    # Amazon MQ serves quorum queues over AMQP; its endpoints list no stream-protocol port, so streams has no cloud
    assert streams.cloud is None and streams.where() == ["local", "external"]
    assert quorum.where() == ["local", "cloud: Amazon MQ for RabbitMQ", "external"]
    assert streams.settings.client is quorum.settings.client and streams.settings.target is quorum.settings.target
    assert brokers.families()["rabbitmq-stream"] is streams and brokers.families()["rabbitmq-amqp"] is quorum
    assert (streams.libraries, quorum.libraries) == (("rstream",), ("pika",))


def test_their_settings_reach_the_schema_and_a_run_request():
    props = schema.generated()["properties"]
    assert {"rabbitmq-streams", "rabbitmq-quorum"} <= set(props["brokers"]["items"]["anyOf"][0]["enum"])
    assert props["targets"]["properties"]["rabbitmq-quorum"]["required"] == ["host", "amqp_port"]
    assert CLIENT["rabbitmq_in_flight"] == 1000 and CLIENT["rabbitmq_prefetch"] == 1000
    with pytest.raises(spec.SpecError) as refused:
        spec.validate({"brokers": ["rabbitmq-quorum"], "sizes": [1024], "rates": [100], "formats": ["json"],
                       "client": {"rabbitmq_in_flight": 0}})
    assert "client.rabbitmq_in_flight" in {p.path for p in refused.value.problems}


def test_the_node_listens_on_loopback_only_on_the_ports_it_was_given(tmp_path):
    assert set(local.config(5672, 5552, 15672).splitlines()) >= {
        f"listeners.tcp.1 = {HOST}:5672", f"stream.listeners.tcp.1 = {HOST}:5552",
        f"stream.advertised_host = {HOST}", "stream.advertised_port = 5552",
        f"management.tcp.ip = {HOST}", "management.tcp.port = 15672"}
    env = local.environment(tmp_path, {"amqp_port": 5672, "dist_port": 25672, "epmd_port": 4369})
    assert env["RABBITMQ_NODE_IP_ADDRESS"] == HOST and env["ERL_EPMD_ADDRESS"] == HOST
    assert (env["RABBITMQ_NODE_PORT"], env["RABBITMQ_DIST_PORT"], env["ERL_EPMD_PORT"]) == ("5672", "25672", "4369")
    assert "inet_dist_use_interface {127,0,0,1}" in env["RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS"]
    # Nothing of the node lives outside its folder, and no system-wide configuration is read.
    for key in ("HOME", "RABBITMQ_MNESIA_BASE", "RABBITMQ_BASE", "RABBITMQ_LOG_BASE", "RABBITMQ_CONFIG_FILE",
                "RABBITMQ_ENABLED_PLUGINS_FILE", "RABBITMQ_CONF_ENV_FILE"):
        assert env[key].startswith(str(tmp_path)), key


def test_tls_listeners_are_added_with_the_certificate_named_and_bad_settings_refused(tmp_path):
    files = {name: tmp_path / f"{name}.pem" for name in ("cert", "key", "ca")}
    for path in files.values():
        path.write_text("pem")
    tls = {name: str(path) for name, path in files.items()}
    assert set(local.tls_config({"rabbitmq_tls": tls}, 5671, 5551).splitlines()) >= {
        f"listeners.ssl.1 = {HOST}:5671", f"stream.listeners.ssl.1 = {HOST}:5551", "stream.advertised_tls_port = 5551",
        f"ssl_options.certfile = {files['cert']}", f"ssl_options.keyfile = {files['key']}",
        f"ssl_options.cacertfile = {files['ca']}"}
    for wrong, said in (({"cert": tls["cert"], "key": tls["key"]}, "rabbitmq_tls"), ("yes", "rabbitmq_tls"),
                        ({**tls, "ca": str(tmp_path / "no.pem")}, "no.pem")):
        with pytest.raises(local.StackError, match=said):
            local.tls_config({"rabbitmq_tls": wrong}, 5671, 5551)
    assert "ssl" not in local.config(5672, 5552, 15672)  # none without the setting


def test_captions_and_recorded_settings_say_what_a_confirm_waits_for():
    quorum, streams = brokers.plugin("rabbitmq-quorum"), brokers.plugin("rabbitmq-streams")
    assert quorum.describe_mode("batch", CLIENT, {}) == \
        "batch = up to 1000 unconfirmed, confirm after fsync on a Raft majority (quorum queue)"
    assert streams.describe_mode("single", CLIENT, {}) == \
        "single = one unconfirmed at a time, confirm after a majority of replicas wrote it, no fsync (stream)"
    from brokerbench.brokers.rabbitmq_quorum import environment as quorum_env
    from brokerbench.brokers.rabbitmq_streams import environment as streams_env

    assert quorum_env.settings_in_force({}, CLIENT)["persistence"]["fsync"] is True
    recorded = streams_env.settings_in_force({}, CLIENT)
    assert recorded["persistence"]["fsync"] is False and recorded["modes"]["batch"]["in_flight"] == 1000


def test_an_endpoint_without_its_stream_port_or_password_is_refused_naming_the_field(monkeypatch):
    with pytest.raises(BrokerUnavailable, match=r"targets\.rabbitmq-streams\.stream_port"):
        RabbitMQStreamsDriver({"host": "h", "amqp_port": 5672}, CLIENT)._stream_endpoint()
    monkeypatch.delenv("BB_TEST_RABBIT_PASSWORD", raising=False)
    with pytest.raises(BrokerUnavailable, match="BB_TEST_RABBIT_PASSWORD"):
        amqp.credentials({"host": "h", "username": "bench", "password_env": "BB_TEST_RABBIT_PASSWORD"})
    monkeypatch.setenv("BB_TEST_RABBIT_PASSWORD", "s3cret")
    assert amqp.credentials({"host": "h", "username": "bench", "password_env": "BB_TEST_RABBIT_PASSWORD"}) == \
        ("bench", "s3cret")


def test_a_quorum_cells_channels_stay_open_for_the_nodes_statistics_period_where_the_management_api_counts():
    """The settle wait follows the period the node reports its channels' figures in: the local node's 250 ms (its
    endpoint says so) gives 1.25 s, a target that does not say gives 2.5 s, one without a management API none."""
    from brokerbench.brokers.rabbitmq_quorum.driver import RabbitMQQuorumDriver

    def settle(**endpoint):
        return RabbitMQQuorumDriver({"host": "h", "amqp_port": 5672, **endpoint}, CLIENT).count_settle_s()

    assert settle(management_url="http://h:15672", stats_interval_ms=local.STATS_INTERVAL_MS) == 1.25
    assert settle(management_url="http://h:15672", stats_interval_ms=5000) == 25.0  # RabbitMQ's default period
    assert settle(management_url="http://h:15672") == 2.5
    assert settle(stats_interval_ms=250) == 0.0
    request = {"brokers": ["rabbitmq-quorum"], "sizes": [1024], "rates": [100], "formats": ["json"]}
    spec.validate({**request, "targets": {"rabbitmq-quorum": {"host": "h", "amqp_port": 5672,
                                                              "stats_interval_ms": 5000}}})
    with pytest.raises(spec.SpecError) as refused:
        spec.validate({**request, "targets": {"rabbitmq-quorum": {"host": "h", "amqp_port": 5672,
                                                                  "stats_interval_ms": 0}}})
    assert "targets.rabbitmq-quorum.stats_interval_ms" in {p.path for p in refused.value.problems}


def test_a_multiple_confirm_acknowledges_every_tag_up_to_it_once_and_a_nack_fails_its_message():
    acks = []
    producer = QuorumProducer.__new__(QuorumProducer)  # its confirm accounting alone, without a connection
    producer._on_ack = lambda header, ok, at: acks.append((header, ok, at))
    producer._in_flight = OrderedDict((tag, b"h%d" % tag) for tag in range(1, 6))
    producer._confirmed(3, True, True, 11)
    assert not producer._refused  # confirms alone leave the channel as it is
    producer._confirmed(5, False, False, 12)
    assert producer._refused  # a refusal: the channel is replaced before the next publish (on a cluster)
    producer._confirmed(3, True, True, 13)  # again: nothing left up to 3
    assert acks == [(b"h1", True, 11), (b"h2", True, 11), (b"h3", True, 11), (b"h5", False, 12)]
    assert list(producer._in_flight) == [4]


def test_amqp_frames_are_read_whole_and_confirms_and_closes_taken_from_them():
    """The producer's AMQP framing (rabbitmq.wire), against the specification's layout: a Basic.Ack of tag 7
    (multiple), a Basic.Nack of tag 9, and a Channel.Close (404) after them; a frame cut short waits for its rest."""
    ack = wire.method_frame(1, wire.BASIC_ACK, struct.pack(">QB", 7, 1))
    nack = wire.method_frame(1, wire.BASIC_NACK, struct.pack(">QB", 9, 2))
    close = wire.method_frame(1, wire.CHANNEL_CLOSE, struct.pack(">HB", 404, 9) + b"NOT_FOUND" + bytes(4))
    assert ack == b"\x01\x00\x01\x00\x00\x00\x0d\x00\x3c\x00\x50" + bytes([0] * 7) + b"\x07\x01\xce"
    data = ack + nack + close[:5]
    found, at = wire.frames(data, 0)
    assert [kind for kind, _, _ in found] == [wire.METHOD, wire.METHOD] and at == len(ack + nack)
    connection = wire.Connection.__new__(wire.Connection)  # its parsing alone, without a socket
    connection.buffer, connection.at, connection.channel = ack + nack + close, 0, 1
    confirms, closed = connection.confirms()
    assert confirms == [(7, True, True), (9, False, False)]
    assert isinstance(closed, wire.Closed) and closed.channel and "404 NOT_FOUND" in str(closed)
    with pytest.raises(ConnectionError, match="end marker"):
        wire.frames(ack[:-1] + b"\x00", 0)


def test_stream_publish_frames_hold_at_most_the_frame_size_and_answers_are_read_in_order():
    """The direct stream producer's framing (rabbitmq_streams.wire), against the protocol's layout: a Publish frame is
    [size][key 2][version 1][publisher id][count] then (publishing id, size, data) each, split where the next message
    would pass the frame size; PublishConfirm and PublishError answer publishing ids; a MetadataUpdate ends the
    connection."""
    messages = [(n, bytes([n]) * 100) for n in range(1, 6)]  # 112 bytes each in a frame
    frames = stream_wire.publish_frames(3, messages, frame_max=13 + 2 * 112)
    assert [len(f) for f in frames] == [13 + 2 * 112, 13 + 2 * 112, 13 + 112]
    assert frames[0][:13] == struct.pack(">IHHBI", 9 + 2 * 112, 2, 1, 3, 2)
    assert frames[2][13:] == struct.pack(">QI", 5, 100) + bytes([5]) * 100
    confirm = struct.pack(">IHHBI", 9 + 16, 3, 1, 3, 2) + struct.pack(">QQ", 1, 2)
    error = struct.pack(">IHHBI", 9 + 10, 4, 1, 3, 1) + struct.pack(">QH", 4, 2)
    moved = struct.pack(">IHHH", 6, 0x10, 1, 6)
    found, at = stream_wire.frames(confirm + error + moved + confirm[:7], 0)
    assert at == len(confirm + error + moved)
    assert stream_wire.answers(found) == ([(1, True), (2, True), (4, False)],
                                          "RabbitMQ moved or deleted a stream the producer publishes to (code 6)")


def test_an_amazon_mq_endpoint_connects_over_tls_with_the_password_from_its_secret(monkeypatch):
    """Amazon MQ's endpoint names the secret its provider stored ({"username", "password"}); the password is read
    from Secrets Manager (moto: no real AWS here) once per process and never travels in the endpoint."""
    import json

    import boto3
    from moto import mock_aws

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        arn = boto3.client("secretsmanager").create_secret(
            Name="brokerbench/bb-run-rabbitmq-quorum",
            SecretString=json.dumps({"username": "brokerbench", "password": "s3cret"}))["ARN"]
        endpoint = {"host": "b-1.mq.us-east-1.amazonaws.com", "amqp_port": 5671, "tls": True,
                    "username": "brokerbench", "password_secret_arn": arn}
        [params] = amqp.parameters(endpoint)
    assert (params.credentials.username, params.credentials.password) == ("brokerbench", "s3cret")
    assert params.ssl_options is not None and params.ssl_options.server_hostname == endpoint["host"]
    assert params.port == 5671
    assert amqp.parameters({"host": HOST, "amqp_port": 5672})[0].ssl_options is None  # the local node: plain AMQP


@pytest.mark.parametrize("broker, fsync", [("rabbitmq-quorum", True), ("rabbitmq-streams", False)])
def test_each_row_states_its_durability(broker, fsync):
    one = brokers.plugin(broker).state_durability({}, {"nodes": 1})
    three = brokers.plugin(broker).state_durability({}, {"nodes": 3})
    assert (one["fsync"], one["replicas"], one["memory_only"]) == (fsync, 0, False)
    assert three["replicas"] == 1  # a majority of 3: one other member


def deliver(subscription: int, first: int, entries: list[bytes], kind: int = 0, records: int | None = None) -> bytes:
    """A Deliver frame (version 1) as the protocol lays it out: [size][key 8][version 1][subscription id], then the
    osiris chunk: magic and version, chunk type, entries, records, timestamp, epoch, first offset, CRC, data length,
    trailer length, reserved, then the entries."""
    data = b"".join(entries)
    chunk = struct.pack(">BBHIqQQIIII", 0x50, kind, len(entries), len(entries) if records is None else records,
                        1_700_000_000_000, 1, first, 0, len(data), 0, 0) + data
    return struct.pack(">IHHB", 5 + len(chunk), 8, 1, subscription) + chunk


def simple(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def message(n: int) -> bytes:
    return bytes([n]) * 20 + b"payload-%d" % n  # a 20-byte header, then the payload


@pytest.fixture
def subscriptions():
    """A consumer connection's parsing on one end of a real socket pair (the broker's side: the other end), with
    two subscriptions: id 0 on lane 4, id 1 on lane 7, both active."""
    import socket

    ours, broker = socket.socketpair()
    connection = stream_wire.Subscriptions.__new__(stream_wire.Subscriptions)
    connection.sock, connection.buffer, connection.at = ours, b"", 0
    connection.track(["s-4", "s-7"], [4, 7], 20)
    connection.active = [True, True]
    broker.settimeout(1)
    yield connection, broker
    ours.close()
    broker.close()


def credits(broker) -> list[tuple[int, int]]:
    """The Credit frames the consumer wrote: (subscription id, chunks) each."""
    data = broker.recv(1 << 16)
    found, at = stream_wire.frames(data, 0)
    assert at == len(data) and all(key == stream_wire.CREDIT for key, _ in found)
    return [struct.unpack(">BH", content) for _, content in found]


def test_a_chunks_entries_are_read_in_order_with_their_offsets_and_its_credit_given_back(subscriptions):
    connection, broker = subscriptions
    broker.sendall(deliver(0, 100, [simple(message(n)) for n in range(3)]))
    assert connection.receive(1)
    assert connection.take() == [(bytes([n]) * 20, b"payload-%d" % n, 4) for n in range(3)]
    assert connection.last == [102, None] and credits(broker) == [(0, 1)]


def test_a_chunk_split_across_reads_is_taken_once_whole(subscriptions):
    connection, broker = subscriptions
    frame = deliver(1, 0, [simple(message(n)) for n in range(5)])
    for part in (frame[:5], frame[5:60], frame[60:-1]):
        broker.sendall(part)
        assert connection.receive(1)
        assert connection.take() == []
    broker.sendall(frame[-1:])
    assert connection.receive(1)
    assert [payload for _, payload, _ in connection.take()] == [b"payload-%d" % n for n in range(5)]
    assert connection.last == [None, 4] and credits(broker) == [(1, 1)]


def test_two_chunks_in_one_read_each_give_their_credit_back_in_one_write(subscriptions):
    """Two chunks of subscription 0 and one of subscription 1 in one read: one Credit frame per subscription, for
    its chunks; a tracking chunk (type 1, a stored offset) delivers nothing and gives its credit back too."""
    connection, broker = subscriptions
    broker.sendall(deliver(0, 0, [simple(message(1))]) + deliver(1, 10, [simple(message(2))])
                   + deliver(0, 1, [simple(message(3)), simple(message(4))]) + deliver(0, 3, [b"track"], kind=1))
    assert connection.receive(1)
    assert [(payload, lane) for _, payload, lane in connection.take()] == [
        (b"payload-1", 4), (b"payload-2", 7), (b"payload-3", 4), (b"payload-4", 4)]
    assert connection.last == [2, 10] and sorted(credits(broker)) == [(0, 3), (1, 1)]


def test_records_below_the_offset_subscribed_from_are_passed_over(subscriptions):
    """Subscribed from offset 12, the broker starts at the chunk that holds it (first offset 10)."""
    connection, broker = subscriptions
    connection.wanted[0] = 12
    broker.sendall(deliver(0, 10, [simple(message(n)) for n in range(4)]))
    assert connection.receive(1)
    assert [payload for _, payload, _ in connection.take()] == [b"payload-2", b"payload-3"]
    assert connection.last[0] == 13


def test_an_uncompressed_sub_entry_batch_is_read_and_a_compressed_one_refused(subscriptions):
    """A sub-entry batch: [1 bit set, compression 3 bits, 4 reserved][records 2][uncompressed size 4][size 4], then
    [size][data] records; its records take an offset each."""
    connection, broker = subscriptions
    records = simple(message(5)) + simple(message(6))
    batch = struct.pack(">BHII", 0x80, 2, len(records), len(records)) + records
    broker.sendall(deliver(0, 0, [batch, simple(message(7))], records=3))
    assert connection.receive(1)
    assert [payload for _, payload, _ in connection.take()] == [b"payload-5", b"payload-6", b"payload-7"]
    assert connection.last[0] == 2
    gzip = struct.pack(">BHII", 0x90, 2, len(records), len(records)) + records
    broker.sendall(deliver(0, 3, [gzip], records=2))
    assert connection.receive(1)
    with pytest.raises(stream_wire.ProtocolError, match="compressed sub-entry batch"):
        connection.take()


def test_a_deleted_stream_ends_its_subscription_alone_and_a_close_ends_the_connection(subscriptions):
    connection, broker = subscriptions
    name = b"s-4"
    moved = struct.pack(">IHHHH", 8 + len(name), 0x10, 1, 6, len(name)) + name
    broker.sendall(moved + deliver(0, 0, [simple(message(1))]) + deliver(1, 0, [simple(message(2))]))
    assert connection.receive(1)
    assert [(payload, lane) for _, payload, lane in connection.take()] == [(b"payload-2", 7)]
    assert connection.active == [False, True] and "stream s-4" in connection.dropped[0]
    assert credits(broker) == [(1, 1)]  # none for the subscription that ended
    close = struct.pack(">IHHIH", 10 + 2, 0x16, 1, 1, 0x11) + struct.pack(">H", 0)
    broker.sendall(close)
    assert connection.receive(1)
    assert connection.take() == [] and "code 17" in connection.ended
