"""Teardown that always happens, against moto (AWS's control planes faked in-process: MSK, ElastiCache, EC2, Step
Functions, SQS, and DynamoDB as the event store): the teardown loop's rounds through a target still being created, a
run whose execution ended FAILED, ABORTED or TIMED_OUT, a cancel, and the hourly sweeper, which no single failure
stops (a provider's listing refused, a resource unreadable, a delete refused), which sweeps a run with no end stored
once past its deadline, and which drains RunEnded's dead letters.

moto creates an MSK cluster CREATING and an ElastiCache group `available`, and never moves either on by itself; the
tests move them as AWS would (creating -> available, deleting -> gone) by setting moto's own record of the
resource. moto's DeleteReplicationGroup accepts a group in any state, so the refusal AWS gives a group still being
created (InvalidReplicationGroupState) is played by botocore's Stubber in its own test.
"""

import json
import time
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.elasticache.models import elasticache_backends
from moto.kafka.models import kafka_backends

from brokerbench.brokers.kafka.cloud import MskTargets
from brokerbench.brokers.redis_streams.cloud import ElastiCacheTargets
from brokerbench.events import make_event
from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.events.run import run_completed_event, run_requested_events
from brokerbench.plan import plan
from brokerbench.spec import validate
from brokerbench.targets import DELETING, GONE, NOT_DELETABLE, TEARDOWN_TIMEOUT_S, resource_name
from brokerbench.workflow import steps
from brokerbench.workflow.starter import StepFunctionsStarter
from brokerbench.workflow.stop import InlineTeardowns, StepFunctionsTeardowns, run_ended
from brokerbench.workflow.sweep import Sweeper

REGION = "us-east-1"
AMI = "ami-12c6146b"  # one of the images moto knows
SECRET_NAME = "bb-redis-auth"
REQUEST = {"brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [100], "formats": ["json"]}


@pytest.fixture
def aws(monkeypatch):
    """moto for every AWS client, and the settings the CDK app gives the teardown functions."""
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": REGION,
                       "AWS_REGION": REGION, "BROKERBENCH_MODE": "aws", "BROKERBENCH_MSK_SUBNETS": "subnet-a",
                       "BROKERBENCH_MSK_SECURITY_GROUPS": "sg-1", "BROKERBENCH_REDIS_SUBNET_GROUP": "bb-subnets",
                       "BROKERBENCH_MQ_SUBNETS": "subnet-a", "BROKERBENCH_MQ_SECURITY_GROUPS": "sg-1",
                       "BROKERBENCH_REDIS_SECURITY_GROUPS": "sg-1"}.items():
        monkeypatch.setenv(key, value)
    # BROKERBENCH_DYNAMODB_ENDPOINT: a local workflow run earlier in this process (an integration module on the
    # same pytest-xdist worker) leaves DynamoDB Local's endpoint in the environment, and the handlers would read it
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "BROKERBENCH_DYNAMODB_ENDPOINT"):
        monkeypatch.delenv(key, raising=False)
    with mock_aws():
        secret = boto3.client("secretsmanager").create_secret(Name=SECRET_NAME, SecretString="t" * 32)["ARN"]
        monkeypatch.setenv("BROKERBENCH_REDIS_AUTH_SECRET_ARN", secret)
        yield


@pytest.fixture
def store(aws):
    events = DynamoEventStore("bb-teardown-events", region=REGION)
    events.ensure_table()
    return events


def msk() -> MskTargets:
    return MskTargets(boto3.client("kafka"), subnets=["subnet-a"], security_groups=["sg-1"])


def elasticache() -> ElastiCacheTargets:
    return ElastiCacheTargets(boto3.client("elasticache"), boto3.client("secretsmanager"),
                              auth_secret_arn="unused", subnet_group="bb-subnets", security_groups=["sg-1"])


def create_cluster(run_id: str, state: str = "ACTIVE", *, name: str | None = None, tagged: bool = True) -> str:
    arn = boto3.client("kafka").create_cluster_v2(
        ClusterName=name or resource_name(run_id, "kafka"), Tags={"brokerbench:run": run_id} if tagged else {},
        Provisioned={"KafkaVersion": "3.9.x", "NumberOfBrokerNodes": 3,
                     "BrokerNodeGroupInfo": {"InstanceType": "kafka.m7g.large", "ClientSubnets": ["subnet-a"]}},
    )["ClusterArn"]
    kafka_backends[DEFAULT_ACCOUNT_ID][REGION].clusters[arn].state = state
    return arn


