"""Faults injected into real runs: a producer or a consumer killed with SIGKILL in the middle of a cell, and the
event store (DynamoDB Local) killed and started again while a run writes to it.

The run is `brokerbench run` as a user starts it, against the session's real stack. The worker processes
name themselves (bb-producer-0, bb-consumer-0, as ps shows them), so the test finds the one to kill among
the CLI's descendants. The cell must end failed with the reason (ProcessDied, the signal), keep every
interval it measured, the run must go on to its next cell against the same broker, the report must mark the
cell, and the CLI must exit 1.
"""

import json
import os
import signal
import subprocess
import threading
import time
import warnings
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import pytest

from brokerbench.cli import main
from brokerbench.drivers import BrokerUnavailable
from brokerbench.events import new_run_id
from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.events.memory import MemoryEventStore
from brokerbench.local.dynamodb import EVENTS_TABLE
from brokerbench.local.stack import HOST, LocalStack, free_port
from brokerbench.brokers.redis_streams.driver import stream_key
from brokerbench.registry import get_driver
from brokerbench.reports.results import build_results
from brokerbench.spec import expand, validate
from brokerbench.worker import cell as cell_module
from fault_tools import BIN, assert_accounting_whole, cell_facts as _cell_facts, descendants as _descendants, event_facts as _event_facts
from inline_run import execute_run
from fault_tools import alive, interpreters_of as _interpreters_of, run_until_measuring as _run_until_measuring
from reliability_log import observe

def _until_an_interval_is_stored(store: DynamoEventStore, run_id: str, cli) -> None:
    """Waits until the run's first cell has stored a measured second: what the kill must leave kept."""
    deadline = time.monotonic() + 120
    while not any(e["type"] == "IntervalMeasured" for e in store.read(run_id, interval_histograms=False)):
        assert time.monotonic() < deadline and cli.poll() is None, "the first cell measured nothing"
        time.sleep(0.2)


@pytest.mark.parametrize("victim", ["bb-producer-0", "bb-consumer-0"])
def test_a_killed_worker_process_fails_its_cell_and_the_run_goes_on(victim, stack, endpoints, tmp_path):
    spec = {"name": f"fault-{victim}", "brokers": ["kafka"], "sizes": [512], "rates": [500], "formats": ["json", "raw"],
            "duration_s": 6, "warmup_s": 1, "warmup_until_steady": False, "order": "fixed", "partitions": 2}
    out = tmp_path / "out"
    cli = _run_until_measuring(stack.state_dir, spec, tmp_path)
    store = DynamoEventStore(EVENTS_TABLE, endpoint_url=endpoints["dynamodb"]["endpoint_url"])
    _until_an_interval_is_stored(store, stack.run_holder()["run_id"], cli)  # a fixed sleep lost the race on a loaded host
    killed = next(pid for pid, name in _descendants(cli.pid).items() if name == victim)
    os.kill(killed, signal.SIGKILL)
    stdout, stderr = cli.communicate(timeout=300)
    assert killed is not None, stdout[-2000:] + stderr[-2000:]
    assert cli.returncode == 1, stdout[-2000:] + stderr[-2000:]  # a cell failed: the run completed with failures

    results = json.loads(next(out.glob("*/results.json")).read_text())
    assert results["status"] == "completed_with_failures"
    first, second = sorted(results["cells"], key=lambda c: c["order"])
    role = victim.split("-")[1]
    assert first["status"] == "failed"
    assert first["reason"] == f"ProcessDied: {role} 0 (pid {killed}) killed by SIGKILL"
    assert second["status"] == "completed" and second["received"] == second["sent"] > 0  # the broker still serves

    events = store.read(results["run_id"])
    failed = next(e["data"] for e in events if e["type"] == "CellFailed")
    kept = [e for e in events if e["type"] == "IntervalMeasured" and e["data"]["cell_id"] == first["cell_id"]]
    assert failed["intervals"] == len(kept) >= 1  # what was measured before the kill is kept, each second once
    assert len({e["data"]["interval"] for e in kept}) == len(kept)
    assert [e["type"] for e in events].count("RunCompleted") == 1
    report = next(out.glob("*/report.md")).read_text()
    assert f"FAILED: ProcessDied: {role} 0" in report
    assert not [pid for pid, name in _descendants(os.getpid()).items() if name.startswith("bb-")]  # none left over
    observe(f"kill-{role}", fault=f"kill -9 of the {role} process of the first of two cells, about 3 s into it",
            run_status=results["status"], exit_code=cli.returncode, intervals_kept=len(kept),
            cells=[_cell_facts(first), _cell_facts(second)], **_event_facts(events))


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory):
    """A stack of its own (Redis and DynamoDB Local; a broker-kill test starts its broker), so killing its event
    store or a broker touches no other test. The event-store tests run Redis cells: Redis starts in a fraction of a
    second where Kafka's JVM took over 60 s at a load of 30."""
    local = LocalStack(tmp_path_factory.mktemp("own") / "state")
    local.up(services=["redis", "dynamodb"], log=lambda m: None)
    yield local
    local.down(log=lambda m: None)


