"""What the workflow needs to create brokers at run time: MSK clusters (TLS, IAM auth), ElastiCache
replication groups (TLS, encryption at rest, AUTH) and Amazon MQ for RabbitMQ brokers (amqps, a password per run in
Secrets Manager), in the private subnets behind the brokers group.

The providers (functions/brokerbench/brokers/kafka/cloud.py, redis_streams/cloud.py, rabbitmq/cloud.py) name what
they create
`bb-<run id>-<broker>` (brokerbench.targets.resource_name) and tag it `brokerbench:run`. IAM holds them to
that: create only with the tag in the request, describe and delete only names starting `bb-`, delete only
what carries the tag.
"""

from __future__ import annotations

from aws_cdk import Aws
from aws_cdk import aws_elasticache as elasticache
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from brokerbench.brokers.redis_streams import settings as redis_settings

from ..nag import acknowledge, allow
from .network import Network

RUN_TAG = "brokerbench:run"  # brokerbench/brokers/*/cloud.py: Tags={..., "brokerbench:run": run_id}
NAME_PREFIX = "bb-"  # brokerbench.targets.resource_name
MQ_SECRET_PREFIX = "brokerbench/"  # brokers/rabbitmq/cloud.py SECRET_PREFIX: the run's Amazon MQ password

TAGGED_REQUEST = {"Null": {f"aws:RequestTag/{RUN_TAG}": "false"}}
TAGGED_RESOURCE = {"Null": {f"aws:ResourceTag/{RUN_TAG}": "false"}}


