"""A suite's runs as series, their change points, and the scheduled check that alerts on them.

The runs: the completed runs of a suite (the suite index of the event store, the suite a schedule runs or an
inline spec's name) up to and including the run checked, the newest SERIES_RUNS of them, oldest first. Runs
are not filtered by their settings: a change of broker version, client setting or host is what a change point
should be explained by, so each alert names what differs between the runs on either side of it.

The check (`watch`) is the pairwise check (`regression.check`) plus the change points (`changes.detect`) over
the series that end with the run checked. Which one raises an alert (a RegressionDetected event, the nightly
notification) depends on the series: a configuration's metric with at least changes.MIN_SERIES runs is judged
by its change points, told once (on the run that made the change an alert, changes.new_alerts); a shorter
series by the pairwise verdict and, from changes.NEWEST_MIN runs on, by the test of its newest runs (its
variance moderated by the other configurations of its noise group: one alert, not two, when both tell it); the
sustainability verdict (a verdict per run, not a figure) by the pairwise verdict. The pairwise verdicts stay in
the check's result and the report either way.
"""

from __future__ import annotations

from urllib.parse import quote

from ..eventdata import given, run_requested
from ..events import EventStore, make_event, planned_cells, read_report_events
from . import changes, regression
from .model import CONFIG_FIELDS
from .rows import ChangePoint, ConfigFigures, Versions, change_point, config_figures, verdict as verdict_row

SERIES_RUNS = 30  # the newest runs a series holds: a month of nightly runs
LISTED = 200  # runs of the suite listed to find them (the newest first)
ENDED = ("completed", "completed_with_failures")


listing_suite = regression.suite_of


def suite_runs(store: EventStore, suite: str, until: str | None = None, limit: int = SERIES_RUNS) -> list[str]:
    """The completed runs of `suite` (up to the run `until`, which is included whatever its status: the check runs
    before its run has ended), the newest `limit`, oldest first."""
    found = [] if until is None else [until]
    for listed in store.list_runs(limit=LISTED, suite=suite):
        run_id = listed["run_id"]
        if len(found) >= limit:
            break
        if until is not None and run_id >= until:
            continue
        ended = [e for e in store.read(run_id, prefix="90#run#end") if e["type"] == "RunCompleted"]
        if ended and ended[0]["data"]["status"] in ENDED:
            found.append(run_id)
    return sorted(found)


def run_facts(events: list[dict]) -> dict:
    """What a point of the series says of its run: when, the code and broker versions, and every setting (the
    targets as TargetsReady found them, the spec's target, client and timing settings, the host kind)."""
    requested = next(e for e in events if e["type"] == "RunRequested")
    spec = requested["data"]["spec"]
    environment = run_requested(events)[1]
    targets = next((e["data"]["targets"] for e in events if e["type"] == "TargetsReady"), {})
    return {"run_id": requested["run_id"], "requested_at": requested["at"],
            "code_version": environment.code_version,
            "brokers": {b: t["broker_version"] for b, t in sorted(targets.items())},  # required (eventdata.Target)
            "settings": {"code_version": environment.code_version, "python": environment.python,
                         "libraries": given(environment.libraries), "targets": targets,
                         "host": regression.host_kind(environment.host),
                         "spec": regression.target_settings(spec)}}


def _flat(value, prefix: str = "") -> dict:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def differences(before: dict, after: dict) -> list[dict]:
    """The settings that differ between two runs (run_facts' `settings`), by dotted name."""
    a, b = _flat(before), _flat(after)
    both = ((name, a.get(name), b.get(name)) for name in sorted(set(a) | set(b)))  # a setting one run has not: None
    return [{"setting": name, "before": x, "after": y} for name, x, y in both if x != y]


