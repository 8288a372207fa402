"""Redis on the local stack: Debian's redis-server bound to 127.0.0.1, AOF on (appendfsync everysec) unless
the stack is made with redis_aof=False (`--no-aof`).

The single node's AOF is compacted between cells, never during one: its automatic rewrite is off
(auto-aof-rewrite-percentage 0) and the driver rewrites it before a cell once it has grown (the endpoint's
`aof_rewrite`: driver.py compact_aof). Each cell deletes the previous cells' streams, so an automatic rewrite
was set off by data no cell still held: by default every 64 MB of AOF, one Redis cell in six or seven of the
quick suite (1 KB at 1,000 msgs/s writes about 10 MB), at a moment chance chose. Its fork and the switch to the new
file stalled Redis for 4 to 13 ms (bench/redis_tail.py), which alone moved that cell's end-to-end p99 by up to a
third. A managed ElastiCache offers no AOF on its current engine versions and forks for a snapshot in its backup
window.

`redis@2` and `redis@3` are the failover case: one master and one or two replicas (a redis-server each, in
node-<n>/, node 1 the first master), watched by three Sentinels (quorum 2) that promote a replica when the master
stops answering. Redis replicates asynchronously: an XADD is answered before any replica has it, so a failover
may lose acknowledged entries, which is what a run on this cluster measures. The Sentinels are the cluster's
processes, not a node's: a fault on a node kills or pauses its redis-server only, and Sentinel, like a managed
service's control plane, survives it to carry out the failover. Both config files are rewritten by their
processes (Sentinel records the current master and the other Sentinels; a redis-server that Sentinel turns into a
replica or a master rewrites its replicaof line), so a node started again comes back with the role it last had
and Sentinel makes it a replica of the current master.

Network faults (brokerbench.faults, brokerbench.local.proxies): each redis-server has a port of its own for a proxy
in front of it. One node's clients are given the proxy's port. Behind Sentinel the clients ask the Sentinels (reached
directly: they are the cluster's control plane, as the brokers' own links are not proxied elsewhere) for the master,
and connect to the proxy in front of the address they name (`node_addresses`, driver.py), so the Sentinels keep
watching the nodes themselves and a fault on a client link fails nothing over."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from ...local.install import install_debian
from ...local.processes import HOST, StackError, pid_alive, port_answers, require, spawn
from .. import Started
from .cluster import (DOWN_AFTER_MS, FAILOVER_TIMEOUT_MS, MASTER_NAME, QUORUM, SENTINELS, node_name, replica_links,
                      sentinel_ready)

# Command -> the Debian package that provides it (redis-benchmark: the reference figures' tool).
DEBIAN_PACKAGES = {"redis-server": "redis-server", "redis-benchmark": "redis-tools"}
# Set when `local up` starts Redis: it then requires this AUTH password. The password goes to redis-server in a
# config file only its owner reads (not on its command line, which `ps` shows); the endpoint names the variable,
# never the value, so no event, log or report can hold it.
AUTH_ENV = "BROKERBENCH_REDIS_PASSWORD"


def _auth_config(folder: Path, password: str) -> Path:
    return _private_file(folder / "auth.conf", f'requirepass "{_quoted(password)}"\n')


def _resp(*parts: str) -> bytes:
    return b"".join([f"*{len(parts)}\r\n".encode(), *(b"$%d\r\n%b\r\n" % (len(p.encode()), p.encode()) for p in parts)])


def node_config(port: int, data: Path, aof: bool, master_port: int | None, password: str | None) -> str:
    """A redis-server's config file: loopback only, no RDB snapshots, AOF as the stack says; a replica of
    `master_port` unless it is the first master. With a password it requires it of clients and gives it to its
    master (masterauth) when it replicates. A master starts a replica's full sync at once: by default (diskless
    sync) it waits 5 s for more replicas to share the transfer, which held the cluster's start and each
    returning node's resync for those 5 s."""
    lines = [f"bind {HOST}", f"port {port}", f'dir "{data}"', 'save ""', f"appendonly {'yes' if aof else 'no'}",
             "appendfsync everysec", "daemonize no", "protected-mode yes", 'logfile ""', "repl-diskless-sync-delay 0",
             *([f"replicaof {HOST} {master_port}"] if master_port else [])]
    if password:
        quoted = _quoted(password)
        lines += [f'requirepass "{quoted}"', f'masterauth "{quoted}"']
    return "\n".join(lines) + "\n"


