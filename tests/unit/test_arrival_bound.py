"""A consumer's delivery stamp bound (worker/consumer.py ArrivalBound) and the cell's, merged over its consumers
(worker/cell.py, figures.merge_stamp_bounds): what the † footnote states per row."""

from brokerbench.worker.cell import _stamp_bound
from brokerbench.worker.consumer import ArrivalBound


def test_polls_after_one_response_and_the_spread_of_the_rest():
    bound = ArrivalBound()
    for _ in range(97):
        bound.add(1, 0)  # the stamp is the carrying response's own read
    bound.add(2, 120_000)  # two responses read since the previous poll, 120 µs apart
    bound.add(0, 40_000)  # none since: the previous poll's responses, 40 µs apart
    bound.add(None, None)  # a driver that says nothing of its responses: not counted
    assert bound.record() == {"polls": 99, "single_response_polls": 97, "spread_p99_us": 119.2,
                              "spread_max_us": 120.0}
    alone = ArrivalBound()
    alone.add(1, 0)
    assert alone.record() == {"polls": 1, "single_response_polls": 1, "spread_p99_us": None, "spread_max_us": None}


def test_the_cell_sums_the_polls_and_keeps_the_highest_spread():
    consumers = [{"stamp_bound": {"polls": 10, "single_response_polls": 9, "spread_p99_us": 50.0,
                                  "spread_max_us": 50.0}},
                 {"stamp_bound": {"polls": 5, "single_response_polls": 5, "spread_p99_us": None,
                                  "spread_max_us": None}},
                 {"stamps": "arrival"}]
    assert _stamp_bound(consumers) == {"delivery_stamp_bound": {"polls": 15, "single_response_polls": 14,
                                                                "spread_p99_us": 50.0, "spread_max_us": 50.0}}
    assert _stamp_bound([{"stamps": "arrival"}]) == {}
