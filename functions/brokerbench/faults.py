"""Faults inside a cell: what a run request may ask for, the rules it must meet, and each cell's timetable of them.

A run request's `faults` are applied inside every measured cell of the run, at seconds from the measured start (the
warm-up excluded), to a node of the broker's local cluster:

- kill: SIGKILL of the node's processes (a crash: nothing flushed, nothing said to the others);
- stop: SIGTERM, a clean shutdown (the node hands over what it leads where the broker does that);
- pause: SIGSTOP for duration_s, then SIGCONT (a node that hangs: its connections stay open, nothing answers);
- restart: the nodes an earlier kill or stop took down started again, on their own ports and data;
- network: for duration_s, a fault on the link between the cell's clients and the node, made by a Toxiproxy proxy
  in front of each node (brokerbench.toxiproxy): `effect` latency (latency_ms added to each chunk), bandwidth (at
  most rate_kbps KB/s), reset (every connection reset by the node's side as soon as data crosses it) or blackhole
  (nothing crosses, nothing is closed), on the `direction` asked for (both by default), then taken off.
- reboot (AWS mode only): the managed service's own call on the run's target (Amazon MSK RebootBroker of one broker,
  ElastiCache TestFailover of the replication group's primary, Amazon MQ RebootBroker of the whole broker), made
  from the worker's side of the cell (brokerbench.worker.cloud_faults). The service brings the node back itself.

`target` names the node: "leader" (the node that leads the cell's topic, stream or queue when the fault comes, as
the broker itself says), "follower" (another node of the cluster) or a node's own name. A fault that needs a
replica to fail over to is refused on a single node, and a broker without a local cluster takes no fault; so is a
target the run does not start itself (an existing endpoint: its processes are not ours to signal). A network fault
needs no replica (a single node takes it too) but a broker whose clients the local stack can route through a proxy
per node (its local service's `proxied_sizes`: the node counts it can). A node still down or paused when the cell's
sending ends is brought back, and a network fault still on is taken off, before the next cell.

Which kinds a run may ask for depends on where it runs (`local_problems`, `aws_problems`, checked with the providers
before anything starts): locally every kind but reboot, since the run holds the nodes' processes and can put a proxy
in front of them; in AWS reboot only, since a managed service lets no client signal its nodes, and only on a broker
whose service offers the call.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from . import histogram

KINDS = ("kill", "stop", "pause", "restart", "network", "reboot")
MANAGED = ("reboot",)  # kinds a managed service's own control-plane call makes (AWS mode only)
# Why a kind has no managed equivalent (aws_problems): what it does that no managed service lets a client do
NO_MANAGED = {"kill": "a crash of one node's processes, which a managed service lets no client cause",
              "stop": "a clean shutdown of one node that stays down until a restart; the nearest managed call is the "
                      "reboot, which brings the node back by itself",
              "pause": "a node that hangs (SIGSTOP); no managed service freezes a node's processes",
              "restart": "a node an earlier kill or stop took down, started again; a rebooted node comes back by "
                         "itself",
              "network": "a fault on the link to one node, made by a proxy the run puts in front of its own local "
                         "nodes; a managed broker's clients reach it directly"}
DOWN = ("kill", "stop")  # kinds that take a node down until a restart
TARGETS = ("leader", "follower")  # or a node's own name
NETWORK = "network"
EFFECTS = ("latency", "bandwidth", "reset", "blackhole")  # a network fault's; brokerbench.toxiproxy.toxics_for
DIRECTIONS = ("both", "upstream", "downstream")  # client → broker, broker → client
EFFECT_FIELDS = {"latency": "latency_ms", "bandwidth": "rate_kbps"}  # what an effect needs besides its duration
NETWORK_FIELDS = ("effect", "direction", *EFFECT_FIELDS.values())  # a network fault's own fields
# After a managed call (worker/cloud_faults.py) the cell waits for the service to serve again: its state is read no
# sooner than MANAGED_SETTLE_S after the call (a service shows a reboot in its state some time after accepting it: an
# assumption, never measured here), and for MANAGED_WHOLE_TIMEOUT_S at most (MSK documents minutes for a broker's
# reboot). The plan adds both to a faulted cell's estimate (plan.estimated_seconds), which places it on EC2 when
# they take it past a Lambda invocation.
MANAGED_WHOLE_TIMEOUT_S = 300.0
MANAGED_SETTLE_S = 30.0
SECOND_NS = 1_000_000_000


@dataclass(frozen=True)
class Step:
    """One action of a cell's timetable: `at_ns` after the measured start; `resume` a pause's SIGCONT."""

    at_ns: int
    index: int  # the fault's place in the request's list
    kind: str  # kill | stop | pause | resume | restart | network | heal (a network fault taken off)
    target: str


def problems(spec: dict, clustered: dict[str, bool], local: dict[str, bool],
             proxied: dict[str, tuple[int, ...]] | None = None) -> list[tuple[str, str]]:
    """Every (field, what is wrong) of the request's faults. `clustered`: per broker of the request, whether it has
    a local cluster faults can be injected into; `local`: whether the run starts the broker itself (no existing
    endpoint in targets); `proxied`: per broker, the node counts whose clients the local stack can route through a
    proxy per node (network faults)."""
    faults = spec.get("faults") or []
    if not faults:
        return []
    out = []
    for i, rate in enumerate(spec["rates"]):
        if rate == "sustainable":
            out.append((f"rates[{i}]", "a sustainable-rate search takes no faults: each of its steps would fail "
                                       "over anew (remove faults, or the search)"))
    duration = spec.get("duration_s")
    if spec.get("messages") is not None:
        out.append(("faults", "faults are timed from the measured start: a counted cell (messages) has no known "
                              "length; give duration_s instead"))
        duration = None
    nodes = {b: (spec.get("provision", {}).get(b) or {}).get("nodes", 1) for b in spec["brokers"]}
    needs_replica = any(f["kind"] != NETWORK for f in faults)
    out += _network_problems(spec, faults, nodes, local, proxied or {})
    for broker in spec["brokers"]:
        if not local.get(broker):
            out.append((f"targets.{broker}", "faults are injected into a cluster the run starts itself; an existing "
                                             "endpoint's processes are not the run's to signal"))
        elif not needs_replica:
            continue
        elif not clustered.get(broker):
            runs = ", ".join(sorted(b for b, ok in clustered.items() if ok)) or "none"
            out.append(("faults", f"{broker} takes no faults here: it has no local cluster with fault hooks, or its "
                                  f"clients do not follow a failover (brokers that take them: {runs})"))
        elif nodes[broker] < 2:
            out.append((f"provision.{broker}.nodes", f"the faults need a replica to fail over to: {broker} runs "
                                                     "as 1 node; ask for a cluster (nodes: 3)"))
    down_at: list[float] = []
    for i, fault in enumerate(faults):
        place, kind, at = f"faults[{i}]", fault["kind"], fault["at_s"]
        if duration is not None and at >= duration:
            out.append((f"{place}.at_s", f"{at:g} s is not inside the measured {duration:g} s (duration_s)"))
        if kind != NETWORK:
            out += [(f"{place}.{name}", f"a {kind} has no {name} (a network fault's)") for name in NETWORK_FIELDS
                    if name in fault]
        if kind == NETWORK:
            continue  # _network_problems
        if kind == "pause":
            if "duration_s" not in fault:
                out.append((f"{place}.duration_s", "a pause needs its duration_s (how long the node is stopped)"))
            elif duration is not None and at + fault["duration_s"] > duration:
                out.append((f"{place}.duration_s", f"the pause ends at {at + fault['duration_s']:g} s, after the "
                                                   f"measured {duration:g} s (duration_s)"))
        elif "duration_s" in fault:
            out.append((f"{place}.duration_s", f"a {kind} has no duration" + (
                ": a later restart brings the node back" if kind in DOWN else "")))
        if kind in DOWN:
            down_at.append(at)
        if kind == "restart":
            if "target" in fault:
                out.append((f"{place}.target", "a restart starts again every node an earlier kill or stop took "
                                               "down: it names no target"))
            if not any(t < at for t in down_at):
                out.append((place, "a restart needs an earlier kill or stop (by at_s) to bring a node back from"))
    return out


def local_problems(spec: dict) -> list[tuple[str, str]]:
    """Every (field, what is wrong) of the faults of a run on the local stack: a reboot is a managed service's call."""
    return [(f"faults[{i}].kind", "reboot is a managed service's call (Amazon MSK RebootBroker, ElastiCache "
                                  "TestFailover, Amazon MQ RebootBroker), made in AWS only; on a local cluster a node "
                                  "is killed, stopped or paused, and restarted")
            for i, fault in enumerate(spec.get("faults") or []) if fault["kind"] in MANAGED]


