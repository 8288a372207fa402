"""Two `brokerbench run`s at once on one machine, each with its own --state-dir: they share nothing.

Each run starts its own Redis and its own DynamoDB Local (the event store), on free ports of its own, and stops
them at its end. The second run starts first, and the first once the second's services run (started together, a
loaded CI host once had the first run measured and gone before the second measured at all; started only once the
second measured, another had the second's cells done before the first's event store was up); the second run's cells
are longer, so the first run's teardown happens while the second measures. The test watches both as they run: the services each stack records (stack.json) and the cells'
processes. Whenever a run measures, its own services must be running; when the first run has ended (its teardown
done), the other's must still be; every cell of both must complete with every message received; each event store
must hold its own run's events only, each once; and nothing either run started may be left running.

The refusal of a second run on the same state folder (exit 3, naming the run that holds it) is tested in
tests/integration/test_cli_run.py (test_ctrl_c_keeps_what_was_measured_and_leaves_the_stack_running) and
tests/unit/test_run_outcome.py.
"""

import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.local.dynamodb import EVENTS_TABLE
from brokerbench.local.stack import LocalStack
from fault_tools import BIN, cell_facts, descendants, event_facts, interpreters_of, running
from reliability_log import observe

BROKER = "redis"  # a service of its own per run, as Kafka would be, started in a fraction of the time (its JVM)
DURATIONS_S = {"one": 3, "two": 12}  # each run's cells: the second run ends seconds after the first has torn down


def _spec(run: str) -> dict:
    return {"name": f"two-runs-{run}", "brokers": ["redis-streams"], "sizes": [512], "rates": [500],
            "formats": ["json", "raw"], "duration_s": DURATIONS_S[run], "warmup_s": 1, "warmup_until_steady": False,
            "order": "fixed"}


def _services(state) -> dict[str, dict]:
    """The services the stack in `state` records as started: name -> {pids, port, ...}."""
    try:
        return json.loads((state / "stack.json").read_text())
    except (OSError, ValueError):  # not written yet, or gone after the teardown
        return {}


def _pids(services: dict[str, dict]) -> set[int]:
    return {pid for record in services.values() for pid in record["pids"]}


def _stack_up(state) -> bool:
    """Whether the stack in `state` records both its services, each with its processes running."""
    services = _services(state)
    return set(services) == {BROKER, "dynamodb"} and running(_pids(services)).keys() == _pids(services)


def _measuring(clis: dict) -> set[str]:
    """The runs whose cell has a producer running."""
    return {run for run, cli in clis.items() if "bb-producer-0" in descendants(cli.pid).values()}


def _watch(clis: dict, states: dict, began: float) -> dict:
    """Polls both runs until both have ended: every service each stack recorded (name -> pids) and its ports,
    whether the runs measured at once, the services a measuring run had lost, and at the first run's end the
    other's services and which of them still ran."""
    seen = {run: {} for run in clis}
    ports = {run: set() for run in clis}
    facts = {"seen": seen, "ports": ports, "at_once": False, "lost_while_measuring": [], "first_end": None}
    while any(cli.poll() is None for cli in clis.values()):
        assert time.monotonic() - began < 280, "the runs did not end"  # a hang, not a slow host (idle: ~50 s)
        measuring = _measuring(clis)
        facts["at_once"] = facts["at_once"] or len(measuring) == 2
        for run, state in states.items():
            services = _services(state)
            for name, record in services.items():
                seen[run].setdefault(name, set()).update(record["pids"])
                ports[run].add(record["port"])
            if run in measuring and running(_pids(services)).keys() != _pids(services):
                facts["lost_while_measuring"].append((run, services))
        ended = [run for run, cli in clis.items() if cli.poll() is not None]
        if facts["first_end"] is None and len(ended) == 1:
            [other] = [run for run in clis if run not in ended]
            pids = _pids(_services(states[other]))
            facts["first_end"] = {"ended": ended[0], "other": other, "other_measuring": other in measuring,
                                  "pids": pids, "running": set(running(pids))}
        time.sleep(0.25)
    return facts


def _stored(stack: LocalStack) -> DynamoEventStore:
    db = stack.up(["dynamodb"], log=lambda m: None)["dynamodb"]
    return DynamoEventStore(EVENTS_TABLE, endpoint_url=db["endpoint_url"])


def _run_ids_in(store: DynamoEventStore) -> set[str]:
    """The run id of every item of the events table."""
    pages = store.client.get_paginator("scan").paginate(TableName=EVENTS_TABLE, ProjectionExpression="run_id")
    return {item["run_id"]["S"] for page in pages for item in page["Items"]}


