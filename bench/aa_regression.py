"""A/A benchmark of the regression rule: identical runs must not raise alarms; a real change must.

1. Runs the same small spec N times on this build (Kafka and Redis Streams × raw and json, 1 KB at
   2,000 msgs/s, 5 s after a 1 s warm-up, 3 repeats: 4 configurations × (3 figures + the sustainability
   verdict) = 16 verdicts per comparison) through `brokerbench run`, one run at a time, on a stack kept up
   for the whole bench.
2. Compares every pair (N·(N−1)/2 A/A comparisons): baseline = the earlier run, candidate = the later,
   history = the other A/A runs (newest first). Reports the false-alarm rate per verdict and per
   comparison (a run check with any `regression` or `improvement`), with the rule in
   reports/regression.py and, for contrast, the previous rule (Mann–Whitney over per-second intervals).
   The same pairs again with one repeat per run (each run's first): alone, as `brokerbench compare` of two
   `repeats: 1` runs sees them, and with the other runs as history.
   Each run is also checked against the runs before it, as CheckRegression does (`in_sequence`); what
   the workflow's own CheckRegression recorded during the runs is kept beside it.
3. Injects a real change: a Kafka producer quota (producer_byte_rate, every client) that cuts the Kafka
   cells' delivered throughput, runs M more runs, and reports how often each of their verdicts is called
   against every A/A run as the baseline (detection rate), and any alarm on the Redis cells (false).

usage: .venv/bin/python bench/aa_regression.py [--runs 7] [--injected 2] [--quick] [--quota 1000000[,1400000]]
       [--out bench/results/aa_regression.json] [--home /tmp/bb-aa] [--reuse]

Uses BROKERBENCH_HOME (default /tmp/bb-aa) for its own local stack. --reuse analyses the runs recorded in
--out again (A/A and each quota level) and runs only the quota levels not recorded there.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent / "brokerbench"
SPEC = {"brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [2000], "formats": ["raw", "json"],
        "modes": ["batch"], "producers": 1, "consumers": 1, "partitions": 1, "duration_s": 5, "warmup_s": 1,
        "repeats": 3}
RETRIES = 2
RETRY_WAIT_S = 120


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- runs ----------------------------------------------------------------------------------------
def run_once(spec_file: Path, out_dir: Path, env: dict) -> tuple[str | None, float, int, str]:
    before = {p.name for p in out_dir.iterdir()} if out_dir.exists() else set()
    started = time.monotonic()
    done = subprocess.run([str(BIN), "run", "--spec", str(spec_file), "--out", str(out_dir)], env=env,
                          capture_output=True, text=True, cwd=ROOT)
    wall = time.monotonic() - started
    new = sorted(p.name for p in out_dir.iterdir() if p.name not in before and (p / "results.json").is_file()) \
        if out_dir.exists() else []
    return (new[-1] if new else None), wall, done.returncode, (done.stderr or done.stdout)[-2000:]


def run_series(count: int, spec_file: Path, out_dir: Path, env: dict, store, label: str) -> list[dict]:
    runs = []
    for i in range(count):
        for attempt in range(RETRIES + 1):
            run_id, wall, code, tail = run_once(spec_file, out_dir, env)
            status = None
            if run_id:
                ended = [e for e in store.read(run_id, prefix="90#") if e["type"] == "RunCompleted"]
                status = ended[0]["data"]["status"] if ended else "no end"
            log(f"{label} run {i + 1}/{count}: {run_id} {status} exit {code} in {wall:.0f} s")
            if status == "completed":
                runs.append({"run_id": run_id, "wall_s": round(wall, 1), "exit_code": code, "attempts": attempt + 1})
                break
            if code == 2:  # invalid input: retrying cannot help
                raise SystemExit(f"invalid spec: {tail}")
            log(f"  failed ({tail.strip().splitlines()[-1] if tail.strip() else 'no output'}); "
                f"{'retrying in %d s' % RETRY_WAIT_S if attempt < RETRIES else 'giving up'}")
            if attempt < RETRIES:
                time.sleep(RETRY_WAIT_S)
    return runs


def kafka_quota(stack, byte_rate: int | None) -> None:
    """Set (or with None remove) producer_byte_rate for every client on the local Kafka."""
    from brokerbench.local.install import lib_dir

    bootstrap = stack.endpoints(required=["kafka"])["kafka"]["bootstrap_servers"]
    change = ["--add-config", f"producer_byte_rate={byte_rate}"] if byte_rate else \
        ["--delete-config", "producer_byte_rate"]
    subprocess.run(["java", "-cp", f"{lib_dir('kafka')}/*", "kafka.admin.ConfigCommand", "--bootstrap-server",
                    bootstrap, "--alter", *change, "--entity-type", "clients", "--entity-default"],
                   check=True, capture_output=True, text=True, timeout=120)


# -- the previous rule, for contrast -------------------------------------------------------------


def old_verdicts(baseline: dict, candidate: dict) -> list[dict]:
    """Mann–Whitney over the per-second figures of every repeat, p < 0.01 and ≥ 10%, spread > 25%: unstable."""
    from brokerbench.reports.regression import METRICS
    from brokerbench.reports.stats import mann_whitney_p, spread as robust_spread

    out = []
    for key, config in candidate.items():
        old = baseline.get(key)
        if old is None:
            continue
        for metric, declared in METRICS.items():
            higher = declared.higher_is_better
            b = [v for s in old["series"].get(metric, []) for v in s]
            c = [v for s in config["series"].get(metric, []) for v in s]
            if not b and not c:
                continue
            if len(b) < 3 or len(c) < 3:
                out.append({"key": key, "metric": metric, "verdict": "unstable"})
                continue
            mb, mc = float(np.median(b)), float(np.median(c))
            change = (mc - mb) / mb if mb else 0.0
            if robust_spread(b) > 0.25 or robust_spread(c) > 0.25:
                verdict = "unstable"
            elif mann_whitney_p(b, c) < 0.01 and abs(change) >= 0.10:
                verdict = "regression" if (change < 0 if higher else change > 0) else "improvement"
            else:
                verdict = "unchanged"
            out.append({"key": key, "metric": metric, "verdict": verdict, "change": change})
    return out


# -- analysis ------------------------------------------------------------------------------------
def tally(comparisons: list[list[dict]]) -> dict:
    verdicts = [v for c in comparisons for v in c]
    count = lambda vs, name: sum(v["verdict"] == name for v in vs)  # noqa: E731
    runs_alarm = sum(any(v["verdict"] in ("regression", "improvement") for v in c) for c in comparisons)
    runs_regression = sum(any(v["verdict"] == "regression" for v in c) for c in comparisons)
    return {
        "comparisons": len(comparisons), "verdicts": len(verdicts),
        "by_verdict": {name: count(verdicts, name) for name in ("regression", "improvement", "unstable", "unchanged")},
        "cannot_tell": sum(bool(v.get("cannot_tell")) for v in verdicts),
        "false_alarm_rate_per_verdict": round((count(verdicts, "regression") + count(verdicts, "improvement"))
                                              / max(1, len(verdicts)), 4),
        "comparisons_with_any_alarm": runs_alarm,
        "comparisons_with_a_regression": runs_regression,
        "false_alarm_rate_per_comparison": round(runs_alarm / max(1, len(comparisons)), 4),
    }


def detectable_by_metric(comparisons: list[list[dict]]) -> dict:
    """Per metric, the median factor of the smallest regression each A/A verdict was sure to call (÷ it for
    throughput, × it for a p99); None counts as beyond any factor (an SE too large to bound)."""
    found: dict[str, list[float]] = {}
    for c in comparisons:
        for v in c:
            if v.get("se") is not None:
                found.setdefault(v["metric"], []).append(v.get("detectable_factor") or math.inf)
    return {m: round(float(np.median(vs)), 4) for m, vs in found.items()}


def run_spread(figures: list[dict]) -> dict:
    """Per configuration and metric: the spread of the per-run medians and of the repeats (what the rule sees)."""
    from brokerbench.reports.regression import METRICS
    from brokerbench.reports.stats import spread as robust_spread

    out = {}
    for key in figures[0]:
        for metric in METRICS:
            runs = [f[key]["repeats"].get(metric) for f in figures if key in f and f[key]["repeats"].get(metric)]
            if not runs:
                continue
            medians = [float(np.median(r)) for r in runs]
            out[f"{figures[0][key]['cell']} · {metric}"] = {
                "median": round(float(np.median(medians)), 1),
                "run_to_run_spread": round(robust_spread(medians), 4),
                "run_to_run_cv": round(float(np.std(np.log(medians), ddof=1)), 4) if len(medians) > 1 else None,
                "repeat_spread": round(float(np.sqrt(np.mean([robust_spread(r) ** 2 for r in runs]))), 4),
            }
    return out


def injected_series(figures: dict, ids: list[str], series: dict, out_dir: Path) -> dict:
    """Each injected run against every A/A run as the baseline (history: the other A/A runs)."""
    from brokerbench.reports import regression as R

    detection, changes, false_alarms, comparisons = {}, {}, [], []
    for inj in series["runs"]:
        for b in range(len(ids)):
            history = [figures[ids[h]] for h in sorted(set(range(len(ids))) - {b}, reverse=True)][:R.HISTORY_RUNS - 1]
            verdicts = R.compare(figures[ids[b]], figures[inj["run_id"]], history)
            comparisons.append(verdicts)
            for v in verdicts:
                name = f"{v['cell']} · {v['metric']}"
                detection.setdefault(name, []).append(v["verdict"])
                changes.setdefault(name, []).append(v["change"])
                if v["cell"].startswith("redis") and v["verdict"] in ("regression", "improvement"):
                    false_alarms.append(name)
    workflow = []
    for r in series["runs"]:
        path = out_dir / r["run_id"] / "regression.json"
        if path.is_file():
            check = json.loads(path.read_text())
            workflow.append({"run_id": r["run_id"], "baseline_run_id": check.get("baseline_run_id"),
                             "regressions": [f"{v['cell']} · {v['metric']} {v['change']:+.1%}"
                                             for v in check.get("regressions", [])]})
    # What the quota did to each Kafka cell (repeats): throttled cells fall below 99% of the target rate.
    throttled = []
    for r in series["runs"]:
        for key, config in figures[r["run_id"]].items():
            if key.startswith("kafka"):
                values = config["repeats"].get("throughput_msgs_per_s", [])
                throttled.append({"run_id": r["run_id"], "cell": config["cell"],
                                  "throughput_per_repeat": [round(v, 1) for v in values]})
    return {
        "quota_bytes_per_s": series["quota"], "runs": series["runs"], "comparisons": len(comparisons),
        "kafka_repeats": throttled,
        "per_verdict": {name: {"regression": vs.count("regression"), "improvement": vs.count("improvement"),
                               "unstable": vs.count("unstable"), "unchanged": vs.count("unchanged"),
                               "detection_rate": round(vs.count("regression") / len(vs), 3),
                               "median_change": round(float(np.median([c for c in changes[name] if c is not None]
                                                                      or [0])), 4)}
                        for name, vs in sorted(detection.items())},
        "redis_false_alarms": len(false_alarms),
        "comparisons_with_a_kafka_throughput_regression": sum(
            any(v["cell"].startswith("kafka") and v["metric"] == "throughput_msgs_per_s" and v["verdict"] == "regression"
                for v in c) for c in comparisons),
        "workflow_checks": workflow,
    }


def alpha_sensitivity(figures: dict, ids: list[str], injected: list[dict]) -> list[dict]:
    """The same comparisons at other family-wise alphas: A/A alarms, and what each quota level's runs are called."""
    from brokerbench.reports import regression as R

    kept, out = R.ALPHA, []
    try:
        for alpha in (0.01, 0.02, 0.05):
            R.ALPHA = alpha
            aa = []
            for i, j in itertools.combinations(range(len(ids)), 2):
                history = [figures[ids[h]] for h in sorted(set(range(len(ids))) - {i, j}, reverse=True)]
                aa.append(R.compare(figures[ids[i]], figures[ids[j]], history[:R.HISTORY_RUNS - 1]))
            row = {"alpha": alpha, "aa": tally(aa)}
            for series in injected:
                found = {}
                for inj in series["runs"]:
                    for b in range(len(ids)):
                        history = [figures[ids[h]] for h in sorted(set(range(len(ids))) - {b}, reverse=True)]
                        for v in R.compare(figures[ids[b]], figures[inj["run_id"]], history[:R.HISTORY_RUNS - 1]):
                            found.setdefault(f"{v['cell'].split(' · ')[0]} · {v['metric']}", []).append(
                                v["verdict"] == "regression")
                row[f"quota_{series['quota']}_detection"] = {k: round(sum(v) / len(v), 3) for k, v in found.items()
                                                             if k.startswith("kafka")}
            out.append(row)
    finally:
        R.ALPHA = kept
    return out


