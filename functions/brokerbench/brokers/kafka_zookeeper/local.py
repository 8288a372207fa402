"""Kafka in ZooKeeper mode on the local stack: a standalone ZooKeeper and a single Kafka 3.9 broker from Maven
Central jars (Kafka 3.9's jars include ZooKeeper), both bound to 127.0.0.1.

The broker's settings, heap and readiness probe are the KRaft broker's (brokers/kafka/local.py); only the
metadata quorum differs. Kafka 3.9 logs through reload4j, so its logging file is in log4j 1.2's format.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ...local.install import fetch_maven_jars, jar_version, lib_dir
from ...local.processes import HOST, StackError, spawn
from .. import Started
from ..kafka.local import BROKER_PROPERTIES, LOG_PATTERN, broker_count, pinned_heap

POM = Path(__file__).with_name("kafka39.pom.xml")
JARS = "kafka-zookeeper"  # its own jar folder: Kafka 3.9's jars must not mix with the KRaft broker's 4.x ones
ZOOKEEPER_HEAP = "128m"  # serving one broker it uses ~12 MB of heap
ZOOKEEPER_PROPERTIES = [
    "tickTime=2000",
    "maxClientCnxns=0",
    "admin.enableServer=false",  # no Jetty admin server (by default on 0.0.0.0:8080)
]
LOG4J = ("log4j.rootLogger=WARN, stdout\n"
         "log4j.appender.stdout=org.apache.log4j.ConsoleAppender\n"
         "log4j.appender.stdout.layout=org.apache.log4j.PatternLayout\n"
         f"log4j.appender.stdout.layout.ConversionPattern={LOG_PATTERN}\n"
         "log4j.logger.kafka=INFO\n"
         "log4j.logger.org.apache.zookeeper=INFO\n")


class KafkaZooKeeperService:
    name = "kafka-zookeeper"
    startup_timeout_s = 60.0

    def installed_version(self) -> str | None:
        return jar_version(JARS, "kafka_2.13")

    def install(self, log) -> None:
        fetch_maven_jars(JARS, POM.read_text(), log)

    def start(self, folder: Path, ports: Callable[[], int], settings: dict) -> Started:
        lib = lib_dir(JARS)
        if not lib.is_dir():
            raise StackError("Kafka 3.9 jars (ZooKeeper mode) are missing: run `make setup`")
        zookeeper_port, port = ports(), ports()
        zookeeper_config = folder / "zookeeper.properties"
        zookeeper_config.write_text("\n".join([
            *ZOOKEEPER_PROPERTIES,
            f"clientPortAddress={HOST}",
            f"clientPort={zookeeper_port}",
            f"dataDir={folder / 'data' / 'zookeeper'}",
            "",
        ]))
        config = folder / "server.properties"
        config.write_text("\n".join([
            *BROKER_PROPERTIES,
            "broker.id=0",
            f"zookeeper.connect={HOST}:{zookeeper_port}",
            # Both start at once: the broker waits for ZooKeeper as long as the stack waits for the broker
            # (the default, 18 s, is short on a loaded machine).
            f"zookeeper.connection.timeout.ms={int(self.startup_timeout_s * 1000)}",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT",
            f"listeners=PLAINTEXT://{HOST}:{port}",
            f"advertised.listeners=PLAINTEXT://{HOST}:{port}",
            f"log.dirs={folder / 'data' / 'kafka'}",
            "",
        ]))
        log4j = folder / "log4j.properties"
        log4j.write_text(LOG4J)
        java = ["java", f"-Dlog4j.configuration=file:{log4j}", "-cp", f"{lib}/*"]
        zookeeper_log = folder / "zookeeper.log"
        zookeeper = spawn([*java, *pinned_heap(ZOOKEEPER_HEAP), "org.apache.zookeeper.server.ZooKeeperServerMain",
                           str(zookeeper_config)], folder, zookeeper_log)
        log = folder / "kafka.log"
        kafka = spawn([*java, *pinned_heap(), "kafka.Kafka", str(config)], folder, log)
        version = self.installed_version() or "unknown"
        # ZooKeeper first: the stack stops the last started first, so the broker leaves while ZooKeeper is there.
        return Started([zookeeper, kafka], port, {"bootstrap_servers": f"{HOST}:{port}", "version": version},
                       version, str(log), {"zookeeper_port": zookeeper_port, "zookeeper_log": str(zookeeper_log)})

    def ready(self, started: Started) -> bool:
        # The broker lists itself once it has registered in ZooKeeper and the controller has told it so.
        return broker_count(started.port) > 0
