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
