"""Regression checks: a run against a baseline, configuration by configuration, metric by metric.

Samples are the per-second interval figures of every repeat. A change is a regression (or an
improvement) only when a Mann–Whitney U test says the two samples differ (p < ALPHA) AND the
medians differ by at least MIN_EFFECT; a sample whose robust spread is above WATERLINE is too
noisy to judge and is called unstable. Noise alone therefore rarely raises an alarm, and a
real 20% shift is found.
"""

from __future__ import annotations

import numpy as np

from ..events import EventStore, make_event
from .model import build_report
from .stats import mann_whitney_p, spread

ALPHA = 0.01
MIN_EFFECT = 0.10
WATERLINE = 0.25
MIN_SAMPLES = 3
# metric -> (interval series it is sampled from, True when higher is better)
SAMPLED = {
    "throughput_msgs_per_s": ("throughput", True),
    "end_to_end_p99_us": ("end_to_end_p99_us", False),
    "publish_latency_p99_us": ("publish_latency_p99_us", False),
}
TARGET_FIELDS = ("brokers", "client", "producers", "consumers", "partitions", "size_basis", "provision", "targets")


def verdict(baseline, candidate, higher_is_better: bool) -> dict:
    b = np.asarray([x for x in baseline if x is not None], dtype=float)
    c = np.asarray([x for x in candidate if x is not None], dtype=float)
    figures = {"n_baseline": int(b.size), "n_candidate": int(c.size), "baseline_median": None,
               "candidate_median": None, "change": None, "p_value": None,
               "spread_baseline": spread(b), "spread_candidate": spread(c)}
    if b.size < MIN_SAMPLES or c.size < MIN_SAMPLES:
        return {"verdict": "unstable", "why": "too few samples", **figures}
    mb, mc = float(np.median(b)), float(np.median(c))
    change = (mc - mb) / mb if mb else (0.0 if mc == mb else float("inf"))
    p = mann_whitney_p(b, c)
    figures.update(baseline_median=mb, candidate_median=mc, change=change, p_value=p)
    if figures["spread_baseline"] > WATERLINE or figures["spread_candidate"] > WATERLINE:
        return {"verdict": "unstable", "why": f"spread above {WATERLINE:.0%}", **figures}
    if p < ALPHA and abs(change) >= MIN_EFFECT:
        worse = change < 0 if higher_is_better else change > 0
        return {"verdict": "regression" if worse else "improvement", "why": "significant and large enough", **figures}
    return {"verdict": "unchanged", "why": "no significant change of at least "
                                          f"{MIN_EFFECT:.0%}", **figures}


def _samples(configuration: dict, series_name: str) -> list:
    values = []
    for series in configuration["intervals"]:
        values += [v for sent, v in zip(series["sent"], series[series_name]) if sent > 0]
    return values


def compare(baseline: dict, candidate: dict) -> list[dict]:
    """Every configuration both reports share, every sampled metric: a verdict and its figures."""
    before = {c["key"]: c for g in baseline["groups"] for c in g["cells"]}
    out = []
    for group in candidate["groups"]:
        for config in group["cells"]:
            old = before.get(config["key"])
            if old is None or config["status"] == "failed" or old["status"] == "failed":
                continue
            for metric, (series, higher) in SAMPLED.items():
                result = verdict(_samples(old, series), _samples(config, series), higher)
                out.append({"cell": f"{config['broker']} {config['format']} · {group['title']}", "key": config["key"],
                            "cell_id": config["cell_ids"][0], "metric": metric, **result})
    return out


def target_configuration(events: list[dict]) -> dict:
    """What must match for runs to be compared: broker versions and the spec's target and client settings."""
    spec = next(e for e in events if e["type"] == "RunRequested")["data"]["spec"]
    targets = next((e["data"]["targets"] for e in events if e["type"] == "TargetsReady"), {})
    return {"versions": {b: t.get("broker_version") for b, t in sorted(targets.items())},
            **{f: spec.get(f) for f in TARGET_FIELDS}}


def find_baseline(store: EventStore, run_id: str, candidate_events: list[dict] | None = None) -> str | None:
    """The latest completed run of the same suite, on the same target configuration, before this one."""
    events = candidate_events or store.read(run_id, interval_histograms=False)
    requested = next(e for e in events if e["type"] == "RunRequested")
    suite = requested["data"].get("suite") or requested["data"]["spec"].get("name", "adhoc")
    wanted = target_configuration(events)
    for listed in store.list_runs(limit=100, suite=suite):
        other = listed["run_id"]
        if other == run_id or other > run_id:
            continue
        header = store.read(other, prefix="0") + store.read(other, prefix="90#")
        ended = [e for e in header if e["type"] == "RunCompleted"]
        if ended and ended[0]["data"]["status"] == "completed" and target_configuration(header) == wanted:
            return other
    return None


def check(store: EventStore, run_id: str, baseline_id: str | None = None) -> dict:
    """Compare a run with its baseline and record each regression as a RegressionDetected event."""
    events = store.read(run_id, interval_histograms=False)
    baseline_id = baseline_id or find_baseline(store, run_id, events)
    if baseline_id is None:
        return {"baseline_run_id": None, "verdicts": [], "regressions": []}
    candidate = build_report(events)
    baseline = build_report(store.read(baseline_id, interval_histograms=False))
    verdicts = compare(baseline, candidate)
    regressions = [v for v in verdicts if v["verdict"] == "regression"]
    index = {c["cell_id"]: c["index"] for e in events if e["type"] == "RunRequested" for c in e["data"]["cells"]}
    store.append([make_event(run_id, "RegressionDetected", {
        "baseline_run_id": baseline_id, "cell": r["cell"], "cell_id": r["cell_id"], "metric": r["metric"],
        "verdict": r["verdict"], "baseline_median": r["baseline_median"], "candidate_median": r["candidate_median"],
        "change": r["change"], "p_value": r["p_value"]}, cell_index=index[r["cell_id"]], key=r["metric"])
        for r in regressions])
    return {"baseline_run_id": baseline_id, "verdicts": verdicts, "regressions": regressions}
