"""Benchmark: what reading a large run's events costs in decoding, now that each event's data goes through its type.

A synthetic run of 20 cells × 500 intervals (10,000 IntervalMeasured, each with its histograms, summaries, host and
resource samples, as a worker writes them) is built once, not timed. Timed: turning every stored event of the run into
the event the code reads, as each store does it, by the previous release's code (json.loads alone, copied below as
it was) and by this one's (the stores' own `_event`, which decodes through the types):
- dynamodb: the items a query returns (no network: built as the table stores them), with the interval histograms,
  and without them (what a report's read asks for);
- memory: the JSON the memory store keeps.
The machine is shared and its load moves, so each pass times the previous code and then the current one on the same
items, and the figures are the medians over --repeat passes, with the median of each pass's own ratio.

usage: .venv/bin/python bench/event_decode.py [--repeat 9] [--out bench/results/event_decode.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.events.memory import MemoryEventStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # tests/synthetic.py, shared with the tests
from synthetic import synthetic_run  # noqa: E402

SPEC = {"name": "bench-decode", "brokers": ["kafka"], "sizes": [1024, 4096], "rates": [1000, 2000],
        "formats": ["raw", "json", "msgpack", "avro", "protobuf"]}  # 20 cells
INTERVALS = 500
# what a worker adds to each interval beside the synthetic run's counts, histograms and summaries
HOST = {"cpu_pressure_pct": 1.5, "memory_pressure_pct": 0.0, "steal_pct": 0.0, "cpu_pct": 61.0, "cpus": 2}
RESOURCES = {"broker": {"cpu_pct": 12.5, "rss_mb": 310.2}, "producer": {"cpu_pct": 40.0, "rss_mb": 88.0}}
PREVIOUS = "6514766"  # the release whose decoding the two functions below are (events/dynamodb.py, events/memory.py)


def previous_dynamodb_event(item: dict) -> dict:
    data = json.loads(item["data"]["S"])
    if "histograms" in item:
        data["histograms"] = json.loads(item["histograms"]["S"])
    return {
        "run_id": item["run_id"]["S"],
        "sk": item["sk"]["S"],
        "event_id": item["event_id"]["S"],
        "type": item["type"]["S"],
        "at": item["at"]["S"],
        "schema_version": int(item["schema_version"]["N"]),
        "data": data,
    }


def previous_memory_event(text: str, interval_histograms: bool = True) -> dict:
    event = json.loads(text)
    if not interval_histograms and event["type"] == "IntervalMeasured":
        event["data"].pop("histograms", None)
    return event


def build_run() -> list[dict]:
    events = synthetic_run(SPEC, intervals=INTERVALS)
    for event in events:
        if event["type"] == "IntervalMeasured":
            event["data"].update(backlog=0, host=HOST, resources=RESOURCES)
    return events


def seconds(fn, stored: list) -> float:
    start = time.perf_counter()
    for one in stored:
        fn(one)
    return time.perf_counter() - start


def paired(before, after, stored: list, repeat: int) -> dict:
    """Each pass times `before` then `after` over every stored event; medians, and the median of the passes' ratios."""
    passes = [(seconds(before, stored), seconds(after, stored)) for _ in range(repeat)]
    return {"before_s": statistics.median(b for b, _ in passes), "after_s": statistics.median(a for _, a in passes),
            "ratio": statistics.median(a / b for b, a in passes), "passes": passes}


def code_version() -> str:
    return subprocess.run(["git", "-C", str(Path(__file__).parent), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--out", help="also write the figures here, with the date and the machine's load")
    args = parser.parse_args()

    events = build_run()
    items = [DynamoEventStore._item(e) for e in events]
    projected = [{k: v for k, v in i.items() if k != "histograms"} for i in items]  # as a report's query returns them
    texts = [json.dumps(e, separators=(",", ":")) for e in events]  # as the memory store keeps them
    # both ways give the events as written, so the comparison is of equal work
    for before, after, stored in ((previous_dynamodb_event, DynamoEventStore._event, items),
                                  (previous_memory_event, MemoryEventStore._event, texts)):
        assert [before(s) for s in stored] == [after(s) for s in stored] == events
    intervals = [e for e in events if e["type"] == "IntervalMeasured"]
    load = os.getloadavg()[0]
    figures = {
        "events": len(events), "intervals": len(intervals),
        "interval_json_bytes": round(statistics.mean(len(json.dumps(e["data"])) for e in intervals)),
        "interval_json_bytes_no_histograms": round(statistics.mean(len(i["data"]["S"]) for i in items
                                                              if i["type"]["S"] == "IntervalMeasured")),
        "dynamodb": paired(previous_dynamodb_event, DynamoEventStore._event, items, args.repeat),
        "dynamodb_no_histograms": paired(previous_dynamodb_event, lambda i: DynamoEventStore._event(i, False),
                                         projected, args.repeat),
        "memory": paired(previous_memory_event, MemoryEventStore._event, texts, args.repeat),
        "previous": PREVIOUS, "code_version": code_version(), "date": date.today().isoformat(),
        "repeat": args.repeat, "load_average_1min": {"before": load, "after": os.getloadavg()[0]},
    }
    print(json.dumps({k: v for k, v in figures.items()}, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
