"""What Amazon MQ for RabbitMQ's provider (cloud.py, cloud_faults.py) needs of the deployment: its IAM statements by
role, the port its clients reach the broker on, and the environment its functions are told. Plain data; the CDK app
grants and sets exactly this (brokerbench.registry.CloudAccess).

A run's broker is named `bb-<run id>-<broker>` (brokerbench.targets.resource_name) and tagged `brokerbench:run`;
its admin password is the secret `brokerbench/bb-<run id>-<broker>` (cloud.SECRET_PREFIX) with the same tag.
Spend guard: Amazon MQ has no IAM condition key for the host instance type or deployment mode (only the
aws:Request/ResourceTag keys), so the allowed types (prices.json) and the 1-or-3 nodes are held by the provider
(cloud.py, before any call) and the plug-in's provision schema.
"""

from __future__ import annotations

from ...registry import ANY_RESOURCE, CloudAccess, Grant, Port

SERVICE = "mq.amazonaws.com"
BROKERS = "brokers"
PASSWORDS = "passwords"
NETWORK_INTERFACES = "network-interfaces"
SERVICE_ROLE = "service-linked-role"

RESOURCES = {
    BROKERS: "arn:{partition}:mq:{region}:{account}:broker:bb-*",
    PASSWORDS: "arn:{partition}:secretsmanager:{region}:{account}:secret:brokerbench/bb-*",
    NETWORK_INTERFACES: "arn:{partition}:ec2:{region}:{account}:network-interface/*",
    SERVICE_ROLE: "arn:{partition}:iam::{account}:role/aws-service-role/mq.amazonaws.com/AWSServiceRoleForAmazonMQ*",
}
FAULT = ("a run's fault (kind reboot) acts on its own target, created per run as bb-<run id>-<broker> with the "
         "brokerbench:run tag; the ARN's last part is assigned at creation, so the bb-* name pattern and the tag "
         "condition scope it")

# What provider() reads (cloud.py), set by the CDK app on the functions that provision, check and tear down targets
SUBNETS_ENV = "BROKERBENCH_MQ_SUBNETS"  # comma-separated: a single instance uses the first, a cluster two or more
SECURITY_GROUPS_ENV = "BROKERBENCH_MQ_SECURITY_GROUPS"  # comma-separated
ENVIRONMENT = {SUBNETS_ENV: "{private_subnets}", SECURITY_GROUPS_ENV: "{brokers_security_group}"}


def _deleting(role: str, who: str) -> tuple[Grant, ...]:
    """Teardown and the sweeper: find bb-* brokers, delete those tagged with a run, and their passwords."""
    return (
        Grant(role, ("mq:ListBrokers",), (ANY_RESOURCE,),
              f"{who} finds the run's Amazon MQ broker by name with ListBrokers, a List action with no resource-level "
              "permissions"),
        Grant(role, ("mq:ListTags",), (BROKERS,), f"{who} reads the brokerbench:run tag of bb-* brokers only"),
        Grant(role, ("mq:DeleteBroker",), (BROKERS,), tagged="resource",
              reason=f"{who} deletes only Amazon MQ brokers named bb-* that carry the brokerbench:run tag"),
        Grant(role, ("secretsmanager:DeleteSecret",), (PASSWORDS,), tagged="resource",
              reason=f"{who} deletes only the brokerbench/bb-* password secrets that carry the brokerbench:run tag"),
        Grant(role, ("secretsmanager:ListSecrets",), (ANY_RESOURCE,),
              f"{who} finds password secrets whose broker has gone; ListSecrets has no resource-level permissions"),
    )


