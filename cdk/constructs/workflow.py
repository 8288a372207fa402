"""The workflow: statemachines/benchmark_run.asl.json, the very file the local runner executes
(brokerbench.local.workflow.DEFINITION), with its ${...} placeholders filled by DefinitionSubstitutions.

Every ${XFunctionArn} is the function of handlers/<x in snake_case>.py. A placeholder with no value fails
the synthesis, so the file can never reach AWS with a hole in it.
"""

from __future__ import annotations

import re
from pathlib import Path

from aws_cdk import Aws, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from .. import paths
from ..nag import acknowledge, allow, flatten
from .functions import Functions, snake

LOG_LEVEL = sfn.LogLevel.ERROR
LOG_GROUP_PREFIX = "/aws/vendedlogs/states/"


def log_group_name(stack_name: str) -> str:
    return f"{LOG_GROUP_PREFIX}{stack_name}-workflow"


PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")
FUNCTION_ARN = "FunctionArn"


def placeholders(definition: Path = paths.STATE_MACHINE) -> list[str]:
    return sorted(set(PLACEHOLDER.findall(definition.read_text())))


def substitutions(functions: Functions, definition: Path = paths.STATE_MACHINE,
                  extra: dict[str, str] | None = None) -> dict[str, str]:
    """Every placeholder of the definition -> its value; raises naming each placeholder that has none."""
    values, missing = {}, []
    for name in placeholders(definition):
        module = snake(name[: -len(FUNCTION_ARN)]) if name.endswith(FUNCTION_ARN) else None
        if module is not None and module in functions.by_module:
            values[name] = functions[module].function_arn
        elif extra and name in extra:
            values[name] = extra[name]
        else:
            missing.append(name)
    if missing:
        raise ValueError(f"{definition.name}: no value for " + ", ".join("${" + m + "}" for m in missing)
                         + " (a ${XFunctionArn} needs functions/handlers/x.py; anything else needs a substitution "
                           "in cdk/constructs/workflow.py)")
    return values


class Workflow(Construct):
    def __init__(self, scope: Construct, id: str, *, functions: Functions) -> None:
        super().__init__(scope, id)
        values = substitutions(functions)
        invoked = sorted({v for v in values.values()}, key=str)
        # Under /aws/vendedlogs/: Step Functions delivers logs as vended logs, and a log group under that
        # prefix keeps the resource policy CloudWatch Logs writes for it within its size limit.
        self.log_group = logs.LogGroup(self, "Logs", log_group_name=log_group_name(Stack.of(self).stack_name),
                                       retention=logs.RetentionDays.THREE_MONTHS, removal_policy=RemovalPolicy.DESTROY)
        role = iam.Role(self, "Role", assumed_by=iam.ServicePrincipal("states.amazonaws.com"),
                        description="brokerbench workflow: invokes the workflow's functions, logs, traces")
        # Exactly the functions the definition names (unqualified ARNs, as its FunctionName parameters).
        allow(role, ["lambda:InvokeFunction"], invoked)
        self.state_machine = sfn.StateMachine(
            self, "StateMachine",
            definition_body=sfn.DefinitionBody.from_file(str(paths.STATE_MACHINE)),
            definition_substitutions=values,
            state_machine_type=sfn.StateMachineType.STANDARD,
            role=role,
            tracing_enabled=True,
            # ERROR without execution data: ALL with data would put every state's input and output in the logs,
            # the EC2 task's task token among them (StartEc2Worker's parameters), and bill their ingestion per GB.
            # The execution history (90 days, states:GetExecutionHistory) still has every state's data.
            logs=sfn.LogOptions(destination=self.log_group, level=LOG_LEVEL, include_execution_data=False),
        )
        self.role = role
        acknowledge(self.state_machine, "AwsSolutions-SF1",
                    "StateMachine logs at ERROR, not ALL, on purpose: ALL with execution data puts every state's "
                    "input and output in CloudWatch Logs, the EC2 task's task token among them, and bills their "
                    "ingestion per GB; every state's data stays in the execution history (GetExecutionHistory)")
        # RunCellsDistributed (a large plan): a Distributed Map runs its items as child executions of this
        # state machine. A policy of its own, not the role's default one: the state machine depends on that.
        executions = (f"arn:{Aws.PARTITION}:states:{Aws.REGION}:{Aws.ACCOUNT_ID}:execution:"
                      f"{self.state_machine.state_machine_name}/*")
        children = iam.Policy(self, "DistributedMapPolicy", statements=[
            iam.PolicyStatement(actions=["states:StartExecution"], resources=[self.state_machine.state_machine_arn]),
            iam.PolicyStatement(actions=["states:DescribeExecution", "states:StopExecution"], resources=[executions]),
        ])
        role.attach_inline_policy(children)
        acknowledge(children, f"AwsSolutions-IAM5[Resource::{flatten(children, executions)}]",
                    "the Distributed Map's child executions of this state machine (<machine>/<map run>:<id>) "
                    "are named by Step Functions at run time")
        acknowledge(role, "AwsSolutions-IAM5[Resource::*]",
                    "the workflow role: CloudWatch Logs log delivery (logs:CreateLogDelivery, PutResourcePolicy, "
                    "DescribeLogGroups and the rest) and X-Ray tracing (xray:PutTraceSegments, GetSamplingRules) "
                    "support no resource-level permissions; Step Functions documents Resource * for both")

    def grant_api(self, grantee: iam.IGrantable) -> None:
        """The API's (and the schedules' trigger's) StepFunctionsStarter: start_execution, describe_execution,
        stop_execution (cancel), and its admission's reads (a slot holder's execution, the quotas)."""
        self.state_machine.grant_start_execution(grantee)
        executions = (f"arn:{Aws.PARTITION}:states:{Aws.REGION}:{Aws.ACCOUNT_ID}:execution:"
                      f"{self.state_machine.state_machine_name}:*")
        allow(grantee, ["states:DescribeExecution", "states:StopExecution"], [executions],
              wildcard_reason="the API describes and cancels any run's execution of this one state machine; "
                              "executions are named by run ids made at run time")
        # Before a run starts (brokerbench/workflow/admission.py): the account's quotas, and what the region holds of
        # what they count. The runs in flight are slots in the events table (the grantee's events grant); a slot's
        # holder is looked up with DescribeExecution above. What the targets' services hold is counted with their
        # providers' own calls, granted as each declares them (BrokerTargets.grant("admission", ...), cdk/stack.py).
        allow(grantee, ["servicequotas:GetServiceQuota", "servicequotas:GetAWSDefaultServiceQuota",
                        "servicequotas:ListServiceQuotas", "servicequotas:ListAWSDefaultServiceQuotas",
                        "lambda:GetAccountSettings", "ec2:DescribeInstances", "ec2:DescribeInstanceTypes"], ["*"],
              wildcard_reason="the quota checks before a run starts: Service Quotas' Get and List actions, Lambda's "
                              "GetAccountSettings and EC2's Describe actions support no resource-level permissions")
