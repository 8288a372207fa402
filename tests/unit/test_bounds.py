"""Bounds on what a run may leave running or start, in AWS: keep_targets' expiry, the cap on runs in flight (the API's
POST /runs and a schedule's trigger), the account's quotas checked before a run starts, an EC2 launch refused for
the vCPU quota, and the hourly cost stated before a run.

AWS is moto (MSK, ElastiCache, EC2, Step Functions, DynamoDB as the event store), as in test_teardown.py. moto has no
Lambda GetAccountSettings and its Service Quotas knows only VPC quotas: those two are botocore's Stubber, which
checks each request against the service model and plays back the answer AWS would give. Each test's docstring says
which it uses.
"""

import argparse
import json
from datetime import datetime, timedelta, timezone

import boto3
import pytest
from botocore.stub import Stubber
from moto.core import DEFAULT_ACCOUNT_ID
from moto.kafka.models import kafka_backends
from test_teardown import (REGION, REQUEST, aws, clusters, elasticache, groups, instance_states, launch,  # noqa: F401
                           msk, requested, store)

from brokerbench.api import build_app
from brokerbench.api.deps import Deps
from brokerbench.brokers.kafka import cloud as kafka_cloud
from brokerbench.cli.run import cmd_cost
from brokerbench.brokers.redis_streams import cloud as redis_cloud
from brokerbench.cost import estimate_plan, hourly_text
from brokerbench.events.run import run_completed_event
from brokerbench.schedules import parse, trigger
from brokerbench.spec import SpecError, validate
from brokerbench.local import workflow as local_workflow
from brokerbench.local.stack import LocalStack
from brokerbench.targets import KEEP_UNTIL_TAG, resource_name
from brokerbench.workflow.admission import Admission, QuotaTooLow, RunsInFlight, Slots
from brokerbench.workflow.fleet import Ec2Fleet, TokenParameters, VcpuQuotaExceeded
from brokerbench.workflow.starter import LocalStarter, StarterBusy, StepFunctionsStarter
from brokerbench.workflow import sweep
from brokerbench.workflow.sweep import Sweeper

WAIT = {"StartAt": "W", "States": {"W": {"Type": "Wait", "Seconds": 3600, "End": True}}}
# EC2-kind cells: placement ec2 (a c7i.2xlarge worker each, 8 vCPUs), four at once.
EC2_REQUEST = {**REQUEST, "brokers": ["kafka"], "rates": [100, 200, 300, 400], "placement": {"worker": "ec2"},
               "max_concurrency": 4}


def run_machine() -> str:
    return boto3.client("stepfunctions").create_state_machine(
        name="bb-run", definition=json.dumps(WAIT),
        roleArn=f"arn:aws:iam::{DEFAULT_ACCOUNT_ID}:role/bb-run")["stateMachineArn"]


def admission(store, machine: str, quotas, lambda_client, *, max_runs: int = 2) -> Admission:
    return Admission(boto3.client("stepfunctions"), machine, slots=Slots.of(store), quotas=quotas,
                     lambda_client=lambda_client,
                     ec2=boto3.client("ec2"), max_runs=max_runs, worker_instance_type="c7i.2xlarge")


def clusters_active() -> None:
    """What MSK does over time: every cluster created is ACTIVE (moto leaves them CREATING)."""
    for cluster in kafka_backends[DEFAULT_ACCOUNT_ID][REGION].clusters.values():
        cluster.state = "ACTIVE"


def stubbed(service: str):
    return boto3.client(service, region_name=REGION)


def ec2_quota(stub: Stubber, vcpus: float) -> None:
    stub.add_response("get_service_quota", {"Quota": {"ServiceCode": "ec2", "QuotaCode": "L-1216C47A",
                                                      "QuotaName": "Running On-Demand Standard instances",
                                                      "Value": vcpus}},
                      {"ServiceCode": "ec2", "QuotaCode": "L-1216C47A"})


def lambda_limits(stub: Stubber, total: int, unreserved: int) -> None:
    stub.add_response("get_account_settings", {"AccountLimit": {"ConcurrentExecutions": total,
                                                                "UnreservedConcurrentExecutions": unreserved}}, {})


# -- keep_targets --------------------------------------------------------------------------------------------------


