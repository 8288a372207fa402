"""NATS JetStream end to end on the local nats-server: every format in both modes on file storage (on the native send
loop, and on the Python loop), a memory-storage cell, a server started with sync_interval: always, and the native
loop's own connection: what the stream holds, a publish no stream takes, one in flight in single mode, and a server
killed and started again under it."""

import asyncio
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import time
import urllib.request

import nats

import pytest

from brokerbench import native, spec
from brokerbench.brokers.nats_jetstream.driver import (PULL_EXPIRES_S, PULL_LOST_S, NatsJetStreamDriver, consumer_config,
                                                       durable_name, frame, stream_name, subject)
from brokerbench.brokers.nats_jetstream import driver as nats_driver
from brokerbench.brokers.nats_jetstream.wire import WireConsumer, WireProducer
from brokerbench.brokers.nats_jetstream import local
from brokerbench.brokers.nats_jetstream.local import NatsService
from brokerbench.drivers import BrokerUnavailable, TargetRefused
from brokerbench.local.processes import free_port, stop
from brokerbench.reports.results import build_results
from brokerbench.worker.framing import HEADER, unpack_many
from inline_run import execute_run
from kernel_stamps import stamps_on
from native_sends import assert_python_loop_cells, python_producer, python_sends, send_all
from steady import assert_sent_on_schedule, p50_known_or_bound

TINY = {"brokers": ["nats-jetstream"], "sizes": [1024], "rates": [200], "duration_s": 1, "warmup_s": 0.2,
        "warmup_until_steady": False, "drain_timeout_s": 2}


def run(request, endpoints, store):
    outcome = execute_run(request, endpoints, store)
    events = store.read(outcome.run_id)
    return outcome, events, build_results(events)


def test_every_format_in_both_modes_arrives_whole_and_the_stream_count_reconciles(extra_brokers, store):
    endpoints = extra_brokers("nats")
    request = {**TINY, "name": "it-nats", "formats": ["json", "avro", "protobuf", "msgpack", "raw"],
               "modes": ["batch", "single"], "partitions": 2}
    outcome, events, results = run(request, endpoints, store)
    assert outcome.status == "completed" and len(results["cells"]) == 10
    for cell in results["cells"]:
        assert cell["status"] == "completed", cell.get("reason")
        assert cell["sent"] == cell["received"] > 0 and cell["lost"] == cell["duplicated"] == 0
        assert cell["unacknowledged"] == cell["send_errors"] == 0
        if cell["mode"] == "batch":  # single mode keeps one publish in flight: on a busy machine it may fall behind
            assert_sent_on_schedule(cell, 200)
        # The stream's own message count is what the producers were told it stored (PubAcks), probes and warm-up
        # included: more than the measured messages.
        assert cell["broker_count"]["difference"] == 0 and cell["broker_count"]["observed"] > cell["sent"]
        assert 0 < p50_known_or_bound(cell["end_to_end_latency_us"]) < 1_000_000  # a bound: see there
        assert cell["publish_latency_us"]["p50"] > 0
    ends = [e["data"] for e in events if e["type"] == "CellCompleted"]
    assert all(end["send_loop"] == "native" for end in ends)  # the default where the native loop is built
    backlogs = [e["data"]["backlog"] for e in events if e["type"] == "IntervalMeasured"]
    # num_pending + num_ack_pending of the cell's consumers, as the server counts them; drained at the end
    assert all(isinstance(b, int) for b in backlogs) and backlogs[-1] == 0
    target = results["environment"]["brokers"]["nats-jetstream"]
    assert target["client_library"] == "nats-py" and target["broker_version"].startswith("2.15")
    settings = events[1]["data"]["targets"]["nats-jetstream"]["settings"]
    assert settings["acks"] == "PubAck" and settings["modes"]["single"]["in_flight"] == 1
    assert settings["persistence"] == {**settings["persistence"], "storage": "file", "replicas": 1,
                                       "sync_interval": "2m"}
    assert "not yet on disk" in settings["acks_meaning"]


