"""The nightly schedule in A/A: identical runs of the quick suite must raise no alert; a real step must be told
within two nights, at the run it began with.

1. Real runs: N runs of the quick suite (functions/brokerbench/suites/quick.json) on this build, one after
   another, into one event store (its own local stack, kept up for the whole bench as a schedule's stack is), each
   through the local workflow, whose CheckRegression step is the scheduled check. After each run the check is made
   again as that step makes it (reports.history.watch, record=False): every alert it would raise is counted
   (pairwise regressions, sustainability flips among them, and change points), with the failed cells (which also
   notify). Per run and configuration the figures the simulation needs are kept: each quiet repeat's throughput
   and p99s, each repeat's sustainability verdict, the repeats measured on a busy host.
2. Simulation: schedules of NIGHTS nights (a night: one more run, the schedule's check of it), each run drawn from
   the real runs' noise, per configuration and metric on the log scale, as it came: each repeat one of the
   configuration's real repeats (its log less the configuration's median) drawn at random, plus a run effect (the
   robust spread of the real runs' medians beyond what repeats drawn so give). Not log-normal: a p99's repeats
   mostly agree within about 12% (Kafka) and one in eight reads 1.4-7x higher, so a standard deviation of the logs
   (41.5%, the median over configurations of end-to-end p99) describes neither the bulk nor the tail (the
   log-normal draw with those standard deviations stays available, model["shape"]). Each repeat is judged
   unsustainable, inconclusive or busy at the real runs' rates. The check is the project's own code on the
   drawn figures: regression.compare (the pairwise check, its flips under Boschloo's test included) against the
   previous run and the ones before it as regression.check picks them, and history.change_alerts (the change
   points the check tells) over the newest history.SERIES_RUNS runs, history.pairwise_alerts keeping the pairwise
   alerts of series too short to search. Gives the share of nights with any alert. Then a step at a random night
   of a random configuration (end-to-end p99 × 1.3, or throughput × 0.8): the share of steps told within two
   nights (the night of the step or the next) with the alert on that configuration and metric and the change
   placed on the step's run ± 1 (a pairwise alert is placed on the run it checked).
   Then how large a p99 step the schedule tells (P99_SWEEP), the +30% step with more repeats per run (REPEATS_SWEEP:
   what a suite sized for detection would tell, its A/A nights' false alerts and its minutes per night,
   night_minutes), and a bound on what a test of these runs can tell (power_table): a test that knew the step's run
   and the level before it, on one series alone at a one-sided 1% (docs/performance.md has its figures per
   configuration: the smallest step it tells at 90% and the repeats per run it would need for +30%). --bound-only
   makes the noise model and the bound again from the recorded runs and keeps the recorded simulation.
   The drawn configurations are independent of each other (a slow run on a real host moves every configuration:
   correlation that the family-wise controls hold under, and that makes alerts cluster rather than multiply).

usage: .venv/bin/python bench/aa_schedule.py [--runs 8] [--home /tmp/bb-aas] [--nights 1000] [--trials 300]
       [--reuse] [--simulate-only] [--bound-only] [--processes 1] [--out bench/results/aa_schedule.json]

--reuse: the runs recorded in --out are checked again from the event store (its stack in --home started for it),
and more are run up to --runs. --simulate-only: only the simulation again, from the figures recorded in --out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent / "brokerbench"
SUITE = "quick"
SUITE_FILE = ROOT / "functions" / "brokerbench" / "suites" / f"{SUITE}.json"
RUNS = 8
NIGHTS_PER_SCHEDULE = 25  # a schedule's nights in the simulation: beyond changes.MIN_SERIES, below SERIES_RUNS
NIGHTS = 1000
TRIALS = 300  # steps simulated per kind
STEPS = {"p99": ("end_to_end_p99_us", 1.30), "throughput": ("throughput_msgs_per_s", 0.80)}
P99_SWEEP = (1.5, 2.0, 3.0, 4.0)  # larger p99 steps, to show the size a schedule of these runs can tell
REPEATS_SWEEP = (10, 20, 30)  # repeats per run, drawn from the same noise: the +30% p99 step and the A/A nights
POWER = 0.90  # the goal's detection rate
TYPICAL_SERIES = 12  # runs in the series when a step is told, for the watch's power formula (a schedule's middle)
WITHIN_NIGHTS = 2  # the step's night and the next
PLACEMENT = 1  # runs either side of the step's run where the alert may place it
# The per-repeat unsustainable rate in the project's earlier A/A data (7 of 72 repeats on identical configurations,
# bench/results/false_claims.json, issue 33): the simulation is also run at it, as a busier host would make it.
STRESS_UNSUSTAINABLE = 7 / 72
FIGURE_METRICS = ("throughput_msgs_per_s", "end_to_end_p99_us", "publish_latency_p99_us")
ALERT_FIELDS = ("cell", "key", "metric", "source", "change", "p_value", "began_run_id", "why")
SCHEDULE = "nightly-quick"  # the built-in schedule of the quick suite: its baseline_runs shape the nights


def baseline_runs() -> int:
    """The runs the nightly schedule starts back to back before its first night of checks (schedules.catch_up)."""
    from brokerbench import schedules

    return next(s.baseline_runs for s in schedules.load() if s.name == SCHEDULE)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# -- the real runs' figures (pure) --------------------------------------------------------------------------------
def kept_figures(figures: dict[str, dict]) -> dict[str, dict]:
    """A run's regression.run_figures without the per-second series (the simulation and the JSON need the
    repeats): per configuration its repeats per metric (busy repeats already left out), each quiet repeat's
    sustainability verdict, the configuration's verdict and the busy marks."""
    return {key: {k: e[k] for k in ("key", "cell", "cell_id", "status", "search", "send_loop", "sustainability",
                                     "repeat_verdicts", "host_busy")} | {"repeats": e["repeats"], "series": {},
                                                                         "covariates": e.get("covariates", {})}
            for key, e in figures.items()}


