"""docs/STUDIES.md traces to stored runs: every run it names is archived in docs/studies/, and the document is
rebuilt, to the byte, from those runs' events put into DynamoDB Local. A run whose stored figures are changed
gives a different document, so the rebuild is a check of every figure and not of the layout alone."""

import copy
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
from brokerbench.reports import study

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "STUDIES.md"
ARCHIVE = ROOT / "docs" / "studies"
RUN_ID = re.compile(r"`(\d{8}T\d{6}Z-[0-9a-f]{6})`")
BIN = Path(sys.executable).parent / "brokerbench"


def archives() -> dict[str, Path]:
    return archived(ARCHIVE)


@pytest.fixture
def fresh_store(endpoints):
    db = endpoints["dynamodb"]
    store = DynamoEventStore(f"bb-studies-{secrets.token_hex(4)}", endpoint_url=db["endpoint_url"])
    store.ensure_table()
    yield store
    store.client.delete_table(TableName=store.table)


def rebuild(store, run_ids: list[str]) -> str:
    """The document from the runs in `store`: each study from its runs among `run_ids`."""
    by_suite: dict[str, list[str]] = {}
    for run_id in run_ids:
        requested = store.read(run_id, prefix="00#run")[0]
        by_suite.setdefault(requested["data"]["suite"], []).append(run_id)
    comparisons = [study.compare(study.load_study(name), study.find_runs(store, study.load_study(name), by_suite[name]))
                   for name in study.study_names()]
    return study.document(comparisons)


def test_every_run_the_document_names_is_archived_and_every_archive_is_named():
    named = set(RUN_ID.findall(DOC.read_text()))
    assert named, "the document names no run"
    assert named == set(archives())
    for run_id, path in archives().items():
        events = read_archive(path)
        assert {e["run_id"] for e in events} == {run_id}
        assert events[0]["type"] == "RunRequested" and any(e["type"] == "RunCompleted" for e in events)


def test_the_document_is_rebuilt_from_the_runs_it_names(fresh_store):
    for path in archives().values():
        study.import_archive(fresh_store, path)
    text = rebuild(fresh_store, list(archives()))
    assert text == DOC.read_text()
    # importing again changes nothing: an event already stored is never stored twice
    run_id, path = next(iter(archives().items()))
    before = len(fresh_store.read(run_id))
    study.import_archive(fresh_store, path)
    assert len(fresh_store.read(run_id)) == before


def test_a_changed_figure_in_a_stored_run_changes_the_document(fresh_store, tmp_path):
    changed = None
    for run_id, path in archives().items():
        events = read_archive(path)
        if changed is None and events[0]["data"]["spec"].get("name") == "tallberg-throughput":
            for event in events:
                if event["type"] == "CellCompleted":  # every cell of the run delivers twice what it did
                    totals = event["data"]["totals"]
                    for key in ("sent", "acked", "bytes_sent"):
                        totals[key] = totals[key] * 2 if totals.get(key) is not None else None
                    totals.pop("delivered", None)
                    totals.pop("bytes_delivered", None)
            changed = run_id
            target = tmp_path / path.name
            with gzip.open(target, "wt") as f:
                f.writelines(json.dumps(e) + "\n" for e in copy.deepcopy(events))
            path = target
        study.import_archive(fresh_store, path)
    assert changed is not None
    text = rebuild(fresh_store, list(archives()))
    original = DOC.read_text()
    assert text != original
    differing = [line for line in text.splitlines() if line not in original.splitlines()]
    assert any(line.startswith("| Kafka |") for line in differing), differing[:5]


def test_the_command_writes_a_study_from_imported_runs(stack, tmp_path):
    """`brokerbench import` then `brokerbench study downard --run ...` on the stack's own event store."""
    downard = [run_id for run_id, path in archives().items() if read_archive(path)[0]["data"].get("suite") == "downard"]
    assert downard
    state = ["--state-dir", str(stack.state_dir)]
    done = subprocess.run([str(BIN), *state, "import", *(str(archives()[r]) for r in downard)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "downard.md"
    done = subprocess.run([str(BIN), *state, "study", "downard", *[a for r in downard for a in ("--run", r)],
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    written = out.read_text().splitlines()
    section = DOC.read_text().split("## Downard 2017", 1)[1].split("\n## ", 1)[0]
    tables = [line for line in section.splitlines() if line.startswith("| ")]
    assert tables and all(line in written for line in tables)

    bad = subprocess.run([str(BIN), *state, "study", "downard", "--run", "20990101T000000Z-000000"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "run:" in bad.stderr and "no stored run" in bad.stderr
    unknown = subprocess.run([str(BIN), *state, "study", "nosuch"], capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2 and "study:" in unknown.stderr


def test_a_study_takes_the_newest_run_that_completed_every_cell(fresh_store):
    from synthetic import synthetic_run
    from brokerbench.spec import suite_runs

    request = next(r for r in suite_runs("helenius") if r["name"] == "helenius-1p1c1b")
    stored = {}
    for status in ("completed", "completed_with_failures"):  # the later one had failed cells
        events = synthetic_run({k: v for k, v in request.items() if k not in ("duration_s", "warmup_s")}, intervals=3)
        events[0]["data"]["suite"] = "helenius"
        events[-1]["data"]["status"] = status
        fresh_store.append(events)
        stored[status] = events[0]["run_id"]
    found = study.find_runs(fresh_store, study.load_study("helenius"))
    assert found["helenius-1p1c1b"].run_id == stored["completed"]
    assert "helenius-4p1c1b" not in found  # none stored
    # named with --run, the one with failures is taken as asked
    named = study.find_runs(fresh_store, study.load_study("helenius"), [stored["completed_with_failures"]])
    assert named["helenius-1p1c1b"].run_id == stored["completed_with_failures"]
    with pytest.raises(study.StudyError) as raised:
        study.find_runs(fresh_store, study.load_study("tallberg"), [stored["completed"]])
    assert raised.value.field == "run" and "not one of tallberg's runs" in str(raised.value)
