"""The local RabbitMQ cluster's pure parts: each node's configuration and environment (one epmd, one cookie, its own
name, ports and data), the endpoint's addresses every client tries, the ports a crashed cluster gets again, and the
leader read from the management API's records (brokers/rabbitmq/cluster.py)."""

import contextlib
import socket
from pathlib import Path

import pytest

from brokerbench import brokers
from brokerbench.brokers.rabbitmq import amqp, cluster, environment, local, management
from brokerbench.local import stack
from brokerbench.local.processes import HOST, StackError
from brokerbench.local.stack import LocalStack, Service
from brokerbench.targets.local import LocalTargets

LISTENERS = [(41001, 41002, 41003, 41004), (41011, 41012, 41013, 41014), (41021, 41022, 41023, 41024)]
PROXIES = [(41101, 41102), (41111, 41112), (41121, 41122)]  # each node's AMQP and stream listeners' proxies
EPMD = 41030


def entries(tmp_path: Path) -> list[dict]:
    return local.cluster_nodes(tmp_path, LISTENERS, EPMD)


def test_each_node_has_its_own_name_ports_and_data_and_all_share_one_epmd_and_cookie(tmp_path):
    nodes = entries(tmp_path)
    envs = [local.node_environment(node) for node in nodes]
    assert [env["RABBITMQ_NODENAME"] for env in envs] == ["bb1@localhost", "bb2@localhost", "bb3@localhost"]
    assert [node["node"] for node in nodes] == [env["RABBITMQ_NODENAME"] for env in envs]
    assert [(env["RABBITMQ_NODE_PORT"], env["RABBITMQ_DIST_PORT"]) for env in envs] == \
        [(str(amqp_port), str(dist)) for amqp_port, _, dist, _ in LISTENERS]
    assert {env["ERL_EPMD_PORT"] for env in envs} == {str(EPMD)}  # peers are found through the one epmd
    assert {env["HOME"] for env in envs} == {str(tmp_path)}  # where the one cookie is
    # Data under the service's data folder (the stack empties it for a fresh cluster), config and logs per node.
    assert [env["RABBITMQ_MNESIA_BASE"] for env in envs] == [str(tmp_path / "data" / f"node-{i}") for i in (1, 2, 3)]
    assert [env["RABBITMQ_CONFIG_FILE"] for env in envs] == \
        [str(tmp_path / f"node-{i}" / "rabbitmq.conf") for i in (1, 2, 3)]
    assert [n["management_url"] for n in nodes] == [f"http://{HOST}:{m}" for *_, m in LISTENERS]
    assert all(n["host"] == HOST and env["ERL_EPMD_ADDRESS"] == HOST for n, env in zip(nodes, envs))


def test_a_joining_node_discovers_the_first_by_classic_config_and_retries_until_it_answers():
    lines = local.peer_discovery("bb1@localhost").splitlines()
    assert lines == ["cluster_formation.peer_discovery_backend = classic_config",
                     "cluster_formation.classic_config.nodes.1 = bb1@localhost",
                     f"cluster_formation.discovery_retry_limit = {local.DISCOVERY_RETRIES}",
                     f"cluster_formation.discovery_retry_interval = {local.DISCOVERY_RETRY_MS}"]
    assert local.DISCOVERY_RETRIES * local.DISCOVERY_RETRY_MS >= 30_000  # longer than a first node's start


def test_a_crashed_cluster_gets_its_ports_again_in_the_order_it_took_them(monkeypatch):
    monkeypatch.setattr(stack, "port_free", lambda port: True)
    extra = {**local.ports_taken(LISTENERS, EPMD, PROXIES), "nodes": 3, "node": ["bb1@localhost", "bb2@localhost"]}
    allocate = stack._same_ports(Service("rabbitmq@3", [], LISTENERS[0][0], "log", "3.10", None, extra))
    taken = [allocate() for _ in range(19)]
    assert taken == [port for ports in LISTENERS for port in ports] + [EPMD] + [p for ports in PROXIES for p in ports]


def test_each_nodes_amqp_and_stream_listeners_have_a_proxy_and_clients_are_told_the_proxies(tmp_path):
    nodes = entries(tmp_path)
    proxy = local.proxied(nodes, PROXIES)
    assert proxy["links"] == [{"node": n["node"], "port": kind, "listen": listen, "upstream": upstream}
                              for n, ports in zip(nodes, PROXIES)
                              for kind, listen, upstream in zip(("amqp", "stream"), ports,
                                                                (n["port"], n["stream_port"]))]
    clients = proxy["clients"]
    assert (clients["amqp_port"], clients["stream_port"]) == PROXIES[0]
    assert [(n["port"], n["stream_port"]) for n in clients["nodes"]] == PROXIES
    assert [n["node"] for n in clients["nodes"]] == [n["node"] for n in nodes]  # the hooks' names, unchanged
    # where a node says a stream's leader is (its own stream listener), a client connects to that node's proxy
    assert clients["stream_addresses"] == {f"{HOST}:{stream}": PROXIES[i][1]
                                           for i, (_, stream, _, _) in enumerate(LISTENERS)}
    assert "nodes" not in local.proxied(nodes[:1], PROXIES[:1])["clients"]  # a single node has no list


def test_the_stack_and_a_run_request_know_the_cluster(tmp_path):
    local_stack = LocalStack(tmp_path)
    assert local_stack._lookup("rabbitmq@3")[2] == 3
    with pytest.raises(StackError, match="1 node or a cluster of 2 to 3"):
        local_stack._lookup("rabbitmq@4")
    targets = LocalTargets(local_stack)
    for broker in ("rabbitmq-quorum", "rabbitmq-streams"):
        assert targets._service(broker, {"provision": {broker: {"nodes": 3}}}) == "rabbitmq@3"
        assert targets._service(broker, {"provision": {}}) == "rabbitmq"


