"""A monthly AWS Budgets cost budget: the account's spend against an amount (-c brokerbench:monthlyBudgetUsd,
default 100 USD), told by e-mail (-c brokerbench:budgetEmail, else brokerbench:alertEmails) and on the alerts
topic when the actual spend passes 80% and 100% of it and when the month's forecast passes 100%.

The budget counts the whole account's cost: filtering it by the stack's `project` tag would need that tag
activated as a cost allocation tag in the Billing console first, which a deploy cannot do. A budget alarms,
it stops nothing: what stops spending is teardown, the sweeper and the spend guards (docs/deploy.md).
"""

from __future__ import annotations

from aws_cdk import Aws, Stack
from aws_cdk import aws_budgets as budgets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

DEFAULT_MONTHLY_BUDGET_USD = 100
MAX_EMAIL_SUBSCRIBERS = 10  # AWS Budgets: at most 10 e-mail subscribers (and one SNS topic) per notification
# (notification type, threshold as % of the amount)
THRESHOLDS = (("ACTUAL", 80), ("ACTUAL", 100), ("FORECASTED", 100))


def monthly_amount(value) -> float:
    try:
        amount = float(str(value).replace(",", ""))
    except ValueError:
        raise ValueError(f"brokerbench:monthlyBudgetUsd={value!r}: a positive amount in USD") from None
    if not amount > 0:
        raise ValueError(f"brokerbench:monthlyBudgetUsd={value!r}: a positive amount in USD")
    return amount


class Budget(Construct):
    def __init__(self, scope: Construct, id: str, *, monthly_usd, emails: list[str], topic: sns.ITopic,
                 key: kms.IKey) -> None:
        super().__init__(scope, id)
        amount = monthly_amount(monthly_usd)
        if len(emails) > MAX_EMAIL_SUBSCRIBERS:
            raise ValueError(f"brokerbench:budgetEmail (else brokerbench:alertEmails): at most {MAX_EMAIL_SUBSCRIBERS} "
                             f"addresses (AWS Budgets' limit per notification), not {len(emails)}")
        # AWS Budgets publishes to the KMS-encrypted alerts topic: the topic and its key must let it.
        topic.add_to_resource_policy(iam.PolicyStatement(
            principals=[iam.ServicePrincipal("budgets.amazonaws.com")], actions=["sns:Publish"],
            resources=[topic.topic_arn], conditions={"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}}))
        key.add_to_resource_policy(iam.PolicyStatement(
            principals=[iam.ServicePrincipal("budgets.amazonaws.com")],
            actions=["kms:Decrypt", "kms:GenerateDataKey*"], resources=["*"],
            conditions={"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}}))
        subscribers = [budgets.CfnBudget.SubscriberProperty(subscription_type="EMAIL", address=email)
                       for email in emails]
        subscribers.append(budgets.CfnBudget.SubscriberProperty(subscription_type="SNS", address=topic.topic_arn))
        self.budget = budgets.CfnBudget(
            self, "Monthly",
            budget=budgets.CfnBudget.BudgetDataProperty(
                budget_name=f"{Stack.of(self).stack_name}-monthly",
                budget_type="COST", time_unit="MONTHLY",
                budget_limit=budgets.CfnBudget.SpendProperty(amount=amount, unit="USD")),
            notifications_with_subscribers=[
                budgets.CfnBudget.NotificationWithSubscribersProperty(
                    notification=budgets.CfnBudget.NotificationProperty(
                        notification_type=kind, comparison_operator="GREATER_THAN", threshold=threshold,
                        threshold_type="PERCENTAGE"),
                    subscribers=subscribers)
                for kind, threshold in THRESHOLDS],
        )
