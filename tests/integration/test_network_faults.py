"""Network faults of the run request (brokerbench.faults, kind "network") between the cell's clients and a real broker,
through the local stack's Toxiproxy, provisioned as a run provisions them (targets/local.py) and measured as a run
measures its cells.

The independent truth is the proxy's: what Toxiproxy lets through while the toxic is on.
- reset (Redis, one node) and blackhole (Kafka, one node) for OUTAGE_S: while the toxic is on, no byte crosses the
  link (a reset closes every connection at its first byte; a blackhole drops them), so no acknowledgement and no
  delivery can reach a client between the moment the toxics are in place (the fault's recorded at_s, taken when the
  API has answered) and the moment their removal begins (the heal's at_s), which the worker holds OUTAGE_S apart
  however slow the API was. The producers' and consumers' longest gap must then cover that span. GAP_SLACK_S allows
  for what Toxiproxy had in hand when the toxic came: it adds a toxic to each connection by interrupting the last
  stub of its chain and passing on the chunk that stub held (its channels are unbuffered: one chunk per connection
  and direction, a reply read a moment before, written a moment after). On loopback that is under a ms; 50 ms
  allows for a loaded host's scheduling of that one write, far below the seconds the check guards against.
- latency of LATENCY_MS upstream (client → broker) on Redis: every XADD reaches Redis LATENCY_MS later, and its reply
  comes back as before, so each publish latency during the fault is at least LATENCY_MS (Toxiproxy holds each chunk
  that long on a timer): the during phase's p50 is at least that, always (the fault runs from 2 s to 4.9 s, so the
  phase's intervals, those the fault window overlaps, are 2 to 5 s and mostly delayed). The phase grows by
  LATENCY_MS over the phase before it, less the histogram's resolution and TOLERANCE_MS (test_latency_truth.py):
  judged only where the cell's own host record says the machine was not busy (brokerbench.host: CPU pressure), as
  the latency-truth module judges its growths; a loaded host's stalls move a 2-second "before" phase's p50 by
  milliseconds on their own (3.3 ms against 0.9 ms after the fault, at a load of 28 on 2 cores).

- bandwidth of RATE_KBPS upstream on Redis: Toxiproxy passes a connection's bytes at that rate on average, so the
  acknowledgements of the seconds the fault covers are bounded by it (each XADD carries its payload at least), with
  one chunk's allowance; the lower bound (half the rate) only on a host its record says was not busy.
- the same reset on NATS JetStream, RabbitMQ quorum queues and streams (one node each): the clients were given the
  proxies' addresses only, and the fault covers both of the RabbitMQ node's proxies (AMQP and stream).
- on nats@3, every server's link reset at once, and the stream leader's link alone: the servers' own links are not
  proxied, so the stream info names the same leader at the end.

Accounting stays whole (every message sent is in one class), and Redis and Kafka, which lose nothing they
acknowledged when only a link fails, lose none. After the run's teardown the proxies are gone and the Toxiproxy the
run started is stopped.
"""

from __future__ import annotations

import pytest

from brokerbench.events import new_run_id
from brokerbench.figures import ARRIVAL
from brokerbench.reports.results import build_results
from brokerbench.spec import validate
from brokerbench.targets.local import LocalTargets
from brokerbench.toxiproxy import ToxiproxyClient, ToxiproxyError, client_endpoint
from fault_tools import assert_accounting_whole
from inline_run import execute_run

OUTAGE_S = 2.0
GAP_SLACK_S = 0.05
LATENCY_MS = 40
TOLERANCE_MS = 1.5
RESOLUTION = 1e-3  # HdrHistogram with 3 significant digits
RATE_KBPS = 20  # against 200 msgs/s of PAYLOAD bytes offered: a tenth of what the producer sends
PAYLOAD = 1024
WINDOW = (2, 4)  # the whole seconds counted under the bandwidth fault (from 1 s to 4.5 s)
INTERVAL_LAG_S = 0.5  # how late a producer's interval may close (its acknowledgements counted in the one before)
TOXIPROXY_CHUNK = 32 * 1024  # the most Toxiproxy reads from a connection at once: one chunk may be in hand
WIRE_OVERHEAD = 200  # an XADD's bytes beyond its payload, at most: the header and RESP's framing (about 80)
CLASSES = ("received", "late", "undelivered", "lost", "send_errors", "unacknowledged")
BASE = {"sizes": [256], "rates": [200], "duration_s": 5, "warmup_s": 0.5, "warmup_until_steady": False,
        "drain_timeout_s": 15, "formats": ["raw"], "modes": ["batch"], "partitions": 1}


