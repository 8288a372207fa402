"""Apache Pulsar as a plug-in: discovered, in the schema, loopback only; the driver's accounting without a broker."""

import threading
import time

import pulsar
import pytest

from brokerbench import brokers, schema, spec
from brokerbench.brokers.pulsar import driver, local
from brokerbench.brokers.pulsar.admin import AdminError
from brokerbench.local.processes import HOST

CLIENT = spec.validate({"brokers": ["pulsar"], "sizes": [1024], "rates": [100], "formats": ["json"]})["client"]


def test_it_is_registered_with_its_modes_and_persistence_and_no_cloud():
    plugin = brokers.plugin("pulsar")
    assert plugin.family == "pulsar" and brokers.families()["pulsar"] is plugin
    assert set(plugin.capabilities.modes) == {"batch", "single"}
    assert list(plugin.capabilities.persistence) == ["persistent", "non-persistent"]  # the default first
    assert plugin.cloud is None and plugin.where() == ["local", "external"]
    assert plugin.local.name == "pulsar" and brokers.local_services()["pulsar"][0] == "pulsar"
    assert plugin.libraries == ("pulsar-client",)


def test_its_settings_reach_the_schema_and_a_run_request():
    props = schema.generated()["properties"]
    assert "pulsar" in props["brokers"]["items"]["anyOf"][0]["enum"]
    assert props["targets"]["properties"]["pulsar"]["required"] == ["service_url", "admin_url"]
    assert set(props["provision"]["properties"]["pulsar"]["properties"]) == {"version"}
    assert props["client"]["properties"]["pulsar_topic_type"]["enum"] == ["persistent", "non-persistent"]
    assert "pulsar" in props["targets"]["additionalProperties"]["properties"]["driver"]["enum"]
    assert CLIENT["pulsar_topic_type"] == "persistent" and CLIENT["pulsar_batch_delay_ms"] == 5
    target = {"driver": "pulsar", "service_url": "pulsar://10.0.0.7:6650", "admin_url": "http://10.0.0.7:8080"}
    full = spec.validate({"brokers": ["pulsar", "other-pulsar"], "sizes": [1024], "rates": [100], "formats": ["json"],
                          "modes": ["batch", "single"], "targets": {"other-pulsar": target},
                          "client": {"pulsar_topic_type": "non-persistent"}})
    assert {c["broker"] for c in spec.expand(full)} == {"pulsar", "other-pulsar"}
    with pytest.raises(spec.SpecError) as refused:
        spec.validate({"brokers": ["pulsar"], "sizes": [1024], "rates": [100], "formats": ["json"],
                       "targets": {"pulsar": {"service_url": "http://x:6650", "admin_url": "http://x:8080"}}})
    assert "targets.pulsar.service_url" in {p.path for p in refused.value.problems}


def test_start_binds_the_standalone_to_loopback_on_the_ports_it_was_given(tmp_path, monkeypatch):
    spawned = []
    (tmp_path / "lib").mkdir()
    monkeypatch.setattr(local, "lib_dir", lambda component: tmp_path / "lib")
    monkeypatch.setattr(local, "spawn", lambda cmd, cwd, log: spawned.append((cmd, cwd)) or 101)
    free = iter([6650, 8080, 3181])
    started = local.PulsarService().start(tmp_path, lambda: next(free), {})
    assert started.pids == [101] and started.port == 6650
    assert started.endpoint == {"service_url": f"pulsar://{HOST}:6650", "admin_url": f"http://{HOST}:8080",
                                "version": "unknown", "journal_sync_data": False}
    conf = set((tmp_path / "standalone.conf").read_text().splitlines())
    assert "journalSyncData=false" in conf  # what the endpoint states
    assert {f"bindAddress={HOST}", f"advertisedAddress={HOST}", "brokerServicePort=6650", "webServicePort=8080",
            "listeningInterface=lo", "allowAutoTopicCreation=false", "functionsWorkerEnabled=false"} <= conf
    cmd, cwd = spawned[0]
    assert cwd == tmp_path / "data" and "org.apache.pulsar.PulsarStandaloneStarter" in cmd
    assert cmd[cmd.index("--bookkeeper-port") + 1] == "3181" and "-Xms512m" in cmd and "-Xmx512m" in cmd
    assert not [arg for arg in cmd if arg.startswith("-XX:SharedArchiveFile")]  # none recorded yet
    local.class_archive().touch()
    local.PulsarService().start(tmp_path, iter([1, 2, 3]).__next__, {})
    assert f"-XX:SharedArchiveFile={local.class_archive()}" in spawned[1][0]


