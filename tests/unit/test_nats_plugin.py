"""NATS JetStream as a plug-in: discovered, in the schema, loopback only, refused as a provisioned target in AWS;
the driver's framing and the recorded meaning of a PubAck, a local cluster's configs and the cluster's answers read,
without a server."""

import re
import signal
import subprocess
import sys

import pytest

from brokerbench import brokers, schema, spec
from brokerbench.brokers.nats_jetstream import cluster, driver, environment, local, wire
from brokerbench.drivers import BrokerUnavailable
from brokerbench.local.processes import HOST, StackError
from brokerbench.local.stack import LocalStack, Service, _same_ports
from brokerbench.targets import ExistingTargets, ProvisioningError
from brokerbench.workflow import steps, wiring

MINIMAL = {"sizes": [1024], "rates": [100], "formats": ["json"]}
CLIENT = spec.validate({**MINIMAL, "brokers": ["nats-jetstream"]})["client"]


def test_it_is_registered_with_its_modes_and_persistence_and_no_cloud():
    plugin = brokers.plugin("nats-jetstream")
    assert plugin.family == "nats" and brokers.families()["nats"] is plugin
    assert set(plugin.capabilities.modes) == {"batch", "single"}
    assert list(plugin.capabilities.persistence) == ["file", "file-sync-always", "memory"]  # the default first
    assert plugin.cloud is None and plugin.where() == ["local", "external"]
    assert plugin.local.name == "nats" and brokers.local_services()["nats"][0] == "nats-jetstream"
    assert plugin.libraries == ("nats-py",)


def test_its_settings_reach_the_schema_and_a_run_request():
    props = schema.generated()["properties"]
    assert "nats-jetstream" in props["brokers"]["items"]["anyOf"][0]["enum"]
    assert props["targets"]["properties"]["nats-jetstream"]["required"] == ["url"]
    assert props["client"]["properties"]["nats_storage"]["enum"] == ["file", "memory"]
    assert (CLIENT["nats_storage"], CLIENT["nats_max_in_flight"]) == ("file", 1000)
    assert "nats_replicas" not in CLIENT  # omitted: 3, or the target's servers when fewer (the driver asks them)
    full = spec.validate({**MINIMAL, "brokers": ["nats-jetstream", "edge-nats"], "modes": ["batch", "single"],
                          "targets": {"edge-nats": {"driver": "nats", "url": "nats://10.0.0.7:4222"}}})
    assert {c["broker"] for c in spec.expand(full)} == {"nats-jetstream", "edge-nats"}
    for target, field in [({"url": "http://x:4222"}, "targets.nats-jetstream.url"),
                          ({"url": "nats://x:4222", "sync_interval": "1s"}, "targets.nats-jetstream.sync_interval")]:
        with pytest.raises(spec.SpecError) as refused:
            spec.validate({**MINIMAL, "brokers": ["nats-jetstream"], "targets": {"nats-jetstream": target}})
        assert field in {p.path for p in refused.value.problems}
    with pytest.raises(spec.SpecError) as refused:
        spec.validate({**MINIMAL, "brokers": ["nats-jetstream"], "client": {"nats_storage": "disk"}})
    assert "client.nats_storage" in {p.path for p in refused.value.problems}


def test_in_aws_mode_it_runs_only_as_an_endpoint_and_a_provisioned_one_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("BROKERBENCH_MODE", "aws")
    request = spec.validate({**MINIMAL, "brokers": ["nats-jetstream"]})
    problem = wiring.provider_problem("nats-jetstream", request)
    assert problem == "nats-jetstream has no cloud provider: give its endpoint in targets.nats-jetstream"
    with pytest.raises(steps.InvalidRequest, match="nats-jetstream has no cloud provider"):
        steps.validate_request({"request": {**MINIMAL, "brokers": ["nats-jetstream"]}})
    with pytest.raises(ProvisioningError, match="nats-jetstream"):
        wiring.target_provider("nats-jetstream", request)
    given = spec.validate({**MINIMAL, "brokers": ["nats-jetstream"],
                           "targets": {"nats-jetstream": {"url": "nats://10.0.0.9:4222"}}})
    assert wiring.provider_problem("nats-jetstream", given) is None  # nats-py is in the Lambda layer
    assert isinstance(wiring.target_provider("nats-jetstream", given), ExistingTargets)


