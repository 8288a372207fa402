"""Real-time priority for a rated cell's processes, where the host permits it: the producers, the consumers and a
local broker get a core when their message is due instead of queueing behind the host's other work.

On a host the broker and the load generator share (the local stack: 2 cores here), a message's latency is not only
the broker's: the producer that wakes for its send, the broker that answers and the consumer that reads each wait
for a core whenever another runnable task has one, and the kernel's fair scheduler lets a waking task wait behind
one that has run less. A cell's p99 is then set by how late those wakes came (docs/performance.md, "The Redis
cell's repeat p99": 30 to 70 separate stalls of 1 to 5 ms in a cell's 8,000 messages). Real deployments run the
broker and its clients on hosts of their own. Measured on the quick suite's Redis cell (raw, 1 KB, 1,000 msgs/s,
8 s, 16 cells each way, interleaved: bench/redis_tail.py --compare priority, docs/performance.md "The cell's
scheduling priority"): end-to-end p99 276-1,563 µs with the send thread at nice -10 (what rated cells had),
218-334 µs with the cell's processes and Redis under SCHED_FIFO; the spread of the log p99 between repeats 0.55 and
0.12. Redis's own wakes count as much as the clients': raising only the cell's processes left much of the tail.

SCHED_FIFO at LEVEL: a task of the cell that wakes runs at once on a core no other real-time task holds, ahead of
every task of the fair scheduler. Low among real-time levels (1-99), so the kernel's own real-time threads keep
theirs above. Three things keep it from taking the host from everything else:
- The kernel's own limit: tasks of the fair scheduler get at least 5% of each CPU whatever real-time tasks do (its
  fair server, Linux 6.12 and later; real-time throttling, sched_rt_runtime_us 950000 of 1000000, before that).
- A cell's process that runs RUN_LIMIT_US without blocking is no longer waiting for its messages: it is the load
  (a rate beyond what the host can send or read). The kernel signals it then (RLIMIT_RTTIME, SIGXCPU), and the
  process puts all its threads back to the fair scheduler (`Grant`), noting when.
- A cell that keeps the host's cores busy while blocking often (never 50 ms at a stretch, so the kernel never
  signals it) is put back by its supervisor, which looks at each interval write (about once a second, `guard`):
  every process of the cell and the broker go back to the fair scheduler together (`drop_process`,
  `BrokerGrant.drop`) when the cell's processes with the broker took more than CELL_SHARE_PCT of the host's CPU
  over the interval, when the host's CPUs were busier than HOST_BUSY_PCT (other work, or another run's real-time
  cell beside this one), or when one of the cell's processes went back on its own. Together: a client at real
  time beside a broker of the fair scheduler would take the core from the broker mid-reply (`decide`).
A max-rate cell sends as fast as it can from the start: it runs as before, at normal priority.
What a broker starts during the cell (Redis's rewrite of its append-only file) begins in the fair scheduler.

What each cell ran at is stored with it (CellCompleted `priority`): its processes' policy, the broker's, and every
drop with its time from the measured start and why. Where the host does not permit it (no CAP_SYS_NICE: an
unprivileged user, AWS Lambda) the cell says so and runs as before, its send thread at nice -10 where that is
permitted. BROKERBENCH_REALTIME=0 in the worker's environment turns it off: the test session does (its three
workers share 2 cores by construction, and a cell's truths there hold to the microsecond, where a neighbour's
real-time cell would take a core for up to the second before its guard looks), and so may a host whose other work
must never wait.
"""

from __future__ import annotations

import os
import resource
import signal
import threading
import time

LEVEL = 10
RUN_LIMIT_US = 50_000  # a process of the cell that runs this long without blocking is the load, not its client
CELL_SHARE_PCT = 75.0  # the cell's processes and the broker over an interval, in % of the host's CPU: beyond, all go back
HOST_BUSY_PCT = 90.0  # the host's CPUs busy over an interval (anyone's work), in %: beyond, all go back
SWITCH = "BROKERBENCH_REALTIME"
REALTIME, NORMAL = "realtime", "normal"


def wanted(cell: dict, environ=os.environ) -> str | None:
    """Why `cell` runs at normal priority (None: it asks for real-time): a worker told not to (BROKERBENCH_REALTIME=0,
    "false", "no" or "off") and max-rate cells."""
    value = environ.get(SWITCH, "").strip().lower()
    if value in ("0", "false", "no", "off"):
        return f"{SWITCH}={environ[SWITCH]}"
    if cell.get("rate") == "max":
        return "a max-rate cell"
    return None