# a p99 over all of a run's messages: its latency's histogram in CellCompleted
MERGED = {"end_to_end_p99_us": "end_to_end_latency_us", "publish_latency_p99_us": "publish_latency_us"}
FIGURES = ("geometric mean", "median", "merged")  # a run's figure of a p99, compared in figure_spread


def merged_p99s(events: list[dict], cells: list[dict]) -> dict[str, dict]:
    """Per configuration key, each p99 over all the messages of the run's quiet repeats (their cumulative
    histograms merged; every repeat when none was quiet, as regression.run_figures keeps them). `cells`: the run's
    results.json cells (reports.results.build_results of `events`), which name each cell's configuration and host."""
    from brokerbench.figures import bucket_percentiles, merge_blobs
    from brokerbench.reports.model import config_key

    histograms = {e["data"]["cell_id"]: e["data"]["histograms"] for e in events if e["type"] == "CellCompleted"}
    by_key: dict[str, list[tuple[bool, dict]]] = {}
    for cell in cells:
        if cell["cell_id"] in histograms:
            by_key.setdefault(config_key(cell), []).append((bool((cell.get("host") or {}).get("busy")),
                                                            histograms[cell["cell_id"]]))
    out = {}
    for key, ends in by_key.items():
        kept = [h for busy, h in ends if not busy] or [h for _, h in ends]
        out[key] = {metric: bucket_percentiles(merge_blobs([h[name] for h in kept]), [99.0])[0]
                    for metric, name in MERGED.items()}
    return out


def figure_spread(runs: list[dict]) -> dict:
    """How far a run's p99 figure moves between identical runs, by how it is made of the run (FIGURES: the
    geometric mean or the median of its repeats' p99s, or the p99 of all its messages): per metric, the standard
    deviation of the log figure over the runs of each configuration, the median over configurations. Runs are
    checked_run's, with "merged" (merged_p99s)."""
    out = {}
    for metric in MERGED:
        spreads = {kind: [] for kind in FIGURES}
        for key in runs[0]["figures"]:
            figures = {kind: [] for kind in FIGURES}
            for r in runs:
                repeats = np.log(np.maximum(r["figures"].get(key, {}).get("repeats", {}).get(metric) or [], 1e-3))
                merged = r.get("merged", {}).get(key, {}).get(metric)
                if repeats.size and merged:
                    figures["geometric mean"].append(float(repeats.mean()))
                    figures["median"].append(float(np.median(repeats)))
                    figures["merged"].append(math.log(merged))
            if len(figures["merged"]) >= 3:
                for kind in FIGURES:
                    spreads[kind].append(float(np.std(figures[kind], ddof=1)))
        if spreads["merged"]:
            out[metric] = {kind: float(np.median(v)) for kind, v in spreads.items()} | {
                "configurations": len(spreads["merged"])}
    return out


def _covariate_logs(runs: list[dict[str, dict]], key: str, metric: str) -> list[np.ndarray] | None:
    """Per run, the log host figure (changes.COVARIATE) of each repeat of a configuration's metric, aligned with its
    repeats; None unless every repeat of every run has one."""
    out = []
    for r in runs:
        if key not in r or not r[key]["repeats"].get(metric):
            continue
        given = (r[key].get("covariates") or {}).get(metric) or []
        if len(given) != len(r[key]["repeats"][metric]) or any(c is None for c in given):
            return None
        out.append(np.log(np.maximum(np.asarray(given, dtype=float), changes_floor())))
    return out


def changes_floor() -> float:
    from brokerbench.reports.changes import COVARIATE_FLOOR

    return COVARIATE_FLOOR


def host_slopes(runs: list[dict[str, dict]]) -> dict[str, float]:
    """Per noise group of an adjusted metric, the slope the watch would take out of these runs
    (changes.host_adjustment over every configuration of the group, every run a point)."""
    from brokerbench.reports.changes import ADJUSTED, host_adjustment
    from brokerbench.reports.history import noise_group

    members: dict[str, list[dict]] = {}
    for key in runs[0]:
        for metric in ADJUSTED:
            covariates = _covariate_logs(runs, key, metric)
            if covariates is None:
                continue
            kept = [r for r in runs if key in r and r[key]["repeats"].get(metric)]
            members.setdefault(noise_group(key, metric), []).append(
                {"runs": [r[key]["repeats"][metric] for r in kept],
                 "covariates": [r[key]["covariates"][metric] for r in kept]})
    slopes = {}
    for group, series in members.items():
        found = host_adjustment(series)
        if found is not None:
            slopes[group] = found["slope"]
    return slopes


