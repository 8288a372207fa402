"""The EC2 worker path: long or heavy cells run on an instance started per cell by StartEc2Worker.

brokerbench.workflow.fleet.Ec2Fleet calls RunInstances with this launch template (by name), one private
subnet, the cell's user data and IMDSv2 required, after putting the task token in an SSM SecureString
parameter under /<stack>/task-tokens/ (the user data names the parameter; the boot script reads and deletes
it, so the token is never in the user data); the user data downloads the worker code
(BROKERBENCH_WORKER_ASSET, `aws s3 cp`), unzips it into /opt/brokerbench/app, installs the Lambda layer's
lock (requirements-lambda.txt) into a Python 3.12 venv from the wheels the asset carries (pip --no-index
--require-hashes: no PyPI at boot, the same packages as the layer; bundling.worker_code), runs the cell with
PYTHONPATH=app/functions, heartbeats and answers the workflow's task token
(SendTaskHeartbeat / SendTaskSuccess / SendTaskFailure), and powers off, which terminates the instance.
The asset is laid out like the repository (functions/, schemas/, requirements-lambda.txt, pyproject.toml,
setup.py, and wheels/ when bundled), so brokerbench/paths.py finds the schemas beside functions/ as in a checkout.
"""

from __future__ import annotations

import json

from aws_cdk import Aws, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3_assets as s3_assets
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from brokerbench import deployment

from .. import paths
from ..bundling import worker_code, worker_source
from ..nag import acknowledge, allow, flatten
from .broker_targets import BrokerTargets
from .network import Network
from .storage import EventStore

DEFAULT_INSTANCE_TYPE = deployment.EC2_WORKER_INSTANCE_TYPE  # brokerbench/deployment.py: the cost estimate prices it
ROOT_VOLUME_GB = 30


def allowed_instance_types() -> list[str]:
    """The worker instance types a deploy may choose: those the cost estimate has a price for (pricing.json's
    ec2.instance_hour), so every run's EC2 workers are priced, and nothing larger than those is ever launched."""
    return sorted(json.loads(paths.PRICING.read_text())["ec2"]["instance_hour"])


def checked_instance_type(instance_type: str) -> str:
    if instance_type not in allowed_instance_types():
        raise ValueError(f"brokerbench:workerInstanceType={instance_type!r}: one of {allowed_instance_types()} (the "
                         "types priced in functions/brokerbench/pricing.json; add a price there to allow another)")
    return instance_type


def cpu_type(instance_type: str) -> ec2.AmazonLinuxCpuType:
    """The AMI's architecture follows the instance type: arm64 for Graviton (c7g, m7g...), x86_64 otherwise."""
    arm = ec2.InstanceType(instance_type).architecture == ec2.InstanceArchitecture.ARM_64
    return ec2.AmazonLinuxCpuType.ARM_64 if arm else ec2.AmazonLinuxCpuType.X86_64


