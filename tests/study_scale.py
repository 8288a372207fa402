"""The study tests' scale: `brokerbench run --suite NAME --scale F` as a user runs it, each run then cut to the
smallest shape that still has everything the suite has.

Run as a script, this is the `brokerbench` command with one difference: after --scale (spec.scaled, unchanged:
what users get) each of a study's runs gets SHAPES[its name] on top, and a note saying so. What stays: every
run of the study (`brokerbench study` needs them all), every broker, format and mode, the size and rate axes
(fewer points), paired sizes and rates, the topologies and clusters, partitions and topics, client settings
(compression, acks), a startup backlog, periodic bursts and the sustainable-rate search. What goes: the other
points of an axis, seconds a cell does not need (the shortest duration the cell's shape allows: one interval,
verdict.MIN_INTERVALS for a search step, two whole periods with bursts), warm-up beyond a tenth of a second, and
rates, counts and search steps that only give a shape. That the user's scale keeps the whole matrix, and that the
whole matrix fills every table and decides every checked conclusion, is checked without brokers
(tests/unit/test_study_suites.py, test_study_compare.py).
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

from brokerbench import cli, spec

WARMUP_S = 0.1  # a warm-up the suite has stays, this short: its messages are still excluded from every figure
SHORT = {"duration_s": 1.0}  # one one-second interval
SHAPES: dict[str, dict] = {
    "tallberg-throughput": {**SHORT, "sizes": [1000]},
    # 1 kB at both its rates and 65 kB at one: the pairs still differ by size (no 65 kB at 1,000 msgs/s)
    "tallberg-latency": {**SHORT, "size_rates": [{"size": 1000, "rates": [1000, 5000]},
                                                 {"size": 65000, "rates": [100]}]},
    "helenius-1p1c1b": SHORT,
    "helenius-4p1c1b": SHORT,
    "helenius-4p1c3b": SHORT,
    "myastovskiy": {"sizes": [1176], "messages": 500},
    "downard-sizes": {**SHORT, "sizes": [100, 10000]},
    "downard-partitions-10": SHORT,
    "downard-partitions-100": SHORT,
    "downard-partitions-400": SHORT,
    "downard-topics-10": SHORT,
    "downard-topics-100": SHORT,
    "vandongen-latency": SHORT,
    # Two steps from 200 msgs/s: the search runs, records its steps and, on a host that is not overloaded, finds a
    # rate. A 5 s step tolerates no slow second (verdict.py): at a load of 15 to 20 beside two CPU hogs both steps
    # (200, 133) once read not sustainable, and a third step only measured 200 again (sustainable, then not: a tie,
    # which counts against it). So the test takes "no sustainable rate found" as the search's outcome there, and
    # checks that no rate it tried stood (test_study_suites_run.check_no_rate_stands).
    "vandongen-sustainable": {"search": {"start_rate": 200, "precision": 0.5, "max_steps": 2}},
    "vandongen-startup-burst": {**SHORT, "backlog": {"messages": 600, "rate": 3000}},
    # two whole periods of 1 s (the duration scaled() keeps for bursts), each a burst of 400 due over 175 ms
    "vandongen-periodic-burst": {"duration_s": 2.175, "burst": {"every_s": 1, "messages": 400, "over_s": 0.175}},
}


def smallest(request: dict) -> dict:
    """The (already scaled) run request in the test's shape: SHAPES[name] over it (nested objects merged), the
    warm-up at most WARMUP_S, and a note saying what changed, put before the scale's own note (which stays the
    last, as `brokerbench run` prints it and a study shows it)."""
    out = copy.deepcopy(request)
    changed = []
    for field, value in SHAPES[request["name"]].items():
        old = request.get(field)
        new = {**old, **value} if isinstance(value, dict) and isinstance(old, dict) else value
        if new != old:
            out[field] = new
            changed.append(f"{field} {old} -> {new}")
    if out.get("warmup_s", 0) > WARMUP_S:
        changed.append(f"warmup_s {out['warmup_s']} -> {WARMUP_S}")
        out["warmup_s"] = WARMUP_S
    notes = out.get("notes", [])
    out["notes"] = [*notes[:-1], f"test shape: {'; '.join(changed) or 'as scaled'}", *notes[-1:]]
    return out


def suite_run(suite: str, run: str, scale: float) -> dict:
    """One run request of a suite as `brokerbench run --suite SUITE --only RUN --scale F` gives it (spec.scaled,
    what users get: faults come at the same places in the shorter cell), for a test that runs the suite's own
    request rather than one written beside it."""
    return spec.suite_request(suite, run, scale)


def command(*args: str) -> list[str]:
    """The command line of `brokerbench ARGS` in the tests' shape (this file run by the tests' Python)."""
    return [sys.executable, str(Path(__file__).resolve()), *args]


SELECTED = {"broker": "broker", "size": "size_bytes", "rate": "rate_target", "format": "format", "mode": "mode",
            "producers": "producers", "consumers": "consumers", "partitions": "partitions"}  # study -> results.json


def selected_cells(published: dict, results: dict[str, dict]) -> list[list[list[dict]]]:
    """For each figure of a published table (by row, then column): the completed cells of the run its row names
    that its row and column select, worked out from the runs' results.json, apart from the comparison."""
    out = []
    for row in published["rows"]:
        run = results.get(row.get("run", published["run"]))
        cells = [c for c in (run["cells"] if run else []) if c["status"] == "completed"]
        figures = []
        for column in published["columns"]:
            select = {**published.get("select", {}), **row, **column}
            wanted = {SELECTED[k]: v for k, v in select.items() if k in SELECTED}
            figures.append([c for c in cells if all(c[k] == v for k, v in wanted.items())])
        out.append(figures)
    return out


def check_figures(name: str, comparison: dict, results: dict[str, dict]) -> dict[str, int]:
    """Each figure of ours in `brokerbench study NAME --json` is there exactly when the runs have cells it selects,
    and from those cells. Returns how many figures of ours each table has."""
    published = {t["id"]: t for t in spec.load_suite_file(name)["published"]["tables"]}
    shown = {}
    for table in comparison["tables"]:
        assert set(table["run_ids"]) <= {r["run_id"] for r in results.values()}, table["id"]
        wanted = selected_cells(published[table["id"]], results)
        filled = 0
        for row, cells in zip(table["rows"], wanted):
            for figure, selected in zip(row["figures"], cells):
                where = (table["id"], row["label"], figure)
                if selected:
                    assert sorted(figure["cells"]) == sorted(c["cell_id"] for c in selected), where
                    if figure["ours"] is None:  # only messages never measured put a figure out of reach: "≥ X"
                        unmeasured = sum((c["missing"] or 0) + (c["not_sent"] or 0) for c in selected)
                        assert unmeasured > 0, where  # (a minimum an unsent message's bound lies below: no "≥")
                        assert figure.get("ours_at_least", 1) > 0, where
                    else:
                        assert "ours_at_least" not in figure, where
                    filled += 1
                else:  # a point the shape leaves out, or a broker that cannot run here (Redpanda)
                    assert figure["ours"] is None and figure["cells"] == [], where
        shown[table["id"]] = filled
    return shown


def main(argv: list[str]) -> int:
    scaled = spec.scaled
    spec.scaled = lambda request, factor: smallest(scaled(request, factor))  # what cli._requests calls
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
