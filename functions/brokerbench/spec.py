"""Run requests: load, validate (every problem at once), fill defaults, expand into cells."""

from __future__ import annotations

import copy
import json
import math
import random
import re
import secrets
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from jsonschema import Draft202012Validator

from . import deployment, faults, verdict
from .codecs import get_codec, prebuilt
from .paths import SCHEMAS_DIR, SUITES_DIR
from .records import smallest_size
from .registry import families, for_target, plugins


@dataclass(frozen=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '(document)'}: {self.message}"


class SpecError(ValueError):
    """The run request is invalid; `problems` lists each one with its place in the document."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("invalid run request:\n" + "\n".join(f"  - {p}" for p in problems))


def lanes(cell: dict) -> int:
    """How many lanes a cell's messages spread over: its partitions times client.topics (1 unless the run
    asks for more, which only Kafka's driver serves: lane i is then partition i // topics of topic
    i % topics). Message seq goes to lane seq % lanes, and consumers split the lanes between them."""
    return int(cell.get("partitions", 1)) * int((cell.get("client") or {}).get("topics", 1))


@cache
def request_schema() -> dict:
    return json.loads((SCHEMAS_DIR / "run-request.schema.json").read_text())


def _path(parts) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _message(error) -> str:
    if error.validator in ("oneOf", "anyOf") and error.context:
        # "0 is not valid under any of the given schemas" says nothing; list what each branch wanted.
        return f"{error.instance!r} is not accepted: " + "; or ".join(dict.fromkeys(e.message for e in error.context))
    return error.message


def _defaults(doc: dict, schema: dict) -> dict:
    out = copy.deepcopy(doc)
    for name, prop in schema.get("properties", {}).items():
        if name not in out and "default" in prop:
            out[name] = copy.deepcopy(prop["default"])
        if prop.get("type") == "object" and isinstance(out.get(name), dict) and "properties" in prop:
            out[name] = _defaults(out[name], prop)
    return out


def smallest_sizes(formats, size_basis: str) -> dict[str, int]:
    """Smallest reachable message size per format under the size basis."""
    def length_of(fmt):
        codec = get_codec(fmt)
        return lambda record: len(codec.encode(codec.prepare(record)))

    out = {}
    for fmt in formats:
        if prebuilt(fmt):
            continue
        out[fmt] = smallest_size(length_of("json" if size_basis == "record" else fmt))
    return out


def _unknown_brokers(doc: dict) -> list[Problem]:
    """Brokers that are neither registered nor a named target (the schema accepts any well-formed name)."""
    brokers, targets = doc.get("brokers"), doc.get("targets")
    if not isinstance(brokers, list):
        return []
    targets = targets if isinstance(targets, dict) else {}
    return [Problem(f"brokers[{i}]", f"{name!r} is not one of the registered brokers ({', '.join(plugins())}) "
                                     f"and not a target in targets with a driver")
            for i, name in enumerate(brokers)
            if isinstance(name, str) and name not in plugins() and not isinstance(targets.get(name), dict)]


def _form_problems(doc: dict) -> list[Problem]:
    """Exactly one of the two forms of the size x rate part: sizes and rates (every size at every rate), or
    size_rates (each size at its own rates)."""
    if "size_rates" in doc:
        both = [field for field in ("sizes", "rates") if field in doc]
        return [Problem("size_rates", f"give either size_rates or sizes and rates, not both ({' and '.join(both)} "
                                      f"{'is' if len(both) == 1 else 'are'} given too)")] if both else []
    # The message starts as the schema's own for a missing property (the API names the field from it).
    return [Problem(field, f"'{field}' is a required property (with {other}), unless size_rates pairs each size "
                           f"with its own rates")
            for field, other in (("sizes", "rates"), ("rates", "sizes")) if field not in doc]


def size_rates(spec: dict) -> list[tuple[int, list]]:
    """The (size, its rates) pairs a request runs, in matrix order: size_rates as given, or every size of
    sizes with every rate of rates."""
    if spec.get("size_rates") is not None:
        return [(pair["size"], list(pair["rates"])) for pair in spec["size_rates"]]
    return [(size, list(spec["rates"])) for size in spec["sizes"]]


def _placed_sizes_and_rates(spec: dict) -> tuple[list[tuple[int, str]], list[tuple[object, str]]]:
    """Each size and each rate with its place in the document, once each (for the per-size and per-rate checks)."""
    if spec.get("size_rates") is not None:
        pairs = spec["size_rates"]
        return ([(pair["size"], f"size_rates[{i}].size") for i, pair in enumerate(pairs)],
                [(rate, f"size_rates[{i}].rates[{j}]") for i, pair in enumerate(pairs)
                 for j, rate in enumerate(pair["rates"])])
    return ([(size, f"sizes[{i}]") for i, size in enumerate(spec["sizes"])],
            [(rate, f"rates[{j}]") for j, rate in enumerate(spec["rates"])])


def _repeated_sizes(spec: dict) -> list[Problem]:
    problems, first = [], {}
    for i, pair in enumerate(spec.get("size_rates") or []):
        if pair["size"] in first:
            problems.append(Problem(f"size_rates[{i}].size", f"{pair['size']} B is already paired in "
                                                             f"size_rates[{first[pair['size']]}]: give each size once, "
                                                             f"with all its rates"))
        first.setdefault(pair["size"], i)
    return problems


def _unsupported_modes(spec: dict) -> list[Problem]:
    problems = []
    for broker in spec["brokers"]:
        supported = for_target(broker, spec["targets"].get(broker)).capabilities.modes
        problems += [Problem(f"modes[{i}]", f"{broker} does not support mode {mode!r} (it supports "
                                            f"{', '.join(supported)})")
                     for i, mode in enumerate(spec["modes"]) if mode not in supported]
    return problems


# Client settings that change what a cell sends, not only how a client sends it, with the value that changes
# nothing: any other value needs every broker of the run to read the setting, or its rows would not measure
# the same workload.
WORKLOAD_SETTINGS = {"topics": 1}


def _unsupported_client_settings(spec: dict) -> list[Problem]:
    problems = []
    for name, neutral in WORKLOAD_SETTINGS.items():
        value = spec["client"].get(name, neutral)
        if value == neutral:
            continue
        unread = [broker for broker in spec["brokers"]
                  if name not in for_target(broker, spec["targets"].get(broker)).settings.client]
        if unread:
            readers = [n for n, plugin in plugins().items() if name in plugin.settings.client]
            drivers = [f for f, plugin in families().items() if name in plugin.settings.client]
            problems.append(Problem(f"client.{name}", f"{value} is not supported by {', '.join(unread)} (only "
                                                      f"{', '.join(readers)} and targets with driver "
                                                      f"{' or '.join(drivers)} read client.{name}); leave it at "
                                                      f"{neutral} or leave {', '.join(unread)} out of this run"))
    return problems


def _shape_problems(spec: dict, rates: list[tuple[object, str]]) -> list[Problem]:
    """A startup backlog or bursts need a numeric rate and a duration; a burst's period a whole baseline."""
    shapes = [name for name in ("backlog", "burst") if spec.get(name)]
    if not shapes:
        return []
    named = " and ".join(shapes)
    problems = []
    if spec["messages"] is not None:
        problems.append(Problem("messages", f"{named} runs for duration_s: messages must be null"))
    if spec.get("backlog") and spec["consumers"] < 1:
        problems.append(Problem("backlog", "a startup backlog is read by consumers: consumers must be at least 1"))
    burst = spec.get("burst")
    if burst and burst["over_s"] > burst["every_s"]:
        problems.append(Problem("burst.over_s", f"{burst['over_s']} s is longer than the period every_s "
                                                f"({burst['every_s']} s)"))
    for rate, place in rates:
        if rate in ("max", "sustainable"):
            problems.append(Problem(place, f"{named} needs a number of msgs/s here, not {rate!r}"))
        elif burst:
            baseline = rate / spec["producers"] * burst["every_s"]
            if abs(baseline - round(baseline)) > 1e-6:
                problems.append(Problem("burst.every_s", f"{rate} msgs/s / {spec['producers']} producers x "
                                                         f"{burst['every_s']} s is {baseline:g} messages: each period's "
                                                         "baseline must be a whole number of messages per producer"))
    return problems


