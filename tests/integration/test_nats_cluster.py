"""A 3-server NATS JetStream cluster on this host (nats@3): cells on it on both send loops with their streams
replicated to every server, and a killed stream leader replaced, started again and caught up, with every
acknowledged message kept. The cluster's own view is the truth checked: the stream info's leader and replicas
(the JetStream API), the stream's message count, and a consumer reading the stream back by sequence."""

import os
import signal
import time
from pathlib import Path

import pytest

from brokerbench import spec
from brokerbench.brokers.nats_jetstream import cluster
from brokerbench.brokers.nats_jetstream.driver import NatsJetStreamDriver, _connect, admin_loop
from brokerbench.local.processes import stop
from brokerbench.local.stack import LocalStack
from brokerbench.reports.results import build_results
from brokerbench.worker.framing import unpack_many
from inline_run import execute_run
from fault_tools import assert_accounting_whole
from native_sends import send_all
from study_scale import suite_run
from test_loopback import listening

TINY = {"brokers": ["nats-jetstream"], "sizes": [1024], "rates": [200], "duration_s": 1, "warmup_s": 0.2,
        "warmup_until_steady": False, "drain_timeout_s": 2, "formats": ["raw"], "modes": ["batch", "single"],
        "partitions": 2}
CLIENT = spec.validate({**TINY})["client"]  # nats_replicas omitted: 3 on a 3-server cluster
FAILOVER_BOUND_S = 30.0  # a new leader elected, a restarted server current again: seconds, bounded generously
SERVERS = ["bb-nats-1", "bb-nats-2", "bb-nats-3"]


@pytest.fixture(scope="module")
def nats3(tmp_path_factory):
    """The cluster, on a stack of its own; stopped at the end with any server a test started again."""
    stack = LocalStack(tmp_path_factory.mktemp("nats3"))
    endpoint = {}
    try:
        stack.up(services=["nats@3"], log=lambda m: None)
        endpoint = stack.endpoint("nats@3")
        yield endpoint
    finally:
        stack.down(log=lambda m: None)
        for node in endpoint.get("nodes", []):
            for pid in node["pids"]:
                stop(pid)


def until(what, bound_s: float = FAILOVER_BOUND_S, every_s: float = 0.2):
    """What `what()` returns once it is truthy, polled until bound_s; the last value if it never is."""
    deadline = time.monotonic() + bound_s
    while not (value := what()) and time.monotonic() < deadline:
        time.sleep(every_s)
    return value


def test_each_server_listens_on_its_client_and_cluster_ports_on_loopback_only(nats3):
    """The kernel's own tables: each server's process listens on 127.0.0.1 at its client and cluster ports, and on
    nothing else (no monitoring, gateway or leaf node port)."""
    for node in nats3["nodes"]:
        [pid] = node["pids"]
        assert sorted(listening(pid)) == [("0100007F", port) for port in sorted([node["port"], node["cluster_port"]])]
        log = Path(node["log"]).read_text(errors="replace")
        assert "invalid use of field" not in log, log[:2000]  # the config is taken whole (local.config_text)


def test_a_nats_py_client_given_one_server_learns_of_no_other(nats3):
    """The servers advertise no client URLs (local.py: no_advertise). A NATS client adds the servers a server's INFO
    names (connect_urls) to those it was given, and moves to them when it loses its connection: nats-py (the driver's
    admin connection, which reconnects so) given a network fault's proxies would learn each server's own address and,
    when the fault reset its link, reconnect there around the proxies. Given one server, it knows that one alone once
    connected; with the servers advertising, it listed all three (the worker's own clients read no connect_urls)."""
    first = nats3["nodes"][0]
    url = f"nats://{first['host']}:{first['port']}"
    loop = admin_loop()
    client = loop.run(_connect([url]))
    try:
        assert [server.geturl() for server in client.servers] == [url]
        assert client.discovered_servers == []
    finally:
        loop.run(client.close())


