"""Kafka on the local stack: a single-node KRaft broker from Maven Central jars, bound to 127.0.0.1."""

from __future__ import annotations

import base64
import socket
import struct
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

from ...local.install import fetch_maven_jars, jar_version, lib_dir, pom_version
from ...local.processes import HOST, StackError, certificate_files, require, spawn
from .. import Started

POM = Path(__file__).with_name("kafka.pom.xml")
HEAP = "512m"
# What a single-node Kafka broker here runs with, in KRaft mode and in ZooKeeper mode (brokers/kafka_zookeeper).
BROKER_PROPERTIES = [
    "num.partitions=1",
    "offsets.topic.replication.factor=1",
    # 3 partitions instead of 50 for the consumer offsets: a new broker's group coordinator is ready in a second.
    # With 50, the first groups' committed offsets were refused (NOT_COORDINATOR) for seconds on a loaded host, and
    # a cell's broker-side backlog was missing from its first intervals and from its count before attaching.
    "offsets.topic.num.partitions=3",
    "transaction.state.log.replication.factor=1",
    "transaction.state.log.min.isr=1",
    "group.initial.rebalance.delay.ms=0",
    "delete.topic.enable=true",
    # Topics' file.delete.delay.ms (broker default log.segment.delete.delay.ms, 60 s): a deleted
    # cell's files are removed at once instead of during a later cell.
    "log.segment.delete.delay.ms=0",
    "message.max.bytes=16777216",
    "replica.fetch.max.bytes=16777216",
    # Client quotas (the reference caps figures are checked against) averaged over 2 one-second
    # samples instead of 11: a capped client then gets the cap second by second, not a burst of
    # ~10 s of quota followed by ~10 s of silence.
    "quota.window.num=2",
    "quota.window.size.seconds=1",
]
SERVER_PROPERTIES = [
    "process.roles=broker,controller",
    "controller.listener.names=CONTROLLER",
    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "share.coordinator.state.topic.replication.factor=1",  # Kafka 4.x only
    "share.coordinator.state.topic.min.isr=1",
    *BROKER_PROPERTIES,
]
MAX_NODES = 3  # a local cluster: three JVMs at 512 MB of heap (~1.2 GB resident in all)


PROXIED_PROTOCOLS = "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,PROXIED:PLAINTEXT"


def tls_listener(settings: dict, nodes: int, home: Path, port: int | None) -> tuple[list[str], list[str]]:
    """With setting `kafka_tls` = {"cert": PEM file, "key": PEM file (PKCS#8)}: the single node also serves its clients
    over TLS on `port` (listener SSL, as an MSK broker's TLS listener: no client certificate), its keystore the key and
    the certificate in one PEM file in `home`. Returns (the listener, its server.properties lines); ([], []) without
    the setting, and for a cluster's nodes (kafka@3: plain only)."""
    if not settings.get("kafka_tls") or nodes != 1:
        return [], []
    tls = certificate_files(settings, "kafka_tls", ("cert", "key"))
    keystore = home / "tls-keystore.pem"
    keystore.write_text(Path(tls["key"]).read_text() + Path(tls["cert"]).read_text())
    keystore.chmod(0o600)
    return [f"SSL://{HOST}:{port}"], [PROXIED_PROTOCOLS + ",SSL:SSL", "listener.name.ssl.ssl.keystore.type=PEM",
                                      f"listener.name.ssl.ssl.keystore.location={keystore}"]


def proxied_ports(settings: dict, nodes: int, ports: Callable[[], int]) -> list[tuple[int, int]]:
    """Per node, (the port of its second client listener, PROXIED; the port it advertises for it): where a TCP proxy
    in front of the node listens (a network fault's Toxiproxy, brokerbench.local.proxies; the latency tests'). A
    client that bootstraps through a proxy is told the proxies' addresses (Kafka answers with the listener a request
    came in on), so all it sends goes through them; one that bootstraps at the nodes' own ports goes direct: the
    same broker reached both ways. Setting `kafka_proxied_listener` = (listen port, the proxy's port) gives a
    single node's own; else each node takes two ports from `ports`."""
    given = settings.get("kafka_proxied_listener")
    if given:
        if nodes != 1:
            raise StackError("kafka_proxied_listener: a single node only")
        return [tuple(given)]
    return [(ports(), ports()) for _ in range(nodes)]


def cluster_properties(nodes: int) -> list[str]:
    """What a local cluster of `nodes` runs with besides BROKER_PROPERTIES (later lines of a properties file win)."""
    internal = min(3, nodes)
    return [
        # Internal topics replicated like a production cluster's (the consumer offsets' 3 partitions as on one
        # node: the group coordinator is ready in a second, not after 150 replicas are placed).
        f"offsets.topic.replication.factor={internal}",
        f"transaction.state.log.replication.factor={internal}",
        f"transaction.state.log.min.isr={min(2, internal)}",
        f"share.coordinator.state.topic.replication.factor={internal}",
        f"share.coordinator.state.topic.min.isr={min(2, internal)}",
        # The stack stops nodes one after another: without this, the last node waits for a controller
        # quorum that has already gone (up to 5 minutes) before it leaves.
        "controlled.shutdown.enable=false",
    ]


