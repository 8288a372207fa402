"""The cloud providers' declared access (brokerbench.registry.CloudAccess, each plug-in's cloud_access.py): every
cloud plug-in has one, it covers what the provider does (create, check, tear down, sweep, its fault, its quota),
its resource patterns match the ARNs of what the provider creates, and a malformed declaration is refused naming
the field. That the CDK app grants exactly the declarations is tests/infra/test_cdk_app.py's
test_each_role_holds_exactly_what_the_providers_declare.
"""

import uuid
from fnmatch import fnmatchcase

import boto3
import pytest
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID

from brokerbench.brokers.rabbitmq.cloud import SECRET_PREFIX
from brokerbench.registry import ACCESS_ROLES, ANY_RESOURCE, CloudAccess, Grant, Port, plugins
from brokerbench.targets import resource_name

REGION = "us-east-1"
RUN_ID = "20261129t0400z-abc123"
EVERY_PROVIDER_NEEDS = ("provision", "check", "teardown", "sweep")  # a target that cannot be swept could outlive a run
FILLED = {"partition": "aws", "region": REGION, "account": DEFAULT_ACCOUNT_ID}
GRANT = Grant("check", ("kafka:DescribeClusterV2",), ("clusters",), "cluster ARNs end in a UUID")
TARGETS = ("clusters", "replication-groups", "brokers", "passwords")  # what a run creates, in the declarations
RESOURCES = {"clusters": "arn:{partition}:kafka:{region}:{account}:cluster/bb-*/*"}


def clouds():
    return {name: p.cloud for name, p in plugins().items() if p.cloud is not None}


def pattern(access: CloudAccess, name: str) -> str:
    return access.resources[name].format(**FILLED)


def test_every_cloud_plugin_declares_its_access_for_every_step_and_its_ports():
    assert set(clouds()) == {"kafka", "rabbitmq-quorum", "redis-streams"}
    for name, cloud in clouds().items():
        assert cloud.access is not None, name
        roles = {g.role for g in cloud.access.grants}
        assert set(EVERY_PROVIDER_NEEDS) <= roles <= set(ACCESS_ROLES), (name, roles)
        assert cloud.access.ports, name


def test_a_providers_fault_call_is_granted_to_the_faults_role_on_tagged_resources_only():
    for name, cloud in clouds().items():
        granted = [g for g in cloud.access.granted("faults") if cloud.fault.call in g.actions]
        assert granted and all(g.tagged == "resource" and ANY_RESOURCE not in g.resources for g in granted), name
        # ...and no other role may make it
        others = [g.role for g in cloud.access.grants if cloud.fault.call in g.actions and g.role != "faults"]
        assert others == [], name


def test_a_provider_with_a_quota_declares_what_admission_counts_with():
    for name, cloud in clouds().items():
        counted = {a.split(":")[0] for g in cloud.access.granted("admission") for a in g.actions}
        assert cloud.quota is not None and counted == {cloud.quota.client}, (name, counted)


def test_what_acts_on_a_runs_target_is_held_to_the_run_tag():
    """Creating a target (or its password) needs the tag in the request; deleting, rebooting or failing it over
    needs the tag on it."""
    held = 0
    for name, cloud in clouds().items():
        for grant in cloud.access.grants:
            if not set(grant.resources) & set(TARGETS):
                continue
            for verb in (action.split(":")[1] for action in grant.actions):
                if verb.startswith(("Delete", "Reboot", "TestFailover")):
                    assert grant.tagged == "resource", (name, grant)
                    held += 1
                if verb.startswith("Create"):
                    assert grant.tagged == "request", (name, grant)
                    held += 1
    assert held >= 3 * 4  # each provider creates, tears down, sweeps and reboots its target


