"""NATS JetStream end to end on the local nats-server: every format in both modes on file storage, a memory-storage
cell, and a server started with sync_interval: always."""

import subprocess
import time

import pytest

from brokerbench import spec
from brokerbench.brokers.nats_jetstream.driver import NatsJetStreamDriver
from brokerbench.brokers.nats_jetstream.local import NatsService
from brokerbench.drivers import TargetRefused
from brokerbench.local.processes import free_port, stop
from brokerbench.reports.results import build_results
from inline_run import execute_run
from steady import assert_sent_on_schedule

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
        assert 0 < cell["end_to_end_latency_us"]["p50"] < 1_000_000 and cell["publish_latency_us"]["p50"] > 0
    ends = [e["data"] for e in events if e["type"] == "CellCompleted"]
    assert all(end["send_loop"] == "python" for end in ends)  # no native loop for NATS: the Python loop ran
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