def test_start_binds_the_server_to_loopback_with_jetstream_in_the_data_folder(tmp_path, monkeypatch):
    spawned = []
    monkeypatch.setattr(local, "spawn", lambda cmd, cwd, log: spawned.append((cmd, cwd)) or 101)
    monkeypatch.delenv(local.SYNC_ENV, raising=False)
    started = local.NatsService().start(tmp_path, iter([4222, 4300]).__next__, {})
    assert started.pids == [101] and started.port == 4222
    assert started.endpoint["url"] == f"nats://{HOST}:4222" and started.endpoint["sync_interval"] == "2m"
    # a network fault's proxy in front of the server, on a port of its own; clients through it use its URL
    assert started.endpoint["proxy"] == {"links": [{"node": "bb-nats", "listen": 4300, "upstream": 4222}],
                                         "clients": {"url": f"nats://{HOST}:4300"}}
    cmd, cwd = spawned[0]
    assert cmd[cmd.index("-a") + 1] == HOST and cmd[cmd.index("-p") + 1] == "4222" and "-js" in cmd
    assert not {"-m", "--http_port", "--https_port", "--cluster", "--routes"} & set(cmd)  # no other listener
    assert cwd == tmp_path / "data"
    config = (tmp_path / "nats.conf").read_text()
    assert f'store_dir: "{tmp_path / "data"}"' in config and 'sync_interval: "2m"' in config


def test_the_sync_policy_comes_from_the_stack_or_the_environment_and_a_wrong_one_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(local, "spawn", lambda cmd, cwd, log: 101)
    monkeypatch.setenv(local.SYNC_ENV, "always")
    started = local.NatsService().start(tmp_path, iter([4222, 4300]).__next__, {})
    assert started.endpoint["sync_interval"] == "always"
    assert 'sync_interval: "always"' in (tmp_path / "nats.conf").read_text()
    monkeypatch.setenv(local.SYNC_ENV, "sometimes")
    with pytest.raises(StackError, match=local.SYNC_ENV):
        local.NatsService().start(tmp_path, iter([4222, 4300]).__next__, {})
    assert local.sync_policy({"nats_sync": "2m"}) == "2m"  # the stack's own setting comes first


def test_the_header_travels_before_the_payload_and_comes_back_whole():
    header, payload = b"\x01" * 20, b"\x00{payload}"
    body = driver.frame(header, payload)
    assert body[0] == 20 and driver.unframe(body) == (header, payload)
    assert driver.unframe(driver.frame(b"", b"")) == (b"", b"")


def test_streams_subjects_and_consumers_are_named_as_jetstream_allows():
    assert driver.stream_name("bb-20261127T0221-ab.c*d>e f") == "bb-20261127T0221-ab_c_d_e_f"
    assert driver.subject("bb-r.1-c00003", 2) == "bb-r_1-c00003.2"
    assert driver.durable_name("bb-r-c00003-g", [0, 2]) == "bb-r-c00003-g_0-2"


@pytest.mark.parametrize("client, sync, says", [
    ({"nats_storage": "file", "nats_replicas": 1}, "always", "syncs every write to disk before its PubAck"),
    ({"nats_storage": "file", "nats_replicas": 1}, "2m", "not yet on disk"),
    ({"nats_storage": "file", "nats_replicas": 3}, None, "a quorum of the stream's 3 replicas"),
    ({"nats_storage": "memory", "nats_replicas": 1}, "always", "nothing is written to disk"),
])
def test_what_a_pub_ack_means_follows_the_stream_and_the_servers_sync_policy(client, sync, says):
    assert says in environment.acks_meaning(client, sync)


def test_the_caption_states_storage_replicas_and_sync_as_recorded():
    recorded = {"settings": {"persistence": {"storage": "file", "replicas": 1, "sync_interval": "always"}}}
    assert environment.caption("single", CLIENT, recorded) == ("single = one publish in flight, PubAck: file storage, "
                                                               "1 replica, fsync before each PubAck")
    assert environment.caption("batch", {**CLIENT, "nats_storage": "memory"}, {}) == (
        "batch = up to 1000 publishes in flight, PubAck: memory storage, 1 replica, in memory only")
    assert "sync policy not recorded" in environment.caption("batch", CLIENT, {})


