"""Faults in AWS mode (brokerbench.faults kind reboot): which ones a run may ask for, and the managed services' calls
the cell's supervisor makes at the spec's time (brokerbench.worker.cloud_faults).

The control-plane calls (ElastiCache TestFailover and DescribeReplicationGroups, Amazon MQ RebootBroker and
DescribeBroker, MSK RebootBroker) cannot run on this machine (no AWS account), so these tests use botocore's
Stubber: it checks every request against the service's model and the exact parameters expected, and plays back
answers written here from the services' API references. They prove the requests the cell sends and what it records;
they do not prove what AWS does with them. MSK's leader comes from a real Kafka's metadata in
tests/integration/test_cloud_faults_kafka.py.
"""

import time

import boto3
import pytest
from botocore.stub import Stubber

from brokerbench import faults, plan, spec
from brokerbench.workflow import steps
from brokerbench.worker.cloud_faults import ManagedFaults, for_cell
from brokerbench.worker.faults import CellFaults

MINIMAL = {"sizes": [1024], "rates": [100], "formats": ["json"], "duration_s": 10}
GROUP = "bb-20261128t2100z-abc123-redis"
PRIMARY, REPLICA = f"{GROUP}-001", f"{GROUP}-002"
BROKER_ID = "b-1234abcd-56ef-78ab-90cd-ef1234567890"


def client(service):
    return boto3.client(service, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


def refused(monkeypatch, mode: str, **request) -> str:
    """The InvalidRequest the workflow's first step (ValidateRequest, before anything is provisioned) raises."""
    monkeypatch.setenv("BROKERBENCH_MODE", mode)
    with pytest.raises(steps.InvalidRequest) as caught:
        steps.validate_request({"request": {**MINIMAL, **request}})
    return str(caught.value)


def accepted(monkeypatch, mode: str, **request) -> dict:
    monkeypatch.setenv("BROKERBENCH_MODE", mode)
    return steps.validate_request({"request": {**MINIMAL, **request}})["spec"]


# -- what a run may ask for -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind, why", [
    ("kill", "a crash of one node's processes"),
    ("stop", "a clean shutdown of one node that stays down until a restart"),
])
def test_a_kind_without_a_managed_equivalent_is_refused_in_aws_naming_the_field(monkeypatch, kind, why):
    found = refused(monkeypatch, "aws", brokers=["kafka"], provision={"kafka": {"nodes": 3}},
                    faults=[{"kind": kind, "at_s": 2}])
    assert f"faults[0].kind: {kind} has no managed equivalent on Amazon MSK ({why}" in found
    assert "in AWS a fault is kind reboot (kafka:RebootBroker" in found


def test_a_pause_is_refused_in_aws_and_the_same_request_runs_locally(monkeypatch):
    request = {"brokers": ["redis-streams"], "provision": {"redis-streams": {"nodes": 2}},
               "faults": [{"kind": "pause", "at_s": 2, "duration_s": 2}]}
    found = refused(monkeypatch, "aws", **request)
    assert "faults[0].kind: pause has no managed equivalent on ElastiCache for Redis" in found
    assert "no managed service freezes a node's processes" in found
    assert accepted(monkeypatch, "local", **request)["faults"][0]["kind"] == "pause"


def test_a_reboot_is_accepted_where_the_service_offers_it(monkeypatch):
    for request in ({"brokers": ["kafka"], "provision": {"kafka": {"nodes": 3}}, "faults": [{"kind": "reboot", "at_s": 2}]},
                    {"brokers": ["kafka"], "provision": {"kafka": {"nodes": 3}},
                     "faults": [{"kind": "reboot", "at_s": 2, "target": "2"}, {"kind": "reboot", "at_s": 5,
                                                                              "target": "follower"}]},
                    {"brokers": ["redis-streams"], "provision": {"redis-streams": {"nodes": 2}},
                     "faults": [{"kind": "reboot", "at_s": 2}]},
                    {"brokers": ["rabbitmq-quorum"], "provision": {"rabbitmq-quorum": {"nodes": 3}},
                     "faults": [{"kind": "reboot", "at_s": 2}]}):
        assert accepted(monkeypatch, "aws", **request)["faults"] == request["faults"]