def _state(pid: int) -> str | None:
    """A process's state letter (/proc/PID/stat); None once it is gone (reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def test_a_producer_killed_before_go_fails_its_cell_with_its_death_and_the_run_goes_on(own_stack, monkeypatch):
    """kill -9 of the first cell's producer after it said it was ready and before the cell told it "go" (the cell's
    last mark before it, `codec_floor`): writing "go" into its closed pipe fails the cell with how it died, not with
    BrokenPipeError (a Kafka cell failed so once in CI, with no other trace); nothing was measured, so nothing is kept;
    the run's next cell completes with every message."""
    endpoints = own_stack.endpoints(required=["redis", "dynamodb"])
    store = DynamoEventStore(EVENTS_TABLE, endpoint_url=endpoints["dynamodb"]["endpoint_url"])
    store.ensure_table()
    request = {"name": "fault-before-go", "brokers": ["redis-streams"], "sizes": [512], "rates": [200],
               "formats": ["json", "raw"], "duration_s": 2, "warmup_s": 0.5, "warmup_until_steady": False,
               "order": "fixed", "drain_timeout_s": 5}
    killed: list[int] = []
    mark = cell_module.Phases.mark

    def kill_before_go(phases, name, at_ns=None):
        if name == "codec_floor" and not killed:
            [pid] = [pid for pid, comm in _descendants(os.getpid()).items() if comm == "bb-producer-0"]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            deadline = time.monotonic() + 10  # until it has ended (its end of the pipe closed with it)
            while _descendants(os.getpid()).get(pid) is not None and _state(pid) not in ("Z", None):
                assert time.monotonic() < deadline, "the producer did not end"
                time.sleep(0.01)
        mark(phases, name, at_ns)

    monkeypatch.setattr(cell_module.Phases, "mark", kill_before_go)
    run = execute_run(request, {"redis-streams": endpoints["redis-streams"]}, store)
    assert killed and run.status == "completed_with_failures", run
    first, second = run.cells
    assert first.status == "failed" and first.reason == f"ProcessDied: producer 0 (pid {killed[0]}) killed by SIGKILL"
    assert second.status == "completed", second.reason

    events = store.read(run.run_id)
    [failed] = [e["data"] for e in events if e["type"] == "CellFailed"]
    assert failed["cell_id"] == first.cell_id and failed["reason"] == first.reason and failed["intervals"] == 0
    assert not [e for e in events if e["type"] == "IntervalMeasured" and e["data"]["cell_id"] == first.cell_id]
    cells = {c["cell_id"]: c for c in build_results(events)["cells"]}
    assert cells[first.cell_id]["status"] == "failed" and cells[first.cell_id]["reason"] == first.reason
    done = cells[second.cell_id]
    assert done["status"] == "completed" and done["received"] == done["sent"] > 0 and done["lost"] == 0, done
    assert_accounting_whole(done)
    assert [e["type"] for e in events].count("RunCompleted") == 1
    assert not [pid for pid, name in _descendants(os.getpid()).items() if name.startswith("bb-")]  # none left over