def _arn(service: str, resource: str, *, account: bool = True) -> str:
    return f"arn:{Aws.PARTITION}:{service}:{Aws.REGION}:{Aws.ACCOUNT_ID if account else ''}:{resource}"


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

    # -- control plane --------------------------------------------------------------------------------

    def grant_provision(self, grantee: iam.IGrantable) -> None:
        """ProvisionTarget: create_cluster_v2, create_replication_group (with the AUTH token)."""
        # MSK has no IAM condition key for the broker type, count or volume (only the aws:Request/ResourceTag
        # keys): those are held by the run-request schema alone (brokers/kafka/settings.py).
        allow(grantee, ["kafka:CreateClusterV2", "kafka:TagResource"], [self._msk_clusters()], conditions=TAGGED_REQUEST,
              wildcard_reason="MSK clusters are created per run as bb-<run id>-kafka; their ARNs end in a UUID MSK "
                              "assigns, so only the bb-* name pattern (and the brokerbench:run tag) can scope them")
        allow(grantee, ["ec2:DescribeSubnets", "ec2:DescribeSecurityGroups", "ec2:DescribeVpcs",
                        "ec2:DescribeVpcAttribute"], ["*"],
              wildcard_reason="MSK CreateClusterV2 checks the client subnets and security groups with these EC2 "
                              "Describe actions, which support no resource-level permissions")
        allow(grantee, ["kms:CreateGrant", "kms:DescribeKey"], [_arn("kms", "key/*")],
              conditions={"StringEquals": {"kms:ViaService": f"kafka.{Aws.REGION}.amazonaws.com"}},
              wildcard_reason="MSK encrypts broker volumes at rest with the account's AWS-managed aws/kafka key, whose "
                              "id is not known at deploy time; the grant is only usable through MSK (kms:ViaService)")
        redis = [self._redis_groups(), _arn("elasticache", f"cluster:{NAME_PREFIX}*")]
        reason = ("ElastiCache replication groups (and their member clusters) are created per run as "
                  "bb-<run id>-redis; only the bb-* name pattern (and the brokerbench:run tag) can scope them")
        # Spend guard: only the node types the run-request schema allows (brokers/redis_streams/settings.py).
        allow(grantee, ["elasticache:CreateReplicationGroup"], redis, wildcard_reason=reason, conditions={
            **TAGGED_REQUEST, "StringEquals": {"elasticache:CacheNodeType": list(redis_settings.NODE_TYPES)}})
        allow(grantee, ["elasticache:AddTagsToResource"], redis, conditions=TAGGED_REQUEST, wildcard_reason=reason)
        allow(grantee, ["elasticache:CreateReplicationGroup"],
              [_arn("elasticache", f"subnetgroup:{self.subnet_group.ref}"),
               _arn("elasticache", "parametergroup:default.redis*")],
              wildcard_reason="a replication group uses the engine version's default parameter group "
                              "(default.redis7 and so on, chosen per run by provision.redis-streams.version)")
        for service, role in (("kafka.amazonaws.com", "AWSServiceRoleForKafka"),
                              ("elasticache.amazonaws.com", "AWSServiceRoleForElastiCache")):
            allow(grantee, ["iam:CreateServiceLinkedRole"],
                  [f"arn:{Aws.PARTITION}:iam::{Aws.ACCOUNT_ID}:role/aws-service-role/{service}/{role}*"],
                  conditions={"StringEquals": {"iam:AWSServiceName": service}},
                  wildcard_reason="the first MSK cluster or ElastiCache group in an account creates the service's "
                                  "service-linked role; the ARN pattern is AWS's own name for it")
        allow(grantee, ["iam:AttachRolePolicy", "iam:PutRolePolicy"],
              [f"arn:{Aws.PARTITION}:iam::{Aws.ACCOUNT_ID}:role/aws-service-role/kafka.amazonaws.com/AWSServiceRoleForKafka*"],
              wildcard_reason="MSK attaches its policy to its own service-linked role when it creates it (MSK's "
                              "documented requirement for CreateCluster callers)")
        # A retried create that had already happened: the provider finds the run's own cluster or group
        # (brokers/*/cloud.py) instead of failing on the name conflict.
        allow(grantee, ["kafka:ListClustersV2"], ["*"],
              wildcard_reason="a retried CreateClusterV2 finds the run's cluster by name with ListClustersV2, a List "
                              "action with no resource-level permissions")
        allow(grantee, ["elasticache:DescribeReplicationGroups", "elasticache:ListTagsForResource"],
              [self._redis_groups()],
              wildcard_reason="a retried CreateReplicationGroup checks that the existing bb-<run id>-redis group is "
                              "the run's own (its brokerbench:run tag); groups are named per run")
        self.auth_secret.grant_read(grantee)
        self.grant_mq_provision(grantee)

    def grant_mq_provision(self, grantee: iam.IGrantable) -> None:
        """Amazon MQ for RabbitMQ: the run's password secret (brokerbench/bb-*), then CreateBroker with the run tag."""
        # Spend guard: Amazon MQ has no IAM condition key for the host instance type or deployment mode (only the
        # aws:Request/ResourceTag keys), so the allowed types (brokers/rabbitmq/prices.json) and the 1-or-3 nodes are
        # held by the provider (rabbitmq/cloud.py, before any call) and the plug-in's provision schema.
        allow(grantee, ["mq:CreateBroker", "mq:CreateTags"], [self._mq_brokers()], conditions=TAGGED_REQUEST,
              wildcard_reason="Amazon MQ brokers are created per run as bb-<run id>-<broker>; their ARNs end in an id "
                              "Amazon MQ assigns, so only the bb-* name pattern (and the brokerbench:run tag) can "
                              "scope them")
        allow(grantee, ["ec2:CreateNetworkInterface", "ec2:CreateNetworkInterfacePermission",
                        "ec2:DescribeInternetGateways", "ec2:DescribeNetworkInterfaces",
                        "ec2:DescribeNetworkInterfacePermissions", "ec2:DescribeRouteTables",
                        "ec2:DescribeSecurityGroups", "ec2:DescribeSubnets", "ec2:DescribeVpcs"], ["*"],
              wildcard_reason="Amazon MQ CreateBroker places the broker's network interfaces in the given subnets "
                              "with the caller's permissions (Amazon MQ's documented requirement); these EC2 actions "
                              "take no resource-level permissions at creation")
        # ...and may remove one it created; a network interface has an ec2:Vpc condition key: this VPC's only.
        allow(grantee, ["ec2:DeleteNetworkInterface"], [_arn("ec2", "network-interface/*")],
              conditions={"ArnEquals": {"ec2:Vpc": _arn("ec2", f"vpc/{self.network.vpc.vpc_id}")}},
              wildcard_reason="Amazon MQ CreateBroker may remove a network interface it placed with the caller's "
                              "permissions; interface ids are made at creation, so the ec2:Vpc condition holds the "
                              "delete to this stack's VPC")
        allow(grantee, ["iam:CreateServiceLinkedRole"],
              [f"arn:{Aws.PARTITION}:iam::{Aws.ACCOUNT_ID}:role/aws-service-role/mq.amazonaws.com/AWSServiceRoleForAmazonMQ*"],
              conditions={"StringEquals": {"iam:AWSServiceName": "mq.amazonaws.com"}},
              wildcard_reason="the first Amazon MQ broker in an account creates its service-linked role; the ARN "
                              "pattern is AWS's own name for it")
        allow(grantee, ["mq:ListBrokers"], ["*"],
              wildcard_reason="a retried CreateBroker finds the run's broker by name with ListBrokers, a List action "
                              "with no resource-level permissions")
        allow(grantee, ["mq:ListTags"], [self._mq_brokers()],
              wildcard_reason="a retried CreateBroker checks that the existing bb-* broker is the run's own (its "
                              "brokerbench:run tag)")
        allow(grantee, ["secretsmanager:CreateSecret", "secretsmanager:TagResource"], [self._mq_secrets()],
              conditions=TAGGED_REQUEST,
              wildcard_reason="each run's broker password is stored as brokerbench/bb-<run id>-<broker>; Secrets "
                              "Manager appends a random suffix to the ARN")
        allow(grantee, ["secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue"], [self._mq_secrets()],
              conditions=TAGGED_RESOURCE,
              wildcard_reason="a retried provision reads the password the run stored before (brokerbench/bb-*)")

    def grant_check(self, grantee: iam.IGrantable) -> None:
        """CheckTarget: describe_cluster_v2 + get_bootstrap_brokers, describe_replication_groups."""
        allow(grantee, ["kafka:DescribeClusterV2", "kafka:GetBootstrapBrokers"], [self._msk_clusters()],
              wildcard_reason="MSK cluster ARNs end in a UUID assigned at creation: bb-* (the run's name) scopes them")
        allow(grantee, ["elasticache:DescribeReplicationGroups"], [self._redis_groups()],
              wildcard_reason="replication groups are named per run (bb-<run id>-redis): bb-* scopes them")
        allow(grantee, ["mq:DescribeBroker"], [self._mq_brokers()],
              wildcard_reason="Amazon MQ broker ARNs end in an id assigned at creation: bb-* (the run's name) scopes them")

    def grant_teardown(self, grantee: iam.IGrantable) -> None:
        """TeardownTarget: list_clusters_v2 + delete_cluster, describe_replication_groups + delete_replication_group."""
        allow(grantee, ["kafka:ListClustersV2"], ["*"],
              wildcard_reason="teardown finds the run's MSK cluster by name with ListClustersV2, a List action with "
                              "no resource-level permissions")
        allow(grantee, ["kafka:DeleteCluster"], [self._msk_clusters()], conditions=TAGGED_RESOURCE,
              wildcard_reason="only clusters named bb-* that carry the brokerbench:run tag can be deleted; their ARNs "
                              "end in a UUID assigned at creation")
        allow(grantee, ["elasticache:DeleteReplicationGroup"], [self._redis_groups()], conditions=TAGGED_RESOURCE,
              wildcard_reason="only replication groups named bb-* that carry the brokerbench:run tag can be deleted")
        allow(grantee, ["elasticache:DescribeReplicationGroups"], [self._redis_groups()],
              wildcard_reason="teardown reads the run's bb-<run id>-redis group's status: still creating (not "
                              "deletable yet), deleting, or gone")
        grant_mq_delete(grantee, "teardown")

    # -- data plane -------------------------------------------------------------------------------------

    def grant_clients(self, grantee: iam.IGrantable) -> None:
        """Workers and RecordTargetsReady: Kafka clients with MSK IAM auth on bb-* clusters, Redis AUTH."""
        topic = _arn("kafka", f"topic/{NAME_PREFIX}*/*")
        group = _arn("kafka", f"group/{NAME_PREFIX}*/*")
        reason = ("Kafka clients (MSK IAM auth) of the run's own cluster bb-<run id>-kafka: its ARN ends in a UUID "
                  "assigned at creation, and topics and consumer groups are created per cell")
        allow(grantee, ["kafka-cluster:Connect", "kafka-cluster:DescribeCluster",
                        "kafka-cluster:DescribeClusterDynamicConfiguration", "kafka-cluster:WriteDataIdempotently"],
              [self._msk_clusters()], wildcard_reason=reason)
        allow(grantee, ["kafka-cluster:CreateTopic", "kafka-cluster:DescribeTopic", "kafka-cluster:DeleteTopic",
                        "kafka-cluster:DescribeTopicDynamicConfiguration", "kafka-cluster:WriteData",
                        "kafka-cluster:ReadData"], [topic], wildcard_reason=reason)
        allow(grantee, ["kafka-cluster:AlterGroup", "kafka-cluster:DescribeGroup"], [group], wildcard_reason=reason)
        self.auth_secret.grant_read(grantee)
        allow(grantee, ["secretsmanager:GetSecretValue"], [self._mq_secrets()], conditions=TAGGED_RESOURCE,
              wildcard_reason="RabbitMQ clients read the run's Amazon MQ broker password (brokerbench/bb-*, one per "
                              "run, with a random suffix Secrets Manager appends)")

    def grant_faults(self, grantee: iam.IGrantable) -> None:
        """Workers (RunCell and the EC2 worker role): a run's faults of kind reboot (brokerbench/worker/cloud_faults.py)
        on its own target, and the target's state until it serves again.

        Scoped to what runs create: names bb-* and, for the calls that act, the brokerbench:run tag on the resource
        (aws:ResourceTag). The roles serve every run of the deployment, so no one run's ARN can be named here; the
        worker only ever calls on the resource its own run's endpoint names (`managed`, set by the provider)."""
        tag_reason = ("a run's fault (kind reboot) acts on its own target, created per run as bb-<run id>-<broker> "
                      "with the brokerbench:run tag; the ARN's last part is assigned at creation, so the bb-* name "
                      "pattern and the tag condition scope it")
        allow(grantee, ["kafka:RebootBroker"], [self._msk_clusters()], conditions=TAGGED_RESOURCE,
              wildcard_reason=tag_reason)
        allow(grantee, ["elasticache:TestFailover"], [self._redis_groups()], conditions=TAGGED_RESOURCE,
              wildcard_reason=tag_reason)
        allow(grantee, ["mq:RebootBroker"], [self._mq_brokers()], conditions=TAGGED_RESOURCE,
              wildcard_reason=tag_reason)
        allow(grantee, ["kafka:DescribeClusterV2"], [self._msk_clusters()],
              wildcard_reason="after a reboot the cell reads the run's bb-* cluster's state until it is ACTIVE again")
        allow(grantee, ["elasticache:DescribeReplicationGroups"], [self._redis_groups()],
              wildcard_reason="a fault's target is the run's bb-* group's primary, and after the failover the cell "
                              "reads the group's state until it is available again")
        allow(grantee, ["mq:DescribeBroker"], [self._mq_brokers()],
              wildcard_reason="after a reboot the cell reads the run's bb-* broker's state until it runs again")

    @staticmethod
    def _msk_clusters() -> str:
        return _arn("kafka", f"cluster/{NAME_PREFIX}*/*")

    @staticmethod
    def _redis_groups() -> str:
        return _arn("elasticache", f"replicationgroup:{NAME_PREFIX}*")

    @staticmethod
    def _mq_brokers() -> str:
        return _arn("mq", f"broker:{NAME_PREFIX}*")

    @staticmethod
    def _mq_secrets() -> str:
        return _arn("secretsmanager", f"secret:{MQ_SECRET_PREFIX}{NAME_PREFIX}*")


