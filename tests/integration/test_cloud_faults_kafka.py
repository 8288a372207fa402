"""Amazon MSK's fault (kind reboot) in a real cell: the cell's supervisor asks a real Kafka's metadata which broker
leads the cell's topic, and calls RebootBroker on it at the spec's time, as it would on MSK.

The Kafka is the session's local one (single node, node.id=1: brokers/kafka/local.py), given as the endpoint of an
MSK cluster (its `managed` part names a cluster ARN). MSK's control plane cannot be reached here (no AWS account),
so its client is botocore's Stubber: it checks RebootBroker's request against MSK's service model and the exact
parameters expected, and plays back MSK's documented answer. What this proves: the cell sends that request, for the
broker Kafka names, at its time, records it with the cell, and measures on; not what MSK does with it (never run
against real AWS).
"""

import time

import boto3
import pytest
from botocore.stub import Stubber
from inline_run import execute_run

from brokerbench import faults
from brokerbench.brokers.kafka import cloud_faults
from brokerbench.events.memory import MemoryEventStore
from brokerbench.reports.results import build_results
from brokerbench.worker.cloud_faults import ManagedFaults

ARN = "arn:aws:kafka:us-east-1:123456789012:cluster/bb-20261128t2100z-abc123-kafka/0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b-2"
OPERATION = "arn:aws:kafka:us-east-1:123456789012:cluster-operation/bb-20261128t2100z-abc123-kafka/0f1e/op-1"
LOCAL_NODE_ID = "1"  # the local single-node Kafka's node.id (brokers/kafka/local.py)
REQUEST = {"name": "msk-reboot", "brokers": ["kafka"], "provision": {"kafka": {"nodes": 3}}, "sizes": [256],
           "rates": [200], "formats": ["raw"], "duration_s": 3, "warmup_s": 0.5, "warmup_until_steady": False,
           "drain_timeout_s": 5}


@pytest.fixture
def msk(monkeypatch):
    """The MSK client the cell's faults get (cloud_faults.client), stubbed; the state read at once after the call."""
    kafka = boto3.client("kafka", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    monkeypatch.setattr(cloud_faults, "client", lambda: kafka)
    monkeypatch.setattr(ManagedFaults, "settle_s", 0.0)
    monkeypatch.setattr(ManagedFaults, "poll_s", 0.05)
    with Stubber(kafka) as stub:
        sent = []
        kafka.meta.events.register("before-parameter-build.kafka.RebootBroker",
                                   lambda **_: sent.append(time.monotonic()))
        yield stub, sent


def _cell_faults(endpoints, fault_list):
    store = MemoryEventStore()
    endpoint = {**endpoints["kafka"], "managed": {"service": "msk", "cluster_arn": ARN}}
    outcome = execute_run({**REQUEST, "faults": fault_list}, {"kafka": endpoint}, store)
    events = store.read(outcome.run_id)
    [completed] = [e["data"] for e in events if e["type"] == "CellCompleted"]
    return outcome, completed, build_results(events)["cells"][0]


def test_reboot_of_the_leader_goes_to_the_broker_kafka_names_at_the_specs_time(stack, endpoints, msk):
    stub, sent = msk
    stub.add_response("reboot_broker", {"ClusterArn": ARN, "ClusterOperationArn": OPERATION,
                                        "ResponseMetadata": {"HTTPStatusCode": 200, "RequestId": "req-msk-1"}},
                      {"ClusterArn": ARN, "BrokerIds": [LOCAL_NODE_ID]})
    stub.add_response("describe_cluster_v2", {"ClusterInfo": {"State": "ACTIVE"}}, {"ClusterArn": ARN})
    outcome, completed, cell = _cell_faults(endpoints, [{"kind": "reboot", "at_s": 1}])
    stub.assert_no_pending_responses()
    assert outcome.status == "completed", [c.reason for c in outcome.cells]
    record = completed["faults"]
    [applied] = record["applied"]
    assert applied["leader_before"] == LOCAL_NODE_ID and applied["nodes"] == [LOCAL_NODE_ID]
    assert applied["request"] == {"ClusterArn": ARN, "BrokerIds": [LOCAL_NODE_ID]}
    assert applied["response"] == {"http_status": 200, "request_id": "req-msk-1", "ClusterArn": ARN,
                                   "ClusterOperationArn": OPERATION}
    assert applied["call"] == "kafka:RebootBroker" and len(sent) == 1
    assert applied["at_s"] >= applied["planned_s"] == 1.0  # not before its time
    assert record["leader_at_end"] == LOCAL_NODE_ID and record["cluster_whole_at_end"] is True
    assert record["failed"] == [] and record["phases"]["window_s"][0] == applied["at_s"]
    # the stub rebooted nothing: the cell's accounting is that of a cell without a fault, and whole
    assert cell["sent"] == cell["received"] > 0 and cell["lost"] == 0


def test_a_reboot_msk_refuses_is_a_failed_fault_and_the_cell_completes(stack, endpoints, msk):
    stub, _ = msk
    stub.add_client_error("reboot_broker", "BadRequestException", "The cluster is not in the ACTIVE state", 400,
                          expected_params={"ClusterArn": ARN, "BrokerIds": ["2"]})
    stub.add_response("describe_cluster_v2", {"ClusterInfo": {"State": "REBOOTING_BROKER"}}, {"ClusterArn": ARN})
    outcome, completed, cell = _cell_faults(endpoints, [{"kind": "reboot", "at_s": 1, "target": "2"}])
    stub.assert_no_pending_responses()
    assert outcome.status == "completed", [c.reason for c in outcome.cells]
    record = completed["faults"]
    assert record["applied"] == [] and faults.window(record) is None
    [failed] = record["failed"]
    assert failed["error"] == {"code": "BadRequestException", "message": "The cluster is not in the ACTIVE state",
                               "http_status": 400}
    assert failed["nodes"] == ["2"] and failed["at_s"] >= 1.0
    assert record["cluster_whole_at_end"] is False
    assert cell["sent"] == cell["received"] > 0