class Ec2Workers(Construct):
    def __init__(self, scope: Construct, id: str, *, network: Network, store: EventStore, targets: BrokerTargets,
                 instance_type: str = DEFAULT_INSTANCE_TYPE, bundle: bool = True) -> None:
        super().__init__(scope, id)
        self.network = network
        self.instance_type = checked_instance_type(instance_type)
        self.role = iam.Role(self, "InstanceRole", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
                             description="brokerbench EC2 worker: runs one cell and reports to the workflow")
        arm = cpu_type(self.instance_type) == ec2.AmazonLinuxCpuType.ARM_64
        self.asset = s3_assets.Asset(self, "Code", **worker_code(worker_source(), bundle, "aarch64" if arm else "x86_64"))
        # The one object of the worker code (Asset.grant_read would give the whole CDK assets bucket).
        allow(self.role, ["s3:GetObject"],
              [f"arn:{Aws.PARTITION}:s3:::{self.asset.s3_bucket_name}/{self.asset.s3_object_key}"])
        store.grant_events(self.role, write=True)
        targets.grant("clients", self.role)
        targets.grant("faults", self.role)  # a cell's faults in AWS (kind reboot) on its run's own target

        # fleet.TokenParameters: each launch's task token waits here for its instance (never in user data).
        self.token_parameters = f"/{Stack.of(self).stack_name}/task-tokens"
        allow(self.role, ["ssm:GetParameter", "ssm:DeleteParameter"], [self._token_parameter_arn()],
              wildcard_reason="an EC2 worker reads and deletes its own launch's task-token parameter, named per launch "
                              "at run time under /<stack>/task-tokens/ (SecureString, the account's aws/ssm key)")
        self.launch_template_name = f"{Stack.of(self).stack_name}-worker"  # fleet.py launches it by name
        self.launch_template = ec2.LaunchTemplate(
            self, "LaunchTemplate",
            launch_template_name=self.launch_template_name,
            # SSM public parameter, read at deploy time; arm64 for a Graviton instance type
            machine_image=ec2.MachineImage.latest_amazon_linux2023(cpu_type=cpu_type(self.instance_type)),
            instance_type=ec2.InstanceType(self.instance_type),
            role=self.role,
            security_group=network.workers,
            require_imdsv2=True,
            http_put_response_hop_limit=1,
            instance_initiated_shutdown_behavior=ec2.InstanceInitiatedShutdownBehavior.TERMINATE,
            block_devices=[ec2.BlockDevice(device_name="/dev/xvda", volume=ec2.BlockDeviceVolume.ebs(
                ROOT_VOLUME_GB, encrypted=True, volume_type=ec2.EbsDeviceVolumeType.GP3, delete_on_termination=True))],
        )

    def environment(self) -> dict[str, str]:
        """What StartEc2Worker reads (brokerbench.workflow.wiring.fleet) and what its user data downloads."""
        return {
            "BROKERBENCH_WORKER_LAUNCH_TEMPLATE": self.launch_template_name,
            "BROKERBENCH_WORKER_SUBNET": self.network.private_subnets[0].subnet_id,
            "BROKERBENCH_WORKER_ASSET": self.asset.s3_object_url,
            "BROKERBENCH_TOKEN_PARAMETERS": self.token_parameters,
        }

    def _token_parameter_arn(self) -> str:
        return f"arn:{Aws.PARTITION}:ssm:{Aws.REGION}:{Aws.ACCOUNT_ID}:parameter{self.token_parameters}/*"

    def grant_launch(self, grantee: iam.IGrantable) -> None:
        """StartEc2Worker: RunInstances from this launch template only, tags at launch, PassRole of the worker role."""
        template = f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}:{Aws.ACCOUNT_ID}:launch-template/{self.launch_template.launch_template_id}"
        own = lambda kind: f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}:{Aws.ACCOUNT_ID}:{kind}"  # noqa: E731
        allow(grantee, ["ec2:RunInstances"], [template])
        # The instance only of the deployed type (a RunInstances call may override the template's type):
        # ec2:InstanceType is a condition key of the instance resource only, hence a statement of its own.
        allow(grantee, ["ec2:RunInstances"], [own("instance/*")],
              conditions={"ArnLike": {"ec2:LaunchTemplate": template},
                          "StringEquals": {"ec2:InstanceType": [self.instance_type]}},
              wildcard_reason="each cell's instance is a new resource whose id exists only after RunInstances; the "
                              "conditions allow it only from the worker launch template and of the deployed type")
        allow(grantee, ["ec2:RunInstances"], [own("volume/*"), own("network-interface/*")],
              conditions={"ArnLike": {"ec2:LaunchTemplate": template}},
              wildcard_reason="each cell's instance, root volume and network interface are new resources whose ids "
                              "exist only after RunInstances; the condition allows them only from the worker launch template")
        allow(grantee, ["ec2:RunInstances"],
              [own(f"subnet/{s.subnet_id}") for s in self.network.private_subnets]
              + [own(f"security-group/{self.network.workers.security_group_id}"),
                 f"arn:{Aws.PARTITION}:ec2:{Aws.REGION}::image/*"],
              wildcard_reason="the worker AMI is the latest Amazon Linux 2023 image, resolved from AWS's public SSM "
                              "parameter at deploy time and owned by Amazon, so its id is not known to the app")
        allow(grantee, ["ec2:CreateTags"], [own("instance/*"), own("volume/*")],
              conditions={"StringEquals": {"ec2:CreateAction": "RunInstances"}},
              wildcard_reason="the brokerbench:run and brokerbench:cell tags are set on the new instance at launch "
                              "(TagSpecifications), which needs CreateTags on the not-yet-existing instance")
        allow(grantee, ["ssm:PutParameter", "ssm:DeleteParameter"], [self._token_parameter_arn()],
              wildcard_reason="StartEc2Worker leaves each launch's task token in a parameter of its own under "
                              "/<stack>/task-tokens/ (named by the launch's client token), and deletes it when the "
                              "launch goes to another attempt")
        allow(grantee, ["iam:PassRole"], [self.role.role_arn],
              conditions={"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}})

    def grant_callbacks(self, state_machine: sfn.StateMachine) -> None:
        """The instance answers its task token: SendTaskSuccess / SendTaskFailure / SendTaskHeartbeat.

        The token may belong to the run's own execution or to a child execution of RunCellsDistributed (a
        Distributed Map runs its items as executions named <machine>/<map run label>:<id>, STANDARD as the
        ASL asks, EXPRESS in the express: form), so the policy names the state machine and each of those forms.

        In a policy of its own: the launch template waits for the role's default policy, StartEc2Worker's
        policy names the launch template, and the state machine names StartEc2Worker, so a reference to the
        state machine from the default policy would close a circle."""
        resources = callback_resources(state_machine)
        policy = iam.Policy(self, "CallbackPolicy", roles=[self.role], statements=[iam.PolicyStatement(
            actions=["states:SendTaskSuccess", "states:SendTaskFailure", "states:SendTaskHeartbeat"],
            resources=resources)])
        for resource in resources[1:]:
            acknowledge(policy, f"AwsSolutions-IAM5[Resource::{flatten(policy, resource)}]",
                        "a worker answers the task token of the run's execution or of a Distributed Map child "
                        "execution of this one state machine; executions are named by Step Functions at run time")


def callback_resources(state_machine: sfn.StateMachine) -> list[str]:
    """The state machine, its executions, and its Distributed Map children: the child state machine and its
    executions (standard and express). Which of these AWS evaluates a callback against was never tried in
    AWS: all are named, each scoped to this one state machine."""
    machine = state_machine.state_machine_name
    own = f"arn:{Aws.PARTITION}:states:{Aws.REGION}:{Aws.ACCOUNT_ID}"
    return [state_machine.state_machine_arn,
            f"{own}:stateMachine:{machine}/*",  # a map run's child state machine: <machine>/<map run label>
            f"{own}:execution:{machine}:*",  # the run's execution
            f"{own}:execution:{machine}/*",  # a child execution: <machine>/<map run label>:<execution id>
            f"{own}:express:{machine}/*"]  # the same as an express child: <machine>/<label>:<id>:<run id>