def _fault_problems(spec: dict) -> list[Problem]:
    """The faults' rules (brokerbench.faults): each broker needs a local cluster the run starts, of 2 nodes or more
    (a network fault: a local service whose clients can be routed through proxies, `proxied_sizes`)."""
    clustered = {name: p.cluster is not None for name, p in plugins().items()}
    proxied = {name: tuple(getattr(p.local, "proxied_sizes", ())) for name, p in plugins().items()}
    targets = spec.get("targets") or {}
    local = {b: b not in targets for b in spec["brokers"]}  # a named target is an existing endpoint
    return [Problem(place, message) for place, message in faults.problems(spec, clustered, local, proxied)]


def kept_hours(spec: dict) -> float | None:
    """How many hours keep_targets keeps the run's targets from their creation: None when it does not keep them,
    the deployment's default for true (deployment.keep_targets_hours), else the hours asked for."""
    keep = spec.get("keep_targets")
    if keep is True:
        return deployment.keep_targets_hours()
    if keep is False or keep is None:
        return None
    return float(keep)


def _keep_problems(spec: dict) -> list[Problem]:
    """keep_targets within the deployment's bound: a kept target bills every hour until it is deleted."""
    hours, most = kept_hours(spec), deployment.keep_targets_max_hours()
    if hours is not None and hours > most:
        return [Problem("keep_targets", f"{hours:g} hours is more than this deployment keeps targets for: at most "
                                        f"{most:g} hours (the deployer's -c brokerbench:keepTargetsMaxHours)")]
    return []


