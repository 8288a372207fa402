"""docs/RELIABILITY.md: the fault and bad-input tests, run against the real local stack, and what they observed.

Not a speed benchmark: `make reliability` (or `python bench/reliability.py`) runs the fault tests (FAULT_TESTS), the
bad-input tests (BAD_INPUT_TESTS) and the environment and secret checks (CHECK_TESTS) with BROKERBENCH_RELIABILITY_DIR
set, so each test writes what it saw (tests/reliability_log.py), then writes the document from those records and
pytest's own account of each check (passed, or skipped and why) only.
A test that fails leaves the document unwritten and exits with pytest's code.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FAULT_TESTS = ["tests/integration/test_faults.py", "tests/integration/test_kill_ec2_worker.py",
               "tests/integration/test_cancel.py", "tests/integration/test_step_faults.py",
               "tests/integration/test_step_retries.py", "tests/integration/test_two_runs_at_once.py"]
BAD_INPUT_TESTS = ["tests/unit/test_spec_properties.py", "tests/integration/test_api_fuzz.py"]
# Tests whose outcome (passed, skipped and why) is the record: what a user meets when the machine is not ready.
CHECK_TESTS = {"Environment": "tests/integration/test_environment_errors.py",
               "Secrets in a run": "tests/integration/test_secrets.py",
               "Secrets in the code": "tests/unit/test_no_secrets_in_code.py",
               "Local services on 127.0.0.1 only": "tests/integration/test_loopback.py"}
TESTS = FAULT_TESTS + BAD_INPUT_TESTS + list(CHECK_TESTS.values())
# The order of the faults in the document; a fault recorded but not listed here follows them, by name.
FAULTS = ["kill-producer", "kill-consumer", "kill-worker", "hang-worker", "kill-kafka", "kill-redis", "kill-pulsar",
          "event-store-restarted", "event-store-down", "cancel-lambda", "cancel-ec2", "ctrl-c-ec2", "step-fails-check_regression",
          "step-fails-aggregate", "step-fails-notify", "step-fails-teardown", "step-retries", "two-runs"]
BAD_INPUT = ("bad-input-specs", "bad-input-api")


def _code_version() -> str:
    described = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True, text=True)
    return described.stdout.strip() or "unknown"


def _cells(cells: list[dict]) -> list[str]:
    rows = ["| cell | status | sent | received | late | undelivered | lost | send errors | unacknowledged | "
            "duplicated | broker count (observed / expected) | reason |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for c in cells:
        broker = c.get("broker_count") or {}
        count = f"{broker.get('observed', '–')} / {broker.get('expected', '–')}" if broker else "–"
        figures = [c.get(k, "–") if c.get(k) is not None else "–" for k in
                   ("sent", "received", "late", "undelivered", "lost", "send_errors", "unacknowledged", "duplicated")]
        rows.append(f"| `{c['cell_id']}` | {c['status']} | " + " | ".join(map(str, figures))
                    + f" | {count} | {c.get('reason') or ''} |")
    return rows


def _events(facts: dict) -> str:
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(facts["by_type"].items()))
    return f"{facts['events']} events stored ({kinds}); {facts['duplicated']} repeated"


def _fault(name: str, facts: dict) -> list[str]:
    lines = [f"### {name}", "", f"- **Injected:** {facts['fault']}."]
    if "run_status" in facts:
        said = f"CLI exit code {facts['exit_code']}" if facts.get("exit_code") is not None else "no CLI (called directly)"
        lines.append(f"- **Final state:** run {facts['run_status']}, {said}.")
    else:
        lines.append(f"- **Final state:** CLI exit code {facts['exit_code']}; workflow interpreters left running: "
                     f"{facts['interpreters_left']}.")
    if "message" in facts:
        lines.append("- **What the CLI said:** " + " ".join(facts["message"]))
    if "by_type" in facts:
        lines.append(f"- **Events:** {_events(facts)}.")
    if "after_restart" in facts:
        lines.append(f"- **Events, the store started again:** {_events(facts['after_restart'])}.")
    if "intervals_kept" in facts:
        lines.append(f"- **Kept:** {facts['intervals_kept']} measured intervals of the failed cell, each once.")
    if "missing_intervals" in facts:
        lines.append(f"- **Missing intervals:** {facts['missing_intervals']} (every cell's intervals 0..n-1, once).")
    if facts.get("observed"):
        lines.append("- **Checked:** " + "; ".join(facts["observed"]) + ".")
    lines.append("")
    if facts.get("cells"):
        lines += _cells(facts["cells"]) + [""]
    return lines


def _checks(title: str, path: str, outcomes: dict[str, tuple[str, str]]) -> list[str]:
    """Each test of `path` with the first line of its docstring (what it checks) and how it ended here."""
    lines = [f"### {title} ({path})", ""]
    for test, (outcome, detail) in outcomes.items():
        if test.split("::")[0] == path:
            lines.append(f"- `{test.split('::')[1]}`: {outcome}" + (f" ({detail})" if detail else ""))
    return lines + [""]


def render(records: dict[str, dict], summary: str, outcomes: dict[str, tuple[str, str]] | None = None) -> str:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["# Reliability: faults and bad input", "",
             f"Generated by `make reliability` (bench/reliability.py) on {now}, code {_code_version()}, "
             f"{os.cpu_count()} cores, {platform.system()} {platform.release()}: the tests below ran against the real "
             f"local stack (Kafka, Redis, DynamoDB Local, the workflow through the CLI) and every figure here is what "
             f"they observed and asserted. pytest: {summary}.", "",
             "## Faults", ""]
    others = sorted(n for n in records if n not in FAULTS and n not in BAD_INPUT)
    for name in FAULTS + others:
        facts = records.get(name)
        lines += _fault(name, facts) if facts is not None else [f"### {name}", "", "not observed in this run", ""]
    lines += ["## Bad input", ""]
    specs = records.get("bad-input-specs", {})
    api = records.get("bad-input-api", {})
    lines += [f"- **Run requests** (property-based, hypothesis, tests/unit/test_spec_properties.py): "
              f"{sum(specs.values())} documents tried; "
              + ", ".join(f"{k}: {v}" for k, v in sorted(specs.items())) + "; crashes: 0 (any other exception fails "
              "the test).",
              f"- **HTTP API** (schemathesis over the served OpenAPI document, tests/integration/test_api_fuzz.py): "
              f"{sum(api.values())} requests; " + ", ".join(f"{k}: {v}" for k, v in sorted(api.items()))
              + f"; 5xx: {api.get('5xx', 0)} (a 5xx fails the test).", ""]
    if outcomes:
        lines += ["## Environment and secrets", ""]
        for title, path in CHECK_TESTS.items():
            lines += _checks(title, path, outcomes)
    return "\n".join(lines)


def _outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """pytest's JUnit XML as {tests/...py::name: (passed | skipped | failed, the skip's reason)}."""
    import xml.etree.ElementTree as ElementTree

    found = {}
    for case in ElementTree.parse(junit).iter("testcase"):
        path = case.get("classname", "").replace(".", "/") + ".py"
        skipped = case.find("skipped")
        failed = case.find("failure") is not None or case.find("error") is not None
        outcome = "failed" if failed else "skipped" if skipped is not None else "passed"
        found[f"{path}::{case.get('name')}"] = (outcome, skipped.get("message", "") if skipped is not None else "")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "docs" / "RELIABILITY.md"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "BROKERBENCH_RELIABILITY_DIR": folder}
        junit = Path(folder) / "junit.xml"
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                               *TESTS], cwd=REPO, env=env, capture_output=True, text=True)
        print(done.stdout[-3000:], done.stderr[-2000:], sep="\n")
        if done.returncode != 0:
            return done.returncode
        summary = [line for line in done.stdout.strip().splitlines() if " passed" in line][-1].strip("= ")
        records = {p.stem: json.loads(p.read_text()) for p in Path(folder).glob("*.json")}
        outcomes = _outcomes(junit)
    Path(args.out).write_text(render(records, summary, outcomes) + "\n")
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
