"""A local 3-node RabbitMQ cluster (`rabbitmq@3`) and the broker's own view of it. A cell's quorum queue and stream are
declared through the drivers with a member on every node; the node that leads them is killed with SIGKILL after
300 confirmed publishes each; the management API names another leader within a bounded time; the killed node is
started again on its own ports and data and the broker lists it as running again. Then what RabbitMQ promises for a
confirm: every confirmed message is still there, counted by sequence through the drivers' consumers and by the
broker's own counts. Both send loops (native and Python) then publish to the queue and the stream wherever they now
lead (the native stream loop must find the stream's new leader).

Then faults of a run's own, inside measured cells on the same cluster: the quorum queue's leader paused, and the
stream's leader killed and started again while the cell's stream producer and consumer follow it, and the stream
leader's client links reset through Toxiproxy (a network fault) while the node itself goes on leading."""

import contextlib
import os
import signal
import time

import pytest
from fault_tools import assert_accounting_whole, cell_facts, one_fault_cell, working_in
from native_sends import send_all

from brokerbench import spec
from brokerbench.brokers.rabbitmq import amqp, cluster, management
from brokerbench.brokers.rabbitmq import faults as fault_hooks
from brokerbench.brokers.rabbitmq.amqp import lane_queue
from brokerbench.local.processes import stop
from brokerbench.local.proxies import route, unroute
from brokerbench.local.stack import LocalStack
from brokerbench.registry import get_driver
from brokerbench.worker.framing import HEADER

CLIENT = spec.validate({"brokers": ["rabbitmq-quorum"], "sizes": [256], "rates": [100], "formats": ["raw"],
                        "client": {"rabbitmq_in_flight": 50}})["client"]
PRODUCER = 7
PAYLOAD = b"p" * 200
SENT = 300  # confirmed before the kill, per queue and stream
MORE = 100  # per loop after the killed node is back
ELECTION_S = 30.0  # a new leader within this (Ra elects in about a second once the node's connections close)
REJOIN_S = 60.0  # the killed node's start and rejoin (about as long as a node's first start)


@pytest.fixture(scope="module")
def rabbit3(tmp_path_factory):
    """The cluster's endpoint, on a stack of its own, stopped at the end (also on failure) with any node the test
    started again (the stack records only the pids it started). Killed, not stopped: a node's clean stop takes about
    6 s here, one after another, and the cluster's data goes with it anyway."""
    local_stack = LocalStack(tmp_path_factory.mktemp("rabbitmq3"))
    restarted: list[int] = []
    try:
        began = time.monotonic()
        local_stack.up(services=["rabbitmq@3"], log=lambda m: None)
        print(f"rabbitmq@3 ready in {time.monotonic() - began:.1f} s")
        yield local_stack.endpoint("rabbitmq@3"), restarted
    finally:  # a node a run's fault started again is known only to that run's worker: found by its folder
        recorded = [*local_stack.status().get("rabbitmq@3", {}).get("pids", []), *restarted]
        for pid in dict.fromkeys([*recorded, *working_in(local_stack.state_dir)]):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # a process that leads no group of its own
            stop(pid)  # reaped
        local_stack.down(log=lambda m: None)


def publish(driver, topic: str, seqs: range) -> list[int]:
    """Publish `seqs` through the driver's Python producer (batch mode) and wait for every confirm: those confirmed."""
    confirmed, failed = [], []

    def on_ack(header: bytes, ok: bool, _at: int) -> None:
        (confirmed if ok else failed).append(HEADER.unpack(header)[1])

    producer = driver.producer(topic, 1, "batch", on_ack)
    for seq in seqs:
        producer.send(HEADER.pack(PRODUCER, seq, 0), PAYLOAD, 0)
    assert producer.flush(30) == 0
    producer.close()
    assert failed == [] and sorted(confirmed) == list(seqs)
    return confirmed