def validate(doc) -> dict:
    """The request with every default filled in, or SpecError listing every problem."""
    if not isinstance(doc, dict):
        raise SpecError([Problem("", "a run request is a JSON object")])
    validator = Draft202012Validator(request_schema())
    problems = [
        Problem(_path(error.absolute_path), _message(error))
        for error in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    ]
    reported = {problem.path for problem in problems}
    problems += [problem for problem in _unknown_brokers(doc) if problem.path not in reported]
    problems += _form_problems(doc)
    if problems:
        raise SpecError(problems)
    spec = _defaults(doc, request_schema())
    problems += _unsupported_modes(spec)
    problems += _unsupported_client_settings(spec)
    problems += _repeated_sizes(spec)
    sizes, rates = _placed_sizes_and_rates(spec)
    minimums = smallest_sizes(spec["formats"], spec["size_basis"])
    for size, place in sizes:
        too_small = {fmt: low for fmt, low in minimums.items() if size < low * 0.99}
        if too_small:
            lows = ", ".join(f"{fmt} needs at least {low} B" for fmt, low in too_small.items())
            problems.append(Problem(place, f"{size} B is below the smallest benchmark record ({lows})"))
    if spec["consumers"] > lanes(spec):  # with client.topics, every topic's partitions count
        spread = f" x client.topics {spec['client']['topics']}" if spec["client"].get("topics", 1) > 1 else ""
        problems.append(Problem("consumers", f"{spec['consumers']} consumers need at least as many partitions "
                                             f"(partitions is {spec['partitions']}{spread})"))
    for rate, place in rates:
        if rate not in ("max", "sustainable") and rate < spec["producers"]:
            problems.append(Problem(place, f"{rate} msgs/s is below one message per second per producer "
                                           f"({spec['producers']} producers)"))
    if any(rate == "sustainable" for rate, _ in rates) and spec["duration_s"] < verdict.MIN_INTERVALS:
        # Each step is judged on its one-second intervals: a shorter one is inconclusive, and a search of such steps
        # can only shrink its rate until it gives up.
        problems.append(Problem("duration_s", f"{spec['duration_s']:g} s is too short for a sustainable-rate search: "
                                              f"each step is judged on at least {verdict.MIN_INTERVALS} one-second "
                                              f"intervals, so duration_s must be at least {verdict.MIN_INTERVALS}"))
    if spec.get("burst"):
        spec["burst"] = {"over_s": 0, **spec["burst"]}
    problems += _shape_problems(spec, rates)
    problems += _fault_problems(spec)
    problems += _keep_problems(spec)
    if problems:
        raise SpecError(problems)
    if spec["order"] == "random" and spec.get("order_seed") is None:
        # Chosen once, here, and stored with the run (RunRequested's spec): the order can be replayed.
        spec["order_seed"] = secrets.randbelow(2**31)
    return spec


