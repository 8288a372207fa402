"""A run's outcome: exit codes from the stored result and the workflow, the run's end written last,
progress that reads only new events, one local run per stack, and the payload pool's size."""

import json
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from synthetic import synthetic_run

from brokerbench.cli import EXIT_CELLS_FAILED, EXIT_OK, EventProgress, run_exit_code
from brokerbench.events import StoreUnavailable
from brokerbench.events.memory import MemoryEventStore
from brokerbench.local.stack import LocalStack, StackBusy
from brokerbench.spec import expand, validate
from brokerbench.worker.payloads import MAX_POOL_SIZE, POOL_SIZE, payload_pool, pool_size_for
from brokerbench.workflow import steps, wiring

SPEC = {"name": "outcome", "brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [100],
        "formats": ["raw", "json"], "repeats": 2}


class CountingStore(MemoryEventStore):
    """The in-memory event store, counting the events each read returns and naming each event offered to append."""

    def __init__(self, events=()):
        self.returned = 0
        self.appended: list[str] = []
        super().__init__(events)

    def append(self, events):
        self.appended += [e["type"] for e in events]
        return super().append(events)

    def read(self, run_id, *args, **kwargs):
        out = super().read(run_id, *args, **kwargs)
        self.returned += len(out)
        return out


# -- exit codes ------------------------------------------------------------------------------
def execution(status="SUCCEEDED", error=None, cause=None, output=None):
    return SimpleNamespace(status=status, error=error, cause=cause, output=output)


@pytest.mark.parametrize("status,workflow,code,says", [
    ("completed", execution(), EXIT_OK, []),
    ("completed_with_failures", execution(), EXIT_CELLS_FAILED, []),
    ("failed", execution("FAILED", "RunFailed", "Aggregate: boom"), EXIT_CELLS_FAILED, ["run failed: boom"]),
    # every cell completed, but a later step failed: not a success
    ("completed", execution("FAILED", "TeardownFailed", "kafka: stop failed"), EXIT_CELLS_FAILED,
     ["tearing down the targets failed"]),
    ("running", execution("FAILED", "RunFailed", "States.Runtime"), EXIT_CELLS_FAILED, ["run ended running"]),
])
def test_the_exit_code_comes_from_the_stored_result_and_the_workflow(status, workflow, code, says):
    results = {"status": status, "reason": "boom" if status == "failed" else None}
    got, problems = run_exit_code(results, workflow)
    assert got == code
    for text in says:
        assert any(text in p for p in problems), problems
    if status == "failed":
        assert len(problems) == 1  # the reason once, not again as the workflow's error


# -- the run's end comes after its reports ------------------------------------------------------
@pytest.fixture
def finished_cells():
    """A run whose cells all ended, and nothing after them (what Aggregate finds)."""
    events = [e for e in synthetic_run(SPEC, intervals=3) if e["type"] not in ("RunCompleted", "RunFailed")]
    return CountingStore(events), events[0]["run_id"]


class Sink:
    def __init__(self, store, fail_on=None):
        self.store, self.fail_on, self.files = store, fail_on, {}

    def write(self, run_id, name, body):
        if name == self.fail_on:
            raise OSError(f"disk full writing {name}")
        assert "RunCompleted" not in self.store.appended  # nothing is published after the run's end
        self.files[name] = body
        return f"mem://{run_id}/{name}"

    def read(self, run_id, name):
        return self.files.get(name)


def test_aggregate_publishes_then_writes_the_end_and_the_files_show_it(finished_cells, monkeypatch):
    store, run_id = finished_cells
    sink = Sink(store)
    monkeypatch.setattr(wiring, "event_store", lambda: store)
    monkeypatch.setattr(wiring, "reports", lambda: sink)
    check = steps.check_regression({"run_id": run_id})
    assert check["baseline_run_id"] is None and check["check_file"].endswith("regression.json")
    summary = steps.aggregate({"run_id": run_id, "check": check})
    assert summary["status"] == "completed"
    assert store.appended[-2:] == ["ReportBuilt", "RunCompleted"]
    results = json.loads(sink.files["results.json"])
    assert results["status"] == "completed"  # built with the end it was about to get
    stored_end = next(e for e in store.read(run_id) if e["type"] == "RunCompleted")
    assert results["finished_at"] == stored_end["at"]
    report = json.loads(sink.files["report.json"])
    assert report["regression_check"] == json.loads(sink.files["regression.json"])  # passed through as is
    assert report["regression_check"]["baseline_run_id"] is None


