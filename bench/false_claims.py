"""False-claim benchmark of the report's claims (highlights and bold "best"): how often a report of identical
configurations carries any claim, and how often a real difference is claimed.

1. Simulated reports (reports/model.claims on configurations from tests/synthetic.claim_configuration): one
   group of 2 brokers × 4 formats, every configuration alike (A/A). Per repeat, each configuration's latency
   figures scatter by its own noise, drawn per configuration from 20–50% for the p99s (as measured here), 10% for
   p50, 30–70% for p99.9; throughput by 1% (a rated cell), serialization times by 5%; encoded bytes are fixed.
   Delivery p50 and p99 (receipt before decoding, which brokers are compared on) scatter like end-to-end's, drawn
   on their own: independent draws are the harder case for a family-wise bound, as correlated ones make fewer
   independent chances of a false claim.
   Scenarios: lognormal noise, heavy-tailed noise (Student t with 3 df on the log scale), and a shared offset
   per repeat (a slow spell moves every configuration of one round), each with 3 and 5 repeats. The previous
   rule (the range of 3 paired ratios beyond the run's median spread, no correction) is run on the same reports
   for contrast. Detection: kafka msgpack's end-to-end p99 doubled in every repeat; how often the report claims
   it against json (and how often anything else is claimed).
2. Real A/A reports: a small spec run several times through `brokerbench run` on its own local stack
   (--home; Kafka and Redis Streams × raw and json, 1 KB at 2,000 msgs/s, 5 s after a 1 s warm-up, 6 repeats:
   5 intervals, the fewest a sustainability verdict needs; latency claims need that verdict).
   Each run's configurations are split into two halves of 3 repeats (every one of the 10 ways), and each half
   becomes a configuration of its own, so every comparison in the resulting report is between the same
   configuration measured in the same run: any claim is false. The halves' real figures, verdicts and loss
   enter the rule unchanged. Detection: one half's end-to-end p99 doubled.

usage: .venv/bin/python bench/false_claims.py [--reports 2000] [--runs 3] [--reuse [--resimulate] | --keep-simulated]
       [--home /tmp/bb-claims]
       [--out bench/results/false_claims.json] [--no-real]
       (--reuse --resimulate --no-real: simulate again, keep the real runs' results recorded in --out)
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
sys.path.insert(0, str(ROOT / "tests"))  # tests/synthetic.py, shared with the tests
BIN = Path(sys.executable).parent / "brokerbench"
SPEC = {"brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [2000], "formats": ["raw", "json"],
        "modes": ["batch"], "producers": 1, "consumers": 1, "partitions": 1, "duration_s": 5, "warmup_s": 1,
        "repeats": 6}
BROKERS, FORMATS = ("kafka", "redis-streams"), ("json", "msgpack", "avro", "protobuf")
REFERENCES = {"format": "json", "broker": "kafka"}
# metric -> (level, per-configuration noise range of the log figures)
NOISE = {"throughput_msgs_per_s": (2000.0, (0.01, 0.01)), "throughput_mb_per_s": (2.0, (0.01, 0.01)),
         "end_to_end_p50_us": (800.0, (0.10, 0.10)), "end_to_end_p99_us": (3000.0, (0.20, 0.50)),
         "end_to_end_p999_us": (9000.0, (0.30, 0.70)), "delivery_p50_us": (780.0, (0.10, 0.10)),
         "delivery_p99_us": (2900.0, (0.20, 0.50)), "publish_latency_p99_us": (2000.0, (0.20, 0.50)),
         "publish_delay_p99_us": (300.0, (0.20, 0.50)), "encode_p50_ns": (3000.0, (0.05, 0.05)),
         "decode_p50_ns": (4000.0, (0.05, 0.05)), "encoded_bytes": (1024.0, (0.0, 0.0)), "lost": (0.0, (0.0, 0.0))}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- the rule under test and the previous one -----------------------------------------------------
def judge(configs: list[dict], references: dict, groups_of=None) -> dict:
    """The report's claims on these configurations: highlights, "best" marks and the family's size."""
    from brokerbench.reports import model

    groups = []
    for i, cells in enumerate(groups_of(configs) if groups_of else [configs]):
        for c in cells:
            c.pop("best", None)
        groups.append({"title": f"group {i}", "cells": cells})
    noise = model.run_noise(configs)
    highlights, family = model.claims(groups, references, noise)
    best = [(c["key"], name) for g in groups for c in g["cells"] for name in c.get("best", [])]
    return {"highlights": highlights, "best": best, "comparisons": family["comparisons"]}


def previous_rule(configs: list[dict], references: dict) -> int:
    """Claims the previous rule made (p99 and throughput highlights): the range of the paired ratios (3 repeats:
    [min, max], 75%) beyond 1 ± the run's noise (median spread of repeats, or the reference's if larger), and
    the median ratio beyond the effect floor; no correction for the number of comparisons."""
    from brokerbench.reports.model import MIN_CLAIM_EFFECT, _references
    from brokerbench.reports.stats import median_ci, spread

    by_cell = {(c["broker"], c["format"]): c for c in configs}
    noise = {name: float(np.median([spread(c["values_by_repeat"][name]) for c in configs])) for name in MIN_CLAIM_EFFECT}
    count = 0
    for config in configs:
        for _, ref in _references(config, by_cell, references):
            for name, floor in MIN_CLAIM_EFFECT.items():
                ratios = [a / b for a, b in zip(config["values_by_repeat"][name], ref["values_by_repeat"][name])]
                est = median_ci(ratios)
                bound = 1 + max(noise[name], spread(ref["values_by_repeat"][name]))
                beyond = est.ci_low > bound or est.ci_high < 1 / bound
                count += beyond and abs(est.median - 1) >= floor
    return count


# -- simulated reports ----------------------------------------------------------------------------
def simulated_report(rng, repeats: int, kind: str, doubled: bool) -> list[dict]:
    from synthetic import claim_configuration

    shared = rng.normal(0, 0.15, repeats) if kind == "shared" else np.zeros(repeats)
    configs = []
    for broker, fmt in itertools.product(BROKERS, FORMATS):
        values = {}
        for name, (level, (low, high)) in NOISE.items():
            sigma = rng.uniform(math.log1p(low), math.log1p(high))
            draw = rng.standard_t(3, repeats) / math.sqrt(3) if kind == "heavy" else rng.normal(0, 1, repeats)
            latency = name.endswith("_us")
            figures = level * np.exp(sigma * draw + (shared if latency else 0))
            if doubled and name == "end_to_end_p99_us" and (broker, fmt) == ("kafka", "msgpack"):
                figures = figures * 2
            values[name] = [float(v) for v in figures]
        configs.append(claim_configuration(broker, fmt, values))
    return configs


def simulate(reports: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for kind, repeats in itertools.product(("lognormal", "heavy", "shared"), (3, 5)):
        started = time.monotonic()
        null = [judge(simulated_report(rng, repeats, kind, False), REFERENCES) for _ in range(reports)]
        previous = [previous_rule(simulated_report(rng, repeats, kind, False), REFERENCES) for _ in range(reports)]
        injected = [judge(simulated_report(rng, repeats, kind, True), REFERENCES) for _ in range(reports)]
        target = ("kafka|msgpack", "kafka|json")
        found = sum(any(h["metric"] == "end_to_end_p99_us" and (h["cell"], h["reference"]) == target
                        for h in r["highlights"]) for r in injected)
        # With kafka msgpack's p99 doubled, every other claim is false: a highlight other than msgpack against
        # json on Kafka (or Redis's msgpack against Kafka's, which really differs now), or any "best".
        real = (target, ("redis-streams|msgpack", "kafka|msgpack"))
        other = sum(any((h["cell"], h["reference"]) not in real or h["metric"] != "end_to_end_p99_us"
                        for h in r["highlights"]) or bool(r["best"]) for r in injected)
        row = {"noise": kind, "repeats": repeats, "reports": reports,
               "comparisons_per_report": null[0]["comparisons"],
               "p99_comparisons_per_report": sum(1 for _ in _p99_pairs()),
               "reports_with_a_false_claim": sum(bool(r["highlights"] or r["best"]) for r in null),
               "false_highlights": sum(len(r["highlights"]) for r in null),
               "false_best": sum(len(r["best"]) for r in null),
               "previous_rule_reports_with_a_false_claim": sum(p > 0 for p in previous),
               "doubled_p99_detected": found, "with_doubled_p99_reports_with_another_false_claim": other}
        row["false_claim_rate"] = round(row["reports_with_a_false_claim"] / reports, 4)
        row["previous_rule_false_claim_rate"] = round(row["previous_rule_reports_with_a_false_claim"] / reports, 4)
        row["detection_rate"] = round(found / reports, 4)
        log(f"simulated {kind}, {repeats} repeats: false claims in {row['false_claim_rate']:.1%} of reports "
            f"(previous rule {row['previous_rule_false_claim_rate']:.1%}), doubled p99 claimed in "
            f"{row['detection_rate']:.1%} ({time.monotonic() - started:.0f} s)")
        out.append(row)
    return out


def _p99_pairs():
    from brokerbench.reports.model import _references

    configs = [{"broker": b, "format": f} for b, f in itertools.product(BROKERS, FORMATS)]
    by_cell = {(c["broker"], c["format"]): c for c in configs}
    return [(c, r) for c in configs for _, r in _references(c, by_cell, REFERENCES)]


# -- real runs --------------------------------------------------------------------------------------
def run_series(count: int, spec_file: Path, out_dir: Path, env: dict, store) -> list[dict]:
    runs = []
    for i in range(count):
        before = {p.name for p in out_dir.iterdir()} if out_dir.exists() else set()
        started = time.monotonic()
        done = subprocess.run([str(BIN), "run", "--spec", str(spec_file), "--out", str(out_dir)], env=env,
                              capture_output=True, text=True, cwd=ROOT)
        new = sorted(p.name for p in out_dir.iterdir() if p.name not in before and (p / "results.json").is_file())
        run_id = new[-1] if new else None
        ended = [e for e in store.read(run_id, prefix="90#") if e["type"] == "RunCompleted"] if run_id else []
        status = ended[0]["data"]["status"] if ended else "no end"
        log(f"run {i + 1}/{count}: {run_id} {status} exit {done.returncode} in {time.monotonic() - started:.0f} s")
        if status == "completed":
            runs.append({"run_id": run_id, "wall_s": round(time.monotonic() - started, 1)})
        else:
            log((done.stderr or done.stdout)[-1500:])
    return runs


def halves(report: dict, split: tuple[int, ...]) -> list[dict]:
    """Each configuration of a real report as two configurations: the repeats in `split` (positions) and the
    others, paired in order; verdict and loss per half from its own repeats."""
    from synthetic import claim_configuration

    out = []
    for group in report["groups"]:
        for config in group["cells"]:
            verdicts = [r["verdict"] for r in config["sustainability"]["repeats"]]
            n = len(verdicts)
            if n < 6:
                continue
            for label, positions in (("A", split), ("B", tuple(i for i in range(n) if i not in split))):
                values = {name: [vs[i] for i in positions] for name, vs in config["values_by_repeat"].items()}
                kinds = {verdicts[i] for i in positions}
                verdict = "sustainable" if kinds == {"sustainable"} else \
                    ("unsustainable" if "unsustainable" in kinds else "inconclusive")
                lost = [values["lost"][i] or 0 for i in range(len(positions))]
                out.append(claim_configuration(f"{config['broker']} {config['format']}", label, values,
                                               verdict_name=verdict, has_loss=config["has_loss"] and any(lost)))
    return out


def by_pair(configs: list[dict]) -> list[list[dict]]:
    """A group per real configuration: its two halves (so "best" too compares a configuration with itself)."""
    groups: dict[str, list[dict]] = {}
    for c in configs:
        groups.setdefault(c["broker"], []).append(c)
    return list(groups.values())


def real(store, runs: list[dict]) -> dict:
    from brokerbench.reports.model import build_report

    rows, null, injected, found, eligible = [], [], [], 0, 0
    for run in runs:
        report = build_report(store.read(run["run_id"], interval_histograms=False))
        n = max(len(c["sustainability"]["repeats"]) for g in report["groups"] for c in g["cells"])
        splits = [s for s in itertools.combinations(range(n), n // 2) if 0 in s]  # each split once
        for split in splits:
            configs = halves(report, split)
            refs = {"format": "A", "broker": "none"}
            verdict = judge(configs, refs, by_pair)
            null.append(verdict)
            # Detection: the second half of the first configuration whose halves may both claim on latency.
            doubled = halves(report, split)
            pairs = [doubled[i:i + 2] for i in range(0, len(doubled), 2)]
            able = [b for a, b in pairs if all(_latency_eligible(c) for c in (a, b))]
            if not able:
                continue
            target = able[0]
            target["values_by_repeat"]["end_to_end_p99_us"] = [v * 2 if v else v for v in
                                                               target["values_by_repeat"]["end_to_end_p99_us"]]
            target["metrics"]["end_to_end_p99_us"]["median"] *= 2
            hit = judge(doubled, refs, by_pair)
            injected.append(hit)
            eligible += 1
            found += any(h["cell"] == target["key"] and h["metric"] == "end_to_end_p99_us" for h in hit["highlights"])
        rows.append({"run_id": run["run_id"], "splits": len(splits),
                     "reports_with_a_false_claim": sum(bool(v["highlights"] or v["best"]) for v in null[-len(splits):]),
                     "eligible_for_latency_claims": sum(c["sustainability"]["verdict"] == "sustainable" and
                                                        not c["has_loss"] for g in report["groups"]
                                                        for c in g["cells"]),
                     "p99_repeat_spread": _p99_noise(report),
                     "verdicts_by_repeat": {f"{c['broker']} {c['format']}": [r["verdict"] for r in
                                                                           c["sustainability"]["repeats"]]
                                            for g in report["groups"] for c in g["cells"]},
                     "with_loss": [f"{c['broker']} {c['format']}" for g in report["groups"] for c in g["cells"]
                                   if c["has_loss"]],
                     "reasons": sorted({reason for g in report["groups"] for c in g["cells"]
                                        for reason in c["sustainability"]["reasons"]})[:12]})
    return {"runs": rows, "reports": len(null),
            "comparisons_per_report": sorted(v["comparisons"] for v in null)[len(null) // 2] if null else 0,
            "reports_with_a_false_claim": sum(bool(v["highlights"] or v["best"]) for v in null),
            "false_claims": [h["text"] for v in null for h in v["highlights"]] + [f"best {b}" for v in null
                                                                                 for b in v["best"]],
            "doubled_p99_detected": found, "doubled_p99_trials": eligible,
            "detection_rate": round(found / max(1, eligible), 4),
            "false_claim_rate": round(sum(bool(v["highlights"] or v["best"]) for v in null) / max(1, len(null)), 4)}


def _latency_eligible(config: dict) -> bool:
    return config["sustainability"]["verdict"] == "sustainable" and not config["has_loss"]


def _p99_noise(report: dict) -> dict:
    from brokerbench.reports.stats import spread

    return {f"{c['broker']} {c['format']}": round(spread(c["values_by_repeat"]["end_to_end_p99_us"]), 3)
            for g in report["groups"] for c in g["cells"]}


def real_runs(args) -> dict:
    env = {**os.environ, "BROKERBENCH_HOME": args.home}
    os.environ["BROKERBENCH_HOME"] = args.home
    from brokerbench.events.dynamodb import DynamoEventStore
    from brokerbench.local.stack import LocalStack

    stack = LocalStack()
    started_stack = not stack.is_up()
    endpoints = stack.up(["kafka", "redis", "dynamodb"], log=log)  # what the spec needs
    try:
        store = DynamoEventStore(endpoints["dynamodb"]["table"], endpoint_url=endpoints["dynamodb"]["endpoint_url"])
        store.ensure_table()
        previous = json.loads(Path(args.out).read_text()).get("real") if args.reuse and Path(args.out).is_file() \
            else None
        if previous:
            spec, runs = previous["spec"], previous["run_list"]
        else:
            spec = {**SPEC, "name": f"false-claims-{time.strftime('%Y%m%d-%H%M%S')}"}
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump(spec, f)
            out_dir = Path(args.home) / "reports"
            out_dir.mkdir(parents=True, exist_ok=True)
            runs = run_series(args.runs, Path(f.name), out_dir, env, store)
        return {"spec": spec, "run_list": runs, **real(store, runs)}
    finally:
        if started_stack:
            stack.down(log=log)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reports", type=int, default=2000, help="simulated reports per scenario")
    parser.add_argument("--runs", type=int, default=3, help="real runs of the 6-repeat spec")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-real", action="store_true",
                        help="simulated reports only (with --reuse, the real runs' results recorded in --out are kept)")
    parser.add_argument("--reuse", action="store_true",
                        help="analyse the real runs recorded in --out again (and keep its simulated results)")
    parser.add_argument("--resimulate", action="store_true", help="with --reuse: simulate again")
    parser.add_argument("--keep-simulated", action="store_true",
                        help="keep the simulated results in --out, make new real runs")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "false_claims.json"))
    parser.add_argument("--home", default="/tmp/bb-claims")
    args = parser.parse_args()
    from brokerbench.environment import collect
    from brokerbench.reports import model

    started = time.monotonic()
    reused = (args.reuse or args.keep_simulated) and Path(args.out).is_file()
    previous = json.loads(Path(args.out).read_text()) if reused else {}
    document = {"bench": "false_claims", "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "host": {k: v for k, v in collect()["host"].items() if k != "hostname"},
                "rule": model.CLAIMS_RULE, "alpha": model.CLAIM_ALPHA, "floors": model.CLAIM_FLOOR,
                "simulated_noise": {k: {"level": v[0], "log_sd_range": [round(math.log1p(x), 4) for x in v[1]]}
                                    for k, v in NOISE.items()},
                "simulated": previous["simulated"] if previous.get("simulated") and not args.resimulate
                else simulate(args.reports, args.seed)}
    if args.no_real:  # what was recorded of real runs stays with the new simulation
        document.update({k: v for k, v in previous.items() if k.startswith("real")})
    else:
        document["real"] = real_runs(args)
        r = document["real"]
        log(f"real: {r['reports_with_a_false_claim']} of {r['reports']} A/A reports with a false claim; doubled p99 "
            f"claimed in {r['detection_rate']:.0%}")
    document["wall_s"] = round(time.monotonic() - started, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(document, indent=2, default=float))
    log(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
