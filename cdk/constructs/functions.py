"""One Lambda function per handler module in functions/handlers/, all from ONE code asset (the functions/
folder) plus ONE dependencies layer (bundling.py). Each has its own role holding only what it uses, its own
log group, and active tracing (Powertools Tracer)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, replace

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from brokerbench import deployment

from .. import paths
from ..bundling import dependencies_code, function_code
from ..nag import acknowledge, allow
from .network import Network

ENTRY = "lambda_handler"  # every module in functions/handlers defines it
SCHEMAS_IN_LAYER = "/opt/schemas"  # the layer's schemas/ folder (bundling.py), told to brokerbench/paths.py

# Lambda's Python runtimes up to 3.11 run on Amazon Linux 2 (glibc 2.26); confluent-kafka 2.16.1 and
# pulsar-client 3.13.0 ship manylinux_2_28 wheels only and numpy 2.4.6 manylinux_2_27, which do not load
# there. Python 3.12 is the oldest runtime on Amazon Linux 2023 (glibc 2.34), and the project's code is
# 3.11+ (pyproject requires-python). `-c brokerbench:python=3.11` brings 3.11 back once the pins allow it.
RUNTIMES = {"3.11": lambda_.Runtime.PYTHON_3_11, "3.12": lambda_.Runtime.PYTHON_3_12,
            "3.13": lambda_.Runtime.PYTHON_3_13}
DEFAULT_PYTHON = "3.12"


@dataclass(frozen=True)
class Sizing:
    memory_mb: int = 1024
    timeout: Duration = Duration.seconds(60)
    in_vpc: bool = False  # talks to the run's brokers (private subnets, workers security group)


# No function asks for more than 3,008 MB by default, a new account's Lambda memory quota (more would make
# the first deploy roll back). RunCell takes -c brokerbench:workerMemoryMb (brokerbench/deployment.py).
SIZING = {
    # A Lambda cell runs producers, consumers and the cell's parent as processes: memory buys vCPUs
    # (1,769 MB = 1 vCPU), and a cell is at most 600 s of estimated time (brokerbench/workflow placement).
    # Its memory is the deploy's worker memory (Functions' worker_memory_mb), this the default.
    "run_cell": Sizing(memory_mb=deployment.DEFAULT_WORKER_LAMBDA_MEMORY_MB, timeout=Duration.minutes(15), in_vpc=True),
    "record_targets_ready": Sizing(timeout=Duration.minutes(2), in_vpc=True),  # reads each broker's settings
    # A failed cell's cleanup deletes its topics on the run's brokers, which only the VPC reaches.
    "record_cell_failed": Sizing(in_vpc=True),
    "aggregate": Sizing(memory_mb=3008, timeout=Duration.minutes(5)),  # builds the reports from every event
    "check_regression": Sizing(memory_mb=2048, timeout=Duration.minutes(5)),
    "api": Sizing(memory_mb=1769, timeout=Duration.seconds(29)),  # API Gateway's integration limit
    "start_ec2_worker": Sizing(memory_mb=512),
    "sweep_targets": Sizing(timeout=Duration.minutes(5)),  # lists every bb-* cluster, group and worker
    # In AWS a create call that returns at once (the Wait/CheckTarget loop waits for the cluster); the local stack
    # starts the broker within the step: the storage formats and JVMs, then its start-up bound, 60 s per node for
    # Kafka (a 3-node cluster took 40 to 124 s in all at a load of 16 to 32; the 60 s default failed the run).
    "provision_target": Sizing(timeout=Duration.minutes(5)),
}


def handler_modules() -> list[str]:
    """The handler modules, checked to define lambda_handler (synthesis fails loudly otherwise)."""
    names = []
    for path in sorted(paths.HANDLERS.glob("*.py")):
        if path.stem == "__init__":
            continue
        tree = ast.parse(path.read_text(), str(path))
        if not any(isinstance(n, ast.FunctionDef) and n.name == ENTRY for n in tree.body):
            raise ValueError(f"{path} has no top-level {ENTRY}(event, context)")
        names.append(path.stem)
    return names


def camel(module: str) -> str:
    """run_cell -> RunCell, start_ec2_worker -> StartEc2Worker (the ASL's ${StartEc2WorkerFunctionArn})."""
    return "".join(part[:1].upper() + part[1:] for part in module.split("_"))


def snake(name: str) -> str:
    """StartEc2Worker -> start_ec2_worker: the inverse of camel(), as brokerbench.local.workflow reads names."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class Functions(Construct):
    def __init__(self, scope: Construct, id: str, *, network: Network, environment: dict[str, str],
                 python: str = DEFAULT_PYTHON, bundle: bool = True,
                 worker_memory_mb: int = deployment.DEFAULT_WORKER_LAMBDA_MEMORY_MB) -> None:
        super().__init__(scope, id)
        if python not in RUNTIMES:
            raise ValueError(f"brokerbench:python={python!r}: one of {sorted(RUNTIMES)}")
        self.runtime = RUNTIMES[python]
        self.worker_memory_mb = deployment.lambda_memory_mb(worker_memory_mb, "brokerbench:workerMemoryMb")
        code = function_code(self.runtime, python, bundle)
        self.layer = lambda_.LayerVersion(
            self, "Dependencies", code=dependencies_code(self.runtime, python, bundle),
            compatible_runtimes=[self.runtime], compatible_architectures=[lambda_.Architecture.X86_64],
            description="brokerbench: requirements-lambda.txt (manylinux wheels, compiled) and the JSON Schemas")
        common = {**environment, "BROKERBENCH_SCHEMAS": SCHEMAS_IN_LAYER,
                  deployment.WORKER_MEMORY_ENV: str(self.worker_memory_mb)}  # what the cost estimate prices
        self.by_module: dict[str, lambda_.Function] = {}
        for module in handler_modules():
            self.by_module[module] = self._function(module, code, common, network)

    def _function(self, module: str, code: lambda_.Code, environment: dict[str, str], network: Network) -> lambda_.Function:
        name = camel(module)
        sizing = SIZING.get(module, Sizing())
        if module == "run_cell":
            sizing = replace(sizing, memory_mb=self.worker_memory_mb)
        log_group = logs.LogGroup(self, f"{name}Logs", retention=logs.RetentionDays.THREE_MONTHS,
                                  removal_policy=RemovalPolicy.DESTROY)
        role = iam.Role(self, f"{name}Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                        description=f"brokerbench {module} function")
        # What AWSLambdaBasicExecutionRole would give, on this function's log group only.
        allow(role, ["logs:CreateLogStream", "logs:PutLogEvents"], [log_group.log_group_arn])
        vpc_options = {}
        if sizing.in_vpc:
            vpc_options = {"vpc": network.vpc, "vpc_subnets": network.private, "security_groups": [network.workers]}
            # What AWSLambdaVPCAccessExecutionRole gives: Lambda manages the function's network interfaces.
            allow(role, ["ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces", "ec2:DeleteNetworkInterface",
                         "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"], ["*"],
                  wildcard_reason=f"{name} runs in the VPC: Lambda creates and removes its network interfaces, whose "
                                  "ids it picks itself, and DescribeNetworkInterfaces has no resource-level permissions")
        function = lambda_.Function(
            self, name,
            description=f"brokerbench handlers.{module}",
            runtime=self.runtime,
            architecture=lambda_.Architecture.X86_64,  # the layer's wheels are x86_64
            code=code,
            handler=f"handlers.{module}.{ENTRY}",
            layers=[self.layer],
            memory_size=sizing.memory_mb,
            timeout=sizing.timeout,
            environment=environment,
            tracing=lambda_.Tracing.ACTIVE,
            role=role,
            log_group=log_group,
            **vpc_options,
        )
        acknowledge(role, "AwsSolutions-IAM5[Resource::*]",
                    f"{name}Role: active X-Ray tracing needs xray:PutTraceSegments and xray:PutTelemetryRecords, which "
                    "support no resource-level permissions")
        acknowledge(function, "AwsSolutions-L1",
                    f"{name} runs {self.runtime.name}, chosen on purpose (RUNTIMES in cdk/constructs/functions.py): "
                    "the oldest Lambda Python on Amazon Linux 2023, whose glibc the pinned manylinux_2_28 wheels "
                    "need, and the closest to the 3.11 the project is developed and tested with")
        return function

    def __iter__(self):
        return iter(self.by_module.items())

    def __getitem__(self, module: str) -> lambda_.Function:
        return self.by_module[module]

    def add_environment(self, modules: list[str], environment: dict[str, str]) -> None:
        for module in modules:
            for key, value in environment.items():
                self.by_module[module].add_environment(key, value)