def grant_mq_delete(grantee: iam.IGrantable, who: str) -> None:
    """Teardown and the sweeper: find bb-* Amazon MQ brokers, delete those tagged with a run, and their passwords."""
    allow(grantee, ["mq:ListBrokers"], ["*"],
          wildcard_reason=f"{who} finds the run's Amazon MQ broker by name with ListBrokers, a List action with no "
                          "resource-level permissions")
    allow(grantee, ["mq:ListTags"], [BrokerTargets._mq_brokers()],
          wildcard_reason=f"{who} reads the brokerbench:run tag of bb-* brokers only")
    allow(grantee, ["mq:DeleteBroker"], [BrokerTargets._mq_brokers()], conditions=TAGGED_RESOURCE,
          wildcard_reason=f"{who} deletes only Amazon MQ brokers named bb-* that carry the brokerbench:run tag")
    allow(grantee, ["secretsmanager:DeleteSecret"], [BrokerTargets._mq_secrets()], conditions=TAGGED_RESOURCE,
          wildcard_reason=f"{who} deletes only the brokerbench/bb-* password secrets that carry the brokerbench:run tag")
    allow(grantee, ["secretsmanager:ListSecrets"], ["*"],
          wildcard_reason=f"{who} finds password secrets whose broker has gone; ListSecrets has no resource-level "
                          "permissions")
