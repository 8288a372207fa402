"""How the cell's worker processes start, what they are called, and how one that died is described.

They start from a fork server (multiprocessing's forkserver): one process per worker, started with the first
cell, that has imported the worker's modules and the brokers' client libraries and never made a client, and
forks each producer and consumer from that state. A fresh interpreter (spawn) spent seconds importing them
in every process of every cell on a loaded machine; a fork takes milliseconds, and still shares no client
library state (no client, connection or client thread exists before the fork). Each process takes the worker's
environment as it is when the process starts (`start`), as a spawned one would.

Each producer and consumer names itself (`bb-producer-0`, `bb-consumer-1`: what ps, top and /proc/PID/comm
show), so a person, or a fault test, can tell them apart, and dies with the worker that started it. A process
that ended without saying why is described from its exit status: killed by a signal, or exited with a code.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import faulthandler
import json
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing import forkserver, spawn
from pathlib import Path

from brokerbench.worker import priority

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
COMM_BYTES = 15  # the kernel keeps 15 characters of a thread's name


def _prctl(option: int, value) -> bool:
    """prctl(2) where the kernel has it (Linux); False elsewhere."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def name_this_process(role: str, number: int) -> str:
    """Name the calling process `bb-<role>-<number>` where the kernel allows it (Linux), every thread it has so far
    (those it starts later take the name from the thread that starts them); returns the name."""
    name = f"bb-{role}-{number}"[:COMM_BYTES]
    if not _prctl(PR_SET_NAME, name.encode()):  # not Linux: the name is only a label
        return name
    for tid in os.listdir("/proc/self/task"):
        if int(tid) != threading.get_native_id():
            try:
                Path(f"/proc/self/task/{tid}/comm").write_text(name)
            except OSError:  # a thread that has just ended
                pass
    return name


# Imported by the fork server before it forks anything: the worker's process code and each broker's driver (and
# with it its client library), then the worker's main module (fork_server_main, last). A module that cannot be
# imported is left to the process that needs it.
PRELOAD = ["brokerbench.worker.producer", "brokerbench.worker.consumer"]
SERVER_MAIN = "brokerbench.worker.fork_server_main"
# How the fork server learns the worker's main module: set only while the server starts (see start_fork_server).
MAIN_VARIABLE = "BROKERBENCH_FORK_SERVER_MAIN"


def context(preload: list[str]):
    """The multiprocessing context the cell's processes start from: the fork server where the platform has one
    (Linux, macOS), with PRELOAD and `preload` (the drivers' modules) imported; else spawn."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    # Read when the server starts (with the worker's first cell); later calls change nothing.
    ctx.set_forkserver_preload([*PRELOAD, *preload, SERVER_MAIN])
    start_fork_server()
    return ctx


def start_fork_server() -> None:
    """Start the worker's fork server if it is not running, telling it the worker's main module.

    A process that multiprocessing starts imports the main module of the process that started it (a function it
    runs may live there). The fork server's own '__main__' preload never does it (it looks for a key that
    multiprocessing's preparation data does not have), so every producer and consumer imported it again, the
    CLI's modules or a test runner's: 0.2 to 0.9 s per process on a loaded machine. The server imports it once
    instead (prepare_fork_server) and each process finds it imported."""
    data = spawn.get_preparation_data("main")
    main = {key: data[key] for key in ("init_main_from_name", "init_main_from_path") if key in data}
    os.environ[MAIN_VARIABLE] = json.dumps({"worker": os.getpid(), **main})
    try:
        forkserver.ensure_running()
    finally:
        os.environ.pop(MAIN_VARIABLE, None)


def prepare_fork_server() -> None:
    """In the fork server (SERVER_MAIN imports it last): the worker's main module, imported as each process would
    import it. Anywhere else it does nothing; if the import fails, each process imports it itself, as before."""
    found = os.environ.pop(MAIN_VARIABLE, None)
    if found is None:
        return
    main = json.loads(found)
    if os.getppid() != main.pop("worker") or sys.argv[:1] != ["-c"]:  # not the server of the worker that set it
        return
    try:
        spawn.prepare(main)
    except Exception:  # noqa: BLE001 (the processes import it themselves)
        pass


def start(role: str, number: int, environ: dict, target: Callable, conn, task) -> None:
    """The first thing a cell's process runs: it stops holding the fork server open (the server ends when every
    holder has, and this process with it: see die_with_parent), takes the worker's environment of when the
    process was started (`environ`; a fork server's children would otherwise have the server's, from when it
    started), then runs `target(conn, task)`."""
    alive = getattr(forkserver._forkserver, "_forkserver_alive_fd", None)
    if alive is not None:  # forked by the fork server (a spawned process holds none)
        os.close(alive)
        forkserver._forkserver._forkserver_alive_fd = None
    os.environ.clear()
    os.environ.update(environ)
    target(conn, task)


STACKS_SIGNAL = signal.SIGUSR2
_stacks: list = []  # the calling process's stacks file, kept open while it lives (dump_stacks_on_signal)


def dump_stacks_on_signal() -> int | None:
    """Every thread's Python stack written, on STACKS_SIGNAL, to a file in memory of the calling process
    (faulthandler: written from the signal handler itself, so also while a thread holds the GIL in a call that does
    not return). Its descriptor, which the parent reads through /proc (`stacks_of`); None where the platform has
    none (memfd_create is Linux's)."""
    try:
        fd = os.memfd_create("bb-stacks")
    except (AttributeError, OSError):
        return None
    stacks = os.fdopen(fd, "w")
    faulthandler.register(STACKS_SIGNAL, file=stacks, all_threads=True)
    _stacks[:] = [stacks]
    return fd


def stacks_of(pid: int, fd: int | None, wait_s: float = 2.0) -> str | None:
    """What a cell's process is doing, from the process itself: its threads' stacks (dump_stacks_on_signal's file,
    `fd` in it), asked for now and read once it stops growing. None where it cannot tell (no such file, the process
    gone or silent)."""
    if fd is None:
        return None
    path = f"/proc/{pid}/fd/{fd}"
    try:
        with open(path) as file:
            before = len(file.read())
        os.kill(pid, STACKS_SIGNAL)
    except OSError:
        return None
    deadline, last = time.monotonic() + wait_s, None
    while time.monotonic() < deadline:
        time.sleep(0.1)
        try:
            with open(path) as file:
                text = file.read()[before:]
        except OSError:
            return last
        if text and text == last:
            return text
        last = text or None
    return last


def die_with_parent() -> None:
    """SIGKILL for the calling process when the worker that started it dies (Linux): the producers and consumers of
    a worker killed mid-cell (kill -9 of an EC2-kind worker) would otherwise go on sending into the broker while
    the run's next cell measures. The kernel sends it when the process that forked this one ends: the fork server
    (or, spawned, the worker's thread that supervises the cell and stops its processes before it returns). The
    fork server ends when the worker does: its cell processes let go of the pipe that keeps it (`start`), so the
    worker holds it alone."""
    parent = multiprocessing.parent_process()
    if not _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL)) or parent is None:
        return
    if os.getppid() != parent.pid and not pid_exists(parent.pid):
        os._exit(1)  # the worker died before the signal was asked for