def aws_problems(spec: dict, offers: dict) -> list[tuple[str, str]]:
    """Every (field, what is wrong) of the faults of a run in AWS mode. `offers`: per broker of the request,
    (service name, the registry's CloudFault) when its managed service offers a fault the run can make, else None.
    An existing endpoint (targets.<broker>) is refused by `problems`."""
    faults = spec.get("faults") or []
    named = spec.get("targets") or {}
    out: list[tuple[str, str]] = []
    for broker in (b for b in spec["brokers"] if faults and b not in named):
        if offers.get(broker) is None:
            out.append(("faults", f"{broker} takes no faults in AWS: its managed service (if any) offers no reboot "
                                  "or failover call the run makes; run its faults on a local cluster"))
            continue
        service, offer = offers[broker]
        for i, fault in enumerate(faults):
            kind, target = fault["kind"], fault.get("target")
            if kind not in MANAGED:
                why = NO_MANAGED.get(kind, "a fault injected beside a local cluster")
                out.append((f"faults[{i}].kind", f"{kind} has no managed equivalent on {service} ({why}); in AWS a "
                                                 f"fault is kind reboot ({offer.call}: {offer.does})"))
            elif target is not None and not offer.targets:
                out.append((f"faults[{i}].target", f"{offer.call} on {service} acts on the whole broker ({offer.does}): "
                                                   "a reboot there names no target"))
            elif target is not None and target not in offer.targets and (target in TARGETS or "node" not in offer.targets):
                allowed = ", ".join(offer.targets)
                out.append((f"faults[{i}].target", f"{offer.call} on {service} {offer.does}: its target is {allowed}, "
                                                   f"not {target!r}"))
    return out