LOG_PATTERN = "[%d] %p %m (%c)%n"
LOG4J = ("rootLogger.level=WARN\nrootLogger.appenderRef.stdout.ref=STDOUT\n"
         "appender.stdout.type=Console\nappender.stdout.name=STDOUT\n"
         f"appender.stdout.layout.type=PatternLayout\nappender.stdout.layout.pattern={LOG_PATTERN}\n"
         "logger.kafka.name=kafka\nlogger.kafka.level=INFO\n"
         # The logs' own account (recovery after a crash, truncation, deletion): what a broker that lost or kept
         # messages across a restart did.
         "logger.storage.name=org.apache.kafka.storage.internals.log\nlogger.storage.level=INFO\n")


def pinned_heap(heap: str = HEAP) -> list[str]:
    """JVM flags for a pinned heap (-Xms = -Xmx): the JVM does not grow and shrink it while cells are measured."""
    return [f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseG1GC"]


class KafkaService:
    name = "kafka"
    startup_timeout_s = 120.0  # a hang, not a slow host (local/stack.py STARTUP_CAP_S)
    max_nodes = MAX_NODES
    proxied_sizes = tuple(range(1, MAX_NODES + 1))  # network faults: every node advertises its proxy (proxied_ports)
    download_mb = 54  # its jars (the lib folder install fills)

    def installed_version(self) -> str | None:
        return jar_version("kafka", "kafka_2.13")

    def install_version(self) -> str | None:
        return pom_version(POM.read_text(), "kafka_2.13")

    def install(self, log) -> None:
        fetch_maven_jars("kafka", POM.read_text(), log)

    def start(self, folder: Path, ports: Callable[[], int], settings: dict) -> Started:
        """One node (settings' `nodes` absent or 1), or a cluster of `nodes` combined broker-controller nodes
        with one controller quorum: a JVM each, formatted with one cluster id, each in folder/node-<id>."""
        lib = lib_dir("kafka")
        if not lib.is_dir():
            raise StackError("Kafka jars are missing: run `make setup`")
        nodes = settings.get("nodes", 1)
        listeners = [(ports(), ports()) for _ in range(nodes)]  # (client port, controller port) per node
        voters = ",".join(f"{node}@{HOST}:{controller}" for node, (_, controller) in enumerate(listeners, 1))
        classpath = f"{lib}/*"
        cluster = formatted_cluster_id(folder) or cluster_id()  # started again after a crash: the same cluster
        configs = []
        proxied = proxied_ports(settings, nodes, ports)
        tls_port = ports() if settings.get("kafka_tls") and nodes == 1 else None
        for node, ((port, controller_port), (listen, advertised)) in enumerate(zip(listeners, proxied), 1):
            home = folder if nodes == 1 else folder / f"node-{node}"
            home.mkdir(parents=True, exist_ok=True)
            config = home / "server.properties"
            tls_listeners, tls_properties = tls_listener(settings, nodes, home, tls_port)
            config.write_text("\n".join([
                *SERVER_PROPERTIES,
                *(cluster_properties(nodes) if nodes > 1 else []),
                f"node.id={node}",
                f"controller.quorum.voters={voters}",
                ",".join([f"listeners=PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port},"
                          f"PROXIED://{HOST}:{listen}", *tls_listeners]),
                ",".join([f"advertised.listeners=PLAINTEXT://{HOST}:{port},PROXIED://{HOST}:{advertised}",
                          *tls_listeners]),
                PROXIED_PROTOCOLS,
                *tls_properties,
                f"log.dirs={folder / 'data' if nodes == 1 else folder / 'data' / f'node-{node}'}",
                "",
            ]))
            (home / "log4j2.properties").write_text(LOG4J)
            configs.append((home, config))
        formatting = [subprocess.Popen([require("java"), "-cp", classpath, "kafka.tools.StorageTool", "format",
                                        f"--cluster-id={cluster}", "-c", str(config), "--ignore-formatted"],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                      for _, config in configs]
        for fmt in formatting:
            _, stderr = fmt.communicate()
            if fmt.returncode != 0:
                raise StackError(f"formatting Kafka storage failed: {stderr[-1500:]}")
        commands = [["java", *pinned_heap(), f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}", "-cp",
                     classpath, "kafka.Kafka", str(config)] for home, config in configs]
        pids = [spawn(command, home, home / "kafka.log") for command, (home, _) in zip(commands, configs)]
        version = self.installed_version() or "unknown"
        bootstrap = ",".join(f"{HOST}:{port}" for port, _ in listeners)
        # where the proxies of a network fault go (brokerbench.local.proxies): node, the proxy's port, the listener's
        proxy = {"links": [{"node": str(node), "listen": advertised, "upstream": listen}
                           for node, (listen, advertised) in enumerate(proxied, 1)],
                 "clients": {"bootstrap_servers": ",".join(f"{HOST}:{advertised}" for _, advertised in proxied)}}
        endpoint = {"bootstrap_servers": bootstrap, "version": version, "proxy": proxy}
        if tls_port:  # the same node over TLS: a target of its own names it with tls
            endpoint["tls_bootstrap_servers"] = f"{HOST}:{tls_port}"
        extra = {"controller_port": listeners[0][1], "proxied_port": proxied[0][0], "proxy_port": proxied[0][1]}
        if nodes > 1:
            extra = {"nodes": nodes, "ports": [port for port, _ in listeners],
                     "controller_ports": [controller for _, controller in listeners],
                     "logs": [str(home / "kafka.log") for home, _ in configs]}
            # each node as faults find it (brokers/kafka/cluster.py): its node.id, client port and process, and
            # how to start it again on its own ports and data
            endpoint["nodes"] = [{"node": str(node), "host": HOST, "port": port, "pids": [pid], "command": command,
                                  "folder": str(home)}
                                 for node, ((port, _), pid, command, (home, _)) in
                                 enumerate(zip(listeners, pids, commands, configs), 1)]
        return Started(pids, listeners[0][0], endpoint, version, str(configs[0][0] / "kafka.log"), extra)

    def ready(self, started: Started) -> bool:
        """Every node registered and unfenced, as the first node's metadata lists them, and each one giving an
        idempotent producer its id (`gives_producer_ids`)."""
        return (broker_count(started.port) >= started.extra.get("nodes", 1)
                and all(gives_producer_ids(port) for port in started.extra.get("ports", [started.port])))


def formatted_cluster_id(folder: Path) -> str | None:
    """The cluster id the storage under `folder` was formatted with (meta.properties), if any."""
    for meta in sorted((folder / "data").glob("**/meta.properties")):
        for line in meta.read_text().splitlines():
            if line.startswith("cluster.id="):
                return line.split("=", 1)[1].strip()
    return None


def cluster_id() -> str:
    """A random cluster id, as Kafka's own Uuid.randomUuid: never a leading dash."""
    while True:
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not value.startswith("-"):
            return value


def gives_producer_ids(port: int, timeout_s: float = 1.0) -> bool:
    """Whether the node answers an InitProducerId (v2, no transactional id: what an idempotent producer asks first)
    with a producer id. A node just started answers "coordinator load in progress" (error 14) until it has its first
    block of ids from the controller: a cell's idempotent producer that started then sent nothing until it had one,
    and on the 3-node cluster, with the leader killed 1.5 s into the measured window, not for 9.5 s (a fresh-clone
    CI, 2026-11-30): the window before the fault held no acknowledgement. Each answer takes one id of the node's
    block (a 64-bit range)."""
    client_id = b"brokerbench"
    # header v2: api key 22, version 2, correlation id 1, client id, no tagged fields; body: transactional id null
    # (compact nullable string: 0), transaction timeout, no tagged fields
    request = (struct.pack(">hhih", 22, 2, 1, len(client_id)) + client_id + b"\x00\x00"
               + struct.pack(">i", 60_000) + b"\x00")
    # size, correlation id, tagged fields, throttle time, error code
    answer = _answer_head(port, request, 4 + 4 + 1 + 4 + 2, timeout_s)
    if answer is None:
        return False
    _size, correlation_id, _tagged, _throttle_ms, error = struct.unpack_from(">iiBih", answer)
    return correlation_id == 1 and error == 0


def _answer_head(port: int, request: bytes, size: int, timeout_s: float) -> bytes | None:
    """The first `size` bytes (at least) of the node's answer to one request (correlation id 1); None when nothing
    answers or the connection closes first."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout_s) as sock:
            sock.sendall(struct.pack(">i", len(request)) + request)
            head = b""
            while len(head) < size:
                chunk = sock.recv(max(64, size - len(head)))
                if not chunk:
                    return None
                head += chunk
    except OSError:
        return None
    return head


def broker_count(port: int, timeout_s: float = 1.0) -> int:
    """Brokers a Metadata request (v4, all topics) lists; 0 when nothing answers yet. A listed broker
    is registered and unfenced: topics can be created, which an open port alone does not promise."""
    client_id = b"brokerbench"
    request = struct.pack(">hhih", 3, 4, 1, len(client_id)) + client_id + struct.pack(">ib", -1, 0)
    head = _answer_head(port, request, 16, timeout_s)  # size, correlation id, throttle time, broker count
    if head is None:
        return 0
    _size, correlation_id, _throttle_ms, brokers = struct.unpack_from(">iiii", head)
    return brokers if correlation_id == 1 else 0
