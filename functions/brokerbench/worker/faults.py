"""A cell's faults, applied by its supervisor at their times (brokerbench.faults): which node, when exactly, and what
the broker said before and after.

The broker's own hooks (its plug-in's `cluster` module) name the node that leads the cell's topic and start a node
again; the signals go to that node's processes (their process groups: a node started in a session of its own takes
its children with it). Every action is recorded as it happens: the node it hit, its time from the measured start
(the planned one beside it), the wall-clock time, and the leader the broker named just before. At the cell's end the
leader is asked again (`leader_at_end`, before anything is restored), nodes still down are started again and paused ones
resumed, and the cell waits until the cluster serves on every node, so the next cell finds it whole.

A network fault is no signal: its toxics (brokerbench.toxiproxy) go on the proxy in front of the node at its time and
come off at its end ("heal"), duration_s after they were all on (at the planned end, or later when the API was slow
to answer). The fault's at_s is taken when the Toxiproxy API has answered (every toxic is on every connection through
the proxy from then on), the heal's just before the first removal (they were all on until then), so the span between
them is one the link surely was faulty in; `call_s` says how long the API calls took (their effect began up to that
much earlier, or ended up to that much later). Any still on at the cell's end are taken off with the rest. A single
node is its own target ("leader"); on a cluster the broker's hooks name the node as for the other kinds.
"""

from __future__ import annotations

import importlib
import signal
import threading
import time
from datetime import datetime, timezone

from .. import faults, toxiproxy
from ..registry import plugin
from .processes import pid_exists, signal_group

SECOND_NS = 1_000_000_000
SIGNALS = {"kill": signal.SIGKILL, "stop": signal.SIGTERM, "pause": signal.SIGSTOP, "resume": signal.SIGCONT}
WHOLE_TIMEOUT_S = 120.0  # a node started again joins its cluster within this (a JVM on a loaded 2-core host)
LEADER_WAIT_S = 15.0  # at the cell's end, how long a leader is waited for (an election still running)
NETWORK_STEPS = (faults.NETWORK, "heal")


def _call_s(began_ns: int) -> dict:
    """How long a network fault's Toxiproxy calls took (from `began_ns` to now): its toxics went on (came off) within
    that time before its at_s (after it, for a heal)."""
    return {"call_s": round((time.monotonic_ns() - began_ns) / SECOND_NS, 6)}


def _proxies(names: list[str]) -> dict:
    """How a network fault's record names the proxies its toxics went on: `proxy`, the first (a node's only one,
    mostly), and `proxies`, every one, where the node has several (one per client port)."""
    return {"proxy": names[0], **({"proxies": names} if len(names) > 1 else {})}


# A clean stop (SIGTERM) takes its time: a Kafka broker hands its leaderships over first, a RabbitMQ node closes its
# queues one by one (about 6 s here). A node started again while its old process still runs fails on its own ports
# and data, so a restart waits (up to this) for a stopped node's processes to end.
STOPPED_WAIT_S = 60.0


class FaultError(RuntimeError):
    """A fault could not be applied as asked (no node leads the topic, no such node): the cell fails with it."""


def _signal(node: str, pids: list[int], sig: int) -> None:
    """`sig` to each of the node's processes; FaultError when none of them exists any more (a fault that hit nothing
    is not recorded as applied)."""
    reached = [signal_group(pid, sig) for pid in pids]
    if not any(reached):
        raise FaultError(f"node {node}: none of its processes ({', '.join(map(str, pids)) or 'none recorded'}) runs; "
                         "was it started again without the stack's record?")


def _running(pid: int) -> bool:
    """The process exists and has not ended (a zombie waiting for its parent to reap it has)."""
    if not pid_exists(pid):
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_ended(pids: list[int], bound_s: float) -> None:
    """Waits until none of `pids` runs, up to bound_s (then a start fails on the node's ports, named)."""
    deadline = time.monotonic() + bound_s
    while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)