def test_keep_targets_takes_hours_up_to_the_deployments_maximum(monkeypatch):
    """true is the deployment's default hours, a number that many; more than the maximum is refused naming the field
    and the context key (no AWS)."""
    monkeypatch.setenv("BROKERBENCH_KEEP_TARGETS_MAX_HOURS", "12")
    assert validate({**REQUEST, "keep_targets": 12})["keep_targets"] == 12
    with pytest.raises(SpecError) as refused:
        validate({**REQUEST, "keep_targets": 12.5})
    (problem,) = refused.value.problems
    assert problem.path == "keep_targets" and "at most 12 hours" in problem.message
    assert "brokerbench:keepTargetsMaxHours" in problem.message
    with pytest.raises(SpecError, match="keep_targets"):
        validate({**REQUEST, "keep_targets": 0})


def test_kept_targets_carry_their_expiry_and_are_swept_after_it_not_before(store):
    """moto (MSK, ElastiCache, EC2, DynamoDB): a run that keeps its targets 2 hours tags the cluster and the group it
    creates with brokerbench:keep-until, 2 hours after their creation; once the run has ended, the sweeper leaves them
    until that time (its EC2 worker goes at once: workers are never kept) and deletes them after it."""
    run_id = "20261128T200000Z-4ee901"
    spec = requested(store, run_id, keep_targets=2)
    before = datetime.now(timezone.utc).replace(microsecond=0)
    kafka_cloud.provider().provision(run_id, "kafka", spec)  # as ProvisionTarget builds them from its settings
    redis_cloud.provider().provision(run_id, "redis-streams", spec)
    after = datetime.now(timezone.utc)
    clusters_active()
    worker = launch(run_id)
    store.append([run_completed_event(run_id, "completed", 2, 0)])
    (cluster,) = boto3.client("kafka").list_clusters_v2()["ClusterInfoList"]
    group_arn = boto3.client("elasticache").describe_replication_groups()["ReplicationGroups"][0]["ARN"]
    group_tags = boto3.client("elasticache").list_tags_for_resource(ResourceName=group_arn)["TagList"]
    until = {"msk": datetime.fromisoformat(cluster["Tags"][KEEP_UNTIL_TAG]),
             "elasticache": datetime.fromisoformat(next(t["Value"] for t in group_tags if t["Key"] == KEEP_UNTIL_TAG))}
    assert all(before + timedelta(hours=2) <= at <= after + timedelta(hours=2) for at in until.values())

    early = Sweeper(store, [msk(), elasticache()], boto3.client("ec2"),
                    now=lambda: (min(until.values()) - timedelta(seconds=1)).timestamp())
    swept = early.sweep()
    assert [(d["kind"], d["name"]) for d in swept["deleted"]] == [("ec2", worker)]
    assert {item["kind"]: item["reason"] for item in swept["left"]} == {
        kind: f"the run keeps its targets (keep_targets) until {at.isoformat()} (its brokerbench:keep-until tag)"
        for kind, at in until.items()}
    assert set(clusters()) == {resource_name(run_id, "kafka")}
    assert instance_states()[worker] in ("shutting-down", "terminated")

    late = Sweeper(store, [msk(), elasticache()], boto3.client("ec2"),
                   now=lambda: (max(until.values()) + timedelta(seconds=1)).timestamp())
    swept = late.sweep()
    assert {(d["kind"], d["name"]) for d in swept["deleted"]} == {
        ("msk", resource_name(run_id, "kafka")), ("elasticache", resource_name(run_id, "redis-streams"))}
    assert swept["left"] == [] and clusters() == {}
    assert groups()[resource_name(run_id, "redis-streams")] == "deleting"


def test_a_kept_target_past_its_expiry_stays_while_its_run_is_still_going(store, monkeypatch):
    """moto (MSK, DynamoDB): the expiry never deletes what a run still going uses; and a kept target without the tag
    (created before it was written) is bounded by its run's request plus the deployment's maximum keep. The run
    going is taken as within its own deadline (a run with no end past it is swept by another rule, tested in
    test_teardown.py), so only the keep's rule is judged here."""
    monkeypatch.setattr(sweep, "run_deadline", lambda requested: 4e9)  # 2096: beyond every clock of the test
    going, untagged = "20261128T200000Z-4ee902", "20261128T200000Z-4ee903"
    kafka_cloud.provider().provision(going, "kafka", requested(store, going, keep_targets=1))
    spec = requested(store, untagged, keep_targets=True)
    boto3.client("kafka").create_cluster_v2(
        ClusterName=resource_name(untagged, "kafka"), Tags={"brokerbench:run": untagged},
        Provisioned={"KafkaVersion": "3.9.x", "NumberOfBrokerNodes": 3,
                     "BrokerNodeGroupInfo": {"InstanceType": "kafka.m7g.large", "ClientSubnets": ["subnet-a"]}})
    store.append([run_completed_event(untagged, "completed", 2, 0)])
    clusters_active()
    assert spec["keep_targets"] is True
    requested_at = datetime.fromisoformat(store.read(untagged, prefix="00#run")[0]["at"])
    bound = requested_at + timedelta(hours=24)  # the default maximum keep

    swept = Sweeper(store, [msk()], boto3.client("ec2"),
                    now=lambda: (bound - timedelta(seconds=1)).timestamp()).sweep()
    assert swept["deleted"] == []
    reasons = {item["run_id"]: item["reason"] for item in swept["left"]}
    assert "still going" in reasons[going]
    assert reasons[untagged].endswith("(no keep-until tag: the run's request plus the deployment's maximum keep)")
    swept = Sweeper(store, [msk()], boto3.client("ec2"),
                    now=lambda: (bound + timedelta(seconds=1)).timestamp()).sweep()
    assert [d["run_id"] for d in swept["deleted"]] == [untagged]
    assert [item["run_id"] for item in swept["left"]] == [going]