def publish_native(driver, topic: str, seqs: range) -> list[int]:
    """The same through the native send loop's own connection."""
    sender = driver.native_sender(topic, 1, "batch")
    sender.configure([PAYLOAD], None, PRODUCER, time.monotonic_ns(), 0.0)
    _, acked, _, failed = send_all(sender, len(seqs), seqs.start)
    sender.close()
    assert failed.size == 0 and sorted(acked.tolist()) == list(seqs)
    return acked.tolist()


def read_all(driver, topic: str, expected: int) -> list[int]:
    """Every message's sequence number, read through the driver's consumer until `expected` came (30 s at most),
    then half a second more: any beyond would be duplicates."""
    consumer = driver.consumer(topic, f"{topic}-group", [0])
    consumer.hold(False)
    seqs: list[int] = []
    deadline = time.monotonic() + 30
    while len(seqs) < expected and time.monotonic() < deadline:
        seqs += [HEADER.unpack(header)[1] for header, _, _ in consumer.poll(0.2)]
    seqs += [HEADER.unpack(header)[1] for header, _, _ in consumer.poll(0.5)]
    consumer.close()
    return seqs


def test_a_killed_leader_is_replaced_rejoins_and_every_confirmed_message_is_kept(rabbit3):
    endpoint, restarted = rabbit3
    names = sorted(node["node"] for node in endpoint["nodes"])
    assert len(names) == 3 and sorted(management.running_nodes(endpoint)) == names
    quorum, streams = get_driver("rabbitmq-quorum", endpoint, CLIENT), get_driver("rabbitmq-streams", endpoint, CLIENT)
    topic = f"bb-cluster-{time.monotonic_ns()}"
    queue_topic, stream_topic = f"{topic}-q", f"{topic}-s"
    queue, stream = lane_queue(queue_topic, 0), lane_queue(stream_topic, 0)
    quorum.create_topic(queue_topic, 1)
    streams.create_topic(stream_topic, 1)
    # Replicated to every node, as the broker says.
    for name in (queue, stream):
        deadline = time.monotonic() + 15
        while (held := cluster.members(endpoint, name)) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert held == names, (name, held)
    assert quorum.describe()["nodes"] == streams.describe()["nodes"] == 3

    confirmed = {queue: publish(quorum, queue_topic, range(SENT)), stream: publish(streams, stream_topic, range(SENT))}

    # Both were declared over one connection to the endpoint's node: RabbitMQ places their leaders there.
    leader = cluster.leader(endpoint, queue)
    assert leader in names and cluster.leader(endpoint, stream) == leader
    killed = cluster.node_entry(endpoint, leader)
    for pid in killed["pids"]:
        os.kill(pid, signal.SIGKILL)
    began = time.monotonic()
    moved = {name: cluster.wait_for_leader(endpoint, name, ELECTION_S, other_than=leader) for name in (queue, stream)}
    elected_s = time.monotonic() - began
    assert all(node in names and node != leader for node in moved.values()), (leader, moved)
    assert leader not in management.running_nodes(endpoint)  # the broker's own view of the kill

    restarted += fault_hooks.start_node(endpoint, leader)  # recorded in the endpoint: a later fault signals its pids
    deadline = time.monotonic() + REJOIN_S
    while not cluster.rejoined(endpoint, leader) and time.monotonic() < deadline:
        time.sleep(0.2)
    rejoined_s = time.monotonic() - began - elected_s
    assert sorted(management.running_nodes(endpoint)) == names, f"{leader} did not rejoin in {REJOIN_S} s"
    print(f"leader {leader} killed: {moved} elected in {elected_s:.1f} s; it rejoined {rejoined_s:.1f} s later")
    assert cluster.leader(endpoint, stream) == moved[stream]  # a node that comes back does not take the lead back

    # Both loops publish wherever the queue and the stream now lead.
    for driver, topic_of, name in ((quorum, queue_topic, queue), (streams, stream_topic, stream)):
        confirmed[name] += publish_native(driver, topic_of, range(SENT, SENT + MORE))
        confirmed[name] += publish(driver, topic_of, range(SENT + MORE, SENT + 2 * MORE))

    # Every confirmed message, once: the broker's counts (a quorum queue's ready messages, a stream read through),
    # then each read by sequence through the drivers' consumers.
    assert amqp.counts(endpoint, queue_topic, 1) == [len(confirmed[queue])]
    assert streams.message_count(stream_topic, 1) == len(confirmed[stream])
    for driver, topic_of, name in ((quorum, queue_topic, queue), (streams, stream_topic, stream)):
        read = read_all(driver, topic_of, len(confirmed[name]))
        assert len(read) == len(set(read)) and sorted(read) == sorted(confirmed[name]), (name, len(read))
    streams.close()
    quorum.delete_topic(queue_topic, 1)
    streams.delete_topic(stream_topic, 1)


