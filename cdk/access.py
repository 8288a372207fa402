"""The cloud providers' access, as each plug-in declares it beside its cloud.py (brokerbench.registry.CloudAccess,
e.g. functions/brokerbench/brokers/kafka/cloud_access.py), read through the registry: IAM statements by role,
the ports the workers reach the targets on, the shared resources the stack makes for a provider, and the
environment its functions are told.

The app makes, grants and sets exactly what is declared, no more: a provider's access is added, changed or taken
away in its declaration, never here. This module only turns the plain data into CDK terms: a resource pattern's or
an environment value's {placeholders} become the stack's pseudo parameters and resources, a grant's `tagged`
becomes the brokerbench:run tag condition, a port range becomes an ec2.Port, and a SubnetGroup or GeneratedSecret
becomes its CloudFormation resource.
"""

from __future__ import annotations

import re

from aws_cdk import Aws
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticache as elasticache
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from brokerbench.registry import (ANY_RESOURCE, CloudAccess, GeneratedSecret, Grant, Port, SharedResource,
                                  SubnetGroup, plugins)

from .nag import acknowledge, allow

RUN_TAG = "brokerbench:run"  # brokerbench.targets.RUN_TAG: Tags={..., "brokerbench:run": run_id}
TAGGED = {  # a Grant's `tagged`: the tag in the create request, or on the resource acted on
    "request": {"Null": {f"aws:RequestTag/{RUN_TAG}": "false"}},
    "resource": {"Null": {f"aws:ResourceTag/{RUN_TAG}": "false"}},
}
PSEUDO = {"partition": Aws.PARTITION, "region": Aws.REGION, "account": Aws.ACCOUNT_ID}
PORTS = {"tcp": (ec2.Port.tcp, ec2.Port.tcp_range), "udp": (ec2.Port.udp, ec2.Port.udp_range)}


def declared() -> dict[str, CloudAccess]:
    """Each registered cloud provider's declaration by its service name (plug-ins that share one provider, as
    both RabbitMQ rows would, share its declaration: it is granted once)."""
    out: dict[str, CloudAccess] = {}
    for plugin in plugins().values():
        if plugin.cloud is not None and plugin.cloud.access is not None:
            out.setdefault(plugin.cloud.service, plugin.cloud.access)
    return out


def fill(value, values: dict[str, str], where: str):
    """A pattern (or every string of a condition block) with its {placeholders} replaced by the stack's values."""
    if isinstance(value, dict):
        return {key: fill(v, values, where) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [fill(v, values, where) for v in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match) -> str:
        name = match.group(1)
        if name not in values:
            raise ValueError(f"{where}: {value!r} names {{{name}}}, which the stack does not provide "
                             f"(it provides {', '.join(sorted(values))})")
        return values[name]

    return re.sub(r"\{([^}]*)\}", one, value)


def conditions(grant: Grant, values: dict[str, str], where: str) -> dict | None:
    """The grant's IAM condition block: its tag condition, then its own (operators of both merged)."""
    out: dict = {}
    for block in (TAGGED[grant.tagged] if grant.tagged else {}, fill(grant.condition, values, where)):
        for operator, keys in block.items():
            out[operator] = {**out.get(operator, {}), **keys}
    return out or None


def grant_role(grantee: iam.IGrantable, role: str, stack_values: dict[str, str],
               shared: dict[str, dict[str, str]] | None = None) -> None:
    """Every declared statement of `role` (brokerbench.registry.ACCESS_ROLES), each with the reason for its
    wildcards as cdk-nag's acknowledgment. `shared`: each service's shared resources by placeholder (make())."""
    for service, access in declared().items():
        values = {**PSEUDO, **stack_values, **(shared or {}).get(service, {})}
        for grant in access.granted(role):
            where = f"{service} {role} grant {list(grant.actions)}"
            resources = [ANY_RESOURCE if name == ANY_RESOURCE else fill(access.resources[name], values, where)
                         for name in grant.resources]
            allow(grantee, list(grant.actions), resources, conditions=conditions(grant, values, where),
                  wildcard_reason=grant.reason or None)


def ports() -> list[Port]:
    """Every declared port range, once each."""
    out: list[Port] = []
    for access in declared().values():
        out += [port for port in access.ports if port not in out]
    return out


def ec2_port(port: Port) -> ec2.Port:
    one, span = PORTS[port.protocol]
    return one(port.first) if port.first == port.last else span(port.first, port.last)


def make(scope: Construct, made: SharedResource, subnets: list[ec2.ISubnet]) -> str:
    """A declared shared resource, made in `scope` under its own id; what its placeholder names (a subnet group's
    name, a secret's ARN)."""
    if isinstance(made, SubnetGroup):
        return elasticache.CfnSubnetGroup(scope, made.id, description=made.description,
                                          subnet_ids=[s.subnet_id for s in subnets]).ref
    if isinstance(made, GeneratedSecret):
        secret = secretsmanager.Secret(scope, made.id, description=made.description,
                                       generate_secret_string=secretsmanager.SecretStringGenerator(
                                           password_length=made.length, exclude_punctuation=made.exclude_punctuation,
                                           include_space=False))
        acknowledge(secret, "AwsSolutions-SMG4", made.why_not_rotated)
        return secret.secret_arn
    raise ValueError(f"{made!r}: the CDK app makes SubnetGroup and GeneratedSecret only")


def environment(values: dict[str, dict[str, str]]) -> dict[str, str]:
    """Every provider's declared environment with its placeholders filled (`values`: each service's, as for
    grant_role); a variable two providers declare must have one value."""
    out: dict[str, str] = {}
    said: dict[str, str] = {}
    for service, access in declared().items():
        for name, value in access.environment.items():
            filled = fill(value, {**PSEUDO, **values[service]}, f"{service} environment.{name}")
            if name in out and out[name] != filled:
                raise ValueError(f"{service} environment.{name}: {value!r}, but {said[name]} sets it otherwise")
            out[name], said[name] = filled, said.get(name, service)
    return out