def test_a_failure_while_publishing_leaves_the_run_end_free_for_run_failed(finished_cells, monkeypatch):
    store, run_id = finished_cells
    monkeypatch.setattr(wiring, "event_store", lambda: store)
    monkeypatch.setattr(wiring, "reports", lambda: Sink(store, fail_on="report.html"))
    with pytest.raises(OSError, match="disk full"):
        steps.aggregate({"run_id": run_id})
    assert "RunCompleted" not in store.appended
    steps.record_run_failed({"run_id": run_id, "failure": {"Error": "OSError", "Cause": "disk full writing report.html"}})
    [end] = [e for e in store.read(run_id) if e["type"] in ("RunCompleted", "RunFailed")]
    assert end["type"] == "RunFailed" and "disk full" in end["data"]["reason"]


def test_aggregate_fails_when_the_check_it_was_given_cannot_be_read(finished_cells, monkeypatch):
    store, run_id = finished_cells
    monkeypatch.setattr(wiring, "event_store", lambda: store)
    monkeypatch.setattr(wiring, "reports", lambda: Sink(store))
    with pytest.raises(FileNotFoundError, match="regression.json"):
        steps.aggregate({"run_id": run_id, "check": {"check_file": "gone"}})
    assert "RunCompleted" not in store.appended


# -- progress reads only what is new -------------------------------------------------------------
class Bars:
    def __init__(self):
        self.tasks, self.completed = {}, {}

    def add_task(self, name, total, status):
        self.tasks[len(self.tasks)] = name
        return len(self.tasks) - 1

    def update(self, task, completed=None, status=None):
        self.completed[self.tasks[task]] = completed

    def advance(self, task):
        pass


def test_progress_reads_each_event_once_and_follows_the_shuffled_order():
    events = synthetic_run({**SPEC, "order_seed": 3}, intervals=5)
    requested, rest = events[0], events[1:]
    cells = requested["data"]["cells"]
    assert [c["index"] for c in cells] != sorted(c["index"] for c in cells)  # a shuffled run
    store = CountingStore([requested])
    progress = EventProgress(store, requested["run_id"], Bars())
    progress.poll()
    by_cell = {}
    for event in rest:
        if "cell_id" in event["data"]:
            by_cell.setdefault(event["data"]["cell_id"], []).append(event)
    polls = 0
    for cell in cells:  # the cells' events arrive in run order, a few at a time, with a poll in between
        for event in by_cell[cell["cell_id"]]:
            store.append([event])
            progress.poll()
            polls += 1
    store.append([e for e in rest if "cell_id" not in e["data"]])
    progress.poll()
    assert progress.finished == {c["cell_id"] for c in cells}
    assert store.returned == 1 + sum(len(v) for v in by_cell.values())  # the header, then each event once
    assert progress.reads <= 1 + 2 * (polls + 1)  # at most the current cell and the next per poll


def test_progress_of_a_run_not_stored_yet_waits_for_its_header():
    store = CountingStore()
    progress = EventProgress(store, "20260101T000000Z-abcdef", Bars())
    progress.poll()
    progress.poll()
    assert progress.cells is None and progress.reads == 2


class DownStore(CountingStore):
    """A store that stops answering once `down` is set, as a killed DynamoDB Local does to a read."""

    down = False

    def read(self, *args, **kwargs):
        if self.down:
            raise StoreUnavailable("the event store (test) does not answer: connection refused")
        return super().read(*args, **kwargs)


def test_progress_waits_out_a_short_outage_and_gives_up_after_the_stores_own_wait():
    events = synthetic_run(SPEC, intervals=2)
    store = DownStore([events[0]])
    progress = EventProgress(store, events[0]["run_id"], Bars(), give_up_s=0.3)
    progress.poll()
    store.down = True
    progress.poll()  # shown, not fatal
    assert progress.unavailable
    store.down = False
    time.sleep(0.35)
    progress.poll()  # it answered again: the outage is over, and the next one is timed from its own start
    assert not progress.unavailable and progress.unavailable_since is None
    store.down = True
    progress.poll()
    time.sleep(0.35)
    with pytest.raises(StoreUnavailable, match="does not answer"):
        progress.poll()


def test_progress_without_a_limit_never_gives_up():
    store = DownStore()
    store.down = True
    progress = EventProgress(store, "20260101T000000Z-abcdef", Bars())
    for _ in range(3):
        progress.poll()
    assert progress.unavailable


