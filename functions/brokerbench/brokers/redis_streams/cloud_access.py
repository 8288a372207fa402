"""What ElastiCache's provider (cloud.py, cloud_faults.py) needs of the deployment: its IAM statements by role, the
port its clients reach the replication group on, the subnet group and AUTH token the stack makes for it, and the
environment its functions are told. Plain data; the CDK app makes, grants and sets exactly this
(brokerbench.registry.CloudAccess).

A run's replication group is named `bb-<run id>-redis` (brokerbench.targets.resource_name) and tagged
`brokerbench:run`; its member clusters are named after it. The stack makes the subnet group and the AUTH token
secret every group uses (SHARED: {subnet_group}, {auth_secret}). Spend guard: CreateReplicationGroup only with the node
types the run-request schema allows (settings.NODE_TYPES), held by ElastiCache's own condition key.
"""

from __future__ import annotations

from ...registry import ANY_RESOURCE, CloudAccess, GeneratedSecret, Grant, Port, SubnetGroup
from .settings import NODE_TYPES

SERVICE = "elasticache.amazonaws.com"
GROUPS = "replication-groups"
MEMBERS = "member-clusters"
ALL_GROUPS = "every-replication-group"
ALL_CLUSTERS = "every-cache-cluster"
SUBNET_GROUP = "subnet-group"
PARAMETER_GROUPS = "default-parameter-groups"
AUTH_TOKEN = "auth-token"
SERVICE_ROLE = "service-linked-role"

RESOURCES = {
    GROUPS: "arn:{partition}:elasticache:{region}:{account}:replicationgroup:bb-*",
    MEMBERS: "arn:{partition}:elasticache:{region}:{account}:cluster:bb-*",
    ALL_GROUPS: "arn:{partition}:elasticache:{region}:{account}:replicationgroup:*",
    ALL_CLUSTERS: "arn:{partition}:elasticache:{region}:{account}:cluster:*",
    SUBNET_GROUP: "arn:{partition}:elasticache:{region}:{account}:subnetgroup:{subnet_group}",
    PARAMETER_GROUPS: "arn:{partition}:elasticache:{region}:{account}:parametergroup:default.redis*",
    AUTH_TOKEN: "{auth_secret}",
    SERVICE_ROLE: ("arn:{partition}:iam::{account}:role/aws-service-role/elasticache.amazonaws.com/"
                   "AWSServiceRoleForElastiCache*"),
}
CREATED = ("ElastiCache replication groups (and their member clusters) are created per run as bb-<run id>-redis; "
           "only the bb-* name pattern (and the brokerbench:run tag) can scope them")
FAULT = ("a run's fault (kind reboot) acts on its own target, created per run as bb-<run id>-<broker> with the "
         "brokerbench:run tag; the ARN's last part is assigned at creation, so the bb-* name pattern and the tag "
         "condition scope it")
AUTH = ("secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue")  # the AUTH token, read by every client

SHARED = (
    SubnetGroup("subnet_group", "RedisSubnets", "brokerbench: ElastiCache replication groups of benchmark runs"),
    # ElastiCache AUTH tokens: 16-128 printable characters, and of the punctuation only !&#$^<>- is allowed;
    # letters and digits alone (64 of them) are always valid and strong enough.
    GeneratedSecret("auth_secret", "RedisAuthToken",
                    "brokerbench: the AUTH token of run-time ElastiCache replication groups",
                    length=64, exclude_punctuation=True, why_not_rotated=(
                        "RedisAuthToken is read only when a run creates its replication group, which is deleted when "
                        "that run ends, so no group outlives a token; automatic rotation would need a rotation "
                        "function and ModifyReplicationGroup on live groups for no gain (put a new value between "
                        "runs instead)")),
)
# What provider() reads (cloud.py), set by the CDK app on the functions that provision, check and tear down targets
SUBNET_GROUP_ENV = "BROKERBENCH_REDIS_SUBNET_GROUP"
SECURITY_GROUPS_ENV = "BROKERBENCH_REDIS_SECURITY_GROUPS"  # comma-separated
AUTH_SECRET_ENV = "BROKERBENCH_REDIS_AUTH_SECRET_ARN"
ENVIRONMENT = {SUBNET_GROUP_ENV: "{subnet_group}", SECURITY_GROUPS_ENV: "{brokers_security_group}",
               AUTH_SECRET_ENV: "{auth_secret}"}


