"""ElastiCache for Redis as Redis Streams' cloud provider: TLS in transit, encryption at rest, an AUTH token
from Secrets Manager. provision.redis-streams.nodes (1 to 3) is the group's primary and replicas; with a replica,
automatic failover and Multi-AZ are on (a fault's TestFailover needs them: cloud_faults.py).

Its subnet group, security groups and AUTH token secret come from the environment its declaration names
(cloud_access.ENVIRONMENT).

Provisioning is idempotent per run: a CreateReplicationGroup that already happened (a retried step) answers
ReplicationGroupAlreadyExists, and the group of that name tagged with this run is taken as the target.

Teardown: a group still `creating` (or `modifying`, `snapshotting`...) refuses DeleteReplicationGroup with
InvalidReplicationGroupState. Teardown then answers "not deletable yet" and the workflow asks again later; a
group `deleting` is "deleting", and one ElastiCache no longer knows is "gone".
"""

from __future__ import annotations

from botocore.exceptions import ClientError

from ... import settings
from ...targets import (DELETING, GONE, NOT_DELETABLE, RUN_TAG, ProvisioningError, leftover, raise_client_error,
                        resource_name, run_tags, still_waiting, target, teardown_found, unreadable)
from .cloud_access import AUTH_SECRET_ENV, SECURITY_GROUPS_ENV, SUBNET_GROUP_ENV

DEFAULT_VERSION = "7.1"
TRANSIENT = {"Throttling", "InvalidReplicationGroupState", "ServiceUnavailable"}
DELETABLE = {"available", "create-failed"}  # DeleteReplicationGroup refuses any other state
NOT_FOUND = "ReplicationGroupNotFoundFault"
DEFAULT_NODES = 1  # a primary and nodes - 1 replicas


def quota_need(broker: str, settings: dict) -> int:
    """Nodes one replication group of the run takes from the account's quota (Nodes per Region)."""
    return settings.get("nodes", DEFAULT_NODES)


def quota_in_use(client) -> int:
    """Cache nodes in the region: each cluster's (a replication group's members are clusters of their own)."""
    return sum(cluster.get("NumCacheNodes", 0)
               for page in client.get_paginator("describe_cache_clusters").paginate()
               for cluster in page["CacheClusters"])


class ElastiCacheTargets:
    kind = "elasticache"  # what the sweeper calls its resources

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
        nodes = quota_need(broker, settings)
        name = resource_name(run_id, broker)
        try:
            token = self.secrets.get_secret_value(SecretId=self.auth_secret_arn)["SecretString"]
            self.client.create_replication_group(
                ReplicationGroupId=name,
                ReplicationGroupDescription=f"brokerbench run {run_id}",
                Engine="redis",
                EngineVersion=settings.get("version", DEFAULT_VERSION),
                CacheNodeType=settings.get("node_type", "cache.r7g.large"),
                NumCacheClusters=nodes,
                # with a replica: ElastiCache promotes it when the primary fails (what a fault's TestFailover tests),
                # in another AZ of the subnet group
                **({"AutomaticFailoverEnabled": True, "MultiAZEnabled": True} if nodes > 1 else {}),
                TransitEncryptionEnabled=True,
                AtRestEncryptionEnabled=True,
                AuthToken=token,
                CacheSubnetGroupName=self.subnet_group,
                SecurityGroupIds=self.security_groups,
                Tags=[{"Key": k, "Value": v} for k, v in {**self.tags, **run_tags(run_id, spec)}.items()],
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
                    "auth_secret_arn": self.auth_secret_arn,
                    "managed": {"service": "elasticache", "replication_group": current["resource"],  # its faults'
                                "node_group": group["NodeGroups"][0].get("NodeGroupId", "0001")}}  # target
        return {**current, "ready": True, "endpoint": endpoint}

    def teardown(self, run_id: str, broker: str, spec: dict) -> dict:
        name = resource_name(run_id, broker)
        return teardown_found(broker, name, spec, lambda: self._groups(name), self.delete, state_shown=True)

    def _groups(self, name: str) -> list[tuple[str, str]]:
        """The run's replication group, as (its id, ElastiCache's status): none, or one."""
        try:
            groups = self.client.describe_replication_groups(ReplicationGroupId=name)["ReplicationGroups"]
        except ClientError as exc:
            if exc.response["Error"]["Code"] == NOT_FOUND:
                return []
            raise_client_error(exc, TRANSIENT, f"looking up ElastiCache replication group {name}")
        return [(name, groups[0]["Status"])]

    def delete(self, name: str, status: str) -> str:
        """Delete one group if ElastiCache allows it now: DELETING when it is going away, NOT_DELETABLE while it
        is still being created or changed."""
        if status == "deleting":
            return DELETING
        if status not in DELETABLE:
            return NOT_DELETABLE
        try:
            self.client.delete_replication_group(ReplicationGroupId=name)
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            if code == NOT_FOUND:
                return GONE
            if code == "InvalidReplicationGroupState":  # it changed state since it was described
                return NOT_DELETABLE
            raise_client_error(exc, TRANSIENT, f"deleting ElastiCache replication group {name}")
        return DELETING

    def leftovers(self) -> list[dict]:
        """Every bb-* replication group tagged with a run, not already being deleted: what the sweeper may delete."""
        found, marker = [], None
        while True:
            page = self.client.describe_replication_groups(**({"Marker": marker} if marker else {}))
            for group in page["ReplicationGroups"]:
                name = group["ReplicationGroupId"]
                if not name.startswith("bb-") or group["Status"] == "deleting":
                    continue
                try:
                    tags = {t["Key"]: t["Value"] for t in
                            self.client.list_tags_for_resource(ResourceName=group["ARN"])["TagList"]}
                except ClientError as exc:  # this group unread; the others still listed
                    found.append(unreadable("elasticache", name, name, f"reading the tags of {name}", exc))
                    continue
                if tags.get(RUN_TAG):
                    found.append(leftover("elasticache", name, name, group["Status"], tags))
            marker = page.get("Marker")
            if not marker:
                return found


def provider() -> ElastiCacheTargets:
    return ElastiCacheTargets(settings.boto("elasticache"), settings.boto("secretsmanager"),
                              auth_secret_arn=settings.env(AUTH_SECRET_ENV),
                              subnet_group=settings.env(SUBNET_GROUP_ENV),
                              security_groups=settings.env_list(SECURITY_GROUPS_ENV))