def test_a_memory_stream_delivers_everything_and_says_it_is_in_memory_only(extra_brokers, store):
    endpoints = extra_brokers("nats")
    request = {**TINY, "formats": ["raw"], "modes": ["batch"], "client": {"nats_storage": "memory"}}
    _, events, results = run(request, endpoints, store)
    [cell] = results["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    assert cell["sent"] == cell["received"] > 0 and cell["lost"] == 0
    assert cell["broker_count"]["difference"] == 0
    settings = events[1]["data"]["targets"]["nats-jetstream"]["settings"]
    assert settings["persistence"]["storage"] == "memory" and "nothing is written to disk" in settings["acks_meaning"]


def test_more_replicas_than_a_single_server_holds_is_refused_before_any_cell(extra_brokers, store):
    endpoints = extra_brokers("nats")
    request = {**TINY, "formats": ["raw"], "modes": ["batch"], "client": {"nats_replicas": 3}}
    run_ids = []
    with pytest.raises(TargetRefused, match="client.nats_replicas"):
        execute_run(request, endpoints, store, on_run_id=run_ids.append)
    assert [e["type"] for e in store.read(run_ids[0])] == ["RunRequested", "RunFailed"]


def fsyncs_while_publishing(endpoint: dict, pid: int, publishes: int) -> int:
    """The fsync and fdatasync calls the server makes (the kernel's count, through strace) while `publishes` messages
    are published to a file stream one at a time, each PubAck awaited."""
    client = spec.validate({"brokers": ["nats-jetstream"], "sizes": [1024], "rates": [100], "formats": ["raw"]})["client"]
    driver = NatsJetStreamDriver(endpoint, client)
    driver.create_topic("bb-fsync-count", 1)
    trace = subprocess.Popen(["strace", "-f", "-c", "-e", "trace=fsync,fdatasync", "-p", str(pid)],
                             stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1)  # attached to every thread of the server
        acks = []
        producer = driver.producer("bb-fsync-count", 1, "single", lambda header, ok, at: acks.append(ok))
        for _ in range(publishes):
            producer.send(b"h", b"x" * 1024, 0)
            producer.flush(30)
        producer.close()
        assert acks == [True] * publishes
    finally:
        trace.terminate()
        summary = trace.communicate(timeout=30)[1]
        driver.delete_topic("bb-fsync-count", 1)
    return sum(int(line.split()[3]) for line in summary.splitlines() if line.split()[-1:] in (["fsync"], ["fdatasync"]))


def test_a_server_that_syncs_every_write_is_recorded_and_serves_a_cell(extra_brokers, stack, store, tmp_path):
    """A second server, started with sync_interval: always, as a named endpoint: each PubAck waits for an fsync. The
    kernel counts the server's fsync calls: one per publish at least with `always`, where the session's server (2 m
    by default) makes next to none (its timer may fall in the window once). The run records what the target
    declares."""
    endpoints = extra_brokers("nats")
    (tmp_path / "data").mkdir()
    service = NatsService()
    started = service.start(tmp_path, free_port, {"nats_sync": "always"})
    try:
        deadline = time.monotonic() + 30
        while not service.ready(started):
            assert time.monotonic() < deadline, (tmp_path / "nats.log").read_text()[-2000:]
            time.sleep(0.2)
        assert fsyncs_while_publishing(started.endpoint, started.pids[0], 200) >= 200
        default = stack.endpoint("nats")
        assert fsyncs_while_publishing(default, default["pids"][0], 200) < 20
        target = {"url": started.endpoint["url"], "sync_interval": "always"}
        request = {**TINY, "formats": ["raw"], "modes": ["single"], "targets": {"nats-jetstream": target}}
        _, events, results = run(request, {**endpoints, "nats-jetstream": target}, store)
        [cell] = results["cells"]
        assert cell["status"] == "completed", cell.get("reason")
        assert cell["sent"] == cell["received"] > 0 and cell["broker_count"]["difference"] == 0
        settings = events[1]["data"]["targets"]["nats-jetstream"]["settings"]
        assert settings["persistence"]["sync_interval"] == "always"
        assert "syncs every write to disk before its PubAck" in settings["acks_meaning"]
    finally:
        stop(started.pids[0])


def test_the_servers_config_is_taken_whole_and_its_sync_policy_takes_effect(tmp_path):
    """The config the stack writes is read without a complaint (an unquoted `sync_interval: 2m` was logged as
    `invalid use of field "sync_interval"` at every start, and taken as 2,000,000 s), and the server does what it
    says, as the server's own monitoring endpoint (/varz, on a port of the test's only) reports it: a timer of
    120 s, or every write synced (sync_always)."""
    service, binary = NatsService(), local.server_binary()
    for policy, want in (("2m", {"sync_interval": 120 * 10**9}), ("always", {"sync_always": True})):
        folder = tmp_path / policy
        (folder / "data").mkdir(parents=True)
        started = service.start(folder, free_port, {"nats_sync": policy})
        try:
            deadline = time.monotonic() + 30
            while not service.ready(started):
                assert time.monotonic() < deadline, (folder / "nats.log").read_text()[-2000:]
                time.sleep(0.1)
        finally:
            stop(started.pids[0])
        log = (folder / "nats.log").read_text()
        assert "Server is ready" in log and "invalid use of field" not in log and "[ERR]" not in log, log[:2000]
        port, monitor = free_port(), free_port()
        watched = subprocess.Popen([str(binary), "-c", str(folder / "nats.conf"), "-a", local.HOST, "-p", str(port),
                                    "-js", "-m", str(monitor)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    with urllib.request.urlopen(f"http://{local.HOST}:{monitor}/varz", timeout=2) as answer:
                        config = json.load(answer)["jetstream"]["config"]
                    break
                except OSError:
                    assert time.monotonic() < deadline and watched.poll() is None, "no /varz"
                    time.sleep(0.1)
        finally:
            watched.terminate()
            complaints = watched.communicate(timeout=30)[1].decode(errors="replace")
        assert "invalid use of field" not in complaints, complaints[:2000]
        assert {key: config.get(key) for key in want} == want, config
        if policy == "2m":
            assert not config.get("sync_always"), config


def test_a_cell_samples_the_servers_cpu_and_memory(extra_brokers, stack, store):
    """The local stack hands the server's pid with its endpoint; each interval samples it, and its memory agrees
    with ps reading the same process."""
    endpoints = extra_brokers("nats")
    served = stack.endpoint("nats")  # the endpoint with the service's pids, as the workflow's local targets give it
    request = {**TINY, "formats": ["raw"], "modes": ["batch"]}
    _, events, _ = run(request, {**endpoints, "nats-jetstream": served}, store)
    intervals = [e["data"] for e in events if e["type"] == "IntervalMeasured"]
    assert intervals and all(i["resources"]["broker"]["rss_mb"] > 0 for i in intervals)
    summary = next(e["data"] for e in events if e["type"] == "CellCompleted")["resources"]["broker"]
    ps_mb = int(subprocess.run(["ps", "-o", "rss=", "-p", str(served["pids"][0])], capture_output=True,
                               text=True).stdout) / 1024
    assert 0.5 * ps_mb <= summary["rss_mb_max"] <= 2 * ps_mb, (summary, ps_mb)


def test_the_python_loop_serves_the_same_cells(extra_brokers, store, monkeypatch):
    """Where the native loop cannot run (NATS with TLS or credentials, not built) the Python loop over nats-py does:
    the same cells, counted alike."""
    monkeypatch.setenv("BROKERBENCH_SEND_LOOP", "python")  # the cell's processes start with the worker's environment
    endpoints = extra_brokers("nats")
    request = {**TINY, "name": "it-nats-python", "formats": ["json"], "modes": ["batch", "single"]}
    _, events, results = run(request, endpoints, store)
    assert_python_loop_cells(events, results)


CLIENT = {"nats_max_in_flight": 10, "nats_storage": "file", "nats_replicas": 1, "nats_fetch_batch": 100}


def stream_frames(driver, topic: str, lanes: int) -> dict[int, list]:
    """What the stream holds, per lane, read back by a consumer of the driver's: (seq, producer, payload)."""
    consumer = driver.consumer(topic, "bb-check", list(range(lanes)))
    got, deadline = [], time.monotonic() + 30
    try:
        while time.monotonic() < deadline and len(got) < driver.message_count(topic, lanes):
            got += consumer.poll(1.0)
    finally:
        consumer.close()
    out = {lane: [] for lane in range(lanes)}
    for header, payload, lane in got:
        frame = unpack_many([header])
        out[lane].append((int(frame["seq"][0]), int(frame["producer"][0]), payload))
    return out


def own_server(folder, port: int):
    """A NATS server of the test's own on `port` with its store in `folder` (started again there: the same store),
    once it answers."""
    (folder / "data").mkdir(exist_ok=True)
    service = NatsService()
    started = service.start(folder, lambda: port, {})
    deadline = time.monotonic() + 30
    while not service.ready(started):
        assert time.monotonic() < deadline, (folder / "nats.log").read_text()[-2000:]
        time.sleep(0.1)
    return started


def test_the_native_loop_publishes_each_message_once_and_takes_each_pub_ack(extra_brokers):
    """257 messages over three subjects of a stream with a window of 10: every one acknowledged once, no
    acknowledgement stamped before its message was handed over, and the stream holds exactly them, each lane in
    order, with the worker's header and the payload."""
    driver = NatsJetStreamDriver(extra_brokers("nats")["nats-jetstream"], CLIENT)
    topic = "bb-native-pub"
    driver.create_topic(topic, 3)
    try:
        sender = driver.native_sender(topic, 3, "batch")
        pool = [bytes([i]) * (500 + i) for i in range(5)]
        sender.configure(pool, None, 3, time.monotonic_ns(), 0.0)
        handed, acked, acked_ns, failed = send_all(sender, 257)
        sender.close()
        assert failed.size == 0 and sorted(acked.tolist()) == list(range(257))
        assert (acked_ns >= handed[acked]).all()
        assert driver.message_count(topic, 3) == 257
        for lane, frames in stream_frames(driver, topic, 3).items():
            assert [seq for seq, _, _ in frames] == list(range(lane, 257, 3))
            assert {producer for _, producer, _ in frames} == {3}
            assert all(payload == pool[seq % 5] for seq, _, payload in frames)
    finally:
        driver.delete_topic(topic, 3)


def test_a_publish_no_stream_takes_fails_and_single_mode_keeps_one_in_flight(extra_brokers):
    """Lane 1's subject is in no stream: the server answers its publishes "no responders" (a status message, not a
    PubAck), and each is a failed send; lane 0's are acknowledged. In single mode each message is handed over only
    after the previous one's answer came."""
    driver = NatsJetStreamDriver(extra_brokers("nats")["nats-jetstream"], CLIENT)
    topic = "bb-native-half"
    driver.create_topic(topic, 1)  # one subject: <topic>.0
    try:
        sender = driver.native_sender(topic, 2, "single")
        sender.configure([b"abc"], None, 0, time.monotonic_ns(), 0.0)
        handed, acked, acked_ns, failed = send_all(sender, 40)
        sender.close()
        assert acked.tolist() == list(range(0, 40, 2)) and sorted(failed.tolist()) == list(range(1, 40, 2))
        assert (handed[acked[1:]] >= acked_ns[:-1]).all()  # one in flight: sent after the previous PubAck came
        assert driver.message_count(topic, 1) == 20
    finally:
        driver.delete_topic(topic, 1)


def test_a_server_killed_under_the_native_loop_fails_sends_until_it_is_back_then_they_are_acknowledged(tmp_path):
    """kill -9 of a server of the test's own between two bursts: sends while it is down fail at once (none is
    waited for, none counted twice; those in flight when the connection was lost stay unacknowledged), the loop connects again within RECONNECT_NS once the server is back on its
    port with its store, and what is sent then is acknowledged. The stream holds what was acknowledged."""
    port = free_port()  # the same port both times
    started = own_server(tmp_path, port)
    try:
        driver = NatsJetStreamDriver(started.endpoint, CLIENT)
        driver.create_topic("bb-native-kill", 1)
        sender = driver.native_sender("bb-native-kill", 1, "batch")
        sender.configure([b"x" * 100], None, 0, time.monotonic_ns(), 0.0)
        _, acked, _, failed = send_all(sender, 50, drained=False)
        assert sorted(acked.tolist()) == list(range(50)) and failed.size == 0
        os.kill(started.pids[0], signal.SIGKILL)
        os.waitpid(started.pids[0], 0)
        _, acked, _, failed = send_all(sender, 20, first=50, drained=False)
        # Up to a window's worth went out before the loss showed (a write to a dead peer succeeds once): they are no
        # longer awaited and stay unacknowledged; each one sent after it fails at once.
        assert acked.size == 0 and set(failed.tolist()) >= set(range(50 + CLIENT["nats_max_in_flight"], 70))
        assert set(failed.tolist()) <= set(range(50, 70))
        started = own_server(tmp_path, port)
        time.sleep(0.6)  # past RECONNECT_NS (0.5 s) after the last attempt
        _, acked, _, failed = send_all(sender, 30, first=70, drained=False)
        sender.close()
        assert sorted(acked.tolist()) == list(range(70, 100)) and failed.size == 0
        assert driver.message_count("bb-native-kill", 1) == 80
    finally:
        stop(started.pids[0])


def test_a_native_flush_gives_up_pub_acks_a_paused_server_does_not_send_and_ignores_them_when_they_come(tmp_path):
    """SIGSTOP of a server of the test's own under the native loop: its connection stays up and nothing answers (as a
    stream whose leader was killed does not, to a client connected to another server). The flush gives those
    publishes up after the PubAck timeout (ACK_TIMEOUT_NS, 5 s) as the full window does, where it waited out its
    whole bound (the drain's cap, 40 s, in a cell): none is still awaited, none acknowledged or failed. Answered
    after SIGCONT, they are ignored (none counted), and the next sends are acknowledged."""
    started = own_server(tmp_path, free_port())
    try:
        driver = NatsJetStreamDriver(started.endpoint, CLIENT)
        driver.create_topic("bb-native-pause", 1)
        sender = driver.native_sender("bb-native-pause", 1, "batch")
        sender.configure([b"x" * 100], None, 0, time.monotonic_ns(), 0.0)
        _, acked, _, failed = send_all(sender, 20)
        assert sorted(acked.tolist()) == list(range(20)) and failed.size == 0
        os.kill(started.pids[0], signal.SIGSTOP)
        try:
            wait_stopped(started.pids[0])  # every thread: one still running could answer the sends below
            far = time.monotonic_ns() + 60_000_000_000
            sender.send_until(20, 25, far, far)  # fewer than the window: none waits
            assert sender.flush(120) == 0  # given up, not waited for until the bound
            _, _, acked, _, failed = sender.take()
            assert len(acked) == len(failed) == 0
        finally:
            os.kill(started.pids[0], signal.SIGCONT)
        _, acked, _, failed = send_all(sender, 10, first=25)
        sender.close()
        assert sorted(acked.tolist()) == list(range(25, 35)) and failed.size == 0  # the late PubAcks: not counted
        assert driver.message_count("bb-native-pause", 1) == 35  # the paused server stored them all once back
    finally:
        stop(started.pids[0])


def wait_stopped(pid: int, timeout_s: float = 10.0) -> None:
    """Until every thread of `pid` is stopped (state T in /proc): SIGSTOP stops a process's threads one by one, and
    a Go server's threads on another core may still read and answer for a moment after kill() returned."""
    deadline = time.monotonic() + timeout_s
    while True:
        states = []
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/stat") as stat:
                    states.append(stat.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:
                continue  # a thread that ended meanwhile
        if states and all(state in "Tt" for state in states):
            return
        assert time.monotonic() < deadline, f"pid {pid} not stopped: thread states {states}"
        time.sleep(0.001)


def test_the_python_loops_producer_speaks_nats_itself_and_takes_each_pub_ack_once(extra_brokers):
    """The Python loop's producer on plain NATS (wire.WireProducer): 257 messages over three subjects with a window
    of 10, each answered once with a PubAck stamped no earlier than its send, and the stream holds exactly them, in
    order on each lane with their payloads; a subject no stream takes (lane 1 of a one-lane stream) is answered "no
    responders", and each of its publishes is a failed send; single mode keeps one in flight."""
    driver = NatsJetStreamDriver(extra_brokers("nats")["nats-jetstream"], CLIENT)
    topic = "bb-python-pub"
    driver.create_topic(topic, 3)
    try:
        producer = python_producer(driver, topic, 3)
        assert isinstance(producer, WireProducer)
        handed = python_sends(producer, 257, lambda seq: bytes([seq % 251]) * 100, lanes=3, producer_id=4)
        producer.close()
        answers = producer.answers
        assert sorted(answers) == list(range(257)) and all(ok for ok, _ in answers.values())
        assert all(at >= handed[seq] for seq, (_, at) in answers.items())
        assert driver.message_count(topic, 3) == 257
        for lane, frames in stream_frames(driver, topic, 3).items():
            assert [seq for seq, _, _ in frames] == list(range(lane, 257, 3))
            assert all(pid == 4 and payload == bytes([seq % 251]) * 100 for seq, pid, payload in frames)
    finally:
        driver.delete_topic(topic, 3)
    topic = "bb-python-half"
    driver.create_topic(topic, 1)
    try:
        producer = python_producer(driver, topic, 2, "single")
        handed = python_sends(producer, 40, lambda seq: b"abc", lanes=2, flush_each=True)
        producer.close()
        answers = producer.answers
        assert {seq for seq, (ok, _) in answers.items() if ok} == set(range(0, 40, 2))
        assert {seq for seq, (ok, _) in answers.items() if not ok} == set(range(1, 40, 2))
        assert all(handed[seq + 1] >= answers[seq][1] for seq in range(39))  # sent after the previous answer came
        assert driver.message_count(topic, 1) == 20
    finally:
        driver.delete_topic(topic, 1)


def test_a_pub_ack_that_waited_in_the_socket_past_the_timeout_is_taken_not_expired(extra_brokers, monkeypatch):
    """The cell's readiness probe is published before the cell spawns its processes and its PubAck read once they
    have started: a spawn longer than the PubAck timeout (over 5 s on a loaded host) left the PubAck in the socket,
    and the producer gave the publish up before reading it ("did not acknowledge the readiness probe (0 of 1)").
    What the socket holds is taken before anything is given up; a publish the server never answers still is."""
    monkeypatch.setattr(nats_driver, "ACK_TIMEOUT_S", 1.0)
    driver = NatsJetStreamDriver(extra_brokers("nats")["nats-jetstream"], CLIENT)
    topic = "bb-late-read"
    driver.create_topic(topic, 1)
    try:
        acks: list[bool] = []
        producer = driver.producer(topic, 1, "single", lambda header, ok, at_ns: acks.append(ok))
        assert isinstance(producer, WireProducer)
        producer.send(HEADER.pack(0, 0, 0), b"probe", 0)
        time.sleep(1.6)  # the worker elsewhere, longer than the timeout: the PubAck waits in the socket
        assert producer.flush(5) == 0 and acks == [True]
        silent = driver.producer(topic, 1, "single", lambda header, ok, at_ns: acks.append(ok))
        silent._conn.write(b"UNSUB 1\r\n")  # its inbox unsubscribed: the PubAck never reaches it
        silent.send(HEADER.pack(0, 1, 0), b"lost", 0)
        assert silent.flush(5) == 0 and acks == [True]  # given up after 1 s, neither acknowledged nor failed
        producer.close()
        silent.close()
        assert driver.message_count(topic, 1) == 2
    finally:
        driver.delete_topic(topic, 1)


def test_a_server_killed_under_the_python_loops_producer_keeps_what_is_sent_meanwhile_and_sends_it_once_back(
        tmp_path):
    """kill -9 of a server of the test's own under the Python loop's producer, then sends while it is down: kept (as
    nats-py's reconnect buffer kept them), and once the server is back on its port with its store the producer
    connects again (every RECONNECT_WAIT_S) and writes them: each acknowledged once, and the stream holds every
    message once."""
    port = free_port()  # the same port both times
    started = own_server(tmp_path, port)
    try:
        driver = NatsJetStreamDriver(started.endpoint, CLIENT)
        driver.create_topic("bb-python-kill", 1)
        producer = python_producer(driver, "bb-python-kill", 1)
        python_sends(producer, 50, lambda seq: b"x" * 100)
        answers = producer.answers
        assert sorted(answers) == list(range(50)) and all(ok for ok, _ in answers.values())
        os.kill(started.pids[0], signal.SIGKILL)
        os.waitpid(started.pids[0], 0)
        time.sleep(0.2)  # the connection's end reached the producer's socket
        for seq in range(50, 55):  # fewer than the window: none waits
            producer.send(HEADER.pack(0, seq, 0), b"y" * 100, 0)
        assert producer.flush(0.3) == 5 and len(answers) == 50  # kept, not failed
        started = own_server(tmp_path, port)
        assert producer.flush(10) == 0
        producer.close()
        assert sorted(answers) == list(range(55)) and all(ok for ok, _ in answers.values())
        assert driver.message_count("bb-python-kill", 1) == 55
    finally:
        stop(started.pids[0])


def test_endpoints_the_native_nats_loop_cannot_serve_are_unsupported():
    with pytest.raises(native.Unsupported, match="credentials"):
        NatsJetStreamDriver({"url": "nats://user:secret@127.0.0.1:4222"}, CLIENT).native_sender("t", 1, "batch")
    with pytest.raises(native.Unsupported, match="plain NATS"):
        NatsJetStreamDriver({"url": "tls://127.0.0.1:4222"}, CLIENT).native_sender("t", 1, "batch")


# -- the consumer (wire.py: NATS's protocol spoken on a socket of its own) --------------------------------------------
def consumer_info(endpoint: dict, stream: str, durable: str):
    """The server's own view of a durable consumer (nats-py: a client apart from the one under test)."""

    async def ask():
        connection = await nats.connect(endpoint["url"])
        try:
            return await connection.jetstream().consumer_info(stream, durable)
        finally:
            await connection.close()

    return asyncio.run(ask())


def settled(endpoint: dict, stream: str, durable: str, bound_s: float = 10):
    """The consumer's info once nothing awaits an acknowledgement (acknowledgements travel on another connection
    than the question), or as it is at bound_s."""
    deadline = time.monotonic() + bound_s
    while (info := consumer_info(endpoint, stream, durable)).num_ack_pending and time.monotonic() < deadline:
        time.sleep(0.1)
    return info


def publish(driver, topic: str, lanes: int, count: int) -> None:
    """`count` messages over the lanes in turn, header = the message's number, payload = its number repeated."""
    producer = driver.producer(topic, lanes, "batch", lambda header, ok, at: None)
    for i in range(count):
        producer.send(b"%06d" % i, b"%06d" % i * 50, i % lanes)
    assert producer.flush(30) == 0
    producer.close()


@contextlib.contextmanager
def published(endpoint: dict, topic: str, lanes: int, count: int):
    """A stream of the driver's holding `count` messages (see `publish`), deleted afterwards: (endpoint, driver)."""
    driver = NatsJetStreamDriver(endpoint, CLIENT)
    driver.create_topic(topic, lanes)
    try:
        publish(driver, topic, lanes, count)
        yield endpoint, driver
    finally:
        driver.delete_topic(topic, lanes)


def wire_consumer(endpoint: dict, topic: str, durable: str, urls: list[str] | None = None, ack_wait_s: float = 60.0,
                  expires_s: float = PULL_EXPIRES_S, lost_s: float = PULL_LOST_S) -> WireConsumer:
    """The driver's consumer with the test's own ack_wait and pull request timings."""
    config = {**consumer_config(durable, [subject(topic, 0)], CLIENT["nats_fetch_batch"]).as_dict(),
              "ack_wait": int(ack_wait_s * 1e9)}
    return WireConsumer(urls or [endpoint["url"]], stream_name(topic), durable, config, {subject(topic, 0): 0},
                        CLIENT["nats_fetch_batch"], connect_timeout_s=5, admin_timeout_s=10, expires_s=expires_s,
                        lost_s=lost_s, reconnect_wait_s=0.2)


def read(consumer, want: int, bound_s: float = 30) -> list:
    got, deadline = [], time.monotonic() + bound_s
    while len({m[0] for m in got}) < want and time.monotonic() < deadline:
        got += consumer.poll(0.05)
    return got


def test_the_consumer_reads_every_message_once_on_its_lane_and_its_acknowledgements_clear_the_servers_pending(
        extra_brokers):
    """2,500 messages over two lanes, read by the driver's consumer in pull requests of 100: each once, on its lane,
    whole; once it commits, the server's own consumer info has nothing pending (num_pending) or awaiting its
    acknowledgement (num_ack_pending), and nothing was delivered twice."""
    topic = "bb-wire-read"
    with published(extra_brokers("nats")["nats-jetstream"], topic, 2, 2500) as (endpoint, driver):
        consumer = driver.consumer(topic, "g", [0, 1])
        got = read(consumer, 2500)
        assert sorted(int(h) for h, _, _ in got) == list(range(2500))  # each once
        assert all(lane == int(h) % 2 and payload == h * 50 for h, payload, lane in got)
        consumer.commit()
        durable = durable_name("g", [0, 1])
        info = settled(endpoint, stream_name(topic), durable)
        assert info.num_ack_pending == info.num_pending == 0 and info.delivered.stream_seq == 2500, info
        assert info.num_redelivered == 0 and info.ack_floor.stream_seq == 2500, info
        assert driver.backlog(topic, "g", 2) == 0
        consumer.close()


def test_a_delivery_read_late_is_stamped_when_it_arrived(extra_brokers):
    """The consumer's pull requests are outstanding; a message published then waits 40 ms in the socket before the
    poll reads it. The poll's `arrived_ns` (the worker's stamp of its receipt) is the kernel's receive time: after
    the publish began, no later than the moment the test saw the message in the socket (peeked, not read), and 30 ms
    or more before the read returned. (The stamp before: the poll's return.)"""
    topic = "bb-wire-arrival"
    with stamps_on(), published(extra_brokers("nats")["nats-jetstream"], topic, 1, 0) as (endpoint, driver):
        consumer = driver.consumer(topic, "g", [0])
        try:
            assert consumer.poll(0.2) == []  # connected, its pull requests asked for
            producer = driver.producer(topic, 1, "batch", lambda header, ok, at: None)
            producer.send(b"warmup", b"x", 0)  # the first delivery (the server settling its consumer) comes late
            assert producer.flush(5) == 0 and [h for h, _, _ in read(consumer, 1)] == [b"warmup"]
            for i in range(3):
                header = b"%06d" % i
                sent = time.monotonic_ns()
                producer.send(header, b"x" * 100, 0)
                assert producer.flush(5) == 0
                sock = consumer._conn.sock
                seen = peeked(sock, header + b"x" * 100)
                waiting = len(sock.recv(1 << 20, socket.MSG_PEEK | socket.MSG_DONTWAIT))
                time.sleep(0.04)
                # A read is stamped with its last segment's arrival: where the server sent more after the message (a
                # pull request's status) before the poll, that segment's, after `seen` but before the sleep's end
                more = len(sock.recv(1 << 20, socket.MSG_PEEK | socket.MSG_DONTWAIT)) > waiting
                slept = time.monotonic_ns()
                got = consumer.poll(5)
                returned = time.monotonic_ns()
                assert [h for h, _, _ in got] == [header]
                assert sent <= consumer.arrived_ns <= (slept if more else seen) <= returned - 40_000_000, \
                    ((consumer.arrived_ns - sent) / 1e6, (seen - sent) / 1e6, more)
            producer.close()
        finally:
            consumer.close()


def peeked(sock, body: bytes, timeout_s: float = 5.0) -> int:
    """The monotonic ns when `body` was first seen whole in the socket, looked at without reading it (MSG_PEEK: it
    stays for the consumer's read, its kernel stamp with it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        select.select([sock], [], [], max(0.0, deadline - time.monotonic()))
        if body in sock.recv(1 << 20, socket.MSG_PEEK | socket.MSG_DONTWAIT):
            return time.monotonic_ns()
        time.sleep(0.0002)
    raise AssertionError(f"{body[:10]!r} never came")


def test_a_closed_consumer_leaves_the_rest_pending(extra_brokers):
    """A consumer that took one poll and closed acknowledged that poll's messages and nothing else: the server's ack
    floor is there, and every later message is still the consumer's (pending, or delivered and not acknowledged)."""
    topic = "bb-wire-close"
    with published(extra_brokers("nats")["nats-jetstream"], topic, 1, 1000) as (endpoint, driver):
        consumer = wire_consumer(endpoint, topic, "c")
        first = read(consumer, 1)
        consumer.close()
        info = consumer_info(endpoint, stream_name(topic), "c")
        assert [int(h) for h, _, _ in first] == list(range(len(first)))
        assert info.ack_floor.stream_seq == len(first), info
        assert info.num_pending + info.num_ack_pending == 1000 - len(first), info


def test_a_delivery_lost_with_the_connection_comes_again_after_ack_wait_and_the_next_server_is_tried(extra_brokers):
    """The consumer's connection severed under it after a poll, with more messages on their way (its two pull
    requests): it connects again (after a port where nothing listens, the next in its list), writes the poll's
    acknowledgements there, and the messages the connection took (delivered, never read) come again after ack_wait
    (1 s here): the server's consumer sequence counts their second delivery. The worker reads every message once."""
    topic = "bb-wire-lost"
    with published(extra_brokers("nats")["nats-jetstream"], topic, 1, 1000) as (endpoint, driver):
        consumer = wire_consumer(endpoint, topic, "l", urls=[endpoint["url"], f"nats://127.0.0.1:{free_port()}"],
                                 ack_wait_s=1.0)
        first = read(consumer, 1)
        time.sleep(0.3)  # the next two requests' messages delivered into the socket, not read
        consumer._conn.sock.shutdown(socket.SHUT_RDWR)  # as a reset of the link does
        rest = read(consumer, 1000 - len(first))
        consumer.commit()
        numbers = [int(h) for h, _, _ in first + rest]
        assert sorted(numbers) == list(range(1000))  # each once: the first poll's acknowledgements reached the server
        info = settled(endpoint, stream_name(topic), "l")
        assert info.num_ack_pending == info.num_pending == 0 and info.ack_floor.stream_seq == 1000, info
        redelivered = info.delivered.consumer_seq - 1000
        assert 0 < redelivered <= 1000 - len(first), info
        assert numbers != sorted(numbers)  # the redelivered came after later messages
        consumer.close()


def test_expired_pull_requests_are_asked_again_and_a_message_with_headers_of_its_own_is_read(extra_brokers):
    """Pull requests of 0.2 s on an empty stream end with status 408 (about five in a second of polls); the
    consumer asks again at each, so what is published a second later arrives (its own guard against a lost request,
    30 s here, cannot be what brings it). One message published with NATS headers of its own comes as an HMSG and
    is read as any other."""
    topic = "bb-wire-expired"
    with published(extra_brokers("nats")["nats-jetstream"], topic, 1, 0) as (endpoint, driver):
        consumer = wire_consumer(endpoint, topic, "e", expires_s=0.2, lost_s=30)
        assert read(consumer, 1, bound_s=1.0) == []
        publish(driver, topic, 1, 5)

        async def with_headers():
            connection = await nats.connect(endpoint["url"])
            await connection.jetstream().publish(subject(topic, 0), frame(b"000005", b"h"), headers={"X-A": "b"})
            await connection.close()

        asyncio.run(with_headers())
        got = read(consumer, 6, bound_s=10)
        assert sorted(h for h, _, _ in got) == [b"%06d" % i for i in range(6)] and got[-1][1] == b"h"
        consumer.close()


def test_a_consumer_that_cannot_open_says_where_and_why(extra_brokers):
    endpoint = extra_brokers("nats")["nats-jetstream"]
    driver = NatsJetStreamDriver(endpoint, CLIENT)
    with pytest.raises(BrokerUnavailable, match="NATS at nats://127.0.0.1:"):
        NatsJetStreamDriver({"url": f"nats://127.0.0.1:{free_port()}"}, CLIENT).consumer("bb-none", "g", [0])
    with pytest.raises(BrokerUnavailable, match="could not create consumer g_0 on stream bb-none: .*stream not found"):
        driver.consumer("bb-none", "g", [0])
    with pytest.raises(BrokerUnavailable, match="endpoint.url: 'ws://127.0.0.1:1'"):
        NatsJetStreamDriver({"url": "ws://127.0.0.1:1"}, CLIENT).consumer("bb-none", "g", [0])


def test_a_server_that_stops_answering_is_left_and_the_consumer_connects_again_once_it_answers(tmp_path):
    """SIGSTOP of a server of the test's own under a consumer (pull requests of 0.2 s, overdue 0.2 s after): its
    socket stays open, so only the consumer's own guard can tell: its requests end unanswered, then its PING, and it
    gives the connection up and tries again (each attempt held 1 s at most). After SIGCONT it is connected again on
    a new connection and reads the rest, each message once: the acknowledgements written to the stopped server,
    which closing the connection discarded there, are written again (no PONG confirmed them), and the messages the
    old connection took come again after ack_wait."""
    (tmp_path / "data").mkdir()
    service = NatsService()
    started = service.start(tmp_path, free_port, {})
    try:
        deadline = time.monotonic() + 30
        while not service.ready(started):
            assert time.monotonic() < deadline, (tmp_path / "nats.log").read_text()[-2000:]
            time.sleep(0.2)
        pid = started.pids[0]
        with published(started.endpoint, "bb-wire-paused", 1, 500) as (endpoint, _):
            consumer = wire_consumer(endpoint, "bb-wire-paused", "p", ack_wait_s=5.0, expires_s=0.2, lost_s=0.2)
            got = read(consumer, 1)
            before = consumer._conn
            os.kill(pid, signal.SIGSTOP)
            try:
                paused_until = time.monotonic() + 3
                while time.monotonic() < paused_until:
                    got += consumer.poll(0.05)  # what the socket held already
                assert consumer._conn is not before  # given up (and not connected again: the server is stopped)
            finally:
                os.kill(pid, signal.SIGCONT)
            got += read(consumer, 500 - len({h for h, _, _ in got}))
            assert consumer._conn is not None and consumer._conn is not before
            assert sorted(int(h) for h, _, _ in got) == list(range(500))
            consumer.close()
    finally:
        stop(started.pids[0])
