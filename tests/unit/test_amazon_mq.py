"""Amazon MQ for RabbitMQ as a provider (brokers/rabbitmq/cloud.py), like the MSK and ElastiCache ones.

moto (5.2) fakes Amazon MQ and Secrets Manager in-process: its CreateBroker checks the request against the service
model and its brokers are RUNNING at once, and its DeleteBroker removes one at once, so the whole life (password
stored, broker created, endpoint read, broker and password deleted, the sweeper) runs against it. What moto cannot
play — a broker still being created, one that failed, a name conflict on a retried CreateBroker — is played by
botocore's Stubber, which checks each request against the service model too. Never run against real AWS.
"""

import json

import boto3
import pytest
from botocore.stub import ANY, Stubber
from moto import mock_aws

from brokerbench.brokers.rabbitmq import prices
from brokerbench.brokers.rabbitmq.cloud import (SECRET_PREFIX, AmazonMqTargets, broker_name, deployment,
                                                 PROVISION_PROPERTIES)
from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.events.run import run_completed_event, run_requested_events
from brokerbench.plan import plan
from brokerbench.spec import validate
from brokerbench.targets import DELETING, GONE, KEPT, NOT_DELETABLE, ProvisioningError
from brokerbench.workflow.sweep import Sweeper

REGION = "us-east-1"
RUN = "20261127T030000Z-a1b2c3"
BROKER = "rabbitmq-quorum"  # the row's name: any RabbitMQ plug-in's provision.<broker> is read the same way


def spec(provision: dict | None = None, **extra) -> dict:
    return {"provision": {"timeout_s": 3600, **({BROKER: provision} if provision is not None else {})}, **extra}


@pytest.fixture
def aws(monkeypatch):
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION}.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "BROKERBENCH_DYNAMODB_ENDPOINT"):
        monkeypatch.delenv(key, raising=False)
    with mock_aws():
        yield


def provider(subnets=("subnet-a", "subnet-b", "subnet-c")) -> AmazonMqTargets:
    return AmazonMqTargets(boto3.client("mq"), boto3.client("secretsmanager"), subnets=list(subnets),
                           security_groups=["sg-1"])


def captured_requests(targets: AmazonMqTargets) -> list[dict]:
    """Every CreateBroker request the provider sends, as sent (moto does not echo the users' passwords back)."""
    sent: list[dict] = []
    targets.client.meta.events.register("provide-client-params.mq.CreateBroker",
                                        lambda params, **_: sent.append(dict(params)))
    return sent


def test_a_single_instance_broker_over_tls_with_a_password_kept_only_in_secrets_manager(aws):
    targets = provider()
    sent = captured_requests(targets)
    created = targets.provision(RUN, BROKER, spec({"deployment": "single-instance"}))
    [request] = sent
    assert request["EngineType"] == "RABBITMQ" and request["DeploymentMode"] == "SINGLE_INSTANCE"
    assert request["SubnetIds"] == ["subnet-a"] and request["PubliclyAccessible"] is False
    assert request["HostInstanceType"] == "mq.m5.large" and request["EngineVersion"] == "3.13"
    assert request["Tags"]["brokerbench:run"] == RUN and request["BrokerName"] == broker_name(RUN, BROKER)
    [user] = request["Users"]
    stored = json.loads(boto3.client("secretsmanager").get_secret_value(SecretId=created["secret_arn"])["SecretString"])
    assert stored == {"username": user["Username"], "password": user["Password"]}
    assert len(user["Password"]) >= 12 and not set(",:=") & set(user["Password"])  # Amazon MQ's password rules
    tags = boto3.client("secretsmanager").describe_secret(SecretId=created["secret_arn"])["Tags"]
    assert {"Key": "brokerbench:run", "Value": RUN} in tags

    ready = targets.check(created)
    assert ready["ready"] is True
    endpoint = ready["endpoint"]
    assert endpoint["tls"] is True and endpoint["amqp_port"] == 5671 and endpoint["host"]
    assert endpoint["management_url"].startswith("https://")  # the console URL: a quorum queue's count
    assert endpoint["password_secret_arn"] == created["secret_arn"] and endpoint["username"] == user["Username"]
    assert user["Password"] not in json.dumps(ready)  # the target (stored with the run) names the secret only


def test_a_cluster_deployment_spans_every_subnet_and_is_3_nodes(aws):
    targets = provider()
    sent = captured_requests(targets)
    targets.provision(RUN, BROKER, spec({"nodes": 3, "instance_type": "mq.m5.xlarge"}))
    assert sent[0]["DeploymentMode"] == "CLUSTER_MULTI_AZ" and sent[0]["SubnetIds"] == ["subnet-a", "subnet-b", "subnet-c"]
    assert deployment(BROKER, {"deployment": "cluster"}) == ("CLUSTER_MULTI_AZ", 3)
    assert deployment(BROKER, {}) == ("SINGLE_INSTANCE", 1)