def test_the_event_store_killed_and_restarted_mid_run_loses_and_repeats_nothing(own_stack, tmp_path):
    """DynamoDB Local stopped (SIGTERM) in the middle of a 2-cell run, `brokerbench local up dynamodb` 5 s after it
    has gone: it comes back on the same port with its data, the writes that failed meanwhile are retried, and the run
    completes with every event once: each cell's intervals 0..n-1 once, its start and its end once, one end of the
    run.

    Not kill -9: DynamoDB Local answers a write before it is durable against that (killed within 10 ms of the answer
    to a one-item TransactWriteItems, the item was gone when it came back in 9 of 24 writes here; stopped by SIGTERM
    at once, in 0 of 12; in CI a cell's interval 0 was gone so), which would test the stand-in rather than the run:
    a write DynamoDB itself answers is durable. A store that goes away, refuses the connections and comes back is
    the run's to survive."""
    spec = {"name": "fault-event-store", "brokers": ["redis-streams"], "sizes": [512], "rates": [500],
            "formats": ["json", "raw"], "duration_s": 5, "warmup_s": 1, "warmup_until_steady": False,
            "order": "fixed"}
    state = str(own_stack.state_dir)
    before = own_stack.endpoints(required=["dynamodb"])["dynamodb"]
    pid = json.loads((own_stack.state_dir / "stack.json").read_text())["dynamodb"]["pids"][0]
    cli = _run_until_measuring(state, spec, tmp_path)
    time.sleep(3)  # the first cell is measuring, its intervals being written
    os.kill(pid, signal.SIGTERM)
    gone = time.monotonic() + 60
    while alive(pid) and time.monotonic() < gone:
        time.sleep(0.1)
    assert not alive(pid)
    time.sleep(5)
    restarted = subprocess.run([str(BIN), "--state-dir", state, "local", "up", "dynamodb"], capture_output=True,
                               text=True, timeout=120)
    assert restarted.returncode == 0, restarted.stderr
    after = own_stack.endpoints(required=["dynamodb"])["dynamodb"]
    assert after == before  # the same port: the run in flight finds it again
    stdout, stderr = cli.communicate(timeout=300)
    assert cli.returncode == 0, stdout[-2000:] + stderr[-2000:]

    results = json.loads(next((tmp_path / "out").glob("*/results.json")).read_text())
    assert results["status"] == "completed" and all(c["status"] == "completed" for c in results["cells"])
    events = DynamoEventStore(EVENTS_TABLE, endpoint_url=after["endpoint_url"]).read(results["run_id"])
    assert len({e["event_id"] for e in events}) == len(events)
    kinds = [e["type"] for e in events]
    assert kinds.count("CellStarted") == kinds.count("CellCompleted") == 2 and kinds.count("RunCompleted") == 1
    for end in (e["data"] for e in events if e["type"] == "CellCompleted"):
        seconds = sorted(e["data"]["interval"] for e in events
                         if e["type"] == "IntervalMeasured" and e["data"]["cell_id"] == end["cell_id"])
        assert seconds == list(range(end["intervals"])), end["cell_id"]
    observe("event-store-restarted", fault="DynamoDB Local stopped (SIGTERM) 3 s into the first of two cells, "
                                           "`brokerbench local up dynamodb` 5 s after it had gone (same port, same "
                                           "data)",
            run_status=results["status"], exit_code=cli.returncode, missing_intervals=0,
            cells=[_cell_facts(c) for c in results["cells"]], **_event_facts(events))


def _store_pid(stack) -> int:
    return json.loads((stack.state_dir / "stack.json").read_text())["dynamodb"]["pids"][0]


