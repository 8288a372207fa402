"""A run request's faults: every rule names its field, and a cell's timetable puts each action at its time."""

import numpy as np
import pytest
import spec_tools

from brokerbench import faults
from brokerbench.spec import validate
from brokerbench.worker.producer_figures import AckGap

BASE = {"name": "f", "brokers": ["kafka"], "sizes": [1024], "rates": [200], "formats": ["raw"], "duration_s": 10,
        "provision": {"kafka": {"nodes": 3}}}


def problems(**request) -> dict[str, str]:
    return spec_tools.problems(BASE, **request)


def test_a_kill_and_a_restart_on_a_cluster_are_accepted_and_reach_every_cell():
    spec = validate({**BASE, "faults": [{"kind": "kill", "at_s": 2}, {"kind": "restart", "at_s": 5}]})
    from brokerbench.spec import expand
    assert all(cell["faults"] == spec["faults"] for cell in expand(spec))
    assert "faults" not in expand(validate(BASE))[0]


def test_a_fault_that_needs_a_replica_is_refused_on_one_node():
    found = problems(provision={}, faults=[{"kind": "kill", "at_s": 2}])
    assert "replica" in found["provision.kafka.nodes"] and "nodes: 3" in found["provision.kafka.nodes"]


def test_a_broker_without_a_local_cluster_and_an_existing_endpoint_are_refused():
    found = problems(brokers=["pulsar"], provision={}, faults=[{"kind": "stop", "at_s": 1}])
    assert "pulsar takes no faults here" in found["faults"]
    assert "(brokers that take them: kafka, nats-jetstream, rabbitmq-quorum, rabbitmq-streams, redis-streams)" in found["faults"]
    found = problems(targets={"kafka": {"bootstrap_servers": "127.0.0.1:9092"}},
                     faults=[{"kind": "stop", "at_s": 1}])
    assert "not the run's to signal" in found["targets.kafka"]


@pytest.mark.parametrize("fault_list, field, words", [
    ([{"kind": "kill", "at_s": 10}], "faults[0].at_s", "not inside the measured 10 s"),
    ([{"kind": "pause", "at_s": 2}], "faults[0].duration_s", "needs its duration_s"),
    ([{"kind": "pause", "at_s": 8, "duration_s": 3}], "faults[0].duration_s", "ends at 11 s"),
    ([{"kind": "kill", "at_s": 2, "duration_s": 3}], "faults[0].duration_s", "a later restart"),
    ([{"kind": "restart", "at_s": 2}], "faults[0]", "needs an earlier kill or stop"),
    ([{"kind": "kill", "at_s": 4}, {"kind": "restart", "at_s": 3}], "faults[1]", "needs an earlier kill or stop"),
    ([{"kind": "stop", "at_s": 1}, {"kind": "restart", "at_s": 3, "target": "2"}], "faults[1].target", "names no"),
    ([{"kind": "melt", "at_s": 1}], "faults[0].kind", "'melt' is not one of"),
    ([{"kind": "kill"}], "faults[0]", "'at_s' is a required property"),
])
def test_each_rule_names_its_field(fault_list, field, words):
    found = problems(faults=fault_list)
    assert words in found.get(field, ""), found


def test_searches_and_counted_cells_take_no_faults():
    assert "search" in problems(rates=["sustainable"], faults=[{"kind": "kill", "at_s": 1}])["rates[0]"]
    found = problems(messages=1000, faults=[{"kind": "kill", "at_s": 1}])
    assert "counted cell" in found["faults"]


def test_the_timetable_orders_actions_and_resumes_a_pause_at_its_end():
    steps = faults.timetable([{"kind": "pause", "at_s": 1.5, "duration_s": 2, "target": "follower"},
                              {"kind": "kill", "at_s": 1}, {"kind": "restart", "at_s": 4}])
    assert [(s.kind, s.at_ns, s.target) for s in steps] == [
        ("kill", 1_000_000_000, "leader"), ("pause", 1_500_000_000, "follower"),
        ("resume", 3_500_000_000, "follower"), ("restart", 4_000_000_000, "leader")]
    assert faults.first_fault_ns([{"kind": "stop", "at_s": 3}]) == 3_000_000_000
    assert faults.first_fault_ns([]) is None


