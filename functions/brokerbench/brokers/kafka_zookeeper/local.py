"""Kafka in ZooKeeper mode on the local stack: a standalone ZooKeeper and one Kafka 3.9 broker (or a cluster of
up to three) from Maven Central jars (Kafka 3.9's jars include ZooKeeper), all bound to 127.0.0.1.

The broker's settings, heap and readiness probe are the KRaft broker's (brokers/kafka/local.py); only the
metadata quorum differs. Kafka 3.9 logs through reload4j, so its logging file is in log4j 1.2's format.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ...local.install import fetch_maven_jars, jar_version, lib_dir, pom_version
from ...local.processes import HOST, StackError, spawn
from .. import Started
from ..kafka.local import BROKER_PROPERTIES, LOG_PATTERN, MAX_NODES, broker_count, cluster_properties, pinned_heap

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
    startup_timeout_s = 120.0  # a hang, not a slow host (local/stack.py STARTUP_CAP_S)
    max_nodes = MAX_NODES
    download_mb = 46  # Kafka 3.9's jars, ZooKeeper's included (the lib folder install fills)

    def installed_version(self) -> str | None:
        return jar_version(JARS, "kafka_2.13")

    def install_version(self) -> str | None:
        return pom_version(POM.read_text(), "kafka_2.13")

    def install(self, log) -> None:
        fetch_maven_jars(JARS, POM.read_text(), log)

    def start(self, folder: Path, ports: Callable[[], int], settings: dict) -> Started:
        lib = lib_dir(JARS)
        if not lib.is_dir():
            raise StackError("Kafka 3.9 jars (ZooKeeper mode) are missing: run `make setup-all`")
        zookeeper_port = ports()
        zookeeper_config = folder / "zookeeper.properties"
        zookeeper_config.write_text("\n".join([
            *ZOOKEEPER_PROPERTIES,
            f"clientPortAddress={HOST}",
            f"clientPort={zookeeper_port}",
            f"dataDir={folder / 'data' / 'zookeeper'}",
            "",
        ]))
        nodes = settings.get("nodes", 1)
        ports_of = [ports() for _ in range(nodes)]
        log4j = folder / "log4j.properties"
        log4j.write_text(LOG4J)
        java = ["java", f"-Dlog4j.configuration=file:{log4j}", "-cp", f"{lib}/*"]
        zookeeper_log = folder / "zookeeper.log"
        zookeeper = spawn([*java, *pinned_heap(ZOOKEEPER_HEAP), "org.apache.zookeeper.server.ZooKeeperServerMain",
                           str(zookeeper_config)], folder, zookeeper_log)
        brokers, logs = [], []
        for broker_id, port in enumerate(ports_of):
            home = folder if nodes == 1 else folder / f"node-{broker_id}"
            home.mkdir(parents=True, exist_ok=True)
            config = home / "server.properties"
            config.write_text("\n".join([
                *BROKER_PROPERTIES,
                *(cluster_properties(nodes) if nodes > 1 else []),
                f"broker.id={broker_id}",
                f"zookeeper.connect={HOST}:{zookeeper_port}",
                # All start at once: a broker waits for ZooKeeper as long as the stack waits for the brokers
                # (the default, 18 s, is short on a loaded machine).
                f"zookeeper.connection.timeout.ms={int(self.startup_timeout_s * 1000)}",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT",
                f"listeners=PLAINTEXT://{HOST}:{port}",
                f"advertised.listeners=PLAINTEXT://{HOST}:{port}",
                f"log.dirs={folder / 'data' / 'kafka' if nodes == 1 else folder / 'data' / f'kafka-{broker_id}'}",
                "",
            ]))
            logs.append(home / "kafka.log")
            brokers.append(spawn([*java, *pinned_heap(), "kafka.Kafka", str(config)], home, logs[-1]))
        version = self.installed_version() or "unknown"
        extra = {"zookeeper_port": zookeeper_port, "zookeeper_log": str(zookeeper_log)}
        if nodes > 1:
            extra.update(nodes=nodes, ports=ports_of, logs=[str(log) for log in logs])
        # ZooKeeper first: the stack stops the last started first, so the brokers leave while ZooKeeper is there.
        return Started([zookeeper, *brokers], ports_of[0],
                       {"bootstrap_servers": ",".join(f"{HOST}:{port}" for port in ports_of), "version": version},
                       version, str(logs[0]), extra)

    def ready(self, started: Started) -> bool:
        # A broker lists the others once they have registered in ZooKeeper and the controller has told it so.
        return broker_count(started.port) >= started.extra.get("nodes", 1)
