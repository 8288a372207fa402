"""Kafka in ZooKeeper mode as a plug-in: discovered, in the schema, the Kafka driver's by reference, loopback only."""

from brokerbench import brokers, schema, spec
from brokerbench.brokers.kafka_zookeeper import local
from brokerbench.local.processes import HOST


def test_it_is_registered_beside_kafka_and_named_kafka_targets_keep_the_kraft_plugin():
    zookeeper, kafka = brokers.plugin("kafka-zookeeper"), brokers.plugin("kafka")
    assert zookeeper.family == "kafka" and brokers.families()["kafka"] is kafka
    assert brokers.for_target("redpanda", {"driver": "kafka", "bootstrap_servers": "h:1"}) is kafka
    assert brokers.for_target("kafka-zookeeper") is zookeeper
    assert (zookeeper.driver, zookeeper.environment, zookeeper.caption) == (kafka.driver, kafka.environment, kafka.caption)
    assert zookeeper.settings.client is kafka.settings.client and zookeeper.capabilities is kafka.capabilities
    assert zookeeper.cloud is None and zookeeper.where() == ["local", "external"]
    assert zookeeper.local.name == "kafka-zookeeper" and brokers.local_services()["kafka-zookeeper"][0] == "kafka-zookeeper"


def test_it_reaches_the_schema_and_a_run_request():
    props = schema.generated()["properties"]
    assert "kafka-zookeeper" in props["brokers"]["items"]["anyOf"][0]["enum"]
    assert props["targets"]["properties"]["kafka-zookeeper"]["required"] == ["bootstrap_servers"]
    assert set(props["provision"]["properties"]["kafka-zookeeper"]["properties"]) == {"version", "nodes"}
    assert props["targets"]["additionalProperties"]["properties"]["driver"]["enum"].count("kafka") == 1
    full = spec.validate({"brokers": ["kafka", "kafka-zookeeper"], "sizes": [1024], "rates": [100],
                          "formats": ["json"], "provision": {"kafka-zookeeper": {"version": "3.9"}}})
    assert {c["broker"] for c in spec.expand(full)} == {"kafka", "kafka-zookeeper"}


def test_start_binds_zookeeper_and_the_broker_to_loopback_and_starts_zookeeper_first(tmp_path, monkeypatch):
    spawned = []
    monkeypatch.setattr(local, "lib_dir", lambda component: tmp_path)
    monkeypatch.setattr(local, "spawn", lambda cmd, cwd, log: spawned.append(cmd) or 100 + len(spawned))
    free = iter([2181, 9092])
    started = local.KafkaZooKeeperService().start(tmp_path, lambda: next(free), {})
    assert started.pids == [101, 102] and started.port == 9092
    assert started.endpoint["bootstrap_servers"] == f"{HOST}:9092" and started.extra["zookeeper_port"] == 2181
    assert spawned[0][-2] == "org.apache.zookeeper.server.ZooKeeperServerMain" and spawned[1][-2] == "kafka.Kafka"
    assert "-Xmx128m" in spawned[0] and "-Xms512m" in spawned[1] and "-Xmx512m" in spawned[1]
    zookeeper = (tmp_path / "zookeeper.properties").read_text().splitlines()
    assert {f"clientPortAddress={HOST}", "clientPort=2181", "admin.enableServer=false"} <= set(zookeeper)
    server = (tmp_path / "server.properties").read_text().splitlines()
    assert {f"zookeeper.connect={HOST}:2181", f"listeners=PLAINTEXT://{HOST}:9092", "broker.id=0"} <= set(server)
    assert not [line for line in server if line.startswith(("process.roles", "controller.", "share."))]  # KRaft, 4.x