def cluster_started(tmp_path, monkeypatch, nodes=3):
    """A cluster's start with spawn recorded (pids 101, 102, ...) and ports handed out from 20001 on."""
    spawned = []
    monkeypatch.setattr(local, "spawn", lambda cmd, cwd, log: spawned.append((cmd, cwd, log)) or 100 + len(spawned))
    monkeypatch.delenv(local.SYNC_ENV, raising=False)
    ports = iter(range(20001, 20100))
    return local.NatsService().start(tmp_path, ports.__next__, {"nodes": nodes}), spawned


def test_a_cluster_names_each_server_and_routes_it_to_the_others_on_loopback(tmp_path, monkeypatch):
    started, spawned = cluster_started(tmp_path, monkeypatch)
    # client port then cluster port per node, in order
    listeners = {1: (20001, 20002), 2: (20003, 20004), 3: (20005, 20006)}
    assert started.pids == [101, 102, 103] and started.port == 20001
    endpoint = started.endpoint
    assert endpoint["url"] == ",".join(f"nats://{HOST}:{port}" for port, _ in listeners.values())
    assert driver.servers(endpoint) == [f"nats://{HOST}:{port}" for port, _ in listeners.values()]
    for node, (port, cluster_port) in listeners.items():
        entry = endpoint["nodes"][node - 1]
        assert (entry["node"], entry["host"], entry["port"], entry["cluster_port"], entry["pids"]) == (
            f"bb-nats-{node}", HOST, port, cluster_port, [100 + node])
        config = (tmp_path / f"node-{node}" / "nats.conf").read_text()
        assert f"server_name: bb-nats-{node}\n" in config and f"listen: {HOST}:{port}\n" in config
        assert f"  listen: {HOST}:{cluster_port}\n" in config and "  name: bb-nats\n" in config
        assert "  no_advertise: true\n" in config  # clients keep to the URLs they are given (a fault's proxies)
        routes = re.findall(r"nats-route://([\d.]+):(\d+)", config)
        assert sorted(routes) == sorted((HOST, str(c)) for n, (_, c) in listeners.items() if n != node)
        assert f'store_dir: "{tmp_path / "data" / f"node-{node}"}"' in config and 'sync_interval: "2m"' in config
        cmd, cwd, log = spawned[node - 1]
        config_file = tmp_path / f"node-{node}" / "nats.conf"
        assert cmd == entry["command"] == [str(local.server_binary()), "-c", str(config_file)]
        assert (str(cwd), str(log)) == (entry["folder"], entry["log"])
    # every listener a config opens is on loopback: nothing else binds
    configs = "".join((tmp_path / f"node-{n}" / "nats.conf").read_text() for n in listeners)
    assert set(re.findall(r"listen: ([\d.]+):", configs)) == {HOST}
    assert not re.search(r"http|monitor|gateway|leafnode|websocket", configs)
    # a network fault's proxy per server, on ports taken after the servers' own; clients through them use theirs
    proxies = {1: 20007, 2: 20008, 3: 20009}
    assert endpoint["proxy"]["links"] == [{"node": f"bb-nats-{n}", "listen": proxies[n], "upstream": listeners[n][0]}
                                          for n in listeners]
    assert endpoint["proxy"]["clients"] == {"url": ",".join(f"nats://{HOST}:{p}" for p in proxies.values())}


def test_a_cluster_that_died_is_started_again_on_the_same_ports_in_the_same_order(tmp_path, monkeypatch):
    started, _ = cluster_started(tmp_path, monkeypatch)
    again = _same_ports(Service.of("nats@3", started, None))
    monkeypatch.setattr("brokerbench.local.stack.port_free", lambda port: True)
    assert [again() for _ in range(9)] == list(range(20001, 20010))  # the proxies' ports last


def test_the_stack_runs_nats_as_one_to_three_servers():
    stack = LocalStack()
    assert stack._lookup("nats@3")[2] == 3 and stack._lookup("nats")[2] == 1
    with pytest.raises(StackError, match="cluster of 2 to 3"):
        stack._lookup("nats@4")
    with pytest.raises(spec.SpecError) as refused:
        spec.validate({**MINIMAL, "brokers": ["nats-jetstream"], "provision": {"nats-jetstream": {"nodes": 4}}})
    assert "provision.nats-jetstream.nodes" in {p.path for p in refused.value.problems}


