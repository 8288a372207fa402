"""Start-up: how long a fresh interpreter takes to import the core and to print the CLI's help.

Each command runs in a new process (nothing cached in memory; the files are in the page cache after the first
of the interleaved rounds, which is discarded), `--runs` times, the commands interleaved so that a burst of load
on the shared machine falls on all of them alike. The figure is the median wall time of each; the goal is the
CLI's `--help` in under 1 s (GOAL_S).

    PYTHONPATH=functions .venv/bin/python bench/startup.py --label before
    PYTHONPATH=functions .venv/bin/python bench/startup.py --label after

With --label the figures go under that key of the result file (default bench/results/startup.json), beside the
others already there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
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


def modules_loaded(code: str) -> int:
    """How many of the package's modules a new interpreter holds after running `code` (its output set aside, the
    help's exit caught)."""
    probe = (f"import io, sys\nsys.stdout = io.StringIO()\ntry:\n    exec({code!r})\nexcept SystemExit:\n    pass\n"
             "sys.__stdout__.write(str(sum(m.split('.')[0] == 'brokerbench' for m in sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=_env(), check=True)
    return int(done.stdout)


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO / "functions")}


def wall_s(code: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], capture_output=True, env=_env(), check=True)
    return time.perf_counter() - started


def measure(runs: int) -> dict:
    """Per command: every run's wall time (s) and their median, the first round discarded (a cold page cache)."""
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for round_number in range(runs + 1):
        for name, code in COMMANDS.items():
            seconds = wall_s(code)
            if round_number:
                times[name].append(round(seconds, 3))
    return {name: {"median_s": round(statistics.median(values), 3), "runs_s": values,
                   "modules": modules_loaded(COMMANDS[name])} for name, values in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="runs of each command (default 9)")
    parser.add_argument("--label", default="after", help="the key of these figures in the result file")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "startup.json")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs: at least 1")
    loads = os.getloadavg()
    figures = measure(args.runs)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=REPO).stdout.strip()
    for name, figure in figures.items():
        print(f"{name:>26}: median {figure['median_s']:.3f} s over {args.runs} runs, {figure['modules']} modules "
              f"of the package (runs {figure['runs_s']})")
    previous = json.loads(args.out.read_text()) if args.out.exists() else {}
    previous[args.label] = {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": platform.node(), "code": commit,
        "cores": os.cpu_count(), "python": platform.python_version(), "runs": args.runs, "goal_s": GOAL_S,
        "load_average_1_5_15": {"before": [round(x, 2) for x in loads], "after": [round(x, 2) for x in os.getloadavg()]},
        "commands": figures}
    args.out.write_text(json.dumps(previous, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
