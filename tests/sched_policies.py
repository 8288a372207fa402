"""Scheduling policies as the kernel has them, for the tests of worker/priority.py: read from /proc, not through the
calls the module makes."""

from __future__ import annotations

import os
from pathlib import Path

SCHED_OTHER, SCHED_FIFO = 0, 1


def thread_policies(pid: int) -> dict[int, tuple[int, int]]:
    """(policy, real-time priority) of each thread of `pid`, from /proc/<pid>/task/<tid>/stat (fields 41 and 40);
    empty when the process has ended."""
    found = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            text = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()  # field 3 (state) onwards
        found[int(tid)] = (int(fields[41 - 3]), int(fields[40 - 3]))
    return found


def realtime_permitted() -> bool:
    """Whether this process may take SCHED_FIFO (CAP_SYS_NICE): tried, then undone."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except OSError:
        return False
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    return True
