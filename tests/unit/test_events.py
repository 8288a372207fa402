import pytest

from brokerbench.events import InvalidEvent, make_event, new_run_id, sort_key

RUN = "20261121T101500Z-abc123"


def test_sort_keys_order_a_run():
    keys = [sort_key("RunRequested"), sort_key("TargetsReady"), sort_key("CellStarted", 0),
            sort_key("IntervalMeasured", 0, 0), sort_key("IntervalMeasured", 0, 10), sort_key("CellCompleted", 0),
            sort_key("CellStarted", 1), sort_key("CellFailed", 1), sort_key("RunCompleted")]
    assert keys == sorted(keys)
    assert sort_key("CellCompleted", 3) == sort_key("CellFailed", 3)  # one end per cell
    assert sort_key("RunCompleted") == sort_key("RunFailed")


def test_event_ids_are_deterministic():
    a = make_event(RUN, "RunFailed", {"reason": "x"})
    b = make_event(RUN, "RunFailed", {"reason": "x"})
    assert a["event_id"] == b["event_id"] == f"{RUN}/90#run#end"


def test_invalid_data_is_refused_with_the_field():
    with pytest.raises(InvalidEvent, match="reason"):
        make_event(RUN, "RunFailed", {})
    with pytest.raises(InvalidEvent, match="interval"):
        make_event(RUN, "IntervalMeasured", {"cell_id": "c", "attempt": 0, "interval": -1, "histograms": {},
                                             "counters": dict.fromkeys(["sent", "bytes_sent", "acked", "send_errors",
                                                                        "received", "bytes_received"], 0)},
                   cell_index=0, interval=0)


def test_run_ids_sort_by_time_and_match_the_schema():
    run_id = new_run_id()
    make_event(run_id, "RunFailed", {"reason": "x"})  # validates the id pattern
    with pytest.raises(InvalidEvent, match="run_id"):
        make_event("not-an-id", "RunFailed", {"reason": "x"})