def noise_model(runs: list[dict[str, dict]]) -> dict:
    """The noise of the real runs (each a kept_figures), per configuration and metric on the log scale: the mean of
    the runs' means, the repeats' standard deviation around their run's mean (pooled), and the run effect's: the
    variance of the runs' means less the repeats' share of it (floored at 0). Beside them, per repeat over every
    configuration: the shares judged unsustainable and inconclusive (of the quiet repeats) and measured busy."""
    from brokerbench.reports.history import noise_group

    slopes = host_slopes(runs)
    configurations = {}
    for key in runs[0]:
        entry = {"cell": runs[0][key]["cell"], "metrics": {}}
        for metric in FIGURE_METRICS:
            logs = [np.log(np.maximum(np.asarray(r[key]["repeats"].get(metric) or [], dtype=float), 1e-3))
                    for r in runs if key in r]
            logs = [x for x in logs if x.size]
            if len(logs) < 2:
                continue
            means = np.array([x.mean() for x in logs])
            df = sum(x.size - 1 for x in logs)
            within = sum(float(((x - x.mean()) ** 2).sum()) for x in logs) / df if df else 0.0
            repeats = float(np.mean([x.size for x in logs]))
            between = max(0.0, float(np.var(means, ddof=1)) - within / repeats)
            entry["metrics"][metric] = {"log_mean": float(means.mean()), "sd_repeat": math.sqrt(within),
                                        "sd_run": math.sqrt(between), "runs": len(logs),
                                        "run_values": [float(math.exp(m)) for m in means],
                                        **empirical_noise(logs)}
            covariates = _covariate_logs(runs, key, metric)
            slope = slopes.get(noise_group(key, metric))
            if covariates is not None and slope is not None:
                entry["metrics"][metric].update(joint_noise(logs, covariates, slope))
        configurations[key] = entry
    verdicts = [v for r in runs for e in r.values() for v in e["repeat_verdicts"]]
    busy = sum(len((e.get("host_busy") or {}).get("repeats", [])) for r in runs for e in r.values())
    repeats = sum((e.get("host_busy") or {}).get("of", len(e["repeat_verdicts"])) for r in runs for e in r.values())
    return {"configurations": configurations, "repeats": repeats, "quiet_repeats": len(verdicts), "busy": busy,
            "unsustainable": verdicts.count("unsustainable"), "inconclusive": verdicts.count("inconclusive"),
            "repeats_per_run": round(repeats / max(1, sum(len(r) for r in runs))),
            "unsustainable_rate": verdicts.count("unsustainable") / max(1, len(verdicts)),
            "inconclusive_rate": verdicts.count("inconclusive") / max(1, len(verdicts)),
            "busy_rate": busy / max(1, repeats)}


def empirical_noise(logs: list[np.ndarray], draws: int = 4000) -> dict:
    """The real noise's shape, for drawing repeats as they came (a p99's repeats are not log-normal: most agree
    closely, a few read several times higher): the centre (median of every repeat's log), each repeat's log less
    it (the residuals repeats are drawn from, run-to-run differences included), the robust spread of the
    repeats (1.4826 × MAD of the residuals) and a run effect beyond them: the robust spread of the runs' medians
    (1.4826 × MAD) less what medians of that many repeats drawn independently from the residuals spread
    (floored at 0; seeded, so the model is a function of the runs)."""
    flat = np.concatenate(logs)
    centre = float(np.median(flat))
    residuals = flat - centre
    n = max(1, round(float(np.mean([x.size for x in logs]))))
    medians = np.array([np.median(x) for x in logs])
    observed = (1.4826 * float(np.median(np.abs(medians - np.median(medians))))) ** 2
    drawn = np.median(np.random.default_rng(0).choice(residuals, (draws, n)), axis=1)
    expected = (1.4826 * float(np.median(np.abs(drawn - np.median(drawn))))) ** 2
    return {"centre": centre, "residuals": [float(r) for r in residuals],
            "sd_repeat_robust": 1.4826 * float(np.median(np.abs(residuals))),
            "sd_run_robust": math.sqrt(max(0.0, observed - expected))}


def joint_noise(logs: list[np.ndarray], covariates: list[np.ndarray], slope: float) -> dict:
    """The noise of a latency with its host figure, for drawing both as they came together: each repeat's log
    figure net of the host (less slope × its log delay's deviation from the median) and its log delay, each less
    its centre (the residuals are drawn in pairs), and the robust run effect of the net figure beyond what its
    drawn repeats give (empirical_noise's, on the net figures). A drawn repeat is then centre + run effect + its
    net residual + slope × its delay's residual, so the watch finds the slope the real runs had."""
    delays = np.concatenate(covariates)
    delay_centre = float(np.median(delays))
    net = [x - slope * (c - delay_centre) for x, c in zip(logs, covariates)]
    noise = empirical_noise(net)
    return {"joint": {"slope": slope, "centre": noise["centre"], "residuals": noise["residuals"],
                      "sd_run_robust": noise["sd_run_robust"], "delay_centre": delay_centre,
                      "delay_residuals": [float(d - delay_centre) for d in delays]}}


# -- a drawn run (pure, seeded) ------------------------------------------------------------------------------------
def combined(verdicts: list[str]) -> str:
    """The configuration's verdict over its repeats (reports.model.combined_verdict's rule)."""
    if verdicts and all(v == "sustainable" for v in verdicts):
        return "sustainable"
    return "unsustainable" if "unsustainable" in verdicts else "inconclusive"


def draw_run(model: dict, rng: np.random.Generator, step: tuple[str, str, float] | None = None,
             unsustainable_rate: float | None = None) -> dict[str, dict]:
    """One run's figures as regression.run_figures gives them, drawn from `model`; `step` = (key, metric, factor)
    multiplies one configuration's metric. model["shape"]: "empirical" (the default: each repeat one of the real
    residuals drawn at random, plus the robust run effect) or "lognormal" (normal on the log scale with the
    repeats' and the runs' standard deviations)."""
    p_u = model["unsustainable_rate"] if unsustainable_rate is None else unsustainable_rate
    p_i, p_busy, n = model["inconclusive_rate"], model["busy_rate"], model["repeats_per_run"]
    run = {}
    for key, config in model["configurations"].items():
        busy = [r for r in range(1, n + 1) if rng.random() < p_busy]
        draws = rng.random(n)
        verdicts = ["unsustainable" if d < p_u else "inconclusive" if d < p_u + p_i else "sustainable" for d in draws]
        repeats, covariates = {}, {}
        for metric, m in config["metrics"].items():
            delays = None
            if model.get("shape", "empirical") == "lognormal":
                values = np.exp(m["log_mean"] + rng.normal(0, m["sd_run"]) + rng.normal(0, m["sd_repeat"], n))
            elif "joint" in m and model.get("covariates", True):
                j = m["joint"]
                picks = rng.integers(0, len(j["residuals"]), n)
                residuals, spread = np.asarray(j["residuals"])[picks], np.asarray(j["delay_residuals"])[picks]
                values = np.exp(j["centre"] + rng.normal(0, j["sd_run_robust"]) + residuals + j["slope"] * spread)
                delays = np.exp(j["delay_centre"] + spread)
            else:
                values = np.exp(m["centre"] + rng.normal(0, m["sd_run_robust"]) + rng.choice(m["residuals"], n))
            if step is not None and step[0] == key and step[1] == metric:
                values = values * step[2]
            repeats[metric] = [float(v) for r, v in enumerate(values, 1) if r not in busy]
            if delays is not None:
                covariates[metric] = [float(v) for r, v in enumerate(delays, 1) if r not in busy]
        judged = model.get("judged", True)  # False: no sustainability verdict, so no flip is tested
        run[key] = {"key": key, "cell": config["cell"], "cell_id": key, "status": "completed", "search": False,
                    "send_loop": None, "sustainability": combined(verdicts) if judged else None,
                    "repeat_verdicts": [v for r, v in enumerate(verdicts, 1) if r not in busy] if judged else [],
                    "host_busy": {"repeats": busy, "of": n, "reasons": ["drawn busy"]} if busy else None,
                    "repeats": repeats, "series": {}, "covariates": covariates}
    return run


