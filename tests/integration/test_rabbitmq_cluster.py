"""A local 3-node RabbitMQ cluster (`rabbitmq@3`) under faults of a run's own, inside measured cells, with the broker's
own view as the truth: the management API's leader of the cell's queue or stream, and its list of running nodes.

The guarantees suite's own quorum-queue run kills the queue's leader and starts it again: the management API names
another leader and lists the node as running again, and no confirmed message is lost. Then the quorum queue's leader
paused, the stream's leader killed and started again while the cell's stream producer and consumer follow it, the
stream leader's client links reset through Toxiproxy (a network fault) while the node itself goes on leading, and the
quorum queue leader's client links blackholed. The streams cells' producer and consumer follow on sockets of their
own (stamped at arrival), and streams that lead on two nodes get a producer connection each."""

import contextlib
import os
import signal
import time

import pytest
from fault_tools import assert_accounting_whole, cell_facts, one_fault_cell, working_in
from study_scale import suite_run

from brokerbench.brokers.rabbitmq import amqp, cluster, management
from brokerbench.brokers.rabbitmq import faults as rabbitmq_faults
from brokerbench.brokers.rabbitmq.amqp import lane_queue
from brokerbench.brokers.rabbitmq_quorum.driver import HEADER_SIZE, RabbitMQQuorumDriver
from brokerbench.brokers.rabbitmq_streams.driver import RabbitMQStreamsDriver
from brokerbench.figures import ARRIVAL
from brokerbench.local.processes import stop
from brokerbench.local.proxies import route, unroute
from brokerbench.local.stack import LocalStack
from brokerbench.reports.model import build_report

SUITE_SCALE = 0.15  # the guarantees suite's 40 s cell in 6 s, its faults at the same places (study_scale.suite_run)
# The publishes a kill left unconfirmed never reach the queue: the suite's 30 s drain would wait that long for them
QUORUM_DRAIN_S = 2


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


def test_the_suites_quorum_queue_leader_kill_moves_the_leader_and_keeps_every_confirmed_message(rabbit3, endpoints,
                                                                                                 store):
    """The guarantees suite's own RabbitMQ run (its run request at the scale that makes its 40 s cell 6 s: quorum
    queues, 1 KB at 1,000 msgs/s; the drain's wait cut to QUORUM_DRAIN_S) on the cluster: the node that leads the
    cell's quorum queue, as the management API names it, is killed (SIGKILL) 1.5 s into the measured window and
    started again 2.25 s later. The management API names another leader at the end and lists the killed node as
    running again; the consumer, whose node died, connects to another and is delivered again (what it had received
    unacknowledged comes again: duplicates, as at-least-once delivery allows); no confirmed message is lost, every
    message sent is in one class of the accounting, and the report's Guarantees row says "held".

    The producer connects again to another node within a fraction of a second; RabbitMQ 3.10 refuses (basic.nack)
    every publish on a channel that first published while the queue's record still named the dead leader, until that
    node is back (rabbitmq_quorum.driver), so the producer replaces a refused channel: its confirms come again while
    the killed node is still down, not only once it runs again. The refusals are send errors. The queue's publish
    counter lives in its node's memory, so no broker count is given for a cell its node restarted in."""
    endpoint, _ = rabbit3
    names = sorted(node["node"] for node in endpoint["nodes"])
    assert len(names) == 3 and sorted(management.running_nodes(endpoint)) == names
    request = {**suite_run("guarantees", "guarantees-rabbitmq-quorum", SUITE_SCALE), "drain_timeout_s": QUORUM_DRAIN_S}
    assert [f["kind"] for f in request["faults"]] == ["kill", "restart"] and request["duration_s"] == 6, request
    cell, events = one_fault_cell(request, endpoint, endpoints, store)
    faults = cell["faults"]
    kill, restart = faults["applied"]
    killed = kill["leader_before"]
    assert kill["kind"] == "kill" and kill["nodes"] == restart["nodes"] == [killed] and killed in names, faults
    assert kill["planned_s"] <= kill["at_s"] < restart["at_s"], faults
    assert faults["leader_at_end"] in set(names) - {killed}, faults  # the management API: another node leads
    assert faults["cluster_whole_at_end"] and faults["restored_at_end"] == [], faults
    assert sorted(management.running_nodes(endpoint)) == names  # the killed node runs again, as the broker says
    produced, consumed = faults["producer_ack_gap"], faults["consumer_receipt_gap"]
    assert produced is not None and produced["from_s"] >= kill["planned_s"], faults
    assert consumed is not None and not consumed["until_end"], faults
    # While the killed node was down (the stored 1 s intervals that begin after the kill and before the restart: a
    # node started again boots for seconds before it serves anything), the new leader confirmed publishes and the
    # consumer, moved to another node, was delivered
    down = [e["data"]["counters"] for e in events if e["type"] == "IntervalMeasured"
            and kill["at_s"] <= e["data"]["interval"] < restart["at_s"]]
    assert down and sum(c["acked"] for c in down) > 0 and sum(c["received"] for c in down) > 0, (down, faults)
    print(f"killed {killed}: {faults['leader_at_end']} leads; producers without a confirm {produced['s']:.1f} s"
          f"{' (to the end)' if produced.get('until_end') else ''}, {cell['send_errors']} publishes refused; "
          f"duplicates {cell['duplicated']}; broker count {cell['broker_count']}")
    assert cell["lost"] == 0 and cell["acked"] > 0 and cell["received"] > 0, cell_facts(cell)
    assert_accounting_whole(cell)
    [row] = build_report(events)["guarantees"]
    assert row["guarantee"]["held"] and row["guarantee"]["acknowledged"] == cell["acked"], row


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
    assert_stamped_at_arrival(cell)