def analyse(figures: dict[str, dict], run_ids: list[str], metrics=None) -> list[dict]:
    """Every configuration's series of each metric over `run_ids` (oldest first; `figures` holds each run's
    regression.run_figures), with its change points (changes.detect, one family for all of them)."""
    keys: dict[str, dict] = {}
    for run_id in run_ids:
        for key, entry in figures[run_id].items():
            keys.setdefault(key, entry)
    series = []
    for key, entry in keys.items():
        # the runs that measured the configuration; one whose every repeat ran on a busy host is no point of a series
        measured = [(r, typed) for r in run_ids if key in figures[r]
                    if (typed := config_figures(figures[r][key])).status != "failed" and not _all_busy(typed)]
        for metric in regression.metrics_of(entry):
            if metrics is not None and metric not in metrics:
                continue
            stamped = regression.STAMPED_AT.get(regression.METRICS[metric].field)  # where the latency ends, if one
            points = [{"run_id": r, "repeats": typed.repeats_of(metric), "covariates": typed.covariate_of(metric),
                       "stamps": getattr(typed, stamped[0]) if stamped else None, "priority": typed.priority}
                      for r, typed in measured]
            points = [p for p in points if p["repeats"]]
            if points:
                series.append({"key": key, "cell": entry["cell"], "metric": metric, "group": noise_group(key, metric),
                               "higher_is_better": regression.METRICS[metric].higher_is_better,
                               "run_ids": [p["run_id"] for p in points], "runs": [p["repeats"] for p in points],
                               "covariates": [p["covariates"] for p in points],
                               "stamps": [p["stamps"] for p in points], "stamped": stamped and stamped[0],
                               "priorities": [p["priority"] for p in points]})
    return changes.detect(series)


def noise_group(key: str, metric: str) -> str:
    """The series whose runs are taken to vary alike (changes.detect's group, the prior of their variance): one
    metric of one broker, send mode, rate and client count; the configurations differ only in the format and the
    message size."""
    fields = dict(zip(CONFIG_FIELDS, key.split("|")))
    return "|".join([metric] + [fields.get(f, "") for f in CONFIG_FIELDS if f not in ("format", "size_bytes")])


def all_busy(entry: dict) -> bool:
    """Whether every repeat of a run's configuration (an entry of regression.run_figures) ran on a busy host."""
    return _all_busy(config_figures(entry))


def _all_busy(figures: ConfigFigures) -> bool:
    busy = figures.host_busy
    return busy is not None and len(busy.repeats) >= busy.of


def described(found: list[dict], facts: dict[str, dict]) -> list[dict]:
    """`analyse`'s series as they are shown: each point with its run, figure and repeats, each change point with
    the run it began with, the runs on either side, their versions and the settings that differ."""
    out = []
    for s in found:
        adjusted = s.get("adjustment") is not None
        points = [{"run_id": r, "requested_at": facts[r]["requested_at"], "value": v, "repeats": list(repeats),
                   **({"tested": t} if adjusted else {}),
                   "code_version": facts[r]["code_version"], "brokers": facts[r]["brokers"]}
                  for r, v, t, repeats in zip(s["run_ids"], s["values"], s.get("tested", s["values"]), s["runs"])]
        change_points = []
        for c in s["change_points"]:
            before, began = s["run_ids"][c["index"] - 1], s["run_ids"][c["index"]]
            change_points.append({**c, "began_run_id": began, "before_run_id": before,
                                  "versions": {"before": _versions(facts[before]), "after": _versions(facts[began])},
                                  "differences": differences(facts[before]["settings"], facts[began]["settings"])
                                  + stamp_differences(s, c["index"]) + priority_differences(s, c["index"])})
        out.append({"key": s["key"], "cell": s["cell"], "metric": s["metric"],
                    "higher_is_better": s["higher_is_better"], "checked": s["checked"], "searched": s["searched"],
                    "adjustment": s.get("adjustment"), "points": points,
                    "change_points": change_points})
    return out


def net_of_host_text(adjustment: dict | None) -> str:
    """What an alert adds when its series was taken net of the host (changes.host_adjustment); '' otherwise."""
    if adjustment is None:
        return ""
    return (f"; figures net of the host: each repeat x ({adjustment['reference']:,.0f} µs / its publish delay p99) "
            f"** {adjustment['slope']:.2f}, the producer's lateness taken out")


