"""Pulsar on the local stack: a standalone broker (in-process BookKeeper, RocksDB metadata store) from Maven
Central jars, bound to 127.0.0.1."""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ...local.install import fetch_maven_jars, lib_dir, pom_version
from ...local.processes import HOST, StackError, certificate_files, free_port, pid_alive, spawn, stop
from .. import Started
from .admin import Admin, AdminError

POM = Path(__file__).with_name("pulsar.pom.xml")
# Pulsar's poms name extra repositories: every one is mirrored to Maven Central.
MAVEN_SETTINGS = Path(__file__).with_name("maven-settings.xml")
HEAP = "512m"
# Netty's buffers (the broker's and its bookie's: one process here) and the managed-ledger cache live off the heap. At
# 256m a cell at max rate with a consumer attached ran it out (OutOfDirectMemoryError in the bookie's request handler,
# then "Bookie handle is not available"): every write failed and the standalone stopped serving until restarted. A
# ceiling, not a reservation: memory is taken only as the broker needs it.
DIRECT_MEMORY = "1g"
NAMESPACE = "public/default"  # created by the standalone starter once the broker is up
# Everything not listed keeps the broker's (ServiceConfiguration) and the bookie's (ServerConfiguration)
# defaults; the standalone reads this one file for both.
STANDALONE_CONF = [
    "clusterName=standalone",
    f"bindAddress={HOST}",
    "metadataStoreUrl=",  # empty: RocksDB under --metadata-dir
    "managedLedgerDefaultEnsembleSize=1",
    "managedLedgerDefaultWriteQuorum=1",
    "managedLedgerDefaultAckQuorum=1",
    "loadManagerClassName=org.apache.pulsar.broker.loadbalance.NoopLoadManager",
    "loadBalancerEnabled=false",
    "transactionCoordinatorEnabled=false",
    "functionsWorkerEnabled=false",
    "webSocketServiceEnabled=false",
    # Idle topics are not deleted behind a cell's back (the default checks every 60 s).
    "brokerDeleteInactiveTopicsEnabled=false",
    # Topics are created explicitly (admin REST): with auto-creation on, a client still connected to a
    # deleted partitioned topic silently re-creates its partitions as plain topics.
    "allowAutoTopicCreation=false",
    "allowAutoTopicCreationType=non-partitioned",
    "defaultNumberOfNamespaceBundles=4",
    "brokerShutdownTimeoutMs=5000",  # SIGTERM ends it in seconds, not the default minute
    # A caught-up subscription is served as soon as an entry is written, not at the next check (default every
    # 10 ms: ~5 ms more end-to-end latency on average); the setting published Pulsar benchmarks use.
    "managedLedgerNewEntriesCheckDelayInMillis=0",
    # Counting a backlog's messages (analyzeBacklog: entries may be batches) reads up to a million entries in
    # up to 30 s (defaults 10,000 and 2 minutes): a cell's undelivered messages are counted, not guessed.
    "subscriptionBacklogScanMaxEntries=1000000",
    "subscriptionBacklogScanMaxTimeMs=30000",
    # The in-process bookie: loopback only, no fsync per write (acknowledged once written, as Kafka's page cache).
    "allowEphemeralPorts=true",
    "listeningInterface=lo",
    "allowLoopback=true",
    "ledgerStorageClass=org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
    "journalSyncData=false",
    "journalMaxGroupWaitMSec=1",  # as Pulsar ships it: the journal groups writes for up to 1 ms
    "diskUsageThreshold=0.99",
    "diskUsageWarnThreshold=0.99",
    "gcWaitTime=300000",
    "flushInterval=60000",
    "dbStorage_writeCacheMaxSizeMb=32",
    "dbStorage_readAheadCacheMaxSizeMb=32",
    "dbStorage_rocksDB_blockCacheSize=16777216",
]
LOG4J = ("rootLogger.level=WARN\nrootLogger.appenderRef.stdout.ref=STDOUT\n"
         "appender.stdout.type=Console\nappender.stdout.name=STDOUT\n"
         "appender.stdout.layout.type=PatternLayout\nappender.stdout.layout.pattern=[%d] %p %m (%c)%n\n"
         "logger.standalone.name=org.apache.pulsar.PulsarStandalone\nlogger.standalone.level=INFO\n")
# What the JVM needs opened for Pulsar's Netty, BookKeeper and metrics (as Pulsar's own bin/pulsar passes).
JVM_OPENS = ["java.base/java.io", "java.base/java.util.zip", "java.base/sun.net", "java.base/jdk.internal.platform",
             "java.base/java.lang", "java.base/java.nio", "java.management/sun.management",
             "jdk.management/com.sun.management.internal"]