PAUSE = {"at_s": 1.5, "duration_s": 4.0}  # the leader stopped (SIGSTOP) for 4 s, then resumed (SIGCONT)


def test_a_paused_leader_holds_its_quorum_queue_for_the_pause_and_every_confirmed_message_is_kept(rabbit3, endpoints,
                                                                                                 store):
    """A run's own fault: the node that leads the cell's quorum queue (the management API's `leader`) is paused for
    4 s inside the measured window. Its connections stay open and nothing on it answers: the cell's producer and
    consumer, connected to that node (the queue was declared there), get no confirm and no delivery until it
    resumes, so the unavailability window covers the pause whether or not the other members elected a leader
    meanwhile. What the broker says at the end is stored and checked against the node paused; no confirmed message is
    lost, the queue's own counts agree, and the accounting is whole."""
    endpoint, _ = rabbit3
    request = {"name": "it-rabbit3-pause", "brokers": ["rabbitmq-quorum"], "sizes": [1024], "rates": [200],
               "formats": ["raw"], "modes": ["batch"], "partitions": 1, "duration_s": 7, "warmup_s": 0.5,
               "warmup_until_steady": False, "drain_timeout_s": 10, "provision": {"rabbitmq-quorum": {"nodes": 3}},
               "faults": [{"kind": "pause", "target": "leader", **PAUSE}]}
    cell, _ = one_fault_cell(request, endpoint, endpoints, store)
    faults = cell["faults"]
    pause, resume = faults["applied"]
    paused = pause["leader_before"]
    assert (pause["kind"], resume["kind"]) == ("pause", "resume") and pause["nodes"] == resume["nodes"] == [paused]
    assert paused in {node["node"] for node in endpoint["nodes"]}, faults
    assert resume["at_s"] - pause["at_s"] >= PAUSE["duration_s"], faults
    assert faults["cluster_whole_at_end"] and faults["restored_at_end"] == [], faults
    # the broker's own view at the end: a leader, among the members that run (the paused one or a new one)
    assert faults["leader_at_end"] in {node["node"] for node in endpoint["nodes"]}, faults
    assert sorted(management.running_nodes(endpoint)) == sorted(node["node"] for node in endpoint["nodes"])
    # Nothing confirmed or delivered while the node the clients use was stopped: each gap spans the pause (a
    # confirm or delivery already on its way when the signal came may still be read just after it)
    for gap in (faults["producer_ack_gap"], faults["consumer_receipt_gap"]):
        assert gap["from_s"] <= pause["at_s"] + 0.1 and gap["to_s"] >= resume["at_s"], faults
    assert cell["lost"] == 0 and cell["received"] > 0, cell_facts(cell)
    assert cell["broker_count"]["observed"] == cell["broker_count"]["expected"], cell["broker_count"]
    assert_accounting_whole(cell)


