"""Run requests: load, validate (every problem at once), fill defaults, expand into cells."""

from __future__ import annotations

import copy
import json
import random
import re
import secrets
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from jsonschema import Draft202012Validator

from .brokers import for_target, plugins
from .paths import SCHEMAS_DIR, SUITES_DIR


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
    from .codecs import get_codec, prebuilt
    from .records import smallest_size

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


def _unsupported_modes(spec: dict) -> list[Problem]:
    problems = []
    for broker in spec["brokers"]:
        supported = for_target(broker, spec["targets"].get(broker)).capabilities.modes
        problems += [Problem(f"modes[{i}]", f"{broker} does not support mode {mode!r} (it supports "
                                            f"{', '.join(supported)})")
                     for i, mode in enumerate(spec["modes"]) if mode not in supported]
    return problems


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
    if problems:
        raise SpecError(problems)
    spec = _defaults(doc, request_schema())
    problems += _unsupported_modes(spec)
    minimums = smallest_sizes(spec["formats"], spec["size_basis"])
    for i, size in enumerate(spec["sizes"]):
        too_small = {fmt: low for fmt, low in minimums.items() if size < low * 0.99}
        if too_small:
            lows = ", ".join(f"{fmt} needs at least {low} B" for fmt, low in too_small.items())
            problems.append(Problem(f"sizes[{i}]", f"{size} B is below the smallest benchmark record ({lows})"))
    if spec["consumers"] > spec["partitions"]:
        problems.append(Problem("consumers", f"{spec['consumers']} consumers need at least as many partitions "
                                             f"(partitions is {spec['partitions']})"))
    for i, rate in enumerate(spec["rates"]):
        if rate not in ("max", "sustainable") and rate < spec["producers"]:
            problems.append(Problem(f"rates[{i}]", f"{rate} msgs/s is below one message per second per producer "
                                                   f"({spec['producers']} producers)"))
    if problems:
        raise SpecError(problems)
    if spec["order"] == "random" and spec.get("order_seed") is None:
        # Chosen once, here, and stored with the run (RunRequested's spec): the order can be replayed.
        spec["order_seed"] = secrets.randbelow(2**31)
    return spec


SUITE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def load_suite(name: str) -> dict:
    # The name becomes a file name: only plain names, so one cannot reach outside the suites folder.
    if not isinstance(name, str) or not SUITE_NAME.fullmatch(name):
        raise SpecError([Problem("suite", f"{name!r} is not a suite name (lower-case letters, digits, - and _)")])
    path = SUITES_DIR / f"{name}.json"
    if not path.is_file():
        known = ", ".join(suite_names()) or "none"
        raise SpecError([Problem("suite", f"no suite named {name!r} (known: {known})")])
    return json.loads(path.read_text())


def suite_names() -> list[str]:
    return sorted(p.stem for p in SUITES_DIR.glob("*.json"))


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

    `index` is a cell's identity (its slot in the matrix, repeats outermost; event sort keys use it),
    `order` its position in the run. Repeats run one after another; inside a repeat the cells are
    shuffled (see execution_order), so no broker or format always goes first or follows the same one.
    """
    matrix = []
    for repeat in range(spec["repeats"]):
        for size in spec["sizes"]:
            for rate in spec["rates"]:
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
                            })
    per_repeat = len(matrix) // spec["repeats"]
    cells = []
    for repeat in range(spec["repeats"]):
        first = repeat * per_repeat
        for position in execution_order(spec, per_repeat, repeat):
            cells.append({**matrix[first + position], "order": len(cells)})
    return cells