@pytest.mark.parametrize("provision, field", [
    ({"deployment": "cluster", "nodes": 1}, f"provision.{BROKER}.nodes"),
    ({"nodes": 3, "instance_type": "mq.t3.micro"}, f"provision.{BROKER}.instance_type"),
    ({"instance_type": "mq.m5.24xlarge"}, f"provision.{BROKER}.instance_type"),
    ({"deployment": "active-standby"}, f"provision.{BROKER}.deployment"),
])
def test_settings_outside_the_spend_guard_are_refused_naming_the_field_before_any_call(provision, field):
    targets = AmazonMqTargets(boto3.client("mq", region_name=REGION), boto3.client("secretsmanager", region_name=REGION),
                              subnets=["subnet-a", "subnet-b"], security_groups=["sg-1"])
    with Stubber(targets.client), Stubber(targets.secrets):  # no call expected: a call would fail the test
        with pytest.raises(ProvisioningError, match=field):
            targets.provision(RUN, BROKER, spec(provision))


def test_a_cluster_with_one_subnet_is_refused(aws):
    with pytest.raises(ProvisioningError, match="deployment: a cluster needs subnets in 2"):
        provider(subnets=["subnet-a"]).provision(RUN, BROKER, spec({"deployment": "cluster"}))


def test_the_provision_schema_fragment_allows_only_priced_instance_types():
    assert PROVISION_PROPERTIES["instance_type"]["enum"] == prices.INSTANCE_TYPES
    assert "mq.m5.large" in prices.INSTANCE_TYPES and PROVISION_PROPERTIES["nodes"]["enum"] == [1, 3]


def test_a_retried_provision_reuses_the_runs_password_and_takes_its_own_broker_on_a_conflict(aws):
    first = provider().provision(RUN, BROKER, spec({}))
    stored = boto3.client("secretsmanager").get_secret_value(SecretId=first["secret_arn"])["SecretString"]
    targets = provider()
    name = broker_name(RUN, BROKER)
    with Stubber(targets.client) as stub:
        stub.add_client_error("create_broker", "ConflictException", http_status_code=409,
                              expected_params={**{k: ANY for k in (
                                  "BrokerName", "CreatorRequestId", "EngineType", "EngineVersion", "HostInstanceType",
                                  "DeploymentMode", "PubliclyAccessible", "AutoMinorVersionUpgrade", "SubnetIds",
                                  "SecurityGroups", "Tags")},
                                  "Users": [{"Username": "brokerbench", "Password": json.loads(stored)["password"]}]})
        stub.add_response("list_brokers", {"BrokerSummaries": [
            {"BrokerArn": "arn:aws:mq:us-east-1:123456789012:broker:x", "BrokerId": "b-1", "BrokerName": name,
             "BrokerState": "CREATION_IN_PROGRESS", "DeploymentMode": "SINGLE_INSTANCE", "EngineType": "RABBITMQ"}]},
            {"MaxResults": 100})
        stub.add_response("list_tags", {"Tags": {"brokerbench:run": RUN}},
                          {"ResourceArn": "arn:aws:mq:us-east-1:123456789012:broker:x"})
        again = targets.provision(RUN, BROKER, spec({}))
    assert again["resource"] == "b-1" and again["secret_arn"] == first["secret_arn"]


def test_a_failed_broker_fails_the_run_and_one_being_created_keeps_waiting():
    targets = AmazonMqTargets(boto3.client("mq", region_name=REGION), None, subnets=["subnet-a"],
                              security_groups=["sg-1"])
    current = {"broker": BROKER, "resource": "b-1", "secret_arn": "arn:secret", "ready": False, "deadline": 9e18}
    with Stubber(targets.client) as stub:
        stub.add_response("describe_broker", {"BrokerState": "CREATION_IN_PROGRESS"}, {"BrokerId": "b-1"})
        stub.add_response("describe_broker", {"BrokerState": "CREATION_FAILED"}, {"BrokerId": "b-1"})
        assert targets.check(current)["ready"] is False
        with pytest.raises(ProvisioningError, match="failed to create"):
            targets.check(current)


def test_teardown_deletes_the_broker_and_its_password_and_then_finds_nothing(aws):
    targets = provider()
    created = targets.provision(RUN, BROKER, spec({}))
    assert targets.teardown(RUN, BROKER, spec(keep_targets=True))["state"] == KEPT
    assert targets.teardown(RUN, BROKER, spec())["state"] == DELETING
    assert boto3.client("mq").list_brokers()["BrokerSummaries"] == []
    with pytest.raises(boto3.client("secretsmanager").exceptions.ResourceNotFoundException):
        boto3.client("secretsmanager").describe_secret(SecretId=created["secret_arn"])
    assert targets.teardown(RUN, BROKER, spec())["state"] == GONE