TWO_LEADERS_MESSAGES = 400


def test_streams_that_lead_on_two_nodes_get_a_producer_connection_each_and_the_consumer_reads_both(rabbit3):
    """A cell's two streams declared through different nodes (a stream leads where it was declared: client-local),
    so they lead on two nodes. The producer, which asks the stream protocol's Metadata where each leads, publishes on
    a connection to each of the two leaders (a stream's leader alone writes), every publish confirmed
    and stamped at arrival; the consumer reads both streams on one connection, every message once, on its lane."""
    endpoint, _ = rabbit3
    driver = RabbitMQStreamsDriver(endpoint, {"rabbitmq_in_flight": 100, "rabbitmq_prefetch": 10})
    topic = f"it-two-leaders-{os.getpid()}"
    streams = [lane_queue(topic, lane) for lane in range(2)]
    driver.create_topic(topic, 2)
    try:
        first = cluster.wait_for_leader(endpoint, streams[0], 10)
        other = next(node for node in endpoint["nodes"] if node["node"] != first)
        connection = amqp.connect({**endpoint, "host": other["host"], "amqp_port": other["port"], "nodes": None})
        try:
            channel = connection.channel()
            channel.queue_delete(streams[1])
            amqp.declare(channel, streams[1], "stream")
        finally:
            connection.close()
        leaders = [cluster.wait_for_leader(endpoint, stream, 10) for stream in streams]
        assert leaders == [first, other["node"]], leaders
        answers: list[tuple[bytes, bool]] = []
        producer = driver.producer(topic, 2, "batch", lambda header, ok, _at: answers.append((header, ok)))
        assert producer.stamps == ARRIVAL
        peers = {connection.sock.getpeername()[1] for connection in producer._links}
        assert peers == {int(cluster.node_entry(endpoint, node)["stream_port"]) for node in leaders}, peers
        headers = [n.to_bytes(HEADER_SIZE, "big") for n in range(TWO_LEADERS_MESSAGES)]
        for n, header in enumerate(headers):
            producer.send(header, b"x" * 100, n % 2)
        assert producer.flush(10) == 0
        producer.close()
        assert sorted(answers) == [(header, True) for header in headers], answers[:5]
        consumer = driver.consumer(topic, "it-two-leaders", [0, 1])
        assert consumer.stamps == ARRIVAL
        got: list = []
        deadline = time.monotonic() + 20
        while len(got) < TWO_LEADERS_MESSAGES and time.monotonic() < deadline:
            got += consumer.poll(0.2)
        consumer.close()
        assert sorted((header, lane) for header, _, lane in got) == \
            sorted((header, n % 2) for n, header in enumerate(headers)), len(got)
    finally:
        driver.delete_topic(topic, 2)


def assert_stamped_at_arrival(cell: dict) -> None:
    """The streams cell's producer and consumer followed the failover on sockets of their own (rabbitmq_streams.driver
    StreamsWireProducer, StreamsWireConsumer): every confirm and delivery stamped at the kernel's receive time."""
    assert (cell["ack_stamps"], cell["delivery_stamps"]) == (ARRIVAL, ARRIVAL), cell


