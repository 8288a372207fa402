"""A NATS JetStream cluster as its servers tell it: which server leads a cell's stream, which servers hold its
replicas and are current, whether the cluster serves, and a server started again after a fault stopped it.

The servers are the endpoint's `nodes` (local.py: nats@3), each named as JetStream names it (server_name). A
stream's leader is read from the JetStream API's stream info (`$JS.API.STREAM.INFO.<stream>`, its cluster.leader),
asked of every server at once and taken from the first that answers: a killed or paused server does not hold the
answer up. While the stream's replicas elect a leader the answer names none, or no server answers for the stream;
leader() then says None.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from ...local.processes import StackError, pid_alive, port_free, spawn
from .driver import ERRORS, _connect, admin_loop, servers, stream_name

INFO_SUBJECT = "$JS.API.STREAM.INFO.{}"
STREAM_NOT_FOUND = 10059  # JetStream's err_code for a stream that does not exist
PROBE_STREAM = "bb_cluster_probe"  # created and deleted again by serves(): the cluster places a replicated stream
PORT_WAIT_S = 10.0  # a killed server's ports still held a moment are waited for this long before a restart


class StreamMissing(LookupError):
    """The cluster holds no stream of that name."""


def stream_cluster(answer: dict, stream: str) -> dict:
    """The `cluster` part of a stream info answer ({name, leader, replicas: [{name, current, offline, ...}]}); {}
    when the answer has none (a server that cannot say yet: JetStream temporarily unavailable, no leader).
    StreamMissing when the cluster holds no such stream."""
    error = answer.get("error")
    if error:
        if error.get("err_code") == STREAM_NOT_FOUND:
            raise StreamMissing(f"stream {stream}: the NATS cluster holds no such stream ({error.get('description')})")
        return {}
    return answer.get("cluster") or {}


def leader_in(answer: dict, stream: str) -> str | None:
    """The server that leads the stream, as a stream info answer names it; None while none does."""
    return stream_cluster(answer, stream).get("leader") or None


def members_in(answer: dict, stream: str) -> dict[str, bool]:
    """Each server holding a replica of the stream, as a stream info answer lists it: the leader, and every
    other replica with whether it is current (caught up with the leader and not offline)."""
    cluster = stream_cluster(answer, stream)
    members = {cluster["leader"]: True} if cluster.get("leader") else {}
    for replica in cluster.get("replicas") or []:
        members[replica["name"]] = bool(replica.get("current")) and not replica.get("offline")
    return members


async def _ask_one(url: str, subject: str, timeout_s: float) -> dict:
    nc = await _connect([url], reconnect=False)
    try:
        return json.loads((await nc.request(subject, b"", timeout=timeout_s)).data)
    finally:
        await nc.close()


async def _ask_any(urls: list[str], subject: str, timeout_s: float) -> dict | None:
    """The first answer any server gives to `subject` (each asked on a connection of its own), None if none does."""
    tasks = [asyncio.ensure_future(_ask_one(url, subject, timeout_s)) for url in urls]
    try:
        for done in asyncio.as_completed(tasks):
            try:
                return await done
            except (*ERRORS, ValueError):  # no answer, or not one of JetStream's
                continue
        return None
    finally:
        for task in tasks:
            task.cancel()


def stream_info(endpoint: dict, name: str, timeout_s: float = 5.0) -> dict | None:
    """The JetStream API's stream info for the stream a cell's topic `name` maps to (driver.stream_name), from the
    first server that answers; None when none does within timeout_s."""
    subject = INFO_SUBJECT.format(stream_name(name))
    try:
        return admin_loop().run(_ask_any(servers(endpoint), subject, timeout_s), timeout_s)
    except ERRORS:
        return None


def leader(endpoint: dict, name: str, timeout_s: float = 5.0) -> str | None:
    """The server (its name in endpoint["nodes"]) that leads the stream of the cell's topic `name`, as the cluster
    says; None while no server leads it (an election) or none answers. StreamMissing when it does not exist."""
    answer = stream_info(endpoint, name, timeout_s)
    return None if answer is None else leader_in(answer, stream_name(name))


def members(endpoint: dict, name: str, timeout_s: float = 5.0) -> dict[str, bool]:
    """The servers holding a replica of the stream of `name`, each with whether it is current (members_in); {}
    when no server answers."""
    answer = stream_info(endpoint, name, timeout_s)
    return {} if answer is None else members_in(answer, stream_name(name))


def serves(endpoint: dict, timeout_s: float = 5.0) -> bool:
    """Whether the cluster serves: every server answers a client and JetStream (in a cluster JetStream answers once
    the server reaches the meta group's leader through its routes), and a stream replicated to every server can be
    created (the JetStream meta group knows them all and places a replica on each). The servers' INFO does not list
    their peers: they advertise no client URLs (local.py, no_advertise)."""
    from nats.js import api

    nodes = endpoint["nodes"]

    async def joined(url: str) -> bool:  # a server that is down refuses at once: said in 0.5 s, not the timeout's 5
        nc = await _connect([url], reconnect=False, give_up=True)
        try:
            await nc.jetstream().account_info()
            return True
        finally:
            await nc.close()

    async def placed() -> None:
        nc = await _connect(servers(endpoint), reconnect=False)
        try:
            jsm = nc.jsm()
            await jsm.add_stream(api.StreamConfig(name=PROBE_STREAM, storage=api.StorageType.MEMORY,
                                                  num_replicas=len(nodes)))
            await jsm.delete_stream(PROBE_STREAM)
        finally:
            await nc.close()

    async def check() -> bool:
        every = await asyncio.gather(*(joined(f"nats://{n['host']}:{n['port']}") for n in nodes))
        if not all(every):
            return False
        await placed()
        return True

    try:
        return admin_loop().run(check(), timeout_s)
    except (*ERRORS, Exception):  # noqa: BLE001 (not serving yet, whatever the reason)
        return False


def start_node(endpoint: dict, node: str) -> list[int]:
    """Starts server `node` of a running cluster again, after it was killed or stopped: its own command, config,
    ports and store (what it held is kept; it catches up from the others). Its ports are waited for while a dying
    process still holds them (PORT_WAIT_S). Returns its new pids, also written into the endpoint's entry of the
    node. StackError when the node is unknown, still running, or its ports stay taken."""
    entry = next((n for n in endpoint.get("nodes") or [] if n["node"] == node), None)
    if entry is None:
        known = ", ".join(n["node"] for n in endpoint.get("nodes") or []) or "none: not a cluster"
        raise StackError(f"node {node!r}: not a server of this NATS cluster (its servers: {known})")
    running = [pid for pid in entry["pids"] if pid_alive(pid)]
    if running:
        raise StackError(f"node {node}: still running (pid {', '.join(map(str, running))}); stop it first")
    for port in (entry["port"], entry["cluster_port"]):
        deadline = time.monotonic() + PORT_WAIT_S
        while not port_free(port):
            if time.monotonic() >= deadline:
                raise StackError(f"node {node}: port {port} is still taken {PORT_WAIT_S:g} s after it stopped")
            time.sleep(0.2)
    entry["pids"] = [spawn(entry["command"], Path(entry["folder"]), Path(entry["log"]))]
    return entry["pids"]
