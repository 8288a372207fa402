"""RabbitMQ on the local stack: Debian's rabbitmq-server (3.10) started as our own node, not the system service.

Two processes, both ours and in the service's folder: an epmd (the Erlang port mapper) on its own port bound to
127.0.0.1, then the node (beam.smp: rabbitmq-server execs the VM, so the pid the stack records is the broker's
own) with its node name, data, logs, config and enabled plug-ins under the folder. Every listener is on 127.0.0.1:
AMQP, the stream protocol (rabbitmq_stream), the management API (rabbitmq_management: a quorum queue's count of
what it took in, rabbitmq.management), and Erlang distribution on its own port. epmd also listens on ::1 whatever
it is told (it always adds the loopback addresses), never beyond.

`rabbitmq@3` is a cluster of three such nodes (`nodes` in the settings, 2 or 3), each in folder/node-<n> with its
own name (bb<n>@localhost), AMQP, stream, distribution and management ports, and its data under folder/data/node-<n>
(the stack empties folder/data). They share one epmd and one Erlang cookie (folder/.erlang.cookie, their HOME): a
node finds another on the same host by asking the epmd on ERL_EPMD_PORT, so nodes with an epmd each could not find
one another. The first node starts as a blank node of its own; the others list it for classic-config peer
discovery and join it as they boot (retrying until it answers), with no `rabbitmqctl join_cluster` round (a
stop_app, a join and a start_app per node, each its own Erlang VM). They start once the first node's AMQP listener
answers (FIRST_NODE_S), the last step of its boot: started at once, a node that joined while the first was still
creating the tables of its feature flags (a loaded host) stopped with `schema_integrity_check_failed`
(`table_attributes_mismatch` of rabbit_user), 3 starts in a row here, and another copied the first node's
feature flags before they were enabled (stream_queue off: its stream plug-in never started). Quorum queues and streams
declared once every node has joined have a member on each (their initial group size defaults to the cluster's
size). A node killed or stopped is started again on its own ports and data by rabbitmq.cluster.start_node, and
rejoins by itself.

Network faults (brokerbench.faults, brokerbench.local.proxies): each node's AMQP and stream listeners have a port
each for a proxy in front of them, and the endpoint's `proxy` says where the proxies go (two links per node, `port`
amqp and stream) and how clients reach the node through them: the endpoint's ports and each node's replaced by the
proxies', and `stream_addresses`, the proxy port for each node's stream address as the node advertises it (a stream
client is told where a stream's leader or replica is, and connects there: rabbitmq_streams.driver maps it onto the
proxy). The nodes' own advertised address is left alone, so that a run without proxies reaches them directly.
"""

from __future__ import annotations

import re
import secrets
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from ...local.install import install_debian
from ...local.processes import HOST, StackError, certificate_files, pid_alive, port_answers, spawn, tail
from .. import Started
from . import STATS_INTERVAL_MS

DEBIAN_PACKAGES = {"rabbitmq-server": "rabbitmq-server"}  # Erlang comes with it
LIB = Path("/usr/lib/rabbitmq")
SERVER = LIB / "bin" / "rabbitmq-server"  # the real script: /usr/sbin's wrapper would run it as user rabbitmq
READY_QUEUE = "bb-ready"
MAX_NODES = 3
# A joining node asks for the first node every DISCOVERY_RETRY_MS, DISCOVERY_RETRIES times, before it gives up and
# boots as a cluster of its own (which ready() never accepts): 60 s, longer than the first node's start on a loaded
# host (RabbitMQ's default is 10 x 500 ms, which a node starting beside two others can miss).
DISCOVERY_RETRIES = 120
DISCOVERY_RETRY_MS = 500
FIRST_NODE_S = 120.0  # the first node's boot, alone, before the others start (about 5 s unloaded; far more loaded)