def test_an_event_store_that_stays_down_ends_the_cli_with_exit_3_and_a_way_back(own_stack, tmp_path):
    """kill -9 of DynamoDB Local mid-run, not started again: the writes retry with backoff and give up (after
    BROKERBENCH_STORE_OUTAGE_S), the CLI's progress reads give up after as long and stop the run, the CLI says
    which store and how to bring it back and exits 3 (no traceback), and no workflow interpreter is left running.
    Started again, the store has the run up to the outage, each event once."""
    spec = {"name": "fault-store-down", "brokers": ["redis-streams"], "sizes": [512], "rates": [500],
            "formats": ["json", "raw"], "duration_s": 5, "warmup_s": 1, "warmup_until_steady": False,
            "order": "fixed"}
    state = str(own_stack.state_dir)
    own_stack.up(services=["dynamodb"], log=lambda m: None)  # up again if an earlier test left it down
    # Each call gives a store that does not answer 5 s here (60 s by default), so the run gives up in seconds.
    cli = _run_until_measuring(state, spec, tmp_path, {"BROKERBENCH_STORE_OUTAGE_S": "5"})
    time.sleep(3)
    os.kill(_store_pid(own_stack), signal.SIGKILL)
    stdout, stderr = cli.communicate(timeout=400)
    assert cli.returncode == 3, stdout[-2000:] + stderr[-2000:]
    assert "Traceback" not in stderr and "event store:" in stderr and "does not answer" in stderr
    assert "brokerbench local up dynamodb" in stderr
    run_id = stdout.split("run ", 1)[1].split(":", 1)[0].strip()
    assert run_id in stderr
    assert _interpreters_of(state) == []

    own_stack.up(services=["dynamodb"], log=lambda m: None)
    db = own_stack.endpoints(required=["dynamodb"])["dynamodb"]
    events = DynamoEventStore(EVENTS_TABLE, endpoint_url=db["endpoint_url"]).read(run_id)
    assert events and len({e["event_id"] for e in events}) == len(events)
    assert [e["type"] for e in events].count("RunRequested") == 1
    shown = subprocess.run([str(BIN), "--state-dir", state, "report", run_id, "--out", str(tmp_path / "report")],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr  # what was stored before the outage can be read
    observe("event-store-down", fault="kill -9 of DynamoDB Local 3 s into the first of two cells, not started "
                                      "again until the CLI had ended (BROKERBENCH_STORE_OUTAGE_S=5)",
            exit_code=cli.returncode, message=stderr.strip().splitlines()[-2:], interpreters_left=0,
            after_restart=_event_facts(events))


BROKER_NAMES = {"kafka": "Kafka", "redis": "Redis", "pulsar": "Pulsar", "nats": "NATS", "rabbitmq": "RabbitMQ"}


class _OffsetsWatch:
    """Samples, from outside the run, the start and end offsets (the end: the high watermark) of the first cell's
    partition every half second while the broker is up: beside the run's own count (end minus start), it tells a
    broker that dropped messages after it had held them from one that never held them, or a start that moved."""

    def __init__(self, bootstrap: str):
        from confluent_kafka import Consumer

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bb-test-watch", "log_level": 0,
                                  "isolation.level": "read_uncommitted", "enable.auto.commit": False})
        self.samples: list[tuple[float, int, int]] = []  # (s, start, end)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        t0, topic = time.monotonic(), None
        while not self.done.wait(0.5):
            try:
                if topic is None:
                    topic = next((t for t in self.consumer.list_topics(timeout=1).topics if t.endswith("-c00000")),
                                 None)
                    continue
                low, high = self.consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=1, cached=False)
                self.samples.append((round(time.monotonic() - t0, 1), low, high))
            except KafkaException:
                continue

    def stop(self) -> dict:
        self.done.set()
        self.thread.join(10)
        self.consumer.close()
        highs = [high for _, _, high in self.samples if high >= 0]
        return {"max_end": max(highs, default=None), "last (s, start, end)": self.samples[-8:]}


@contextmanager
def _ended_on_failure(cli):
    """A failed assertion while the CLI runs ends it, so its run does not hold the module's stack for the next test
    ("local stack busy")."""
    try:
        yield
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()


def _endpoint(stack, service: str) -> dict:
    """The service's endpoint without its pids (they change when it is started again)."""
    return {k: v for k, v in stack.endpoint(service).items() if k != "pids"}


