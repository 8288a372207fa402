"""A newcomer's first run: clone the repository, `make setup`, then `make run`, each timed, with CI=true.

    .venv/bin/python bench/first_run.py --label quiet                 # clones this checkout's HEAD
    .venv/bin/python bench/first_run.py --label setup-only --no-run   # make setup alone

The clone goes to a temporary folder (kept with --keep) and gets its own .venv, .cache and .brokerbench; the run
starts with no BROKERBENCH_* variable, so nothing of this checkout's stack is used. `make setup` and `make run` are
timed one after the other (`make run` then finds everything installed and only runs the quick suite), with the
1-minute load average sampled every --interval seconds, and a row is appended to bench/results/first_run.json (--out).
Maven reads its local repository from the user's home (~/.m2), which a clone does not change: the row says how
much of it was there. bench/performance.py writes the rows into docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_suite import append, commit_of, timed  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "results" / "first_run.json"


def fresh_env() -> dict:
    """The caller's environment without the project's own variables and with CI=true (no browser opens)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("BROKERBENCH_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "CI": "true"}


def clone(source: Path, ref: str, folder: Path) -> Path:
    target = folder / "brokerbench"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(source), str(target)], check=True)
    subprocess.run(["git", "checkout", "--quiet", ref], cwd=target, check=True)
    return target


def maven_repository_mb() -> float:
    m2 = Path.home() / ".m2" / "repository"
    return round(sum(p.stat().st_size for p in m2.rglob("*") if p.is_file()) / 1e6) if m2.exists() else 0


def measure(checkout: Path, logs: Path, interval: float, with_run: bool) -> dict:
    """make setup, then (unless told not to) make run, in `checkout`: each step's timing and the first failure."""
    env = fresh_env()
    steps = {"setup": timed(["make", "setup"], checkout, logs / "setup.log", env, interval)}
    if with_run and steps["setup"]["exit_code"] == 0:
        steps["run"] = timed(["make", "run"], checkout, logs / "run.log", env, interval)
    return steps


def row(label: str, how: str, commit: str, steps: dict, maven_mb: float) -> dict:
    loads = [x for step in steps.values() for x in step["load_samples"]]
    setup, run = steps["setup"], steps.get("run")
    return {
        "label": label, "how": how, "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit, "setup_wall_s": setup["wall_s"], "run_wall_s": run["wall_s"] if run else None,
        "total_wall_s": round(setup["wall_s"] + run["wall_s"], 1) if run else None,
        "exit_code": run["exit_code"] if run else setup["exit_code"], "failed_step": next(
            (name for name, step in steps.items() if step["exit_code"] != 0), None),
        "cpu_s": round(sum(step["cpu_s"] for step in steps.values()), 1),
        "load_start": loads[0], "load_end": loads[-1], "load_max": max(loads), "load_samples": loads,
        "maven_repository_mb_before": maven_mb, "source": "bench/first_run.py",
    }


def remove(folder: Path) -> None:
    """Stop the clone's local stack if `make run` left one, then delete the clone."""
    checkout = folder / "brokerbench"
    if (checkout / ".venv").exists():
        subprocess.run(["make", "down"], cwd=checkout, capture_output=True)
    shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True, help="the row's name")
    parser.add_argument("--source", default=str(REPO), help="the repository to clone (this checkout by default)")
    parser.add_argument("--ref", default="HEAD", help="the commit to check out in the clone")
    parser.add_argument("--how", default="fresh clone, make setup then make run, CI=true",
                        help="how the row was run, as the page says it")
    parser.add_argument("--no-run", action="store_true", help="time make setup alone")
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between load-average samples")
    parser.add_argument("--keep", action="store_true", help="keep the clone and its logs")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="bb-first-run-"))
    ref = subprocess.run(["git", "rev-parse", args.ref], cwd=args.source, capture_output=True, text=True,
                         check=True).stdout.strip()
    try:
        checkout = clone(Path(args.source), ref, folder)
        maven_mb = maven_repository_mb()
        print(f"clone: {checkout}; logs: {folder}", flush=True)
        steps = measure(checkout, folder, args.interval, not args.no_run)
        entry = row(args.label, args.how, commit_of(checkout), steps, maven_mb)
    finally:
        if not args.keep:
            remove(folder)
    append(Path(args.out), entry)
    print(json.dumps({k: v for k, v in entry.items() if k != "load_samples"}, indent=2))
    return 0 if entry["exit_code"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