def test_a_proxied_listener_is_advertised_beside_the_brokers_own_address(tmp_path, monkeypatch):
    (tmp_path / "lib").mkdir()
    monkeypatch.setattr(local, "lib_dir", lambda component: tmp_path / "lib")
    monkeypatch.setattr(local, "spawn", lambda cmd, cwd, log: 101)
    local.PulsarService().start(tmp_path, iter([6650, 8080, 3181]).__next__, {"pulsar_proxied_listener": 7000})
    conf = (tmp_path / "standalone.conf").read_text().splitlines()
    assert f"advertisedListeners=internal:pulsar://{HOST}:6650,proxied:pulsar://{HOST}:7000" in conf
    assert "internalListenerName=internal" in conf and "brokerServicePort=6650" in conf
    assert not [line for line in conf if line.startswith("advertisedAddress=")]  # Pulsar refuses both together
    for wrong in (6650, "7000", 70000, True):
        with pytest.raises(local.StackError, match="pulsar_proxied_listener"):
            local.PulsarService().start(tmp_path, iter([6650, 8080, 3181]).__next__, {"pulsar_proxied_listener": wrong})


def test_a_tls_port_is_served_with_the_certificate_named(tmp_path, monkeypatch):
    """Setting pulsar_tls: the broker's binary protocol also on a TLS port of its own (the fourth port taken, kept in
    the service's extras so a restart takes it again), with the named certificate; the endpoint names its
    pulsar+ssl:// address. Bad settings are refused by name before anything starts."""
    (tmp_path / "lib").mkdir()
    monkeypatch.setattr(local, "lib_dir", lambda component: tmp_path / "lib")
    monkeypatch.setattr(local, "spawn", lambda cmd, cwd, log: 101)
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_text("c")
    key.write_text("k")
    tls = {"cert": str(cert), "key": str(key)}
    started = local.PulsarService().start(tmp_path, iter([6650, 8080, 3181, 6651]).__next__, {"pulsar_tls": tls})
    conf = (tmp_path / "standalone.conf").read_text().splitlines()
    assert {"brokerServicePortTls=6651", f"tlsCertificateFilePath={cert}", f"tlsKeyFilePath={key}"} <= set(conf)
    assert started.endpoint["tls_service_url"] == f"pulsar+ssl://{HOST}:6651" and started.extra["tls_port"] == 6651
    plain = local.PulsarService().start(tmp_path, iter([6650, 8080, 3181]).__next__, {})
    assert "tls_service_url" not in plain.endpoint and "tls_port" not in plain.extra
    assert not [line for line in (tmp_path / "standalone.conf").read_text().splitlines() if "Tls=" in line]
    for wrong, said in (({"cert": str(cert)}, "pulsar_tls"), ({**tls, "key": str(tmp_path / "no.pem")}, "no.pem"),
                        ("yes", "pulsar_tls")):
        with pytest.raises(local.StackError, match=said):
            local.PulsarService().start(tmp_path, iter([6650, 8080, 3181, 6651]).__next__, {"pulsar_tls": wrong})
    with pytest.raises(local.StackError, match="pulsar_proxied_listener"):
        local.PulsarService().start(tmp_path, iter([6650, 8080, 3181, 6651]).__next__,
                                    {"pulsar_tls": tls, "pulsar_proxied_listener": 7000})


def test_a_target_may_be_reached_over_tls():
    target = {"driver": "pulsar", "service_url": "pulsar+ssl://10.0.0.7:6651", "admin_url": "http://10.0.0.7:8080"}
    request = {"brokers": ["far"], "sizes": [1024], "rates": [100], "formats": ["json"]}
    full = spec.validate({**request, "targets": {"far": target}})
    assert driver.PulsarDriver(full["targets"]["far"], CLIENT).tls
    assert not driver.PulsarDriver({**target, "service_url": "pulsar://10.0.0.7:6650"}, CLIENT).tls
    for wrong in ("pulsar+tls://10.0.0.7:6651", "ssl://10.0.0.7:6651", "http://10.0.0.7:8080"):
        with pytest.raises(spec.SpecError) as refused:
            spec.validate({**request, "targets": {"far": {**target, "service_url": wrong}}})
        assert "targets.far.service_url" in {p.path for p in refused.value.problems}