def _cell_killed_in(events: list[dict], killed_at: datetime) -> str | None:
    """The cell that was running when the broker was killed, by the stored events' times: the last to start before
    the kill, unless it had ended before it (then None)."""
    when = lambda event: datetime.fromisoformat(event["at"])  # noqa: E731
    started = [e for e in events if e["type"] == "CellStarted" and when(e) <= killed_at]
    if not started:
        return None
    cell_id = max(started, key=when)["data"]["cell_id"]
    ended = [e for e in events if e["type"] in ("CellCompleted", "CellFailed") and e["data"]["cell_id"] == cell_id]
    return None if any(when(e) < killed_at for e in ended) else cell_id


def _crash_facts(cell: dict, log, run_id: str) -> str:
    """The crashed cell's figures and what the broker's log says about the run, in full (a dict given to assert is
    cut short), so a failure in CI can be read without running it again."""
    lines = [line for line in log.read_text(errors="replace").splitlines()
             if run_id.lower() in line.lower() or "DUPLICATE_BROKER" in line or "Kafka Server started" in line]
    return json.dumps(_cell_facts(cell)) + "\n" + "\n".join(line[:300] for line in lines[-80:])


def _redis_at_a_free_port(tmp_path) -> tuple:
    """A Redis driver for a free port where nothing runs yet, and the command that starts a Redis there."""
    port = free_port()
    driver = get_driver("redis-streams", {"host": HOST, "port": port}, validate(
        {"brokers": ["redis-streams"], "sizes": [512], "rates": [1], "formats": ["raw"]})["client"])
    return driver, ["redis-server", "--bind", HOST, "--port", str(port), "--save", "", "--appendonly", "no", "--dir",
                    str(tmp_path)]


@contextmanager
def _started_in(seconds: float, command: list[str], after: threading.Event | None = None):
    """`command` started `seconds` from now (from when `after` is set, if given), stopped at the end; not started once
    the block has ended. Yields a list that is given the moment of the start just before the process starts: a client
    that reached the process finds it there. (Given the process once started, a loaded pass's timer thread got the CPU
    back only after the test's thread had reached Redis and found the list empty.)"""
    started: list[float] = []
    servers: list[subprocess.Popen] = []

    ended = threading.Event()

    def start() -> None:
        if after is not None:
            after.wait(300)
        if ended.wait(seconds):
            return
        started.append(time.monotonic())
        servers.append(subprocess.Popen(command, stdout=subprocess.DEVNULL))

    later = threading.Thread(target=start, daemon=True)
    later.start()
    try:
        yield started
    finally:
        ended.set()
        if after is not None:
            after.set()
        later.join()
        for server in servers:
            server.terminate()
            server.wait(30)


def test_a_redis_started_while_a_cell_asks_for_it_serves_the_cell(tmp_path):
    """The Redis driver's check (the first thing a cell does) waits for Redis within its timeout, as Kafka's does:
    a Redis started 8 s after the check began (one started again after a crash, on a loaded host) answers it, where
    redis-py's own retries alone gave up after 4 to 7 s; with none started the check names the address once its
    timeout has passed."""
    driver, command = _redis_at_a_free_port(tmp_path)
    with pytest.raises(BrokerUnavailable, match=f"Redis at {HOST}:{driver.endpoint['port']} did not answer"):
        driver.check(timeout_s=0.5)
    with _started_in(8, command) as started:
        driver.check(timeout_s=120)  # a deadline that catches a hang, not a slow host
        assert started, "the check answered before Redis was started"


def test_a_cell_that_ends_while_its_broker_is_down_waits_for_the_brokers_count(tmp_path, monkeypatch):
    """The broker's own count at a cell's end: a Redis that does not answer then (it crashed, and a client that gives
    up at once on a lost connection ended the cell before it was back: RabbitMQ streams in CI) is waited for and
    asked again, so the count is given (the 2 entries it kept on disk); one that never comes back leaves the count
    not given after COUNT_WAIT_S, not a cell that hangs."""
    driver, command = _redis_at_a_free_port(tmp_path)
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    driver.check(timeout_s=60)
    for n in range(2):
        driver.connect().xadd(stream_key("bb-count", 0), {"n": n})
    driver.connect().shutdown(save=True)  # the entries on disk, read again by the next start
    first.wait(30)
    run = cell_module._CellRun.__new__(cell_module._CellRun)
    run.driver, run.topic, run.cell, run.faults = driver, "bb-count", {"partitions": 1}, None  # a cell without faults
    monkeypatch.setattr(cell_module, "COUNT_WAIT_S", 1.0)
    started_at = time.monotonic()
    assert run._final_count() is None and time.monotonic() - started_at >= 1.0
    monkeypatch.setattr(cell_module, "COUNT_WAIT_S", 120.0)  # a deadline that catches a hang, not a slow host
    with _started_in(3, command) as started:
        assert run._final_count() == 2
        assert started, "counted before Redis was started"