@pytest.fixture
def provisioned(stack):
    """Provisions a request's brokers on the session's stack as a run does (its Toxiproxy, the proxies), and tears
    them down after: (run_id, endpoints) -> teardown checks."""
    made = []

    def provision(request: dict) -> tuple[str, dict]:
        spec = validate(request)
        run_id = new_run_id()
        targets = LocalTargets(stack)
        endpoints = {b: targets.provision(run_id, b, spec)["endpoint"] for b in spec["brokers"]}
        made.append((run_id, spec, endpoints))
        return run_id, endpoints

    yield provision
    for run_id, spec, endpoints in reversed(made):  # the first run's Toxiproxy stops with the last proxy
        for broker in spec["brokers"]:
            LocalTargets(stack).teardown(run_id, broker, spec)


def run(request: dict, provision, store) -> tuple[list[dict], dict]:
    run_id, endpoints = provision(request)
    outcome = execute_run(request, endpoints, store, run_id=run_id)
    events = store.read(outcome.run_id)
    return events, endpoints


def cell_faults(events: list[dict], cell_id: str) -> dict:
    [faults] = [e["data"]["faults"] for e in events if e["type"] == "CellCompleted" and e["data"]["cell_id"] == cell_id]
    return faults


def assert_outage_covered(events: list[dict], endpoints: dict, broker: str, effect: str) -> dict:
    """The cell of `broker` completed under one network fault of `effect` whose toxics stayed on for OUTAGE_S: its
    producers and consumers went without an answer for at least that span, every message sent is in one class of
    the accounting, none acknowledged was lost, the broker's own count agrees, and no toxic is left on any of the
    broker's proxies. Returns the cell."""
    [cell] = [c for c in build_results(events)["cells"] if c["broker"] == broker]
    assert cell["status"] == "completed", cell.get("reason")
    faults = cell_faults(events, cell["cell_id"])
    fault, heal = faults["applied"]
    assert (fault["kind"], fault["effect"], heal["kind"]) == ("network", effect, "heal")
    assert fault["nodes"] == heal["nodes"] and fault["proxy"] == heal["proxy"] and faults["restored_at_end"] == []
    assert fault.get("proxies") == heal.get("proxies")
    span = heal["at_s"] - fault["at_s"]
    assert span >= OUTAGE_S - GAP_SLACK_S, faults  # the timetable kept the fault on for its duration
    for gap in (faults["producer_ack_gap"], faults["consumer_receipt_gap"]):
        assert gap is not None and gap["s"] >= span - GAP_SLACK_S, (broker, faults)
        assert gap["from_s"] <= fault["at_s"] + GAP_SLACK_S and gap["to_s"] >= heal["at_s"], (broker, faults)
    print(f"{broker} {effect}: on {span:.3f} s, producers {faults['producer_ack_gap']['s']:.3f} s and consumers "
          f"{faults['consumer_receipt_gap']['s']:.3f} s without an answer, sent {cell['sent']}, send errors "
          f"{cell['send_errors']}, unacknowledged {cell['unacknowledged']}, duplicates {cell.get('duplicates')}, "
          f"lost {cell['lost']}, call_s {fault['call_s']}")
    assert_accounting_whole(cell, broker)
    assert cell["lost"] == 0 and cell["sent"] > 0 and cell["received"] > 0, cell
    proxy = endpoints[broker]["proxy"]
    client = ToxiproxyClient(proxy["api_port"])
    assert all(client.toxics(link["name"]) == {} for link in proxy["links"])  # nothing left on for the next cell
    return cell