def test_a_cluster_endpoint_names_every_server_and_a_wrong_url_is_refused():
    given = spec.validate({**MINIMAL, "brokers": ["nats-jetstream"],
                           "targets": {"nats-jetstream": {"url": "nats://a:4222,nats://b:4222,nats://c:4222"}}})
    assert driver.servers(given["targets"]["nats-jetstream"]) == ["nats://a:4222", "nats://b:4222", "nats://c:4222"]
    for url in ["nats://a:4222,", "nats://a:4222, nats://b:4222", "nats://a:4222,http://b:80"]:
        with pytest.raises(spec.SpecError) as refused:
            spec.validate({**MINIMAL, "brokers": ["nats-jetstream"], "targets": {"nats-jetstream": {"url": url}}})
        assert "targets.nats-jetstream.url" in {p.path for p in refused.value.problems}, url


def test_a_servers_info_tells_the_clusters_size():
    assert driver.servers_announced({"host": "127.0.0.1", "port": 4222}) == 1  # not clustered
    routed = {"host": "127.0.0.1", "port": 4001, "cluster": "bb-nats",
              "connect_urls": ["127.0.0.1:4001", "127.0.0.1:4003", "127.0.0.1:4005"]}
    assert driver.servers_announced(routed) == 3
    # its own URL counts once whether or not it is among connect_urls; a server not routed yet counts alone
    assert driver.servers_announced({**routed, "connect_urls": ["127.0.0.1:4003"]}) == 2
    assert driver.servers_announced({**routed, "connect_urls": []}) == 1


def test_unknown_replicas_are_stated_as_unknown_not_guessed():
    recorded = {"settings": {"persistence": {"storage": "file", "replicas": None, "sync_interval": "2m"}}}
    assert plugin_durability(recorded)["replicas"] is None
    assert "how many is not known" in environment.acks_meaning({"nats_storage": "file", "nats_replicas": None}, "2m")
    three = {"settings": {"persistence": {"storage": "file", "replicas": 3, "nodes": 3, "sync_interval": "2m"}}}
    assert plugin_durability(three)["replicas"] == 1  # a quorum of 3 is the leader and one other
    assert "a quorum of the stream's 3 replicas (2 of them)" in plugin_durability(three)["text"]
    assert environment.caption("single", CLIENT, three) == ("single = one publish in flight, PubAck: file storage, "
                                                            "3 replicas on a 3-server cluster, fsync every 2 min")


def plugin_durability(recorded: dict) -> dict:
    return brokers.plugin("nats-jetstream").state_durability(CLIENT, recorded)


# Stream info answers as nats-server 2.15 gives them (the JetStream API: $JS.API.STREAM.INFO.<stream>).
LED = {"type": "io.nats.jetstream.api.v1.stream_info_response", "config": {"name": "S", "num_replicas": 3},
       "cluster": {"name": "bb-nats", "leader": "bb-nats-2",
                   "replicas": [{"name": "bb-nats-1", "current": True, "active": 1234, "peer": "x"},
                                {"name": "bb-nats-3", "current": False, "offline": True, "active": 0, "peer": "y"}]}}
ELECTING = {"type": "io.nats.jetstream.api.v1.stream_info_response", "config": {"name": "S"},
            "cluster": {"name": "bb-nats", "replicas": [{"name": "bb-nats-1", "current": False}]}}
MISSING = {"type": "io.nats.jetstream.api.v1.stream_info_response",
           "error": {"code": 404, "err_code": 10059, "description": "stream not found"}}
UNAVAILABLE = {"error": {"code": 503, "err_code": 10008, "description": "JetStream system temporarily unavailable"}}


def test_the_leader_and_current_replicas_are_read_from_the_clusters_stream_info():
    assert cluster.leader_in(LED, "S") == "bb-nats-2"
    assert cluster.members_in(LED, "S") == {"bb-nats-2": True, "bb-nats-1": True, "bb-nats-3": False}
    assert cluster.leader_in(ELECTING, "S") is None and cluster.members_in(ELECTING, "S") == {"bb-nats-1": False}
    assert cluster.leader_in(UNAVAILABLE, "S") is None
    with pytest.raises(cluster.StreamMissing, match="stream S"):
        cluster.leader_in(MISSING, "S")