# -- runs in flight ------------------------------------------------------------------------------------------------


def api_post(app, body: dict, query: dict | None = None, headers: dict | None = None) -> tuple[int, dict]:
    event = {"resource": "/runs", "path": "/runs", "httpMethod": "POST",
             "headers": {"content-type": "application/json", **(headers or {})}, "multiValueHeaders": {},
             "queryStringParameters": query,
             "multiValueQueryStringParameters": {k: [v] for k, v in query.items()} if query else None,
             "pathParameters": None,
             "stageVariables": None, "body": json.dumps(body), "isBase64Encoded": False,
             "requestContext": {"resourcePath": "/runs", "httpMethod": "POST", "path": "/prod/runs", "stage": "prod",
                                "requestId": "r1", "identity": {"sourceIp": "10.0.0.1"}}}
    result = app.resolve(event, None)
    return result["statusCode"], json.loads(result["body"])


def test_post_runs_answers_429_naming_the_runs_in_flight(store):
    """moto (Step Functions, DynamoDB) for the runs, Stubber for Service Quotas and Lambda (moto has neither quota):
    with the cap at 2, two POSTs start runs (each after the quota checks: 8 vCPUs and 2 concurrent executions fit),
    the third answers 429 with both runs' ids, before any quota is read or anything started; once one run has
    ended, a POST starts again."""
    machine = run_machine()
    quotas, lambda_client = stubbed("service-quotas"), stubbed("lambda")
    starter = StepFunctionsStarter(boto3.client("stepfunctions"), machine, store,
                                   admission=admission(store, machine, quotas, lambda_client))
    app = build_app(Deps(store=store, starter=starter, reports=None, schedules=list, mode="aws"))
    with Stubber(quotas) as quota_stub, Stubber(lambda_client) as lambda_stub:
        for _ in range(2):
            lambda_limits(lambda_stub, 1000, 1000)
        started = [api_post(app, REQUEST) for _ in range(2)]
        assert [status for status, _ in started] == [202, 202]
        status, body = api_post(app, REQUEST)
        quota_stub.assert_no_pending_responses()
        lambda_stub.assert_no_pending_responses()
    in_flight = [answer["run_id"] for _, answer in started]
    assert status == 429 and sorted(body["run_ids"]) == sorted(in_flight)
    assert all(run_id in body["message"] for run_id in in_flight) and "at most 2 at once" in body["message"]
    assert "brokerbench:maxRunsInFlight" in body["message"]
    executions = boto3.client("stepfunctions").list_executions(stateMachineArn=machine)["executions"]
    assert sorted(e["name"] for e in executions) == sorted(in_flight)  # the refused run never started

    boto3.client("stepfunctions").stop_execution(executionArn=executions[0]["executionArn"])
    with Stubber(lambda_client) as lambda_stub:
        lambda_limits(lambda_stub, 1000, 1000)
        assert api_post(app, REQUEST)[0] == 202