def assert_broker_holds_what_it_acknowledged(cell: dict) -> None:
    """The broker's own count (XLEN, stream info, the management API) holds every message it acknowledged (and
    those the consumers received unacknowledged), and more only by publishes whose answer the fault took: a message
    the broker stored as the link was reset, its acknowledgement lost on the way back (a send error or
    unacknowledged to the producer; nats@3 once held 3 such, of 404 send errors), or a copy sent again."""
    count = cell["broker_count"]
    unanswered = sum(cell[k] or 0 for k in ("send_errors", "unacknowledged", "duplicated"))
    assert 0 <= count["difference"] <= unanswered, (cell["broker"], count, unanswered)


def test_a_reset_or_blackhole_makes_the_clients_wait_at_least_its_duration_and_loses_nothing(
        stack, provisioned, store):
    request = {**BASE, "name": "it-network-outage", "brokers": ["redis-streams"],
               "faults": [{"kind": "network", "effect": "reset", "at_s": 1.5, "duration_s": OUTAGE_S}]}
    kafka_request = {**request, "brokers": ["kafka"],
                     "faults": [{"kind": "network", "effect": "blackhole", "at_s": 1.5, "duration_s": OUTAGE_S}]}
    for one in (request, kafka_request):
        events, endpoints = run(one, provisioned, store)
        [broker] = one["brokers"]
        assert_outage_covered(events, endpoints, broker, one["faults"][0]["effect"])


def test_a_reset_on_nats_and_on_rabbitmqs_amqp_and_stream_listeners_makes_their_clients_wait_and_loses_nothing(
        stack, extra_brokers, provisioned, store):
    """One node each, one run: NATS JetStream (the native send loop where it is built, else nats-py; both connect
    again to the proxy), RabbitMQ quorum queues (AMQP) and streams (the stream protocol: the node advertises its own
    stream listener, which the client maps onto the proxy). The reset covers both of the RabbitMQ node's proxies."""
    brokers = ["nats-jetstream", "rabbitmq-quorum", "rabbitmq-streams"]
    extra_brokers("nats", "rabbitmq")  # running already when test_nats.py or test_rabbitmq.py came first (no boot)
    # drain_timeout_s 2: the publishes a reset cut off unacknowledged never reach the broker, and the drain would wait
    # its whole idle timeout for them in each of the three cells
    request = {**BASE, "name": "it-network-nats-rabbitmq", "brokers": brokers, "drain_timeout_s": 2,
               "faults": [{"kind": "network", "effect": "reset", "at_s": 1.5, "duration_s": OUTAGE_S}]}
    events, endpoints = run(request, provisioned, store)
    for broker in brokers:
        cell = assert_outage_covered(events, endpoints, broker, "reset")
        assert_broker_holds_what_it_acknowledged(cell)
        links = endpoints[broker]["proxy"]["links"]
        [fault, _] = cell_faults(events, cell["cell_id"])["applied"]
        assert sorted(fault.get("proxies") or [fault["proxy"]]) == sorted(link["name"] for link in links)
        # the clients were given the proxies' addresses only: nothing in their endpoint names a node's own port
        client = client_endpoint(endpoints[broker])
        own = {link["upstream"] for link in links}
        assert not own & set(_ports(client)), (broker, client)
    # the streams producer and consumer connect again on sockets of their own, to the proxy in front of the address
    # the node advertises: stamped at the kernel's receive time, and the consumer, subscribed again from the offset
    # after the last one delivered, is delivered nothing twice
    [streams] = [c for c in build_results(events)["cells"] if c["broker"] == "rabbitmq-streams"]
    assert (streams["ack_stamps"], streams["delivery_stamps"]) == (ARRIVAL, ARRIVAL), streams
    assert streams["duplicated"] == 0, streams