def first_repeat(figures: dict) -> dict:
    """A run's figures as if it had run one repeat (its first): what `repeats: 1` runs give the rule."""
    return {key: {**entry, "repeats": {m: v[:1] for m, v in entry["repeats"].items()},
                  "series": {m: s[:1] for m, s in entry["series"].items()}} for key, entry in figures.items()}


def single_repeat(figures: dict, ids: list[str]) -> dict:
    """The A/A pairs again with one repeat per run: alone (no history) and with the other runs as history."""
    from brokerbench.reports import regression as R

    one = {i: first_repeat(figures[i]) for i in ids}
    alone, with_history = [], []
    for i, j in itertools.combinations(range(len(ids)), 2):
        history = [one[ids[h]] for h in sorted(set(range(len(ids))) - {i, j}, reverse=True)][:R.HISTORY_RUNS - 1]
        alone.append(R.compare(one[ids[i]], one[ids[j]]))
        with_history.append(R.compare(one[ids[i]], one[ids[j]], history))
    detectable = [v["detectable_factor"] for c in with_history for v in c if v.get("detectable_factor") is not None]
    return {"pairs_without_history": tally(alone), "pairs_with_history": tally(with_history),
            "cannot_tell_without_history": sum(bool(v.get("cannot_tell")) for c in alone for v in c),
            "median_detectable_factor_with_history": round(float(np.median(detectable)), 4) if detectable else None}