# -- one local run per stack ---------------------------------------------------------------------
def test_a_second_run_on_the_same_stack_is_refused_with_the_first_ones_name(tmp_path):
    stack = LocalStack(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from brokerbench.local.stack import LocalStack\n"
        "with LocalStack(Path(sys.argv[1])).run_lock('20260101T000000Z-aaaaaa'):\n"
        "    print('held', flush=True); time.sleep(60)"), str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert stack.run_holder()["run_id"] == "20260101T000000Z-aaaaaa"
        with pytest.raises(StackBusy) as refused:
            with stack.run_lock("20260101T000001Z-bbbbbb"):
                pass
        message = str(refused.value)
        assert "20260101T000000Z-aaaaaa" in message and f"pid {holder.pid}" in message
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 5
    while stack.run_holder() is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stack.run_holder() is None  # the lock went with the process that held it
    with stack.run_lock("20260101T000002Z-cccccc"):
        assert stack.run_holder()["run_id"] == "20260101T000002Z-cccccc"
    assert stack.run_holder() is None


def test_cli_refuses_a_second_run_and_local_down_while_a_run_holds_the_stack(tmp_path, capsys):
    from brokerbench.cli import main

    stack = LocalStack(tmp_path / "state")
    with stack.run_lock("20260101T000000Z-aaaaaa"):
        code = main(["--state-dir", str(stack.state_dir), "run", "--suite", "smoke", "--out", str(tmp_path / "out")])
        err = capsys.readouterr().err
        assert code == 3
        assert "busy" in err and "20260101T000000Z-aaaaaa" in err
        assert main(["--state-dir", str(stack.state_dir), "local", "down"]) == 3
    assert not (tmp_path / "out").exists() and not stack.state_file.exists()  # nothing was started


# -- same footing: settings and payloads ----------------------------------------------------------
def test_settings_state_what_each_mode_means_per_broker():
    from brokerbench.environment import broker_settings

    client = validate(SPEC)["client"]
    kafka = broker_settings("kafka", {"bootstrap_servers": "127.0.0.1:1"}, client)
    assert kafka["acks"] == "all" and kafka["modes"]["batch"]["linger_ms"] == client["linger_ms"]
    assert kafka["modes"]["batch"]["batch_bytes"] == client["batch_bytes"]
    assert kafka["modes"]["single"] == {**kafka["modes"]["single"], "linger_ms": 0, "in_flight": 1}
    from brokerbench.local.stack import free_port

    redis = broker_settings("redis-streams", {"host": "127.0.0.1", "port": free_port()}, client)
    assert redis["modes"]["batch"]["in_flight"] == client["pipeline_depth"]
    assert redis["modes"]["single"]["in_flight"] == 1
    assert redis["persistence"] is None  # nothing answers on that port: unknown, not guessed
    assert kafka["persistence"]["replication_factor"] is kafka["persistence"]["nodes"] is None


def cell(**changes):
    doc = {"brokers": ["kafka"], "sizes": [1024], "rates": [100], "formats": ["json"], **changes}
    return expand(validate(doc))[0]


def test_uncompressed_cells_keep_the_small_pool_and_compressed_ones_never_repeat_within_a_batch():
    assert pool_size_for(cell()) == POOL_SIZE
    compressed = cell(client={"compression": "lz4"})
    size = pool_size_for(compressed)
    assert size >= 1048576 // 1024 + 1  # one more than a full batch.size of 1 KB records
    small_batch = pool_size_for(cell(client={"compression": "zstd", "batch_bytes": 65536}))
    assert 65536 // 1024 + 1 <= small_batch <= 65536 // 1000 + 2
    assert pool_size_for(cell(sizes=[160], client={"compression": "gzip"})) <= MAX_POOL_SIZE + 8
    # partitions: the pool size is coprime with them, so every partition's batches cycle through all of it
    from math import gcd

    for partitions in (2, 3, 4, 6):
        n = pool_size_for(cell(partitions=partitions, client={"compression": "lz4"}))
        assert gcd(n, partitions) == 1
        seen = [i % n for i in range(0, 3 * n * partitions, partitions)]  # what partition 0 carries
        assert len(set(seen[:n])) == n


def test_a_large_pool_is_distinct():
    pool = payload_pool("json", "record", 1024, 1025)
    assert len({json.dumps(o, sort_keys=True) for o in pool.objects}) == 1025
    assert all(abs(s - 1024) <= 10 for s in pool.encoded_sizes)
    raw = payload_pool("raw", "record", 1024, 2000)
    assert len(set(raw.objects)) == 2000