def pid_exists(pid: int) -> bool:
    """Whether a process `pid` exists (a zombie included; one of another user's counts too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def signal_group(pid: int, sig: int) -> bool:
    """Sends `sig` to the process group `pid` leads (a process started in a session of its own takes its children
    with it), or to the process alone where the group cannot be signalled; False when it no longer exists."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        os.kill(pid, sig)
    return True


def death(role: str, number: int, pid: int | None, exitcode: int | None) -> str:
    """Why a worker process stopped talking: the reason a cell that lost it fails with."""
    who = f"{role} {number}" + (f" (pid {pid})" if pid else "")
    if exitcode is None:
        return f"ProcessDied: {who} closed its pipe and did not exit"
    if exitcode < 0:
        try:
            how = f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            how = f"killed by signal {-exitcode}"
        return f"ProcessDied: {who} {how}"
    return f"ProcessDied: {who} exited with code {exitcode} without reporting"


def stacks_fd() -> int | None:
    """The calling process's stacks file (dump_stacks_on_signal), for its parent: None where it has none."""
    return _stacks[0].fileno() if _stacks else None


def serve(role: str, number: int, conn, body: Callable[[priority.Grant], None], normal_why: str | None = None) -> None:
    """Run `body` as a cell's producer or consumer process, with its priority (priority.Grant, made first thing,
    before any thread exists: they inherit it; `normal_why`, why it runs at normal priority, None: real-time): Ctrl-C
    is the parent's to handle (it decides how a cell stops), the process is named once it has its priority (what
    bears a cell's name runs at the cell's), it dies with its worker, it writes its threads' stacks when asked
    (`stacks_of`: what a process that stopped reporting is doing), any failure is reported to the parent, and the pipe
    is closed at the end."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        grant = priority.Grant(normal_why)
        name_this_process(role, number)
        die_with_parent()
        dump_stacks_on_signal()
        body(grant)
    except BaseException as exc:  # every failure goes to the parent, which fails the cell
        report_failure(conn, f"{role} {number}", exc)
    finally:
        conn.close()


def report_failure(conn, who: str, exc: BaseException) -> None:
    """Tell the parent why this process failed; a parent that has already ended the cell (its pipe closed) needs
    no telling, and a traceback about the closed pipe would only hide the real reason."""
    try:
        conn.send(("error", f"{who}: {type(exc).__name__}: {exc}"))
    except OSError:  # BrokenPipeError and the like
        pass
