"""The cloud providers' declared access (brokerbench.registry.CloudAccess, each plug-in's cloud_access.py): every
cloud plug-in has one, it covers what the provider does (create, check, tear down, sweep, its fault, its quota),
its resource patterns match the ARNs of what the provider creates, a provider reads no environment variable it does
not declare, and a malformed declaration is refused naming the field. That the CDK app grants and sets exactly the
declarations is tests/infra/test_cdk_app.py's test_each_role_holds_exactly_what_the_providers_declare and
test_functions_get_every_setting_the_code_reads.
"""

import ast
import importlib
import os
import re
import uuid
from fnmatch import fnmatchcase
from pathlib import Path

import boto3
import pytest
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID

from brokerbench.brokers.rabbitmq.cloud import SECRET_PREFIX
from brokerbench import settings
from brokerbench.registry import (ACCESS_ROLES, ANY_RESOURCE, CloudAccess, GeneratedSecret, Grant, Port, SubnetGroup,
                                  plugins)
from brokerbench.targets import resource_name

REGION = "us-east-1"
RUN_ID = "20261129t0400z-abc123"
EVERY_PROVIDER_NEEDS = ("provision", "check", "teardown", "sweep")  # a target that cannot be swept could outlive a run
FILLED = {"partition": "aws", "region": REGION, "account": DEFAULT_ACCOUNT_ID}
GRANT = Grant("check", ("kafka:DescribeClusterV2",), ("clusters",), "cluster ARNs end in a UUID")
TARGETS = ("clusters", "replication-groups", "brokers", "passwords")  # what a run creates, in the declarations
RESOURCES = {"clusters": "arn:{partition}:kafka:{region}:{account}:cluster/bb-*/*"}
SUBNETS = SubnetGroup("subnet_group", "CacheSubnets", "subnets of run-time caches")
SECRET = GeneratedSecret("token", "CacheToken", "the caches' token", length=64, exclude_punctuation=True,
                         why_not_rotated="read only when a run creates its cache")
CORE_SETTINGS = set(re.findall(r"BROKERBENCH_[A-Z0-9_]+", Path(settings.__file__).read_text()))  # not a provider's


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


def provider_files(cloud) -> tuple[list[Path], list[Path]]:
    """(the modules a cloud provider runs: its factory's, its fault hooks', its quota hooks'; every file of the
    packages they are in). A driver's files are in those packages too, but what a driver reads (a named target's
    password_env) is the user's to name, not the deployment's."""
    modules = {cloud.factory.split(":")[0], cloud.fault.hooks if cloud.fault else None,
               *((cloud.quota.need.split(":")[0], cloud.quota.in_use.split(":")[0]) if cloud.quota else ())} - {None}
    runs = sorted(Path(importlib.import_module(m).__file__) for m in modules)
    return runs, sorted(path for folder in {p.parent for p in runs} for path in folder.glob("*.py"))


def environment_reads(path: Path) -> tuple[list[str], list[str]]:
    """(the BROKERBENCH_* names written in the file, the names its environment reads take), each (`file:line`, name);
    a read whose name is a module constant is followed to its value, one it cannot follow is listed by its
    expression in angle brackets."""
    module = importlib.import_module("brokerbench." + ".".join(
        path.relative_to(Path(settings.__file__).parent).with_suffix("").parts))
    tree = ast.parse(path.read_text())
    written, read = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(
                r"BROKERBENCH_[A-Z0-9_]+", node.value):
            written.append((f"{path.name}:{node.lineno}", node.value))
        name = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args and (
                node.func.attr in ("env", "env_list", "getenv")
                or (node.func.attr == "get" and ast.unparse(node.func.value) == "os.environ")):
            name = node.args[0]
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
            name = node.slice
        if name is not None:
            value = (name.value if isinstance(name, ast.Constant) else
                     getattr(module, name.id, None) if isinstance(name, ast.Name) else None)
            read.append((f"{path.name}:{node.lineno}", value if isinstance(value, str) else f"<{ast.unparse(name)}>"))
    return written, read


def test_a_provider_reads_only_the_environment_it_declares():
    """Every environment read in a provider's modules (cloud.py, its faults and quota hooks) names a variable its
    declaration holds (or one of the core's settings), through the declaration's own constant: the name is written
    once, in cloud_access.py. A read the scan cannot follow to a name fails too."""
    for name, cloud in clouds().items():
        declared = set(cloud.access.environment)
        assert declared, name
        runs, packages = provider_files(cloud)
        for path in packages:
            written, read = environment_reads(path)
            twice = [(where, value) for where, value in written if value in declared and path.name != "cloud_access.py"]
            assert not twice, (name, twice)  # a declared name is written once, in the declaration
            if path not in runs:
                continue
            undeclared = [(where, value) for where, value in read if value.startswith(("BROKERBENCH_", "<"))
                          and value not in declared | CORE_SETTINGS]  # the AWS runtime's own (AWS_REGION) pass
            assert not undeclared, (name, undeclared)


