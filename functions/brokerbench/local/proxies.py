"""Toxiproxy as a service of the local stack, and a broker's clients routed through it: the network faults' proxies.

A run with network faults (brokerbench.faults, `kind` "network") starts Toxiproxy on 127.0.0.1 (the stack's service
"toxiproxy", owned by the run, stopped at its teardown) and makes a proxy in front of each node of the faulted
broker. A broker's local service says where those proxies go: its endpoint's `proxy` holds `links` (per node and
client port: the node's name, the port a proxy listens on, the node's port it forwards to, and `port`, which of the
node's listeners it is where the node has several: RabbitMQ's AMQP and stream ports) and `clients` (the endpoint's
fields as clients see them through the proxies). A network fault on a node puts its toxics on every proxy of it. Kafka needs this settled when it starts: each node advertises a second
listener at its proxy's port (a client bootstrapping through a proxy is told the proxies' addresses, so every
connection it makes goes through one), which is why the ports are chosen by the service, not here.

Once routed (`route`), the endpoint also holds the server's API port and each link its proxy's name. The cell's
producers and consumers then connect through the proxies (`client_endpoint`) while the cell's own checks, the
broker's counts and the fault hooks keep reaching the nodes directly: a fault between the clients and a node leaves
the tool's independent view of the broker untouched.

Toxiproxy is built from the Go module proxy (`go install`, ~40 s) on its first use, like any service the stack
starts that is not installed, or ahead of time with `python -m brokerbench.local.install --with-toxiproxy`.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from ..registry import Started
from ..toxiproxy import HOST, ToxiproxyClient, ToxiproxyError
from .install import TOXIPROXY_VERSION, InstallError, install_toxiproxy, toxiproxy_path, toxiproxy_version
from .processes import StackError, free_port, spawn

NAME = "toxiproxy"
# A proxy's port is chosen when its broker starts and bound only when a run routes its clients, maybe much later:
# another listener (another stack's service, chosen at random as well) may hold it by then. Such a proxy is made on a
# fresh port, at most this many times, and the clients' fields that named the old one name the new one. Not Kafka's:
# each node advertises its proxy's port, fixed when it started (the module's notes).
MOVES = 3
FIXED_PORTS = ("kafka",)  # services (by the stack's name's start) whose proxies' ports the broker advertises
IN_USE = "address already in use"


class ToxiproxyService:
    """Toxiproxy's server, its API on a free loopback port and every proxy it makes on 127.0.0.1 (the proxies'
    listen addresses are the links' own)."""

    name = NAME
    startup_timeout_s = 10.0

    def installed_version(self) -> str | None:
        return toxiproxy_version()

    def install_version(self) -> str | None:
        return TOXIPROXY_VERSION

    def install(self, log) -> None:
        if shutil.which("go") is None:
            raise InstallError("Toxiproxy is built with Go (`go install`), and go is not on PATH: install Go "
                               "(Debian: golang-go), then `python -m brokerbench.local.install --with-toxiproxy`")
        install_toxiproxy(log)

    def start(self, folder: Path, ports: Callable[[], int], settings: dict) -> Started:
        binary = toxiproxy_path()
        if not binary.is_file():
            raise StackError(f"Toxiproxy is not installed at {binary}: run "
                             "`python -m brokerbench.local.install --with-toxiproxy`")
        port = ports()
        log = folder / "toxiproxy.log"
        pid = spawn([str(binary), "-host", HOST, "-port", str(port)], folder, log)
        return Started([pid], port, {"host": HOST, "api_port": port}, TOXIPROXY_VERSION, str(log))

    def ready(self, started: Started) -> bool:
        try:
            ToxiproxyClient(started.port, timeout_s=1.0).version()
        except ToxiproxyError:
            return False
        return True


TOXIPROXY = ToxiproxyService()


def proxy_name(service: str, node: str, port: str | None = None) -> str:
    """A proxy's name: the stack's name for the broker and the node's ("kafka@3-2"), and the client port it fronts
    where the node has several ("rabbitmq-bb1-localhost-stream"), in Toxiproxy's alphabet."""
    name = f"{service}-{node}" + (f"-{port}" if port else "")
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name)


def route(endpoint: dict, service: str, api_port: int) -> dict:
    """Makes a proxy for each link of the endpoint (a broker's local endpoint with `proxy`) on the Toxiproxy server
    at `api_port`; returns the endpoint with the server's port and each link's proxy name. StackError when the
    broker's local service makes no links (its clients cannot be routed through proxies here)."""
    links = (endpoint.get("proxy") or {}).get("links")
    if not links:
        raise StackError(f"{service} runs without the links a proxy goes on (started by an earlier version?): stop "
                         f"it with `brokerbench local down {service}` and run again")
    client = ToxiproxyClient(api_port)
    movable = not service.startswith(FIXED_PORTS)
    clients = endpoint["proxy"].get("clients")
    routed = []
    for link in links:
        name = proxy_name(service, link["node"], link.get("port"))
        listen = link["listen"]
        for attempt in range(MOVES + 1):
            try:
                client.proxy(name, link["upstream"], listen)
                break
            except ToxiproxyError as exc:
                if not movable or attempt == MOVES or IN_USE not in str(exc):
                    raise StackError(f"could not put a proxy in front of {service} node {link['node']}: "
                                     f"{exc}") from None
                listen = free_port()
        if listen != link["listen"]:
            clients = moved(clients, link["listen"], listen)
        routed.append({**link, "listen": listen, "name": name})
    proxy = {**endpoint["proxy"], "links": routed, "api_port": api_port}
    if clients is not None:
        proxy["clients"] = clients
    return {**endpoint, "proxy": proxy}


def moved(clients, old: int, new: int):
    """The clients' fields with a proxy's port `old` as `new`: where it stands as a number, and in addresses
    ("127.0.0.1:<old>", a NATS url among others)."""
    if isinstance(clients, dict):
        return {key: moved(value, old, new) for key, value in clients.items()}
    if isinstance(clients, list):
        return [moved(value, old, new) for value in clients]
    if isinstance(clients, bool):
        return clients
    if isinstance(clients, int):
        return new if clients == old else clients
    if isinstance(clients, str):
        return ",".join(f"{part[:-len(str(old))]}{new}" if part.endswith(f"{HOST}:{old}") else part
                        for part in clients.split(","))
    return clients


def unroute(endpoint: dict, service: str, api_port: int) -> None:
    """Removes the proxies `route` made for the endpoint's links (the broker's local endpoint, `service` the stack's
    name for it) from the Toxiproxy server at `api_port`, those it still has."""
    client = ToxiproxyClient(api_port, timeout_s=2.0)
    try:
        present = client.proxies()
    except ToxiproxyError:  # stopped already
        return
    for link in (endpoint.get("proxy") or {}).get("links") or []:
        name = proxy_name(service, link["node"], link.get("port"))
        if name in present:
            client.delete(name)


def proxies_left(api_port: int) -> int:
    """How many proxies the Toxiproxy server at `api_port` holds; 0 when it does not answer."""
    try:
        return len(ToxiproxyClient(api_port, timeout_s=2.0).proxies())
    except ToxiproxyError:
        return 0
