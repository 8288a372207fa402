"""One event of every type, as the code that writes each builds it: a synthetic run's own (RunRequested, TargetsReady,
CellStarted, IntervalMeasured with host and resource samples, CellCompleted, RunCompleted) and the others written
the way their producers write them; for the tests of the events' types on both stores."""

from __future__ import annotations

from synthetic import synthetic_run

from brokerbench.events import make_event
from brokerbench.events.run import run_requested_events

SPEC = {"name": "examples", "brokers": ["kafka"], "sizes": [1024], "rates": [1000, 2000], "formats": ["json"]}
HOST = {"cpu_pressure_pct": 1.5, "memory_pressure_pct": 0.0, "steal_pct": 0.0, "cpu_pct": 61.0, "cpus": 2}
RESOURCES = {"broker": {"cpu_pct": 12.5, "rss_mb": 310.2}, "producer": {"cpu_pct": 40.0, "rss_mb": 88.0}}
FAULTS = {"applied": [{"fault": 0, "kind": "network", "target": "leader", "effect": "latency", "proxy": "p0",
                       "toxics": ["latency_downstream"], "nodes": ["kafka-1"], "planned_s": 2.0, "at_s": 2.001,
                       "at": "2026-11-29T03:00:02.001+00:00", "leader_before": "kafka-1", "call_s": 0.004}],
          "restored_at_end": [], "leader_at_end": "kafka-1", "cluster_whole_at_end": None,
          "producer_ack_gap": {"from_s": 2.0, "to_s": 2.5, "s": 0.5, "until_end": False},
          "consumer_receipt_gap": None}


def one_of_each(run_id: str | None = None) -> list[dict]:
    """A run's events, one or more of each type but RunFailed (the run completed: see failed) and ScheduleTriggered
    (its own partition: see trigger); its second cell failed."""
    events = synthetic_run(SPEC, intervals=2, run_id=run_id)
    run_id = events[0]["run_id"]
    last = [e for e in events if e["type"] == "CellCompleted"][-1]
    events.remove(last)
    for event in events:
        if event["type"] == "IntervalMeasured":
            event["data"].update(backlog=0, host=HOST, resources=RESOURCES)
    cell = next(e for e in events if e["type"] == "CellStarted")["data"]["cell"]
    planned = run_requested_events(run_id, {"name": "examples"}, [cell] * 201, None)  # a large plan: chunks
    return [*events,
            planned[1],  # CellsPlanned
            make_event(run_id, "CellFailed", {"cell_id": last["data"]["cell_id"], "reason": "broker did not answer",
                                              "attempt": 0, "intervals": 2, "faults": FAULTS,
                                              "totals": last["data"]["totals"], "broker_count": None},
                       cell_index=int(last["sk"][4:9])),
            make_event(run_id, "StepFailed", {"step": "TeardownTargets", "reason": "stack left",
                                              "targets_left": [{"broker": "kafka", "error": "Timeout", "cause": "x"}]},
                       key="TeardownTargets"),
            make_event(run_id, "Notified", {"step": "Notify", "message_id": "m-1"}, key="Notify"),
            make_event(run_id, "ReportBuilt", {"files": {"html": "reports/x/report.html"}}),
            make_event(run_id, "RegressionDetected", {
                "baseline_run_id": run_id, "cell": "kafka json 1024 B", "cell_id": "kafka.json.0",
                "metric": "end_to_end_p99_us", "verdict": "regression", "baseline_median": 900.0,
                "candidate_median": 1400.5, "change": 0.56, "p_value": 0.01, "source": "pairwise",
                "unsustainable_repeats": {"candidate": {"unsustainable": 0, "judged": 3},
                                          "history": {"unsustainable": 0, "judged": 9, "runs": 3}},
                "differences": [{"setting": "code_version", "before": "a", "after": "b"}]},
                cell_index=0, key="end_to_end_p99_us")]


def failed(run_id: str) -> dict:
    return make_event(run_id, "RunFailed", {"reason": "the workflow failed"})


def trigger() -> dict:
    """A ScheduleTriggered event, in its schedule's partition."""
    return make_event("schedule#nightly", "ScheduleTriggered",
                      {"schedule": "nightly", "due_at": "2026-11-29T03:00:00+00:00", "outcome": "not_started",
                       "run_id": None, "reason": "the previous run is still going"}, key="2026-11-29T03:00:00+00:00")
