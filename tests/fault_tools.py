"""What the fault tests share: the CLI started as a user starts it, the processes below it, a Lambda context for
a handler called directly, and the facts of a run as docs/RELIABILITY.md states them."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).with_name("brokerbench")


def descendants(pid: int) -> dict[int, str]:
    """Every process below `pid`: its pid and its name (/proc/PID/comm)."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                names[int(entry.name)] = (entry / "comm").read_text().strip()
            except OSError:
                continue
            parents[int(entry.name)] = _parent_in(stat)
    found, frontier = {}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, its_parent in parents.items():
            if its_parent == parent and child not in found:
                found[child] = names.get(child, "")
                frontier.append(child)
    return found


def _parent_in(stat: str) -> int:
    return int(stat.rsplit(")", 1)[1].split()[1])  # /proc/PID/stat: the field after the state


def parent_of(pid: int) -> int:
    return _parent_in(Path(f"/proc/{pid}/stat").read_text())


def ancestor_running(pid: int, needle: str) -> int:
    """The nearest process above `pid` whose command line holds `needle` (a cell's processes are forked by the
    worker's fork server, a child of the worker)."""
    parent = parent_of(pid)
    while parent > 1 and needle not in cmdline(parent):
        parent = parent_of(parent)
    if parent <= 1:
        raise LookupError(f"no process above {pid} runs {needle}")
    return parent


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """The process runs (a zombie, ended but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


EC2_WORKER = "brokerbench.ec2_worker"


def workers_below(pid: int) -> dict[int, str]:
    """The worker processes running below `pid`: producers and consumers by their names (bb-*), and EC2-kind
    workers as EC2_WORKER."""
    found = {child: name if name.startswith("bb-") else EC2_WORKER for child, name in descendants(pid).items()
             if name.startswith("bb-") or EC2_WORKER in cmdline(child)}
    return {child: name for child, name in found.items() if alive(child)}


def working_in(folder: Path) -> list[int]:
    """Every process whose working directory is `folder` or below it (a node a run's fault started again there, whose
    pid only that run's worker knew)."""
    root = str(Path(folder).resolve())
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cwd = os.readlink(entry / "cwd").removesuffix(" (deleted)")
            except OSError:
                continue
            if cwd == root or cwd.startswith(root + "/"):
                found.append(int(entry.name))
    return found


def running(pids) -> dict[int, str]:
    """Those of `pids` still running (not exited, not a zombie waiting to be reaped), with their names."""
    found = {}
    for pid in pids:
        if alive(pid):
            try:
                found[pid] = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                continue
    return found


def event_facts(events: list[dict]) -> dict:
    """The stored events of a run as docs/RELIABILITY.md states them: how many of each type, and how many repeated."""
    kinds: dict[str, int] = {}
    for event in events:
        kinds[event["type"]] = kinds.get(event["type"], 0) + 1
    return {"events": len(events), "by_type": kinds, "duplicated": len(events) - len({e["event_id"] for e in events})}


def cell_facts(cell: dict) -> dict:
    keys = ("cell_id", "status", "reason", "sent", "received", "late", "undelivered", "lost", "send_errors",
            "unacknowledged", "duplicated", "broker_count")
    return {k: cell.get(k) for k in keys if k in cell}


def as_from_a_terminal() -> None:
    """A Popen preexec_fn: Ctrl-C reaches the CLI as it does from a terminal. A command started in the background of a
    non-interactive shell (`make test &` in a script) has SIGINT ignored, and every process below it inherits that,
    the CLI included: it then runs on through a `kill -INT` and exits 0."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def run_until_measuring(state, spec: dict, tmp_path, env: dict | None = None) -> subprocess.Popen:
    """`brokerbench run` of `spec` on the stack in `state`, returned once its first producer process is up."""
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    cli = subprocess.Popen([str(BIN), "--state-dir", str(state), "run", "--spec", str(tmp_path / "spec.json"),
                            "--out", str(tmp_path / "out")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env={**os.environ, **(env or {})}, preexec_fn=as_from_a_terminal)
    deadline = time.monotonic() + 300  # a hang, not a slow host: at a load of 30 an EC2-kind cell took over 120 s
    while not [p for p, name in descendants(cli.pid).items() if name == "bb-producer-0"]:
        if cli.poll() is not None:
            stdout, stderr = cli.communicate()
            raise AssertionError(f"the CLI ended (exit {cli.returncode}) before its first producer started:\n"
                                 f"{stdout[-3000:]}\n{stderr[-3000:]}")
        if time.monotonic() > deadline:
            cli.kill()
            stdout, stderr = cli.communicate()
            raise AssertionError(f"no producer process within 300 s of the CLI's start:\n{stdout[-3000:]}\n"
                                 f"{stderr[-3000:]}")
        time.sleep(0.1)
    return cli


def interpreters_of(state_dir) -> list[int]:
    """The workflow interpreters (node) still running for this state folder."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"execute.mjs" in (entry / "cmdline").read_bytes() and \
                        f"BROKERBENCH_STATE_DIR={state_dir}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


class LambdaContext:
    """What Lambda hands a handler (Powertools' logger reads these)."""

    def __init__(self, function_name: str = "brokerbench-test") -> None:
        self.function_name = function_name
        self.memory_limit_in_mb = 256
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}"
        self.aws_request_id = "test-request"


