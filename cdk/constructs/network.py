"""The VPC the workers and the run-time brokers share, and who may talk to whom.

Cost, deliberately small (roughly, us-east-1 prices):
- one NAT gateway (~$33/month + data): the EC2 workers install Python 3.12 from Amazon Linux's package
  repositories at boot (`dnf`) and read their task token from SSM through it, and the Lambda workers reach
  anything without an endpoint through it. Their Python packages do not come from PyPI: they are wheels in the
  worker's code asset, fetched from S3 through the gateway endpoint and installed with pip --no-index
  (workers.py, workflow/fleet.py). One NAT gateway, not one per AZ: a benchmark run can retry after an AZ
  outage, it need not ride through one.
- gateway endpoints for DynamoDB and S3 (free): the bulk of the traffic (events, reports, worker code).
- interface endpoints (~$7.50/month per AZ each) only for what code inside the VPC calls: Step Functions
  (EC2 workers heartbeat and answer their task tokens) and Secrets Manager (the Redis AUTH token, read by
  RunCell, RecordTargetsReady and the workers). SNS and CloudWatch Logs are one context value away
  (-c brokerbench:interfaceEndpoints=states,secretsmanager,sns,logs) but off by default: nothing inside the
  VPC publishes to SNS (Notify and RecordRunFailed run outside it), and Lambda ships its logs itself while
  the workers run no log agent. Each endpoint sits in one AZ; clients in the other AZs reach it across AZs
  (private DNS resolves everywhere). Anything without an endpoint goes through the NAT gateway.
- three AZs, because MSK wants its broker count (3 by default) to be a multiple of its client subnets.

The brokers' security group lets the workers in on the ports the cloud providers declare (each plug-in's
cloud_access.py: MSK 9092-9098, ElastiCache 6379, Amazon MQ's AMQPS 5671) and on nothing else.
"""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3 as s3
from constructs import Construct

from .. import access

AZ_COUNT = 3

INTERFACE_ENDPOINTS = {  # context name -> (construct id, service)
    "states": ("StepFunctions", ec2.InterfaceVpcEndpointAwsService.STEP_FUNCTIONS),
    "secretsmanager": ("SecretsManager", ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER),
    "sns": ("Sns", ec2.InterfaceVpcEndpointAwsService.SNS),
    "logs": ("Logs", ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS),
}
DEFAULT_INTERFACE_ENDPOINTS = ("states", "secretsmanager")


class Network(Construct):
    def __init__(self, scope: Construct, id: str, *, flow_logs: s3.IBucket,
                 interface_endpoints: tuple[str, ...] = DEFAULT_INTERFACE_ENDPOINTS) -> None:
        super().__init__(scope, id)
        unknown = set(interface_endpoints) - set(INTERFACE_ENDPOINTS)
        if unknown:
            raise ValueError(f"brokerbench:interfaceEndpoints: {sorted(unknown)} not among {sorted(INTERFACE_ENDPOINTS)}")
        self.vpc = ec2.Vpc(
            self, "Vpc",
            max_azs=AZ_COUNT,
            nat_gateways=1,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
                ec2.SubnetConfiguration(name="private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=20),
            ],
            gateway_endpoints={
                "DynamoDb": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.DYNAMODB),
                "S3": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.S3),
            },
        )
        self.vpc.add_flow_log("FlowLogs", destination=ec2.FlowLogDestination.to_s3(flow_logs, "vpc-flow-logs/"),
                              traffic_type=ec2.FlowLogTrafficType.ALL)
        self.private = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
        one_az = ec2.SubnetSelection(subnets=self.private_subnets[:1])
        self.workers = ec2.SecurityGroup(self, "Workers", vpc=self.vpc, allow_all_outbound=True,
                                         description="brokerbench workers (Lambda run-cell and EC2): clients of the brokers")
        for key in interface_endpoints:
            name, service = INTERFACE_ENDPOINTS[key]
            endpoint = self.vpc.add_interface_endpoint(name, service=service, subnets=one_az, private_dns_enabled=True,
                                                       open=False)  # HTTPS from the workers only, not the whole VPC
            endpoint.connections.allow_default_port_from(self.workers, f"HTTPS to {name} from the workers")
        self.brokers = ec2.SecurityGroup(self, "Brokers", vpc=self.vpc, allow_all_outbound=False,
                                         description="brokerbench run-time brokers (MSK, ElastiCache, Amazon MQ): reached only by "
                                                     "workers")
        # The ports each cloud provider declares beside its cloud.py (brokerbench.registry.CloudAccess.ports).
        for port in access.ports():
            self.brokers.add_ingress_rule(self.workers, access.ec2_port(port), f"{port.description} from the workers")

    @property
    def private_subnets(self) -> list[ec2.ISubnet]:
        return self.vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS).subnets