# -- the schedule's check of a night (the project's own functions) ------------------------------------------------
def night_alerts(figures: dict[str, dict], run_ids: list[str]) -> list[dict]:
    """The alerts the scheduled check (history.watch) raises on the newest of `run_ids` (oldest first), from the
    runs' figures alone: the pairwise check against the run before it and up to HISTORY_RUNS − 1 before that (every
    run matches: one build, one configuration), the change points over the newest SERIES_RUNS. Each alert: key,
    metric, source and the index in `run_ids` of the run it places the change at."""
    from brokerbench.reports import history, regression

    run_ids = run_ids[-history.SERIES_RUNS:]
    newest = len(run_ids) - 1
    out = []
    if newest >= 1:
        older = [figures[r] for r in run_ids[:-1][::-1][1:regression.HISTORY_RUNS]]
        verdicts = regression.compare(figures[run_ids[-2]], figures[run_ids[-1]], older)
        _, told, searched = history.change_alerts(figures, run_ids)
        out += [{"key": v["key"], "metric": v["metric"], "source": "pairwise", "at": newest}
                for v in history.pairwise_alerts([v for v in verdicts if v["verdict"] == "regression"], searched)]
        out += [{"key": s["key"], "metric": s["metric"], "source": "change_point",
                 "at": run_ids.index(s["run_ids"][c["index"]]), "change": c["change"], "found_by": c["found_by"]}
                for s, c in told]
    return out


# -- what any test could tell (pure) ------------------------------------------------------------------------------
BOUND_DRAWS = 20000  # simulated pairs of runs per configuration for the bound
BOUND_REPEATS = (3, 5, 10, 20, 30, 50, 100, 200)  # repeats per run tried for the bound


