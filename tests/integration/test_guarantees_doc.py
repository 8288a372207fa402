"""docs/GUARANTEES.md traces to stored runs: every run it names is archived in docs/guarantees/, and the page is
rebuilt, to the byte, from those runs' events put into DynamoDB Local. A stored run whose cell lost acknowledged
messages gives a different page, with the verdict its promise calls for: the rebuild checks the figures and the
verdicts, not the layout alone."""

import gzip
import json
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from archives import archives as archived
from archives import read_archive

from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.reports import guarantees, study

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "GUARANTEES.md"
ARCHIVE = ROOT / "docs" / "guarantees"
RUN_ID = re.compile(r"`(\d{8}T\d{6}Z-[0-9a-f]{6})`")
BIN = Path(sys.executable).parent / "brokerbench"
SUITE = "guarantees"


def archives() -> dict[str, Path]:
    return archived(ARCHIVE)


@pytest.fixture
def fresh_store(endpoints):
    store = DynamoEventStore(f"bb-guarantees-{secrets.token_hex(4)}", endpoint_url=endpoints["dynamodb"]["endpoint_url"])
    store.ensure_table()
    yield store
    store.client.delete_table(TableName=store.table)


def rebuild(store) -> str:
    definition = guarantees.load(SUITE)
    return guarantees.markdown(guarantees.compare(definition, study.find_runs(store, definition, list(archives()))))


def test_every_run_the_page_names_is_archived_and_every_archive_is_named():
    named = set(RUN_ID.findall(DOC.read_text()))
    assert named and named == set(archives())
    for run_id, path in archives().items():
        events = read_archive(path)
        assert {e["run_id"] for e in events} == {run_id}
        assert events[0]["data"]["suite"] == SUITE and any(e["type"] == "RunCompleted" for e in events)


def test_the_page_is_rebuilt_from_the_runs_it_names_and_a_loss_changes_its_verdict(fresh_store, tmp_path):
    for path in archives().values():
        study.import_archive(fresh_store, path)
    assert rebuild(fresh_store) == DOC.read_text()

    # The same runs, but a cell of the run where Kafka promises no loss (acks=all) lost 7 acknowledged messages: the
    # broker kept 7 fewer than the producers were told, and the consumers never had them.
    other = DynamoEventStore(f"bb-guarantees-{secrets.token_hex(4)}", endpoint_url=fresh_store.client.meta.endpoint_url)
    other.ensure_table()
    try:
        changed = None
        for run_id, path in archives().items():
            events = read_archive(path)
            if changed is None and events[0]["data"]["spec"]["name"] == "guarantees-kafka-acks-all":
                completed = next(e for e in events if e["type"] == "CellCompleted")
                _lose(completed["data"], 7)
                changed = tmp_path / path.name
                with gzip.open(changed, "wt") as f:
                    f.writelines(json.dumps(e) + "\n" for e in events)
                path = changed
            study.import_archive(other, path)
        assert changed is not None
        text = rebuild(other)
        broken = [line for line in text.splitlines() if line.startswith("| guarantees-kafka-acks-all")]
        assert broken and "⚠ **BROKEN" in broken[0], broken
        assert "acknowledged messages lost: 7 of" in broken[0]
    finally:
        other.client.delete_table(TableName=other.table)


def _lose(data: dict, lost: int) -> None:
    """A completed cell whose consumers did not receive `lost` acknowledged messages and whose broker no longer holds
    them: fewer received, and the broker's own count that much lower."""
    totals = data["totals"]
    totals["received"] -= lost
    totals["lost"] = (totals.get("lost") or 0) + lost  # the accounting stays whole: sent is unchanged
    if data.get("broker_count"):
        data["broker_count"]["observed"] -= lost
        data["broker_count"]["difference"] -= lost


def test_the_command_writes_the_page_and_exits_1_only_on_a_broken_promise(stack, tmp_path):
    """`brokerbench import` then `brokerbench guarantees --run ...` on the stack's own event store."""
    state = ["--state-dir", str(stack.state_dir)]
    done = subprocess.run([str(BIN), *state, "import", *map(str, archives().values())], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "GUARANTEES.md"
    done = subprocess.run([str(BIN), *state, "guarantees", *[a for r in archives() for a in ("--run", r)],
                           "--out", "docs/GUARANTEES.md"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    promised_lost = "BROKEN" in DOC.read_text()
    assert done.returncode == (1 if promised_lost else 0), done.stderr
    assert (tmp_path / "docs" / "GUARANTEES.md").read_text() == DOC.read_text()
    assert not out.exists()
    bad = subprocess.run([str(BIN), *state, "guarantees", "quick"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "applies no faults" in bad.stderr