def test_a_broker_still_being_created_is_not_deletable_yet_and_keeps_its_password():
    targets = AmazonMqTargets(boto3.client("mq", region_name=REGION),
                              boto3.client("secretsmanager", region_name=REGION), subnets=["subnet-a"],
                              security_groups=["sg-1"])
    name = broker_name(RUN, BROKER)
    with Stubber(targets.client) as stub, Stubber(targets.secrets):  # no secret call: the password stays
        stub.add_response("list_brokers", {"BrokerSummaries": [
            {"BrokerArn": "arn:aws:mq:us-east-1:123456789012:broker:x", "BrokerId": "b-1", "BrokerName": name,
             "BrokerState": "CREATION_IN_PROGRESS", "DeploymentMode": "SINGLE_INSTANCE", "EngineType": "RABBITMQ"}]},
            {"MaxResults": 100})
        assert targets.teardown(RUN, BROKER, spec())["state"] == NOT_DELETABLE


def test_the_sweeper_deletes_an_ended_runs_broker_and_a_password_left_without_one(aws):
    store = DynamoEventStore("bb-mq-events", region=REGION)
    store.ensure_table()
    ended, going = RUN, "20261127T031000Z-d4e5f6"
    for run_id in (ended, going):
        request = validate({"brokers": ["kafka"], "sizes": [1024], "rates": [100], "formats": ["json"]})
        store.append(run_requested_events(run_id, request, plan(request)["cells"], None))
    store.append([run_completed_event(ended, "completed", 1, 0)])
    targets = provider()
    targets.provision(ended, BROKER, spec({}))
    targets.provision(going, BROKER, spec({}))
    orphan = "rabbitmq-streams"  # its broker is gone already, its password secret is not
    targets.provision(ended, orphan, spec())
    boto3.client("mq").delete_broker(BrokerId=next(
        s["BrokerId"] for s in boto3.client("mq").list_brokers()["BrokerSummaries"]
        if s["BrokerName"] == broker_name(ended, orphan)))
    untagged = boto3.client("mq").create_broker(
        BrokerName="team-rabbit", EngineType="RABBITMQ", EngineVersion="3.13", HostInstanceType="mq.m5.large",
        DeploymentMode="SINGLE_INSTANCE", PubliclyAccessible=False, AutoMinorVersionUpgrade=True,
        Users=[{"Username": "team", "Password": "x" * 16}])["BrokerId"]

    swept = Sweeper(store, [targets], boto3.client("ec2")).sweep()

    assert {(d["kind"], d["name"]) for d in swept["deleted"]} == {
        ("amazonmq", broker_name(ended, BROKER)), ("amazonmq", SECRET_PREFIX + broker_name(ended, orphan))}
    assert [(i["name"], "still going" in i["reason"]) for i in swept["left"]] == [(broker_name(going, BROKER), True)]
    names = {s["BrokerName"] for s in boto3.client("mq").list_brokers()["BrokerSummaries"]}
    assert names == {broker_name(going, BROKER), "team-rabbit"} and untagged
    # A broker's password goes at the next sweep after the broker has gone (a deleting broker is still listed).
    secrets = lambda: {s["Name"] for s in boto3.client("secretsmanager").list_secrets()["SecretList"]}  # noqa: E731
    assert secrets() == {SECRET_PREFIX + broker_name(going, BROKER), SECRET_PREFIX + broker_name(ended, BROKER)}
    again = Sweeper(store, [targets], boto3.client("ec2")).sweep()
    assert {d["name"] for d in again["deleted"]} == {SECRET_PREFIX + broker_name(ended, BROKER)}
    assert secrets() == {SECRET_PREFIX + broker_name(going, BROKER)}


def test_the_price_is_instance_hours_of_each_node():
    items, notes = prices.price(BROKER, {"deployment": "cluster", "instance_type": "mq.m5.large"}, 5400)
    [item] = items
    assert item["quantity"] == 3 * 2 and item["unit_price"] == 0.288 and item["cost"] == pytest.approx(1.728)
    assert "3 instances" in item["what"] and "storage" in notes[0].lower()
    single, _ = prices.price(BROKER, {}, 600)
    assert single[0]["quantity"] == 1 and single[0]["cost"] == pytest.approx(0.288)
    missing, notes = prices.price(BROKER, {"instance_type": "mq.x.huge"}, 600)
    assert missing == [] and "no list price" in notes[0]