@pytest.mark.parametrize("loop", ["native", "python"])
def test_cells_on_the_cluster_deliver_everything_on_streams_replicated_to_every_server(nats3, endpoints, store,
                                                                                      monkeypatch, loop):
    monkeypatch.setenv("BROKERBENCH_SEND_LOOP", loop)  # the cell's processes start with the worker's environment
    assert [node["node"] for node in nats3["nodes"]] == SERVERS and len(nats3["pids"]) == 3
    outcome = execute_run({**TINY, "name": f"it-nats3-{loop}"}, {**endpoints, "nats-jetstream": nats3}, store)
    events = store.read(outcome.run_id)
    results = build_results(events)
    failed = [(e["data"]["cell_id"], e["data"]["reason"]) for e in events if e["type"] == "CellFailed"]
    assert outcome.status == "completed" and len(results["cells"]) == 2, failed
    assert {e["data"]["send_loop"] for e in events if e["type"] == "CellCompleted"} == {loop}
    for cell in results["cells"]:
        assert cell["status"] == "completed", cell.get("reason")
        assert cell["sent"] == cell["received"] > 0 and cell["lost"] == cell["duplicated"] == 0
        assert cell["unacknowledged"] == cell["send_errors"] == 0
        assert cell["broker_count"]["difference"] == 0  # the stream's own count
        assert_accounting_whole(cell)
    settings = events[1]["data"]["targets"]["nats-jetstream"]["settings"]
    assert settings["persistence"]["replicas"] == 3 and settings["persistence"]["nodes"] == 3
    assert "a quorum of the stream's 3 replicas" in settings["acks_meaning"]
    # every server's process sampled: three servers' memory, not one
    completed = [e["data"] for e in events if e["type"] == "CellCompleted"]
    assert all(c["resources"]["broker"]["rss_mb_max"] > 3 * 5 for c in completed)


def test_a_killed_leader_is_replaced_and_restarted_and_every_acknowledged_message_is_kept(nats3):
    driver = NatsJetStreamDriver(nats3, CLIENT)
    driver.check()
    assert (driver.server_count(), driver.replicas()) == (3, 3)
    topic = "bb-nats3-failover"
    driver.create_topic(topic, 2)
    acked, refused = [], []
    producer = driver.producer(topic, 2, "batch",
                               lambda header, ok, at: (acked if ok else refused).append(int.from_bytes(header, "big")))
    consumer = None
    try:
        def publish(first: int, count: int) -> None:
            for seq in range(first, first + count):
                producer.send(seq.to_bytes(8, "big"), b"x" * 256, seq % 2)
            assert producer.flush(30) == 0

        publish(0, 500)
        assert sorted(acked) == list(range(500)) and not refused
        # The cluster's own view: the stream has 3 replicas, one on each server, all caught up.
        info = cluster.stream_info(nats3, topic)
        assert info["config"]["num_replicas"] == 3
        assert until(lambda: cluster.members(nats3, topic) == dict.fromkeys(SERVERS, True)), cluster.members(nats3,
                                                                                                            topic)
        old = cluster.leader(nats3, topic)
        assert old in SERVERS
        killed = next(node for node in nats3["nodes"] if node["node"] == old)
        # A native loop on the leader's own server (first in its list): it has to move when the leader goes.
        others = [f"nats://{n['host']}:{n['port']}" for n in nats3["nodes"] if n is not killed]
        leader_first = {**nats3, "url": ",".join([f"nats://{killed['host']}:{killed['port']}", *others])}
        sender = NatsJetStreamDriver(leader_first, CLIENT).native_sender(topic, 2, "batch")
        sender.configure([b"y" * 256], None, 2, time.monotonic_ns(), 0.0)
        _, native_acked, _, _ = send_all(sender, 100)
        native_acked, native_failed = set(native_acked.tolist()), set()
        assert native_acked == set(range(100))
        for pid in killed["pids"]:
            os.kill(pid, signal.SIGKILL)
        started = time.monotonic()
        new = until(lambda: (leader := cluster.leader(nats3, topic)) not in (None, old) and leader)
        took_s = time.monotonic() - started
        assert new in SERVERS and new != old, (old, new, took_s)
        print(f"\nleader {old} killed: {new} led after {took_s:.1f} s")
        # A server down is told at once (it refuses the connection), not after serves()'s timeout: a fault's wait for
        # the cluster to be whole again asks every half second (nats-py, given no limit of attempts, tried the
        # killed server until the timeout).
        asked = time.monotonic()
        assert not cluster.serves(nats3, timeout_s=120) and time.monotonic() - asked < 60

        # Writes go on on the new leader: the Python producer moved to another server if it was on the killed one.
        publish(500, 300)
        assert sorted(acked) == list(range(800)) and not refused
        # The native loop lost its server: it connects to the next and its publishes are acknowledged again.
        sent, deadline = 100, time.monotonic() + FAILOVER_BOUND_S
        while time.monotonic() < deadline:
            _, acked_now, _, failed_now = send_all(sender, 20, first=sent, drained=False)
            sent += 20
            native_acked |= set(acked_now.tolist())
            native_failed |= set(failed_now.tolist())
            if acked_now.size == 20:
                break
            time.sleep(0.2)
        sender.close()
        assert set(range(sent - 20, sent)) <= native_acked and not native_acked & native_failed, (sent, native_failed)
        unanswered = sent - len(native_acked) - len(native_failed)
        print(f"native loop: {len(native_failed)} sends failed while it moved, {unanswered} unanswered")
        # The native loop connects to the first server that answers: with the killed one first, another.
        sender = NatsJetStreamDriver(leader_first, CLIENT).native_sender(topic, 2, "batch")
        sender.configure([b"z" * 256], None, 2, time.monotonic_ns(), 0.0)
        _, acked_now, _, failed_now = send_all(sender, 50, first=sent)
        sender.close()
        assert failed_now.size == 0 and sorted(acked_now.tolist()) == list(range(sent, sent + 50))
        native_acked |= set(acked_now.tolist())
        sent += 50

        # Started again on its own store and ports, the server rejoins: the cluster lists its replica current.
        pids = cluster.start_node(nats3, old)
        assert pids == killed["pids"] and pids[0] not in nats3["pids"]
        started = time.monotonic()
        assert until(lambda: cluster.members(nats3, topic).get(old)), cluster.members(nats3, topic)
        print(f"{old} started again: current after {time.monotonic() - started:.1f} s")
        assert cluster.leader(nats3, topic) in SERVERS

        # What the cluster kept: every acknowledged message, once, as a consumer reads the stream back and the
        # stream counts. A native publish left unanswered when its server went may have been stored too.
        stored = driver.message_count(topic, 2)
        consumer = driver.consumer(topic, "bb-check", [0, 1])
        read = []
        deadline = time.monotonic() + 30
        while len(read) < stored and time.monotonic() < deadline:
            read += consumer.poll(1.0)
        assert len(read) == stored
        python_seqs = sorted(int.from_bytes(header, "big") for header, _, _ in read if len(header) == 8)
        assert python_seqs == list(range(800))  # each acknowledged one, none twice
        native_seqs = sorted(int(unpack_many([header])["seq"][0]) for header, _, _ in read if len(header) != 8)
        assert len(set(native_seqs)) == len(native_seqs) and native_acked <= set(native_seqs) <= set(range(sent))
        assert not set(native_seqs) & native_failed  # a refused publish is not in the stream
    finally:
        producer.close()
        if consumer is not None:
            consumer.close()
        driver.delete_topic(topic, 2)


