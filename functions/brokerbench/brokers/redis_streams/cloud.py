"""ElastiCache for Redis as Redis Streams' cloud provider: TLS in transit, encryption at rest, an AUTH token
from Secrets Manager.

BROKERBENCH_REDIS_SUBNET_GROUP, BROKERBENCH_REDIS_SECURITY_GROUPS (comma-separated),
BROKERBENCH_REDIS_AUTH_SECRET_ARN   set by the CDK app

Provisioning is idempotent per run: a CreateReplicationGroup that already happened (a retried step) answers
ReplicationGroupAlreadyExists, and the group of that name tagged with this run is taken as the target.
"""

from __future__ import annotations

from botocore.exceptions import ClientError

from ... import settings
from ...targets import ProvisioningError, raise_client_error, resource_name, still_waiting, target

DEFAULT_VERSION = "7.1"
TRANSIENT = {"Throttling", "InvalidReplicationGroupState", "ServiceUnavailable"}


class ElastiCacheTargets:
    def __init__(self, client, secrets, *, auth_secret_arn: str, subnet_group: str, security_groups: list[str],
                 tags: dict | None = None) -> None:
        self.client = client
        self.secrets = secrets
        self.auth_secret_arn = auth_secret_arn
        self.subnet_group = subnet_group
        self.security_groups = security_groups
        self.tags = tags or {}

    def provision(self, run_id: str, broker: str, spec: dict) -> dict:
        settings = spec["provision"].get("redis-streams", {})
        name = resource_name(run_id, broker)
        try:
            token = self.secrets.get_secret_value(SecretId=self.auth_secret_arn)["SecretString"]
            self.client.create_replication_group(
                ReplicationGroupId=name,
                ReplicationGroupDescription=f"brokerbench run {run_id}",
                Engine="redis",
                EngineVersion=settings.get("version", DEFAULT_VERSION),
                CacheNodeType=settings.get("node_type", "cache.r7g.large"),
                NumCacheClusters=1,
                TransitEncryptionEnabled=True,
                AtRestEncryptionEnabled=True,
                AuthToken=token,
                CacheSubnetGroupName=self.subnet_group,
                SecurityGroupIds=self.security_groups,
                Tags=[{"Key": k, "Value": v} for k, v in {**self.tags, "brokerbench:run": run_id}.items()],
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ReplicationGroupAlreadyExists":
                raise_client_error(exc, TRANSIENT, f"creating ElastiCache replication group {name}")
            self._check_ours(name, run_id)  # an earlier attempt of this step created it: go on waiting for it
        return target(broker, "elasticache", ready=False, resource=name, timeout_s=spec["provision"]["timeout_s"])

    def _check_ours(self, name: str, run_id: str) -> None:
        """The existing group called `name` must be this run's (its brokerbench:run tag); otherwise provisioning
        fails as it did before (a group this run did not create is never taken over)."""
        try:
            groups = self.client.describe_replication_groups(ReplicationGroupId=name)["ReplicationGroups"]
            arn = groups[0].get("ARN") if groups and groups[0].get("Status") != "deleting" else None
            tags = self.client.list_tags_for_resource(ResourceName=arn)["TagList"] if arn else []
        except ClientError as exc:
            raise_client_error(exc, TRANSIENT, f"looking up ElastiCache replication group {name}")
        if {t["Key"]: t["Value"] for t in tags}.get("brokerbench:run") != run_id:
            raise ProvisioningError(f"creating ElastiCache replication group {name}: it exists and is not this run's "
                                    "(or is being deleted)")

    def check(self, current: dict) -> dict:
        try:
            group = self.client.describe_replication_groups(ReplicationGroupId=current["resource"])["ReplicationGroups"][0]
        except ClientError as exc:
            raise_client_error(exc, TRANSIENT, f"checking ElastiCache replication group {current['resource']}")
        if group["Status"] == "create-failed":
            raise ProvisioningError(f"ElastiCache replication group {current['resource']} failed to create")
        if group["Status"] != "available":
            return still_waiting(current)
        primary = group["NodeGroups"][0]["PrimaryEndpoint"]
        endpoint = {"host": primary["Address"], "port": primary["Port"], "tls": True,
                    "auth_secret_arn": self.auth_secret_arn}
        return {**current, "ready": True, "endpoint": endpoint}

    def teardown(self, run_id: str, broker: str, spec: dict) -> dict:
        name = resource_name(run_id, broker)
        if spec.get("keep_targets"):
            return {"broker": broker, "action": f"kept {name} (keep_targets)"}
        try:
            self.client.delete_replication_group(ReplicationGroupId=name)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ReplicationGroupNotFoundFault":
                return {"broker": broker, "action": "nothing to delete"}
            raise_client_error(exc, TRANSIENT, f"deleting ElastiCache replication group {name}")
        return {"broker": broker, "action": f"deleting {name}"}


def provider() -> ElastiCacheTargets:
    return ElastiCacheTargets(settings.boto("elasticache"), settings.boto("secretsmanager"),
                              auth_secret_arn=settings.env("BROKERBENCH_REDIS_AUTH_SECRET_ARN"),
                              subnet_group=settings.env("BROKERBENCH_REDIS_SUBNET_GROUP"),
                              security_groups=settings.env_list("BROKERBENCH_REDIS_SECURITY_GROUPS"))