@pytest.mark.parametrize("request_, field, words", [
    ({"brokers": ["redis-streams"], "provision": {"redis-streams": {"nodes": 2}},
      "faults": [{"kind": "reboot", "at_s": 2, "target": "follower"}]},
     "faults[0].target", "elasticache:TestFailover on ElastiCache for Redis fails the replication group's primary "
                         "over to a replica: its target is leader, not 'follower'"),
    ({"brokers": ["rabbitmq-quorum"], "provision": {"rabbitmq-quorum": {"nodes": 3}},
      "faults": [{"kind": "reboot", "at_s": 2, "target": "leader"}]},
     "faults[0].target", "mq:RebootBroker on Amazon MQ for RabbitMQ acts on the whole broker"),
    ({"brokers": ["redis-streams"], "faults": [{"kind": "reboot", "at_s": 2}]},
     "provision.redis-streams.nodes", "the faults need a replica to fail over to"),
    ({"brokers": ["rabbitmq-streams"], "provision": {"rabbitmq-streams": {"nodes": 3}},
      "faults": [{"kind": "reboot", "at_s": 2}]},
     "faults", "rabbitmq-streams takes no faults"),
    ({"brokers": ["nats-jetstream"], "provision": {"nats-jetstream": {"nodes": 3}},
      "faults": [{"kind": "reboot", "at_s": 2}]},
     "faults", "nats-jetstream takes no faults in AWS"),
    ({"brokers": ["kafka"], "provision": {"kafka": {"nodes": 3}},
      "faults": [{"kind": "reboot", "at_s": 2, "duration_s": 3}]},
     "faults[0].duration_s", "a reboot has no duration"),
    ({"brokers": ["kafka"], "provision": {"kafka": {"nodes": 3}},
      "faults": [{"kind": "reboot", "at_s": 2}, {"kind": "restart", "at_s": 5}]},
     "faults[1]", "a restart needs an earlier kill or stop"),
])
def test_each_aws_rule_names_its_field_and_why(monkeypatch, request_, field, words):
    assert f"{field}: {words}" in refused(monkeypatch, "aws", **request_)


def test_a_reboot_is_refused_locally_once_for_the_whole_request(monkeypatch):
    found = refused(monkeypatch, "local", brokers=["kafka", "redis-streams"],
                    provision={"kafka": {"nodes": 3}, "redis-streams": {"nodes": 2}},
                    faults=[{"kind": "reboot", "at_s": 2}])
    assert found.count("faults[0].kind: reboot is a managed service's call") == 1
    assert "on a local cluster a node is killed, stopped or paused" in found


def test_a_cell_with_a_managed_fault_is_planned_with_the_wait_for_the_service():
    """The cell waits for the service to serve again at its end (up to settle + timeout): the plan counts it, so
    a cell that would fit a Lambda invocation without it goes to an EC2 worker."""
    request = {**MINIMAL, "brokers": ["kafka"], "provision": {"kafka": {"nodes": 3}}, "duration_s": 300}
    plain = spec.expand(spec.validate(request))[0]
    rebooted = spec.expand(spec.validate({**request, "faults": [{"kind": "reboot", "at_s": 2}]}))[0]
    assert plan.estimated_seconds(rebooted) - plan.estimated_seconds(plain) == 330 == (
        faults.MANAGED_SETTLE_S + faults.MANAGED_WHOLE_TIMEOUT_S)
    placement = spec.validate(request)["placement"]
    assert plan.worker_kind(plain, placement) == "lambda" and plan.worker_kind(rebooted, placement) == "ec2"


# -- the calls at the spec's time ---------------------------------------------------------------------------


def _cell(broker: str, *fault_list: dict) -> dict:
    return {"broker": broker, "faults": list(fault_list)}


