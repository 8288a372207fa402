"""drivers.handoff: acknowledgements handed from a client's thread to the send loop's, which waits for them with a
timeout that always ends (queue.SimpleQueue's get(timeout=...) can wait for ever: see the module)."""

from __future__ import annotations

import threading
import time

import pytest

from brokerbench.drivers.handoff import Handoff


def test_a_wait_with_nothing_put_ends_at_its_timeout():
    handoff = Handoff()
    for timeout_s in (0.0, -1.0, 7e-9, 1e-6, 0.05):
        began = time.monotonic()
        assert handoff.wait(timeout_s) is False
        assert time.monotonic() - began < 2.0 + timeout_s  # ended: its timeout, and a busy host's scheduling
    assert not handoff
    with pytest.raises(IndexError):
        handoff.take()


def test_items_come_out_in_order_and_a_put_wakes_a_wait():
    handoff = Handoff()
    for item in range(3):
        handoff.put(item)
    assert handoff.wait(0) and [handoff.take() for _ in range(3)] == [0, 1, 2] and not handoff
    threading.Timer(0.2, handoff.put, ("late",)).start()
    began = time.monotonic()
    assert handoff.wait(30.0) is True  # woken by the put, long before its timeout
    assert time.monotonic() - began < 25.0
    assert handoff.take() == "late"


def test_a_loop_that_takes_and_waits_briefly_gets_everything_and_never_waits_past_its_timeouts():
    """The send loop's own pattern, as the Kafka and Pulsar producers run it: another thread puts at its own pace
    while the loop waits a little (down to nanoseconds), takes what came, and waits again. Every item arrives once,
    in order, and no wait outlasts its timeout by more than a busy host's scheduling."""
    handoff = Handoff()
    count = 20_000

    def putter() -> None:
        for item in range(count):
            handoff.put(item)
            if item % 50 == 0:
                time.sleep(0.0002)

    thread = threading.Thread(target=putter)
    thread.start()
    taken, longest, timeouts = [], 0.0, (7e-9, 1e-6, 5e-5, 1e-3)
    deadline = time.monotonic() + 60
    while len(taken) < count and time.monotonic() < deadline:
        timeout_s = timeouts[len(taken) % len(timeouts)]
        began = time.monotonic()
        handoff.wait(timeout_s)
        longest = max(longest, time.monotonic() - began - timeout_s)
        while handoff:
            taken.append(handoff.take())
    thread.join()
    assert taken == list(range(count))
    assert longest < 2.0, longest