# The classes every measured message sent falls in, once (worker.outcome): the whole of `sent`.
SENT_CLASSES = ("received", "late", "undelivered", "lost", "send_errors", "unacknowledged")


def assert_accounting_whole(cell: dict, context: str = "") -> None:
    """A cell of results.json accounts for every message, a fault or not (worker.outcome's rule, summed here from
    the stored classes, not taken from its `residual`): sent = received + late + undelivered + lost + send errors +
    unacknowledged, where undelivered and lost count as their sum `undelivered_or_lost` when the broker's backlog
    could not split them; due = sent + not sent; no class below 0; and the stored residual is 0. `context`: more to
    show on failure."""
    facts = (cell_facts(cell), context) if context else cell_facts(cell)
    split_known = cell.get("undelivered") is not None and cell.get("lost") is not None
    classes = SENT_CLASSES if split_known else tuple(
        k for k in (*SENT_CLASSES, "undelivered_or_lost") if k not in ("undelivered", "lost"))
    counts = {k: cell.get(k) for k in classes}
    assert all(isinstance(v, int) and v >= 0 for v in counts.values()), (counts, facts)
    if split_known and cell.get("undelivered_or_lost") is not None:
        assert cell["undelivered_or_lost"] == cell["undelivered"] + cell["lost"], facts
    assert cell["sent"] == sum(counts.values()), (f"sent {cell['sent']} != {' + '.join(classes)} "
                                                  f"= {sum(counts.values())}", counts, facts)
    if cell.get("due") is not None:
        assert cell["due"] == cell["sent"] + (cell.get("not_sent") or 0), facts
    assert cell.get("residual") == 0, facts


def one_fault_cell(request: dict, endpoint: dict, endpoints: dict, store) -> tuple[dict, list[dict]]:
    """A run of `request` (one broker, one cell, with faults) on `endpoint`, in this process: its cell as
    results.json holds it, completed, and the run's events. Prints what the cell stored of its faults."""
    from inline_run import execute_run

    from brokerbench.reports.results import build_results

    [broker] = request["brokers"]
    outcome = execute_run(request, {**endpoints, broker: endpoint}, store)
    events = store.read(outcome.run_id)
    [cell] = build_results(events)["cells"]
    assert cell["status"] == "completed", cell.get("reason")
    shown = ("applied", "leader_at_end", "producer_ack_gap", "consumer_receipt_gap")
    print(json.dumps({k: cell["faults"][k] for k in shown}, indent=1), cell_facts(cell))
    return cell, events