def sentinel_config(port: int, folder: Path, master_port: int, password: str | None, *, myid: str,
                    replica_ports: list[int], others: list[tuple[int, str]]) -> str:
    """A Sentinel's config file: it watches the master of MASTER_NAME with the cluster's quorum and timings, and
    knows from the start the replicas and the other Sentinels (`others`: their ports and ids), as it would write
    them itself once it had found them (from the master's INFO, asked every 10 s, and the Sentinels' hello
    messages): the cluster is ready, and can fail over, without waiting for that discovery."""
    lines = [f"bind {HOST}", f"port {port}", f'dir "{folder}"', "daemonize no", "protected-mode yes", 'logfile ""',
             f"sentinel myid {myid}",
             f"sentinel monitor {MASTER_NAME} {HOST} {master_port} {QUORUM}",
             f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}",
             f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}",
             f"sentinel parallel-syncs {MASTER_NAME} 1",
             *(f"sentinel known-replica {MASTER_NAME} {HOST} {p}" for p in replica_ports),
             *(f"sentinel known-sentinel {MASTER_NAME} {HOST} {p} {other}" for p, other in others)]
    if password:
        lines.append(f'sentinel auth-pass {MASTER_NAME} "{_quoted(password)}"')
    return "\n".join(lines) + "\n"


def _quoted(password: str) -> str:
    return password.replace("\\", "\\\\").replace('"', '\\"')


def _private_file(path: Path, text: str) -> Path:
    """A file only its owner reads (it may hold the AUTH password)."""
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(text)
    return path


