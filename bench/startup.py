"""Start-up: how long a fresh interpreter takes to import the core and to print the CLI's help.

Each command runs in a new process (nothing cached in memory; the files are in the page cache after the first
of the interleaved rounds, which is discarded), `--runs` times, the commands interleaved so that a burst of load
on the shared machine falls on all of them alike. The figure is the median wall time of each; the goal is the
CLI's `--help` in under 1 s (GOAL_S).

    .venv/bin/python bench/startup.py --label after
    .venv/bin/python bench/startup.py --compare REV     # REV's package (as "before") and this one, interleaved

With --label the figures go under that key of the result file (default bench/results/startup.json), beside the
others already there. --compare measures the package as it was at git revision REV (its functions/ folder, the
built send loop copied in) in the same rounds as the working tree's, so that both meet the same load: the figures
go under "before" and "after".
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GOAL_S = 1.0  # the CLI's help: an answer one does not wait for
# What each figure is: a name, and the Python code a new interpreter runs.
COMMANDS = {
    "import brokerbench.spec": "import brokerbench.spec",
    "the plug-in registry": "from brokerbench.registry import plugins; plugins()",
    "brokerbench --help": "import sys; sys.argv = ['brokerbench', '--help']; from brokerbench.cli import main; main()",
    "brokerbench show --help": ("import sys; sys.argv = ['brokerbench', 'show', '--help']; "
                                "from brokerbench.cli import main; main()"),
}


def modules_loaded(code: str, functions: Path) -> int:
    """How many of the package's modules a new interpreter holds after running `code` (its output set aside, the
    help's exit caught)."""
    probe = (f"import io, sys\nsys.stdout = io.StringIO()\ntry:\n    exec({code!r})\nexcept SystemExit:\n    pass\n"
             "sys.__stdout__.write(str(sum(m.split('.')[0] == 'brokerbench' for m in sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=_env(functions),
                          check=True)
    return int(done.stdout)


def _env(functions: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(functions)}


def wall_s(code: str, functions: Path) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], capture_output=True, env=_env(functions), check=True)
    return time.perf_counter() - started


def measure(runs: int, trees: dict[str, Path]) -> dict:
    """Per package tree (label -> its functions/ folder) and command: every run's wall time (s) and their median,
    the trees and commands interleaved in each round, the first round discarded (a cold page cache)."""
    times = {label: {name: [] for name in COMMANDS} for label in trees}
    for round_number in range(runs + 1):
        for label, functions in trees.items():
            for name, code in COMMANDS.items():
                seconds = wall_s(code, functions)
                if round_number:
                    times[label][name].append(round(seconds, 3))
    return {label: {name: {"median_s": round(statistics.median(values), 3), "runs_s": values,
                           "modules": modules_loaded(COMMANDS[name], trees[label])}
                    for name, values in per_command.items()} for label, per_command in times.items()}


def package_at(rev: str, into: Path) -> Path:
    """functions/ as it was at git revision `rev`, under `into`, with the working tree's built send loop (not in
    git) copied in, so both trees load the same native module."""
    archive = subprocess.run(["git", "archive", "--format=tar", rev, "functions"], cwd=REPO, capture_output=True,
                             check=True).stdout
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    for built in (REPO / "functions" / "brokerbench" / "native").glob("_sendloop*.so"):
        shutil.copy2(built, into / "functions" / "brokerbench" / "native" / built.name)
    return into / "functions"


def _commit(rev: str = "HEAD") -> str:
    return subprocess.run(["git", "rev-parse", "--short", rev], capture_output=True, text=True, cwd=REPO).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="runs of each command (default 9)")
    parser.add_argument("--label", default="after", help="the key of these figures in the result file")
    parser.add_argument("--compare", metavar="REV", help="also measure the package at git revision REV, as before")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "startup.json")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs: at least 1")
    with tempfile.TemporaryDirectory(prefix="startup-") as scratch:
        trees = {"before": package_at(args.compare, Path(scratch))} if args.compare else {}
        trees["after" if args.compare else args.label] = REPO / "functions"
        codes = {label: _commit(args.compare) if label == "before" and args.compare else _commit() for label in trees}
        loads = os.getloadavg()
        figures = measure(args.runs, trees)
    previous = json.loads(args.out.read_text()) if args.out.exists() else {}
    for label, per_command in figures.items():
        for name, figure in per_command.items():
            print(f"{label:>6} {name:>26}: median {figure['median_s']:.3f} s over {args.runs} runs, "
                  f"{figure['modules']} modules of the package (runs {figure['runs_s']})")
        previous[label] = {
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": platform.node(),
            "code": codes[label], "cores": os.cpu_count(), "python": platform.python_version(), "runs": args.runs,
            "goal_s": GOAL_S, "interleaved_with": sorted(set(figures) - {label}),
            "load_average_1_5_15": {"before": [round(x, 2) for x in loads],
                                    "after": [round(x, 2) for x in os.getloadavg()]},
            "commands": per_command}
    args.out.write_text(json.dumps(previous, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
