"""Time the test suite: `make test` (or a given pytest command) in a checkout, with the machine's load while it ran.

    .venv/bin/python bench/test_suite.py --label quiet-serial                      # make test in this checkout
    .venv/bin/python bench/test_suite.py --label two-workers --make-args WORKERS=2
    .venv/bin/python bench/test_suite.py --label docs --pytest-args "tests/unit/test_docs.py" --out /tmp/trial.json

Samples the 1-minute load average every --interval seconds (30), reads pytest's last line (passed, failed, errors,
skipped and its own wall time), counts the CPU time of the command and every process it reaped (user + system), and
appends a row under --label to bench/results/test_suite.json (--out). The command's output goes to --log (a
temporary file by default, its path printed). Under pytest-xdist each worker writes when every test started and ended
(BROKERBENCH_TEST_TIMELINE, tests/conftest.py): the row's `workers` gives each worker's busy seconds and when it
ran its last test, from the first test's start (the idle tail of a run is the gap between those ends).
bench/performance.py writes the rows into docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "results" / "test_suite.json"
COUNTS = ("passed", "failed", "errors", "skipped")
# pytest's summary: "=== 3 passed, 1 skipped, 2 warnings in 12.34s (0:00:12) ===" (with -q, without the rules).
SUMMARY = re.compile(r"\b\d+ (passed|failed|errors?|skipped|deselected|xfailed|xpassed)\b.* in (\d+(?:\.\d+)?)s\b")


def parse_summary(output: str) -> dict | None:
    """pytest's last summary line as {passed, failed, errors, skipped, pytest_wall_s}, or None when it has none."""
    lines = [line for line in output.splitlines() if SUMMARY.search(line)]
    if not lines:
        return None
    last = lines[-1]
    found = {kind: 0 for kind in COUNTS}
    for number, kind in re.findall(r"(\d+) (passed|failed|errors?|skipped)\b", last.split(" in ")[0]):
        found["errors" if kind.startswith("error") else kind] += int(number)
    found["pytest_wall_s"] = float(SUMMARY.search(last).group(2))
    return found


def commit_of(checkout: Path) -> str:
    described = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=checkout, capture_output=True, text=True)
    return described.stdout.strip() or "unknown"


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], cwd: Path, log: Path, env: dict | None = None, interval: float = 30.0) -> dict:
    """Run `command`, its output to `log`; its wall time, exit code, CPU time and the load average sampled meanwhile."""
    loads = [os.getloadavg()[0]]
    cpu, start = _cpu_of_children(), time.monotonic()
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        while True:
            try:
                code = process.wait(timeout=interval)
                break
            except subprocess.TimeoutExpired:
                loads.append(os.getloadavg()[0])
    loads.append(os.getloadavg()[0])
    return {"exit_code": code, "wall_s": round(time.monotonic() - start, 1),
            "cpu_s": round(_cpu_of_children() - cpu, 1), "load_samples": [round(x, 2) for x in loads]}


def command_for(args: argparse.Namespace) -> tuple[list[str], str]:
    """The command to time and how the page describes it."""
    if args.pytest_args is not None:
        command = [args.python, "-m", "pytest", "-q", *shlex.split(args.pytest_args)]
        return command, args.how or f"pytest -q {args.pytest_args}"
    command = ["make", "test", *shlex.split(args.make_args)]
    return command, args.how or " ".join(command)


def row(label: str, how: str, command: list[str], checkout: Path, run: dict, output: str) -> dict:
    summary = parse_summary(output)
    is_make = command[0] == "make"
    found = {
        "label": label, "how": how, "command": " ".join(command),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit_of(checkout),
        "host": f"{os.cpu_count()} cores, {platform.system()} {platform.release()}",
        "load_start": run["load_samples"][0], "load_end": run["load_samples"][-1],
        "load_max": max(run["load_samples"]), "load_samples": run["load_samples"],
        "pytest_wall_s": summary["pytest_wall_s"] if summary else None,
        "make_test_wall_s": run["wall_s"] if is_make else None, "command_wall_s": run["wall_s"],
        "cpu_s": run["cpu_s"], "exit_code": run["exit_code"], "finished": summary is not None,
        "source": "bench/test_suite.py",
    }
    found.update({kind: (summary or {}).get(kind, 0) for kind in COUNTS})
    return found


def workers(timeline: Path) -> dict | None:
    """Per pytest-xdist worker: its tests' seconds (busy_s) and its last test's end from the run's first start."""
    lines = timeline.read_text().splitlines() if timeline.exists() else []
    marks = [json.loads(line) for line in lines if line.strip()]
    if not marks:
        return None
    first = min(m["start"] for m in marks if "start" in m)
    tests: dict[str, dict[str, dict]] = {}  # worker -> test -> {"start": ..., "end": ...}
    for mark in marks:
        tests.setdefault(mark["worker"], {}).setdefault(mark["test"], {}).update(mark)
    found = {}
    for worker, times in sorted(tests.items()):
        ended = [t for t in times.values() if "end" in t]
        busy = sum(t["end"] - t["start"] for t in ended if "start" in t)
        found[worker] = {"tests": len(ended), "busy_s": round(busy, 1),
                         "last_end_s": round(max((t["end"] for t in ended), default=first) - first, 1)}
    return found


def append(out: Path, entry: dict) -> None:
    results = json.loads(out.read_text()) if out.exists() else {"rows": []}
    results["rows"].append(entry)
    out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True, help="the row's name")
    parser.add_argument("--checkout", default=str(REPO), help="the checkout to run in (this one by default)")
    parser.add_argument("--pytest-args", help="run `python -m pytest -q ARGS` instead of `make test`")
    parser.add_argument("--make-args", default="", help="extra arguments of `make test`, e.g. WORKERS=2")
    parser.add_argument("--python", default=sys.executable, help="the interpreter for --pytest-args")
    parser.add_argument("--how", help="how the row was run, as the page says it (default: the command)")
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between load-average samples")
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--log", help="where the command's output goes (default: a temporary file)")
    args = parser.parse_args(argv)
    checkout = Path(args.checkout).resolve()
    command, how = command_for(args)
    log = Path(args.log) if args.log else Path(tempfile.mkstemp(prefix="test-suite-", suffix=".log")[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(checkout / "functions"),
                                                                     os.environ.get("PYTHONPATH")]))}
    timeline = Path(tempfile.mkstemp(prefix="test-timeline-", suffix=".jsonl")[1])
    env["BROKERBENCH_TEST_TIMELINE"] = str(timeline)
    print(f"running {' '.join(command)} in {checkout}; output: {log}", flush=True)
    run = timed(command, checkout, log, env, args.interval)
    entry = row(args.label, how, command, checkout, run, log.read_text(errors="replace"))
    entry["workers"] = workers(timeline)
    timeline.unlink(missing_ok=True)
    append(Path(args.out), entry)
    print(json.dumps({k: v for k, v in entry.items() if k != "load_samples"}, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