def after_statistics(m: dict, repeats: int, after: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """BOUND_DRAWS draws, with no step, of what `after` runs of `repeats` repeats (the empirical noise: run effect
    and residuals) say of their level, less the metric's true centre, by three estimators: the mean of the runs'
    medians (the watch's figure), the median of all their repeats, and the mean of all their repeats' logs."""
    shape = (BOUND_DRAWS, after, repeats)
    logs = rng.normal(0, m["sd_run_robust"], shape[:2])[:, :, None] + rng.choice(m["residuals"], shape)
    return {"mean of run medians": np.median(logs, axis=2).mean(axis=1),
            "median of repeats": np.median(logs.reshape(BOUND_DRAWS, -1), axis=1),
            "mean of repeats": logs.reshape(BOUND_DRAWS, -1).mean(axis=1)}


def bound_of(m: dict, repeats: int, after: int, step: float, alpha: float, seed: int = 2) -> dict:
    """The best any test of a step could do here: it knows the run the step began with and the level before it
    exactly, tests one series alone at a one-sided `alpha`, and takes whichever of three estimators of the level
    after the step tells it best (an advantage no real test has). The critical value is each estimator's 1 − alpha
    quantile with no step (simulated); a step of factor f adds log f. Gives the power at `step` and the smallest step
    told at POWER (the critical value less the estimator's 1 − POWER quantile), each the best of the estimators."""
    power, smallest, estimator = 0.0, math.inf, None
    for name, values in after_statistics(m, repeats, after, np.random.default_rng(seed)).items():
        critical = float(np.quantile(values, 1 - alpha))
        if float(np.mean(values + math.log(step) > critical)) > power:
            power, estimator = float(np.mean(values + math.log(step) > critical)), name
        smallest = min(smallest, math.exp(critical - float(np.quantile(values, 1 - POWER))))
    return {"power": power, "smallest_step": smallest, "estimator": estimator}


def power_table(model: dict, metric: str = "end_to_end_p99_us", step: float = STEPS["p99"][1],
                after: int = WITHIN_NIGHTS) -> dict:
    """Per configuration, whether a step of `step` in `metric` can be told within `after` runs at all (bound_of at
    the family-wise ALPHA as for one series), at the runs' repeats, and the fewest repeats per run (of
    BOUND_REPEATS) at which the bound reaches POWER for `step` (None: not within them). Beside it the watch's
    own critical t at TYPICAL_SERIES runs (its search's share of ALPHA over the series checked and the splits tried,
    N − 2 degrees of freedom), the hurdle its t-test adds to the bound's 2.33, and that of its newest runs' test."""
    from brokerbench.reports import changes, stats

    family = sum(len(c["metrics"]) for c in model["configurations"].values())
    splits = TYPICAL_SERIES - 2 * changes.MIN_SEGMENT + 1
    rows = {}
    for key, config in model["configurations"].items():
        m = config["metrics"].get(metric)
        if m is None:
            continue
        if "joint" in m:  # the watch tests the figure net of the host: the bound is of that figure's noise
            m = {**m, "residuals": m["joint"]["residuals"], "sd_run_robust": m["joint"]["sd_run_robust"]}
        now = bound_of(m, model["repeats_per_run"], after, step, changes.ALPHA)
        needed = next((r for r in BOUND_REPEATS if r >= model["repeats_per_run"]
                       and bound_of(m, r, after, step, changes.ALPHA)["power"] >= POWER), None)
        rows[key] = {"cell": config["cell"], **now, "repeats_needed": needed}
    return {"metric": metric, "step": step, "after": after, "repeats_per_run": model["repeats_per_run"],
            "alpha": changes.ALPHA, "power_goal": POWER, "configurations": rows,
            "mean_power": float(np.mean([r["power"] for r in rows.values()])),
            "watch_critical_t": stats.t_quantile(changes.ALPHA * changes.SEARCH_SHARE / (family * splits),
                                                 TYPICAL_SERIES - 2),
            # the newest runs' test: one-sided at the rest of ALPHA over the series, no factor for splits; on its
            # own degrees of freedom, and with the most its noise group's prior may add (changes.variance_prior:
            # PRIOR_SHARE of the group's, the configurations of one broker in the quick suite)
            "newest_critical_t": stats.t_quantile(2 * changes.ALPHA * (1 - changes.SEARCH_SHARE) / family,
                                                  TYPICAL_SERIES - 2),
            "newest_critical_t_prior": stats.t_quantile(
                2 * changes.ALPHA * (1 - changes.SEARCH_SHARE) / family,
                (TYPICAL_SERIES - 2) * (1 + changes.PRIOR_SHARE * _group_size(model))),
            "watch_series": TYPICAL_SERIES, "family": family, "splits": splits}


def _group_size(model: dict) -> int:
    """The configurations of the largest noise group (history.noise_group: those of one broker here)."""
    from brokerbench.reports.history import noise_group

    groups: dict[str, int] = {}
    for key in model["configurations"]:
        group = noise_group(key, "end_to_end_p99_us")
        groups[group] = groups.get(group, 0) + 1
    return max(groups.values(), default=1)


def night_minutes(model: dict, repeats: int) -> float:
    """What a night of the suite at `repeats` repeats per run would take: the real runs' mean wall time scaled by
    the repeats (a run's time is its cells', each repeat a cell: setup and the report are a few seconds of it)."""
    return model["run_wall_s"] * repeats / model["repeats_per_run"] / 60


def run_id_of(schedule: int, night: int) -> str:
    """Run ids that sort as the runs were made (history and the series order runs by id)."""
    return f"s{schedule:04d}n{night:04d}"


def false_alerts(model: dict, nights: int, seed: int, unsustainable_rate: float | None = None,
                 per_schedule: int = NIGHTS_PER_SCHEDULE, baseline: int = 1) -> dict:
    """`nights` nights of A/A schedules of `per_schedule` nights each, after `baseline` runs back to back (night 0):
    the nights with any alert, by the night's place in its schedule (pairwise only, or change points), and the
    alerts by source and metric. Each baseline run after the first is checked too (the schedule's check runs on
    every run it starts): counted as a night."""
    rng = np.random.default_rng(seed)
    nights_done, alerting, by_source, by_metric, by_phase = 0, 0, {}, {}, {}
    schedule = 0
    while nights_done < nights:
        figures, ids = {}, []
        for night in range(min(per_schedule + baseline - 1, nights - nights_done + 1)):
            run_id = run_id_of(schedule, night)
            figures[run_id] = draw_run(model, rng, unsustainable_rate=unsustainable_rate)
            ids.append(run_id)
            if night == 0:
                continue  # the first run has nothing to be checked against: not a night of the check
            alerts = night_alerts(figures, ids)
            nights_done += 1
            phase = "series" if len(ids) >= _min_series() else "pairwise"
            by_phase.setdefault(phase, [0, 0])[0] += 1
            if alerts:
                alerting += 1
                by_phase[phase][1] += 1
            for a in alerts:
                by_source[a["source"]] = by_source.get(a["source"], 0) + 1
                by_metric[a["metric"]] = by_metric.get(a["metric"], 0) + 1
            if nights_done >= nights:
                break
        schedule += 1
    return {"nights": nights_done, "schedules": schedule, "nights_with_an_alert": alerting,
            "rate": alerting / max(1, nights_done), "alerts_by_source": by_source, "alerts_by_metric": by_metric,
            "by_phase": {k: {"nights": v[0], "with_an_alert": v[1]} for k, v in by_phase.items()},
            "unsustainable_rate": model["unsustainable_rate"] if unsustainable_rate is None else unsustainable_rate}


def _min_series() -> int:
    from brokerbench.reports import changes

    return changes.MIN_SERIES


def detection(model: dict, kind: str, trials: int, seed: int, per_schedule: int = NIGHTS_PER_SCHEDULE,
              factor: float | None = None, baseline: int = 1) -> dict:
    """`trials` schedules with a step (STEPS[kind], or its metric times `factor`) in one random configuration from a
    random night on (1 to per_schedule − 2; night 0 is the schedule's `baseline` runs back to back): told when an
    alert on that configuration and metric comes on the step's night or the next and places the change within
    PLACEMENT runs of it. Alerts on anything else in those nights are counted apart. `by_start` is by night."""
    metric, factor = STEPS[kind][0], factor or STEPS[kind][1]
    rng = np.random.default_rng(seed)
    keys = [k for k, c in model["configurations"].items() if metric in c["metrics"]]
    rows = []
    for trial in range(trials):
        key, start = keys[rng.integers(len(keys))], int(rng.integers(1, per_schedule - 1))
        stepped = start + baseline - 1  # the run the step begins with
        figures, ids, found, other = {}, [], None, 0
        for run in range(stepped + WITHIN_NIGHTS):
            run_id = run_id_of(trial, run)
            figures[run_id] = draw_run(model, rng, (key, metric, factor) if run >= stepped else None)
            ids.append(run_id)
            if run < stepped:
                continue
            for a in night_alerts(figures, ids):
                right = a["key"] == key and a["metric"] == metric
                placed = abs(a["at"] + max(0, len(ids) - _series_runs()) - stepped) <= PLACEMENT
                if right and placed and found is None:
                    found = {"night": run - stepped, "source": a["source"], "found_by": a.get("found_by")}
                elif not right:
                    other += 1
        rows.append({"key": key, "start": start, "run": stepped, "told": found is not None,
                     "night": None if found is None else found["night"],
                     "source": None if found is None else found["source"],
                     "found_by": None if found is None else found["found_by"], "other_alerts": other})
    established = [r for r in rows if r["run"] >= _min_series()]
    return {"kind": kind, "metric": metric, "factor": factor, "trials": trials, "baseline_runs": baseline,
            "told": sum(r["told"] for r in rows), "rate": sum(r["told"] for r in rows) / max(1, trials),
            "established_trials": len(established), "established_told": sum(r["told"] for r in established),
            "established_rate": sum(r["told"] for r in established) / max(1, len(established)),
            "by_source": {s: sum(r["source"] == s for r in rows) for s in ("pairwise", "change_point")},
            # change points: by the search over every split, or by the test of the newest runs (reports.changes)
            "by_found": {f: sum(r["found_by"] == f for r in rows) for f in ("search", "newest")},
            "other_alerts": sum(r["other_alerts"] for r in rows),
            "by_start": {str(s): [sum(r["told"] for r in rows if r["start"] == s),
                                  sum(r["start"] == s for r in rows)] for s in sorted({r["start"] for r in rows})},
            "by_configuration": {k: [sum(r["told"] for r in rows if r["key"] == k), sum(r["key"] == k for r in rows)]
                                 for k in keys}}


def _series_runs() -> int:
    from brokerbench.reports import history

    return history.SERIES_RUNS


def _part(task: tuple) -> object:
    """One part of the simulation (a process of its own when simulate runs them in parallel)."""
    name, args, kwargs = task
    return {"false_alerts": false_alerts, "detection": detection, "power_table": power_table}[name](*args, **kwargs)


def simulate(model: dict, nights: int, trials: int, seed: int = 0, processes: int = 1) -> dict:
    """The simulation's parts, each seeded on its own, so that running them in `processes` processes at once gives
    the same figures as one after another."""
    started = time.monotonic()
    base = {"baseline": baseline_runs()}  # the schedule's: its first night is that many runs back to back
    tasks = {"false_alerts": ("false_alerts", (model, nights, seed), base)}
    for i, kind in enumerate(STEPS):
        tasks[f"detection {kind}"] = ("detection", (model, kind, trials, seed + 1 + i), base)
    # the same step on schedules without a baseline (one run the first night): what the baseline is for
    tasks["detection p99 without"] = ("detection", (model, "p99", trials, seed + 1), {"baseline": 1})
    # what the p99 step would have to be to be told (fewer trials: a sweep, not the check's figure)
    for i, f in enumerate(P99_SWEEP):
        tasks[f"p99 sweep {i}"] = ("detection", (model, "p99", max(1, trials // 3), seed + 20 + i),
                                   {"factor": f, **base})
    # the +30% p99 step with more repeats per run drawn from the same noise (longer cells would do the same)
    # At more repeats the figures' checks only: the flips' exact test (on the repeats' verdicts, not the figures)
    # grows with the repeats to seconds a night, and its false alerts are the quick suite's rows'.
    for i, r in enumerate(REPEATS_SWEEP):
        sized = {**model, "repeats_per_run": r, "judged": False}
        tasks[f"repeats sweep {i}"] = ("detection", (sized, "p99", max(1, trials // 3), seed + 30 + i), base)
        # the same suite's A/A nights: a run's figure is a median from changes.MEDIAN_REPEATS repeats on
        tasks[f"repeats false {i}"] = ("false_alerts", (sized, nights, seed + 40 + i), base)
    if model["unsustainable_rate"] < STRESS_UNSUSTAINABLE:
        tasks["false_alerts_stressed"] = ("false_alerts", (model, nights, seed + 10, STRESS_UNSUSTAINABLE), base)
    tasks["power"] = ("power_table", (model,), {})
    if processes > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(processes) as pool:
            done = dict(zip(tasks, pool.map(_part, tasks.values())))
    else:
        done = {name: _part(task) for name, task in tasks.items()}
    out = {"nights_per_schedule": NIGHTS_PER_SCHEDULE, "shape": model.get("shape", "empirical"),
           "baseline_runs": base["baseline"], "false_alerts": done["false_alerts"],
           "detection": {kind: done[f"detection {kind}"] for kind in STEPS},
           "detection_without_baseline": {"p99": done["detection p99 without"]},
           "p99_sweep": [done[f"p99 sweep {i}"] for i in range(len(P99_SWEEP))],
           "repeats_sweep": [{**done[f"repeats sweep {i}"], "repeats_per_run": r,
                              "false_alerts": done[f"repeats false {i}"], "night_minutes": night_minutes(model, r)}
                             for i, r in enumerate(REPEATS_SWEEP)],
           "night_minutes": night_minutes(model, model["repeats_per_run"]),
           "power": done["power"]}
    if "false_alerts_stressed" in done:
        out["false_alerts_stressed"] = done["false_alerts_stressed"]
    out["wall_s"] = round(time.monotonic() - started, 1)
    out["processes"] = processes
    return out


# -- the real runs ------------------------------------------------------------------------------------------------
def run_once(out_dir: Path, env: dict) -> tuple[str | None, float, int, str]:
    before = {p.name for p in out_dir.iterdir()} if out_dir.exists() else set()
    started = time.monotonic()
    done = subprocess.run([str(BIN), "run", "--suite", SUITE, "--out", str(out_dir), "--no-open"], env=env,
                          capture_output=True, text=True, cwd=ROOT)
    wall = time.monotonic() - started
    new = sorted(p.name for p in out_dir.iterdir() if p.name not in before and (p / "results.json").is_file()) \
        if out_dir.exists() else []
    return (new[-1] if new else None), wall, done.returncode, (done.stderr or done.stdout)[-2000:]


def checked_run(store, run_id: str, out_dir: Path) -> dict:
    """The scheduled check of one stored run, made again as CheckRegression makes it, and what it counts."""
    from brokerbench.events import read_report_events
    from brokerbench.reports import history, regression
    from brokerbench.reports.results import build_results

    events = read_report_events(store, run_id)
    checked = history.watch(store, run_id, record=False)
    results = build_results(events)
    figures = regression.run_figures(events)
    recorded = out_dir / run_id / "regression.json"
    workflow = json.loads(recorded.read_text()) if recorded.is_file() else None
    return {
        "run_id": run_id,
        "alerts": [{k: a.get(k) for k in ALERT_FIELDS} for a in checked["regressions"]],
        "failed_cells": sum(c["status"] != "completed" for c in results["cells"]),
        "history_runs": len(checked.get("history_run_ids") or []),
        "series_runs": len(checked["changes"]["runs"]),
        "series": len(checked["changes"]["series"]),
        "series_searched": sum(s["checked"] for s in checked["changes"]["series"]),
        "change_points_shown": sum(len(s["change_points"]) for s in checked["changes"]["series"]),
        "verdicts": {name: sum(v["verdict"] == name for v in checked["verdicts"])
                     for name in ("regression", "improvement", "unstable", "unchanged")},
        "flips": {name: sum(v["verdict"] == name for v in checked["verdicts"] if v["metric"] == "sustainability")
                  for name in ("regression", "improvement", "unstable", "unchanged")},
        "workflow_alerts": None if workflow is None else len(workflow.get("regressions", [])),
        "figures": kept_figures(figures),
        "merged": merged_p99s(events, results["cells"]),
    }


def real_part(runs: int, home: Path, previous: list[dict], reuse: bool,
              budget_s: float | None) -> tuple[list[dict], dict]:
    os.environ["BROKERBENCH_HOME"] = str(home)
    env = {**os.environ, "BROKERBENCH_HOME": str(home)}
    from brokerbench.cli.common import open_store
    from brokerbench.local.stack import LocalStack

    stack = LocalStack()
    started_stack = not stack.is_up()
    up_started = time.monotonic()
    endpoints = stack.up(["kafka", "redis", "dynamodb"], log=log)
    store = open_store(endpoints)
    out_dir = home / "reports"
    out_dir.mkdir(parents=True, exist_ok=True)
    made = [{k: r[k] for k in ("run_id", "wall_s", "exit_code")} for r in previous] if reuse else []
    stopped = False
    try:
        while len(made) < runs:
            longest = max([r["wall_s"] for r in made[-3:]] or [0.0])
            if budget_s is not None and time.monotonic() - up_started + longest > budget_s:
                stopped = True
                log(f"stopping at {len(made)} runs: another ({longest:.0f} s) would pass the budget ({budget_s:.0f} s)")
                break
            run_id, wall, code, tail = run_once(out_dir, env)
            log(f"run {len(made) + 1}/{runs}: {run_id} exit {code} in {wall:.0f} s")
            if run_id is None:
                raise SystemExit(f"the run did not start: {tail}")
            made.append({"run_id": run_id, "wall_s": round(wall, 1), "exit_code": code})
        checked = []
        for r in made:
            check = {**r, **checked_run(store, r["run_id"], out_dir)}
            log(f"checked {r['run_id']}: {len(check['alerts'])} alerts, {check['failed_cells']} failed cells, "
                f"verdicts {check['verdicts']}")
            checked.append(check)
    finally:
        if started_stack:
            stack.down(log=log)
    return checked, {"wall_s": round(time.monotonic() - up_started, 1), "started_stack": started_stack,
                     "runs_asked": runs, "stopped_by_budget": stopped, "budget_s": budget_s}


def pure_check_agrees(checked: list[dict]) -> list[bool]:
    """Per real run: whether the simulation's check (night_alerts, on the recorded figures) raises the alerts
    history.watch raised on the stored run (the same configurations, metrics and sources)."""
    figures = {r["run_id"]: r["figures"] for r in checked}
    ids = [r["run_id"] for r in checked]
    return [sorted((a["key"], a["metric"], a["source"]) for a in night_alerts(figures, ids[:i + 1]))
            == sorted((a["key"], a["metric"], a["source"]) for a in r["alerts"]) for i, r in enumerate(checked)]


def summary(checked: list[dict]) -> dict:
    alerts = [a for r in checked for a in r["alerts"]]
    return {"runs": len(checked), "alerts": len(alerts),
            "runs_with_an_alert": sum(bool(r["alerts"]) for r in checked),
            "runs_that_notify": sum(bool(r["alerts"] or r["failed_cells"]) for r in checked),
            "failed_cells": sum(r["failed_cells"] for r in checked),
            "alerts_by_source": {s: sum(a["source"] == s for a in alerts) for s in ("pairwise", "change_point")},
            "flip_alerts": sum(a["metric"] == "sustainability" for a in alerts),
            "workflow_alerts": sum(r["workflow_alerts"] or 0 for r in checked),
            "verdicts": {k: sum(r["verdicts"][k] for r in checked) for k in checked[0]["verdicts"]},
            "flips": {k: sum(r["flips"][k] for r in checked) for k in checked[0]["flips"]}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=RUNS, help=f"quick-suite runs (default {RUNS})")
    parser.add_argument("--home", default=os.environ.get("BROKERBENCH_HOME", "/tmp/bb-aas"))
    parser.add_argument("--nights", type=int, default=NIGHTS)
    parser.add_argument("--trials", type=int, default=TRIALS, help="simulated steps of each kind")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--processes", type=int, default=1, help="the simulation's parts in this many processes "
                        "at once (the same figures)")
    parser.add_argument("--budget-s", type=float, help="start no run that would end after this many seconds "
                        "(by the longest of the last 3 runs): as many runs as fit, the number recorded")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "aa_schedule.json"))
    parser.add_argument("--reuse", action="store_true", help="check the recorded runs again; run up to --runs")
    parser.add_argument("--simulate-only", action="store_true", help="the simulation again from --out's figures")
    parser.add_argument("--bound-only", action="store_true", help="from --out's figures, the noise model and the "
                        "bound (power_table) again; the recorded simulation is kept (minutes less on a busy host)")
    args = parser.parse_args()
    from brokerbench.environment import collect
    from brokerbench.reports import changes, history, regression

    out = Path(args.out)
    only = args.simulate_only or args.bound_only
    previous = json.loads(out.read_text()) if (args.reuse or only) and out.is_file() else None
    started = time.monotonic()
    if only:
        if previous is None:
            raise SystemExit(f"--simulate-only and --bound-only need the runs recorded in {out}")
        checked, stack = previous["real"]["runs"], previous["real"]["stack"]
    else:
        checked, stack = real_part(args.runs, Path(args.home), previous["real"]["runs"] if previous else [],
                                   args.reuse, args.budget_s)
    agree = pure_check_agrees(checked)
    # the real runs checked again by this build's rules, from their recorded figures (the check history.watch makes,
    # as night_alerts makes it; it agreed with history.watch on the stored runs when they were recorded)
    figures, ids = {r["run_id"]: r["figures"] for r in checked}, [r["run_id"] for r in checked]
    rechecked = [len(night_alerts(figures, ids[:i + 1])) for i in range(len(ids))]
    log(f"the real runs checked again by this build's rules: {sum(rechecked)} alerts ({rechecked})")
    log(f"the simulation's check of the real runs agrees with history.watch on {sum(agree)} of {len(agree)} runs")
    model = noise_model([r["figures"] for r in checked])
    model["run_wall_s"] = float(np.mean([r["wall_s"] for r in checked]))
    model["figure_spread"] = figure_spread(checked)
    log(f"noise: {model['quiet_repeats']} quiet repeats, {model['unsustainable']} unsustainable, "
        f"{model['inconclusive']} inconclusive, {model['busy']} busy of {model['repeats']}")
    if args.bound_only:
        simulated = {**previous["simulated"], "power": power_table(model)}
    else:
        simulated = simulate(model, args.nights, args.trials, args.seed, args.processes)
    document = {
        "bench": "aa_schedule", "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": {k: v for k, v in collect()["host"].items() if k != "hostname"},
        "suite": SUITE, "spec": json.loads(SUITE_FILE.read_text()),
        "rules": {"pairwise_alpha": regression.ALPHA, "change_alpha": changes.ALPHA,
                                  "min_series": changes.MIN_SERIES, "min_history": regression.MIN_HISTORY,
                                  "series_runs": history.SERIES_RUNS, "history_runs": regression.HISTORY_RUNS,
                                  "min_effect": changes.MIN_EFFECT, "search_share": changes.SEARCH_SHARE,
                                  "median_repeats": changes.MEDIAN_REPEATS, "newest_min": changes.NEWEST_MIN,
                                  "prior_share": changes.PRIOR_SHARE},
        "real": {"runs": checked, "stack": stack, "summary": summary(checked), "pure_check_agrees": agree,
                 "rechecked_alerts": rechecked,
                 "runs_wall_s": round(sum(r["wall_s"] for r in checked), 1)},
        "noise": model, "simulated": simulated, "this_invocation_wall_s": round(time.monotonic() - started, 1)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=2, default=lambda v: v.item() if hasattr(v, "item") else str(v)))
    s, f = document["real"]["summary"], simulated["false_alerts"]
    log(f"real: {s['alerts']} alerts over {s['runs']} runs ({s['runs_that_notify']} runs would notify)")
    log(f"simulated: {f['nights_with_an_alert']} of {f['nights']} nights with an alert ({f['rate']:.1%})")
    for kind, d in simulated["detection"].items():
        log(f"step {kind}: told {d['told']} of {d['trials']} ({d['rate']:.0%}); from run {_min_series()} on "
            f"{d['established_told']} of {d['established_trials']} ({d['established_rate']:.0%})")
    for kind, d in simulated.get("detection_without_baseline", {}).items():
        log(f"step {kind} without the schedule's {simulated['baseline_runs']} baseline runs: told {d['told']} of "
            f"{d['trials']} ({d['rate']:.0%})")
    for d in simulated.get("p99_sweep", []) + simulated.get("repeats_sweep", []):
        repeats = d.get("repeats_per_run", model["repeats_per_run"])
        log(f"p99 x {d['factor']:g} at {repeats} repeats per run: told "
            f"{d['told']} of {d['trials']} ({d['rate']:.0%}); from run {_min_series()} on "
            f"{d['established_rate']:.0%}"
            + (f"; A/A nights with an alert {d['false_alerts']['rate']:.1%}; a night {d['night_minutes']:.0f} min"
               if "false_alerts" in d else ""))
    p = simulated["power"]
    log(f"bound (the step's run and the level before it known, one series at a one-sided {p['alpha']:g}): "
        f"+{p['step'] - 1:.0%} p99 within {p['after']} nights told at most {p['mean_power']:.0%} on average; the "
        f"watch's own critical t at {p['watch_series']} runs is {p['watch_critical_t']:.1f}")
    for row in p["configurations"].values():
        log(f"  {row['cell']}: at most {row['power']:.0%}; smallest step told at {POWER:.0%}: "
            f"x{row['smallest_step']:.2f}; repeats per run for +{p['step'] - 1:.0%}: "
            f"{row['repeats_needed'] or 'over ' + str(BOUND_REPEATS[-1])}")
    log(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