def test_the_acknowledgement_gap_runs_from_the_fault_to_the_next_acknowledgement():
    gap = AckGap()
    gap.add(np.array([100, 200], dtype=np.int64))  # before a fault is known: only the latest is kept
    gap.from_ns = 1_000
    gap.add(np.array([900, 1_100, 1_200], dtype=np.int64))  # the stretch from the fault (1,000) to 1,100
    assert gap.longest == (1_000, 1_100)
    gap.add(np.array([5_200, 1_300], dtype=np.int64))  # unsorted within a batch; 1,300 -> 5,200 is the longest
    assert gap.longest == (1_300, 5_200) and not gap.until_end
    gap.finish(6_000)  # 5,200 -> 6,000 is shorter: the longest stays
    assert gap.longest == (1_300, 5_200) and not gap.until_end
    silent = AckGap()
    silent.from_ns = 1_000
    silent.add(np.array([500], dtype=np.int64))
    silent.finish(9_000)  # nothing after the fault: open to the end
    assert silent.longest == (1_000, 9_000) and silent.until_end


def _interval(i: int, received: int, latency_us: list[int]) -> dict:
    from brokerbench import histogram
    return {"interval": i, "counters": {"received": received, "acked": received},
            "histograms": {"end_to_end_latency_us": histogram.encode(histogram.from_values(latency_us))}}


def test_phases_split_the_intervals_at_the_fault_window_and_find_when_the_rate_came_back():
    # 100 msgs/s at 1 ms; the leader killed at 2.3 s; no acknowledgement from 2.3 s to 4.6 s; a backlog at 150/s, then
    # back to 100/s at 2 ms
    intervals = [_interval(0, 100, [1000] * 100), _interval(1, 100, [1000] * 100),
                 _interval(2, 30, [1000] * 30), _interval(3, 0, []), _interval(4, 50, [900_000] * 50),
                 _interval(5, 150, [2000] * 150), _interval(6, 100, [2000] * 100), _interval(-1, 5, [1] * 5)]
    record = {"applied": [{"kind": "kill", "nodes": ["2"], "at_s": 2.3, "planned_s": 2.0, "leader_before": "2"}],
              "producer_ack_gap": {"from_s": 2.3, "to_s": 4.6, "s": 2.3, "until_end": False}}
    found = faults.phases(intervals, record, publish_only=False)
    assert found["window_s"] == [2.3, 4.6]
    before, during, after = (found[p] for p in faults.PHASES)
    assert before["seconds"] == 2 and before["throughput_msgs_per_s"] == 100  # intervals 0, 1
    assert during["seconds"] == 3 and during["throughput_msgs_per_s"] == round(80 / 3, 1)  # 2, 3, 4
    assert after["seconds"] == 2 and after["throughput_msgs_per_s"] == 125  # 5, 6
    assert before["end_to_end_latency_us"]["p99"] == pytest.approx(1000, rel=0.001)
    assert during["end_to_end_latency_us"]["p99"] == pytest.approx(900_000, rel=0.001)  # 50 of 80 at 900 ms
    assert after["end_to_end_latency_us"]["p99"] == pytest.approx(2000, rel=0.001)
    # from interval 5 on every interval delivers at least 90 msgs/s: 5 - 2.3 s after the fault
    assert found["back_to_rate_s"] == pytest.approx(2.7)
    stalled = faults.phases(intervals[:4], record, publish_only=False)
    assert stalled["back_to_rate_s"] is None and stalled["after"] is None
    # the drain after a 7 s sending window delivers what is left, then nothing: no phase counts it
    drained = intervals + [_interval(7, 12, [3000] * 12), _interval(8, 0, [])]
    assert faults.phases(drained, record, publish_only=False)["back_to_rate_s"] is None  # every interval counted
    sent = faults.phases(drained, record, publish_only=False, sending_s=7.0)
    assert sent["back_to_rate_s"] == pytest.approx(2.7) and sent["after"]["seconds"] == 2
    # what the worker stores, the events schema admits and the event's type reads (eventdata.Phases)
    import json

    import msgspec
    from jsonschema import Draft202012Validator

    from brokerbench.eventdata import Phases
    from brokerbench.paths import SCHEMAS_DIR
    defs = json.loads((SCHEMAS_DIR / "events.schema.json").read_text())["$defs"]
    schema = Draft202012Validator({**defs["faults"]["properties"]["phases"], "$defs": defs})
    unfaulted = faults.phases(intervals, {"applied": []}, publish_only=False)
    for stored in (found, stalled, sent, unfaulted):
        assert not list(schema.iter_errors(stored))
        assert msgspec.to_builtins(msgspec.convert(stored, Phases)) == stored
    assert unfaulted["window_s"] is None and msgspec.convert(unfaulted, Phases).before is None


