"""What the workflow needs to create brokers at run time: MSK clusters (TLS, IAM auth), ElastiCache
replication groups (TLS, encryption at rest, AUTH) and Amazon MQ for RabbitMQ brokers (amqps, a password per run in
Secrets Manager), in the private subnets behind the brokers group.

The providers (functions/brokerbench/brokers/kafka/cloud.py, redis_streams/cloud.py, rabbitmq/cloud.py) name what
they create `bb-<run id>-<broker>` (brokerbench.targets.resource_name) and tag it `brokerbench:run`. IAM holds them
to that: create only with the tag in the request, describe and delete only names starting `bb-`, delete only
what carries the tag. Each provider declares its statements by role beside its cloud.py (cloud_access.py, a
brokerbench.registry.CloudAccess); this construct makes what they share of the stack (the subnet group, the AUTH
token) and grants what they declare (cdk/access.py).
"""

from __future__ import annotations

from aws_cdk import aws_elasticache as elasticache
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from .. import access
from ..nag import acknowledge
from .network import Network


class BrokerTargets(Construct):
    def __init__(self, scope: Construct, id: str, *, network: Network) -> None:
        super().__init__(scope, id)
        self.network = network
        self.subnet_group = elasticache.CfnSubnetGroup(
            self, "RedisSubnets", description="brokerbench: ElastiCache replication groups of benchmark runs",
            subnet_ids=[s.subnet_id for s in network.private_subnets])
        # ElastiCache AUTH tokens: 16-128 printable characters, and of the punctuation only !&#$^<>- is allowed;
        # letters and digits alone (64 of them) are always valid and strong enough.
        self.auth_secret = secretsmanager.Secret(
            self, "RedisAuthToken", description="brokerbench: the AUTH token of run-time ElastiCache replication groups",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=64, exclude_punctuation=True, include_space=False))
        acknowledge(self.auth_secret, "AwsSolutions-SMG4",
                    "RedisAuthToken is read only when a run creates its replication group, which is deleted when "
                    "that run ends, so no group outlives a token; automatic rotation would need a rotation function "
                    "and ModifyReplicationGroup on live groups for no gain (put a new value between runs instead)")

    # -- what the functions are told ------------------------------------------------------------------

    def environment(self) -> dict[str, str]:
        subnets = ",".join(s.subnet_id for s in self.network.private_subnets)
        groups = self.network.brokers.security_group_id
        return {
            "BROKERBENCH_MSK_SUBNETS": subnets,
            "BROKERBENCH_MSK_SECURITY_GROUPS": groups,
            "BROKERBENCH_REDIS_SUBNET_GROUP": self.subnet_group.ref,
            "BROKERBENCH_REDIS_SECURITY_GROUPS": groups,
            "BROKERBENCH_REDIS_AUTH_SECRET_ARN": self.auth_secret.secret_arn,
            "BROKERBENCH_MQ_SUBNETS": subnets,
            "BROKERBENCH_MQ_SECURITY_GROUPS": groups,
        }

    # -- IAM: what the providers declare (brokerbench.registry.CloudAccess, beside each plug-in's cloud.py) -------

    def values(self) -> dict[str, str]:
        """What the declarations' resource patterns may name of this stack (registry.ACCESS_PLACEHOLDERS)."""
        return {"vpc": self.network.vpc.vpc_id, "subnet_group": self.subnet_group.ref,
                "auth_secret": self.auth_secret.secret_arn}

    def grant(self, role: str, grantee: iam.IGrantable) -> None:
        """Every provider's declared statements of `role` (registry.ACCESS_ROLES says who holds which)."""
        access.grant_role(grantee, role, self.values())