def routed_fault_cell(endpoint: dict, toxiproxy, endpoints: dict, store, broker: str, name: str, fault: dict) -> dict:
    """One 5 s cell of `broker` at 200 msgs/s under a network `fault`, its clients reaching every node through a proxy
    per listener (the endpoint routed as a run with network faults routes it), the proxies taken away after; the
    drain waits 2 s (publishes a fault cut off never reach the node, and a longer drain would only wait for them)."""
    routed = route(endpoint, "rabbitmq@3", toxiproxy.port)
    request = {"name": name, "brokers": [broker], "sizes": [1024], "rates": [200], "formats": ["raw"],
               "modes": ["batch"], "partitions": 1, "duration_s": 5, "warmup_s": 0.5, "warmup_until_steady": False,
               "drain_timeout_s": 2, "provision": {broker: {"nodes": 3}}, "faults": [fault]}
    try:
        cell, _ = one_fault_cell(request, routed, endpoints, store)
    finally:
        unroute(endpoint, "rabbitmq@3", toxiproxy.port)
    return cell


def test_a_reset_of_the_stream_leaders_links_stops_its_confirms_and_leaves_it_leading(rabbit3, endpoints, store,
                                                                                       toxiproxy):
    """A network fault on the cluster: the cell's clients reach every node through a proxy per listener (the
    endpoint routed as a run with network faults routes it), and the stream leader's links (its AMQP and stream
    proxies) are reset for 2 s. The producer publishes to the leader alone, connecting to the proxy in front of the
    address the leader advertises: no confirm comes while the toxics are on. The nodes' own links are not proxied,
    so the management API names the same leader at the end, and nothing confirmed is lost."""
    cell = routed_fault_cell(rabbit3[0], toxiproxy, endpoints, store, "rabbitmq-streams", "it-rabbit3-streams-reset",
                             {"kind": "network", "effect": "reset", "target": "leader", "at_s": 1.5, "duration_s": 2})
    faults = cell["faults"]
    fault, heal = faults["applied"]
    leader = fault["leader_before"]
    assert fault["nodes"] == heal["nodes"] == [leader] and len(fault["proxies"]) == 2, faults  # AMQP and stream
    assert faults["leader_at_end"] == leader, faults  # the node itself never failed
    gap = faults["producer_ack_gap"]
    assert gap["from_s"] <= fault["at_s"] + 0.05 and gap["to_s"] >= heal["at_s"], faults
    assert cell["lost"] == cell["duplicated"] == 0 and cell["received"] > 0, cell_facts(cell)
    assert cell["broker_count"]["observed"] == cell["broker_count"]["expected"], cell["broker_count"]
    assert_accounting_whole(cell)
    assert_stamped_at_arrival(cell)


BLACKHOLE_S = 2.0  # the quorum queue leader's links dropping everything
GAP_SLACK_S = 0.05  # what Toxiproxy had in hand when the toxic came (test_network_faults.py)


def test_a_blackhole_of_the_quorum_leaders_links_holds_its_clients_for_the_fault_and_loses_nothing(
        rabbit3, endpoints, store, toxiproxy):
    """A network fault on the cluster's quorum queues: the cell's clients reach every node through a proxy per
    listener, and every byte between them and the node that leads the cell's queue (its AMQP and stream proxies) is
    dropped for BLACKHOLE_S (Toxiproxy's timeout toxic: connections stay open, nothing crosses, nothing is closed, so
    the clients do not move to another node). The cell's producer and consumer, connected to that node (the queue was
    declared there), then get no confirm and no delivery for at least the fault's span; the nodes' own links are not
    proxied, so the management API names the same leader at the end. No confirmed message is lost, the queue's own
    count agrees, and the accounting is whole. (A blackhole drops what it is handed: the publishes sent into it never
    reach the node and stay unacknowledged, and so do the consumer's acknowledgements sent into it: RabbitMQ gives
    those deliveries again once their channel is closed, so duplicates are counted, not ruled out: at-least-once
    delivery, 5 in one CI run.)"""
    cell = routed_fault_cell(rabbit3[0], toxiproxy, endpoints, store, "rabbitmq-quorum", "it-rabbit3-quorum-blackhole",
                             {"kind": "network", "effect": "blackhole", "target": "leader", "at_s": 1.5,
                              "duration_s": BLACKHOLE_S})
    faults = cell["faults"]
    fault, heal = faults["applied"]
    leader = fault["leader_before"]
    assert (fault["kind"], fault["effect"], heal["kind"]) == ("network", "blackhole", "heal"), faults
    assert fault["nodes"] == heal["nodes"] == [leader] and len(fault["proxies"]) == 2, faults  # AMQP and stream
    assert faults["leader_at_end"] == leader and faults["restored_at_end"] == [], faults  # the node never failed
    span = heal["at_s"] - fault["at_s"]
    assert span >= BLACKHOLE_S - GAP_SLACK_S, faults
    for gap in (faults["producer_ack_gap"], faults["consumer_receipt_gap"]):
        assert gap["s"] >= span - GAP_SLACK_S and not gap.get("until_end"), faults
        assert gap["from_s"] <= fault["at_s"] + GAP_SLACK_S and gap["to_s"] >= heal["at_s"], faults
    assert cell["lost"] == 0 and cell["received"] > 0, cell_facts(cell)
    assert cell["broker_count"]["observed"] == cell["broker_count"]["expected"], cell["broker_count"]
    assert_accounting_whole(cell)