def create_group(run_id: str, status: str = "available", *, name: str | None = None) -> str:
    name = name or resource_name(run_id, "redis-streams")
    boto3.client("elasticache").create_replication_group(
        ReplicationGroupId=name, ReplicationGroupDescription=f"brokerbench run {run_id}", Engine="redis",
        CacheNodeType="cache.r7g.large", NumCacheClusters=1, Tags=[{"Key": "brokerbench:run", "Value": run_id}])
    set_group(name, status)
    return name


def deletions_finish(seconds: float = 0) -> None:
    """Time passes: every group ElastiCache was deleting is gone (InlineTeardowns' sleep)."""
    for name, status in groups().items():
        if status == "deleting":
            set_group(name, None)


def set_group(name: str, status: str | None) -> None:
    """What ElastiCache does over time: a status change, or (None) the group gone once its deletion finished."""
    groups = elasticache_backends[DEFAULT_ACCOUNT_ID][REGION].replication_groups
    if status is None:
        del groups[name]
    else:
        groups[name].status = status


def clusters() -> dict[str, str]:
    return {c["ClusterName"]: c["State"] for c in boto3.client("kafka").list_clusters_v2()["ClusterInfoList"]}


def groups() -> dict[str, str]:
    return {g["ReplicationGroupId"]: g["Status"]
            for g in boto3.client("elasticache").describe_replication_groups()["ReplicationGroups"]}


def requested(store, run_id: str, **extra) -> dict:
    spec = validate({**REQUEST, **extra})
    store.append(run_requested_events(run_id, spec, plan(spec)["cells"], None))
    return spec


# -- the teardown loop's rounds ----------------------------------------------------------------------------------


def test_a_cluster_and_a_group_still_creating_are_waited_for_then_deleted_then_gone(aws):
    """TeardownTarget's rounds (the workflow's loop): refused while creating, deleted once they can be, done once
    gone. Each answer carries the loop's deadline, set at the first round and kept."""
    run_id = "20261126T230000Z-aaa111"
    spec = validate(REQUEST)
    arn = create_cluster(run_id, "CREATING")
    group = create_group(run_id, "creating")
    rounds = {broker: {"run_id": run_id, "broker": broker, "spec": spec} for broker in spec["brokers"]}

    first = {b: steps.teardown_target(e) for b, e in rounds.items()}
    assert {b: (a["state"], a["done"], a["timed_out"]) for b, a in first.items()} == {
        "kafka": (NOT_DELETABLE, False, False), "redis-streams": (NOT_DELETABLE, False, False)}
    assert clusters() == {resource_name(run_id, "kafka"): "CREATING"} and groups() == {group: "creating"}
    deadline = first["kafka"]["deadline"]
    assert deadline == pytest.approx(time.time() + TEARDOWN_TIMEOUT_S, abs=60) and first["kafka"]["wait_s"] == 60

    kafka_backends[DEFAULT_ACCOUNT_ID][REGION].clusters[arn].state = "ACTIVE"  # created at last
    set_group(group, "available")
    second = {b: steps.teardown_target({**e, "teardown": first[b]}) for b, e in rounds.items()}
    assert {b: (a["state"], a["done"], a["rounds"]) for b, a in second.items()} == {
        "kafka": (DELETING, False, 2), "redis-streams": (DELETING, False, 2)}
    assert second["kafka"]["deadline"] == deadline  # one bound for the whole loop
    assert clusters() == {} and groups() == {group: "deleting"}  # moto drops a deleted cluster at once

    set_group(group, None)  # ElastiCache finished deleting it
    third = {b: steps.teardown_target({**e, "teardown": second[b]}) for b, e in rounds.items()}
    assert {b: (a["state"], a["done"], a["action"]) for b, a in third.items()} == {
        "kafka": (GONE, True, "nothing to delete"), "redis-streams": (GONE, True, "nothing to delete")}