def analyse(store, aa: list[dict], injected: list[dict], out_dir: Path) -> dict:
    from brokerbench.reports import regression as R

    every = aa + [r for series in injected for r in series["runs"]]
    figures = {r["run_id"]: R.run_figures(store.read(r["run_id"], interval_histograms=False)) for r in every}
    ids = [r["run_id"] for r in aa]
    new_rule, old_rule, alone, pairs = [], [], [], []
    for i, j in itertools.combinations(range(len(ids)), 2):
        history = [figures[ids[h]] for h in sorted(set(range(len(ids))) - {i, j}, reverse=True)][:R.HISTORY_RUNS - 1]
        verdicts = R.compare(figures[ids[i]], figures[ids[j]], history)
        new_rule.append(verdicts)
        alone.append(R.compare(figures[ids[i]], figures[ids[j]]))  # no history, as `brokerbench compare` sees them
        old_rule.append(old_verdicts(figures[ids[i]], figures[ids[j]]))
        pairs.append({"baseline": ids[i], "candidate": ids[j], "history_runs": len(history) + 1,
                      "alarms": [{k: v.get(k) for k in ("cell", "metric", "verdict", "change", "p_value", "why")}
                                 for v in verdicts if v["verdict"] in ("regression", "improvement")],
                      "old_rule_alarms": sum(v["verdict"] in ("regression", "improvement") for v in old_rule[-1]),
                      "old_rule_unstable": sum(v["verdict"] == "unstable" for v in old_rule[-1])})
    # The workflow's own check: each run against the runs before it (its regression.json).
    workflow = []
    for r in aa:
        path = out_dir / r["run_id"] / "regression.json"
        if path.is_file():
            check = json.loads(path.read_text())
            workflow.append({"run_id": r["run_id"], "baseline_run_id": check.get("baseline_run_id"),
                             "history_runs": len(check.get("history_run_ids") or []),
                             "verdicts": {name: sum(v.get("verdict") == name for v in check.get("verdicts", []))
                                          for name in ("regression", "improvement", "unstable", "unchanged")}})
    # As CheckRegression sees them: each run against the one before it and the runs before that.
    sequence = [R.compare(figures[ids[j - 1]], figures[ids[j]], [figures[h] for h in ids[:j - 1][::-1]][:R.HISTORY_RUNS - 1])
                for j in range(1, len(ids))]
    result = {
        "aa": {"runs": aa, "new_rule": tally(new_rule), "old_rule": tally(old_rule), "pairs": pairs,
               "in_sequence": tally(sequence), "pairs_without_history": tally(alone), "workflow_checks_recorded": workflow,
               "noise": run_spread([figures[i] for i in ids]), "single_repeat": single_repeat(figures, ids),
               "detectable": detectable_by_metric(new_rule)},
    }
    result["injected"] = [injected_series(figures, ids, series, out_dir) for series in injected]
    result["alpha_sensitivity"] = alpha_sensitivity(figures, ids, injected)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=None, help="A/A runs (default 7; --quick 4)")
    parser.add_argument("--injected", type=int, default=None, help="runs per quota level (default 2; --quick 1)")
    parser.add_argument("--quick", action="store_true", help="4 A/A runs of 3 s cells, 1 injected run")
    parser.add_argument("--quota", default="1000000",
                        help="producer_byte_rate for the injected runs, B/s; a comma list runs each level")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "aa_regression.json"))
    parser.add_argument("--home", default=os.environ.get("BROKERBENCH_HOME", "/tmp/bb-aa"))
    parser.add_argument("--reuse", action="store_true",
                        help="reuse the A/A runs and quota levels recorded in --out; run only quota levels not there")
    args = parser.parse_args()
    runs = args.runs or (4 if args.quick else 7)
    injected_runs = args.injected if args.injected is not None else (1 if args.quick else 2)
    spec = {**SPEC, "name": f"aa-regression-{time.strftime('%Y%m%d-%H%M%S')}"}
    if args.quick:
        spec["duration_s"] = 3
    env = {**os.environ, "BROKERBENCH_HOME": args.home}
    os.environ["BROKERBENCH_HOME"] = args.home

    from brokerbench.environment import collect
    from brokerbench.events.dynamodb import DynamoEventStore
    from brokerbench.local.stack import LocalStack
    from brokerbench.reports import regression as R

    stack = LocalStack()
    started_stack = not stack.is_up()
    started = time.monotonic()
    endpoints = stack.up(["kafka", "redis", "dynamodb"], log=log)  # what the spec needs
    store = DynamoEventStore(endpoints["dynamodb"]["table"], endpoint_url=endpoints["dynamodb"]["endpoint_url"])
    store.ensure_table()
    out_dir = Path(args.home) / "reports"
    out_dir.mkdir(parents=True, exist_ok=True)
    previous = json.loads(Path(args.out).read_text()) if args.reuse and Path(args.out).is_file() else None
    quotas = [int(q) for q in args.quota.split(",") if q.strip()] if injected_runs else []
    try:
        if previous:
            spec, aa = previous["spec"], previous["aa"]["runs"]
            injected = [{"quota": s["quota_bytes_per_s"], "runs": s["runs"]} for s in previous.get("injected", [])]
            log(f"reusing {len(aa)} A/A runs of {spec['name']} and quota levels {[s['quota'] for s in injected]}")
        else:
            injected = []
            log(f"A/A: {runs} runs of {spec['name']} (BROKERBENCH_HOME={args.home})")
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(spec, f)
        spec_file = Path(f.name)
        if not previous:
            aa = run_series(runs, spec_file, out_dir, env, store, "A/A")
        for quota in quotas:
            if any(s["quota"] == quota for s in injected):
                continue
            log(f"injecting a Kafka producer quota of {quota:,} B/s (every client)")
            kafka_quota(stack, quota)
            try:
                injected.append({"quota": quota, "runs": run_series(injected_runs, spec_file, out_dir, env, store,
                                                                     f"quota {quota:,}")})
            finally:
                kafka_quota(stack, None)
                log("quota removed")
        result = analyse(store, aa, injected, out_dir)
    finally:
        if started_stack:
            stack.down(log=log)
    new, old = result["aa"]["new_rule"], result["aa"]["old_rule"]
    document = {
        "bench": "aa_regression", "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": {k: v for k, v in collect()["host"].items() if k != "hostname"},
        "spec": spec, "quick": args.quick,
        "rule": R.METHOD, "alpha": R.ALPHA, "min_effect": R.MIN_EFFECT, "k_noise": R.K_NOISE,
        "this_invocation_wall_s": round(time.monotonic() - started, 1),
        "runs_wall_s": round(sum(r["wall_s"] for r in aa) + sum(r["wall_s"] for s in injected for r in s["runs"]), 1),
        **result,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(document, indent=2, default=lambda v: v.item() if hasattr(v, "item") else str(v)))
    log(f"A/A, {new['comparisons']} comparisons × {new['verdicts'] // max(1, new['comparisons'])} verdicts: new rule {new['by_verdict']} "
        f"({new['comparisons_with_any_alarm']} comparisons with an alarm); old rule {old['by_verdict']} "
        f"({old['comparisons_with_any_alarm']} with an alarm)")
    for inj in result.get("injected", []):
        for name, figures in inj["per_verdict"].items():
            if name.startswith("kafka"):
                log(f"quota {inj['quota_bytes_per_s']:,}: {name}: detected {figures['detection_rate']:.0%} "
                    f"(median change {figures['median_change']:+.1%})")
        log(f"quota {inj['quota_bytes_per_s']:,}: Redis false alarms {inj['redis_false_alarms']} in "
            f"{inj['comparisons']} comparisons")
    log(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