def test_a_schedule_at_the_cap_stores_not_started_naming_the_runs(store):
    """moto (Step Functions, DynamoDB), Stubber (Lambda's limits for the two runs started first): a schedule's due
    time while two runs are in flight is claimed and stored as not_started, the reason naming both runs; no
    execution is started, and no quota read for it (the cap refuses first)."""
    machine = run_machine()
    sfn, lambda_client = boto3.client("stepfunctions"), stubbed("lambda")
    starter = StepFunctionsStarter(sfn, machine, store,
                                   admission=admission(store, machine, stubbed("service-quotas"), lambda_client))
    in_flight = ["20261128T190000Z-aaa001", "20261128T190100Z-aaa002"]
    with Stubber(lambda_client) as lambda_stub:
        for run_id in in_flight:
            lambda_limits(lambda_stub, 1000, 1000)
            starter.start(REQUEST, None, run_id)
        (nightly,) = parse({"schedules": [{"name": "nightly", "cron": "0 3 * * *", "spec": REQUEST}]})
        result = trigger("nightly", datetime(2026, 11, 29, 3, tzinfo=timezone.utc), store, starter.start, [nightly])
        lambda_stub.assert_no_pending_responses()
    assert result["outcome"] == "not_started" and result["run_id"] is None
    assert "2 runs in flight" in result["reason"] and all(run_id in result["reason"] for run_id in in_flight)
    stored = [e["data"] for e in store.read("schedule#nightly") if e["data"]["outcome"] == "not_started"]
    assert [s["reason"] for s in stored] == [result["reason"]]
    assert sorted(e["name"] for e in sfn.list_executions(stateMachineArn=machine)["executions"]) == in_flight


# -- quotas --------------------------------------------------------------------------------------------------------


def test_the_quota_check_refuses_with_the_numbers_and_the_quota_to_raise(store):
    """moto (Step Functions, EC2: running instances and instance types' vCPUs), Stubber (Service Quotas, Lambda):
    four c7i.2xlarge workers at once need 32 vCPUs; with a quota of 32 and two m5.large (2 vCPUs each) running, 28
    are free, and the start is refused naming 32, 4, 28 and L-1216C47A. Lambda concurrency is refused likewise; with
    room for both, the run starts."""
    machine = run_machine()
    boto3.client("ec2").run_instances(ImageId="ami-12c6146b", MinCount=2, MaxCount=2, InstanceType="m5.large")
    quotas, lambda_client = stubbed("service-quotas"), stubbed("lambda")
    check = admission(store, machine, quotas, lambda_client)
    with Stubber(quotas) as quota_stub, Stubber(lambda_client) as lambda_stub:
        ec2_quota(quota_stub, 32)  # every cell on EC2: Lambda's limits are not read
        with pytest.raises(QuotaTooLow) as refused:
            check.admit(EC2_REQUEST, "20261128T200000Z-4ee911")
        message = str(refused.value)
        assert "needs 32 vCPUs at once (4 c7i.2xlarge workers × 8 vCPUs, max_concurrency 4)" in message
        assert "quota is 32 vCPUs with 4 in use by pending and running instances: 28 free" in message
        assert "L-1216C47A" in message and "to at least 36" in message

        lambda_cells = {**REQUEST, "rates": [100, 200, 300], "max_concurrency": 3}  # three Lambda cells at once
        lambda_limits(lambda_stub, 10, 3)
        with pytest.raises(QuotaTooLow) as refused:
            check.admit(lambda_cells, "20261128T200000Z-4ee912")
        message = str(refused.value)
        assert "needs 4 concurrent executions (3 cells at once on Lambda" in message
        assert "unreserved concurrency is 3 (of 10 in all" in message and "L-B99A9384" in message
        assert "to at least 11" in message

        ec2_quota(quota_stub, 64)
        assert check.slots.held() == {}  # each refused start gave its slot back
        check.admit(EC2_REQUEST, "20261128T200000Z-4ee913")  # 32 of 60 free vCPUs: starts
        quota_stub.assert_no_pending_responses()
        lambda_stub.assert_no_pending_responses()
    assert [h["run_id"] for h in check.slots.held().values()] == ["20261128T200000Z-4ee913"]


def test_a_quota_that_cannot_be_read_does_not_refuse_but_an_uncounted_cap_does(store):
    """moto (Step Functions, EC2, DynamoDB), Stubber (Service Quotas answers AccessDenied, Lambda ThrottlingException;
    then DynamoDB's Query of the slots ProvisionedThroughputExceededException): the quota checks are skipped and the
    run may start; runs in flight that cannot be counted refuse the start, saying why."""
    machine = run_machine()
    quotas, lambda_client, dynamodb = stubbed("service-quotas"), stubbed("lambda"), stubbed("dynamodb")
    with Stubber(dynamodb) as dynamodb_stub:
        dynamodb_stub.add_client_error("query", "ProvisionedThroughputExceededException", http_status_code=400)
        uncounted = Admission(boto3.client("stepfunctions"), machine, slots=Slots(dynamodb, store.table),
                              quotas=quotas, lambda_client=lambda_client, ec2=boto3.client("ec2"), max_runs=2,
                              worker_instance_type="c7i.2xlarge")
        with pytest.raises(StarterBusy, match="the runs in flight could not be counted .*ProvisionedThroughput"):
            uncounted.admit(REQUEST, "20261128T200000Z-4ee914")
    with Stubber(quotas) as quota_stub, Stubber(lambda_client) as lambda_stub:
        quota_stub.add_client_error("get_service_quota", "AccessDeniedException", http_status_code=403)
        lambda_stub.add_client_error("get_account_settings", "ThrottlingException", http_status_code=429)
        check = admission(store, machine, quotas, lambda_client)
        check.admit(EC2_REQUEST, "20261128T200000Z-4ee915")  # EC2 cells only
        check.admit(REQUEST, "20261128T200000Z-4ee916")  # Lambda cells only
        quota_stub.assert_no_pending_responses()
        lambda_stub.assert_no_pending_responses()


