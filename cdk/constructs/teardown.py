"""Teardown that always happens, beyond the run workflow's own TeardownTargets:

- **The teardown state machine** (statemachines/teardown_run.asl.json): the run workflow's teardown states alone
  (delete what can be deleted, wait while a target still being created refuses, ask again for up to 90 minutes).
- **RunEnded**, an EventBridge rule on "Step Functions Execution Status Change" of the run workflow with status
  FAILED, ABORTED or TIMED_OUT: the RunEnded function gives the run its end and starts the teardown state machine
  for it. SUCCEEDED reaches it too, and every ending releases the run's slot among the runs in flight
  (brokerbench/workflow/admission.py). A stop from the console, an execution timeout and an error no catcher takes (States.Runtime,
  States.DataLimitExceeded) skip the workflow's own teardown; this is what deletes their targets.
- The API's cancel starts the teardown state machine too (brokerbench/workflow/stop.py), instead of deleting
  within its 29 s request.
- **RunEnded's dead letters**: an SQS queue that holds every execution end RunEnded did not handle, whether
  EventBridge could not deliver it (the rule target's dead-letter queue) or the function failed it with its retries
  (the function's on-failure destination). A message in it raises an alarm (cdk/constructs/alerts.py), and the
  sweeper handles each again.
- **Sweeper**, an hourly EventBridge schedule: the SweepTargets function drains RunEnded's dead letters, then deletes
  bb-* MSK clusters, ElastiCache groups, Amazon MQ brokers and EC2 workers tagged with a run whose end is stored or
  whose deadline has passed, and leaves everything else (brokerbench/workflow/sweep.py).
"""

from __future__ import annotations

from aws_cdk import Aws, Duration, RemovalPolicy, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as events_targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from .. import paths
from ..nag import acknowledge, allow
from ..access import TAGGED
from .broker_targets import BrokerTargets
from .functions import Functions
from .storage import EventStore
from .workflow import LOG_GROUP_PREFIX, LOG_LEVEL, substitutions

ENDINGS = ["FAILED", "ABORTED", "TIMED_OUT"]  # brokerbench.workflow.stop.ENDINGS
# Every ending reaches RunEnded: SUCCEEDED only releases the run's slot among the runs in flight
# (brokerbench.workflow.admission), which the early endings release too.
STATUSES = [*ENDINGS, "SUCCEEDED"]
SWEEP_EVERY = Duration.hours(1)
MACHINE_ENV = "BROKERBENCH_TEARDOWN_MACHINE_ARN"  # brokerbench.workflow.stop.teardowns
DEAD_LETTERS_ENV = "BROKERBENCH_RUN_ENDED_DLQ_URL"  # brokerbench.workflow.sweep.DEAD_LETTERS_ENV
DEAD_LETTER_RETENTION = Duration.days(14)  # SQS's longest: two weeks of hourly sweeps to handle each again


def log_group_name(stack_name: str) -> str:
    return f"{LOG_GROUP_PREFIX}{stack_name}-teardown"