def stamp_differences(series: dict, index: int) -> list[dict]:
    """Where the series' latency ends, when the run a change point began with stamped it otherwise than the run
    before (brokerbench.figures: at arrival, as the read returned, in a client library's thread): a difference of
    method, named as a setting ("stamps.delivery_stamps"); none for a metric no stamp ends, or where either run
    stored no stamps."""
    stamps = series.get("stamps") or []
    if not series.get("stamped") or len(stamps) <= index:
        return []
    before, after = stamps[index - 1], stamps[index]
    if not before or not after or before == after:
        return []
    return [{"setting": f"stamps.{series['stamped']}", "before": before, "after": after}]


def priority_differences(series: dict, index: int) -> list[dict]:
    """The scheduling priority the series' configuration ran at (figures.priority_text), when the run a change point
    began with ran it otherwise than the run before: named as a setting ("priority"); none where either run stored
    none."""
    priorities = series.get("priorities") or []
    if len(priorities) <= index:
        return []
    before, after = priorities[index - 1], priorities[index]
    if not before or not after or before == after:
        return []
    return [{"setting": "priority", "before": before, "after": after}]


def _versions(facts: dict) -> dict:
    return {"code_version": facts["code_version"], "brokers": facts["brokers"]}


def history(store: EventStore, run_ids: list[str], metrics=None) -> dict:
    """The series of `run_ids` (oldest first) with their change points: what GET /suites/{name}/history shows."""
    events = {r: read_report_events(store, r) for r in run_ids}
    figures = {r: regression.run_figures(e) for r, e in events.items()}
    facts = {r: run_facts(e) for r, e in events.items()}
    return {"runs": [{k: facts[r][k] for k in ("run_id", "requested_at", "code_version", "brokers")}
                     for r in run_ids],
            "series": described(analyse(figures, run_ids, metrics), facts), "method": changes.METHOD}


def broker_changes(versions: Versions) -> list[str]:
    """The brokers whose version differs between the run before a change point and the run it began with:
    'kafka 3.6 → 3.7' (a broker the run before did not have: None →)."""
    before = versions.before.brokers
    return [f"{b} {before.get(b)} → {v}" for b, v in versions.after.brokers.items() if before.get(b) != v]


def alert_text(point: dict | ChangePoint) -> str:
    """One change point as the alert says it."""
    point = change_point(point)
    brokers = ", ".join(broker_changes(point.versions))
    differs = ", ".join(d.setting for d in point.differences if d.setting != "code_version")
    stamped = [d for d in point.differences if d.setting.startswith("stamps.")]
    return (f"{point.change:+.1%} from run {point.began_run_id} on (the geometric mean of "
            f"{point.after_runs} runs against the {point.before_runs} before; change point p={point.p_value:.2g}); "
            + code_text(point.versions)
            + (f"; brokers {brokers}" if brokers else "") + (f"; settings that differ: {differs}" if differs else "")
            + "".join(f"; {regression.stamps_differ_text(d.before, d.after)} (the run before vs the run it began "
                      "with), a change of method, not of the broker" for d in stamped)
            + "; the run before it: " + point.before_run_id)


def code_text(versions: Versions) -> str:
    """The code's version before and after a change point: 'code 1.0 → 1.1', or 'code 1.1 on both sides'."""
    before, after = versions.before.code_version, versions.after.code_version
    return f"code {before} → {after}" if before != after else f"code {after} on both sides"


def change_alerts(figures: dict[str, dict], run_ids: list[str]) -> tuple[list[dict], list[tuple[dict, dict]], set]:
    """What the check of the newest of `run_ids` (oldest first; `figures` holds each run's regression.run_figures)
    takes from the change points: every series (`analyse`), the (series, change point) pairs it alerts on (told
    once: changes.new_alerts against the analysis one run earlier, in the series that end with that run and are
    long enough to search), and the (key, metric) of those searched series, which the change points judge instead
    of the pairwise check. Pure: the scheduled check (`watch`) and its simulation (bench/aa_schedule.py) use it."""
    now = analyse(figures, run_ids)
    before = {(s["key"], s["metric"]): s for s in analyse(figures, run_ids[:-1])}
    told, searched = [], set()
    for s in now:
        if not s["checked"] or s["run_ids"][-1] != run_ids[-1]:
            continue
        alerts = [(s, point) for point in changes.new_alerts(s, before.get((s["key"], s["metric"])))]
        if s["searched"] or alerts:
            searched.add((s["key"], s["metric"]))
        told += alerts
    return now, told, searched


