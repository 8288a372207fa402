"""A 2,000-cell run planned and recorded (its cells are not run): the plan is stored in chunks far below
DynamoDB's 400 KB item limit, read back whole and in run order, and kept out of the workflow's state."""

import json

import pytest
from botocore.stub import Stubber

from brokerbench.api.views import summary
from brokerbench.events import CELLS_PER_CHUNK, new_run_id, planned_cells
from brokerbench.reports.results import build_results
from brokerbench.spec import validate
from brokerbench.workflow import steps, wiring
from brokerbench.workflow.outputs import S3Reports

ITEM_LIMIT = 400 * 1024


def large_spec(name="plan-2000") -> dict:
    # 2 brokers × 5 formats × 4 sizes × 10 rates × 5 repeats = 2,000 cells
    return validate({"name": name, "brokers": ["kafka", "redis-streams"], "sizes": [1024, 4096, 16384, 65536],
                     "rates": [500 * (i + 1) for i in range(10)], "repeats": 5,
                     "formats": ["raw", "json", "msgpack", "avro", "protobuf"]})


@pytest.fixture
def workflow_env(store, monkeypatch, tmp_path):
    monkeypatch.setenv("BROKERBENCH_EVENTS_TABLE", store.table)
    monkeypatch.setenv("BROKERBENCH_DYNAMODB_ENDPOINT", store.client.meta.endpoint_url)
    monkeypatch.setenv("BROKERBENCH_REPORTS", str(tmp_path / "reports"))
    return store


def stored_items(store, run_id: str) -> list[dict]:
    pages = store.client.get_paginator("query").paginate(
        TableName=store.table, KeyConditionExpression="run_id = :r", ExpressionAttributeValues={":r": {"S": run_id}})
    return [item for page in pages for item in page["Items"]]


def test_a_2000_cell_plan_is_recorded_in_chunks_and_read_back_in_run_order(workflow_env):
    store = workflow_env
    run_id = new_run_id()
    planned = steps.plan_cells({"run_id": run_id, "spec": large_spec(), "suite": None})
    assert planned["cell_count"] == len(planned["cells"]) == 2000
    assert planned["cells_location"] is None  # local reports are a folder: the local interpreter takes them inline

    events = store.read(run_id)
    header = events[0]["data"]
    chunks = header["cell_chunks"]
    assert chunks >= 2000 / CELLS_PER_CHUNK  # at most CELLS_PER_CHUNK cells each, fewer when they are large
    assert [e["type"] for e in events] == ["RunRequested"] + ["CellsPlanned"] * chunks
    assert header["cell_count"] == 2000 and "cells" not in header
    assert planned_cells(events) == planned["cells"]  # every cell once, in the order they run
    assert [c["order"] for c in planned_cells(events)] == list(range(2000))

    sizes = [len(json.dumps(item)) for item in stored_items(store, run_id)]
    assert len(sizes) == chunks + 1 and max(sizes) < ITEM_LIMIT / 2, sizes

    results = build_results(events)
    assert len(results["cells"]) == 2000 and results["status"] == "running"
    assert sorted(c["cell_id"] for c in results["cells"]) == sorted(c["cell_id"] for c in planned["cells"])

    class NoExecution:
        def execution(self, run_id):
            return None

    line = summary(store, NoExecution(), events[0])
    assert line["cells"]["total"] == 2000


def test_a_small_plan_stays_in_run_requested(workflow_env):
    store = workflow_env
    run_id = new_run_id()
    spec = validate({"name": "plan-small", "brokers": ["kafka"], "sizes": [1024], "rates": [100], "formats": ["raw"]})
    planned = steps.plan_cells({"run_id": run_id, "spec": spec, "suite": None})
    events = store.read(run_id)
    assert [e["type"] for e in events] == ["RunRequested"]
    assert events[0]["data"]["cells"] == planned["cells"] and events[0]["data"]["cell_count"] == 1


def test_in_aws_a_large_plan_leaves_the_state_for_the_object_the_distributed_map_reads(workflow_env, monkeypatch):
    """S3 is checked with botocore's Stubber: no S3 runs here."""
    import boto3

    s3 = boto3.client("s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    run_id = new_run_id()
    bodies = []
    with Stubber(s3) as stub:
        stub.add_response("put_object", {}, {"Bucket": "bb-reports", "Key": f"reports/{run_id}/plan-cells.json",
                                             "Body": Stub(bodies), "ContentType": "application/json"})
        monkeypatch.setattr(wiring, "reports", lambda: S3Reports(s3, "bb-reports", "reports"))
        planned = steps.plan_cells({"run_id": run_id, "spec": large_spec(), "suite": None})
        stub.assert_no_pending_responses()
    assert planned["cells"] == [] and planned["cell_count"] == 2000
    assert planned["cells_location"] == {"Bucket": "bb-reports", "Key": f"reports/{run_id}/plan-cells.json"}
    assert json.loads(bodies[0]) == planned_cells(workflow_env.read(run_id))  # the map runs the recorded plan
    assert len(json.dumps(planned)) < 2048  # what stays in the execution state


class Stub:
    """Matches any value and keeps it (Stubber compares expected parameters with ==)."""

    def __init__(self, kept: list) -> None:
        self.kept = kept

    def __eq__(self, other) -> bool:
        self.kept.append(other)
        return True