def test_the_declared_patterns_match_the_arns_of_what_the_providers_create(monkeypatch):
    """Each target the providers name (targets.resource_name, the Amazon MQ password's SECRET_PREFIX) falls under the
    pattern its provider's teardown deletes with, and a name without the bb- prefix does not. moto assigns the ARNs
    as ElastiCache and Secrets Manager do (the secret's with its random suffix); an MSK cluster's and an Amazon MQ
    broker's it gives without the name, so those are written in the forms the services document
    (cluster/<name>/<uuid>-<n>, broker:<name>:<id>)."""
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    access = {name: cloud.access for name, cloud in clouds().items()}
    with mock_aws():
        def cluster(name):
            return f"arn:aws:kafka:{REGION}:{DEFAULT_ACCOUNT_ID}:cluster/{name}/{uuid.uuid4()}-3"

        def group(name):
            return boto3.client("elasticache", region_name=REGION).create_replication_group(
                ReplicationGroupId=name, ReplicationGroupDescription="d", Engine="redis",
                CacheNodeType="cache.r7g.large", NumCacheClusters=1)["ReplicationGroup"]["ARN"]

        def broker(name):
            return f"arn:aws:mq:{REGION}:{DEFAULT_ACCOUNT_ID}:broker:{name}:b-{uuid.uuid4()}"

        def secret(name):
            return boto3.client("secretsmanager", region_name=REGION).create_secret(
                Name=SECRET_PREFIX + name, SecretString="x")["ARN"]

        cases = [("kafka", "clusters", cluster), ("redis-streams", "replication-groups", group),
                 ("rabbitmq-quorum", "brokers", broker), ("rabbitmq-quorum", "passwords", secret)]
        for broker_name, resource, create in cases:
            declared = pattern(access[broker_name], resource)
            made = create(resource_name(RUN_ID, broker_name))
            assert fnmatchcase(made, declared), (made, declared)
            teardown = [g for g in access[broker_name].granted("teardown") if resource in g.resources]
            assert teardown, (broker_name, resource)
            other = create(f"team-{resource}-{broker_name.split('-')[0]}")
            assert not fnmatchcase(other, declared), (other, declared)


@pytest.mark.parametrize("change, field, says", [
    ({"grants": (Grant("deploy", GRANT.actions, GRANT.resources, GRANT.reason),)}, "grants[0].role", "'deploy'"),
    ({"grants": (Grant("check", ("DescribeClusterV2",), GRANT.resources, GRANT.reason),)}, "grants[0].actions",
     "service:Action"),
    ({"grants": (Grant("check", GRANT.actions, ("topics",), GRANT.reason),)}, "grants[0].resources", "topics"),
    ({"grants": (Grant("check", GRANT.actions, (), GRANT.reason),)}, "grants[0].resources", "at least one"),
    ({"grants": (Grant("check", GRANT.actions, GRANT.resources),)}, "grants[0].reason", "wildcard"),
    ({"grants": (Grant("check", GRANT.actions, (ANY_RESOURCE,)),)}, "grants[0].reason", "wildcard"),
    ({"grants": (Grant("check", GRANT.actions, GRANT.resources, GRANT.reason, tagged="run"),)}, "grants[0].tagged",
     "'run'"),
    ({"grants": (Grant("check", GRANT.actions, GRANT.resources, GRANT.reason,
                       condition={"ArnEquals": {"ec2:Vpc": "vpc/{vpc_id}"}}),)}, "grants[0].condition", "vpc_id"),
    ({"resources": {"clusters": "arn:{partition}:kafka:{zone}:{account}:cluster/bb-*/*"}}, "resources.clusters",
     "zone"),
    ({"ports": (Port(9098, 9092, "Kafka"),)}, "ports[0]", "9098-9092"),
    ({"ports": (Port(0, 0, "Kafka"),)}, "ports[0]", "within 1-65535"),
    ({"ports": (Port(9092, 9098, "Kafka", protocol="sctp"),)}, "ports[0].protocol", "'sctp'"),
    ({"ports": (Port(9092, 9098, ""),)}, "ports[0].description", "9092-9098"),
])
def test_a_malformed_declaration_is_refused_naming_the_field(change, field, says):
    CloudAccess(resources=RESOURCES, grants=(GRANT,), ports=(Port(9092, 9098, "Kafka"),))  # the unchanged one is fine
    with pytest.raises(ValueError) as refused:
        CloudAccess(**{"resources": RESOURCES, "grants": (GRANT,), **change})
    assert str(refused.value).startswith(field) and says in str(refused.value), str(refused.value)


def test_a_role_not_declared_anywhere_is_refused_when_asked_for():
    access = CloudAccess(resources=RESOURCES, grants=(GRANT,))
    assert access.granted("check") == (GRANT,) and access.granted("faults") == ()
    with pytest.raises(ValueError, match="role 'deploy' is not one of provision, check"):
        access.granted("deploy")