def test_clients_try_every_node_the_endpoints_own_first(tmp_path):
    endpoint = {"host": HOST, "amqp_port": 41001, "stream_port": 41002, "management_url": f"http://{HOST}:41004",
                "nodes": entries(tmp_path)}
    assert amqp.addresses(endpoint) == [(HOST, 41001), (HOST, 41011), (HOST, 41021)]
    assert amqp.addresses(endpoint, "stream_port") == [(HOST, 41002), (HOST, 41012), (HOST, 41022)]
    assert [p.port for p in amqp.parameters(endpoint)] == [41001, 41011, 41021]
    assert management.management_urls(endpoint) == [f"http://{HOST}:41004", f"http://{HOST}:41014",
                                                   f"http://{HOST}:41024"]
    single = {"host": HOST, "amqp_port": 5672, "stream_port": 5552}
    assert amqp.addresses(single) == [(HOST, 5672)] and amqp.first_answering(single) == (HOST, 5672)


def test_a_client_that_takes_one_address_gets_the_first_node_that_answers(tmp_path):
    with contextlib.ExitStack() as held:
        # Ports bound and not listening (refused), then one listening.
        closed = [held.enter_context(socket.socket()) for _ in range(3)]
        for sock in closed:
            sock.bind((HOST, 0))
        listening = held.enter_context(socket.create_server((HOST, 0)))
        ports = [sock.getsockname()[1] for sock in [*closed, listening]]
        nodes = [{"node": f"bb{i}@localhost", "host": HOST, "port": port, "stream_port": port}
                 for i, port in enumerate(ports[1:], 2)]
        endpoint = {"host": HOST, "amqp_port": ports[0], "stream_port": ports[0], "nodes": nodes}
        assert amqp.first_answering(endpoint, "stream_port", timeout_s=0.5) == (HOST, ports[3])
        # Nothing answers on any of them: the endpoint's own, whose client then says so.
        endpoint["nodes"] = nodes[:2]
        assert amqp.first_answering(endpoint, timeout_s=0.5) == (HOST, ports[0])


def test_a_node_is_picked_by_its_name_and_an_unknown_one_is_refused_naming_the_nodes(tmp_path):
    endpoint = {"nodes": entries(tmp_path)}
    assert cluster.node_entry(endpoint, "bb2@localhost")["port"] == 41011
    with pytest.raises(StackError, match=r"'bb9@localhost'.*bb1@localhost, bb2@localhost, bb3@localhost"):
        cluster.node_entry(endpoint, "bb9@localhost")
    with pytest.raises(StackError, match="not a local cluster"):
        cluster.node_entry({"host": HOST}, "bb1@localhost")


RUNNING = ["bb1@localhost", "bb2@localhost", "bb3@localhost"]


@pytest.mark.parametrize("record, running, expected", [
    # A quorum queue's record (3.10): its leader, its members, those whose Raft server runs.
    ({"type": "quorum", "leader": "bb2@localhost", "node": "bb2@localhost", "members": RUNNING, "online": RUNNING},
     RUNNING, "bb2@localhost"),
    # A stream's (3.10): its writer's node, no `leader`.
    ({"type": "stream", "node": "bb3@localhost", "members": RUNNING, "online": RUNNING}, RUNNING, "bb3@localhost"),
    # The record still names a leader that was killed: not online, or not running, leads nothing.
    ({"leader": "bb1@localhost", "online": RUNNING[1:]}, RUNNING[1:], None),
    ({"leader": "bb1@localhost", "online": RUNNING}, RUNNING[1:], None),
    ({"node": "bb1@localhost"}, RUNNING, "bb1@localhost"),  # before its first statistics: no `online` yet
    ({"leader": "bb1@localhost"}, None, "bb1@localhost"),  # the nodes not known: the record alone
    ({"type": "quorum", "members": RUNNING}, RUNNING, None),  # no leader named
    (None, RUNNING, None),  # no such queue
])
def test_the_leader_is_the_one_the_broker_names_online_and_running(record, running, expected):
    assert cluster.leader_of(record, running) == expected


def test_captions_and_recorded_settings_state_the_replication():
    quorum, streams = brokers.plugin("rabbitmq-quorum"), brokers.plugin("rabbitmq-streams")
    assert quorum.describe_mode("batch", {"rabbitmq_in_flight": 1000}, {"nodes": 3}) == \
        "batch = up to 1000 unconfirmed, confirm after fsync on a Raft majority (quorum queue, 3 replicas)"
    assert streams.describe_mode("single", {}, {"nodes": 3}).endswith("no fsync (stream, 3 replicas)")
    assert streams.describe_mode("single", {}, {"nodes": 1}).endswith("no fsync (stream)")
    assert environment.members(3) == "3, one on each node of the cluster"
    assert environment.members(1) == "1, on the one node" and "unknown" in environment.members(None)
    assert management.cluster_size({"host": HOST}) is None and management.described_size({"host": HOST}) == {}


def test_a_node_started_again_on_an_endpoint_without_a_stack_is_recorded_in_the_endpoints_own_list():
    """A fault signals the pids the endpoint lists: a node started again outside a stack (a test's own cluster) has
    its new ones there, or a later fault would signal a process that ended (or another that took its pid)."""
    endpoint = {"nodes": [{"node": "bb1@localhost", "pids": [101]}, {"node": "bb2@localhost", "pids": [102]}]}
    stack.node_restarted(endpoint, "bb2@localhost", [207])
    assert stack.cluster_nodes(endpoint) == [{"node": "bb1@localhost", "pids": [101]},
                                             {"node": "bb2@localhost", "pids": [207]}]
