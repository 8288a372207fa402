"""A network fault's proxy on a port another listener took since its broker started (brokerbench.local.proxies.route):
made on a fresh port, and the clients' fields name it; not for Kafka, whose nodes advertise their proxies' ports.
A real Toxiproxy server and a real listener holding the port (a CI run lost its network-fault module this way)."""

import socket

import pytest

from brokerbench.local.processes import HOST, StackError, free_port
from brokerbench.local.proxies import moved, route


@pytest.fixture
def held():
    """A port some other listener holds, and a server the proxies forward to."""
    with socket.socket() as taken, socket.socket() as upstream:
        taken.bind((HOST, free_port()))
        taken.listen()
        upstream.bind((HOST, free_port()))
        upstream.listen()
        yield taken.getsockname()[1], upstream.getsockname()[1]


def endpoint(listen: int, upstream: int) -> dict:
    return {"host": HOST, "port": upstream,
            "proxy": {"links": [{"node": "n1", "listen": listen, "upstream": upstream}],
                      "clients": {"port": listen, "url": f"nats://{HOST}:{listen},nats://{HOST}:1",
                                  "node_addresses": {f"{HOST}:{upstream}": listen}}}}


def test_a_proxy_whose_port_was_taken_is_made_on_a_fresh_one_and_the_clients_follow(toxiproxy, held):
    taken, upstream = held
    routed = route(endpoint(taken, upstream), "redis", toxiproxy.port)
    [link] = routed["proxy"]["links"]
    fresh = link["listen"]
    assert fresh != taken and link["name"] in toxiproxy.proxies()
    assert toxiproxy.proxies()[link["name"]]["listen"] == f"{HOST}:{fresh}"
    assert routed["proxy"]["clients"] == {"port": fresh, "url": f"nats://{HOST}:{fresh},nats://{HOST}:1",
                                          "node_addresses": {f"{HOST}:{upstream}": fresh}}
    with socket.create_connection((HOST, fresh), timeout=2):
        pass  # the proxy listens there and forwards to the upstream server


def test_kafkas_proxy_ports_do_not_move(toxiproxy, held):
    taken, upstream = held
    with pytest.raises(StackError, match="address already in use"):
        route(endpoint(taken, upstream), "kafka@3", toxiproxy.port)


def test_only_the_moved_port_changes():
    clients = {"port": 20001, "other": 20002, "flag": True, "url": f"nats://{HOST}:20001,nats://{HOST}:120001"}
    assert moved(clients, 20001, 30000) == {"port": 30000, "other": 20002, "flag": True,
                                            "url": f"nats://{HOST}:30000,nats://{HOST}:120001"}
