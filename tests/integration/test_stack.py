"""The local stack starts real services on 127.0.0.1, reuses them, and stops them."""

import json
import socket
from contextlib import contextmanager

import redis

from brokerbench.cli import main
from brokerbench.local.processes import ephemeral_range
from brokerbench.local.stack import LocalStack, pid_alive, port_answers


def listening_addresses(port: int) -> set[str]:
    """Local addresses (hex, as in /proc/net/tcp*) of the sockets listening on `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                address, hex_port = local.split(":")
                if state == "0A" and int(hex_port, 16) == port:
                    found.add(address)
    return found


LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F"}


@contextmanager
def outgoing_connections(count: int):
    """`count` TCP connections to a listener of the test's own, held open: each holds a port of the kernel's
    ephemeral range, as a busy host's outgoing connections do."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(count)
        clients, accepted = [], []
        try:
            for _ in range(count):
                clients.append(socket.create_connection(server.getsockname()))
                accepted.append(server.accept()[0])
            yield [c.getsockname()[1] for c in clients]
        finally:
            for sock in clients + accepted:
                sock.close()


def test_up_reuses_status_reports_and_down_stops(tmp_path):
    stack = LocalStack(tmp_path)
    low, high = ephemeral_range()
    try:
        # every service starts while outgoing connections hold ports of the ephemeral range, and every listener
        # it records is outside that range (a RabbitMQ stream listener given one failed with eaddrinuse)
        with outgoing_connections(400) as held:
            assert all(low <= port <= high for port in held)
            endpoints = stack.up(log=lambda m: None)
        recorded = json.loads(stack.state_file.read_text())
        listeners = {(name, key): port for name, record in recorded.items()
                     for key, port in [("port", record["port"]), *(record.get("extra") or {}).items()]
                     if key.endswith("port") and isinstance(port, int)}
        assert len(listeners) > len(recorded), listeners  # RabbitMQ's and the others' extra listeners are in
        assert not {k: p for k, p in listeners.items() if low <= p <= high}, listeners
        status = stack.status()
        assert all(s["state"] == "running" for s in status.values())
        pids = {name: s["pid"] for name, s in status.items()}
        assert stack.up(log=lambda m: None) == endpoints  # second up reuses what runs
        assert {name: s["pid"] for name, s in stack.status().items()} == pids
        for name, info in status.items():
            assert listening_addresses(info["port"]) <= LOOPBACK and listening_addresses(info["port"]), name
        client = redis.Redis(port=endpoints["redis-streams"]["port"])
        assert client.config_get("appendonly")["appendonly"] == "yes"  # AOF on by default
        assert endpoints["kafka"]["version"].startswith("4.1")
    finally:
        stack.down(log=lambda m: None)
    for name, info in status.items():
        assert not pid_alive(info["pid"]), name
        assert not port_answers(info["port"]), name
    assert all(s["state"] == "stopped" for s in stack.status().values())


def test_redis_persistence_can_be_turned_off(tmp_path):
    stack = LocalStack(tmp_path, redis_aof=False)
    try:
        stack.up(["redis"], log=lambda m: None)
        port = stack.endpoints(required=["redis"])["redis-streams"]["port"]
        assert redis.Redis(port=port).config_get("appendonly")["appendonly"] == "no"
    finally:
        stack.down(log=lambda m: None)


def test_the_cli_starts_and_stops_only_the_services_named(tmp_path, capsys):
    state = ["--state-dir", str(tmp_path)]
    try:
        assert main([*state, "local", "up", "redis"]) == 0
        assert main([*state, "local", "status"]) == 3  # kafka, DynamoDB Local and the rest are not running
        rows = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines() if line[:1].isalpha())
        assert rows["redis"].startswith("running") and rows["kafka"].startswith("stopped")
        assert main([*state, "local", "up", "kafka@9"]) == 3
        assert "kafka runs as 1 node or a cluster of 2 to 3 here, not 9" in capsys.readouterr().err
        assert main([*state, "local", "up", "redis@4"]) == 3
        assert "redis runs as 1 node or a cluster of 2 to 3 here, not 4" in capsys.readouterr().err
        assert main([*state, "local", "up", "pulsar@3"]) == 3
        assert "pulsar runs as 1 node here, not 3" in capsys.readouterr().err
    finally:
        assert main([*state, "local", "down", "redis"]) == 0
    assert all(s["state"] == "stopped" for s in LocalStack(tmp_path).status().values())


def test_kafka_heap_is_pinned_and_deleted_topics_leave_at_once(stack):
    """-Xms = -Xmx (no heap resizing during cells); topics' file.delete.delay.ms is 0, so a deleted
    cell's files do not go while a later cell is measured."""
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    info = stack.status()["kafka"]
    with open(f"/proc/{info['pid']}/cmdline", "rb") as f:
        args = f.read().decode().split("\0")
    heap = {a[:4]: a[4:] for a in args if a.startswith(("-Xms", "-Xmx"))}
    assert heap["-Xms"] == heap["-Xmx"], args
    admin = AdminClient({"bootstrap.servers": stack.endpoints(required=["kafka"])["kafka"]["bootstrap_servers"]})
    admin.create_topics([NewTopic("bb-delete-delay", 1, 1)])["bb-delete-delay"].result(30)
    try:
        resource = ConfigResource(ConfigResource.Type.TOPIC, "bb-delete-delay")
        config = admin.describe_configs([resource])[resource].result(30)
        assert config["file.delete.delay.ms"].value == "0"
    finally:
        admin.delete_topics(["bb-delete-delay"])["bb-delete-delay"].result(30)


def test_redis_persistence_is_read_from_the_running_redis(stack):
    from brokerbench.environment import broker_settings
    from brokerbench.spec import validate

    client = validate({"brokers": ["redis-streams"], "sizes": [1024], "rates": [100], "formats": ["raw"]})["client"]
    settings = broker_settings("redis-streams", stack.endpoints(required=["redis"])["redis-streams"], client)
    assert settings["persistence"] == {"appendonly": "yes", "appendfsync": "everysec", "source": "CONFIG GET"}


def test_a_service_whose_fresh_port_was_taken_as_it_started_starts_again_on_another(tmp_path, monkeypatch):
    """The port chosen for a new Redis is taken by another listener before Redis binds it (as another process
    choosing at once could): Redis exits with "Address already in use", and the stack starts it again on a fresh
    port instead of failing `local up`."""
    from brokerbench.local import stack as stack_module

    taken = socket.socket()
    taken.bind(("127.0.0.1", stack_module.free_port()))
    taken.listen()
    handed = [taken.getsockname()[1]]
    real = stack_module.free_port
    monkeypatch.setattr(stack_module, "free_port", lambda: handed.pop(0) if handed else real())
    stack, said = LocalStack(tmp_path), []
    try:
        endpoint = stack.up(["redis"], log=said.append)["redis-streams"]
        assert endpoint["port"] != taken.getsockname()[1]
        assert redis.Redis(port=endpoint["port"]).ping()
        assert any("starting it again on fresh ports" in line for line in said), said
    finally:
        stack.down(log=lambda m: None)
        taken.close()
