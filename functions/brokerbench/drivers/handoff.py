"""Acknowledgements handed from a client library's thread to the send loop's thread, which waits for them with a
timeout (a producer's poll and flush).

Not queue.SimpleQueue: its get(timeout=...) recomputes the time left after it has taken its lock, and when the
deadline passed a microsecond or more before that (the thread preempted there, on a loaded host) the next wait is
given a negative timeout, which means for ever (CPython 3.11 to 3.13, Modules/_queuemodule.c). A Kafka producer of the
Python loop waited so for the rest of a cell, its last acknowledgement long in: the cell failed as "did not finish
in time" after 100 s (tests/integration/test_shaped_schedules.py, about 1 run in 15 on 2 busy cores). Here the wait
is a threading.Event's, whose timed lock gives up once its deadline is past; putting stays a deque's append, with
the Event set only while the loop waits.
"""

from __future__ import annotations

import threading
from collections import deque


class Handoff:
    """Put from any thread; taken, and waited for, by one."""

    def __init__(self) -> None:
        self._items: deque = deque()
        self._arrived = threading.Event()
        self._waiting = False

    def put(self, item) -> None:
        self._items.append(item)
        if self._waiting:  # read after the append: a waiter that looked before it is woken
            self._arrived.set()

    def __bool__(self) -> bool:
        return bool(self._items)

    def take(self):
        """The oldest item (IndexError when there is none)."""
        return self._items.popleft()

    def wait(self, timeout_s: float) -> bool:
        """Until an item is there, at most timeout_s; whether one is."""
        if self._items:
            return True
        if timeout_s <= 0:
            return False
        self._arrived.clear()
        self._waiting = True  # set before looking again: a put after the look sees it and wakes the wait
        try:
            if not self._items:
                self._arrived.wait(timeout_s)
        finally:
            self._waiting = False
        return bool(self._items)