def test_a_target_may_name_the_listener_its_client_connects_through():
    target = {"driver": "pulsar", "service_url": "pulsar://10.0.0.7:6650", "admin_url": "http://10.0.0.7:8080"}
    request = {"brokers": ["far"], "sizes": [1024], "rates": [100], "formats": ["json"]}
    full = spec.validate({**request, "targets": {"far": {**target, "listener_name": "external_1"}}})
    assert full["targets"]["far"]["listener_name"] == "external_1"
    made = driver.PulsarDriver(full["targets"]["far"], CLIENT)
    assert made.describe()["listener_name"] == "external_1"
    assert "listener_name" not in driver.PulsarDriver(target, CLIENT).describe()
    for wrong in ("", "a b", "pulsar://x", 7):
        with pytest.raises(spec.SpecError) as refused:
            spec.validate({**request, "targets": {"far": {**target, "listener_name": wrong}}})
        assert "targets.far.listener_name" in {p.path for p in refused.value.problems}


def test_the_installed_version_is_the_broker_jars_not_a_siblings(tmp_path, monkeypatch):
    monkeypatch.setattr(local, "lib_dir", lambda component: tmp_path)
    assert local.PulsarService().installed_version() is None
    for name in ("pulsar-broker-common-4.0.7.jar", "pulsar-broker-auth-sasl-4.0.7.jar", "pulsar-broker-4.0.7.jar"):
        (tmp_path / name).touch()
    assert local.PulsarService().installed_version() == "4.0.7"


class FakeAdmin:
    """Per-partition stats and backlog analyses as the admin API returns them."""

    def __init__(self, stats: dict, analyses: dict | None = None) -> None:
        self.stats_by_topic, self.analyses, self.analyzed = stats, analyses or {}, []
        self.started = 1_795_600_000_000  # the broker's JVM start (ms), as its metrics give it

    def create_partitioned(self, topic, partitions):
        pass

    def started_at(self):
        return self.started

    def stats(self, topic):
        return self.stats_by_topic[topic]

    def analyze_backlog(self, topic, subscription, timeout_s=None):
        self.analyzed.append(topic)
        if isinstance(self.analyses[topic], Exception):
            raise self.analyses[topic]
        return self.analyses[topic]


def pulsar_driver(admin, topic_type="persistent"):
    made = driver.PulsarDriver({"service_url": "pulsar://h:6650", "admin_url": "http://h:8080"},
                               {**CLIENT, "pulsar_topic_type": topic_type})
    made.admin = admin
    return made


def partition(n):
    return f"persistent://public/default/t-partition-{n}"


def test_the_backlog_counts_the_messages_of_batched_entries_and_is_unknown_when_the_broker_cannot_tell():
    attached = [{"consumerName": "c"}]
    stats = {partition(0): {"msgInCounter": 500, "subscriptions": {"g": {"msgBacklog": 0, "consumers": attached}}},
             partition(1): {"msgInCounter": 700, "subscriptions": {"g": {"msgBacklog": 3, "backlogSize": 240 * 1100,
                                                                         "consumers": attached}}}}
    admin = FakeAdmin(stats, {partition(1): {"entries": 3, "messages": 240, "aborted": False}})
    assert pulsar_driver(admin).backlog("t", "g", 2) == 240  # three entries, batches of 80
    assert admin.analyzed == [partition(1)]  # an empty backlog is not read
    counting = pulsar_driver(admin)
    counting.create_topic("t", 2)
    assert counting.message_count("t", 2) == 1200
    admin.started += 60_000  # the broker restarted since the topic was made: its in-memory counter started again
    assert counting.message_count("t", 2) is None
    assert pulsar_driver(FakeAdmin(stats)).message_count("t", 2) is None  # no topic made: no start to compare with
    cut_short = FakeAdmin(stats, {partition(1): {"entries": 1, "messages": 80, "aborted": True}})
    assert pulsar_driver(cut_short).backlog("t", "g", 2) is None
    failing = FakeAdmin(stats, {partition(1): AdminError(500, "no")})
    assert pulsar_driver(failing).backlog("t", "g", 2) is None
    assert pulsar_driver(FakeAdmin(stats)).backlog("t", "other-group", 2) == 0  # not subscribed: nothing held for it
    assert pulsar_driver(admin, "non-persistent").backlog("t", "g", 2) is None
    assert pulsar_driver(admin, "non-persistent").message_count("t", 2) is None