def test_a_node_is_started_again_only_when_it_is_a_stopped_server_of_the_cluster(tmp_path, monkeypatch):
    started, _ = cluster_started(tmp_path, monkeypatch)
    endpoint = started.endpoint
    with pytest.raises(StackError, match="bb-nats-1, bb-nats-2, bb-nats-3"):
        cluster.start_node(endpoint, "bb-nats-9")
    with pytest.raises(StackError, match="not a cluster"):
        cluster.start_node({"url": "nats://127.0.0.1:4222"}, "bb-nats")
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        endpoint["nodes"][1]["pids"] = [alive.pid]
        with pytest.raises(StackError, match=f"bb-nats-2: still running \\(pid {alive.pid}\\)"):
            cluster.start_node(endpoint, "bb-nats-2")
    finally:
        alive.send_signal(signal.SIGKILL)
        alive.wait()
    spawned = []
    monkeypatch.setattr(cluster, "spawn", lambda cmd, cwd, log: spawned.append((cmd, str(cwd), str(log))) or 777)
    monkeypatch.setattr(cluster, "port_free", lambda port: True)
    assert cluster.start_node(endpoint, "bb-nats-2") == [777]  # the killed one: on its own command and store
    entry = endpoint["nodes"][1]
    assert spawned == [(entry["command"], entry["folder"], entry["log"])] and entry["pids"] == [777]


def test_a_local_clusters_streams_get_a_replica_per_server_it_was_started_with(tmp_path, monkeypatch):
    started, _ = cluster_started(tmp_path, monkeypatch)
    # From the endpoint's servers, without asking them: one stopped by a fault still counts.
    assert driver.NatsJetStreamDriver(started.endpoint, CLIENT).replicas() == 3
    assert driver.NatsJetStreamDriver(started.endpoint, {**CLIENT, "nats_replicas": 1}).replicas() == 1
    two, _ = cluster_started(tmp_path / "two", monkeypatch, nodes=2)
    assert driver.NatsJetStreamDriver(two.endpoint, CLIENT).replicas() == 2


def test_the_consumers_protocol_reader_takes_whole_items_only_wherever_the_reads_split_them():
    """MSG (with and without a reply), HMSG with a status (a pull request's 408, its pending count) and with headers
    of a message's own, and control lines: read whole from one buffer, and read alike when the bytes come in pieces
    of every size (a recv ends anywhere), an incomplete item left for the next read."""
    expired, own = b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 93\r\n\r\n", b"NATS/1.0\r\nX-A: b\r\n\r\n"
    items = (b"MSG s.0 1 $JS.ACK.a.b.1.1.1.1.0 5\r\n\x01hpay\r\n"
             b"PING\r\n"
             b"HMSG _INBOX.x 1 %d %d\r\n%s\r\n" % (len(expired), len(expired), expired)
             + b"HMSG s.1 1 $JS.ACK.r %d %d\r\n%s\x00abc\r\n" % (len(own), len(own) + 4, own)
             + b"MSG _INBOX.y 2 0\r\n\r\n"
             b"-ERR 'Stale Connection'\r\n")
    deliveries = [(b"s.0", b"$JS.ACK.a.b.1.1.1.1.0", None, b"\x01hpay"), (b"_INBOX.x", None, (b"408", 93), b""),
                  (b"s.1", b"$JS.ACK.r", None, b"\x00abc"), (b"_INBOX.y", None, None, b"")]
    controls = [b"PING", b"-ERR 'Stale Connection'"]
    assert wire.parse(items, 0) == (deliveries, controls, len(items))
    for piece in (1, 2, 7, 30, 64):
        buffer, at, got, lines = b"", 0, [], []
        for start in range(0, len(items), piece):
            buffer = buffer[at:] + items[start:start + piece]
            more, control, at = wire.parse(buffer, 0)
            got += more
            lines += control
        assert (got, lines, at) == (deliveries, controls, len(buffer)), piece
    assert wire.status_of(b"NATS/1.0 100 Idle Heartbeat\r\n\r\n") == (b"100", None)
    assert wire.status_of(b"NATS/1.0\r\nX-A: b\r\n\r\n") is None


def test_server_urls_the_consumer_cannot_speak_to_are_refused_by_name():
    assert wire.addresses(["nats://a:1", "b:2", "nats://u:p@c", "tls://d:5"]) == [
        ("a", 1, None, None, False), ("b", 2, None, None, False), ("c", 4222, "u", "p", False),
        ("d", 5, None, None, True)]
    with pytest.raises(BrokerUnavailable, match=r"endpoint.url: 'ws://a:1'.*nats:// and tls://"):
        wire.addresses(["nats://b:2", "ws://a:1"])
