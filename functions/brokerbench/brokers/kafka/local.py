"""Kafka on the local stack: a single-node KRaft broker from Maven Central jars, bound to 127.0.0.1."""

from __future__ import annotations

import base64
import socket
import struct
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

from ...local.install import fetch_maven_jars, jar_version, lib_dir
from ...local.processes import HOST, StackError, spawn
from .. import Started

POM = Path(__file__).with_name("kafka.pom.xml")
HEAP = "512m"
# What a single-node Kafka broker here runs with, in KRaft mode and in ZooKeeper mode (brokers/kafka_zookeeper).
BROKER_PROPERTIES = [
    "num.partitions=1",
    "offsets.topic.replication.factor=1",
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
    "node.id=1",
    "controller.listener.names=CONTROLLER",
    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "share.coordinator.state.topic.replication.factor=1",  # Kafka 4.x only
    "share.coordinator.state.topic.min.isr=1",
    *BROKER_PROPERTIES,
]
LOG_PATTERN = "[%d] %p %m (%c)%n"
LOG4J = ("rootLogger.level=WARN\nrootLogger.appenderRef.stdout.ref=STDOUT\n"
         "appender.stdout.type=Console\nappender.stdout.name=STDOUT\n"
         f"appender.stdout.layout.type=PatternLayout\nappender.stdout.layout.pattern={LOG_PATTERN}\n"
         "logger.kafka.name=kafka\nlogger.kafka.level=INFO\n")


def pinned_heap(heap: str = HEAP) -> list[str]:
    """JVM flags for a pinned heap (-Xms = -Xmx): the JVM does not grow and shrink it while cells are measured."""
    return [f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseG1GC"]


class KafkaService:
    name = "kafka"
    startup_timeout_s = 60.0

    def installed_version(self) -> str | None:
        return jar_version("kafka", "kafka_2.13")

    def install(self, log) -> None:
        fetch_maven_jars("kafka", POM.read_text(), log)

    def start(self, folder: Path, ports: Callable[[], int], settings: dict) -> Started:
        lib = lib_dir("kafka")
        if not lib.is_dir():
            raise StackError("Kafka jars are missing: run `make setup`")
        port, controller_port = ports(), ports()
        config = folder / "server.properties"
        config.write_text("\n".join([
            *SERVER_PROPERTIES,
            f"controller.quorum.voters=1@{HOST}:{controller_port}",
            f"listeners=PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
            f"advertised.listeners=PLAINTEXT://{HOST}:{port}",
            f"log.dirs={folder / 'data'}",
            "",
        ]))
        log4j = folder / "log4j2.properties"
        log4j.write_text(LOG4J)
        classpath = f"{lib}/*"
        fmt = subprocess.run(["java", "-cp", classpath, "kafka.tools.StorageTool", "format",
                              f"--cluster-id={cluster_id()}", "-c", str(config), "--ignore-formatted"],
                             capture_output=True, text=True)
        if fmt.returncode != 0:
            raise StackError(f"formatting Kafka storage failed: {fmt.stderr[-1500:]}")
        cmd = ["java", *pinned_heap(), f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath, "kafka.Kafka",
               str(config)]
        log = folder / "kafka.log"
        version = self.installed_version() or "unknown"
        return Started([spawn(cmd, folder, log)], port, {"bootstrap_servers": f"{HOST}:{port}", "version": version},
                       version, str(log), {"controller_port": controller_port})

    def ready(self, started: Started) -> bool:
        return broker_count(started.port) > 0


def cluster_id() -> str:
    """A random cluster id, as Kafka's own Uuid.randomUuid: never a leading dash."""
    while True:
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not value.startswith("-"):
            return value


def broker_count(port: int, timeout_s: float = 1.0) -> int:
    """Brokers a Metadata request (v4, all topics) lists; 0 when nothing answers yet. A listed broker
    is registered and unfenced: topics can be created, which an open port alone does not promise."""
    client_id = b"brokerbench"
    request = struct.pack(">hhih", 3, 4, 1, len(client_id)) + client_id + struct.pack(">ib", -1, 0)
    try:
        with socket.create_connection((HOST, port), timeout=timeout_s) as sock:
            sock.sendall(struct.pack(">i", len(request)) + request)
            head = b""
            while len(head) < 16:  # size, correlation id, throttle time, broker count
                chunk = sock.recv(16 - len(head))
                if not chunk:
                    return 0
                head += chunk
    except OSError:
        return 0
    _size, correlation_id, _throttle_ms, brokers = struct.unpack(">iiii", head)
    return brokers if correlation_id == 1 else 0