SUITE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


# A suite file is one run request (quick, smoke), or a study: {"description", "study", "notes", "runs": [request,
# ...], "published": {...}}, one run or several (e.g. one per topology). A run leaves out description, study or
# notes to take the study's, so they are stored with every run. `published` is the study's own tables and
# conclusions, for `brokerbench study` (reports/study.py); it is not part of any run.
SUITE_FIELDS = ("description", "study", "notes", "runs", "published")


def load_suite_file(name: str) -> dict:
    """A suite file as written: one run request, or a study of several runs (see suite_runs)."""
    # The name becomes a file name: only plain names, so one cannot reach outside the suites folder.
    if not isinstance(name, str) or not SUITE_NAME.fullmatch(name):
        raise SpecError([Problem("suite", f"{name!r} is not a suite name (lower-case letters, digits, - and _)")])
    path = SUITES_DIR / f"{name}.json"
    if not path.is_file():
        known = ", ".join(all_suite_names()) or "none"
        raise SpecError([Problem("suite", f"no suite named {name!r} (known: {known})")])
    return json.loads(path.read_text())


def _runs_of(name: str, doc: dict) -> list[dict]:
    if "runs" not in doc:
        return [doc]
    runs = doc["runs"]
    extra = sorted(set(doc) - set(SUITE_FIELDS))
    if not isinstance(runs, list) or not runs or not all(isinstance(run, dict) for run in runs) or extra:
        raise SpecError([Problem("suite", f"suite {name!r}: runs must be a non-empty list of run requests, beside "
                                          f"only {', '.join(f for f in SUITE_FIELDS if f != 'runs')}"
                                          + (f" (unexpected: {', '.join(extra)})" if extra else ""))])
    shared = {field: doc[field] for field in SUITE_FIELDS[:3] if field in doc}
    return [{**copy.deepcopy(shared), **copy.deepcopy(run)} for run in runs]


def suite_runs(name: str) -> list[dict]:
    """The run requests of a suite, in the order they run: one for a suite that is one run request."""
    return _runs_of(name, load_suite_file(name))


def load_suite(name: str) -> dict:
    """The run request of a suite that is one run (every suite of suite_names(), and a study of one run);
    a study of several runs is refused, naming its runs (see suite_runs)."""
    runs = suite_runs(name)
    if len(runs) > 1:
        names = ", ".join(str(run.get("name", "?")) for run in runs)
        raise SpecError([Problem("suite", f"suite {name!r} is a study of {len(runs)} runs ({names}), not one run "
                                          f"request: `brokerbench run --suite {name}` runs them one after another")])
    return runs[0]


def suite_request(name: str, run: str | None = None, scale=None) -> dict:
    """The run request of a suite: a plain suite's, or the run named `run` of a study (required when the study has
    more than one run), scaled by `scale` when given. SpecError names `suite`, `run` or `scale`."""
    runs = suite_runs(name)
    names = [str(r.get("name", "?")) for r in runs]
    if run is None:
        if len(runs) > 1:
            raise SpecError([Problem("run", f"suite {name!r} is a study of {len(runs)} runs: name one of them in run "
                                            f"({', '.join(names)}); each starts on its own")])
        request = runs[0]
    elif run not in names:
        raise SpecError([Problem("run", f"suite {name!r} has no run {run!r} (its runs: {', '.join(names)})")])
    else:
        request = runs[names.index(run)]
    if scale is None:
        return request
    if not valid_scale(scale):
        raise SpecError([Problem("scale", f"must be a number above 0 and at most 1, not {scale!r}")])
    return scaled(request, scale)