@pytest.mark.timeout(300)
def test_two_runs_at_once_with_their_own_state_dirs_share_nothing(tmp_path):
    began = time.monotonic()
    states = {run: tmp_path / run / "state" for run in DURATIONS_S}
    clis, logs = {}, {}
    try:
        for run in sorted(DURATIONS_S, key=DURATIONS_S.get, reverse=True):  # the longer run first
            (tmp_path / run).mkdir()
            (tmp_path / run / "spec.json").write_text(json.dumps(_spec(run)))
            logs[run] = open(tmp_path / run / "cli.log", "w+")
            if clis:  # the other once the first run's services run: their starts overlap its cells
                while not _stack_up(states["two"]) and all(cli.poll() is None for cli in clis.values()):
                    assert time.monotonic() - began < 120, "the first run never started its services"
                    time.sleep(0.1)
            clis[run] = subprocess.Popen([str(BIN), "--state-dir", str(states[run]), "run", "--spec",
                                          str(tmp_path / run / "spec.json"), "--out", str(tmp_path / run / "out")],
                                         stdout=logs[run], stderr=subprocess.STDOUT, text=True)
        watched = _watch(clis, states, began)
        took = time.monotonic() - began
        for run, cli in clis.items():
            logs[run].seek(0)
            output = logs[run].read()
            assert cli.returncode == 0 and "Traceback" not in output, f"{run}: {output[-3000:]}"

        results = {run: json.loads(next((tmp_path / run / "out").glob("*/results.json")).read_text())
                   for run in DURATIONS_S}
        for run, result in results.items():
            assert result["status"] == "completed" and len(result["cells"]) == 2, (run, result["status"])
            for cell in result["cells"]:
                assert cell["status"] == "completed" and cell["received"] == cell["sent"] > 0, (run, cell)
                assert not cell["has_loss"], (run, cell)
        run_ids = {run: result["run_id"] for run, result in results.items()}
        assert run_ids["one"] != run_ids["two"]

        # Each run started its own broker and event store, with pids and ports of their own, and stopped them.
        seen, ports = watched["seen"], watched["ports"]
        assert all(set(seen[run]) == {BROKER, "dynamodb"} for run in seen), seen
        assert not set().union(*seen["one"].values()) & set().union(*seen["two"].values()), seen
        assert not ports["one"] & ports["two"], ports
        assert watched["at_once"], "the two runs never measured at the same time"
        assert watched["lost_while_measuring"] == []
        first_end = watched["first_end"]
        assert first_end is not None, "the runs ended together"  # usually "one" first (its cells are shorter)
        # The first run's teardown left the other's services running. Judged where the other still had services
        # then: always while it measured; a loaded host can start the runs seconds apart, and the other may have
        # torn its own down by then (the first run's teardown stopping them while the other measured is also
        # caught above, by lost_while_measuring, and would have failed its cells).
        if first_end["other_measuring"]:
            assert first_end["pids"], f"the other run measured without its services: {first_end}"
        assert first_end["running"] == first_end["pids"], first_end
        left = {run: running(set().union(*seen[run].values())) for run in seen}
        assert left == {"one": {}, "two": {}}, left
        assert all(_services(state) == {} and interpreters_of(state) == [] for state in states.values())
        assert not [name for name in descendants(os.getpid()).values() if name.startswith("bb-")]

        # Each event store holds its own run only, every event once.
        with ThreadPoolExecutor(2) as pool:  # the stores are started again only to be read
            stores = dict(zip(DURATIONS_S, pool.map(_stored, map(LocalStack, states.values()))))
        events = {}
        for run, store in stores.items():
            [other] = [r for r in DURATIONS_S if r != run]
            assert _run_ids_in(store) == {run_ids[run]}
            events[run] = store.read(run_ids[run])
            assert events[run] and {e["run_id"] for e in events[run]} == {run_ids[run]}
            assert len({e["event_id"] for e in events[run]}) == len(events[run])
            assert store.read(run_ids[other]) == []
        both = events["one"] + events["two"]
        assert len({e["event_id"] for e in both}) == len(both)
    finally:
        for cli in clis.values():
            if cli.poll() is None:
                cli.kill()
                cli.wait()
        for log in logs.values():
            log.close()
        for state in states.values():
            LocalStack(state).down(log=lambda m: None)
    observe("two-runs", fault="two `brokerbench run`s started at once, each with its own --state-dir (so its own "
                              "Redis and DynamoDB Local), 2 cells each (3 s and 12 s)",
            run_status=" and ".join(result["status"] for result in results.values()),
            exit_code=" and ".join(str(cli.returncode) for cli in clis.values()),
            cells=[cell_facts(c) for result in results.values() for c in result["cells"]],
            observed=[f"both runs exited 0, {took:.0f} s after they were started; their cells measured at the same "
                      "time",
                      "every cell of both completed with every message received and no loss",
                      "each run started its own Redis and DynamoDB Local (no pid, no port shared) and stopped them",
                      "whenever a run measured, its own services were running",
                      f"when run {first_end['ended']} had ended (its teardown done), every service of run "
                      f"{first_end['other']} was still running"
                      + (" and it was measuring" if first_end["other_measuring"] else ""),
                      "each event store holds only its own run's events, each once; none of the other run's",
                      "after both, no service, workflow interpreter or worker process of either is left"],
            **event_facts(both))
