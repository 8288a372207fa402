"""A suite file read as a study or a fault suite (reports/study.py `Suite`): a misspelled or mistyped field, at the
suite's level, in its published study or in a run's faults, fails naming the file and the field's place, where it
was read as a dict (a fault's misspelled `target` read as no target, a misspelled `notes` as none)."""

import json

import msgspec
import pytest

from brokerbench import spec
from brokerbench.reports import guarantees, study


def _guarantees() -> dict:
    return spec.load_suite_file("guarantees")  # read afresh each time


def test_every_built_in_suite_reads_as_a_suite():
    for name in spec.all_suite_names():
        definition = study.suite_definition(name, spec.load_suite_file(name))
        assert [run.name for run in definition.runs] == [run["name"] for run in spec.suite_runs(name)]
    faulted = guarantees.load("guarantees")
    assert faulted.name == "guarantees" and faulted.notes and all(run.faults for run in faulted.runs)
    assert faulted.runs[0].faults[0].kind == "kill" and faulted.runs[0].faults[1].target is msgspec.UNSET


def test_a_misspelled_fault_field_names_the_file_and_the_field(tmp_path, monkeypatch):
    doc = _guarantees()
    doc["runs"][1]["faults"][0]["targt"] = doc["runs"][1]["faults"][0].pop("target")
    monkeypatch.setattr(spec, "SUITES_DIR", tmp_path)
    (tmp_path / "guarantees.json").write_text(json.dumps(doc))
    with pytest.raises(study.StudyError, match=r"^suite: suites/guarantees\.json: .*unknown field `targt` - at "
                                               r"`\$\.runs\[1\]\.faults\[0\]`") as found:
        guarantees.load("guarantees")
    assert found.value.field == "suite"


@pytest.mark.parametrize("change, named", [
    (lambda doc: doc.update(note=doc.pop("notes")), r"unknown field `note`"),
    (lambda doc: doc["runs"][0]["faults"][0].update(kind="crash"), r"`\$\.runs\[0\]\.faults\[0\]\.kind`"),
    (lambda doc: doc["runs"][0]["faults"][0].update(at_s="10"), r"`\$\.runs\[0\]\.faults\[0\]\.at_s`"),
    (lambda doc: doc["runs"][0].pop("name"), r"missing required field `name` - at `\$\.runs\[0\]`"),
])
def test_a_wrong_suite_field_fails_naming_it(change, named):
    doc = _guarantees()
    change(doc)
    with pytest.raises(study.StudyError, match=named):
        study.suite_definition("guarantees", doc)


def test_a_misspelled_published_field_names_its_place():
    doc = spec.load_suite_file("tallberg")
    table = doc["published"]["tables"][0]
    table["rows"][0]["brokr"] = table["rows"][0].pop("broker")
    with pytest.raises(study.StudyError, match=r"suites/tallberg\.json: .*unknown field `brokr` - at "
                                               r"`\$\.published\.tables\[0\]\.rows\[0\]`"):
        study.suite_definition("tallberg", doc)