REFUSED_PUBLISHES = 20  # published while the queue has no leader, each refused (basic.nack)
CONFIRMED_WITHIN_S = 5.0  # after the management API names the new leader, the bound for the producer's first confirm


def test_a_producer_refused_before_the_new_leader_is_recorded_is_confirmed_once_it_is(rabbit3):
    """RabbitMQ 3.10 refuses every publish on a channel whose first publish to a quorum queue came while the queue's
    record still named its dead leader, until that node runs again (rabbitmq_quorum.driver); the driver's producer
    replaces a refused channel. Made certain here rather than left to a race: one follower is paused (SIGSTOP) and
    the leader killed, so that no election can end while the cell's producer, connected to the other follower,
    publishes: each publish is refused. The paused follower is resumed: once the management API names a new leader,
    the producer's publishes are confirmed within CONFIRMED_WITHIN_S while the old leader is still down. Every publish
    is either confirmed, refused or left unconfirmed (counted). The old leader is started again at the end."""
    endpoint, restarted = rabbit3
    driver = RabbitMQQuorumDriver(endpoint, {"rabbitmq_in_flight": 100, "rabbitmq_prefetch": 100})
    topic = f"it-refused-{os.getpid()}"
    driver.create_topic(topic, 1)
    queue = lane_queue(topic, 0)
    leader = cluster.wait_for_leader(endpoint, queue, 10)
    pids = management.node_pids(endpoint)
    assert leader is not None and pids is not None and len(pids) == 3, (leader, pids)
    connected, paused = (n for n in endpoint["nodes"] if n["node"] != leader)
    answers: list[bool] = []
    sent = 0
    os.kill(int(pids[paused["node"]]), signal.SIGSTOP)
    try:
        os.kill(int(pids[leader]), signal.SIGKILL)
        # the producer on the follower that runs: its endpoint's own address first, the others after it
        producer = RabbitMQQuorumDriver({**endpoint, "amqp_port": connected["port"]}, driver.client).producer(
            topic, 1, "batch", lambda _header, ok, _at: answers.append(ok))
        while sent < REFUSED_PUBLISHES:
            producer.send(sent.to_bytes(HEADER_SIZE, "big"), b"x" * 100, 0)
            sent += 1
            producer.flush(2.0)
        assert answers == [False] * REFUSED_PUBLISHES, answers  # no leader: every publish refused
    finally:
        os.kill(int(pids[paused["node"]]), signal.SIGCONT)
    try:
        assert cluster.wait_for_leader(endpoint, queue, 30, other_than=leader) is not None
        deadline = time.monotonic() + CONFIRMED_WITHIN_S
        while True not in answers and time.monotonic() < deadline:
            producer.send(sent.to_bytes(HEADER_SIZE, "big"), b"x" * 100, 0)
            sent += 1
            producer.poll(0.01)
        unconfirmed = producer.flush(2.0)
        assert True in answers, f"{len(answers)} publishes refused after the new leader was named, none confirmed"
        assert len(answers) + unconfirmed == sent, (len(answers), unconfirmed, sent)
        print(f"{REFUSED_PUBLISHES} refused without a leader; then {answers.count(False) - REFUSED_PUBLISHES} refused "
              f"and {answers.count(True)} confirmed of {sent - REFUSED_PUBLISHES}")
        producer.close()
    finally:  # the cluster whole again for the module's other tests
        restarted.extend(rabbitmq_faults.start_node(endpoint, leader))  # recorded in the stack, as a fault's restart
        deadline = time.monotonic() + 90
        while not cluster.rejoined(endpoint, leader) and time.monotonic() < deadline:
            time.sleep(0.5)
        driver.delete_topic(topic, 1)
    assert cluster.rejoined(endpoint, leader)
