"""What Amazon MSK's provider (cloud.py, cloud_faults.py) needs of the deployment: its IAM statements by role, the
ports its clients reach the brokers on, and the environment its functions are told. Plain data; the CDK app grants
and sets exactly this (brokerbench.registry.CloudAccess).

A run's cluster is named `bb-<run id>-kafka` (brokerbench.targets.resource_name) and tagged `brokerbench:run`;
its ARN ends in a UUID MSK assigns, so only the bb-* name (and the tag, where the call allows a condition) can
scope a statement. MSK has no IAM condition key for the broker type, count or volume (only the
aws:Request/ResourceTag keys): those are held by the run-request schema alone (settings.py).
"""

from __future__ import annotations

from ...registry import ANY_RESOURCE, CloudAccess, Grant, Port

SERVICE = "kafka.amazonaws.com"
CLUSTERS = "clusters"
TOPICS = "topics"
GROUPS = "groups"
AWS_KEYS = "aws-managed-keys"
SERVICE_ROLE = "service-linked-role"

RESOURCES = {
    CLUSTERS: "arn:{partition}:kafka:{region}:{account}:cluster/bb-*/*",
    TOPICS: "arn:{partition}:kafka:{region}:{account}:topic/bb-*/*",
    GROUPS: "arn:{partition}:kafka:{region}:{account}:group/bb-*/*",
    AWS_KEYS: "arn:{partition}:kms:{region}:{account}:key/*",
    SERVICE_ROLE: "arn:{partition}:iam::{account}:role/aws-service-role/kafka.amazonaws.com/AWSServiceRoleForKafka*",
}
LISTING = ("a List action with no resource-level permissions")
CLUSTER_NAMED = "MSK cluster ARNs end in a UUID assigned at creation: bb-* (the run's name) scopes them"
FAULT = ("a run's fault (kind reboot) acts on its own target, created per run as bb-<run id>-<broker> with the "
         "brokerbench:run tag; the ARN's last part is assigned at creation, so the bb-* name pattern and the tag "
         "condition scope it")
CLIENTS = ("Kafka clients (MSK IAM auth) of the run's own cluster bb-<run id>-kafka: its ARN ends in a UUID "
           "assigned at creation, and topics and consumer groups are created per cell")

# What provider() reads (cloud.py), set by the CDK app on the functions that provision, check and tear down targets
SUBNETS_ENV = "BROKERBENCH_MSK_SUBNETS"  # comma-separated, one per AZ: the cluster's client subnets
SECURITY_GROUPS_ENV = "BROKERBENCH_MSK_SECURITY_GROUPS"  # comma-separated
ENVIRONMENT = {SUBNETS_ENV: "{private_subnets}", SECURITY_GROUPS_ENV: "{brokers_security_group}"}


def _deleting(role: str, who: str) -> tuple[Grant, ...]:
    """Teardown and the sweeper: find bb-* clusters by name, delete only those tagged with a run."""
    return (
        Grant(role, ("kafka:ListClustersV2",), (ANY_RESOURCE,),
              f"{who} finds the run's MSK cluster by name with ListClustersV2, {LISTING}"),
        Grant(role, ("kafka:DeleteCluster",), (CLUSTERS,), tagged="resource",
              reason=f"{who} deletes only MSK clusters named bb-* that carry the brokerbench:run tag; their ARNs end "
                     "in a UUID assigned at creation"),
    )


ACCESS = CloudAccess(resources=RESOURCES, grants=(
    # -- provision: CreateClusterV2 -----------------------------------------------------------------------------
    Grant("provision", ("kafka:CreateClusterV2", "kafka:TagResource"), (CLUSTERS,), tagged="request",
          reason="MSK clusters are created per run as bb-<run id>-kafka; their ARNs end in a UUID MSK assigns, so "
                 "only the bb-* name pattern (and the brokerbench:run tag) can scope them"),
    Grant("provision", ("ec2:DescribeSubnets", "ec2:DescribeSecurityGroups", "ec2:DescribeVpcs",
                        "ec2:DescribeVpcAttribute"), (ANY_RESOURCE,),
          "MSK CreateClusterV2 checks the client subnets and security groups with these EC2 Describe actions, which "
          "support no resource-level permissions"),
    Grant("provision", ("kms:CreateGrant", "kms:DescribeKey"), (AWS_KEYS,),
          condition={"StringEquals": {"kms:ViaService": "kafka.{region}.amazonaws.com"}},
          reason="MSK encrypts broker volumes at rest with the account's AWS-managed aws/kafka key, whose id is not "
                 "known at deploy time; the grant is only usable through MSK (kms:ViaService)"),
    Grant("provision", ("iam:CreateServiceLinkedRole",), (SERVICE_ROLE,),
          condition={"StringEquals": {"iam:AWSServiceName": SERVICE}},
          reason="the first MSK cluster in an account creates the service's service-linked role; the ARN pattern is "
                 "AWS's own name for it"),
    Grant("provision", ("iam:AttachRolePolicy", "iam:PutRolePolicy"), (SERVICE_ROLE,),
          "MSK attaches its policy to its own service-linked role when it creates it (MSK's documented requirement "
          "for CreateCluster callers)"),
    # A retried create that had already happened finds the run's own cluster instead of failing on the name.
    Grant("provision", ("kafka:ListClustersV2",), (ANY_RESOURCE,),
          f"a retried CreateClusterV2 finds the run's cluster by name with ListClustersV2, {LISTING}"),
    # -- check: DescribeClusterV2 until ACTIVE, then the bootstrap brokers ----------------------------------------
    Grant("check", ("kafka:DescribeClusterV2", "kafka:GetBootstrapBrokers"), (CLUSTERS,), CLUSTER_NAMED),
    *_deleting("teardown", "teardown"),
    *_deleting("sweep", "the sweeper"),
    # -- clients: MSK IAM auth on the run's cluster, its topics and consumer groups -------------------------------
    Grant("clients", ("kafka-cluster:Connect", "kafka-cluster:DescribeCluster",
                      "kafka-cluster:DescribeClusterDynamicConfiguration", "kafka-cluster:WriteDataIdempotently"),
          (CLUSTERS,), CLIENTS),
    Grant("clients", ("kafka-cluster:CreateTopic", "kafka-cluster:DescribeTopic", "kafka-cluster:DeleteTopic",
                      "kafka-cluster:DescribeTopicDynamicConfiguration", "kafka-cluster:WriteData",
                      "kafka-cluster:ReadData"), (TOPICS,), CLIENTS),
    Grant("clients", ("kafka-cluster:AlterGroup", "kafka-cluster:DescribeGroup"), (GROUPS,), CLIENTS),
    # -- faults: RebootBroker, then the cluster's state until it is ACTIVE again ---------------------------------
    Grant("faults", ("kafka:RebootBroker",), (CLUSTERS,), FAULT, tagged="resource"),
    Grant("faults", ("kafka:DescribeClusterV2",), (CLUSTERS,),
          "after a reboot the cell reads the run's bb-* cluster's state until it is ACTIVE again"),
    # -- admission: the brokers the region's clusters hold (the quota "Number of brokers per account") -----------
    Grant("admission", ("kafka:ListClustersV2",), (ANY_RESOURCE,),
          f"the MSK broker quota check before a run starts counts the region's clusters' brokers, {LISTING}"),
), ports=(
    # MSK's listeners: plaintext, TLS, SASL/SCRAM, IAM (9098), and ZooKeeper-less
    Port(9092, 9098, "Kafka (MSK)"),
), environment=ENVIRONMENT)