def managed_wait_s(faults: list[dict]) -> float:
    """The longest a cell waits at its end for a managed service to serve again (0 without a managed fault)."""
    return MANAGED_SETTLE_S + MANAGED_WHOLE_TIMEOUT_S if any(f["kind"] in MANAGED for f in faults) else 0.0


def _network_problems(spec: dict, faults: list[dict], nodes: dict[str, int], local: dict[str, bool],
                      proxied: dict[str, tuple[int, ...]]) -> list[tuple[str, str]]:
    """The network faults' own rules: an effect with what it needs and nothing of another's, a duration inside the
    measured window, a follower only where there is one, and brokers whose clients the local stack can route
    through a proxy per node at the size asked for."""
    network = [(i, f) for i, f in enumerate(faults) if f["kind"] == NETWORK]
    if not network:
        return []
    out = []
    duration = spec.get("duration_s") if spec.get("messages") is None else None
    for i, fault in network:
        place, effect = f"faults[{i}]", fault.get("effect")
        if effect is None:
            out.append((f"{place}.effect", f"a network fault needs its effect: one of {', '.join(EFFECTS)}"))
        for wanted, name in EFFECT_FIELDS.items():
            if effect == wanted and name not in fault:
                out.append((f"{place}.{name}", f"a {wanted} fault needs its {name}"))
            elif effect is not None and effect != wanted and name in fault:
                out.append((f"{place}.{name}", f"{name} belongs to a {wanted} fault, not a {effect} one"))
        if "duration_s" not in fault:
            out.append((f"{place}.duration_s", "a network fault needs its duration_s (how long the link is faulty)"))
        elif duration is not None and fault["at_s"] + fault["duration_s"] > duration:
            out.append((f"{place}.duration_s", f"the network fault ends at {fault['at_s'] + fault['duration_s']:g} "
                                               f"s, after the measured {duration:g} s (duration_s)"))
        single = sorted(b for b in spec["brokers"] if nodes[b] < 2)
        if fault.get("target") == "follower" and single:
            out.append((f"{place}.target", f"{', '.join(single)} runs as 1 node: it has no follower (target the "
                                           "leader, or ask for a cluster)"))
    takes = ", ".join(f"{b} ({_sizes(s)})" for b, s in sorted(proxied.items()) if s) or "none"
    for broker in spec["brokers"]:
        if local.get(broker) and nodes[broker] not in proxied.get(broker, ()):
            out.append(("faults", f"{broker} takes no network faults as {nodes[broker]} node"
                                  f"{'s' if nodes[broker] > 1 else ''}: the local stack cannot route its clients "
                                  f"through a proxy in front of each node (network faults run on: {takes})"))
    return out


def _sizes(sizes: tuple[int, ...]) -> str:
    return "1 node" if tuple(sizes) == (1,) else f"{min(sizes)} to {max(sizes)} nodes"


