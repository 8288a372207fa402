"""Every socket a local service listens on binds 127.0.0.1, not only the port its clients use: Kafka's controller
listener, Pulsar's bookie, metadata store and admin ports, ZooKeeper's, DynamoDB Local's, the NATS server's. Read
from the kernel's own tables: each service process's socket inodes (/proc/PID/fd) matched against the listening sockets of
/proc/net/tcp and tcp6."""

import os
from pathlib import Path

import pytest

LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F"}  # 127.0.0.1, and ::ffff:127.0.0.1 of a Java socket


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
    extra_brokers("pulsar", "kafka-zookeeper", "nats")
    return {name: stack.endpoint(name)["pids"] for name in stack.status()
            if stack.status()[name]["state"] == "running"}


def test_every_listening_socket_of_every_local_service_is_loopback(services):
    assert {"kafka", "redis", "dynamodb", "pulsar", "kafka-zookeeper", "nats"} <= set(services), services
    for name, pids in services.items():
        sockets = [s for pid in pids for s in listening(pid)]
        assert sockets, name  # the service listens somewhere: the check looked at something
        exposed = [(address, port) for address, port in sockets if address not in LOOPBACK]
        assert not exposed, f"{name} listens beyond 127.0.0.1: {exposed}"