def test_the_targets_services_quotas_refuse_a_run_that_does_not_fit_with_the_numbers(store):
    """moto (MSK, ElastiCache, Amazon MQ: what the region holds now; Step Functions, DynamoDB), Stubber (Service
    Quotas, Lambda): the region holds an MSK cluster of 3 brokers, 2 cache nodes and 1 Amazon MQ broker. A run of
    a 6-broker MSK cluster, a 2-node replication group and a RabbitMQ cluster (1 Amazon MQ broker) needs 3 + 6 = 9
    brokers against a quota of 8 (L-EDD31C36) and 2 + 2 = 4 nodes against 3 ("Nodes per Region", found by name):
    refused with both sets of numbers; Amazon MQ's 1 + 1 = 2 of 2 fits and is not named. With the quotas raised, and
    with the brokers given as existing endpoints (no quota read), it starts."""
    machine = run_machine()
    boto3.client("kafka").create_cluster_v2(
        ClusterName="someone-elses", Provisioned={
            "KafkaVersion": "3.9.x", "NumberOfBrokerNodes": 3,
            "BrokerNodeGroupInfo": {"InstanceType": "kafka.m7g.large", "ClientSubnets": ["subnet-a"]}})
    for name in ("cache-a", "cache-b"):
        boto3.client("elasticache").create_cache_cluster(CacheClusterId=name, Engine="redis",
                                                         CacheNodeType="cache.t4g.micro", NumCacheNodes=1)
    boto3.client("mq").create_broker(BrokerName="other", EngineType="RABBITMQ", EngineVersion="3.13",
                                     HostInstanceType="mq.m5.large", DeploymentMode="SINGLE_INSTANCE",
                                     PubliclyAccessible=False, AutoMinorVersionUpgrade=True,
                                     Users=[{"Username": "u", "Password": "p" * 12}])
    request = {**REQUEST, "brokers": ["kafka", "redis-streams", "rabbitmq-quorum"],
               "provision": {"kafka": {"nodes": 6}, "redis-streams": {"nodes": 2},
                             "rabbitmq-quorum": {"deployment": "cluster"}}}
    quotas, lambda_client = stubbed("service-quotas"), stubbed("lambda")
    check = admission(store, machine, quotas, lambda_client)

    def answers(stub: Stubber, brokers: float, nodes: float, mq: float) -> None:
        lambda_limits(lambda_stub, 1000, 1000)
        stub.add_response("get_service_quota", {"Quota": {"ServiceCode": "kafka", "QuotaCode": "L-EDD31C36",
                                                          "QuotaName": "Number of brokers per account",
                                                          "Value": brokers}},
                          {"ServiceCode": "kafka", "QuotaCode": "L-EDD31C36"})
        stub.add_response("list_service_quotas", {"Quotas": [
            {"ServiceCode": "elasticache", "QuotaCode": "L-OTHER", "QuotaName": "Subnet groups per Region",
             "Value": 300.0},
            {"ServiceCode": "elasticache", "QuotaCode": "L-NODES", "QuotaName": "Nodes per Region", "Value": nodes}]},
                          {"ServiceCode": "elasticache"})
        stub.add_response("get_service_quota", {"Quota": {"ServiceCode": "mq", "QuotaCode": "L-4D525FD5",
                                                          "QuotaName": "Number of brokers per region", "Value": mq}},
                          {"ServiceCode": "mq", "QuotaCode": "L-4D525FD5"})

    with Stubber(quotas) as quota_stub, Stubber(lambda_client) as lambda_stub:
        answers(quota_stub, 8, 3, 2)
        with pytest.raises(QuotaTooLow) as refused:
            check.admit(request, "20261128T200000Z-4ee921")
        message = str(refused.value)
        assert ("Amazon MSK: the run creates 6 brokers (kafka: 6), and the account's quota is 8 brokers with 3 in use "
                "in this region: 5 free") in message
        assert '"Number of brokers per account" (Service Quotas, kafka, L-EDD31C36) to at least 9' in message
        assert ("ElastiCache for Redis: the run creates 2 nodes (redis-streams: 2), and the account's quota is 3 "
                "nodes with 2 in use in this region: 1 free") in message
        assert '"Nodes per Region" (Service Quotas, elasticache, found by its name) to at least 4' in message
        assert "Amazon MQ" not in message
        assert check.slots.held() == {}

        answers(quota_stub, 9, 4, 2)  # exactly enough
        check.admit(request, "20261128T200000Z-4ee922")
        lambda_limits(lambda_stub, 1000, 1000)  # existing endpoints: no target quota read
        existing = {"kafka": {"bootstrap_servers": "10.0.0.9:9092"}, "redis-streams": {"host": "10.0.0.9", "port": 6379},
                    "rabbitmq-quorum": {"host": "10.0.0.9", "amqp_port": 5672}}
        check.admit({**request, "targets": existing}, "20261128T200000Z-4ee923")
        quota_stub.assert_no_pending_responses()
        lambda_stub.assert_no_pending_responses()