def timetable(faults: list[dict]) -> list[Step]:
    """The cell's actions in time order: each fault at its at_s, a pause's resume and a network fault's heal at
    their ends."""
    steps = []
    for i, fault in enumerate(faults):
        at = int(round(fault["at_s"] * SECOND_NS))
        target = fault.get("target", "leader")
        steps.append(Step(at, i, fault["kind"], target))
        end = {"pause": "resume", NETWORK: "heal"}.get(fault["kind"])
        if end:
            steps.append(Step(at + int(round(fault["duration_s"] * SECOND_NS)), i, end, target))
    return sorted(steps, key=lambda s: (s.at_ns, s.index))


def first_fault_ns(faults: list[dict]) -> int | None:
    """When the cell's first fault comes, after the measured start; None without faults."""
    steps = timetable(faults)
    return steps[0].at_ns if steps else None


# -- the figures before, during and after (the worker stores them with the cell; reports show them) --------
# - The fault window: from the first action to the later of the last action and the end of the longest stretch
#   without a producer's acknowledgement or a consumer's delivery (the cell's producer_ack_gap and
#   consumer_receipt_gap). Its intervals (1 s) are "during"; those wholly before it "before", those wholly after it
#   "after". Each phase's latency percentiles are taken over its intervals' histograms merged; its throughput is
#   what was delivered (acknowledged, for a publish-only cell) per second.
# - Back to rate: from the first action to the start of the first interval from which on every interval delivered
#   at least RECOVERED_SHARE of the median rate before the fault (1 s resolution); None when it never came back
#   within the measured sending window (the drain's intervals after it count in no phase).
RECOVERED_SHARE = 0.9  # "back within 10% of the rate before the fault"
PHASES = ("before", "during", "after")


def window(record: dict) -> tuple[float, float] | None:
    """The fault window in seconds from the measured start (above); None when nothing was applied."""
    applied = record.get("applied") or []
    if not applied:
        return None
    start = min(a["at_s"] for a in applied)
    end = max(a["at_s"] for a in applied)
    for gap in (record.get("producer_ack_gap"), record.get("consumer_receipt_gap")):
        if gap:
            end = max(end, gap["to_s"])
    return start, end


def _delivered(interval: dict, publish_only: bool) -> int:
    counters = interval.get("counters") or {}
    return int(counters.get("acked" if publish_only else "received") or 0)


def _phase(intervals: list[dict], publish_only: bool) -> dict | None:
    if not intervals:
        return None
    out = {"seconds": len(intervals),
           "throughput_msgs_per_s": round(sum(_delivered(i, publish_only) for i in intervals) / len(intervals), 1)}
    for name in ("end_to_end_latency_us", "publish_latency_us"):
        blobs = [i["histograms"][name] for i in intervals if (i.get("histograms") or {}).get(name)]
        figures = histogram.summary(histogram.merge(blobs)) if blobs else None
        out[name] = None if not figures or not figures["count"] else {k: figures[k] for k in ("p50", "p99", "max",
                                                                                            "count")}
    return out


def phases(intervals: list[dict], record: dict, publish_only: bool, sending_s: float | None = None) -> dict:
    """The figures before, during and after the fault window, and when the rate came back (above). `intervals`:
    IntervalMeasured data with their counters and histograms; `sending_s`: the measured sending window's length,
    whose intervals alone count (the drain after it delivers what is left, then nothing: not a rate to be back at)."""
    span = window(record)
    if span is None:
        return {"window_s": None, **dict.fromkeys(PHASES), "back_to_rate_s": None}
    start, end = span
    measured = sorted((i for i in intervals if 0 <= i["interval"] and (sending_s is None or i["interval"] < sending_s)),
                      key=lambda i: i["interval"])
    parts = {"before": [i for i in measured if i["interval"] + 1 <= start],
             "during": [i for i in measured if i["interval"] < end and i["interval"] + 1 > start],
             "after": [i for i in measured if i["interval"] >= end]}
    rates = [_delivered(i, publish_only) for i in parts["before"]]
    back = None
    if rates:
        floor = RECOVERED_SHARE * statistics.median(rates)
        later = [i for i in measured if i["interval"] + 1 > start]
        for k, interval in enumerate(later):
            if all(_delivered(j, publish_only) >= floor for j in later[k:]):
                back = round(max(0.0, interval["interval"] - start), 3)
                break
    return {"window_s": [round(start, 6), round(end, 6)],
            **{name: _phase(members, publish_only) for name, members in parts.items()}, "back_to_rate_s": back}