def config(amqp_port: int, stream_port: int, management_port: int) -> str:
    """rabbitmq.conf: the AMQP, stream and management listeners on 127.0.0.1 only, the stream listener advertising
    itself there (a stream client connects where the broker says the stream's leader is), statistics collected
    every STATS_INTERVAL_MS (a quorum queue's count comes from them: rabbitmq.management)."""
    return "\n".join([
        f"listeners.tcp.1 = {HOST}:{amqp_port}",
        f"stream.listeners.tcp.1 = {HOST}:{stream_port}",
        f"stream.advertised_host = {HOST}",
        f"stream.advertised_port = {stream_port}",
        f"management.tcp.ip = {HOST}",
        f"management.tcp.port = {management_port}",
        f"collect_statistics_interval = {STATS_INTERVAL_MS}",
        "management.sample_retention_policies.global.minute = 1",
        "management.sample_retention_policies.global.hour = 60",
        "management.sample_retention_policies.global.day = 1200",
        "management.sample_retention_policies.basic.minute = 1",
        "management.sample_retention_policies.basic.hour = 60",
        "management.sample_retention_policies.detailed.10 = 1",
        "", ])


def tls_config(settings: dict, amqps_port: int, stream_tls_port: int) -> str:
    """rabbitmq.conf's lines for setting `rabbitmq_tls` = {"cert", "key", "ca": PEM files}: AMQP over TLS and the
    stream protocol over TLS on listeners of their own beside the plain ones, with that certificate (a managed
    RabbitMQ's endpoints, amqps and the stream protocol's TLS port). Clients check it against their trust store; the
    node asks none of them for a certificate."""
    tls = certificate_files(settings, "rabbitmq_tls", ("cert", "key", "ca"))
    return "\n".join([
        f"listeners.ssl.1 = {HOST}:{amqps_port}",
        f"stream.listeners.ssl.1 = {HOST}:{stream_tls_port}",
        f"stream.advertised_tls_port = {stream_tls_port}",
        f"ssl_options.cacertfile = {tls['ca']}",
        f"ssl_options.certfile = {tls['cert']}",
        f"ssl_options.keyfile = {tls['key']}",
        "ssl_options.verify = verify_none",
        "ssl_options.fail_if_no_peer_cert = false",
        "", ])


def node_name(index: int) -> str:
    """A cluster node's name (index from 1): its own epmd makes it unique on the host, and it does not change when a
    node starts again on other ports (its data names its peers by these names)."""
    return f"bb{index}@localhost"


def peer_discovery(first: str) -> str:
    """rabbitmq.conf's lines for a joining node: classic-config peer discovery of the first node, retried (a blank
    node reads them once; a node started again with data rejoins the cluster its data names)."""
    return "\n".join([
        "cluster_formation.peer_discovery_backend = classic_config",
        f"cluster_formation.classic_config.nodes.1 = {first}",
        f"cluster_formation.discovery_retry_limit = {DISCOVERY_RETRIES}",
        f"cluster_formation.discovery_retry_interval = {DISCOVERY_RETRY_MS}",
        "", ])


