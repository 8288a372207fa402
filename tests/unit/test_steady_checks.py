"""tests/steady.py's checks accept what a loaded host does to a timed cell and refuse what a defect would do."""

import pytest

from steady import assert_never_ahead, assert_rate_of_the_offered_magnitude, assert_sent_on_schedule


def intervals(*sent: int) -> list[dict]:
    return [{"counters": {"sent": n}} for n in sent]


def test_a_late_second_caught_up_in_the_next_passes_and_a_burst_ahead_of_the_schedule_fails():
    assert_never_ahead(intervals(500, 500, 500), 500)
    assert_never_ahead(intervals(431, 569, 500, 0), 500)  # a stall, then the loop catches up
    with pytest.raises(AssertionError):
        assert_never_ahead(intervals(500, 620, 380), 500)  # 120 sent before they were due
    with pytest.raises(AssertionError):
        assert_never_ahead(intervals(1003), 1000, producers=2)  # two producers: ±1 each, not 3


def test_a_shortfall_at_the_schedules_end_passes_and_more_than_the_schedule_fails():
    assert_sent_on_schedule({"cell_id": "c", "sent": 5000, "measured_s": 10}, 500)
    assert_sent_on_schedule({"cell_id": "c", "sent": 4970, "measured_s": 10}, 500)  # behind at the end
    assert_sent_on_schedule({"cell_id": "c", "sent": 3001, "measured_s": 3}, 1000, producers=2)
    for sent in (5002, 2400):  # more than was due; under half of it (a loop waiting on replies)
        with pytest.raises(AssertionError):
            assert_sent_on_schedule({"cell_id": "c", "sent": sent, "measured_s": 10}, 500)


def test_a_rate_off_by_a_loaded_host_passes_and_one_off_by_a_unit_fails():
    for figure in (500, 454.5, 530):
        assert_rate_of_the_offered_magnitude(figure, 500)
    for figure in (0.5, 500_000, 200):
        with pytest.raises(AssertionError):
            assert_rate_of_the_offered_magnitude(figure, 500)
