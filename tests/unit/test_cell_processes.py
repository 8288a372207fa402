"""How a cell's processes start (brokerbench.worker.processes): from the worker's fork server, with the worker's
environment of when each starts, and holding nothing that would keep the fork server alive after the worker."""

import multiprocessing
import os
import subprocess
import sys
import textwrap
import time

import pytest

from brokerbench.worker import processes

pytestmark = pytest.mark.skipif("forkserver" not in multiprocessing.get_all_start_methods(),
                                reason="no fork server on this platform")


def _report(conn, names) -> None:
    """A cell process's body: what it sees of the environment, and its own view of the fork server's pipe."""
    from multiprocessing import forkserver

    conn.send({"environ": {n: os.environ.get(n) for n in names},
               "holds_server": forkserver._forkserver._forkserver_alive_fd is not None,
               "parent": multiprocessing.parent_process().pid})
    conn.close()


def _start(environ: dict):
    ctx = processes.context([])
    parent, child = ctx.Pipe()
    process = ctx.Process(target=processes.start, args=("probe", 0, environ, _report, child, ["BB_SEEN", "BB_GONE"]),
                          daemon=True)
    process.start()
    child.close()
    try:
        return parent.recv(), process
    finally:
        process.join(10)


def test_a_cell_process_has_the_environment_it_is_given_not_the_fork_servers():
    """The worker's environment of when the process starts, whatever the fork server's was when it started."""
    os.environ["BB_GONE"] = "in the worker's environment, not in the one given"
    try:
        given = {**{k: v for k, v in os.environ.items() if k != "BB_GONE"}, "BB_SEEN": "given"}
        seen, process = _start(given)
    finally:
        del os.environ["BB_GONE"]
    assert seen["environ"] == {"BB_SEEN": "given", "BB_GONE": None}
    assert seen["parent"] == os.getpid() and process.exitcode == 0


def test_a_cell_process_lets_go_of_the_fork_server():
    """Only the worker keeps its fork server alive, so the server (and, by PR_SET_PDEATHSIG, every cell process)
    ends with the worker."""
    seen, process = _start(dict(os.environ))
    assert seen["holds_server"] is False
    assert process.exitcode == 0


WORKER = textwrap.dedent("""
    import multiprocessing, sys, time
    from brokerbench.worker import processes

    def body(conn, task):
        processes.serve("producer", 0, conn, lambda _grant: time.sleep(120))

    if __name__ == "__main__":
        ctx = processes.context([])
        parent, child = ctx.Pipe()
        ctx.Process(target=processes.start, args=("producer", 0, {}, body, child, None), daemon=True).start()
        print(flush=True)  # started
        time.sleep(120)
""")


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1])


def _producers_below(ancestor: int) -> list[int]:
    """The processes called bb-producer-0 that descend from `ancestor`."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/comm") as f:
                if f.read().strip() != "bb-producer-0":
                    continue
        except OSError:
            continue
        pid = int(entry)
        while (stat := _stat(pid)) is not None and pid > 1 and pid != ancestor:
            pid = stat[1]
        if pid == ancestor:
            found.append(int(entry))
    return found


def _running(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_cell_process_dies_with_a_worker_killed_by_sigkill(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    worker = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, env={**os.environ})
    try:
        worker.stdout.readline()
        deadline = time.monotonic() + 60
        while not (mine := _producers_below(worker.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mine, "the cell process did not start"
    finally:
        worker.kill()
        worker.wait()
    deadline = time.monotonic() + 10
    while any(map(_running, mine)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(_running, mine))


MAIN_COUNTED = textwrap.dedent("""
    import os, sys
    from brokerbench.worker import processes

    if __name__ == "__mp_main__":  # imported by a process multiprocessing started: counted
        with open(os.environ["IMPORTS"], "a") as f:
            f.write(f"{os.getpid()}\\n")

    def body(conn, task):
        conn.send(os.getpid())

    if __name__ == "__main__":
        ctx = processes.context([])
        for _ in range(3):
            parent, child = ctx.Pipe()
            process = ctx.Process(target=processes.start, args=("producer", 0, dict(os.environ), body, child, None))
            process.start()
            child.close()
            print(parent.recv(), flush=True)
            process.join(10)
""")


def test_the_workers_main_module_is_imported_once_by_the_fork_server_not_by_each_process(tmp_path):
    """multiprocessing imports the starting process's main module in every process it starts; from the fork
    server they find it imported (there the CLI's modules cost 0.2 to 0.9 s per process on a loaded machine)."""
    script, imports = tmp_path / "worker.py", tmp_path / "imports"
    script.write_text(MAIN_COUNTED)
    done = subprocess.run([sys.executable, str(script)], env={**os.environ, "IMPORTS": str(imports)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    started = [int(line) for line in done.stdout.split()]
    importers = [int(line) for line in imports.read_text().split()]
    assert len(started) == 3 and len(importers) == 1 and importers[0] not in started
