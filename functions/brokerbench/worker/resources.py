"""CPU and memory of the processes behind a cell, sampled from /proc at each interval write.

Two groups: the cell's own worker processes (producers and consumers) and, when the target says which
they are (a local broker's pids), the broker's processes, as Helenius sampled containers with cAdvisor.
CPU is the share of one core used since the previous sample (100 = one core busy); memory is the
resident set at the sample. A process that is gone counts as nothing from then on. `CpuSpan` gives a group's CPU
over one span instead (a cell's measured sending: what brokerbench.limit reads).
"""

from __future__ import annotations

import os
import time

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
MB = 1024 * 1024


def cpu_ticks(pid: int) -> int | None:
    """utime + stime of the process (all its threads), in clock ticks; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()  # the command name may hold spaces
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5), counted after the name


def rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * PAGE_BYTES
    except OSError:
        return None


class ResourceSampler:
    def __init__(self, groups: dict[str, list[int]], clock=time.monotonic) -> None:
        self.groups = {name: list(pids) for name, pids in groups.items() if pids}
        self.clock = clock
        self._last = {name: self._ticks(pids) for name, pids in self.groups.items()}
        self._at = clock()

    @staticmethod
    def _ticks(pids: list[int]) -> int:
        return sum(t for t in map(cpu_ticks, pids) if t is not None)

    def sample(self) -> dict[str, dict]:
        """Per group: cpu_pct since the last sample and rss_mb now."""
        now = self.clock()
        elapsed = max(1e-6, now - self._at)
        out = {}
        for name, pids in self.groups.items():
            ticks = self._ticks(pids)
            cpu = max(0, ticks - self._last[name]) / TICKS_PER_S / elapsed * 100
            rss = sum(r for r in map(rss_bytes, pids) if r is not None)
            out[name] = {"cpu_pct": round(cpu, 1), "rss_mb": round(rss / MB, 1)}
            self._last[name] = ticks
        self._at = now
        return out


class CpuSpan:
    """Each group's CPU over one span (a cell's measured sending), in % of one core: its ticks when the span starts,
    and at the latest reading (`update`) at which every process of the group could still be read. A process that
    has exited cannot be (its ticks go with it), so a group's figure ends at its last whole reading; a group whose
    readings cover less than `min_cover` of the span has none (None)."""

    def __init__(self, groups: dict[str, list[int]], clock=time.monotonic) -> None:
        self.groups = {name: list(pids) for name, pids in groups.items() if pids}
        self.clock = clock
        self.first = self._read()
        self.last = dict(self.first)

    def _read(self) -> dict[str, tuple[float, int]]:
        at, out = self.clock(), {}
        for name, pids in self.groups.items():
            ticks = [cpu_ticks(pid) for pid in pids]
            if None not in ticks:
                out[name] = (at, sum(ticks))
        return out

    def update(self) -> None:
        self.last.update(self._read())

    def cpu_pct(self, span_s: float, min_cover: float = 0.75) -> dict[str, float | None]:
        out = {}
        for name in self.groups:
            (start, first), (end, last) = self.first.get(name, (0.0, 0)), self.last.get(name, (0.0, 0))
            covered = name in self.first and end - start >= min_cover * span_s and end > start
            out[name] = round((last - first) / TICKS_PER_S / (end - start) * 100, 1) if covered else None
        return out


def summarize(samples: list[dict]) -> dict:
    """Per group over a cell's samples: mean and max CPU, max memory."""
    out = {}
    for name in sorted({n for s in samples for n in s}):
        cpus = [s[name]["cpu_pct"] for s in samples if name in s]
        rss = [s[name]["rss_mb"] for s in samples if name in s]
        out[name] = {"cpu_pct_mean": round(sum(cpus) / len(cpus), 1), "cpu_pct_max": max(cpus),
                     "rss_mb_max": max(rss), "samples": len(cpus)}
    return out