ACCESS = CloudAccess(resources=RESOURCES, grants=(
    # -- provision: the run's password secret, then CreateBroker with the run tag --------------------------------
    Grant("provision", ("mq:CreateBroker", "mq:CreateTags"), (BROKERS,), tagged="request",
          reason="Amazon MQ brokers are created per run as bb-<run id>-<broker>; their ARNs end in an id Amazon MQ "
                 "assigns, so only the bb-* name pattern (and the brokerbench:run tag) can scope them"),
    Grant("provision", ("ec2:CreateNetworkInterface", "ec2:CreateNetworkInterfacePermission",
                        "ec2:DescribeInternetGateways", "ec2:DescribeNetworkInterfaces",
                        "ec2:DescribeNetworkInterfacePermissions", "ec2:DescribeRouteTables",
                        "ec2:DescribeSecurityGroups", "ec2:DescribeSubnets", "ec2:DescribeVpcs"), (ANY_RESOURCE,),
          "Amazon MQ CreateBroker places the broker's network interfaces in the given subnets with the caller's "
          "permissions (Amazon MQ's documented requirement); these EC2 actions take no resource-level permissions "
          "at creation"),
    # ...and may remove one it created; a network interface has an ec2:Vpc condition key: the stack's VPC only.
    Grant("provision", ("ec2:DeleteNetworkInterface",), (NETWORK_INTERFACES,),
          condition={"ArnEquals": {"ec2:Vpc": "arn:{partition}:ec2:{region}:{account}:vpc/{vpc}"}},
          reason="Amazon MQ CreateBroker may remove a network interface it placed with the caller's permissions; "
                 "interface ids are made at creation, so the ec2:Vpc condition holds the delete to this stack's VPC"),
    Grant("provision", ("iam:CreateServiceLinkedRole",), (SERVICE_ROLE,),
          condition={"StringEquals": {"iam:AWSServiceName": SERVICE}},
          reason="the first Amazon MQ broker in an account creates its service-linked role; the ARN pattern is "
                 "AWS's own name for it"),
    Grant("provision", ("mq:ListBrokers",), (ANY_RESOURCE,),
          "a retried CreateBroker finds the run's broker by name with ListBrokers, a List action with no "
          "resource-level permissions"),
    Grant("provision", ("mq:ListTags",), (BROKERS,),
          "a retried CreateBroker checks that the existing bb-* broker is the run's own (its brokerbench:run tag)"),
    Grant("provision", ("secretsmanager:CreateSecret", "secretsmanager:TagResource"), (PASSWORDS,), tagged="request",
          reason="each run's broker password is stored as brokerbench/bb-<run id>-<broker>; Secrets Manager appends "
                 "a random suffix to the ARN"),
    Grant("provision", ("secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue"), (PASSWORDS,),
          tagged="resource", reason="a retried provision reads the password the run stored before (brokerbench/bb-*)"),
    # -- check: DescribeBroker until RUNNING ---------------------------------------------------------------------
    Grant("check", ("mq:DescribeBroker",), (BROKERS,),
          "Amazon MQ broker ARNs end in an id assigned at creation: bb-* (the run's name) scopes them"),
    *_deleting("teardown", "teardown"),
    *_deleting("sweep", "the sweeper"),
    # -- clients: the run's broker password ----------------------------------------------------------------------
    Grant("clients", ("secretsmanager:GetSecretValue",), (PASSWORDS,), tagged="resource",
          reason="RabbitMQ clients read the run's Amazon MQ broker password (brokerbench/bb-*, one per run, with a "
                 "random suffix Secrets Manager appends)"),
    # -- faults: RebootBroker, then the broker's state until it runs again ---------------------------------------
    Grant("faults", ("mq:RebootBroker",), (BROKERS,), FAULT, tagged="resource"),
    Grant("faults", ("mq:DescribeBroker",), (BROKERS,),
          "after a reboot the cell reads the run's bb-* broker's state until it runs again"),
    # -- admission: the region's brokers (the quota "Number of brokers per region") -------------------------------
    Grant("admission", ("mq:ListBrokers",), (ANY_RESOURCE,),
          "the Amazon MQ broker quota check before a run starts lists the region's brokers, a List action with no "
          "resource-level permissions"),
), ports=(
    Port(5671, 5671, "AMQPS (Amazon MQ for RabbitMQ)"),  # AMQP over TLS
), environment=ENVIRONMENT)
