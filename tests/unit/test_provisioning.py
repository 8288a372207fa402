"""Cloud provisioning, launching and callbacks against boto3's request shapes.

AWS control-plane calls (CreateClusterV2, CreateReplicationGroup, RunInstances, SendTaskSuccess,
Publish, PutObject) cannot run on this machine, so these tests use botocore's Stubber: it checks
every request against the service model and the exact parameters we expect, and plays back
responses. Everything else in the workflow runs for real in tests/integration.
"""

import base64
import json
import time

import boto3
import pytest
from botocore.stub import ANY, Stubber

from brokerbench.spec import validate
from brokerbench.targets import ProvisioningError, TransientProvisioningError, resource_name
from brokerbench.brokers.redis_streams.cloud import ElastiCacheTargets
from brokerbench.brokers.kafka.cloud import MskTargets
from brokerbench.workflow.callbacks import StepFunctionsCallbacks
from brokerbench.workflow.fleet import Ec2Fleet, TokenParameters, client_token, encode_job, token_parameter
from brokerbench.workflow.outputs import S3Reports, SnsNotifier

RUN = "20261121T101500Z-abc123"
ARN = "arn:aws:kafka:us-east-1:123456789012:cluster/bb/1"
SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:bb-redis-auth"


def client(service):
    return boto3.client(service, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


def spec(**extra):
    return validate({"brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [100], "formats": ["json"], **extra})


def test_resource_names_are_valid_for_both_services():
    for broker in ("kafka", "redis-streams"):
        name = resource_name(RUN, broker)
        assert len(name) <= 40 and name[0].isalpha() and name == name.lower() and "--" not in name


def test_msk_cluster_is_created_with_tls_and_iam_then_polled_until_active():
    kafka = client("kafka")
    provider = MskTargets(kafka, subnets=["subnet-a", "subnet-b", "subnet-c"], security_groups=["sg-1"])
    with Stubber(kafka) as stub:
        stub.add_response("create_cluster_v2", {"ClusterArn": ARN, "ClusterName": resource_name(RUN, "kafka"),
                                                "State": "CREATING"}, {
            "ClusterName": resource_name(RUN, "kafka"),
            "Tags": {"brokerbench:run": RUN},
            "Provisioned": {
                "KafkaVersion": "3.8.x", "NumberOfBrokerNodes": 3,
                "BrokerNodeGroupInfo": {"InstanceType": "kafka.m7g.large", "ClientSubnets": ["subnet-a", "subnet-b", "subnet-c"],
                                        "SecurityGroups": ["sg-1"], "StorageInfo": {"EbsStorageInfo": {"VolumeSize": 100}}},
                "EncryptionInfo": {"EncryptionInTransit": {"ClientBroker": "TLS", "InCluster": True}},
                "ClientAuthentication": {"Sasl": {"Iam": {"Enabled": True}}, "Unauthenticated": {"Enabled": False}},
            },
        })
        stub.add_response("describe_cluster_v2", {"ClusterInfo": {"State": "CREATING"}}, {"ClusterArn": ARN})
        stub.add_response("describe_cluster_v2", {"ClusterInfo": {
            "State": "ACTIVE", "Provisioned": {
                "CurrentBrokerSoftwareInfo": {"KafkaVersion": "3.8.x"}, "NumberOfBrokerNodes": 3,
                "BrokerNodeGroupInfo": {"InstanceType": "kafka.m7g.large", "ClientSubnets": ["subnet-a"]}}}},
            {"ClusterArn": ARN})
        stub.add_response("get_bootstrap_brokers", {"BootstrapBrokerStringSaslIam": "b-1.bb:9098,b-2.bb:9098"},
                          {"ClusterArn": ARN})
        target = provider.provision(RUN, "kafka", spec(provision={"kafka": {"version": "3.8.x"}}))
        assert (target["ready"], target["resource"]) == (False, ARN)
        waiting = provider.check(target)
        assert waiting["ready"] is False and waiting["timed_out"] is False
        ready = provider.check(waiting)
        stub.assert_no_pending_responses()
    assert ready["ready"] and ready["endpoint"] == {"bootstrap_servers": "b-1.bb:9098,b-2.bb:9098", "auth": "iam",
                                                     "tls": True, "version": "3.8.x",
                                                     "managed": {"service": "msk", "cluster_arn": ARN}}


def test_msk_brokers_not_a_multiple_of_the_client_subnets_are_refused_before_any_call():
    """MSK spreads its brokers evenly over the client subnets (one per AZ): 4 over 3 would be refused by MSK
    after the run had waited for it; here it fails at once, naming the field. (Stubber: no call expected.)"""
    kafka = client("kafka")
    provider = MskTargets(kafka, subnets=["subnet-a", "subnet-b", "subnet-c"], security_groups=["sg-1"])
    with Stubber(kafka) as stub:
        with pytest.raises(ProvisioningError, match=r"provision.kafka.nodes=4: .* multiple of its 3 client subnets"):
            provider.provision(RUN, "kafka", spec(provision={"kafka": {"nodes": 4}}))
        stub.assert_no_pending_responses()


def test_msk_failure_and_timeout_are_reported():
    kafka = client("kafka")
    provider = MskTargets(kafka, subnets=["s"], security_groups=["g"])
    target = {"broker": "kafka", "provider": "msk", "resource": ARN, "ready": False, "timed_out": False,
              "endpoint": None, "started_at": time.time() - 10, "deadline": time.time() - 1}
    with Stubber(kafka) as stub:
        stub.add_response("describe_cluster_v2", {"ClusterInfo": {"State": "CREATING"}}, {"ClusterArn": ARN})
        stub.add_response("describe_cluster_v2", {"ClusterInfo": {"State": "FAILED", "StateInfo": {"Message": "no capacity"}}},
                          {"ClusterArn": ARN})
        stub.add_client_error("create_cluster_v2", "TooManyRequestsException")
        assert provider.check(target)["timed_out"] is True
        with pytest.raises(ProvisioningError, match="no capacity"):
            provider.check(target)
        with pytest.raises(TransientProvisioningError):
            provider.provision(RUN, "kafka", spec())


def test_msk_teardown_finds_the_cluster_by_name():
    kafka = client("kafka")
    name = resource_name(RUN, "kafka")
    with Stubber(kafka) as stub:
        stub.add_response("list_clusters_v2", {"ClusterInfoList": [{"ClusterArn": ARN, "ClusterName": name, "State": "ACTIVE"}]},
                          {"ClusterNameFilter": name})
        stub.add_response("delete_cluster", {"ClusterArn": ARN, "State": "DELETING"}, {"ClusterArn": ARN})
        stub.add_response("list_clusters_v2", {"ClusterInfoList": []}, {"ClusterNameFilter": name})
        provider = MskTargets(kafka, subnets=["s"], security_groups=["g"])
        assert provider.teardown(RUN, "kafka", spec())["action"] == f"deleting {name}"
        assert provider.teardown(RUN, "kafka", spec())["action"] == "nothing to delete"
        assert "kept" in provider.teardown(RUN, "kafka", spec(keep_targets=True))["action"]
        stub.assert_no_pending_responses()


def elasticache():
    cache, secrets = client("elasticache"), client("secretsmanager")
    provider = ElastiCacheTargets(cache, secrets, auth_secret_arn=SECRET, subnet_group="bb-subnets",
                                  security_groups=["sg-2"])
    return cache, secrets, resource_name(RUN, "redis-streams"), provider


def expect_group(cache_stub, name: str, token: str, **nodes) -> None:
    """CreateReplicationGroup as the provider must send it (nodes: its NumCacheClusters and failover settings)."""
    cache_stub.add_response("create_replication_group", {"ReplicationGroup": {"ReplicationGroupId": name}}, {
        "ReplicationGroupId": name, "ReplicationGroupDescription": ANY, "Engine": "redis", "EngineVersion": "7.1",
        "CacheNodeType": "cache.r7g.large", **nodes, "TransitEncryptionEnabled": True,
        "AtRestEncryptionEnabled": True, "AuthToken": token, "CacheSubnetGroupName": "bb-subnets",
        "SecurityGroupIds": ["sg-2"], "Tags": [{"Key": "brokerbench:run", "Value": RUN}],
    })


def test_elasticache_group_has_tls_at_rest_encryption_and_an_auth_token_from_secrets_manager():
    cache, secrets, name, provider = elasticache()
    with Stubber(cache) as cache_stub, Stubber(secrets) as secret_stub:
        secret_stub.add_response("get_secret_value", {"SecretString": "s3cret-token-of-32-characters-xx"},
                                 {"SecretId": SECRET})
        expect_group(cache_stub, name, "s3cret-token-of-32-characters-xx", NumCacheClusters=1)
        cache_stub.add_response("describe_replication_groups", {"ReplicationGroups": [{"Status": "creating"}]},
                                {"ReplicationGroupId": name})
        cache_stub.add_response("describe_replication_groups", {"ReplicationGroups": [{
            "Status": "available", "NodeGroups": [{"PrimaryEndpoint": {"Address": "bb.cache.amazonaws.com", "Port": 6379}}]}]},
            {"ReplicationGroupId": name})
        target = provider.provision(RUN, "redis-streams", spec())
        assert provider.check(target)["ready"] is False
        ready = provider.check(target)
    assert ready["endpoint"] == {"host": "bb.cache.amazonaws.com", "port": 6379, "tls": True, "auth_secret_arn": SECRET,
                                 "managed": {"service": "elasticache", "replication_group": name, "node_group": "0001"}}
    assert "s3cret" not in json.dumps(ready)  # the token never travels in the workflow's state


def test_elasticache_group_with_replicas_has_automatic_failover_and_multi_az_and_each_node_priced():
    """provision.redis-streams.nodes 2: a primary and a replica, which a fault's TestFailover needs."""
    cache, secrets, name, provider = elasticache()
    with Stubber(cache) as cache_stub, Stubber(secrets) as secret_stub:
        secret_stub.add_response("get_secret_value", {"SecretString": "t" * 32}, {"SecretId": SECRET})
        expect_group(cache_stub, name, "t" * 32, NumCacheClusters=2, AutomaticFailoverEnabled=True,
                     MultiAZEnabled=True)
        provider.provision(RUN, "redis-streams", spec(provision={"redis-streams": {"nodes": 2}}))
        cache_stub.assert_no_pending_responses()
    from brokerbench.brokers.redis_streams.prices import price, prices

    [item], _ = price("redis-streams", {"nodes": 2}, 1800)
    assert "2 nodes" in item["what"] and item["quantity"] == 2  # half an hour of two nodes: two billed node-hours
    assert item["unit_price"] == prices()["node_hour"]["cache.r7g.large"]


def test_elasticache_teardown_and_failures():
    """Teardown's every state, from ElastiCache's answers (tests/unit/test_teardown.py runs them against moto)."""
    cache, secrets = client("elasticache"), client("secretsmanager")
    name = resource_name(RUN, "redis-streams")
    provider = ElastiCacheTargets(cache, secrets, auth_secret_arn=SECRET, subnet_group="g", security_groups=["s"])
    with Stubber(cache) as stub:
        described = {"ReplicationGroupId": name}
        stub.add_response("describe_replication_groups", {"ReplicationGroups": [{"Status": "available"}]}, described)
        stub.add_response("delete_replication_group", {"ReplicationGroup": {"ReplicationGroupId": name}},
                          {"ReplicationGroupId": name})
        stub.add_response("describe_replication_groups", {"ReplicationGroups": [{"Status": "deleting"}]}, described)
        stub.add_client_error("describe_replication_groups", "ReplicationGroupNotFoundFault", expected_params=described)
        stub.add_response("describe_replication_groups", {"ReplicationGroups": [{"Status": "create-failed"}]},
                          {"ReplicationGroupId": name})
        assert provider.teardown(RUN, "redis-streams", spec()) == {"broker": "redis-streams", "state": "deleting",
                                                                    "action": f"deleting {name}"}
        assert provider.teardown(RUN, "redis-streams", spec())["state"] == "deleting"
        assert provider.teardown(RUN, "redis-streams", spec()) == {"broker": "redis-streams", "state": "gone",
                                                                    "action": "nothing to delete"}
        with pytest.raises(ProvisioningError, match="failed to create"):
            provider.check({"resource": name})
        stub.assert_no_pending_responses()


def test_ec2_worker_is_launched_with_the_job_in_user_data_and_the_task_token_in_ssm():
    ec2, ssm = client("ec2"), client("ssm")
    fleet = Ec2Fleet(ec2, launch_template="bb-worker", subnet="subnet-w", environment={"BROKERBENCH_EVENTS_TABLE": "t"},
                     tokens=TokenParameters(ssm, "/bb/task-tokens"))
    job = {"run_id": RUN, "cell": {"cell_id": "kafka.json.batch.1024B.100mps.r0"}, "targets": {}}
    parameter = token_parameter("/bb/task-tokens", client_token(RUN, job["cell"]["cell_id"], 0), "TOKEN-1")
    with Stubber(ec2) as stub, Stubber(ssm) as ssm_stub:
        ssm_stub.add_response("put_parameter", {"Version": 1}, {"Name": parameter, "Value": "TOKEN-1",
                                                               "Type": "SecureString", "Overwrite": True,
                                                               "Tier": "Standard", "Description": ANY})
        stub.add_response("run_instances", {"Instances": [{"InstanceId": "i-0123"}]}, {
            "MinCount": 1, "MaxCount": 1, "ClientToken": client_token(RUN, job["cell"]["cell_id"], 0),
            "LaunchTemplate": {"LaunchTemplateName": "bb-worker", "Version": "$Latest"},
            "SubnetId": "subnet-w", "UserData": ANY, "InstanceInitiatedShutdownBehavior": "terminate",
            "MetadataOptions": {"HttpTokens": "required"}, "TagSpecifications": ANY,
        })
        assert fleet.launch(job, "TOKEN-1") == {"kind": "ec2", "instance_id": "i-0123", "attempt": 0}
    from brokerbench.workflow.fleet import user_data

    script = user_data(job, parameter, {"BROKERBENCH_EVENTS_TABLE": "t"})
    assert "TOKEN-1" not in script and f"TOKEN_PARAMETER={parameter}\n" in script
    assert encode_job(job) in script and "shutdown -h now" in script
    assert json.loads(base64.b64decode(encode_job(job))) == job


def test_task_token_callbacks_and_outputs_use_the_service_calls():
    sfn, sns, s3 = client("stepfunctions"), client("sns"), client("s3")
    with Stubber(sfn) as sfn_stub, Stubber(sns) as sns_stub, Stubber(s3) as s3_stub:
        sfn_stub.add_response("send_task_success", {}, {"taskToken": "T", "output": '{"status": "completed"}'})
        sfn_stub.add_response("send_task_failure", {}, {"taskToken": "T", "error": "WorkerFailed", "cause": "boom"})
        sns_stub.add_response("publish", {"MessageId": "m-1"}, {"TopicArn": "arn:aws:sns:us-east-1:1:bb", "Subject": ANY,
                                                                "Message": ANY})
        s3_stub.add_response("put_object", {}, {"Bucket": "bb-reports", "Key": f"reports/{RUN}/results.json",
                                                "Body": b"{}", "ContentType": "application/json"})
        callbacks = StepFunctionsCallbacks(sfn)
        callbacks.success("T", {"status": "completed"})
        callbacks.failure("T", "WorkerFailed", "boom")
        assert SnsNotifier(sns, "arn:aws:sns:us-east-1:1:bb").publish(RUN, "subject", {"a": 1}) == "m-1"
        assert S3Reports(s3, "bb-reports").write(RUN, "results.json", "{}") == f"s3://bb-reports/reports/{RUN}/results.json"


def test_s3_reports_read_back_what_a_step_wrote_and_none_when_missing():
    """Aggregate reads CheckRegression's regression.json from the run's outputs."""
    import io

    from botocore.response import StreamingBody

    s3 = client("s3")
    with Stubber(s3) as stub:
        body = b'{"baseline_run_id": null}'
        stub.add_response("get_object", {"Body": StreamingBody(io.BytesIO(body), len(body))},
                          {"Bucket": "bb-reports", "Key": f"reports/{RUN}/regression.json"})
        stub.add_client_error("get_object", "NoSuchKey", http_status_code=404,
                              expected_params={"Bucket": "bb-reports", "Key": f"reports/{RUN}/other.json"})
        reports = S3Reports(s3, "bb-reports")
        assert reports.read(RUN, "regression.json") == '{"baseline_run_id": null}'
        assert reports.read(RUN, "other.json") is None


def test_s3_reports_read_a_denied_key_as_not_published_and_raise_other_errors():
    """Botocore's Stubber: a reader without s3:ListBucket gets AccessDenied (403) for a key that does not exist, as
    the API did for the report of a failed or cancelled run; it reads as not published (the API builds the report
    from the events). Any other error (the bucket gone, throttling) still raises."""
    from botocore.exceptions import ClientError

    s3 = client("s3")
    with Stubber(s3) as stub:
        stub.add_client_error("get_object", "AccessDenied", http_status_code=403,
                              expected_params={"Bucket": "bb-reports", "Key": f"reports/{RUN}/report.html"})
        stub.add_client_error("get_object", "NoSuchBucket", http_status_code=404,
                              expected_params={"Bucket": "bb-reports", "Key": f"reports/{RUN}/report.md"})
        reports = S3Reports(s3, "bb-reports")
        assert reports.read(RUN, "report.html") is None
        with pytest.raises(ClientError, match="NoSuchBucket"):
            reports.read(RUN, "report.md")
        stub.assert_no_pending_responses()