def test_the_loop_gives_up_once_its_deadline_has_passed(aws):
    run_id = "20261126T230000Z-aaa222"
    spec = validate(REQUEST)
    create_cluster(run_id, "CREATING")
    event = {"run_id": run_id, "broker": "kafka", "spec": spec}
    late = steps.teardown_target({**event, "teardown": {"deadline": 1.0, "rounds": 90}})
    assert (late["state"], late["done"], late["timed_out"], late["rounds"]) == (NOT_DELETABLE, False, True, 91)


def test_inline_teardowns_wait_between_rounds_and_stop_when_gone(aws):
    """The local teardown path: the same rounds, a wait of wait_s between two."""
    run_id = "20261126T230000Z-aaa333"
    spec = validate({**REQUEST, "brokers": ["redis-streams"]})
    group = create_group(run_id, "modifying")
    waits = []

    def sleep(seconds):  # time passes: ElastiCache finishes modifying, then deleting
        waits.append(seconds)
        set_group(group, "available" if len(waits) == 1 else None)

    assert InlineTeardowns(sleep).start(run_id, spec) == [
        {"broker": "redis-streams", "action": "nothing to delete", "done": True}]
    assert waits == [60, 60] and groups() == {}


def test_a_group_that_starts_changing_between_describe_and_delete_is_not_deletable_yet():
    """Stubber: moto's DeleteReplicationGroup never refuses; ElastiCache answers InvalidReplicationGroupState for a
    group being created or modified, and MSK BadRequestException for a cluster not ACTIVE or FAILED."""
    cache = boto3.client("elasticache", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    kafka = boto3.client("kafka", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(cache) as cache_stub, Stubber(kafka) as kafka_stub:
        cache_stub.add_client_error("delete_replication_group", "InvalidReplicationGroupState",
                                    expected_params={"ReplicationGroupId": "bb-r-redis"})
        kafka_stub.add_client_error("delete_cluster", "BadRequestException", expected_params={"ClusterArn": "arn:c"})
        provider = ElastiCacheTargets(cache, None, auth_secret_arn="", subnet_group="", security_groups=[])
        assert provider.delete("bb-r-redis", "available") == NOT_DELETABLE
        assert MskTargets(kafka, subnets=[], security_groups=[]).delete("arn:c", "ACTIVE") == NOT_DELETABLE
        cache_stub.assert_no_pending_responses()
        kafka_stub.assert_no_pending_responses()


def test_keep_targets_and_an_existing_endpoint_are_done_at_once_and_delete_nothing(aws):
    run_id = "20261126T230000Z-aaa444"
    create_cluster(run_id)
    kept = steps.teardown_target({"run_id": run_id, "broker": "kafka", "spec": validate({**REQUEST, "keep_targets": True})})
    assert (kept["state"], kept["done"]) == ("kept", True) and clusters() == {resource_name(run_id, "kafka"): "ACTIVE"}


# -- a run whose execution ended early -----------------------------------------------------------------------------


def teardown_machine() -> str:
    definition = json.loads((Path(__file__).parents[2] / "statemachines" / "teardown_run.asl.json").read_text())
    return boto3.client("stepfunctions").create_state_machine(
        name="bb-teardown", definition=json.dumps(definition),
        roleArn=f"arn:aws:iam::{DEFAULT_ACCOUNT_ID}:role/bb-teardown")["stateMachineArn"]


@pytest.mark.parametrize("status, end", [("FAILED", ("RunFailed", None)), ("TIMED_OUT", ("RunFailed", None)),
                                         ("ABORTED", ("RunCompleted", "cancelled"))])
def test_an_execution_that_ended_early_gets_its_end_and_its_targets_deleted(store, status, end):
    """The RunEnded rule's handler, for each ending a stop from the console, an execution timeout or an uncaught
    error gives: the run's end is stored (it had none) and the targets are torn down by the loop."""
    run_id = "20261126T231500Z-" + {"FAILED": "fa0001", "TIMED_OUT": "7e0001", "ABORTED": "ab0001"}[status]
    requested(store, run_id)
    create_cluster(run_id)
    group = create_group(run_id)
    detail = {"status": status, "name": run_id, "error": "States.Runtime" if status == "FAILED" else None,
              "cause": "an uncaught error" if status == "FAILED" else None,
              "input": json.dumps({"request": REQUEST, "suite": None, "run_id": run_id})}
    ended = run_ended(store, detail, InlineTeardowns(deletions_finish))
    assert ended["run_id"] == run_id and ended["execution_status"] == status
    [stored] = [e for e in store.read(run_id) if e["type"] in ("RunCompleted", "RunFailed")]
    assert stored["type"] == end[0] and (end[1] is None or stored["data"]["status"] == end[1])
    assert f"ended {status}" in (stored["data"].get("reason") or "")
    assert ended["teardown"] == [{"broker": "kafka", "action": "nothing to delete", "done": True},
                                 {"broker": "redis-streams", "action": "nothing to delete", "done": True}]
    assert clusters() == {} and group not in groups()


def test_an_execution_that_failed_after_the_run_ended_keeps_its_end(store):
    """A run that failed the usual way (RunFailed stored, its own teardown done): the rule's teardown finds nothing
    to delete and no second end is written."""
    run_id = "20261126T231500Z-fa0002"
    requested(store, run_id)
    store.append([make_event(run_id, "RunFailed", {"reason": "ProvisioningTimedOut: a target was not ready"})])
    ended = run_ended(store, {"status": "FAILED", "name": run_id, "input": json.dumps({"run_id": run_id})},
                      InlineTeardowns(lambda s: None))
    assert ended["status"] == "failed" and [t["action"] for t in ended["teardown"]] == ["nothing to delete"] * 2
    assert [e["type"] for e in store.read(run_id)].count("RunFailed") == 1


def test_a_distributed_map_child_that_failed_is_not_the_run(store):
    """A failed cell of a large plan is a child execution of the run's state machine (<machine>/<map run>): if its
    end ever reached the handler, the run (still going) gets no end and nothing is torn down."""
    run_id = "20261126T231500Z-fa0007"
    requested(store, run_id)
    create_cluster(run_id)
    detail = {"status": "FAILED", "name": "0b5c7f2e-child",
              "stateMachineArn": f"arn:aws:states:{REGION}:{DEFAULT_ACCOUNT_ID}:stateMachine:bb-run/RunCellsDistributed",
              "input": json.dumps({"run_id": run_id, "cell": {}, "targets": {}})}
    assert run_ended(store, detail, InlineTeardowns(lambda s: None))["ignored"]
    assert store.read(run_id, prefix="90#run#end") == [] and resource_name(run_id, "kafka") in clusters()


def test_the_ending_rule_and_a_cancel_start_one_teardown_execution(store):
    machine = teardown_machine()
    run_id = "20261126T231500Z-ab0003"
    spec = requested(store, run_id)
    teardowns = StepFunctionsTeardowns(boto3.client("stepfunctions"), machine)
    first = teardowns.start(run_id, spec)
    again = teardowns.start(run_id, spec)  # the same name and input: Step Functions starts nothing new
    assert again["execution"] == first["execution"]
    assert [e["executionArn"] for e in boto3.client("stepfunctions").list_executions(stateMachineArn=machine)[
        "executions"]] == [first["execution"]]
    existing = validate({**REQUEST, "targets": {"kafka": {"bootstrap_servers": "10.0.0.1:9092"},
                                                 "redis-streams": {"host": "10.0.0.2", "port": 6379}}})
    assert teardowns.start("20261126T231500Z-ab0033", existing)["execution"] is None  # nothing was provisioned
    described = boto3.client("stepfunctions").describe_execution(executionArn=first["execution"])
    assert json.loads(described["input"]) == {"run": {"run_id": run_id, "spec": spec}}


def test_cancel_stops_the_execution_stores_the_end_and_hands_teardown_over(store):
    """The API's cancel in AWS: StopExecution, RunCompleted(cancelled), and the teardown state machine started for
    the run; nothing is deleted within the request (a cluster still creating would take longer than its 29 s)."""
    sfn = boto3.client("stepfunctions")
    run_machine = sfn.create_state_machine(name="bb-run", definition=json.dumps(
        {"StartAt": "W", "States": {"W": {"Type": "Wait", "Seconds": 3600, "End": True}}}),
        roleArn=f"arn:aws:iam::{DEFAULT_ACCOUNT_ID}:role/bb-run")["stateMachineArn"]
    machine = teardown_machine()
    run_id = "20261126T231500Z-ca0004"
    spec = requested(store, run_id)
    arn = create_cluster(run_id, "CREATING")
    starter = StepFunctionsStarter(sfn, run_machine, store, teardowns=StepFunctionsTeardowns(sfn, machine))
    starter.start(REQUEST, None, run_id)
    starter.cancel(run_id, REQUEST)
    assert starter.execution(run_id).cancelled
    end = store.read(run_id, prefix="90#run#end")[0]
    assert end["type"] == "RunCompleted" and end["data"]["status"] == "cancelled"
    [teardown] = sfn.list_executions(stateMachineArn=machine)["executions"]
    assert teardown["name"] == f"{run_id}-teardown"
    handed = json.loads(sfn.describe_execution(executionArn=teardown["executionArn"])["input"])["run"]
    assert handed["run_id"] == run_id and handed["spec"]["brokers"] == spec["brokers"]
    assert kafka_backends[DEFAULT_ACCOUNT_ID][REGION].clusters[arn].state == "CREATING"  # left to the teardown machine


# -- the sweeper ---------------------------------------------------------------------------------------------------


def launch(run_id: str | None) -> str:
    ec2 = boto3.client("ec2")
    tags = [{"ResourceType": "instance", "Tags": [{"Key": "brokerbench:run", "Value": run_id}]}] if run_id else []
    return ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1, TagSpecifications=tags)["Instances"][0]["InstanceId"]


def instance_states() -> dict[str, str]:
    reservations = boto3.client("ec2").describe_instances()["Reservations"]
    return {i["InstanceId"]: i["State"]["Name"] for r in reservations for i in r["Instances"]}


def test_the_sweeper_deletes_what_an_ended_run_left_and_nothing_else(store):
    ended, going, kept, unknown = ("20261126T200000Z-e0d001", "20261126T230000Z-a00002", "20261126T200000Z-c00003",
                                   "20261126T200000Z-d00004")
    requested(store, ended)
    store.append([run_completed_event(ended, "completed", 2, 0)])
    requested(store, going)
    requested(store, kept, keep_targets=True)
    store.append([run_completed_event(kept, "completed", 2, 0)])
    for run_id in (ended, going, kept, unknown):
        create_cluster(run_id)
        create_group(run_id)
    create_cluster(ended, name="team-cluster", tagged=False)  # not ours: no bb- name, no tag
    still_creating = create_group(ended, "creating", name=f"bb-{ended.lower()}-redis2")
    workers = {run_id: launch(run_id) for run_id in (ended, going)}
    untagged = launch(None)

    swept = Sweeper(store, [msk(), elasticache()], boto3.client("ec2")).sweep()

    deleted = {(d["kind"], d["name"]) for d in swept["deleted"]}
    assert deleted == {("msk", resource_name(ended, "kafka")), ("elasticache", resource_name(ended, "redis-streams")),
                       ("ec2", workers[ended])}
    assert {d["run_id"] for d in swept["deleted"]} == {ended}
    left = {(item["kind"], item["run_id"]): item["reason"] for item in swept["left"]}
    assert "still going" in left[("msk", going)] and "still going" in left[("ec2", going)]
    assert "keep_targets" in left[("msk", kept)] and "no run of this id" in left[("elasticache", unknown)]
    assert "creating" in next(i["reason"] for i in swept["left"] if i["name"] == still_creating)
    # What AWS now holds: the ended run's cluster gone, its group deleting, its worker terminating; the rest as it was.
    assert resource_name(ended, "kafka") not in clusters() and "team-cluster" in clusters()
    assert {resource_name(r, "kafka") for r in (going, kept, unknown)} <= set(clusters())
    assert groups()[resource_name(ended, "redis-streams")] == "deleting" and groups()[still_creating] == "creating"
    assert all(groups()[resource_name(r, "redis-streams")] == "available" for r in (going, kept, unknown))
    states = instance_states()
    assert states[workers[ended]] in ("shutting-down", "terminated")
    assert states[workers[going]] == "running" and states[untagged] == "running"


# -- the Lambda entry points, as EventBridge invokes them ----------------------------------------------------------


def test_the_run_ended_and_sweeper_handlers_as_eventbridge_invokes_them(store, monkeypatch):
    """handlers/run_ended.py with an "Execution Status Change" event of a console stop (ABORTED) starts the
    teardown state machine for the run; handlers/sweep_targets.py with a scheduled event deletes the ended run's
    cluster and reports it."""
    from brokerbench.local.workflow import _LambdaContext
    from handlers import run_ended as run_ended_handler
    from handlers import sweep_targets

    machine = teardown_machine()
    monkeypatch.setenv("BROKERBENCH_EVENTS_TABLE", store.table)
    monkeypatch.setenv("BROKERBENCH_TEARDOWN_MACHINE_ARN", machine)
    run_id = "20261126T232000Z-ab0005"
    requested(store, run_id)
    create_cluster(run_id)
    event = {"version": "0", "source": "aws.states", "detail-type": "Step Functions Execution Status Change",
             "detail": {"executionArn": f"arn:aws:states:{REGION}:{DEFAULT_ACCOUNT_ID}:execution:bb-run:{run_id}",
                        "stateMachineArn": f"arn:aws:states:{REGION}:{DEFAULT_ACCOUNT_ID}:stateMachine:bb-run",
                        "name": run_id, "status": "ABORTED", "input": json.dumps({"request": REQUEST, "run_id": run_id}),
                        "error": None, "cause": None}}
    ended = run_ended_handler.lambda_handler(event, _LambdaContext("local:run_ended"))
    assert ended["status"] == "cancelled" and ended["teardown"]["execution"].endswith(f":{run_id}-teardown")
    sfn = boto3.client("stepfunctions")
    assert [e["name"] for e in sfn.list_executions(stateMachineArn=machine)["executions"]] == [f"{run_id}-teardown"]

    swept = sweep_targets.lambda_handler({"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}},
                                         _LambdaContext("local:sweep_targets"))
    assert [(d["kind"], d["name"], d["run_id"]) for d in swept["deleted"]] == [
        ("msk", resource_name(run_id, "kafka"), run_id)]
    assert clusters() == {}


def test_a_delete_the_sweeper_is_refused_is_reported_and_the_others_still_go(store):
    ended = "20261126T200000Z-e0d006"
    requested(store, ended)
    store.append([run_completed_event(ended, "completed", 2, 0)])
    create_cluster(ended)
    worker = launch(ended)
    ec2 = boto3.client("ec2")
    with Stubber(ec2) as stub:  # EC2 refuses the termination (an IAM condition, say); MSK still deletes
        stub.add_response("describe_instances", {"Reservations": [{"Instances": [
            {"InstanceId": worker, "State": {"Name": "running"}, "Tags": [{"Key": "brokerbench:run", "Value": ended}]}]}]})
        stub.add_client_error("terminate_instances", "UnauthorizedOperation", expected_params={"InstanceIds": [worker]})
        swept = Sweeper(store, [msk()], ec2).sweep()
    assert [(d["kind"], d["run_id"]) for d in swept["deleted"]] == [("msk", ended)]
    assert swept["left"] == []
    [refused] = swept["failed"]
    assert (refused["action"], refused["kind"], refused["name"], refused["run_id"]) == ("delete", "ec2", worker, ended)
    assert "UnauthorizedOperation" in refused["reason"]


# -- no single failure stops the sweep -----------------------------------------------------------------------------


def ended_run(store, run_id: str) -> None:
    requested(store, run_id)
    store.append([run_completed_event(run_id, "completed", 2, 0)])


def test_a_provider_whose_listing_fails_is_reported_and_the_others_are_still_swept(store):
    """moto for MSK and EC2; botocore's Stubber for ElastiCache, which answers DescribeReplicationGroups with
    AccessDenied (moto has no IAM refusals to play). The MSK cluster and the EC2 worker of the ended run are still
    deleted, and the listing failure is reported with the provider and ElastiCache's own error."""
    run_id = "20261126T200000Z-e0d010"
    ended_run(store, run_id)
    create_cluster(run_id)
    worker = launch(run_id)
    cache = boto3.client("elasticache")
    with Stubber(cache) as stub:
        stub.add_client_error("describe_replication_groups", "AccessDenied", "not authorized to perform "
                              "elasticache:DescribeReplicationGroups", http_status_code=403)
        refused = ElastiCacheTargets(cache, None, auth_secret_arn="", subnet_group="", security_groups=[])
        swept = Sweeper(store, [refused, msk()], boto3.client("ec2")).sweep()
        stub.assert_no_pending_responses()
    assert {(d["kind"], d["name"]) for d in swept["deleted"]} == {("msk", resource_name(run_id, "kafka")),
                                                                  ("ec2", worker)}
    [failed] = swept["failed"]
    assert (failed["action"], failed["kind"], failed["name"]) == ("list", "elasticache", None)
    assert "AccessDenied" in failed["reason"] and "DescribeReplicationGroups" in failed["reason"]
    assert clusters() == {} and instance_states()[worker] in ("shutting-down", "terminated")


def test_a_resource_whose_tags_cannot_be_read_is_reported_and_the_next_one_deleted(store):
    """Stubber alone (the order of calls is the point): ElastiCache lists two bb-* groups, refuses the first one's
    tags (a throttle), gives the second's; the second is deleted, the first reported by name."""
    run_id = "20261126T200000Z-e0d011"
    ended_run(store, run_id)
    first, second = "bb-first-redis", resource_name(run_id, "redis-streams")
    cache = boto3.client("elasticache")
    arn = f"arn:aws:elasticache:{REGION}:{DEFAULT_ACCOUNT_ID}:replicationgroup:"
    ec2 = boto3.client("ec2")
    with Stubber(cache) as stub, Stubber(ec2) as ec2_stub:
        stub.add_response("describe_replication_groups", {"ReplicationGroups": [
            {"ReplicationGroupId": first, "Status": "available", "ARN": arn + first},
            {"ReplicationGroupId": second, "Status": "available", "ARN": arn + second}]})
        stub.add_client_error("list_tags_for_resource", "Throttling", expected_params={"ResourceName": arn + first})
        stub.add_response("list_tags_for_resource", {"TagList": [{"Key": "brokerbench:run", "Value": run_id}]},
                          expected_params={"ResourceName": arn + second})
        stub.add_response("delete_replication_group", {"ReplicationGroup": {"ReplicationGroupId": second,
                                                                            "Status": "deleting"}},
                          expected_params={"ReplicationGroupId": second})
        ec2_stub.add_response("describe_instances", {"Reservations": []})
        provider = ElastiCacheTargets(cache, None, auth_secret_arn="", subnet_group="", security_groups=[])
        swept = Sweeper(store, [provider], ec2).sweep()
        stub.assert_no_pending_responses()
    assert [(d["name"], d["outcome"]) for d in swept["deleted"]] == [(second, DELETING)]
    [failed] = swept["failed"]
    assert (failed["action"], failed["kind"], failed["name"]) == ("list", "elasticache", first)
    assert "Throttling" in failed["reason"]


def test_a_run_whose_end_was_never_stored_is_swept_after_its_deadline_and_not_before(store):
    """moto (MSK, ElastiCache, EC2, DynamoDB). A run with no end stored: one second before its deadline its cluster,
    group and worker stay ("still going"); one second after, they are deleted and the run is given a RunFailed
    that names the deadline. The deadline is checked by hand: requested at + provision.timeout_s (3,600 s, the
    default) + twice the plan's estimate + the teardown loop's 5,400 s + 3,600 s."""
    from datetime import datetime

    from brokerbench.workflow.sweep import run_deadline

    run_id = "20261126T200000Z-0a0012"
    spec = requested(store, run_id)
    create_cluster(run_id)
    group = create_group(run_id)
    worker = launch(run_id)
    header = store.read(run_id, prefix="00#run")
    at = datetime.fromisoformat(header[0]["at"].replace("Z", "+00:00")).timestamp()
    estimate = plan(spec)["estimated_s"]
    assert estimate > 0 and spec["provision"]["timeout_s"] == 3600
    deadline = at + 3600 + 2 * estimate + 5400 + 3600
    assert run_deadline(header) == pytest.approx(deadline)

    early = Sweeper(store, [msk(), elasticache()], boto3.client("ec2"), now=lambda: deadline - 1).sweep()
    assert early["deleted"] == [] and early["failed"] == []
    assert {i["kind"] for i in early["left"]} == {"msk", "elasticache", "ec2"}
    assert all("still going" in i["reason"] for i in early["left"])
    assert store.read(run_id, prefix="90#run#end") == [] and resource_name(run_id, "kafka") in clusters()

    late = Sweeper(store, [msk(), elasticache()], boto3.client("ec2"), now=lambda: deadline + 1).sweep()
    assert {(d["kind"], d["name"]) for d in late["deleted"]} == {
        ("msk", resource_name(run_id, "kafka")), ("elasticache", group), ("ec2", worker)}
    [end] = store.read(run_id, prefix="90#run#end")
    assert end["type"] == "RunFailed" and "deadline" in end["data"]["reason"]
    assert clusters() == {} and groups()[group] == "deleting"


def test_the_sweeper_drains_the_run_ended_dead_letters(store):
    """moto (SQS, Step Functions, MSK, DynamoDB). The RunEnded dead-letter queue holds what RunEnded never handled:
    Lambda's record of an invocation that failed for good (the function's on-failure destination: the event under
    requestPayload), EventBridge's undelivered event itself (the rule's dead-letter queue), and a message that is
    neither. The sweep stores both runs' ends, starts their teardown executions, deletes their clusters (their end
    now stored) and the two handled messages; the third stays in the queue and is reported."""
    sqs = boto3.client("sqs")
    url = sqs.create_queue(QueueName="bb-run-ended-dlq")["QueueUrl"]
    machine = teardown_machine()
    stopped, failed_run = "20261126T232000Z-ab0013", "20261126T232000Z-fa0013"
    for run_id in (stopped, failed_run):
        requested(store, run_id)
        create_cluster(run_id)

    def ending(run_id, status):
        return {"version": "0", "source": "aws.states", "detail-type": "Step Functions Execution Status Change",
                "detail": {"name": run_id, "status": status, "input": json.dumps({"request": REQUEST, "run_id": run_id}),
                           "stateMachineArn": f"arn:aws:states:{REGION}:{DEFAULT_ACCOUNT_ID}:stateMachine:bb-run",
                           "error": "States.Runtime" if status == "FAILED" else None, "cause": None}}

    sqs.send_message(QueueUrl=url, MessageBody=json.dumps({
        "version": "1.0", "requestContext": {"condition": "RetriesExhausted", "approximateInvokeCount": 3},
        "requestPayload": ending(stopped, "ABORTED"), "responsePayload": {"errorType": "StoreUnavailable"}}))
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps(ending(failed_run, "FAILED")))
    sqs.send_message(QueueUrl=url, MessageBody="not an event")

    teardowns = StepFunctionsTeardowns(boto3.client("stepfunctions"), machine)
    swept = Sweeper(store, [msk()], boto3.client("ec2"), dead_letters=(sqs, url), teardowns=teardowns).sweep()

    assert {(d["run_id"], d["status"]) for d in swept["drained"]} == {(stopped, "cancelled"), (failed_run, "failed")}
    assert store.read(stopped, prefix="90#run#end")[0]["data"]["status"] == "cancelled"
    assert store.read(failed_run, prefix="90#run#end")[0]["type"] == "RunFailed"
    executions = boto3.client("stepfunctions").list_executions(stateMachineArn=machine)["executions"]
    assert sorted(e["name"] for e in executions) == sorted(f"{r}-teardown" for r in (stopped, failed_run))
    assert {d["run_id"] for d in swept["deleted"]} == {stopped, failed_run} and clusters() == {}
    [bad] = swept["failed"]
    assert bad["action"] == "drain" and "JSONDecodeError" in bad["reason"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesNotVisible",
                                                                        "ApproximateNumberOfMessages"])["Attributes"]
    # the one left (invisible for the 300 s the sweep's receive holds it, then back for the next sweep)
    assert int(attributes["ApproximateNumberOfMessagesNotVisible"]) + int(attributes["ApproximateNumberOfMessages"]) == 1


def test_inline_teardowns_go_on_past_a_target_that_fails(aws, monkeypatch):
    """moto (ElastiCache). The local teardown path (and the one a cancel takes locally): one target's error is
    reported as not deleted, the next target is still torn down."""
    run_id = "20261126T230000Z-aaa014"
    spec = validate(REQUEST)
    real = steps.teardown_target

    def failing_for_kafka(event):
        if event["broker"] == "kafka":
            raise RuntimeError("DeleteCluster: AccessDenied")
        return real(event)

    monkeypatch.setattr(steps, "teardown_target", failing_for_kafka)
    group = create_group(run_id)
    done = InlineTeardowns(deletions_finish).start(run_id, spec)
    assert done[0] == {"broker": "kafka", "action": "not deleted", "done": False,
                       "not_deleted": {"Error": "RuntimeError", "Cause": "DeleteCluster: AccessDenied"}}
    assert done[1]["done"] is True and group not in groups()