def test_a_stream_leader_killed_mid_cell_is_followed_by_producer_and_consumer_and_nothing_is_lost_or_read_twice(
        rabbit3, endpoints, store):
    """RabbitMQ streams under a run's own fault: the node that leads the cell's stream (the management API's view)
    is killed 1.5 s into the measured window and started again at 3.5 s. The cell's producer connects again through a
    node that answers and publishes to the stream's new leader; its consumer subscribes again from the offset after
    the last one delivered. So no confirmed message is lost, none is delivered twice, the stream's own count
    agrees with what the producers were told was stored, and the accounting is whole."""
    endpoint, _ = rabbit3
    request = {"name": "it-rabbit3-streams-kill", "brokers": ["rabbitmq-streams"], "sizes": [1024], "rates": [200],
               "formats": ["raw"], "modes": ["batch"], "partitions": 1, "duration_s": 6, "warmup_s": 0.5,
               "warmup_until_steady": False, "drain_timeout_s": 10, "provision": {"rabbitmq-streams": {"nodes": 3}},
               "faults": [{"kind": "kill", "target": "leader", "at_s": 1.5}, {"kind": "restart", "at_s": 3.5}]}
    cell, events = one_fault_cell(request, endpoint, endpoints, store)
    faults = cell["faults"]
    kill, restart = faults["applied"]
    killed = kill["leader_before"]
    assert kill["kind"] == "kill" and kill["nodes"] == [killed] and restart["nodes"] == [killed], faults
    assert killed in {node["node"] for node in endpoint["nodes"]}, faults
    assert faults["leader_at_end"] not in (None, killed), faults  # the management API: another node leads
    assert faults["cluster_whole_at_end"] and faults["restored_at_end"] == [], faults
    assert {e["data"]["send_loop"] for e in events if e["type"] == "CellCompleted"} == {"python"}
    # acknowledgements and deliveries came again after the kill: both clients moved
    for gap in (faults["producer_ack_gap"], faults["consumer_receipt_gap"]):
        assert gap is not None and not gap.get("until_end"), faults
    assert cell["lost"] == cell["duplicated"] == 0 and cell["received"] > 0, cell_facts(cell)
    assert cell["broker_count"]["observed"] == cell["broker_count"]["expected"], cell["broker_count"]
    assert_accounting_whole(cell)


def test_a_reset_of_the_stream_leaders_links_stops_its_confirms_and_leaves_it_leading(rabbit3, endpoints, store,
                                                                                       toxiproxy):
    """A network fault on the cluster: the cell's clients reach every node through a proxy per listener (the
    endpoint routed as a run with network faults routes it), and the stream leader's links (its AMQP and stream
    proxies) are reset for 2 s. The producer publishes to the leader alone, connecting to the proxy in front of the
    address the leader advertises: no confirm comes while the toxics are on. The nodes' own links are not proxied,
    so the management API names the same leader at the end, and nothing confirmed is lost."""
    endpoint, _ = rabbit3
    routed = route(endpoint, "rabbitmq@3", toxiproxy.port)
    request = {"name": "it-rabbit3-streams-reset", "brokers": ["rabbitmq-streams"], "sizes": [1024], "rates": [200],
               "formats": ["raw"], "modes": ["batch"], "partitions": 1, "duration_s": 5, "warmup_s": 0.5,
               "warmup_until_steady": False, "drain_timeout_s": 2, "provision": {"rabbitmq-streams": {"nodes": 3}},
               "faults": [{"kind": "network", "effect": "reset", "target": "leader", "at_s": 1.5, "duration_s": 2}]}
    try:
        cell, events = one_fault_cell(request, routed, endpoints, store)
    finally:
        unroute(endpoint, "rabbitmq@3", toxiproxy.port)
    faults = cell["faults"]
    fault, heal = faults["applied"]
    leader = fault["leader_before"]
    assert fault["nodes"] == heal["nodes"] == [leader] and len(fault["proxies"]) == 2, faults  # AMQP and stream
    assert faults["leader_at_end"] == leader, faults  # the node itself never failed
    gap = faults["producer_ack_gap"]
    assert gap["from_s"] <= fault["at_s"] + 0.05 and gap["to_s"] >= heal["at_s"], faults
    assert cell["lost"] == 0 and cell["received"] > 0, cell_facts(cell)
    assert cell["broker_count"]["observed"] == cell["broker_count"]["expected"], cell["broker_count"]
    assert_accounting_whole(cell)