def test_vcpu_limit_exceeded_is_retried_with_backoff_then_fails_naming_the_quota(monkeypatch):
    """Stubber (EC2 RunInstances answers VcpuLimitExceeded, SSM): the launch raises VcpuQuotaExceeded, whose message
    names the instance type, EC2's own words and the quota to raise, and deletes the task token's parameter;
    RunCellOnEc2 retries that error on its own, with backoff (60 s doubling, 4 times: 15 minutes), and its Catch then
    fails the cell with it (RecordCellFailed stores the cause)."""
    monkeypatch.setenv("BROKERBENCH_WORKER_INSTANCE_TYPE", "c7i.2xlarge")
    ec2, ssm = stubbed("ec2"), stubbed("ssm")
    job = {"run_id": "20261128T200000Z-4ee904", "cell": {"cell_id": "kafka.json.batch.1024B.100mps.r0", "index": 0},
           "targets": {}}
    with Stubber(ec2) as stub, Stubber(ssm) as ssm_stub:
        ssm_stub.add_response("put_parameter", {"Version": 1})
        stub.add_client_error("run_instances", "VcpuLimitExceeded", http_status_code=400,
                              service_message="You have requested more vCPU capacity than your current vCPU limit "
                                              "of 32 allows")
        ssm_stub.add_response("delete_parameter", {})
        launcher = Ec2Fleet(ec2, launch_template="bb-worker", subnet="subnet-w", environment={},
                            tokens=TokenParameters(ssm, "/bb/task-tokens"))
        with pytest.raises(VcpuQuotaExceeded) as refused:
            launcher.launch(job, "TOKEN")
        ssm_stub.assert_no_pending_responses()
    message = str(refused.value)
    assert "c7i.2xlarge" in message and "current vCPU limit of 32" in message and "L-1216C47A" in message
    definition = local_workflow.load_definition()
    for map_state, record in (("RunCells", "RecordCellFailed"), ("RunCellsDistributed", "LargeRecordCellFailed")):
        state = definition["States"][map_state]["ItemProcessor"]["States"]
        ec2_state = next(s for s in state.values() if s.get("HeartbeatSeconds"))
        (retry,) = [r for r in ec2_state["Retry"] if VcpuQuotaExceeded.__name__ in r["ErrorEquals"]]
        waits = [retry["IntervalSeconds"] * retry["BackoffRate"] ** i for i in range(retry["MaxAttempts"])]
        assert waits == [60, 120, 240, 480]
        assert ec2_state["Catch"][0]["ErrorEquals"] == ["States.ALL"] and ec2_state["Catch"][0]["Next"] == record


# -- the estimate before a run ---------------------------------------------------------------------------------------


def test_the_estimate_states_the_hourly_cost_of_what_the_run_creates():
    """No AWS: a kept MSK cluster (3 × kafka.m7g.large at $0.204, 3 × 100 GB at $0.10 a GB-month of 730 hours) and an
    ElastiCache cache.r7g.large ($0.219) bill $0.8721 an hour, by hand; one Lambda worker at once (3,008 MB at
    $0.0000166667 a GB-second) $0.1763 more."""
    estimate = estimate_plan(validate({**REQUEST, "keep_targets": 2}))
    hourly = estimate["hourly"]
    by_hand_targets = 3 * 0.204 + 3 * 100 * 0.10 / 730 + 0.219
    by_hand_worker = 3008 / 1024 * 3600 * 0.0000166667
    assert hourly["targets"] == round(by_hand_targets, 2) == 0.87
    assert hourly["total"] == round(by_hand_targets + by_hand_worker, 2) == 1.05
    assert hourly["kept_hours"] == 2
    text = hourly_text(hourly)
    assert "$1.05 USD an hour" in text and "keeps the targets 2 h" in text and "up to $1.74" in text


