"""Planning a run for the workflow: the cells, and which kind of worker runs each one."""

from __future__ import annotations

import math

from . import faults
from .spec import expand, load_suite_file, scaled, suite_runs, validate

# Start-up of a cell beyond its configured time: spawning processes, topic creation, drain.
CELL_OVERHEAD_S = 15
# An unthrottled cell that sends a count of messages: its rate is unknown ahead of time. Assumed (msgs/s, the
# cell's producers together): about what a local Kafka or Redis takes from batching producers, and from one
# waiting for each acknowledgement (single). So 1,048,576 batch messages take about the minute this used to
# assume for every such cell, and a count scaled down takes proportionally less.
ASSUMED_MAX_RATE = {"batch": 20_000, "single": 2_000}


def estimated_seconds(cell: dict) -> float:
    if cell["rate"] == "sustainable":  # at most: a probe, every step, and the latency steps
        search = cell.get("search") or {}
        steps = 1 + search.get("max_steps", 16) + len(search.get("latency_at") or [])
        return steps * estimated_seconds({**cell, "rate": "max", "messages": None})
    if cell["messages"] is not None and cell["rate"] != "max":
        measured = cell["messages"] / cell["rate"]
    elif cell["messages"] is not None:  # unthrottled by count: at an assumed rate
        measured = cell["messages"] / ASSUMED_MAX_RATE.get(cell.get("mode"), ASSUMED_MAX_RATE["batch"])
    else:
        measured = cell["duration_s"]
    if cell.get("backlog"):  # sent before duration_s starts
        measured += cell["backlog"]["messages"] / cell["backlog"]["rate"]
    restore = faults.managed_wait_s(cell.get("faults") or [])  # a managed service's node coming back (AWS)
    return cell["warmup_s"] + measured + cell["drain_timeout_s"] + CELL_OVERHEAD_S + restore


def worker_kind(cell: dict, placement: dict) -> str:
    """lambda for cells that fit comfortably in one invocation, ec2 for long or heavy ones."""
    if placement["worker"] != "auto":
        return placement["worker"]
    processes = cell["producers"] + cell["consumers"]
    fits = estimated_seconds(cell) <= placement["lambda_max_cell_s"] and processes <= placement["lambda_max_processes"]
    return "lambda" if fits else "ec2"


def run_seconds(spec: dict, cells: list[dict]) -> int:
    """A run's estimated time: its cells' estimates, max_concurrency at a time."""
    return math.ceil(sum(estimated_seconds(c) for c in cells) / spec["max_concurrency"])


def plan(spec: dict) -> dict:
    cells = [{**cell, "worker": worker_kind(cell, spec["placement"])} for cell in expand(spec)]
    return {
        "cells": cells,
        "brokers": list(spec["brokers"]),
        "max_concurrency": spec["max_concurrency"],
        "provision_wait_s": spec["provision"]["poll_s"],
        "estimated_s": run_seconds(spec, cells),
    }


def suite_summary(name: str, scale: float = 1.0) -> dict:
    """A built-in suite's runs (one, or a study's several), cells and estimated time, optionally scaled.

    Raises SpecError when a run of the suite is invalid."""
    runs = []
    for request in suite_runs(name):
        spec = validate(scaled(request, scale))
        cells = expand(spec)
        runs.append({"name": spec["name"], "cells": len(cells), "estimated_s": run_seconds(spec, cells)})
    doc = load_suite_file(name)
    return {"name": name, "description": doc.get("description", ""), "study": doc.get("study"),
            "scale": scale, "runs": runs, "cells": sum(r["cells"] for r in runs),
            "estimated_s": sum(r["estimated_s"] for r in runs)}
