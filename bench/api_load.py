"""HTTP API under load: concurrent clients listing runs and reading reports from `brokerbench serve`, on loopback.

Starts DynamoDB Local in a temporary state folder (or uses the stack of --state-dir, whose event table then keeps
the synthetic runs, suite `api-load`), stores synthetic runs of the quick suite's shape (30 cells, 5 s each),
starts `brokerbench serve --port 0 --no-schedules`, and runs the clients (50 for 20 s by default). Each client
keeps one connection and loops over GET /runs?limit=20, GET /runs/{id} and GET /runs/{id}/report?format=html,
going through the stored runs in turn. Half of the runs have their HTML report published in the server's --out
folder, as the workflow writes it, and it is served as stored. The other half have none, as a run that did not
go through the workflow, so their report is built from the events on every request.

Latency is per request, from sending it to reading the whole body, recorded in an HDR histogram (µs). An error is
a non-2xx answer or an exception. The server answers one request at a time (one Lambda instance), so under
load the latency is mostly waiting for the handler, and the clients share the machine's cores with it.

    .venv/bin/python bench/api_load.py --out bench/results/api_load.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from brokerbench import histogram
from brokerbench.events import new_run_id
from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.local.stack import LocalStack
from brokerbench.reports import html
from brokerbench.reports.model import build_report
from brokerbench.spec import load_suite
from brokerbench.workflow.outputs import FolderReports

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # tests/synthetic.py, shared with the tests
from synthetic import synthetic_run  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CLI = Path(sys.executable).with_name("brokerbench")
OWNER = "bench-api-load"
ROUTES = ("list_runs", "get_run", "report_published", "report_built")


def store_runs(store: DynamoEventStore, reports: FolderReports, count: int, intervals: int) -> list[dict]:
    """`count` completed synthetic runs of the quick suite's shape; every other one has its report published."""
    spec = {**load_suite("quick"), "name": "api-load"}
    runs = []
    for i in range(count):
        run_id = new_run_id()
        events = synthetic_run(spec, intervals=intervals, run_id=run_id, seed=i)
        store.append(events)
        published = i % 2 == 0
        if published:  # what the workflow's Aggregate step writes: the report of the stored events
            reports.write(run_id, "report.html", html.render(build_report(store.read(run_id, interval_histograms=False))))
        runs.append({"run_id": run_id, "published": published,
                     "cells": sum(e["type"] == "CellCompleted" for e in events), "events": len(events)})
    return runs


class Server:
    """`brokerbench serve` as a user starts it, on a free loopback port."""

    def __init__(self, state_dir: Path, out: Path) -> None:
        self.stderr = open(out / "serve.stderr", "wb")
        self.process = subprocess.Popen(
            [str(CLI), "--state-dir", str(state_dir), "serve", "--port", "0", "--no-schedules", "--out", str(out)],
            stdout=subprocess.PIPE, stderr=self.stderr)
        line = self.process.stdout.readline().decode().strip()  # "serving http://127.0.0.1:PORT"
        if not line.startswith("serving http://127.0.0.1:"):
            self.stop()
            raise RuntimeError(f"brokerbench serve did not start: {line!r}; {(out / 'serve.stderr').read_text()[-2000:]}")
        self.port = int(line.rsplit(":", 1)[1])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=150)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process.stdout.close()
        self.stderr.close()