# -- the estimate before a run: POST /runs?dry_run=true ------------------------------------------------------------


def cost_json(capsys, **where) -> dict:
    """What `brokerbench cost --json` prints for a spec file or a suite."""
    args = argparse.Namespace(**{"spec": None, "suite": None, "scale": None, "only": None, "json": True, **where})
    capsys.readouterr()
    assert cmd_cost(args) == 0
    return json.loads(capsys.readouterr().out)


def dry_run_app(store):
    """The API as in AWS (Step Functions, EC2 and DynamoDB in moto; the admission's checks on Step Functions, Service
    Quotas, Lambda and EC2), the state machine's ARN, and the AWS calls the starter and its admission make."""
    machine = run_machine()
    calls: list[str] = []
    sfn, quotas, lambda_client, ec2 = (stubbed(s) for s in ("stepfunctions", "service-quotas", "lambda", "ec2"))
    for client in (sfn, quotas, lambda_client, ec2):
        client.meta.events.register("before-call.*.*", lambda model, **_: calls.append(model.name))
    checks = Admission(sfn, machine, slots=Slots.of(store), quotas=quotas, lambda_client=lambda_client, ec2=ec2,
                       max_runs=2, worker_instance_type="c7i.2xlarge")
    starter = StepFunctionsStarter(sfn, machine, store, admission=checks)
    return build_app(Deps(store=store, starter=starter, reports=None, schedules=list, mode="aws")), machine, calls


# What a dry run may ask AWS: the admission's reads, never a start.
ADMISSION_READS = {"DescribeExecution", "GetServiceQuota", "GetAWSDefaultServiceQuota", "ListServiceQuotas",
                   "ListAWSDefaultServiceQuotas", "GetAccountSettings",
                   "DescribeInstances", "DescribeInstanceTypes"}


def nothing_started(store, machine: str, calls: list[str]) -> None:
    assert set(calls) <= ADMISSION_READS, calls  # no execution started: at most the admission's reads
    assert boto3.client("stepfunctions").list_executions(stateMachineArn=machine)["executions"] == []
    assert store.client.scan(TableName=store.table)["Count"] == 0  # no event, no run


def test_a_dry_run_answers_what_brokerbench_cost_prints_and_starts_nothing(store, capsys, tmp_path):
    """moto (Step Functions, DynamoDB): POST /runs?dry_run=true answers 200 with the cost `brokerbench cost --json`
    prints for the same spec (and for the same suite), its hourly cost included; 2 brokers × 3 repeats of one
    size, rate and format are 6 cells, by hand. No AWS call (no execution, no count of runs in flight, no quota
    read), no event stored; an
    Idempotency-Key is ignored (this server keeps no idempotency records: a start with one is refused)."""
    app, machine, calls = dry_run_app(store)
    request = {**REQUEST, "repeats": 3, "keep_targets": 2}
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(request))
    status, body = api_post(app, request, {"dry_run": "true"})
    assert status == 200, body
    assert body["cost"] == cost_json(capsys, spec=str(spec_file))
    assert body["cost"]["hourly"]["total"] > body["cost"]["hourly"]["targets"] > 0
    assert body["cost"]["hourly"]["kept_hours"] == 2
    assert body["dry_run"] is True and body["name"] == "adhoc" and body["suite"] is None
    assert body["cells"] == 2 * 3 and sum(body["workers"].values()) == 6
    assert body["estimated_s"] > 0
    assert body["admission"] == {"admitted": True, "reasons": [], "runs_in_flight": [], "max_runs_in_flight": 2}

    status, body = api_post(app, {"suite": "smoke"}, {"dry_run": "1"}, {"Idempotency-Key": "k1"})
    assert status == 200, body
    assert body["suite"] == "smoke" and body["cost"] == cost_json(capsys, suite="smoke")
    nothing_started(store, machine, calls)
    status, body = api_post(app, {"suite": "smoke"}, {"dry_run": "false"}, {"Idempotency-Key": "k1"})
    assert status == 422 and body["field"] == "Idempotency-Key"  # the same request as a start


