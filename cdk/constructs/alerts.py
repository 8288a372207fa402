"""Who hears about trouble: one SNS topic (KMS-encrypted, SSL only) for regressions and failed runs (Notify,
RecordRunFailed: brokerbench.workflow.outputs.SnsNotifier) and for the alarms on the workflow and on every
function.

Subscriptions come from context: `brokerbench:alertEmails` (every message) and `brokerbench:recipientEmails`
(only the runs whose request names that address in `notify`: SnsNotifier sets the `recipients` message
attribute, and the subscription filters on it).
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from ..nag import acknowledge

PERIOD = Duration.minutes(5)


class Alerts(Construct):
    def __init__(self, scope: Construct, id: str, *, alert_emails: list[str] = (),
                 recipient_emails: list[str] = ()) -> None:
        super().__init__(scope, id)
        self.key = kms.Key(self, "TopicKey", enable_key_rotation=True, removal_policy=RemovalPolicy.RETAIN,
                           description="brokerbench: encrypts the alerts topic")
        # CloudWatch alarms publish to an encrypted topic only if the key lets CloudWatch use it.
        self.key.add_to_resource_policy(iam.PolicyStatement(
            principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
            actions=["kms:Decrypt", "kms:GenerateDataKey*"], resources=["*"]))
        self.topic = sns.Topic(self, "Topic", display_name="brokerbench", master_key=self.key, enforce_ssl=True)
        for email in alert_emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
        for email in recipient_emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(email, filter_policy={
                "recipients": sns.SubscriptionFilter.string_filter(allowlist=[email])}))
        self.alarms: list[cloudwatch.Alarm] = []

    def grant_publish(self, grantee: iam.IGrantable) -> None:
        self.topic.grant_publish(grantee)  # sns:Publish on the topic, and use of its key
        acknowledge(grantee.grant_principal, "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]",
                    "publishing to the KMS-encrypted alerts topic needs kms:GenerateDataKey* and kms:Decrypt on the "
                    "topic's own key (TopicKey) only; the * covers GenerateDataKey's variants, as SNS documents")

    def _alarm(self, id: str, metric: cloudwatch.IMetric, description: str) -> None:
        alarm = cloudwatch.Alarm(self, id, metric=metric, threshold=1, evaluation_periods=1,
                                 comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                                 treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                                 alarm_description=description)
        alarm.add_alarm_action(actions.SnsAction(self.topic))
        self.alarms.append(alarm)

    def watch_workflow(self, state_machine: sfn.StateMachine) -> None:
        self._alarm("WorkflowFailed", state_machine.metric_failed(period=PERIOD, statistic="Sum"),
                    "brokerbench: a benchmark run's workflow execution failed (a failed step, a failed teardown, "
                    "or an invalid request from a schedule)")
        self._alarm("WorkflowTimedOut", state_machine.metric_timed_out(period=PERIOD, statistic="Sum"),
                    "brokerbench: a benchmark run's workflow execution timed out")

    def watch_teardown(self, state_machine: sfn.StateMachine) -> None:
        self._alarm("TeardownFailed", state_machine.metric_failed(period=PERIOD, statistic="Sum"),
                    "brokerbench: tearing down a run that ended early failed or ran out of time: its MSK cluster or "
                    "ElastiCache group may still be running (the hourly sweeper tries again)")

    def watch_leftovers(self, dead_letters: sqs.IQueue) -> None:
        """What could leave brokers running with nobody deleting them: an execution end RunEnded did not handle,
        and anything the hourly sweeper could not list, read or delete (its SweepFailures metric)."""
        self._alarm("RunEndedDeadLetters", dead_letters.metric_approximate_number_of_messages_visible(
            period=PERIOD, statistic="Maximum"),
            "brokerbench: RunEnded did not handle a run's end (failed workflow, console stop or timeout): that run "
            "may read as still going and its brokers may run until the hourly sweeper handles the message")
        # handlers/sweep_targets.py counts them through Powertools (brokerbench.observability: namespace and service)
        self._alarm("SweepFailures", cloudwatch.Metric(namespace="brokerbench", metric_name="SweepFailures",
                                                       dimensions_map={"service": "brokerbench"}, period=PERIOD,
                                                       statistic="Sum"),
                    "brokerbench: the hourly sweeper could not list, read or delete something (its log says what "
                    "and why): brokers of ended runs may still be running")

    def watch_function(self, name: str, function: lambda_.Function) -> None:
        self._alarm(f"{name}Errors", function.metric_errors(period=PERIOD, statistic="Sum"),
                    f"brokerbench: the {name} function raised errors")