def guard(back: list[str], cell_cpu_pct: float | None, host: dict | None, cpus: int) -> str | None:
    """Why a real-time cell goes back to the fair scheduler after an interval (None: it stays): `back`, its processes
    already back on their own (RUN_LIMIT_US); `cell_cpu_pct`, its processes' and the broker's CPU over the interval
    in % of one core (worker.resources); `host`, the host's figures over it (brokerbench.host: `cpu_pct` of all
    CPUs)."""
    if back:
        return f"{back[0]} went back to normal priority"
    if cell_cpu_pct is not None and cell_cpu_pct > CELL_SHARE_PCT * cpus:
        return (f"the cell's processes and the broker used {cell_cpu_pct / cpus:.0f}% of the host's CPU over an "
                f"interval (more than {CELL_SHARE_PCT:.0f}%)")
    busy = (host or {}).get("cpu_pct")
    if busy is not None and busy > HOST_BUSY_PCT:
        return f"the host's CPUs were {busy:.0f}% busy over an interval (more than {HOST_BUSY_PCT:.0f}%)"
    return None


SHARED_UNKNOWN = "the broker shares this host and its processes are not known"
LOCAL_ADDRESSES = ("127.", "localhost", "::1", "0.0.0.0")


def on_this_host(endpoint: dict) -> bool:
    """Whether a target's endpoint names a loopback address anywhere (a host, a bootstrap list, a URL, a node's)."""
    def strings(value):
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for item in value.values():
                yield from strings(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                yield from strings(item)
    return any(address in text for text in strings(endpoint) for address in LOCAL_ADDRESSES)


def decide(cell: dict, endpoint: dict, environ=os.environ) -> tuple["BrokerGrant", str | None]:
    """The broker's grant for the cell and why its processes run at normal priority (None: real-time). The cell's
    processes take real-time priority only beside a broker that has it too, or one on another host: a real-time
    client that wakes takes the core from a broker of the fair scheduler on its host, mid-reply (a Redis that wrote a
    delivery to its real-time consumer wrote the producer's reply only once the consumer had blocked again: publish
    p50 523 µs against an end-to-end p50 of 252 µs at 100 msgs/s, where they agree within µs)."""
    why = wanted(cell, environ)
    pids = list(endpoint.get("pids") or [])
    grant = BrokerGrant(pids, why)
    if why is None and grant.policy != REALTIME:
        if pids:
            why = grant.why_normal  # not permitted here: the processes would not be either
        elif on_this_host(endpoint):
            why = grant.why_normal = SHARED_UNKNOWN
    return grant, why


def _threads(pid: int) -> list[int]:
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:  # the process has ended
        return []


def _set(tid: int, realtime: bool, reset_on_fork: bool = False) -> None:
    """`tid` under SCHED_FIFO at LEVEL, or back in the fair scheduler. With `reset_on_fork` the tasks it starts begin
    in the fair scheduler: a process's children, and its new threads too (the kernel resets both alike)."""
    if realtime:
        flags = os.SCHED_FIFO | (os.SCHED_RESET_ON_FORK if reset_on_fork else 0)
        os.sched_setscheduler(tid, flags, os.sched_param(LEVEL))
    else:
        os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))


def drop_process(pid: int) -> bool:
    """Every thread of another process back to the fair scheduler (a supervisor's `guard`); scanned again while a
    thread is found at real-time priority, which a thread started during the scan inherits. Whether any was."""
    found = False
    for _ in range(5):
        raised = [tid for tid in _threads(pid) if policy_of(tid) == REALTIME]
        if not raised:
            break
        found = True
        for tid in raised:
            try:
                _set(tid, False)
            except OSError:  # a thread that has just ended
                pass
    return found


def policy_of(pid: int) -> str | None:
    """REALTIME or NORMAL for a thread or process (its main thread); None when it has ended."""
    try:
        policy = os.sched_getscheduler(pid) & ~os.SCHED_RESET_ON_FORK
    except OSError:
        return None
    return REALTIME if policy in (os.SCHED_FIFO, os.SCHED_RR) else NORMAL


def _not_permitted(exc: OSError) -> str:
    return ("not permitted (no CAP_SYS_NICE)" if exc.errno in (1, 13) else f"refused: {exc.strerror or exc}")