def test_a_dry_run_says_whether_the_run_would_be_admitted_now_and_reserves_nothing(store):
    """moto (Step Functions, EC2, DynamoDB), Stubber (Service Quotas, Lambda): with one run in flight of a cap of 2 and
    room in the quotas, a dry run says admitted; one that needs 32 vCPUs with a quota of 16 says not, with the
    numbers; with the cap full it says not, naming both runs. After each, the slots are as they were (nothing
    reserved), and a start is then refused as announced."""
    machine = run_machine()
    quotas, lambda_client = stubbed("service-quotas"), stubbed("lambda")
    starter = StepFunctionsStarter(boto3.client("stepfunctions"), machine, store,
                                   admission=admission(store, machine, quotas, lambda_client))
    app = build_app(Deps(store=store, starter=starter, reports=None, schedules=list, mode="aws"))
    first, second = "20261128T210000Z-bbb001", "20261128T210100Z-bbb002"
    with Stubber(quotas) as quota_stub, Stubber(lambda_client) as lambda_stub:
        lambda_limits(lambda_stub, 1000, 1000)
        starter.start(REQUEST, None, first)
        slots = starter.admission.slots.held()

        lambda_limits(lambda_stub, 1000, 1000)
        status, body = api_post(app, REQUEST, {"dry_run": "true"})
        assert status == 200 and body["admission"] == {"admitted": True, "reasons": [], "runs_in_flight": [first],
                                                       "max_runs_in_flight": 2}
        assert starter.admission.slots.held() == slots

        ec2_quota(quota_stub, 16)  # four c7i.2xlarge at once need 32 vCPUs
        status, body = api_post(app, EC2_REQUEST, {"dry_run": "true"})
        assert status == 200 and body["admission"]["admitted"] is False
        (reason,) = body["admission"]["reasons"]
        assert "needs 32 vCPUs at once" in reason and "quota is 16 vCPUs" in reason and "L-1216C47A" in reason
        assert starter.admission.slots.held() == slots

        lambda_limits(lambda_stub, 1000, 1000)
        starter.start(REQUEST, None, second)
        slots = starter.admission.slots.held()
        lambda_limits(lambda_stub, 1000, 1000)
        status, body = api_post(app, REQUEST, {"dry_run": "true"})
        assert status == 200 and body["admission"]["admitted"] is False
        assert body["admission"]["runs_in_flight"] == [first, second]
        (reason,) = body["admission"]["reasons"]
        assert "2 runs in flight" in reason and first in reason and second in reason
        assert starter.admission.slots.held() == slots
        status, body = api_post(app, REQUEST)  # as announced
        assert status == 429 and body["run_ids"] == [first, second]
        quota_stub.assert_no_pending_responses()
        lambda_stub.assert_no_pending_responses()


def test_a_local_dry_run_says_whether_the_stack_is_free(tmp_path):
    """No AWS: on the local stack (one run at a time) a dry run is admitted while no run holds the stack, and not
    while one does, naming it; the dry run takes no lock."""
    stack = LocalStack(tmp_path / "stack")
    app = build_app(Deps(store=None, starter=LocalStarter(stack, tmp_path, None), reports=None, schedules=list,
                         mode="local"))
    status, body = api_post(app, REQUEST, {"dry_run": "true"})
    assert status == 200 and body["admission"] == {"admitted": True, "reasons": [], "runs_in_flight": [],
                                                   "max_runs_in_flight": 1}
    with stack.run_lock("20261128T230000Z-loc001"):
        status, body = api_post(app, REQUEST, {"dry_run": "true"})
        assert status == 200 and body["admission"]["admitted"] is False
        assert body["admission"]["runs_in_flight"] == ["20261128T230000Z-loc001"]
        assert "20261128T230000Z-loc001" in body["admission"]["reasons"][0]
    assert stack.run_holder() is None


def test_a_dry_run_refuses_a_bad_request_as_a_start_does(store):
    """moto (Step Functions, DynamoDB): for each bad request, the dry run's status and body are the start's (the
    field at fault named), and neither starts anything."""
    app, machine, calls = dry_run_app(store)
    bad = [{**REQUEST, "rates": [-5]}, {key: value for key, value in REQUEST.items() if key != "brokers"},
           {**REQUEST, "brokers": ["no-such-broker"]}, {"suite": "no-such-suite"}, {"suite": "smoke", "extra": 1}]
    for body in bad:
        started = api_post(app, body)
        planned = api_post(app, body, {"dry_run": "true"})
        assert planned == started and planned[0] == 422 and planned[1]["field"], (body, planned)
    nothing_started(store, machine, calls)


def test_a_dry_run_value_that_is_not_a_boolean_is_refused_naming_it(store):
    app, machine, calls = dry_run_app(store)
    status, body = api_post(app, REQUEST, {"dry_run": "maybe"})
    assert status == 422 and body["field"] == "dry_run", body
    assert "dry_run" in body["message"]
    nothing_started(store, machine, calls)