ACCESS = CloudAccess(resources=RESOURCES, grants=(
    # -- provision: CreateReplicationGroup with the AUTH token ---------------------------------------------------
    Grant("provision", ("elasticache:CreateReplicationGroup",), (GROUPS, MEMBERS), CREATED, tagged="request",
          condition={"StringEquals": {"elasticache:CacheNodeType": list(NODE_TYPES)}}),
    Grant("provision", ("elasticache:AddTagsToResource",), (GROUPS, MEMBERS), CREATED, tagged="request"),
    Grant("provision", ("elasticache:CreateReplicationGroup",), (SUBNET_GROUP, PARAMETER_GROUPS),
          "a replication group uses the engine version's default parameter group (default.redis7 and so on, chosen "
          "per run by provision.redis-streams.version)"),
    Grant("provision", ("iam:CreateServiceLinkedRole",), (SERVICE_ROLE,),
          condition={"StringEquals": {"iam:AWSServiceName": SERVICE}},
          reason="the first ElastiCache group in an account creates the service's service-linked role; the ARN "
                 "pattern is AWS's own name for it"),
    # A retried create finds the existing group and checks that it is the run's own (its tag).
    Grant("provision", ("elasticache:DescribeReplicationGroups", "elasticache:ListTagsForResource"), (GROUPS,),
          "a retried CreateReplicationGroup checks that the existing bb-<run id>-redis group is the run's own (its "
          "brokerbench:run tag); groups are named per run"),
    Grant("provision", AUTH, (AUTH_TOKEN,)),
    # -- check: DescribeReplicationGroups until available --------------------------------------------------------
    Grant("check", ("elasticache:DescribeReplicationGroups",), (GROUPS,),
          "replication groups are named per run (bb-<run id>-redis): bb-* scopes them"),
    # -- teardown ------------------------------------------------------------------------------------------------
    Grant("teardown", ("elasticache:DeleteReplicationGroup",), (GROUPS,), tagged="resource",
          reason="only replication groups named bb-* that carry the brokerbench:run tag can be deleted"),
    Grant("teardown", ("elasticache:DescribeReplicationGroups",), (GROUPS,),
          "teardown reads the run's bb-<run id>-redis group's status: still creating (not deletable yet), deleting, "
          "or gone"),
    # -- sweep: lists every group (DescribeReplicationGroups without an id) and keeps the bb-* ones --------------
    Grant("sweep", ("elasticache:DescribeReplicationGroups",), (ALL_GROUPS,),
          "the sweeper lists the replication groups (DescribeReplicationGroups without an id needs every group) and "
          "keeps only those named bb-*"),
    Grant("sweep", ("elasticache:ListTagsForResource",), (GROUPS,),
          "the sweeper reads the brokerbench:run tag of the bb-* replication groups only"),
    Grant("sweep", ("elasticache:DeleteReplicationGroup",), (GROUPS,), tagged="resource",
          reason="the sweeper deletes only replication groups named bb-* that carry the brokerbench:run tag"),
    # -- clients: Redis AUTH -------------------------------------------------------------------------------------
    Grant("clients", AUTH, (AUTH_TOKEN,)),
    # -- faults: TestFailover, then the group's state until it is available again --------------------------------
    Grant("faults", ("elasticache:TestFailover",), (GROUPS,), FAULT, tagged="resource"),
    Grant("faults", ("elasticache:DescribeReplicationGroups",), (GROUPS,),
          "a fault's target is the run's bb-* group's primary, and after the failover the cell reads the group's "
          "state until it is available again"),
    # -- admission: the region's cache nodes (the quota "Nodes per Region") ---------------------------------------
    Grant("admission", ("elasticache:DescribeCacheClusters",), (ALL_CLUSTERS,),
          "the ElastiCache node quota check counts every cache cluster's nodes in the region"),
), ports=(
    Port(6379, 6379, "Redis (ElastiCache)"),
), shared=SHARED, environment=ENVIRONMENT)
