"""The Redis failover cluster as Redis itself sees it: which node is master, asked of Sentinel, and a node started
again after a fault.

A Redis master holds every stream key, so the node that leads a cell's streams is the master of the whole
cluster: `leader` asks the Sentinels which node that is (SENTINEL MASTER, the address it holds for MASTER_NAME
and whether it thinks that address is down), and answers with a node's name as Sentinel names instances,
"<ip>:<port>". A master counts as leading only while a majority of the Sentinels name it and none of those sees
it down; between a master's failure and the end of the failover (one Sentinel still naming the old address, or
seeing it down) nothing leads: None.

The timings: a Sentinel that has had no valid reply from the master for DOWN_AFTER_MS marks it subjectively
down; with QUORUM Sentinels agreeing it is objectively down, and the Sentinels elect one of themselves (a
majority of the three) to promote the replica with the largest replication offset. FAILOVER_TIMEOUT_MS bounds a
failover's steps and spaces a new attempt after one that failed. Production Sentinels use 30 s and 3 min; here
a node's death is told in a second and a failover ends within a few (the measured figures: docs/faults.md).
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import hiredis

from ...local.processes import HOST, StackError, pid_alive, port_answers, spawn

MASTER_NAME = "brokerbench"  # the name the Sentinels monitor the master under
SENTINELS = 3  # a majority (2) still elects a failover leader when one Sentinel is gone
QUORUM = 2  # Sentinels that must see the master down before a failover starts
DOWN_AFTER_MS = 1000  # no valid reply for this long: the master is down (Sentinel's default 30 s)
FAILOVER_TIMEOUT_MS = 3000  # a failover's bound; twice this before the same master is failed over again
# The flags in SENTINEL MASTER's answer that say the Sentinel does not trust the master it names.
DOWN_FLAGS = {"s_down", "o_down", "disconnected", "failover_in_progress"}
NODE_START_S = 15.0  # a node started again answers on its port within this (its AOF loads after that)


def node_name(host: str, port: int) -> str:
    """An instance's name as Sentinel gives it (SENTINEL REPLICAS' `name` field): "<ip>:<port>"."""
    return f"{host}:{port}"


def password(endpoint: dict) -> str | None:
    variable = endpoint.get("auth_env")
    return os.environ.get(variable) if variable else None


def ask(host: str, port: int, *command, password: str | None = None, timeout_s: float = 1.0):
    """One command's reply from one Redis or Sentinel (after AUTH when a password is given). An error reply is
    raised as ValueError; a closed or refused connection as OSError."""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        reader = hiredis.Reader(encoding="utf-8")
        commands = ([("AUTH", password)] if password else []) + [command]
        sock.sendall(b"".join(hiredis.pack_command(tuple(map(str, c))) for c in commands))
        replies = []
        while len(replies) < len(commands):
            reply = reader.gets()
            if reply is False:
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError(f"{host}:{port} closed the connection")
                reader.feed(chunk)
                continue
            if isinstance(reply, hiredis.ReplyError):
                raise ValueError(f"{host}:{port} answered {command[0]}: {reply}")
            replies.append(reply)
        return replies[-1]


def fields(reply: list) -> dict:
    """A flat [name, value, name, value, ...] reply (SENTINEL MASTER, each of SENTINEL REPLICAS) as a dict."""
    return dict(zip(reply[::2], reply[1::2]))


def flags(view: dict) -> set[str]:
    return set(filter(None, str(view.get("flags", "")).split(",")))


def leading(views: list[dict | None], sentinels: int) -> str | None:
    """The master a majority of `sentinels` name without seeing it down, from their SENTINEL MASTER answers
    (None: a Sentinel that did not answer); None when no address has such a majority."""
    trusted: dict[str, int] = {}
    for view in views:
        if view is not None and not flags(view) & DOWN_FLAGS:
            name = node_name(view["ip"], int(view["port"]))
            trusted[name] = trusted.get(name, 0) + 1
    return next((name for name, count in trusted.items() if count > sentinels // 2), None)


def _view(endpoint: dict, sentinel: dict, timeout_s: float) -> dict | None:
    try:
        return fields(ask(sentinel["host"], sentinel["port"], "SENTINEL", "MASTER",
                          endpoint.get("master_name", MASTER_NAME), timeout_s=timeout_s))
    except (OSError, ValueError):
        return None


def sentinel_ready(endpoint: dict, sentinel: dict, master: str, replicas: int) -> bool:
    """Whether a Sentinel names `master`, up, and knows `replicas` replicas and the other Sentinels."""
    view = _view(endpoint, sentinel, 1.0)
    return (view is not None and leading([view], 1) == master and int(view.get("num-slaves", -1)) == replicas
            and int(view.get("num-other-sentinels", -1)) == len(endpoint["sentinels"]) - 1)


def leader(endpoint: dict, name: str, timeout_s: float = 5.0) -> str | None:
    """The node that is master (it leads every stream key, `name` among them) as the Sentinels see it: the name
    of an entry in endpoint["nodes"], or None while no master is agreed on (a failover under way)."""
    sentinels = endpoint["sentinels"]
    each = max(0.1, timeout_s / len(sentinels))
    return leading([_view(endpoint, sentinel, each) for sentinel in sentinels], len(sentinels))


def replicas(endpoint: dict, timeout_s: float = 1.0) -> dict[str, set[str]]:
    """The replicas the first Sentinel that answers lists for the master (SENTINEL REPLICAS): name -> flags."""
    for sentinel in endpoint["sentinels"]:
        try:
            listed = ask(sentinel["host"], sentinel["port"], "SENTINEL", "REPLICAS",
                         endpoint.get("master_name", MASTER_NAME), timeout_s=timeout_s)
        except (OSError, ValueError):
            continue
        return {view["name"]: flags(view) for view in map(fields, listed)}
    return {}


def role(endpoint: dict, node: str, timeout_s: float = 1.0) -> tuple[str, str | None, str | None]:
    """A node's own account (ROLE): ("master", None, None), or ("slave", its master's name, the link state:
    connect, connecting, sync or connected)."""
    entry = _entry(endpoint, node)
    reply = ask(entry["host"], entry["port"], "ROLE", password=password(endpoint), timeout_s=timeout_s)
    if reply[0] == "slave":
        return "slave", node_name(reply[1], int(reply[2])), reply[3]
    return reply[0], None, None


def replica_links(host: str, port: int, password: str | None, timeout_s: float = 1.0) -> int:
    """Replicas a master reports online (INFO replication: `slave<n>:...,state=online,...`)."""
    info = ask(host, port, "INFO", "replication", password=password, timeout_s=timeout_s)
    return sum(1 for line in info.splitlines() if line.startswith("slave") and "state=online" in line)


def _entry(endpoint: dict, node: str) -> dict:
    for entry in endpoint["nodes"]:
        if entry["node"] == node:
            return entry
    raise StackError(f"no node {node} in this Redis cluster; its nodes: "
                     f"{', '.join(e['node'] for e in endpoint['nodes'])}")


def start_node(endpoint: dict, node: str) -> list[int]:
    """Start a killed or stopped node again, with its own config file (as its last role left it: Sentinel
    rewrites it) and data, on its own port; returns its new pid once the port answers. A node that was master
    comes back as one, and Sentinel, which has it as a replica of the master it promoted since, turns it into one
    (REPLICAOF), as it does with any returning master."""
    entry = _entry(endpoint, node)
    pid = spawn(entry["command"], Path(entry["folder"]), Path(entry["log"]))
    deadline = time.monotonic() + NODE_START_S
    while not port_answers(entry["port"]):
        if not pid_alive(pid) or time.monotonic() >= deadline:
            raise StackError(f"Redis node {node} did not start again on {HOST}:{entry['port']}; see {entry['log']}")
        time.sleep(0.05)
    return [pid]