class RedisService:
    name = "redis"
    startup_timeout_s = 30.0
    max_nodes = 3  # a master and one or two replicas, with three Sentinels
    # network faults (brokerbench.faults): a proxy in front of each node; behind Sentinel the clients map the master's
    # address onto its proxy (node_addresses)
    proxied_sizes = (1, 2, 3)

    def installed_version(self) -> str | None:
        server = shutil.which("redis-server")
        if not server:
            return None
        out = subprocess.run([server, "--version"], capture_output=True, text=True).stdout
        return next((p.split("=")[1] for p in out.split() if p.startswith("v=")), "unknown")

    def install(self, log) -> None:
        install_debian(DEBIAN_PACKAGES, log)

    def start(self, folder: Path, ports: Callable[[], int], settings: dict) -> Started:
        server = require("redis-server", DEBIAN_PACKAGES["redis-server"])
        aof = bool(settings.get("redis_aof", True))
        version = self.installed_version() or "unknown"
        password = os.environ.get(AUTH_ENV)
        if settings.get("nodes", 1) > 1:
            return self._start_cluster(server, folder, ports, settings["nodes"], aof, version, password)
        port = ports()
        cmd = [server, *([str(_auth_config(folder, password))] if password else []), "--bind", HOST, "--port", str(port), "--save", "", "--dir", str(folder / "data"),
               "--appendonly", "yes" if aof else "no", "--appendfsync", "everysec", "--auto-aof-rewrite-percentage", "0",
               "--daemonize", "no", "--protected-mode", "yes", "--logfile", ""]
        log = folder / "redis.log"
        # where a network fault's proxy goes (brokerbench.local.proxies), on a port of its own
        proxy_port = ports()
        proxy = {"links": [{"node": node_name(HOST, port), "listen": proxy_port, "upstream": port}],
                 "clients": {"port": proxy_port}}
        endpoint = {"host": HOST, "port": port, "version": version, "proxy": proxy, "aof_rewrite": "between_cells",
                    **({"auth_env": AUTH_ENV} if password else {})}
        return Started([spawn(cmd, folder, log)], port, endpoint, version, str(log),
                       {"aof": aof, "proxy_port": proxy_port})

    def _start_cluster(self, server: str, folder: Path, ports: Callable[[], int], nodes: int, aof: bool, version: str,
                       password: str | None) -> Started:
        """`nodes` redis-servers (node 1 the master, the others its replicas), then the Sentinels. Ports are taken
        in that order, and recorded in `extra` in that order (the stack hands them out again after a crash)."""
        node_ports = [ports() for _ in range(nodes)]
        sentinel_ports = [ports() for _ in range(SENTINELS)]
        entries, pids = [], []
        for n, port in enumerate(node_ports, 1):
            home = folder / f"node-{n}"
            data = folder / "data" / f"node-{n}"
            for made in (home, data):
                made.mkdir(parents=True, exist_ok=True)
                made.chmod(0o700)
            config = _private_file(home / "redis.conf",
                                   node_config(port, data, aof, node_ports[0] if n > 1 else None, password))
            command, log = [server, str(config)], home / "redis.log"
            pid = spawn(command, home, log)
            pids.append(pid)
            entries.append({"node": node_name(HOST, port), "host": HOST, "port": port, "pids": [pid],
                            "command": command, "folder": str(home), "log": str(log)})
        # The Sentinels start once the master answers: one that found it not listening yet would count it down a
        # second later, and two such would fail it over as the cluster starts.
        deadline = time.monotonic() + self.startup_timeout_s
        while not port_answers(node_ports[0]):
            if not pid_alive(pids[0]) or time.monotonic() >= deadline:
                raise StackError(f"the Redis master did not start on {HOST}:{node_ports[0]}; see {entries[0]['log']}")
            time.sleep(0.02)
        sentinels = []
        ids = [secrets.token_hex(20) for _ in sentinel_ports]  # a Sentinel's id: 40 hex digits
        for n, port in enumerate(sentinel_ports, 1):
            home = folder / f"sentinel-{n}"
            home.mkdir(parents=True, exist_ok=True)
            home.chmod(0o700)  # Sentinel rewrites its file (with the password, when one is set) at its own mode
            others = [(p, i) for p, i in zip(sentinel_ports, ids) if p != port]
            config = _private_file(home / "sentinel.conf", sentinel_config(
                port, home, node_ports[0], password, myid=ids[n - 1], replica_ports=node_ports[1:], others=others))
            command, log = [server, str(config), "--sentinel"], home / "sentinel.log"
            pid = spawn(command, home, log)
            pids.append(pid)
            sentinels.append({"host": HOST, "port": port, "pids": [pid], "command": command, "folder": str(home),
                              "log": str(log)})
        proxy_ports = [ports() for _ in node_ports]  # a network fault's proxies, taken after the Sentinels' ports
        proxy = {"links": [{"node": entry["node"], "listen": listen, "upstream": entry["port"]}
                           for entry, listen in zip(entries, proxy_ports)],
                 "clients": {"port": proxy_ports[0],
                             "node_addresses": {f"{HOST}:{port}": listen for port, listen in zip(node_ports,
                                                                                                 proxy_ports)}}}
        endpoint = {"host": HOST, "port": node_ports[0], "version": version, "master_name": MASTER_NAME,
                    "sentinels": sentinels, "nodes": entries, "proxy": proxy,
                    **({"auth_env": AUTH_ENV} if password else {})}
        extra = {"aof": aof, "nodes": nodes, "quorum": QUORUM, "down_after_ms": DOWN_AFTER_MS,
                 "failover_timeout_ms": FAILOVER_TIMEOUT_MS,
                 **{f"node_{n}_port": p for n, p in enumerate(node_ports[1:], 2)},
                 **{f"sentinel_{n}_port": p for n, p in enumerate(sentinel_ports, 1)},
                 **{f"node_{n}_proxy_port": p for n, p in enumerate(proxy_ports, 1)}}
        return Started(pids, node_ports[0], endpoint, version, entries[0]["log"], extra)

    def ready(self, started: Started) -> bool:
        """One node: it answers PING. A cluster: the master reports every replica's link online (INFO
        replication), and every Sentinel names node 1 as the master, up, with every replica and the other
        Sentinels known to it (learned from the master's INFO and the Sentinels' hello messages): a failover
        started at once then has a replica to promote and a majority to elect its leader."""
        endpoint = started.endpoint or {}
        if "sentinels" not in endpoint:
            return self._pong(started)
        password = os.environ.get(AUTH_ENV) if endpoint.get("auth_env") else None
        first, replicas = endpoint["nodes"][0], len(endpoint["nodes"]) - 1
        try:
            if replica_links(first["host"], first["port"], password) != replicas:
                return False
        except (OSError, ValueError):
            return False
        return all(sentinel_ready(endpoint, sentinel, first["node"], replicas) for sentinel in endpoint["sentinels"])

    def _pong(self, started: Started) -> bool:
        """PING answers PONG (Redis answers LOADING while it replays its AOF), after AUTH when it requires it."""
        password = os.environ.get(AUTH_ENV) if (started.endpoint or {}).get("auth_env") else None
        try:
            with socket.create_connection((HOST, started.port), timeout=1) as sock:
                if password:
                    sock.sendall(_resp("AUTH", password))
                    if not sock.recv(64).startswith(b"+OK"):
                        return False
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False