class CellFaults:
    """The faults of one cell, applied by a thread of their own at their times (the supervisor's loop waits on the
    broker now and then: a backlog query during an election took seconds): `start` at the measured start (again
    when an adaptive warm-up moves it), `error` a fault that could not be applied, `finish` stops the thread,
    restores the cluster and returns the records (stored with the cell)."""

    def __init__(self, cell: dict, endpoint: dict, topic: str) -> None:
        self.steps = faults.timetable(cell.get("faults") or [])
        self.asked = cell.get("faults") or []  # the request's faults, by index (a network fault's effect)
        self.endpoint, self.topic = endpoint, topic
        reference = self._hooks_reference(cell) if self.steps else None
        self.hooks = importlib.import_module(reference) if reference else None
        self.measure_start: int | None = None
        self.records: list[dict] = []
        self.down: list[str] = []  # nodes a kill or stop took down, not started again yet
        self.stopped: dict[str, list[int]] = {}  # node -> the pids a stop signalled (they may still be ending)
        self.paused: dict[int, str] = {}  # fault index -> the node its pause stopped
        # fault index -> (node, proxy, toxics) of a network fault on now
        self.faulty: dict[int, tuple[str, list[str], list[str]]] = {}
        self.faulty_at: dict[int, int] = {}  # fault index -> when its toxics were all on (ns from the measured start)
        self.resume_due: dict[int, int] = {}  # fault index -> its resume's time (ns from the measured start)
        self.finished = False
        self.error: str | None = None  # why a fault could not be applied (the cell fails with it)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __bool__(self) -> bool:
        return bool(self.steps)

    def start(self, measure_start_ns: int) -> None:
        """The measured start (the faults' clock): the thread starts with the first call, a later one moves it."""
        self.measure_start = measure_start_ns
        if self._thread is None and self.steps and self.error is None:
            try:
                self._prepare()
            except FaultError as exc:
                self.error = str(exc)
                return
            self._thread = threading.Thread(target=self._timetable, name="bb-faults", daemon=True)
            self._thread.start()

    @staticmethod
    def _hooks_reference(cell: dict) -> str | None:
        return plugin(cell["broker"]).cluster

    def _prepare(self) -> None:
        """What is done once before the clock runs: the stack's records read (their first read imports them), where
        there are nodes to signal (a single node's network faults have none)."""
        if "nodes" in self.endpoint or any(s.kind not in NETWORK_STEPS for s in self.steps):
            self._nodes()

    def first_due(self) -> int | None:
        """When the first action is due (monotonic ns); None without faults or before the measured start."""
        if self.measure_start is None or not self.steps:
            return None
        return self.measure_start + self.steps[0].at_ns

    def _timetable(self) -> None:
        steps = list(self.steps)
        try:
            while steps and not self._stop.is_set():
                steps.sort(key=lambda s: (self._due(s), s.index))  # a resume or a heal moves with its fault
                left = self.measure_start + self._due(steps[0]) - time.monotonic_ns()
                if left > 0:
                    self._stop.wait(min(left / SECOND_NS, 0.05))  # short: an adaptive warm-up may move the start
                    continue
                self._run(steps.pop(0))
        except FaultError as exc:
            self.error = str(exc)
        except Exception as exc:  # noqa: BLE001 - any failure of a hook fails the cell, named
            self.error = f"{type(exc).__name__}: {exc}"

    def _due(self, step: faults.Step) -> int:
        """When a step is due (ns from the measured start): its planned time; a resume's, duration_s after its pause
        was applied (the leader's lookup before the signal may take a moment, and the pause lasts what was asked all
        the same); a heal no sooner than its fault's duration_s after the fault's toxics were all on (an API slow to
        answer, on a loaded host, shortens no fault)."""
        if step.kind == "resume":
            return self.resume_due.get(step.index, step.at_ns)
        on = self.faulty_at.get(step.index) if step.kind == "heal" else None
        if on is None:
            return step.at_ns
        return max(step.at_ns, on + int(round(self.asked[step.index]["duration_s"] * SECOND_NS)))

    def _nodes(self) -> list[dict]:
        if "nodes" not in self.endpoint:
            raise FaultError("the target has no local nodes to fault (faults run on a cluster the run starts locally)")
        return self.hooks.nodes(self.endpoint)

    def _pids(self, node: str) -> list[int]:
        """The node's processes as the stack records them now."""
        return next(n["pids"] for n in self._nodes() if n["node"] == node)

    def _target(self, target: str, leader: str | None) -> dict:
        nodes = self._nodes()
        names = [n["node"] for n in nodes]
        if target == "leader":
            if leader is None:
                raise FaultError(f"no node led {self.topic} when the fault came (the broker named none)")
            name = leader
        elif target == "follower":
            others = [n for n in names if n != leader and n not in self.down]
            if not others:
                raise FaultError(f"no follower of {self.topic} is up to fault")
            name = others[0]
        else:
            name = target
        found = [n for n in nodes if n["node"] == name]
        if not found:
            raise FaultError(f"target {target!r}: the cluster has no node {name!r} (its nodes: {', '.join(names)})")
        return found[0]

    def _links(self, target: str) -> tuple[list[dict], str | None]:
        """The proxied links in front of the network fault's node (one per client port: RabbitMQ's AMQP and stream
        listeners each have their own), and the leader the broker named (a cluster's)."""
        proxy = self.endpoint.get("proxy") or {}
        if not toxiproxy.routed(self.endpoint):
            raise FaultError("the broker's clients are not routed through proxies (a network fault needs the local "
                             "stack's Toxiproxy in front of its nodes)")
        links = proxy["links"]
        leader = None
        if len({link["node"] for link in links}) == 1 and "nodes" not in self.endpoint:
            node = links[0]["node"] if target in faults.TARGETS else target  # a single node is the leader
        else:
            leader = self.hooks.leader(self.endpoint, self.topic)
            node = self._target(target, leader)["node"]
        found = [link for link in links if link["node"] == node]
        if not found:
            raise FaultError(f"target {target!r}: no proxy in front of node {node!r} (proxied nodes: "
                             f"{', '.join(sorted({link['node'] for link in links}))})")
        return found, leader

    def _network(self, step: faults.Step) -> None:
        """A network fault's toxics put on the proxies in front of its node, or (heal) taken off."""
        client = toxiproxy.ToxiproxyClient(self.endpoint["proxy"]["api_port"])
        if step.kind == "heal":
            node, proxies, names = self.faulty.pop(step.index)
            at = time.monotonic_ns()  # the toxics were all on until here
            for proxy in proxies:
                for name in names:
                    client.remove_toxic(proxy, name)
            self._record(step, at, None, nodes=[node], **_proxies(proxies), toxics=names, **_call_s(at))
            return
        fault = self.asked[step.index]
        links, leader = self._links(step.target)
        toxics = toxiproxy.toxics_for({**fault, "fault_index": step.index})
        began = time.monotonic_ns()
        for link in links:
            for toxic in toxics:
                client.add_toxic(link["name"], toxic)
        at = time.monotonic_ns()  # the toxics are all on from here
        proxies = [link["name"] for link in links]
        self.faulty_at[step.index] = at - self.measure_start
        self.faulty[step.index] = (links[0]["node"], proxies, [t["name"] for t in toxics])
        self._record(step, at, leader, nodes=[links[0]["node"]], effect=fault["effect"], **_proxies(proxies),
                     toxics=[t["name"] for t in toxics], **_call_s(began))

    def _heal_all(self) -> list[dict]:
        """Every toxic still on a proxy of the endpoint taken off (a network fault the cell's end came before, or one
        a cell that failed left): what was taken off, per proxy."""
        if not toxiproxy.routed(self.endpoint):
            return []
        client, healed = toxiproxy.ToxiproxyClient(self.endpoint["proxy"]["api_port"]), []
        by_proxy = {proxy: index for index, (_, proxies, _) in self.faulty.items() for proxy in proxies}
        for link in self.endpoint["proxy"]["links"]:
            names = client.clear(link["name"])
            if names:
                healed.append({**({"fault": by_proxy[link["name"]]} if link["name"] in by_proxy else {}),
                               "kind": "heal", "nodes": [link["node"]], "proxy": link["name"], "toxics": names})
        self.faulty = {}
        return healed

    def _run(self, step: faults.Step) -> None:
        if step.kind in NETWORK_STEPS:
            self._network(step)
            return
        # Asked only where the target depends on it: with the leader just killed, a metadata request can wait seconds
        # for a node that no longer answers, and a restart or resume is due at its own time whatever leads.
        leader = self.hooks.leader(self.endpoint, self.topic) if step.kind not in ("restart", "resume") else None
        if step.kind == "restart":
            nodes = list(self.down)
            self._wait_stopped(nodes)
            at = time.monotonic_ns()  # when the restart began (a stopped node's processes had ended)
            self._start_again(nodes)
            self._record(step, at, leader, nodes=nodes)
            self.down = []
            return
        node = self.paused.pop(step.index) if step.kind == "resume" else self._target(step.target, leader)["node"]
        pids = self._pids(node)
        # taken just before the signal: on a loaded host the thread may wait after it, and a resumed node's first
        # confirm was stamped 5 ms before a time taken after it
        at = time.monotonic_ns()
        _signal(node, pids, SIGNALS[step.kind])
        if step.kind in faults.DOWN:
            self.down.append(node)
            if step.kind == "stop":
                self.stopped[node] = pids
        elif step.kind == "pause":
            self.paused[step.index] = node
            resume = next(s for s in self.steps if s.index == step.index and s.kind == "resume")
            self.resume_due[step.index] = at - self.measure_start + resume.at_ns - step.at_ns
        self._record(step, at, leader, nodes=[node])

    def _wait_stopped(self, nodes: list[str]) -> None:
        """Until the processes a clean stop signalled have ended (STOPPED_WAIT_S at most)."""
        _wait_ended([pid for name in nodes for pid in self.stopped.pop(name, [])], STOPPED_WAIT_S)

    def _start_again(self, nodes: list[str]) -> None:
        for name in nodes:
            self.hooks.start_node(self.endpoint, name)

    def _record(self, step: faults.Step, at_ns: int, leader: str | None, nodes: list[str], **network) -> None:
        self.records.append({
            "fault": step.index, "kind": step.kind, "target": step.target, "nodes": nodes,
            "planned_s": round(step.at_ns / SECOND_NS, 6),
            "at_s": round((at_ns - self.measure_start) / SECOND_NS, 6),
            "at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            "leader_before": leader, **network})

    def _stop_clock(self) -> bool:
        """Stops the faults' thread, once; False when there is nothing to finish (no faults, or finished already)."""
        if not self.hooks or self.finished:
            return False
        self.finished = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return True

    def finish(self) -> dict | None:
        """Brings the cluster back (paused nodes resumed, nodes down started again, every node serving) and
        returns what is stored with the cell: each action's record, what was left to restore, and the leader the
        broker names at the end; None for a cell without faults."""
        if not self._stop_clock():
            return None
        if "nodes" not in self.endpoint:  # a single node's network faults, or nothing applied (FaultError at first)
            return {"applied": self.records, "restored_at_end": self._heal_all(), "leader_at_end": None,
                    "cluster_whole_at_end": None}
        # the leader the fault left (before anything is restored), once the broker names one
        deadline = time.monotonic() + LEADER_WAIT_S
        leader = self.hooks.leader(self.endpoint, self.topic)
        while leader is None and time.monotonic() < deadline:
            time.sleep(0.2)
            leader = self.hooks.leader(self.endpoint, self.topic)
        restored = self._heal_all()
        for index, node in sorted(self.paused.items()):
            for pid in self._pids(node):
                signal_group(pid, signal.SIGCONT)
            restored.append({"fault": index, "kind": "resume", "nodes": [node]})
        if self.down:
            self._wait_stopped(self.down)
            self._start_again(self.down)
            restored.append({"kind": "restart", "nodes": list(self.down)})
        self.paused, self.down = {}, []
        deadline = time.monotonic() + WHOLE_TIMEOUT_S
        whole = self.hooks.whole(self.endpoint)
        while not whole and time.monotonic() < deadline:
            time.sleep(0.5)
            whole = self.hooks.whole(self.endpoint)
        return {"applied": self.records, "restored_at_end": restored, "leader_at_end": leader,
                "cluster_whole_at_end": whole}