def _group(primary: str, replica: str, status: str = "available") -> dict:
    members = [{"CacheClusterId": primary, "CurrentRole": "primary"},
               {"CacheClusterId": replica, "CurrentRole": "replica"}]
    return {"ReplicationGroups": [{"ReplicationGroupId": GROUP, "Status": status,
                                   "NodeGroups": [{"NodeGroupId": "0001", "Status": status,
                                                   "NodeGroupMembers": members}]}]}


def _sent_at(api_client, operation: str) -> list[int]:
    """When each request of `operation` was built (monotonic ns), from botocore's own event."""
    moments = []
    api_client.meta.events.register(f"before-parameter-build.{api_client.meta.service_model.endpoint_prefix}."
                                    f"{operation}", lambda **_: moments.append(time.monotonic_ns()))
    return moments


def _run(applier, start_ns: int, actions: int = 1) -> dict:
    """The applier's clock started at `start_ns`; finished once it has made its `actions` calls (a loaded host may
    run its thread late: waiting for the calls, not for a time, keeps the test from racing it)."""
    applier.start(start_ns)
    deadline = time.monotonic() + 30
    while len(applier.records) + len(applier.failed) < actions and time.monotonic() < deadline:
        time.sleep(0.02)
    return applier.finish()


def _quick(applier: ManagedFaults) -> ManagedFaults:
    applier.settle_s, applier.poll_s, applier.leader_wait_s = 0.0, 0.01, 0.0
    return applier


def test_test_failover_names_the_group_and_node_group_at_the_specs_time_and_the_new_primary_is_recorded():
    cache = client("elasticache")
    endpoint = {"host": "primary.bb", "port": 6379, "tls": True,
                "managed": {"service": "elasticache", "replication_group": GROUP, "node_group": "0001"}}
    sent = _sent_at(cache, "TestFailover")
    with Stubber(cache) as stub:
        described = {"ReplicationGroupId": GROUP}
        stub.add_response("describe_replication_groups", _group(PRIMARY, REPLICA), described)  # the leader before
        stub.add_response("test_failover", {"ReplicationGroup": {"ReplicationGroupId": GROUP, "Status": "available"},
                                            "ResponseMetadata": {"HTTPStatusCode": 200, "RequestId": "req-1"}},
                          {"ReplicationGroupId": GROUP, "NodeGroupId": "0001"})
        stub.add_response("describe_replication_groups", _group(REPLICA, PRIMARY), described)  # the leader at the end
        stub.add_response("describe_replication_groups", _group(REPLICA, PRIMARY, "modifying"), described)
        stub.add_response("describe_replication_groups", _group(REPLICA, PRIMARY), described)  # whole again
        applier = _quick(ManagedFaults(_cell("redis-streams", {"kind": "reboot", "at_s": 0.3}), endpoint, "t", cache))
        start = time.monotonic_ns()
        record = _run(applier, start)
        stub.assert_no_pending_responses()
    [applied] = record["applied"]
    assert sent[0] >= start + 300_000_000  # not before its time
    assert applied["at_s"] >= applied["planned_s"] == 0.3 and applied["answered_s"] >= applied["at_s"]
    assert (applied["kind"], applied["nodes"], applied["leader_before"]) == ("reboot", [PRIMARY], PRIMARY)
    assert applied["call"] == "elasticache:TestFailover"
    assert applied["request"] == {"ReplicationGroupId": GROUP, "NodeGroupId": "0001"}
    assert applied["response"] == {"http_status": 200, "request_id": "req-1", "ReplicationGroupStatus": "available"}
    assert record["failed"] == [] and record["leader_at_end"] == REPLICA and record["cluster_whole_at_end"] is True
    assert applier.error is None and faults.window(record)[0] == applied["at_s"]  # the window starts at the request