def test_the_guarantee_says_what_held_and_names_a_loss():
    from brokerbench.reports import faults as report_faults
    row = {"guarantee": report_faults.guarantee({"acked": 1200, "lost": 0, "duplicated": 0,
                                                 "broker_count": {"difference": 0}})}
    assert report_faults.held_text(row) == ("acknowledged messages lost: 0 of 1,200 (sequence numbers; the broker's "
                                            "count agrees)")
    row = {"guarantee": report_faults.guarantee({"acked": 1200, "lost": 7, "broker_count": {"difference": -7}})}
    assert report_faults.held_text(row).startswith("⚠ **acknowledged messages lost: 7 of 1,200")
    assert row["guarantee"]["held"] is False
    # read by the consumers, then discarded by the broker (a paused Redis master demoted): not held either
    row = {"guarantee": report_faults.guarantee({"acked": 1600, "lost": 0, "broker_count": {"difference": -1276}})}
    assert report_faults.held_text(row) == (
        "⚠ **every one of 1,600 acknowledged messages delivered (sequence numbers; the broker's count differs); the "
        "broker then discarded 1,276 of them (its count after the fault holds that many fewer than it acknowledged)**")
    assert row["guarantee"]["held"] is False and row["guarantee"]["discarded"] == 1276
    # lost and discarded both: the loss first, the discard beside it
    row = {"guarantee": report_faults.guarantee({"acked": 1600, "lost": 5, "broker_count": {"difference": -40}})}
    assert report_faults.held_text(row) == (
        "⚠ **acknowledged messages lost: 5 of 1,600 (sequence numbers; the broker's count differs); the broker holds "
        "40 fewer than it acknowledged (discarded after the fault)**")
    # more held than acknowledged (stored, the acknowledgement lost with the node) breaks no promise
    row = {"guarantee": report_faults.guarantee({"acked": 1200, "lost": 0, "broker_count": {"difference": 3}})}
    assert row["guarantee"]["held"] is True and not report_faults.held_text(row).startswith("⚠")


def test_the_terminal_line_says_what_was_done_what_held_and_how_long_nothing_came():
    from brokerbench.reports.faults import cell_line
    cell = {"cell_id": "kafka.raw.batch.1024B.1000mps.r0", "acked": 10000, "lost": 0, "duplicated": 0,
            "broker_count": {"difference": 0},
            "faults": {"applied": [{"fault": 0, "kind": "kill", "nodes": ["2"], "planned_s": 2.5, "at_s": 2.56,
                                    "at": "2026-11-29T03:00:02.560+00:00", "leader_before": "2"},
                                   {"fault": 1, "kind": "restart", "nodes": ["2"], "planned_s": 6.2, "at_s": 6.25,
                                    "at": "2026-11-29T03:00:06.250+00:00", "leader_before": None}],
                       "leader_at_end": "3", "producer_ack_gap": {"s": 11.07}, "consumer_receipt_gap": None}}
    assert cell_line(cell) == ("kafka.raw.batch.1024B.1000mps.r0: kill 2 at 2.56 s, restart 2 at 6.25 s · leader 2 → 3"
                               " · acknowledged messages lost: 0 of 10,000 (sequence numbers; the broker's count "
                               "agrees) · unavailable 11.07 s / – (producers / consumers)")
    assert cell_line({**cell, "lost": 4, "broker_count": {"difference": -4}}).count("⚠ acknowledged messages lost: 4")
    assert cell_line({"cell_id": "x"}) is None


def test_the_faults_record_is_read_as_the_events_type_and_a_malformed_one_names_its_field():
    """reports.faults reads a cell's faults record as eventdata.Faults, the type its event was checked against: an
    effect, a refused call's nodes and a gap left out are read through given(); a record without a required field
    fails naming it, not as a dash in the table."""
    import msgspec

    from brokerbench.reports.faults import cell_line, fault_record
    applied = {"fault": 0, "kind": "network", "effect": "blackhole", "nodes": ["1"], "planned_s": 1.0, "at_s": 1.01,
               "at": "2026-11-29T03:00:01.010+00:00", "leader_before": None}
    record = {"applied": [applied], "leader_at_end": None, "consumer_receipt_gap": {"until_end": True},
              "failed": [{"fault": 1, "kind": "reboot", "at_s": 2.0, "error": {"code": "Throttled"}}]}
    cell = {"cell_id": "c", "acked": 10, "lost": 0, "faults": record}
    assert cell_line(cell) == ("c: network blackhole 1 at 1.01 s, reboot – REFUSED at 2.00 s (Throttled) · leader – → "
                               "– · acknowledged messages lost: 0 of 10 (sequence numbers) · unavailable – / – "
                               "(producers / consumers)")
    for field in ("leader_at_end", "applied"):
        with pytest.raises(msgspec.ValidationError, match=f"missing required field `{field}`"):
            fault_record({k: v for k, v in record.items() if k != field})
    with pytest.raises(msgspec.ValidationError, match=r"\$.applied\[0\].kind"):
        cell_line({**cell, "faults": {**record, "applied": [{**applied, "kind": "nap"}]}})
