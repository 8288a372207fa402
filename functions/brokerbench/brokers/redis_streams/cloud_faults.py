"""ElastiCache's fault (brokerbench.faults kind reboot, AWS mode): TestFailover of the run's replication group.

TestFailover fails the primary of a node group over to one of its replicas: ElastiCache promotes a replica, points
the group's primary endpoint at it, and replaces the old primary, which comes back as a replica. It needs a group
with a replica and automatic failover on: cloud.py makes one when provision.redis-streams.nodes is 2 or 3
(NumCacheClusters, AutomaticFailoverEnabled, MultiAZEnabled). The run's groups are not cluster-mode: one node group,
`0001`. The primary is the node DescribeReplicationGroups names with CurrentRole primary (the fault's target is
always it: "leader"). Replication is asynchronous, so writes the primary acknowledged and had not yet sent to the
replica may be lost: an expected finding, not a defect. AWS allows 15 TestFailover calls per rolling 24 hours (5 in
older documents): a run of more faulted cells finds the later calls refused, recorded as failed faults.

IAM: elasticache:TestFailover and elasticache:DescribeReplicationGroups on bb-* groups carrying the run tag
(declared in cloud_access.py, role faults). Never run against real AWS: the calls' shapes are checked with
botocore's Stubber (tests/unit/test_cloud_faults.py).
"""

from __future__ import annotations

from ... import settings

NODE_GROUP = "0001"  # the one node group of a replication group without cluster mode


def client():
    return settings.boto("elasticache")


def _group(client, endpoint: dict) -> dict:
    groups = client.describe_replication_groups(ReplicationGroupId=endpoint["managed"]["replication_group"])
    return groups["ReplicationGroups"][0]


def _members(group: dict) -> list[dict]:
    return [m for g in group.get("NodeGroups", []) for m in g.get("NodeGroupMembers", [])]


def leader(client, endpoint: dict, topic: str) -> str | None:
    """The cache cluster (node) ElastiCache names primary; None while none is (a failover under way)."""
    primaries = [m["CacheClusterId"] for m in _members(_group(client, endpoint)) if m.get("CurrentRole") == "primary"]
    return primaries[0] if len(primaries) == 1 else None


def nodes(client, endpoint: dict) -> list[str]:
    return [m["CacheClusterId"] for m in _members(_group(client, endpoint))]


def reboot(client, endpoint: dict, node: str) -> tuple[dict, dict]:
    """TestFailover of the group's node group (its primary, `node`): the request and ElastiCache's answer."""
    request = {"ReplicationGroupId": endpoint["managed"]["replication_group"],
               "NodeGroupId": endpoint["managed"].get("node_group", NODE_GROUP)}
    response = client.test_failover(**request)
    return request, {"ReplicationGroupStatus": response.get("ReplicationGroup", {}).get("Status"),
                     "ResponseMetadata": response.get("ResponseMetadata", {})}


def whole(client, endpoint: dict) -> bool:
    """The group is available with one primary and every node available again."""
    group = _group(client, endpoint)
    members = _members(group)
    return (group["Status"] == "available" and sum(m.get("CurrentRole") == "primary" for m in members) == 1
            and all(g.get("Status", "available") == "available" for g in group.get("NodeGroups", [])))