def test_a_provider_is_made_from_its_declared_environment_alone(monkeypatch):
    """The factory (what the workflow's target steps call) builds its provider with only the declared variables
    set, and asks the environment for no other of a provider's."""
    for key in [k for k in os.environ if k.startswith("BROKERBENCH_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    asked: list[str] = []

    class Environ(dict):
        def get(self, key, default=None):
            asked.append(key)
            return super().get(key, default)

        def __getitem__(self, key):
            asked.append(key)
            return super().__getitem__(key)

    for name, cloud in clouds().items():
        asked.clear()
        environ = Environ(os.environ)
        environ.update({variable: f"{variable.lower()}-1,{variable.lower()}-2" for variable in cloud.access.environment})
        monkeypatch.setattr(os, "environ", environ)
        provider = importlib.import_module(cloud.factory.split(":")[0])
        made = getattr(provider, cloud.factory.split(":")[1])()
        assert made is not None, name
        theirs = {key for key in asked if key.startswith("BROKERBENCH_")} - CORE_SETTINGS
        assert theirs == set(cloud.access.environment), (name, sorted(theirs))


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
    ({"environment": {"MSK_SUBNETS": "{private_subnets}"}}, "environment.MSK_SUBNETS", "BROKERBENCH_*"),
    ({"environment": {"BROKERBENCH_MSK_SUBNETS": "{subnets}"}}, "environment.BROKERBENCH_MSK_SUBNETS", "subnets"),
    ({"environment": {"BROKERBENCH_MSK_SUBNETS": ""}}, "environment.BROKERBENCH_MSK_SUBNETS", "empty"),
    ({"environment": {"BROKERBENCH_TOKEN": "{token}"}}, "environment.BROKERBENCH_TOKEN", "token"),  # not declared
    ({"resources": {"token": "{token}"}}, "resources.token", "token"),
    ({"shared": (SECRET, SECRET)}, "shared[1].placeholder", "twice"),
    ({"shared": (SubnetGroup("vpc", "CacheSubnets", "d"),)}, "shared[0].placeholder", "'vpc'"),
    ({"shared": (SubnetGroup("subnets", "cache-subnets", "d"),)}, "shared[0].id", "'cache-subnets'"),
    ({"shared": (SubnetGroup("subnets", "CacheSubnets", ""),)}, "shared[0].description", "what it is for"),
    ({"shared": (GeneratedSecret("token", "CacheToken", "d", 8, True, "why"),)}, "shared[0].length", "16-4096"),
    ({"shared": (GeneratedSecret("token", "CacheToken", "d", 64, True, ""),)}, "shared[0].why_not_rotated",
     "rotated"),
    ({"shared": ("a subnet group",)}, "shared[0]", "SubnetGroup"),
])
def test_a_malformed_declaration_is_refused_naming_the_field(change, field, says):
    CloudAccess(resources=RESOURCES, grants=(GRANT,), ports=(Port(9092, 9098, "Kafka"),))  # the unchanged one is fine
    with pytest.raises(ValueError) as refused:
        CloudAccess(**{"resources": RESOURCES, "grants": (GRANT,), **change})
    assert str(refused.value).startswith(field) and says in str(refused.value), str(refused.value)


def test_a_declared_shared_resource_is_a_placeholder_of_its_provider():
    access = CloudAccess(resources={**RESOURCES, "token": "{token}"}, grants=(GRANT,), shared=(SUBNETS, SECRET),
                         environment={"BROKERBENCH_CACHE_SUBNETS": "{subnet_group}", "BROKERBENCH_TOKEN": "{token}",
                                      "BROKERBENCH_CACHE_GROUPS": "{brokers_security_group}"})
    assert access.placeholders()[-2:] == ("subnet_group", "token")


def test_a_role_not_declared_anywhere_is_refused_when_asked_for():
    access = CloudAccess(resources=RESOURCES, grants=(GRANT,))
    assert access.granted("check") == (GRANT,) and access.granted("faults") == ()
    with pytest.raises(ValueError, match="role 'deploy' is not one of provision, check"):
        access.granted("deploy")