def environment(folder: Path, ports: dict[str, int], *, name: str | None = None, home: Path | None = None,
                data: Path | None = None) -> dict[str, str]:
    """The node's environment: its name, ports and folders; nothing from /etc/rabbitmq (an empty env file). A
    cluster's node gives its `name`, the cluster's `home` (the Erlang cookie they share) and its `data` folder."""
    return {
        "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
        "HOME": str(home or folder),  # the Erlang cookie is written there
        "RABBITMQ_CONF_ENV_FILE": str(folder / "rabbitmq-env.conf"),
        "RABBITMQ_NODENAME": name or f"bb{ports['amqp_port']}@localhost",
        "RABBITMQ_NODE_IP_ADDRESS": HOST,
        "RABBITMQ_NODE_PORT": str(ports["amqp_port"]),
        "RABBITMQ_DIST_PORT": str(ports["dist_port"]),
        "ERL_EPMD_ADDRESS": HOST,
        "ERL_EPMD_PORT": str(ports["epmd_port"]),
        "RABBITMQ_BASE": str(folder),
        "RABBITMQ_MNESIA_BASE": str(data or folder / "data"),
        "RABBITMQ_LOG_BASE": str(folder),
        "RABBITMQ_LOGS": "-",  # to standard output: the stack's log file
        "RABBITMQ_CONFIG_FILE": str(folder / "rabbitmq.conf"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(folder / "enabled_plugins"),
        # The VM itself replaces the script (its pid is the broker's), with no shell and distribution on loopback.
        "RABBITMQ_ALLOW_INPUT": "true",
        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": f"-noinput -kernel inet_dist_use_interface {{{HOST.replace('.', ',')}}}",
    }


PROXIED_PORTS = ("amqp", "stream")  # a node's client listeners, each with a proxy of its own (network faults)


def proxied(entries: list[dict], proxy_ports: list[tuple[int, int]]) -> dict:
    """The endpoint's `proxy` (brokerbench.local.proxies) for nodes `entries` (name, host, AMQP `port`,
    `stream_port`), each with (AMQP proxy port, stream proxy port): the links, and what clients see through them
    (`clients`: the first node's ports, each node's entry and the advertised stream addresses, mapped)."""
    links, mapped, addresses = [], [], {}
    for entry, (amqp, stream) in zip(entries, proxy_ports):
        links += [{"node": entry["node"], "port": "amqp", "listen": amqp, "upstream": entry["port"]},
                  {"node": entry["node"], "port": "stream", "listen": stream, "upstream": entry["stream_port"]}]
        mapped.append({**entry, "port": amqp, "stream_port": stream})
        addresses[f"{entry['host']}:{entry['stream_port']}"] = stream
    clients = {"amqp_port": proxy_ports[0][0], "stream_port": proxy_ports[0][1], "stream_addresses": addresses}
    if len(entries) > 1:
        clients["nodes"] = mapped
    return {"links": links, "clients": clients}


class RabbitMQService:
    name = "rabbitmq"
    startup_timeout_s = 90.0  # ready in about 5 s on an idle two-core machine (a cluster: this per node)
    max_nodes = MAX_NODES
    proxied_sizes = tuple(range(1, MAX_NODES + 1))  # network faults: proxies in front of each node's listeners
    download_mb = 40  # rabbitmq-server with the Erlang packages it pulls in

    def installed_version(self) -> str | None:
        if not SERVER.is_file():
            return None
        for folder in (LIB / "lib").glob("rabbitmq_server-*"):
            if match := re.fullmatch(r"rabbitmq_server-(\d[\w.-]*)", folder.name):
                return match.group(1)
        return "unknown"

    def install_version(self) -> str | None:
        return "3.10 (Debian)"

    def install(self, log) -> None:
        install_debian(DEBIAN_PACKAGES, log)

    def start(self, folder: Path, ports: Callable[[], int], settings: dict) -> Started:
        """One node (settings' `nodes` absent or 1), or a cluster of `nodes` (start_cluster)."""
        if not SERVER.is_file() or not shutil.which("epmd"):
            raise StackError("rabbitmq-server is not installed: run `make setup-all` (it installs Debian's "
                             "rabbitmq-server)")
        if settings.get("nodes", 1) > 1:
            return self.start_cluster(folder, ports, settings["nodes"])
        port = ports()
        extra = {"stream_port": ports(), "dist_port": ports(), "epmd_port": ports(), "management_port": ports()}
        proxy_ports = {"amqp_proxy_port": ports(), "stream_proxy_port": ports()}  # network faults' proxies
        # (taken in the order the extras list them: a node started again takes each one again, _same_ports)
        tls = {"amqps_port": ports(), "stream_tls_port": ports()} if settings.get("rabbitmq_tls") else {}
        write_node_files(folder, config(port, extra["stream_port"], extra["management_port"])
                         + (tls_config(settings, tls["amqps_port"], tls["stream_tls_port"]) if tls else ""))
        env = environment(folder, {"amqp_port": port, **extra})
        log = folder / "rabbitmq.log"
        epmd = spawn(["epmd", "-port", str(extra["epmd_port"]), "-address", HOST], folder, folder / "epmd.log", env)
        server = spawn([str(SERVER)], folder, log, env)
        version = self.installed_version() or "unknown"
        node = {"node": env["RABBITMQ_NODENAME"], "host": HOST, "port": port, "stream_port": extra["stream_port"]}
        endpoint = {"host": HOST, "amqp_port": port, "stream_port": extra["stream_port"], "version": version,
                    "management_url": f"http://{HOST}:{extra['management_port']}",
                    "stats_interval_ms": STATS_INTERVAL_MS,
                    "proxy": proxied([node], [tuple(proxy_ports.values())])}
        if tls:  # the same node over TLS: a target of its own names these ports with tls
            endpoint.update(tls_amqp_port=tls["amqps_port"], tls_stream_port=tls["stream_tls_port"])
        return Started([epmd, server], port, endpoint, version, str(log),
                       {**extra, **proxy_ports, **tls, "node": env["RABBITMQ_NODENAME"]})

    def start_cluster(self, folder: Path, ports: Callable[[], int], nodes: int) -> Started:
        """`nodes` nodes started at once on one epmd: the first blank, the others joining it (peer_discovery). The
        endpoint is the first node's, with every node's entry under `nodes` (cluster_nodes): what a client, a fault
        and rabbitmq.cluster.start_node need of it."""
        listeners = [(ports(), ports(), ports(), ports()) for _ in range(nodes)]  # AMQP, stream, dist, management
        epmd_port = ports()
        proxy_ports = [(ports(), ports()) for _ in range(nodes)]  # network faults' proxies: AMQP, stream
        entries = cluster_nodes(folder, listeners, epmd_port)
        cookie = folder / ".erlang.cookie"
        if not cookie.is_file():  # started again after a crash: the cookie its nodes share already
            cookie.write_text(secrets.token_hex(20).upper())
            cookie.chmod(0o400)  # Erlang refuses a cookie others can read
        for index, entry in enumerate(entries):
            write_node_files(Path(entry["folder"]), config(entry["port"], entry["stream_port"],
                                                           entry["management_port"])
                             + (peer_discovery(entries[0]["node"]) if index else ""))
        epmd = spawn(["epmd", "-port", str(epmd_port), "-address", HOST], folder, folder / "epmd.log",
                     node_environment(entries[0]))
        for index, entry in enumerate(entries):
            entry["pids"] = [spawn_node(entry)]
            if index == 0 and nodes > 1:
                _booted(entry, FIRST_NODE_S)
        version = self.installed_version() or "unknown"
        first = entries[0]
        endpoint = {"host": HOST, "amqp_port": first["port"], "stream_port": first["stream_port"], "version": version,
                    "management_url": first["management_url"], "stats_interval_ms": STATS_INTERVAL_MS, "nodes": entries,
                    "proxy": proxied([{k: e[k] for k in ("node", "host", "port", "stream_port")} for e in entries],
                                     proxy_ports)}
        return Started([epmd, *(pid for entry in entries for pid in entry["pids"])], first["port"], endpoint, version,
                       str(Path(first["folder"]) / "rabbitmq.log"),
                       {**ports_taken(listeners, epmd_port, proxy_ports), "nodes": nodes,
                        "node": [e["node"] for e in entries]})

    def ready(self, started: Started) -> bool:
        """An AMQP client connects and declares a quorum queue and a stream (both need the node's Raft and stream
        coordinators up), and the stream listener answers; a cluster's every node's, after the management API has
        listed every node as running (a queue declared before a node joins has no member there)."""
        nodes = started.endpoint.get("nodes") or [{"stream_port": started.endpoint["stream_port"]}]
        if not all(port_answers(node["stream_port"]) for node in nodes):
            return False
        from .amqp import declare_ready  # the client library loads only when a broker is actually started

        if len(nodes) > 1:
            from .management import running_nodes

            if set(running_nodes(started.endpoint, timeout_s=2) or ()) != {node["node"] for node in nodes}:
                return False
        return declare_ready(started.endpoint, READY_QUEUE)


def _booted(entry: dict, bound_s: float) -> None:
    """Waits until the node's AMQP listener answers (its boot's last step); StackError when it ends or takes longer
    than bound_s, with its log's last lines."""
    deadline = time.monotonic() + bound_s
    while not port_answers(entry["port"]):
        log = Path(entry["folder"]) / "rabbitmq.log"
        if not all(map(pid_alive, entry["pids"])):
            raise StackError(f"RabbitMQ node {entry['node']} exited while booting; last lines of {log}:\n{tail(log)}")
        if time.monotonic() > deadline:
            raise StackError(f"RabbitMQ node {entry['node']} did not boot in {bound_s:g} s; last lines of {log}:\n"
                             f"{tail(log)}")
        time.sleep(0.2)


def write_node_files(folder: Path, rabbitmq_conf: str) -> None:
    """A node's configuration, its plug-ins (streams, the management API) and an empty env file."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rabbitmq.conf").write_text(rabbitmq_conf)
    (folder / "enabled_plugins").write_text("[rabbitmq_stream,rabbitmq_management].\n")
    (folder / "rabbitmq-env.conf").write_text("")


def cluster_nodes(folder: Path, listeners: list[tuple[int, int, int, int]], epmd_port: int) -> list[dict]:
    """Each node's entry in the cluster's endpoint: its name as RabbitMQ names it, its client ports (AMQP `port`,
    stream, management API), and what starting it again needs (distribution and epmd ports, its folder, the
    cluster's folder that holds the shared cookie, its data folder). `pids` is added once it runs."""
    return [{"node": node_name(index), "host": HOST, "port": amqp, "stream_port": stream,
             "management_url": f"http://{HOST}:{management}", "management_port": management, "dist_port": dist,
             "epmd_port": epmd_port, "folder": str(folder / f"node-{index}"), "home": str(folder),
             "data": str(folder / "data" / f"node-{index}")}
            for index, (amqp, stream, dist, management) in enumerate(listeners, 1)]


def ports_taken(listeners: list[tuple[int, int, int, int]], epmd_port: int,
                proxy_ports: list[tuple[int, int]] = ()) -> dict[str, int]:
    """A cluster's ports after its first (the service's own), in the order start_cluster took them: the stack starts
    a crashed service again on the ports its record lists in that order (local/stack.py _same_ports)."""
    keys = ("amqp_port", "stream_port", "dist_port", "management_port")
    taken = {f"node{index}_{key}": port for index, ports in enumerate(listeners, 1) for key, port in zip(keys, ports)}
    del taken["node1_amqp_port"]
    proxies = {f"node{index}_{key}_proxy_port": port for index, ports in enumerate(proxy_ports, 1)
               for key, port in zip(PROXIED_PORTS, ports)}
    return {**taken, "epmd_port": epmd_port, **proxies}


def node_environment(node: dict) -> dict[str, str]:
    """A cluster node's environment, from its entry (cluster_nodes)."""
    return environment(Path(node["folder"]), {"amqp_port": node["port"], "dist_port": node["dist_port"],
                                              "epmd_port": node["epmd_port"]},
                       name=node["node"], home=Path(node["home"]), data=Path(node["data"]))


def spawn_node(node: dict) -> int:
    """Start a cluster node from its entry; its pid (the Erlang VM's: the script execs it)."""
    folder = Path(node["folder"])
    return spawn([str(SERVER)], folder, folder / "rabbitmq.log", node_environment(node))


SERVICE = RabbitMQService()  # one node (or rabbitmq@3) serves both rows: the stack starts it once for either or both
