"""Benchmark: what checking an event costs where it is written, now that every event is checked by its Structs alone
(eventdata.Envelope, then its data's Struct, which hold every rule of schemas/events.schema.json) instead of by the
schema's validator and then the Structs.

An IntervalMeasured as a worker writes it (counters, histograms, summaries, host and resource samples: the synthetic
run of tests/synthetic.py with bench/event_decode.py's host and resource figures; most of a run's events, one per cell
and interval) and one event of each other type (tests/event_examples.py). Timed per event: events.validate (what
make_event and every store's append call), and the schema's check (the envelope and the data by the schema's
validator, then the Structs, as every type was written before), on the same events in alternating passes; the
figures are the medians over --repeat passes, with the load average before and after (the machine is shared).

usage: PYTHONPATH=functions .venv/bin/python bench/event_validate.py [--repeat 9] [--events 200]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from brokerbench.events import InvalidEvent, _validators, make_event, new_run_id, typed_problems, validate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # shared with the tests
from event_decode import HOST, RESOURCES  # noqa: E402
from event_examples import failed, one_of_each, trigger  # noqa: E402
from synthetic import synthetic_run  # noqa: E402


def previous_validate(event: dict) -> None:
    """events.validate as it was: the schema's validator on the envelope and the data, then the data's Struct."""
    validators = _validators()
    problems = [str(e.message) for e in validators["envelope"].iter_errors(event)]
    problems = problems or [e.message for e in validators[event["type"]].iter_errors(event["data"])]
    problems = problems or typed_problems(event["type"], event["data"])
    if problems:
        raise InvalidEvent("; ".join(problems))


def intervals(count: int) -> list[dict]:
    run = synthetic_run({"name": "bench-validate", "brokers": ["kafka"], "sizes": [1024], "rates": [1000],
                         "formats": ["json"]}, intervals=count)
    made = []
    for event in (e for e in run if e["type"] == "IntervalMeasured"):
        data = {**event["data"], "host": {**HOST, "cpus": 2}, "resources": RESOURCES}
        made.append(make_event(event["run_id"], "IntervalMeasured", data, cell_index=0,
                               interval=data["interval"], attempt=data["attempt"]))
    return made[:count]


def microseconds(check, events: list[dict]) -> float:
    start = time.perf_counter()
    for event in events:
        check(event)
    return (time.perf_counter() - start) / len(events) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--events", type=int, default=200)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    groups = {"IntervalMeasured (a worker's)": intervals(args.events)}
    run_id = new_run_id()
    for example in [*one_of_each(run_id), failed(run_id), trigger()]:
        if example["type"] != "IntervalMeasured":
            groups.setdefault(example["type"], []).append(example)
    figures = {}
    for name, events in groups.items():
        before, after = [], []
        for _ in range(args.repeat):  # alternating, so a change of the machine's load falls on both
            before.append(microseconds(previous_validate, events))
            after.append(microseconds(validate, events))
        figures[name] = {"previous_us": round(statistics.median(before), 1), "now_us": round(statistics.median(after), 1),
                         "ratio": round(statistics.median(b / a for b, a in zip(before, after)), 2)}
    print(json.dumps({"events_per_group": {k: len(v) for k, v in groups.items()}, "per_event": figures,
                      "repeat": args.repeat, "load_average_1min": {"before": load, "after": os.getloadavg()[0]},
                      "cores": os.cpu_count()}, indent=2))


if __name__ == "__main__":
    main()