def test_a_reset_of_the_masters_link_behind_sentinel_fails_nothing_over_and_loses_nothing(stack, provisioned, store):
    """Redis with a replica and three Sentinels (redis@2): the clients ask the Sentinels for the master and connect to
    the proxy in front of the address they name; the Sentinels watch the nodes directly. A 2 s reset of the master's
    link then leaves the clients without an answer for its span and fails nothing over: the Sentinels name the same
    master at the end (a failover would have needed the master to stop answering them for down-after-milliseconds,
    1 s)."""
    request = {**BASE, "name": "it-network-sentinel", "brokers": ["redis-streams"], "drain_timeout_s": 2,
               "provision": {"redis-streams": {"nodes": 2}},
               "faults": [{"kind": "network", "effect": "reset", "target": "leader", "at_s": 1.5,
                           "duration_s": OUTAGE_S}]}
    events, endpoints = run(request, provisioned, store)
    cell = assert_outage_covered(events, endpoints, "redis-streams", "reset")
    faults = cell_faults(events, cell["cell_id"])
    fault = faults["applied"][0]
    assert fault["nodes"] == [fault["leader_before"]] and faults["leader_at_end"] == fault["leader_before"], faults
    assert_broker_holds_what_it_acknowledged(cell)  # the master's own XLEN
    client = client_endpoint(endpoints["redis-streams"])
    assert set(client["node_addresses"].values()) == {link["listen"] for link in client["proxy"]["links"]}