def pairwise_alerts(regressions: list[dict], searched: set) -> list[dict]:
    """The pairwise check's regressions that raise an alert: those of series too short to search (and of the
    sustainability verdict, never a series), marked with their source."""
    return [{**r, "source": "pairwise"} for r in regressions if (r["key"], r["metric"]) not in searched]


def watch(store: EventStore, run_id: str, baseline_id: str | None = None, *, record: bool = True) -> dict:
    """The scheduled check of run `run_id`: the pairwise check and the change points of the suite's series, the
    alerts of both recorded as RegressionDetected events (see the module's docstring for which raises them)."""
    checked = regression.check(store, run_id, baseline_id, record=False)
    events = read_report_events(store, run_id)
    suite = listing_suite(events)
    run_ids = suite_runs(store, suite, until=run_id)
    loaded = {r: (events if r == run_id else read_report_events(store, r)) for r in run_ids}
    figures = {r: regression.run_figures(e) for r, e in loaded.items()}
    facts = {r: run_facts(e) for r, e in loaded.items()}
    found, told, searched = change_alerts(figures, run_ids)
    now = described(found, facts)
    shown = {(s["key"], s["metric"]): s for s in now}
    alerts = []
    for series, told_point in told:
        s = shown[(series["key"], series["metric"])]
        point = next(p for p in s["change_points"] if p["index"] == told_point["index"])
        alerts.append({"cell": s["cell"], "key": s["key"], "cell_id": figures[run_id][s["key"]]["cell_id"],
                       "metric": s["metric"], "verdict": "regression", "source": "change_point",
                       "baseline_median": point["before_mean"], "candidate_median": point["after_mean"],
                       "baseline_mean": point["before_mean"], "candidate_mean": point["after_mean"],
                       "change": point["change"], "p_value": point["p_value"],
                       "began_run_id": point["began_run_id"], "before_run_id": point["before_run_id"],
                       "runs_before": point["before_runs"], "runs_after": point["after_runs"],
                       "versions": point["versions"], "differences": point["differences"],
                       "history": history_link(suite, s["metric"]), "console": console_link(suite, s["metric"]),
                       "why": alert_text(point) + net_of_host_text(s.get("adjustment"))})
    regressions = pairwise_alerts(checked["regressions"], searched) + alerts
    if record and regressions:
        index = {c["cell_id"]: c["index"] for c in planned_cells(events)}
        store.append([make_event(run_id, "RegressionDetected", _event_data(r, checked["baseline_run_id"]),
                                 cell_index=index[r["cell_id"]], key=r["metric"]) for r in regressions])
    return {**checked, "regressions": regressions, "suite": suite,
            "changes": {"runs": [{k: facts[r][k] for k in ("run_id", "requested_at", "code_version", "brokers")}
                                 for r in run_ids],
                        "series": now, "alerts": alerts, "method": changes.METHOD}}


EVENT_FIELDS = ("cell", "cell_id", "metric", "verdict", "source", "baseline_median", "candidate_median",
                "baseline_mean", "candidate_mean", "change", "p_value", "why", "began_run_id", "before_run_id",
                "runs_before", "runs_after", "versions", "differences", "history")


def _event_data(regression_: dict, baseline_id: str | None) -> dict:
    data = {**{k: regression_[k] for k in EVENT_FIELDS if k in regression_}, **regression.event_marks(regression_)}
    # A change point's baseline is the run before it began; a pairwise verdict's, the check's baseline.
    data["baseline_run_id"] = verdict_row(regression_).before_run_id or baseline_id
    return data


def history_link(suite: str, metric: str) -> str:
    """Where the API shows the series an alert is about."""
    return f"/suites/{quote(suite, safe='')}/history?metric={metric}"


def console_link(suite: str, metric: str) -> str:
    """Where the console draws that series (its history page: a route after the console's URL)."""
    return f"#/history?suite={quote(suite, safe='')}&metric={metric}"