def test_a_cell_that_loses_its_broker_waits_for_it_so_the_next_cell_is_served(tmp_path, monkeypatch):
    """A cell whose broker dies under it (a Redis consumer gives up at once on a lost connection, as the quorum-queue
    consumer does on one node reached directly) fails, and waits for the broker before it ends: the run's next cell
    meets the broker started again instead of being refused by its 5 s check while the broker starts (RabbitMQ's
    next cell was, on a loaded host). The broker is started again 15 s after the kill: later than redis-py's own
    retries (4 to 7 s; the cell's clean-up waits them out whatever the cell does, and ended 8.2 s after the kill at a
    load of 6 when it did not wait for the broker), and later than the cell's own end had it run to it (10 s measured
    and a 2 s drain from 1 s before the kill). Counted from the kill, not from the cell's start, whose set-up before
    it measures took 2 to 17 s here. A cell refused at its start (no broker there) does not wait: a run against a
    broker that is down fails each cell in the check's time."""
    driver, command = _redis_at_a_free_port(tmp_path)
    spec = validate({"brokers": ["redis-streams"], "sizes": [512], "rates": [200], "formats": ["raw"],
                     "duration_s": 10, "warmup_s": 0.5, "warmup_until_steady": False, "drain_timeout_s": 2})
    cell = expand(spec)[0]
    monkeypatch.setattr(cell_module, "COUNT_WAIT_S", 600.0)  # a deadline that catches a hang, not a slow host
    started_at = time.monotonic()
    refused = cell_module.run_cell(new_run_id(), cell, driver.endpoint, MemoryEventStore())
    assert refused.status == "failed" and "did not answer" in refused.reason, refused
    assert time.monotonic() - started_at < 300, "a cell refused at its start waited for the broker"
    first = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    driver.check(timeout_s=60)
    store = MemoryEventStore()
    measuring, killed = threading.Event(), threading.Event()

    def progress(report) -> None:
        if report.phase == "measuring":
            measuring.set()

    def kill_once_measuring() -> None:
        measuring.wait(120)
        time.sleep(1)
        first.kill()
        killed.set()

    killer = threading.Thread(target=kill_once_measuring, daemon=True)
    killer.start()
    run_id = new_run_id()
    with _started_in(15, command, after=killed) as started:
        outcome = cell_module.run_cell(run_id, cell, driver.endpoint, store, progress)
        assert started, "the cell ended before its broker was started again"
        driver.check(timeout_s=0.5)  # answering as the cell ends: the next cell is served
    killer.join(10)
    assert measuring.is_set() and first.poll() is not None
    assert outcome.status == "failed", outcome
    ended = [e for e in store.read(run_id) if e["type"] == "CellFailed"]
    assert len(ended) == 1 and ended[0]["data"]["reason"] == outcome.reason


DATA_KEPT = {"kafka": ", same cluster id", "redis": ", its append-only file", "pulsar": ", its metadata and ledgers",
             "nats": ", its JetStream store", "rabbitmq": ", its node's database and message stores"}


@pytest.mark.parametrize("service, broker", [("kafka", "kafka"), ("redis", "redis-streams"), ("pulsar", "pulsar"),
                                             ("nats", "nats-jetstream"), ("rabbitmq", "rabbitmq-streams"),
                                             ("rabbitmq", "rabbitmq-quorum")])
