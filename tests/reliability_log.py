"""What the fault and bad-input tests observed, for docs/RELIABILITY.md (`make reliability` writes it).

With BROKERBENCH_RELIABILITY_DIR set, `observe(name, **facts)` writes the facts of one test to NAME.json there,
and `tally(name, key)` counts cases (bad input tried, answers by status class); unset, both do nothing, so the
tests run as they always do.
"""

import json
import os
from pathlib import Path


def _path(name: str) -> Path | None:
    folder = os.environ.get("BROKERBENCH_RELIABILITY_DIR")
    if not folder:
        return None
    Path(folder).mkdir(parents=True, exist_ok=True)
    return Path(folder) / f"{name}.json"


def observe(name: str, **facts) -> None:
    path = _path(name)
    if path is not None:
        path.write_text(json.dumps(facts, indent=2, default=str))


def tally(name: str, key: str, by: int = 1) -> None:
    path = _path(name)
    if path is None:
        return
    counts = json.loads(path.read_text()) if path.is_file() else {}
    counts[key] = counts.get(key, 0) + by
    path.write_text(json.dumps(counts, indent=2))