def all_suite_names() -> list[str]:
    """Every built-in suite, the studies included (`brokerbench suites`, `run --suite`, `validate --suite`)."""
    return sorted(p.stem for p in SUITES_DIR.glob("*.json"))


def suite_names() -> list[str]:
    """The built-in suites that are a plain run request, not a study (what the API and schedules take)."""
    return [name for name in all_suite_names() if "runs" not in load_suite_file(name)]


# -- scale: a study in a few minutes, its matrix unchanged --------------------------------------------------
MIN_SCALED_DURATION_S = 1.0  # at least one one-second interval per cell
ADAPTIVE_WARMUP_EXTRA_S = 10.0  # warmup_max_s null means warmup_s + this (worker/warmup.py DEFAULT_EXTRA_S)


def valid_scale(factor) -> bool:
    return (isinstance(factor, (int, float)) and not isinstance(factor, bool) and math.isfinite(factor)
            and 0 < factor <= 1)


def scaled(request: dict, factor: float) -> dict:
    """The request shortened by `factor` (0 < factor <= 1), its matrix unchanged.

    Multiplied: duration_s (at least 1 s, one interval, unless it was shorter; at least verdict.MIN_INTERVALS
    seconds when a rate is `sustainable`: each step of the search is judged on that many intervals), warmup_s, the adaptive
    warm-up's bound (warmup_max_s, or warmup_s + 10 s when it is null), messages (at least one per
    producer), backlog.messages (at least one per producer) and repeats (rounded up, at least 1); with burst,
    duration_s keeps at least two periods (2 x every_s + over_s); faults come at the same places in the shorter window
    (at_s and a pause's duration_s stretched as duration_s is). Unchanged: brokers, sizes and rates (or size_rates),
    formats, modes, topology, client settings, burst, drain_timeout_s (a bound on waiting for what is still in
    flight, not measured time: shortening it would count slow deliveries as lost) and search. A note
    saying what was scaled is appended to notes. A pure function: the request given is not changed.
    """
    if not valid_scale(factor):
        raise ValueError(f"scale must be a number above 0 and at most 1, not {factor!r}")
    out = copy.deepcopy(request)
    if factor == 1:
        return out
    props = request_schema()["properties"]
    value = lambda field: request.get(field, props[field].get("default"))  # noqa: E731
    changed = {}

    def put(field, new):
        if new != value(field):
            changed[field] = (value(field), new)
        out[field] = new

    duration, warmup = value("duration_s"), value("warmup_s")
    rates = [*request.get("rates", []), *(r for pair in request.get("size_rates", []) for r in pair.get("rates", []))]
    floor = float(verdict.MIN_INTERVALS) if "sustainable" in rates else MIN_SCALED_DURATION_S
    burst = request.get("burst")
    if burst:  # at least two whole periods: a burst to measure after the first
        floor = max(floor, 2 * burst["every_s"] + burst.get("over_s", 0))
    put("duration_s", round(max(min(duration, floor), duration * factor), 3))
    put("warmup_s", round(warmup * factor, 3))
    bound = value("warmup_max_s")
    if value("warmup_until_steady") or bound is not None:
        bound = warmup + ADAPTIVE_WARMUP_EXTRA_S if bound is None else bound
        put("warmup_max_s", max(out["warmup_s"], round(bound * factor, 3)))
    if value("messages") is not None:
        put("messages", max(value("producers"), math.ceil(value("messages") * factor)))
    backlog = request.get("backlog")
    if backlog:
        messages = max(value("producers"), math.ceil(backlog["messages"] * factor))
        changed["backlog.messages"] = (backlog["messages"], messages)
        out["backlog"] = {**backlog, "messages": messages}
    put("repeats", max(1, math.ceil(value("repeats") * factor - 1e-9)))
    if request.get("faults"):  # at the same places in the shorter measured window
        stretch = out["duration_s"] / duration
        out["faults"] = [{**f, **{k: round(f[k] * stretch, 3) for k in ("at_s", "duration_s") if k in f}}
                         for f in request["faults"]]
        times = lambda faults: "at " + ", ".join(f"{f['at_s']:g}" for f in faults) + " s"  # noqa: E731
        changed["faults"] = (times(request["faults"]), times(out["faults"]))
    what = ", ".join(f"{field} {old if old is not None else 'null'} -> {new}" for field, (old, new) in changed.items())
    out["notes"] = [*request.get("notes", []),
                    f"scaled by {factor:g} (--scale {factor:g}): {what or 'nothing to shorten'}; brokers, sizes, "
                    "rates, formats, modes, topology and client settings as in the suite"]
    return out