def test_a_broker_killed_mid_cell_and_started_again_keeps_its_data_and_serves_the_next_cells(service, broker, own_stack,
                                                                                             tmp_path):
    """kill -9 of the broker (Kafka, Redis, Pulsar, NATS, RabbitMQ's node under a stream or a quorum queue) in the
    middle of the first of two cells (Pulsar: of one),
    `brokerbench local up` 3 s later: it comes back on its port with its data (Kafka: the same cluster; Redis: its
    append-only file; Pulsar: its metadata and ledgers; NATS: its JetStream store; RabbitMQ: its node's database), the cell's messages are each counted once in a class of
    the accounting (sent = received + late + undelivered + lost + send errors + unacknowledged) or the crash shows
    as latency, the broker's own count is at most the acknowledged messages, the unacknowledged ones and the copies
    the consumers saw twice, a count below the acknowledged ones shows in the report, and the next cell runs against
    the broker started again, every message delivered.

    A Redis cell whose consumer loses its connection fails at once, and the next cell may ask for Redis before it is
    back (a loaded host slows the restart): the driver's check waits for it (5 s), as Kafka's does, so the cell is
    served, not refused."""
    # Pulsar measures the cell it crashed in only: its standalone, killed and started again on its data, can
    # lose its bookie's registration about a minute later ("Not enough non-faulty bookies", 1 of 3 tries here),
    # which would fail the cells after it for a reason of Pulsar's own.
    # Under a quorum queue RabbitMQ's cell fails at once (its consumer does not reconnect to one node reached
    # directly), before the node is started again: the failed cell waits for its broker (COUNT_WAIT_S) before it ends, so the
    # next cell measures the node started again instead of being refused while it starts (as it was on a loaded
    # host, when the next cell's 5 s check came first).
    one_cell = service == "pulsar"
    formats = ["json"] if one_cell else ["json", "raw"]
    spec = {"name": f"fault-{service}", "brokers": [broker], "sizes": [512], "rates": [500],
            "formats": formats, "duration_s": 6, "warmup_s": 1, "warmup_until_steady": False,
            "order": "fixed", "drain_timeout_s": 5}
    state = str(own_stack.state_dir)
    own_stack.up(services=[service, "dynamodb"], log=lambda m: None)
    before = _endpoint(own_stack, service)
    if service == "kafka":
        data = lambda: sorted((own_stack.state_dir / "kafka" / "data").glob("**/meta.properties"))[0].read_text()  # noqa: E731
    elif service in ("pulsar", "nats", "rabbitmq"):  # Pulsar's metadata and ledgers, the JetStream store, the node's database
        data = lambda: sorted(p.name for p in (own_stack.state_dir / service / "data").iterdir())  # noqa: E731
    else:  # a key written before the run (and fsynced to the append-only file) is there after the restart
        import redis

        client = redis.Redis(port=before["port"])
        client.set("bb-before-the-crash", "kept")
        time.sleep(1.5)  # appendfsync everysec
        data = lambda: client.get("bb-before-the-crash")  # noqa: E731
    kept = data()
    # The broker's process: RabbitMQ's node is the second (after its epmd, which `local up` stops and starts again).
    pids = json.loads((own_stack.state_dir / "stack.json").read_text())[service]["pids"]
    pid = pids[-1 if service == "rabbitmq" else 0]
    cli = _run_until_measuring(state, spec, tmp_path)
    with _ended_on_failure(cli):
        watch = _OffsetsWatch(before["bootstrap_servers"]) if service == "kafka" else None
        time.sleep(3)
        killed_at = datetime.now(timezone.utc)
        os.kill(pid, signal.SIGKILL)
        time.sleep(3)
        # The CLI's command in this process: no interpreter start-up (seconds on a loaded host) delays the restart.
        assert main(["--state-dir", state, "local", "up", service]) == 0
        assert _endpoint(own_stack, service) == before and data() == kept and kept
        stdout, stderr = cli.communicate(timeout=400)
        seen = watch.stop() if watch else None
    assert "Traceback" not in stderr, stderr[-3000:]

    results = json.loads(next((tmp_path / "out").glob("*/results.json")).read_text())
    assert cli.returncode == (0 if results["status"] == "completed" else 1), stdout[-2000:]
    first, *rest = sorted(results["cells"], key=lambda c: c["order"])
    report = next((tmp_path / "out").glob("*/report.md")).read_text()
    log = json.loads((own_stack.state_dir / "stack.json").read_text())[service]["log"]
    facts = _crash_facts(first, Path(log), results["run_id"]) + f"\noffsets seen from outside: {seen}"
    events = DynamoEventStore(EVENTS_TABLE, endpoint_url=own_stack.endpoints(required=["dynamodb"])["dynamodb"][
        "endpoint_url"]).read(results["run_id"])
    # The kill is meant for the first cell: one that ended before it (a failure of its own, such as a readiness
    # probe given up on a loaded host: NATS in CI) let the kill hit the next cell, which then fails the "every
    # message delivered" check below for a reason that is not the next cell's.
    hit = _cell_killed_in(events, killed_at)
    assert hit == first["cell_id"], f"the kill at {killed_at.isoformat()} hit {hit}, not the first cell, which " \
                                    f"had ended: {first['status']}: {first.get('reason')}\n{facts}"
    if first["status"] == "completed":
        # undelivered + lost: their sum is known even when the broker could not tell its backlog after the crash
        classes = ("received", "late", "undelivered_or_lost", "send_errors", "unacknowledged")
        assert_accounting_whole(first, facts)
        # The crash is not hidden: counted in a class of the accounting, or (a client that sends again what the
        # broker had not acknowledged: Kafka's, Pulsar's) in the latency of the messages that waited for it. With
        # messages missing, the longest latency is a lower bound (they count at +inf).
        latency = first["end_to_end_latency_us"]
        longest = latency["max"] if latency["max"] is not None else latency["lower_bounds"]["max"]
        waited = longest >= 2_000_000
        assert sum(first[k] for k in classes[1:]) > 0 or waited, facts
        count = first["broker_count"]
        # Pulsar's counter lives in the broker's memory, a quorum queue's (the management API's) in the node's:
        if service == "pulsar" or broker == "rabbitmq-quorum":
            assert count is None, facts  # after a restart it is not given
        else:
            assert count is not None, facts
            # Besides what it acknowledged, the broker may hold messages it stored without telling the producer
            # before it died (unacknowledged), and, twice, those it stored and the producer sent again after the
            # restart (Kafka's producer is not idempotent here): each copy the consumers saw is counted apart.
            assert count["observed"] <= count["expected"] + first["unacknowledged"] + first["duplicated"], facts
            if count["observed"] < count["expected"]:
                # A broker that lost messages it had acknowledged (once in CI: Kafka held 1,201 of 3,501 after its
                # restart) is a finding about the broker, which the report must show, not hide.
                assert f"broker count {count['observed'] - count['expected']:+,}" in report, facts
                warnings.warn(f"{BROKER_NAMES[service]} holds fewer messages than it acknowledged:\n{facts}")
    else:
        assert first["reason"]
    for cell in rest:
        tail = "\n".join(line[:300] for line in Path(log).read_text(errors="replace").splitlines()[-40:])
        told = f"{json.dumps(_cell_facts(cell))}\n(the first cell: {first['status']}: {first.get('reason')})\n" \
               f"the broker's log ends:\n{tail}"
        assert cell["status"] == "completed", told
        assert cell["received"] == cell["sent"] > 0 and not cell["has_loss"], told
        if broker == "rabbitmq-quorum":  # queues made on the node started again: its count is given, and agrees
            assert cell["broker_count"] is not None and cell["broker_count"]["difference"] == 0, told
    assert len(events) == len({e["event_id"] for e in events})
    observe(f"kill-{broker if service == 'rabbitmq' else service}", fault=f"kill -9 of {BROKER_NAMES[service]} 3 s into the first of "
                                     f"{len(formats)} cell(s), `brokerbench local up {service}` 3 s later (same port, same data"
                                     f"{DATA_KEPT[service]})",
            run_status=results["status"], exit_code=cli.returncode,
            cells=[_cell_facts(c) for c in sorted(results["cells"], key=lambda c: c["order"])], **_event_facts(events))