READY_TOPIC = "bb-ready"
INTERNAL_LISTENER = "internal"
PROXIED_LISTENER = "proxied"  # the listener a client names (target listener_name) to be sent through the proxy


def advertised(port: int, settings: dict) -> list[str]:
    """What the broker advertises: its own address, and with setting `pulsar_proxied_listener` = a TCP proxy's
    port (the latency tests' Toxiproxy in front of the broker's port) a second listener, PROXIED_LISTENER, at
    the proxy. A client naming it (target listener_name) is answered the proxy's address by every lookup, one
    naming none the broker's own; a name the broker does not advertise fails the lookup. Pulsar refuses
    advertisedAddress beside advertisedListeners; the broker binds only its own port.
    Where a client then connects is the standalone's own rule: a standalone whose answer is a loopback address
    tells the client to connect through the service URL it was given (the lookup's proxyThroughServiceUrl;
    TopicLookupBase.shouldRedirectThroughServiceUrl in Pulsar 4.0), so here the service URL decides: at the
    proxy's port every connection goes through the proxy, at the broker's none does, whichever listener is
    named. A broker not run as a standalone sends the client to the named listener's address."""
    proxy_port = settings.get("pulsar_proxied_listener")
    if not proxy_port:
        return [f"advertisedAddress={HOST}"]
    if not isinstance(proxy_port, int) or isinstance(proxy_port, bool) or not 0 < proxy_port < 65536 \
            or proxy_port == port:
        raise StackError(f"pulsar_proxied_listener: a port other than the broker's own ({port}), not {proxy_port!r}")
    return [f"advertisedListeners={INTERNAL_LISTENER}:pulsar://{HOST}:{port},"
            f"{PROXIED_LISTENER}:pulsar://{HOST}:{proxy_port}",
            f"internalListenerName={INTERNAL_LISTENER}"]


def tls_conf(settings: dict, tls_port: int) -> list[str]:
    """With setting `pulsar_tls` = {"cert": PEM file, "key": PEM file (PKCS#8)}, the broker also serves its binary
    protocol over TLS at `tls_port` (brokerServicePortTls), with that certificate: a lookup then answers brokerUrlTls
    (pulsar+ssl://), as a managed Pulsar's does. Clients check the certificate against their own trust store."""
    tls = certificate_files(settings, "pulsar_tls", ("cert", "key"))
    if settings.get("pulsar_proxied_listener"):
        raise StackError("pulsar_tls: not beside pulsar_proxied_listener (its listeners name pulsar:// only)")
    return [f"brokerServicePortTls={tls_port}", f"tlsCertificateFilePath={tls['cert']}",
            f"tlsKeyFilePath={tls['key']}"]