def load_file(path: str | Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SpecError([Problem("spec", f"file {path} does not exist")]) from None
    except json.JSONDecodeError as exc:
        raise SpecError([Problem("spec", f"{path} is not valid JSON: {exc}")]) from None


def rate_label(rate) -> str:
    return rate if rate in ("max", "sustainable") else f"{rate}mps"


def execution_order(spec: dict, cells_per_repeat: int, repeat: int) -> list[int]:
    """Positions (in matrix order) of one repeat's cells, in the order they run.

    random: a generator seeded from the run's order_seed and the repeat number (a string seed is
    hashed with SHA-512, so the order is the same in every process and Python version 3.2+).
    fixed (and specs stored before `order` existed): the matrix order.
    """
    positions = list(range(cells_per_repeat))
    if spec.get("order", "fixed") == "fixed":
        return positions
    seed = spec.get("order_seed")
    if seed is None:
        raise ValueError("a random cell order needs order_seed: validate() the spec first")
    random.Random(f"{seed}:{repeat}").shuffle(positions)
    return positions


def expand(spec: dict) -> list[dict]:
    """The run's cells in the order they run.

    The matrix is size x rate (sizes x rates, or only the pairs of size_rates) x mode x broker x format, per
    repeat. `index` is a cell's identity (its slot in the matrix, repeats outermost; event sort keys use it),
    `order` its position in the run. Repeats run one after another; inside a repeat the cells are
    shuffled (see execution_order), so no broker or format always goes first or follows the same one.
    """
    matrix = []
    pairs = [(size, rate) for size, rates in size_rates(spec) for rate in rates]
    for repeat in range(spec["repeats"]):
        for size, rate in pairs:
            for mode in spec["modes"]:
                for broker in spec["brokers"]:
                    for fmt in spec["formats"]:
                        matrix.append({
                            "cell_id": f"{broker}.{fmt}.{mode}.{size}B.{rate_label(rate)}.r{repeat}",
                            "index": len(matrix),
                            "broker": broker,
                            "format": fmt,
                            "mode": mode,
                            "size_basis": spec["size_basis"],
                            "size_bytes": size,
                            "rate": rate,
                            "producers": spec["producers"],
                            "consumers": spec["consumers"],
                            "partitions": spec["partitions"],
                            "duration_s": spec["duration_s"],
                            "messages": spec["messages"],
                            "warmup_s": spec["warmup_s"],
                            "warmup_until_steady": spec["warmup_until_steady"],
                            "warmup_max_s": spec["warmup_max_s"],
                            "drain_timeout_s": spec["drain_timeout_s"],
                            "repeat": repeat,
                            "client": spec["client"],
                            **({"search": spec["search"]} if rate == "sustainable" else {}),
                            **{shape: spec[shape] for shape in ("backlog", "burst", "faults") if spec.get(shape)},
                        })
    per_repeat = len(matrix) // spec["repeats"]
    cells = []
    for repeat in range(spec["repeats"]):
        first = repeat * per_repeat
        for position in execution_order(spec, per_repeat, repeat):
            cells.append({**matrix[first + position], "order": len(cells)})
    return cells