class Grant:
    """The calling process at real-time priority, every thread it starts after this inheriting it, until one of them
    runs RUN_LIMIT_US without blocking: then the process goes back to the fair scheduler (`dropped_ns`). Made first
    thing in a cell's process, before any thread exists (the blocked SIGXCPU and the policy are inherited)."""

    def __init__(self, why_normal: str | None) -> None:
        self.policy = NORMAL
        self.why_normal = why_normal
        self.dropped_ns: int | None = None
        self._lock = threading.Lock()
        if why_normal is not None:
            return
        try:
            _set(0, True)
        except OSError as exc:
            self.why_normal = _not_permitted(exc)
            return
        self.policy = REALTIME
        # The kernel's signal, taken by a thread of its own that waits for it at a level above the cell's (it must
        # get a core while the process's other threads hold both); a thread that does not block it (a library's)
        # gets the handler instead, never SIGXCPU's default (the process's end).
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGXCPU])
        signal.signal(signal.SIGXCPU, lambda *_: self.drop())
        _, hard = resource.getrlimit(resource.RLIMIT_RTTIME)
        soft = RUN_LIMIT_US if hard == resource.RLIM_INFINITY else min(RUN_LIMIT_US, hard)
        resource.setrlimit(resource.RLIMIT_RTTIME, (soft, hard))
        threading.Thread(target=self._watch, name="realtime-watch", daemon=True).start()

    def _watch(self) -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(LEVEL + 1))
        except OSError:
            pass
        signal.sigwait([signal.SIGXCPU])
        self.drop()

    def drop(self) -> None:
        """Every thread of this process back to the fair scheduler (once), noting when."""
        with self._lock:
            if self.dropped_ns is not None or self.policy != REALTIME:
                return
            self.dropped_ns = time.monotonic_ns()
        drop_process(os.getpid())

    def record(self) -> dict:
        """What this process ran at, for its "done" report."""
        return {"policy": self.policy, **({"why_normal": self.why_normal} if self.why_normal else {}),
                **({"dropped_ns": self.dropped_ns} if self.dropped_ns is not None else {})}


class BrokerGrant:
    """A local broker's processes (every thread) at real-time priority for one cell, then as they were. What the
    broker starts during the cell, a child (Redis's rewrite of its append-only file) or a thread, begins in the fair
    scheduler (SCHED_RESET_ON_FORK: the kernel resets both alike); its threads are made when it starts."""

    def __init__(self, pids: list[int], why_normal: str | None) -> None:
        self.pids = list(pids)
        self.why_normal = why_normal if pids else (why_normal or "no local broker")
        self.policy = NORMAL
        self.before: dict[int, tuple[int, int]] = {}  # tid -> (policy, priority) as found
        self.dropped: tuple[int, str] | None = None  # (monotonic ns, why)
        self.restored = self.why_normal is not None
        if self.why_normal is not None:
            return
        try:
            for pid in self.pids:
                for tid in _threads(pid):
                    try:
                        found = (os.sched_getscheduler(tid), os.sched_getparam(tid).sched_priority)
                        _set(tid, True, reset_on_fork=True)
                    except ProcessLookupError:
                        continue
                    self.before[tid] = found
        except OSError as exc:
            self.restore()
            self.why_normal = _not_permitted(exc)
            return
        self.policy = REALTIME

    def drop(self, why: str) -> None:
        """The broker back to the fair scheduler for the rest of the cell (once), noting when and why."""
        if self.policy != REALTIME or self.dropped is not None:
            return
        self.dropped = (time.monotonic_ns(), why)
        self.restore()

    def held(self) -> bool:
        """Whether the broker's main threads are still at real-time priority (another cell on the same broker may
        have put them back)."""
        return all(policy_of(pid) in (REALTIME, None) for pid in self.pids)

    def restore(self) -> None:
        """Each thread as it was found (once); threads started since, and threads found at LEVEL under SCHED_FIFO
        (another cell's grant on the same broker, which it would otherwise never get back from), go back to the
        fair scheduler."""
        if self.restored:
            return
        self.restored = True
        for pid in self.pids:
            for tid in _threads(pid):
                policy, level = self.before.get(tid, (os.SCHED_OTHER, 0))
                if (policy & ~os.SCHED_RESET_ON_FORK, level) == (os.SCHED_FIFO, LEVEL):
                    policy, level = os.SCHED_OTHER, 0
                try:
                    os.sched_setscheduler(tid, policy, os.sched_param(level))
                except OSError:
                    pass
