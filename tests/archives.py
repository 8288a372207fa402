"""Archived runs (`brokerbench study --archive`, `guarantees --archive`): a run's events, one JSON object a line,
gzipped, named <run_id>.jsonl.gz; the pages generated from stored runs are rebuilt from them."""

import gzip
import json
from pathlib import Path


def archives(folder: Path) -> dict[str, Path]:
    """Each archive in `folder` by its run id."""
    return {p.name.removesuffix(".jsonl.gz"): p for p in sorted(folder.glob("*.jsonl.gz"))}


def read_archive(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]