class Teardown(Construct):
    def __init__(self, scope: Construct, id: str, *, functions: Functions, run_machine: sfn.IStateMachine,
                 store: EventStore, targets: BrokerTargets) -> None:
        super().__init__(scope, id)
        values = substitutions(functions, paths.TEARDOWN_MACHINE)
        # As the run workflow's (cdk/constructs/workflow.py): under /aws/vendedlogs/, errors only, no execution data.
        self.log_group = logs.LogGroup(self, "Logs", log_group_name=log_group_name(Stack.of(self).stack_name),
                                       retention=logs.RetentionDays.THREE_MONTHS, removal_policy=RemovalPolicy.DESTROY)
        role = iam.Role(self, "Role", assumed_by=iam.ServicePrincipal("states.amazonaws.com"),
                        description="brokerbench teardown: invokes TeardownTarget and RecordRunFailed, logs, traces")
        allow(role, ["lambda:InvokeFunction"], sorted(set(values.values()), key=str))
        self.state_machine = sfn.StateMachine(
            self, "StateMachine",
            definition_body=sfn.DefinitionBody.from_file(str(paths.TEARDOWN_MACHINE)),
            definition_substitutions=values,
            state_machine_type=sfn.StateMachineType.STANDARD,
            role=role,
            tracing_enabled=True,
            logs=sfn.LogOptions(destination=self.log_group, level=LOG_LEVEL, include_execution_data=False),
        )
        acknowledge(self.state_machine, "AwsSolutions-SF1",
                    "the teardown StateMachine logs at ERROR, not ALL, on purpose: every failed state is logged, and "
                    "the execution history (90 days) keeps each state's data without billing log ingestion for a "
                    "loop that asks once a minute for up to 90 minutes")
        acknowledge(role, "AwsSolutions-IAM5[Resource::*]",
                    "the teardown workflow role: CloudWatch Logs log delivery and X-Ray tracing support no "
                    "resource-level permissions; Step Functions documents Resource * for both")

        ended = functions["run_ended"]
        self.dead_letters = sqs.Queue(self, "RunEndedDeadLetters", retention_period=DEAD_LETTER_RETENTION,
                                      encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True)
        acknowledge(self.dead_letters, "AwsSolutions-SQS3",
                    "RunEndedDeadLetters is itself a dead-letter queue (of the RunEnded rule's target and of the "
                    "RunEnded function's asynchronous invocations); the sweeper handles and deletes its messages")
        ended.configure_async_invoke(on_failure=destinations.SqsDestination(self.dead_letters))
        self.rule = events.Rule(
            self, "RunEnded", description="brokerbench: a run's workflow ended: release its slot among the runs in "
                                          "flight; FAILED, ABORTED or TIMED_OUT: store its end and tear its "
                                          "targets down",
            event_pattern=events.EventPattern(
                source=["aws.states"], detail_type=["Step Functions Execution Status Change"],
                detail={"status": STATUSES, "stateMachineArn": [run_machine.state_machine_arn]}),
            targets=[events_targets.LambdaFunction(ended, retry_attempts=8, max_event_age=Duration.hours(24),
                                                   dead_letter_queue=self.dead_letters)])
        self.grant_handover(ended)
        store.grant_events(ended, write=True)

        sweeper = functions["sweep_targets"]
        self.schedule = events.Rule(
            self, "Sweeper", description="brokerbench: delete bb-* brokers and workers of runs that have ended",
            schedule=events.Schedule.rate(SWEEP_EVERY),
            targets=[events_targets.LambdaFunction(sweeper, retry_attempts=2)])
        # The sweeper handles RunEnded's dead letters as RunEnded would: stores ends, starts teardowns.
        store.grant_events(sweeper, write=True)
        self.dead_letters.grant_consume_messages(sweeper)
        sweeper.add_environment(DEAD_LETTERS_ENV, self.dead_letters.queue_url)
        self.grant_handover(sweeper)
        grant_sweep(sweeper, targets)

    def grant_handover(self, grantee) -> None:
        """StepFunctionsTeardowns: start the teardown state machine for a run (the RunEnded function, the API's
        cancel), told its ARN."""
        self.state_machine.grant_start_execution(grantee)
        grantee.add_environment(MACHINE_ENV, self.state_machine.state_machine_arn)


def _arn(service: str, resource: str) -> str:
    return f"arn:{Aws.PARTITION}:{service}:{Aws.REGION}:{Aws.ACCOUNT_ID}:{resource}"


def grant_sweep(grantee: iam.IGrantable, targets: BrokerTargets) -> None:
    """The sweeper lists what runs created and deletes only what is named bb-* and tagged with a run: the cloud
    providers' targets as each declares its sweep (brokerbench.registry.CloudAccess), and the EC2 workers."""
    targets.grant("sweep", grantee)
    allow(grantee, ["ec2:DescribeInstances"], ["*"],
          wildcard_reason="the sweeper finds EC2 workers by their brokerbench:run tag; DescribeInstances has no "
                          "resource-level permissions")
    allow(grantee, ["ec2:TerminateInstances"], [_arn("ec2", "instance/*")],
          conditions=TAGGED["resource"],
          wildcard_reason="the sweeper terminates only instances that carry the brokerbench:run tag (EC2 workers "
                          "of a run); instance ids are made at launch")