def test_a_large_backlog_is_read_back_only_once_the_consumers_have_left():
    large = driver.SAMPLE_MAX_ENTRIES + 1
    while_consuming = {partition(0): {"subscriptions": {"g": {"msgBacklog": large, "backlogSize": 1024,
                                                              "consumers": [{"c": 1}]}}}}
    admin = FakeAdmin(while_consuming)
    assert pulsar_driver(admin).backlog("t", "g", 1) is None and admin.analyzed == []
    # A few entries, but batches of a megabyte each: too many bytes to read back while the consumer reads them too.
    big_batches = {partition(0): {"subscriptions": {"g": {"msgBacklog": 10, "backlogSize": driver.SAMPLE_MAX_BYTES + 1,
                                                          "consumers": [{"c": 1}]}}}}
    admin = FakeAdmin(big_batches)
    assert pulsar_driver(admin).backlog("t", "g", 1) is None and admin.analyzed == []
    unsized = {partition(0): {"subscriptions": {"g": {"msgBacklog": 10, "consumers": [{"c": 1}]}}}}
    admin = FakeAdmin(unsized)  # no size given: what reading it back costs is unknown
    assert pulsar_driver(admin).backlog("t", "g", 1) is None and admin.analyzed == []
    after = {partition(0): {"subscriptions": {"g": {"msgBacklog": large, "consumers": []}}}}
    admin = FakeAdmin(after, {partition(0): {"entries": large, "messages": 5 * large, "aborted": False}})
    assert pulsar_driver(admin).backlog("t", "g", 1) == 5 * large


class FakeProducer:
    """Acknowledges from its own thread, as the client's I/O thread does."""

    def __init__(self, answer=pulsar.Result.Ok) -> None:
        self.answer, self.bodies = answer, []

    def send_async(self, body, callback):
        self.bodies.append(body)
        if self.answer is not None:
            threading.Thread(target=callback, args=(self.answer, None)).start()


class FakeClient:
    closed = False

    def close(self):
        self.closed = True


def test_acknowledgements_reach_on_ack_only_in_poll_and_flush_on_the_callers_thread():
    acks, threads = [], []
    producers = [FakeProducer(), FakeProducer(pulsar.Result.Timeout)]
    producer = driver.PulsarProducer(FakeClient(), producers, lambda h, ok, at: (acks.append((h, ok)),
                                                                                threads.append(threading.get_ident())))
    producer.send(b"h0", b"payload", 0)
    producer.send(b"h1", b"payload", 1)
    assert producers[0].bodies == [b"\x02h0payload"] and producers[1].bodies == [b"\x02h1payload"]
    assert producer.flush(5) == 0
    assert sorted(acks) == [(b"h0", True), (b"h1", False)] and set(threads) == {threading.get_ident()}
    silent = driver.PulsarProducer(FakeClient(), [FakeProducer(answer=None)], lambda h, ok, at: None)
    silent.send(b"h", b"p", 0)
    assert silent.flush(0.05) == 1  # still unacknowledged when the wait is over


def test_an_acknowledgement_carries_the_time_it_arrived_not_the_time_the_worker_took_it():
    """The client's callback stamps the time; the worker serves it later (here 50 ms later) with that time."""
    stamped = []
    producer = driver.PulsarProducer(FakeClient(), [FakeProducer()], lambda h, ok, at: stamped.append(at))
    before = time.monotonic_ns()
    producer.send(b"h", b"p", 0)
    while not producer._results:  # the callback has run on its own thread
        time.sleep(0.001)
    arrived = time.monotonic_ns()
    time.sleep(0.05)
    producer.poll(0)
    [at] = stamped
    assert before <= at <= arrived < time.monotonic_ns() - 40_000_000


class FakeMessage:
    def __init__(self, topic, body):
        self.topic, self.body = topic, body

    def data(self):
        return self.body

    def topic_name(self):
        return self.topic


class FakeConsumer:
    def __init__(self, messages):
        self.messages, self.acknowledged, self.closed = list(messages), [], False

    def receive(self, timeout_ms):
        if not self.messages:
            raise pulsar.Timeout()
        return self.messages.pop(0)

    def acknowledge_cumulative(self, message):
        self.acknowledged.append(message)

    def close(self):
        self.closed = True


def test_a_poll_returns_header_payload_and_partition_and_acknowledges_each_partitions_last_with_the_next():
    first, second, third = (FakeMessage(partition(p), b"\x03hdr" + bytes([p])) for p in (2, 5, 2))
    consumer = FakeConsumer([first, second, third])
    client = FakeClient()
    polled = driver.PulsarConsumer(client, consumer, {partition(2): 2, partition(5): 5})
    assert polled.poll(0.01) == [(b"hdr", b"\x02", 2), (b"hdr", b"\x05", 5), (b"hdr", b"\x02", 2)]
    assert consumer.acknowledged == []  # not while the worker takes its receive timestamps
    assert polled.poll(0.01) == []
    assert consumer.acknowledged == [third, second]  # cumulative: the last of each partition
    polled.close()
    assert consumer.closed and client.closed
