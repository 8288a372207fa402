"""docs/RELIABILITY.md's writer (bench/reliability.py): every fault a test recorded is in the document, with what
it checked, and every environment and secret check with how it ended, as pytest's JUnit report says."""

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def writer():
    spec = importlib.util.spec_from_file_location("reliability", REPO / "bench" / "reliability.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_recorded_fault_is_written_with_what_it_checked(tmp_path):
    reliability = writer()
    records = {
        "kill-redis": {"fault": "kill -9 of Redis", "run_status": "completed", "exit_code": 0, "events": 3,
                       "by_type": {"RunRequested": 1, "CellCompleted": 2}, "duplicated": 0,
                       "observed": ["the broker's own count agrees"],
                       "cells": [{"cell_id": "redis.raw", "status": "completed", "sent": 10, "received": 7,
                                  "unacknowledged": 3, "broker_count": {"observed": 10, "expected": 10}}]},
        "a-new-fault": {"fault": "something new", "run_status": "cancelled", "exit_code": None},
        "bad-input-specs": {"valid, planned": 3, "refused, every problem named": 7},
    }
    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuites><testsuite>'
                     '<testcase classname="tests.integration.test_environment_errors" name="test_full_disk">'
                     '<skipped message="no tmpfs here"/></testcase>'
                     '<testcase classname="tests.integration.test_secrets" name="test_nowhere"/>'
                     '</testsuite></testsuites>')
    text = reliability.render(records, "3 passed", reliability._outcomes(junit))
    section = text.split("### kill-redis")[1].split("###")[0]
    assert "run completed, CLI exit code 0" in section and "**Checked:** the broker's own count agrees." in section
    assert "| `redis.raw` | completed | 10 | 7 | – | – | – | – | 3 | – | 10 / 10 |" in section
    new = text.split("### a-new-fault")[1].split("###")[0]  # recorded but not in FAULTS: still written
    assert "run cancelled, no CLI (called directly)" in new
    assert "### kill-kafka\n\nnot observed in this run" in text
    assert "10 documents tried" in text
    assert "- `test_full_disk`: skipped (no tmpfs here)" in text and "- `test_nowhere`: passed" in text