def test_every_nats_cluster_client_keeps_to_the_proxies(stack, provisioned, store):
    """nats@3 with every server's link reset at once for 2 s (a fault per server, by name): the clients were given
    the proxies' URLs only, so no producer or consumer gets an answer while the toxics are on, and then all get
    theirs again (the native loop and nats-py move along the proxies' list). JetStream's own links are not proxied:
    the stream's leader is the same at the end, nothing acknowledged is lost and the stream's count agrees. (The
    servers' no_advertise is not what this judges: the native loop and the consumer read no advertised URLs, and
    without it the test passed too. nats-py does read them: the Python producer, with no_advertise removed, went
    0.02 s without a PubAck through this fault, around the proxies; test_nats_cluster.py checks that a nats-py
    client learns no server it was not given.)"""
    names = ["bb-nats-1", "bb-nats-2", "bb-nats-3"]
    request = {**BASE, "name": "it-network-nats3", "brokers": ["nats-jetstream"], "drain_timeout_s": 2,
               "provision": {"nats-jetstream": {"nodes": 3}},
               "faults": [{"kind": "network", "effect": "reset", "target": name, "at_s": 1.5, "duration_s": OUTAGE_S}
                          for name in names]}
    events, endpoints = run(request, provisioned, store)
    [cell] = build_results(events)["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    faults = cell_faults(events, cell["cell_id"])
    on = [a for a in faults["applied"] if a["kind"] == "network"]
    off = [a for a in faults["applied"] if a["kind"] == "heal"]
    assert sorted(n for a in on for n in a["nodes"]) == names and len(off) == 3, faults
    span = min(a["at_s"] for a in off) - max(a["at_s"] for a in on)  # every link faulty
    assert span >= OUTAGE_S - 0.5, faults  # the three faults' API calls came one after another
    for gap in (faults["producer_ack_gap"], faults["consumer_receipt_gap"]):
        assert gap is not None and gap["s"] >= span - GAP_SLACK_S and not gap.get("until_end"), faults
        assert gap["from_s"] <= max(a["at_s"] for a in on) + GAP_SLACK_S, faults
        assert gap["to_s"] >= min(a["at_s"] for a in off), faults
    assert faults["leader_at_end"] == on[0]["leader_before"] is not None, faults
    assert_accounting_whole(cell)
    assert cell["lost"] == 0
    assert_broker_holds_what_it_acknowledged(cell)
    print(f"nats@3, every link reset: {faults['producer_ack_gap']['s']:.3f} s and "
          f"{faults['consumer_receipt_gap']['s']:.3f} s without an answer, send errors {cell['send_errors']}")


def test_a_reset_of_the_nats_stream_leaders_link_alone_leaves_it_leading_and_loses_nothing(stack, provisioned, store):
    """nats@3 with only the stream leader's client link reset for 2 s (the stream info names the leader when the fault
    comes): the clients were given the proxies' URLs, and JetStream's own links between the servers are not proxied,
    so the stream info names the same leader at the end, the clients get answers again before the cell ends (when
    they were on the leader's link, they move to another server, which forwards to the leader, sooner than the fault
    ends), nothing acknowledged is lost, the stream's count holds what it acknowledged, and the accounting is
    whole."""
    request = {**BASE, "name": "it-network-nats3-leader", "brokers": ["nats-jetstream"], "drain_timeout_s": 2,
               "provision": {"nats-jetstream": {"nodes": 3}},
               "faults": [{"kind": "network", "effect": "reset", "target": "leader", "at_s": 1.5,
                           "duration_s": OUTAGE_S}]}
    events, endpoints = run(request, provisioned, store)
    [cell] = build_results(events)["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    faults = cell_faults(events, cell["cell_id"])
    fault, heal = faults["applied"]
    leader = fault["leader_before"]
    assert (fault["kind"], fault["effect"], heal["kind"]) == ("network", "reset", "heal"), faults
    assert fault["nodes"] == heal["nodes"] == [leader] and leader in {"bb-nats-1", "bb-nats-2", "bb-nats-3"}, faults
    assert heal["at_s"] - fault["at_s"] >= OUTAGE_S - GAP_SLACK_S and faults["restored_at_end"] == [], faults
    assert faults["leader_at_end"] == leader, faults  # the stream info: the server itself never failed
    for gap in (faults["producer_ack_gap"], faults["consumer_receipt_gap"]):
        assert gap is not None and not gap.get("until_end"), faults
    assert_accounting_whole(cell)
    assert cell["lost"] == 0 and cell["received"] > 0, cell
    assert_broker_holds_what_it_acknowledged(cell)
    first = int(client_endpoint(endpoints["nats-jetstream"])["url"].split(",")[0].rsplit(":", 1)[1])
    on_leader = any(link["node"] == leader and int(link["listen"]) == first
                    for link in endpoints["nats-jetstream"]["proxy"]["links"])
    print(f"nats@3, leader {leader}'s link reset (the clients' first server {'is' if on_leader else 'is not'} the "
          f"leader): producers "
          f"{faults['producer_ack_gap']['s']:.3f} s and consumers {faults['consumer_receipt_gap']['s']:.3f} s without "
          f"an answer, send errors {cell['send_errors']}, unacknowledged {cell['unacknowledged']}")
    if on_leader:  # cut, the clients moved to the next server's proxy rather than wait out the fault (0.5 s here)
        span = heal["at_s"] - fault["at_s"]
        assert all(faults[gap]["s"] < span for gap in ("producer_ack_gap", "consumer_receipt_gap")), faults


def _ports(endpoint: dict) -> list[int]:
    """Every port a client endpoint names where clients connect: NATS URLs, RabbitMQ's AMQP and stream ports (and its
    nodes')."""
    if "url" in endpoint:
        return [int(url.rsplit(":", 1)[1]) for url in endpoint["url"].split(",")]
    nodes = endpoint.get("nodes") or []
    return [endpoint["amqp_port"], endpoint["stream_port"], *(n[k] for n in nodes for k in ("port", "stream_port")),
            *endpoint["stream_addresses"].values()]


def test_a_latency_fault_raises_the_phase_during_it_by_the_proxys_delay(stack, provisioned, store):
    request = {**BASE, "name": "it-network-latency", "brokers": ["redis-streams"], "duration_s": 6,
               "faults": [{"kind": "network", "effect": "latency", "direction": "upstream",
                           "latency_ms": LATENCY_MS, "at_s": 2, "duration_s": 2.9}]}
    events, endpoints = run(request, provisioned, store)
    [cell] = build_results(events)["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    faults = cell_faults(events, cell["cell_id"])
    phases = faults["phases"]
    before, during = (phases[p]["publish_latency_us"]["p50"] for p in ("before", "during"))
    assert during >= LATENCY_MS * 1000 * (1 - RESOLUTION), phases  # every delayed XADD waited the delay
    e2e = [phases[p]["end_to_end_latency_us"]["p50"] for p in ("before", "during")]
    assert e2e[1] >= LATENCY_MS * 1000 * (1 - RESOLUTION), phases
    if not cell_host(events)["busy"]:
        assert during - before >= (LATENCY_MS - TOLERANCE_MS) * 1000, phases
        assert e2e[1] - e2e[0] >= (LATENCY_MS - TOLERANCE_MS) * 1000, phases
    assert cell["sent"] == sum(cell[k] for k in CLASSES) and cell["lost"] == 0, cell


def test_a_bandwidth_fault_lets_no_more_through_than_its_rate_allows(stack, provisioned, store):
    """RATE_KBPS upstream on Redis for 3.5 s (from 1 s): every XADD carries PAYLOAD bytes and more up the link, and
    Toxiproxy passes a connection's bytes at the rate on average (it holds each chunk for its size at the rate and
    takes any timer's overshoot off the next chunk's wait, so that it only catches up to the rate, never beyond).
    The acknowledgements of the whole seconds 2 to 4 (the intervals the fault covers from its second second on, the
    last closing at least 0.5 s before the heal however late the producer's clock ticks) are then bounded by the
    rate over those seconds and that slack, plus one chunk Toxiproxy may have had in hand: an upper bound a loaded
    host cannot break (load only slows the link). One producer: the rate is per connection. The lower bound, the link
    carrying at least half its rate, is judged only where the cell's host record says the machine was not busy."""
    request = {**BASE, "name": "it-network-bandwidth", "brokers": ["redis-streams"], "sizes": [PAYLOAD],
               "drain_timeout_s": 5,
               "faults": [{"kind": "network", "effect": "bandwidth", "rate_kbps": RATE_KBPS, "direction": "upstream",
                           "at_s": 1, "duration_s": 3.5}]}
    events, endpoints = run(request, provisioned, store)
    [cell] = build_results(events)["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    faults = cell_faults(events, cell["cell_id"])
    fault, heal = faults["applied"]
    assert fault["at_s"] <= WINDOW[0] and heal["at_s"] >= WINDOW[1] + INTERVAL_LAG_S, faults
    acked = {e["data"]["interval"]: e["data"]["counters"]["acked"] for e in events if e["type"] == "IntervalMeasured"}
    during = sum(acked[i] for i in range(*WINDOW))
    rate = RATE_KBPS * 1000  # Toxiproxy's KB/s, bytes
    most = (rate * (WINDOW[1] - WINDOW[0] + INTERVAL_LAG_S) + TOXIPROXY_CHUNK) / PAYLOAD
    offered = BASE["rates"][0] * (WINDOW[1] - WINDOW[0])
    print(f"bandwidth {RATE_KBPS} KB/s: {during} acknowledged in seconds {WINDOW[0]} to {WINDOW[1]} (at most "
          f"{most:.1f}; {offered} offered), per second {acked}, host busy {cell_host(events)['busy']}")
    assert during <= most, (during, most, acked)
    if not cell_host(events)["busy"]:
        assert during >= rate * (WINDOW[1] - WINDOW[0]) / 2 / (PAYLOAD + WIRE_OVERHEAD), (during, acked)
    assert_accounting_whole(cell)
    assert cell["lost"] == 0 and cell["received"] > 0, cell
    proxy = endpoints["redis-streams"]["proxy"]
    assert all(ToxiproxyClient(proxy["api_port"]).toxics(link["name"]) == {} for link in proxy["links"])


def cell_host(events: list[dict]) -> dict:
    [machine] = [e["data"]["host"] for e in events if e["type"] == "CellCompleted"]
    return machine


def test_the_runs_toxiproxy_stops_at_its_teardown(stack, store):
    request = {**BASE, "name": "it-network-teardown", "brokers": ["redis-streams"],
               "faults": [{"kind": "network", "effect": "reset", "at_s": 1, "duration_s": 1}]}
    spec, run_id = validate(request), new_run_id()
    targets = LocalTargets(stack)
    endpoint = targets.provision(run_id, "redis-streams", spec)["endpoint"]
    client = ToxiproxyClient(endpoint["proxy"]["api_port"], timeout_s=2)
    assert [link["name"] for link in endpoint["proxy"]["links"]] == list(client.proxies())
    assert targets.teardown(run_id, "redis-streams", spec)["state"]
    with pytest.raises(ToxiproxyError):
        client.proxies()
    assert stack.status()["redis"]["state"] == "running"  # the session's Redis: not the run's to stop