def test_a_refused_call_is_recorded_as_a_failed_fault_and_the_cell_goes_on():
    cache = client("elasticache")
    endpoint = {"host": "primary.bb", "port": 6379,
                "managed": {"service": "elasticache", "replication_group": GROUP, "node_group": "0001"}}
    with Stubber(cache) as stub:
        stub.add_response("describe_replication_groups", _group(PRIMARY, REPLICA), {"ReplicationGroupId": GROUP})
        stub.add_client_error("test_failover", "TestFailoverNotAvailableFault", "the group's quota of test "
                              "failovers is used up", http_status_code=400,
                              expected_params={"ReplicationGroupId": GROUP, "NodeGroupId": "0001"})
        stub.add_response("describe_replication_groups", _group(PRIMARY, REPLICA), {"ReplicationGroupId": GROUP})
        stub.add_response("describe_replication_groups", _group(PRIMARY, REPLICA), {"ReplicationGroupId": GROUP})
        applier = _quick(ManagedFaults(_cell("redis-streams", {"kind": "reboot", "at_s": 0.1}), endpoint, "t", cache))
        record = _run(applier, time.monotonic_ns())
        stub.assert_no_pending_responses()
    assert applier.error is None  # the cell is not failed by it
    assert record["applied"] == [] and faults.window(record) is None  # measured as a cell without that fault
    [failed] = record["failed"]
    assert failed["error"] == {"code": "TestFailoverNotAvailableFault", "http_status": 400,
                               "message": "the group's quota of test failovers is used up"}
    assert (failed["fault"], failed["kind"], failed["nodes"], failed["call"]) == (0, "reboot", [PRIMARY],
                                                                                   "elasticache:TestFailover")
    assert failed["at_s"] >= 0.1 and record["leader_at_end"] == PRIMARY and record["cluster_whole_at_end"] is True


def test_amazon_mq_reboot_names_the_run_broker_and_waits_until_it_runs_again():
    mq = client("mq")
    endpoint = {"host": "b.mq", "amqp_port": 5671, "managed": {"service": "amazonmq", "broker_id": BROKER_ID}}
    with Stubber(mq) as stub:
        stub.add_response("reboot_broker", {}, {"BrokerId": BROKER_ID})
        stub.add_response("describe_broker", {"BrokerState": "REBOOT_IN_PROGRESS"}, {"BrokerId": BROKER_ID})
        stub.add_response("describe_broker", {"BrokerState": "RUNNING"}, {"BrokerId": BROKER_ID})
        applier = _quick(ManagedFaults(_cell("rabbitmq-quorum", {"kind": "reboot", "at_s": 0.1}), endpoint, "t", mq))
        record = _run(applier, time.monotonic_ns())
        stub.assert_no_pending_responses()
    [applied] = record["applied"]
    assert (applied["call"], applied["request"], applied["nodes"]) == ("mq:RebootBroker", {"BrokerId": BROKER_ID},
                                                                       ["broker"])
    assert applied["leader_before"] is None and record["leader_at_end"] is None
    assert record["cluster_whole_at_end"] is True and record["restored_at_end"] == []


def test_a_managed_target_gets_the_managed_applier_and_a_local_one_the_signals():
    cell = _cell("kafka", {"kind": "reboot", "at_s": 1})
    assert isinstance(for_cell(cell, {"bootstrap_servers": "x", "managed": {"service": "msk"}}, "t"), ManagedFaults)
    assert type(for_cell(_cell("kafka"), {"bootstrap_servers": "x"}, "t")) is CellFaults


def test_a_refused_call_is_shown_beside_the_cells_faults():
    from brokerbench.reports.faults import cell_line

    cell = {"cell_id": "kafka.raw.batch.256B.200mps.r0", "acked": 600, "lost": 0, "duplicated": 0,
            "broker_count": {"difference": 0},
            "faults": {"applied": [], "failed": [{"fault": 0, "kind": "reboot", "nodes": ["2"], "at_s": 1.02,
                                                  "error": {"code": "BadRequestException", "message": "not ACTIVE"}}],
                       "leader_at_end": "1", "producer_ack_gap": None, "consumer_receipt_gap": None}}
    assert cell_line(cell).startswith("kafka.raw.batch.256B.200mps.r0: reboot 2 REFUSED at 1.02 s "
                                      "(BadRequestException) · leader – → 1")
