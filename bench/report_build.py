"""Benchmark: build the comparison report of a synthetic 200-cell run with 60 intervals per cell.

The run's events are written to DynamoDB Local first (not timed); the timed part is what the
Aggregate step does for a report: read the events as reports do (events.read_report_events: no
per-interval histograms, and no intervals where a cell's digest stands for them) and build the
report model, then render Markdown and HTML. Timed apart (exports_s): the files for other tools Aggregate writes
beside the report, cells.csv and the HdrHistogram logs, which read every completed cell's intervals with their
histograms (reports.export.write_hlogs), written to a temporary folder.

usage: .venv/bin/python bench/report_build.py [--cells 200] [--intervals 60] [--repeat 3] [--out FILE]
Needs the local stack's DynamoDB Local (`brokerbench local up`, or it starts one and stops it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from brokerbench.events import read_report_events
from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.local.stack import LocalStack
from brokerbench.reports import export, html, markdown
from brokerbench.reports.model import build_report
from brokerbench.reports.results import build_results
from brokerbench.workflow.outputs import FolderReports

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # tests/synthetic.py, shared with the tests
from synthetic import synthetic_run  # noqa: E402


def spec_for(cells: int) -> dict:
    # 2 brokers × 5 formats × 4 sizes × rates × repeats = cells (200 = 2·5·4·5·1)
    rates = max(1, cells // 40)
    return {"name": "bench-report", "brokers": ["kafka", "redis-streams"], "sizes": [1024, 4096, 16384, 65536],
            "rates": [500 * (i + 1) for i in range(rates)], "formats": ["raw", "json", "msgpack", "avro", "protobuf"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cells", type=int, default=200)
    parser.add_argument("--intervals", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=3, help="timed builds (the median is reported)")
    parser.add_argument("--out", help="also write the figures here, with the date and the machine's load")
    args = parser.parse_args()
    stack = LocalStack()
    started = not stack.is_up(["dynamodb"])
    try:
        db = stack.up(["dynamodb"], log=lambda m: None)["dynamodb"]
        store = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"])
        store.ensure_table()
        t0 = time.perf_counter()
        events = synthetic_run(spec_for(args.cells), intervals=args.intervals, seed=1)
        store.append(events)
        run_id = events[0]["run_id"]
        setup_s = time.perf_counter() - t0
        timings = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            stored = read_report_events(store, run_id)
            t_read = time.perf_counter()
            report = build_report(stored)
            t_model = time.perf_counter()
            md, page = markdown.render(report), html.render(report)
            t_render = time.perf_counter()
            with tempfile.TemporaryDirectory() as folder:
                sink = FolderReports(folder)
                sink.write(run_id, export.CELLS_CSV, export.cells_csv(build_results(stored)))
                export.write_hlogs(lambda name, text: sink.write(run_id, name, text), store, run_id, stored)
                logs = list((sink.folder / run_id / export.HLOG_DIR).iterdir())
                hlog_mb = sum(p.stat().st_size for p in logs) / 1e6
            t_exports = time.perf_counter()
            timings.append({"read_s": t_read - t, "model_s": t_model - t_read, "render_s": t_render - t_model,
                            "total_s": t_render - t, "exports_s": t_exports - t_render})
        timings.sort(key=lambda x: x["total_s"])
        median = timings[len(timings) // 2]
        cells = sum(len(g["cells"]) for g in report["groups"])
        figures = {"cells": cells, "intervals_per_cell": args.intervals, "events": len(events),
                   "events_read": len(stored), "setup_s": round(setup_s, 1),
                   **{k: round(v, 3) for k, v in median.items()},
                   "markdown_kb": len(md) // 1024, "html_kb": len(page) // 1024, "hlog_files": len(logs),
                   "hlog_mb": round(hlog_mb, 1)}
        print(json.dumps(figures, indent=2))
        if args.out:
            load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
            with open(args.out, "w") as out:
                json.dump({**figures, "machine": f"{os.cpu_count()} cores, shared (load average {load} at the end)",
                           "date": date.today().isoformat()}, out, indent=2)
                out.write("\n")
    finally:
        if started:
            stack.down(["dynamodb"], log=lambda m: None)


if __name__ == "__main__":
    main()