class PulsarService:
    name = "pulsar"
    # The standalone produces ~7 s after its start with the class-data archive (~14 s without) on a two-core
    # machine; starting beside the other services on a loaded one, several times that.
    startup_timeout_s = 120.0
    download_mb = 234  # its 316 jars (an empty Maven repository took 242 MB); then an 82 MB class-data archive

    def installed_version(self) -> str | None:
        for jar in lib_dir("pulsar").glob("pulsar-broker-*.jar"):
            if match := re.fullmatch(r"pulsar-broker-(\d[\w.-]*)\.jar", jar.name):
                return match.group(1)
        return None

    def install_version(self) -> str | None:
        return pom_version(POM.read_text(), "pulsar-broker")

    def install(self, log) -> None:
        fetch_maven_jars("pulsar", POM.read_text(), log, maven_settings=MAVEN_SETTINGS)
        if not class_archive().is_file():
            self.record_class_archive(log)

    def record_class_archive(self, log) -> None:
        """Start the standalone once and keep the classes it loaded as a CDS archive: later starts map them
        instead of loading them from the jars, about half the start-up time (7 s instead of 14 s on a busy
        two-core machine). The archive lives beside the jars, so fetching other jars removes it; a JVM that
        does not match it ignores it. Without one the broker only starts slower, so a failure is no error."""
        log("recording Pulsar's class-data archive (a faster start) ...")
        archive = class_archive()
        recording = archive.with_suffix(".recording")
        recording.unlink(missing_ok=True)
        with tempfile.TemporaryDirectory(prefix="brokerbench-pulsar-") as tmp:
            folder = Path(tmp)
            (folder / "data").mkdir()
            started = self.start(folder, free_port, {}, [f"-XX:ArchiveClassesAtExit={recording}"])
            try:
                deadline = time.monotonic() + self.startup_timeout_s
                while time.monotonic() < deadline and pid_alive(started.pids[0]) and not self.ready(started):
                    time.sleep(0.5)
            finally:
                stop(started.pids[0], timeout_s=120)  # the archive is written as the JVM exits
            # A cut-short archive would crash every later start (SIGBUS): it is kept once a JVM has mapped it.
            mapped = recording.is_file() and subprocess.run(
                ["java", f"-XX:SharedArchiveFile={recording}", "-Xshare:on", "-cp", f"{lib_dir('pulsar')}/*",
                 "-version"], cwd=folder, capture_output=True).returncode == 0
        if mapped:
            recording.replace(archive)
        else:
            recording.unlink(missing_ok=True)
            log("  no usable archive was written: Pulsar starts without one")

    def start(self, folder: Path, ports: Callable[[], int], settings: dict, jvm_options: list[str] | None = None
              ) -> Started:
        lib = lib_dir("pulsar")
        if not lib.is_dir():
            raise StackError("Pulsar jars are missing: run `make setup-all`")
        port, web_port, bookie_port = ports(), ports(), ports()
        tls_port = ports() if settings.get("pulsar_tls") else None
        data = folder / "data"
        (data / "tmp").mkdir(parents=True, exist_ok=True)
        config = folder / "standalone.conf"
        config.write_text("\n".join([*STANDALONE_CONF, *advertised(port, settings), f"brokerServicePort={port}",
                                     f"webServicePort={web_port}",
                                     *(tls_conf(settings, tls_port) if tls_port else []), ""]))
        log4j = folder / "log4j2.properties"
        log4j.write_text(LOG4J)
        if jvm_options is None:
            archive = class_archive()
            jvm_options = [f"-XX:SharedArchiveFile={archive}"] if archive.is_file() else []
        # A pinned heap (-Xms = -Xmx), as Kafka's: the JVM does not resize it while cells are measured.
        cmd = ["java", *jvm_options, f"-Xms{HEAP}", f"-Xmx{HEAP}", f"-XX:MaxDirectMemorySize={DIRECT_MEMORY}",
               "-XX:+UseG1GC",
               "-Djava.net.preferIPv4Stack=true", f"-Djava.io.tmpdir={data / 'tmp'}",
               *(arg for module in JVM_OPENS for arg in ("--add-opens", f"{module}=ALL-UNNAMED")),
               "-Dio.netty.tryReflectionSetAccessible=true", f"-Dlog4j2.configurationFile={log4j}",
               "-cp", f"{lib}/*", "org.apache.pulsar.PulsarStandaloneStarter",
               "-c", str(config), "-nfw", "-nss",  # no functions worker, no stream storage
               "--metadata-dir", str(data / "metadata"), "--bookkeeper-dir", str(data / "bookkeeper"),
               "--bookkeeper-port", str(bookie_port)]
        log = folder / "pulsar.log"
        version = self.installed_version() or "unknown"
        # journal_sync_data: the bookie's setting above, which no broker API reports (durability statements read it).
        endpoint = {"service_url": f"pulsar://{HOST}:{port}", "admin_url": f"http://{HOST}:{web_port}",
                    "version": version, "journal_sync_data": "journalSyncData=true" in STANDALONE_CONF}
        extra = {"web_port": web_port, "bookie_port": bookie_port, "heap": HEAP}
        if tls_port:  # the same broker over TLS: a target of its own names this service URL
            endpoint["tls_service_url"] = f"pulsar+ssl://{HOST}:{tls_port}"
            extra["tls_port"] = tls_port
        # The working folder is the data folder: whatever the broker still writes relative to it stays there.
        return Started([spawn(cmd, data, log)], port, endpoint, version, str(log), extra)

    def ready(self, started: Started) -> bool:
        """The admin API lists the namespace the standalone creates last, and a message is produced through
        the binary protocol: the first producer also takes the namespace's bundle, so the first cell does not."""
        admin = Admin(started.endpoint["admin_url"], timeout_s=2)
        tenant = NAMESPACE.split("/")[0]
        try:  # the tenant first: asking for a missing tenant's namespaces logs an error in the broker each time
            if tenant not in admin.tenants() or NAMESPACE not in admin.namespaces(tenant):
                return False
        except (AdminError, OSError):
            return False
        return produces(started.endpoint, f"persistent://{NAMESPACE}/{READY_TOPIC}")


def class_archive() -> Path:
    return lib_dir("pulsar").parent / "pulsar.jsa"


def produces(endpoint: dict, topic: str) -> bool:
    """Whether one message can be produced to `topic` (created if missing) within a few seconds."""
    from .driver import produce_one  # the client library loads only when a broker is actually started

    return produce_one(endpoint, topic)
