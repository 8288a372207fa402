"""What the workflow needs to create brokers at run time: MSK clusters (TLS, IAM auth), ElastiCache
replication groups (TLS, encryption at rest, AUTH) and Amazon MQ for RabbitMQ brokers (amqps, a password per run in
Secrets Manager), in the private subnets behind the brokers group.

The providers (functions/brokerbench/brokers/kafka/cloud.py, redis_streams/cloud.py, rabbitmq/cloud.py) name what
they create `bb-<run id>-<broker>` (brokerbench.targets.resource_name) and tag it `brokerbench:run`. IAM holds them
to that: create only with the tag in the request, describe and delete only names starting `bb-`, delete only
what carries the tag. Each provider declares beside its cloud.py (cloud_access.py, a brokerbench.registry.
CloudAccess) its statements by role, the shared resources it needs made (ElastiCache's subnet group and AUTH
token) and the environment its functions are told; this construct makes, grants and sets exactly those
(cdk/access.py), so a provider added is a declaration added and no line here.
"""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from constructs import Construct

from .. import access
from .network import Network


class BrokerTargets(Construct):
    def __init__(self, scope: Construct, id: str, *, network: Network) -> None:
        super().__init__(scope, id)
        self.network = network
        # service -> placeholder -> what it names, for the shared resources each provider declares
        self.shared = {service: {made.placeholder: access.make(self, made, network.private_subnets)
                                 for made in declaration.shared}
                       for service, declaration in access.declared().items()}

    def values(self) -> dict[str, str]:
        """What every declaration may name of this stack (registry.ACCESS_PLACEHOLDERS, besides the pseudo
        parameters)."""
        return {"vpc": self.network.vpc.vpc_id,
                "private_subnets": ",".join(s.subnet_id for s in self.network.private_subnets),
                "brokers_security_group": self.network.brokers.security_group_id}

    # -- what the functions are told ------------------------------------------------------------------

    def environment(self) -> dict[str, str]:
        """Every provider's declared environment (CloudAccess.environment), filled."""
        return access.environment({service: {**self.values(), **made} for service, made in self.shared.items()})

    # -- IAM: what the providers declare (brokerbench.registry.CloudAccess, beside each plug-in's cloud.py) -------

    def grant(self, role: str, grantee: iam.IGrantable) -> None:
        """Every provider's declared statements of `role` (registry.ACCESS_ROLES says who holds which)."""
        access.grant_role(grantee, role, self.values(), self.shared)
