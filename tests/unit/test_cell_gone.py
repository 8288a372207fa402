"""A cell's process that is gone before the cell tells it to start ("go"): the cell fails with why it went (killed by a
signal, or its own reported failure), never with the pipe's error; and a cell that fails on an error nobody
anticipated names the line of brokerbench it came through. Real processes from the worker's fork server."""

import ctypes
import inspect
import logging
import multiprocessing
import os
import signal
import time

import pytest

from brokerbench.worker import cell as cell_module
from brokerbench.worker import framing, processes

pytestmark = pytest.mark.skipif("forkserver" not in multiprocessing.get_all_start_methods(),
                                reason="no fork server on this platform")


def _ready_then_wait(conn, task) -> None:
    """A producer's start as the cell sees it: "ready", then it waits for "go"."""
    conn.send(("ready", {}))
    conn.recv()


def _ready_then_fail(conn, task) -> None:
    """A producer that says it is ready and then fails (a client's error) before "go": serve reports it and exits."""
    def body(_grant):
        conn.send(("ready", {}))
        raise RuntimeError("the client gave up")
    processes.serve("producer", 0, conn, body)


def _held_in_a_call() -> None:
    """A call that holds the GIL and does not return for a minute (libc's sleep through PyDLL, which keeps the GIL):
    no Python thread of the process runs meanwhile, as in a client library stuck in a call. A signal ends a sleep
    early: it is called again."""
    libc = ctypes.PyDLL(None)
    while True:
        libc.sleep(60)


def _ready_then_stuck(conn, task) -> None:
    def body(_grant):
        conn.send(("ready", {"stacks_fd": processes.stacks_fd()}))
        _held_in_a_call()
    processes.serve("producer", 0, conn, body)


def _supervised(body):
    """A cell supervisor over one real producer process running `body`, once it said it was ready."""
    ctx = processes.context([])
    parent, child = ctx.Pipe()
    process = ctx.Process(target=processes.start, args=("producer", 0, dict(os.environ), body, child, None),
                          daemon=True, name="producer-0")
    process.start()
    child.close()
    assert parent.recv() == ("ready", {})
    run = cell_module._CellRun.__new__(cell_module._CellRun)
    run.conns, run.processes = {parent: ("producer", 0)}, [process]
    return run, parent, process


def _wait_ended(pid: int) -> None:
    """Until the process has exited (its pipe's end closed with it): a zombie or gone."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except OSError:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not end")


def test_a_process_killed_before_go_fails_the_cell_with_how_it_died():
    run, conn, process = _supervised(_ready_then_wait)
    try:
        os.kill(process.pid, signal.SIGKILL)
        _wait_ended(process.pid)
        with pytest.raises(cell_module.CellError) as failed:
            run._tell(conn, ("go", {}))
        assert str(failed.value) == f"ProcessDied: producer 0 (pid {process.pid}) killed by SIGKILL"
    finally:
        conn.close()
        process.join(5)


def test_a_process_that_failed_before_go_fails_the_cell_with_its_own_reason():
    run, conn, process = _supervised(_ready_then_fail)
    try:
        process.join(10)
        assert process.exitcode == 0  # serve reported the failure and the process ended normally
        with pytest.raises(cell_module.CellError) as failed:
            run._tell(conn, ("go", {}))
        assert str(failed.value) == "producer 0: RuntimeError: the client gave up"
    finally:
        conn.close()


def test_a_process_still_there_is_told():
    run, conn, process = _supervised(_ready_then_wait)
    try:
        run._tell(conn, ("go", {}))
        process.join(10)
        assert process.exitcode == 0  # it read "go" and ended
    finally:
        conn.close()


def test_an_unanticipated_error_names_the_line_of_brokerbench_it_came_through():
    with pytest.raises(Exception) as raised:
        framing.is_probe(b"short")
    line = next(number for number, text in enumerate(inspect.getsourcelines(framing.is_probe)[0],
                                                     inspect.getsourcelines(framing.is_probe)[1])
                if "HEADER.unpack" in text)
    assert cell_module.unexpected(raised.value) == (
        f"error: unpack requires a buffer of 20 bytes (at brokerbench/worker/framing.py:{line} in is_probe)")


def test_an_error_raised_outside_brokerbench_alone_is_named_as_it_is():
    try:
        raise BrokenPipeError(32, "Broken pipe")
    except BrokenPipeError as exc:
        assert cell_module.unexpected(exc) == "BrokenPipeError: [Errno 32] Broken pipe"


def test_a_cell_out_of_time_names_the_processes_it_still_waits_for():
    """The cell's time ran out: the error names each process not finished and how long since it last reported, and
    how far the drain had come (what tells a stuck client from a broker that stopped answering)."""
    from brokerbench.worker.drain import Drain
    run = cell_module._CellRun.__new__(cell_module._CellRun)
    producer, consumer_0, consumer_1 = object(), object(), object()
    run.conns = {producer: ("producer", 0), consumer_0: ("consumer", 0), consumer_1: ("consumer", 1)}
    now = time.monotonic()
    heard = {producer: now - 1, consumer_0: now - 95, consumer_1: now - 2}
    sending = run._unfinished({}, heard, None)
    assert sending.startswith("producer-0 (last heard 1.0 s ago), consumer-0 (last heard 95.0 s ago), consumer-1")
    assert sending.endswith("not finished; still sending")
    drain = Drain([consumer_0, consumer_1], 1000, 5, 3, now)
    drain.update(consumer_1, 600, now)
    draining = run._unfinished({producer: {}, consumer_1: {}}, heard, drain)
    assert draining == "consumer-0 (last heard 95.0 s ago) not finished; draining, 600 of 1000 received"


def test_a_process_stuck_in_a_call_says_where_when_its_cell_runs_out_of_time(caplog):
    """A process that stopped reporting: the supervisor's log has its threads' stacks, from the process itself, down
    to the call it is stuck in, though that call holds the GIL (processes.stacks_of, faulthandler's file)."""
    ctx = processes.context([])
    parent, child = ctx.Pipe()
    process = ctx.Process(target=processes.start, args=("producer", 0, dict(os.environ), _ready_then_stuck, child,
                                                        None), daemon=True, name="producer-0")
    process.start()
    child.close()
    try:
        kind, ready = parent.recv()
        assert kind == "ready" and isinstance(ready["stacks_fd"], int)
        run = cell_module._CellRun.__new__(cell_module._CellRun)
        run.conns, run.processes, run.stacks_fds = {parent: ("producer", 0)}, [process], {parent: ready["stacks_fd"]}
        for _ in range(20):  # until the process is in the call (it may be asked just before it)
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger=cell_module.log.name):
                run._log_stacks({})
            if "_held_in_a_call" in caplog.text:
                break
            time.sleep(0.1)
        (record,) = caplog.records
        assert record.getMessage().startswith("producer-0 had not finished; its threads were at:\n"), caplog.text
        assert "_held_in_a_call" in caplog.text and "test_cell_gone.py" in caplog.text, caplog.text
        assert process.is_alive()  # asked, not stopped: the cell's cleanup stops it
        run._log_stacks({parent: {}})  # a finished process is not asked
        assert len(caplog.records) == 1
    finally:
        process.kill()
        process.join(5)
        parent.close()