class Client(threading.Thread):
    """One connection, requests back to back until the deadline; (route, latency µs, ok, bytes) per request."""

    def __init__(self, index: int, port: int, runs: list[dict], start: threading.Barrier, window: dict) -> None:
        super().__init__(name=f"client-{index}", daemon=True)
        self.index, self.port, self.runs, self.start_barrier, self.window = index, port, runs, start, window
        self.records: list[tuple[str, int, bool, int]] = []
        self.failures: dict[str, int] = {}
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def requests(self, i: int):
        run = self.runs[(self.index + i) % len(self.runs)]
        yield "list_runs", "/runs?limit=20"
        yield "get_run", f"/runs/{run['run_id']}"
        yield ("report_published" if run["published"] else "report_built"), f"/runs/{run['run_id']}/report?format=html"

    def get(self, path: str) -> tuple[int, int]:
        self.connection.request("GET", path)
        response = self.connection.getresponse()
        return response.status, len(response.read())

    def run(self) -> None:
        self.connection.connect()  # before the window: the listen backlog is not part of the figure
        self.start_barrier.wait()
        i = 0
        while time.monotonic() < self.window["end"]:
            for route, path in self.requests(i):
                started = time.perf_counter_ns()
                try:
                    status, size = self.get(path)
                    ok = 200 <= status < 300
                    if not ok:
                        self.failures[str(status)] = self.failures.get(str(status), 0) + 1
                except (OSError, http.client.HTTPException) as exc:
                    ok, size = False, 0
                    self.failures[type(exc).__name__] = self.failures.get(type(exc).__name__, 0) + 1
                    self.connection.close()  # reconnects on the next request
                self.records.append((route, (time.perf_counter_ns() - started) // 1000, ok, size))
            i += 1


def figures(records: list[tuple[str, int, bool, int]], elapsed_s: float) -> dict:
    if not records:
        return {"requests": 0, "errors": 0}
    hist = histogram.new()
    histogram.record_many(hist, [max(latency, 1) for _, latency, _, _ in records])
    p50, p90, p99 = histogram.percentiles(hist, [50, 90, 99])
    return {"requests": len(records), "errors": sum(not ok for _, _, ok, _ in records),
            "throughput_req_per_s": round(len(records) / elapsed_s, 1),
            "latency_ms": {"p50": round(p50 / 1000, 1), "p90": round(p90 / 1000, 1), "p99": round(p99 / 1000, 1),
                           "max": round(histogram.summary(hist)["max"] / 1000, 1)},
            "response_bytes_mean": round(sum(size for *_, size in records) / len(records))}


def load(port: int, runs: list[dict], clients: int, seconds: float) -> dict:
    for path in ("/runs?limit=20", f"/runs/{runs[0]['run_id']}", f"/runs/{runs[0]['run_id']}/report?format=html"):
        warm = http.client.HTTPConnection("127.0.0.1", port, timeout=120)  # first imports and connections, untimed
        warm.request("GET", path)
        warm.getresponse().read()
        warm.close()
    window: dict = {}

    def open_window() -> None:  # once every client is connected
        window["start"] = time.monotonic()
        window["end"] = window["start"] + seconds

    start = threading.Barrier(clients + 1, action=open_window)
    workers = [Client(i, port, runs, start, window) for i in range(clients)]
    for worker in workers:
        worker.start()
    start.wait()
    for worker in workers:
        worker.join()
    elapsed = time.monotonic() - window["start"]  # to the last answer: requests in flight at the deadline finish
    records = [r for w in workers for r in w.records]
    failures: dict[str, int] = {}
    for worker in workers:
        for kind, n in worker.failures.items():
            failures[kind] = failures.get(kind, 0) + n
        worker.connection.close()
    return {"elapsed_s": round(elapsed, 2), "overall": figures(records, elapsed),
            "routes": {route: figures([r for r in records if r[0] == route], elapsed) for route in ROUTES},
            "failures": failures}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--one-client-seconds", type=float, default=5,
                        help="first, one client alone: the handler's own time per request, without queueing (0: skip)")
    parser.add_argument("--runs", type=int, default=4, help="synthetic runs stored (half with a published report)")
    parser.add_argument("--intervals", type=int, default=5, help="seconds measured per cell of a stored run")
    parser.add_argument("--state-dir", help="use this local stack (DynamoDB Local is started if it is not up)")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "api_load.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bb-api-load-") as tmp:
        stack = LocalStack(Path(args.state_dir) if args.state_dir else Path(tmp) / "stack")
        reports_dir = Path(tmp) / "reports"
        reports_dir.mkdir()
        server = None
        try:
            db = stack.up(["dynamodb"], owner=OWNER, log=lambda m: None)["dynamodb"]
            store = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"])
            store.ensure_table()
            runs = store_runs(store, FolderReports(reports_dir), args.runs, args.intervals)
            server = Server(stack.state_dir, reports_dir)
            alone = load(server.port, runs, 1, args.one_client_seconds) if args.one_client_seconds > 0 else None
            load_before = os.getloadavg()[0]
            measured = load(server.port, runs, args.clients, args.seconds)
            load_after = os.getloadavg()[0]
        finally:
            if server is not None:
                server.stop()
            stack.down(["dynamodb"], owner=OWNER, log=lambda m: None)  # only what was started here
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    "note": "a shared VM; clients, server and DynamoDB Local on the same cores",
                    "load_average_1min": {"before": round(load_before, 2), "after": round(load_after, 2)}},
        "setup": {"clients": args.clients, "seconds": args.seconds,
                  "requests_per_loop": ["GET /runs?limit=20", "GET /runs/{id}", "GET /runs/{id}/report?format=html"],
                  "stored_runs": [{k: r[k] for k in ("cells", "events", "published")} for r in runs],
                  "server": "brokerbench serve on 127.0.0.1, one handler call at a time"},
        **measured,
        "one_client": alone,
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"{args.clients} clients for {args.seconds:g} s on {os.cpu_count()} cores "
          f"(python {platform.python_version()}); {len(runs)} stored runs of {runs[0]['cells']} cells")
    if alone:
        one = alone["overall"]
        print(f"one client alone: {one['throughput_req_per_s']} req/s, p50 {one['latency_ms']['p50']} ms, "
              f"p99 {one['latency_ms']['p99']} ms ({one['errors']} errors)")
    print(f"{'route':<18}{'requests':>9}{'errors':>8}{'req/s':>8}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for name, f in [*measured["routes"].items(), ("overall", measured["overall"])]:
        if not f["requests"]:
            continue
        lat = f["latency_ms"]
        print(f"{name:<18}{f['requests']:>9}{f['errors']:>8}{f['throughput_req_per_s']:>8}"
              f"{lat['p50']:>9}{lat['p90']:>9}{lat['p99']:>9}{lat['max']:>9}")
    if measured["failures"]:
        print(f"errors by kind: {measured['failures']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
