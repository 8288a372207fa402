"""Every socket a local service listens on binds 127.0.0.1, not only the port its clients use: Kafka's controller
listener, Pulsar's bookie, metadata store and admin ports, ZooKeeper's, DynamoDB Local's, the NATS server's,
RabbitMQ's stream and Erlang distribution ports and its epmd's. Read from the kernel's
own tables: each service process's socket inodes (/proc/PID/fd) matched against the listening sockets of
/proc/net/tcp and tcp6."""

import json
import os
from pathlib import Path

import pytest

LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F"}  # 127.0.0.1, and ::ffff:127.0.0.1 of a Java socket
# ::1, accepted from epmd alone: it always adds the loopback addresses to the one it is given (127.0.0.1).
IPV6_LOOPBACK = "00000000000000000000000001000000"


def listening(pid: int) -> list[tuple[str, int]]:
    """(address in hex as the kernel writes it, port) of every socket the process listens on."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, port = fields[1].split(":")
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                found.append((address, int(port, 16)))
    return found


@pytest.fixture(scope="module")
def services(stack, extra_brokers):
    extra_brokers("pulsar", "kafka-zookeeper", "nats", "rabbitmq")
    return {name: stack.endpoint(name)["pids"] for name in stack.status()
            if stack.status()[name]["state"] == "running"}


def test_every_listening_socket_of_every_local_service_is_loopback(services):
    assert {"kafka", "redis", "dynamodb", "pulsar", "kafka-zookeeper", "nats", "rabbitmq"} <= set(services), services
    for name, pids in services.items():
        sockets = [s for pid in pids for s in listening(pid) if not (is_epmd(pid) and s[0] == IPV6_LOOPBACK)]
        assert sockets, name  # the service listens somewhere: the check looked at something
        exposed = [(address, port) for address, port in sockets if address not in LOOPBACK]
        assert not exposed, f"{name} listens beyond 127.0.0.1: {exposed}"


def is_epmd(pid: int) -> bool:
    return Path(f"/proc/{pid}/comm").read_text().strip() == "epmd"


def test_rabbitmq_listens_on_amqp_stream_management_distribution_and_epmd_ports_only(services, stack):
    """Five listeners, and the TLS ones for AMQP and the stream protocol that the session's node also serves
    (tests/conftest.py: rabbitmq_tls), each on 127.0.0.1 and on the port the stack gave it: nothing else opened a
    port."""
    recorded = json.loads(stack.state_file.read_text())["rabbitmq"]  # the ports the stack handed out
    node = stack.endpoint("rabbitmq")
    epmd, beam = node["pids"]
    assert is_epmd(epmd) and Path(f"/proc/{beam}/comm").read_text().strip() == "beam.smp"
    ports = {(a, p) for a, p in listening(beam)}
    assert ports == {("0100007F", node["amqp_port"]), ("0100007F", node["stream_port"]),
                     ("0100007F", recorded["extra"]["management_port"]),
                     ("0100007F", recorded["extra"]["dist_port"]),
                     ("0100007F", node["tls_amqp_port"]), ("0100007F", node["tls_stream_port"])}, (ports, recorded)
    assert (recorded["extra"]["amqps_port"], recorded["extra"]["stream_tls_port"]) == (node["tls_amqp_port"],
                                                                                       node["tls_stream_port"])
    assert node["management_url"] == f"http://127.0.0.1:{recorded['extra']['management_port']}"
    assert {p for a, p in listening(epmd) if a == "0100007F"} == {recorded["extra"]["epmd_port"]}