@pytest.mark.parametrize("kind", ["kill", "stop"])
def test_a_leader_killed_or_stopped_by_the_runs_own_fault_keeps_every_acknowledged_message_and_the_accounting_whole(
        nats3, endpoints, store, kind):
    """The same kill as a fault of the run request (brokerbench.faults), inside a measured cell, as the guarantees
    suite asks it (its own run request, at the scale that makes its 40 s cell 6 s: R3 file streams, 1 KB at 1,000
    msgs/s, the leader killed 1.5 s into the measured window and started again 2.25 s later), and the same request
    with a clean stop (SIGTERM: the server steps down from what it leads and shuts down): the cell stores the server
    it took down (the stream's leader as the cluster named it), the leader the cluster names at the end (another, or
    the same one with nothing acknowledged while it was down), the server started again; no acknowledged message is
    lost, the stream's count agrees, and every message sent is in one class of the accounting."""
    request = suite_run("guarantees", "guarantees-nats-r3", 0.15)
    assert [f["kind"] for f in request["faults"]] == ["kill", "restart"], request
    request["faults"][0]["kind"] = kind
    outcome = execute_run(request, {**endpoints, "nats-jetstream": nats3}, store)
    events = store.read(outcome.run_id)
    [cell] = build_results(events)["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    [faults] = [e["data"]["faults"] for e in events if e["type"] == "CellCompleted"]
    down, restart = faults["applied"]
    assert down["kind"] == kind and down["nodes"] == [down["leader_before"]] and down["leader_before"] in SERVERS
    assert restart["nodes"] == down["nodes"] and faults["cluster_whole_at_end"], faults
    # The cluster's own stream info at the end: another leader, or (an election on a loaded host can take longer
    # than the 2.25 s the server was down) the same one, and then nothing was acknowledged from the fault until the
    # server was back: no other server led the stream meanwhile.
    print(f"{kind}: leader {down['leader_before']} -> {faults['leader_at_end']}; producers without an "
          f"acknowledgement {faults['producer_ack_gap']}")
    assert faults["leader_at_end"] in SERVERS, faults
    if faults["leader_at_end"] == down["leader_before"]:
        gap = faults["producer_ack_gap"]
        assert gap["from_s"] <= down["at_s"] + 0.1 and gap["to_s"] >= restart["at_s"], faults
    assert cell["lost"] == 0, cell
    assert cell["broker_count"]["difference"] == 0, cell["broker_count"]  # the stream's own count
    assert_accounting_whole(cell)
