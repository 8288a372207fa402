"""Planning a run for the workflow: the cells, and which kind of worker runs each one."""

from __future__ import annotations

import math

from .spec import expand

# Start-up of a cell beyond its configured time: spawning processes, topic creation, drain.
CELL_OVERHEAD_S = 15


def estimated_seconds(cell: dict) -> float:
    if cell["rate"] == "sustainable":  # at most: a probe, every step, and the latency steps
        search = cell.get("search") or {}
        steps = 1 + search.get("max_steps", 16) + len(search.get("latency_at") or [])
        return steps * estimated_seconds({**cell, "rate": "max", "messages": None})
    if cell["messages"] is not None and cell["rate"] != "max":
        measured = cell["messages"] / cell["rate"]
    elif cell["messages"] is not None:
        measured = 60.0  # unthrottled by count: unknown ahead of time, assume a minute
    else:
        measured = cell["duration_s"]
    return cell["warmup_s"] + measured + cell["drain_timeout_s"] + CELL_OVERHEAD_S


def worker_kind(cell: dict, placement: dict) -> str:
    """lambda for cells that fit comfortably in one invocation, ec2 for long or heavy ones."""
    if placement["worker"] != "auto":
        return placement["worker"]
    processes = cell["producers"] + cell["consumers"]
    fits = estimated_seconds(cell) <= placement["lambda_max_cell_s"] and processes <= placement["lambda_max_processes"]
    return "lambda" if fits else "ec2"


def plan(spec: dict) -> dict:
    cells = [{**cell, "worker": worker_kind(cell, spec["placement"])} for cell in expand(spec)]
    return {
        "cells": cells,
        "brokers": list(spec["brokers"]),
        "max_concurrency": spec["max_concurrency"],
        "provision_wait_s": spec["provision"]["poll_s"],
        "estimated_s": math.ceil(sum(estimated_seconds(c) for c in cells) / spec["max_concurrency"]),
    }
