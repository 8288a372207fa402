"""The event store and the reports: the events table, the API's idempotency table, the reports bucket, and
the bucket that receives S3 server access logs and VPC flow logs."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_s3 as s3
from constructs import Construct

from brokerbench.events.dynamodb import RUNS_INDEX, SUITES_INDEX

from aws_cdk import aws_iam as iam

from ..nag import acknowledge, allow, flatten

REPORTS_PREFIX = "reports"


def _string(name: str) -> dynamodb.Attribute:
    return dynamodb.Attribute(name=name, type=dynamodb.AttributeType.STRING)


class LogsBucket(Construct):
    """Where S3 server access logs and VPC flow logs go, kept a year (it logs nothing itself: cdk-nag
    recognizes a log destination and does not ask for its own access logs)."""

    def __init__(self, scope: Construct, id: str) -> None:
        super().__init__(scope, id)
        self.bucket = s3.Bucket(
            self, "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,  # server access logging cannot deliver to SSE-KMS buckets
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            enforce_ssl=True,
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(365),
                                              abort_incomplete_multipart_upload_after=Duration.days(7))],
            removal_policy=RemovalPolicy.RETAIN,
        )


class EventStore(Construct):
    """The events table, exactly as brokerbench.events.dynamodb.DynamoEventStore.ensure_table creates it
    locally (keys run_id/sk; GSIs runs-by-time on entity/at and runs-by-suite on suite/at, all attributes
    projected), and the idempotency table of the API's Idempotency-Key (Powertools' layout: key `id`,
    TTL attribute `expiration`, as brokerbench.api.deps.ensure_idempotency_table)."""

    def __init__(self, scope: Construct, id: str, *, logs: s3.IBucket) -> None:
        super().__init__(scope, id)
        pitr = dynamodb.PointInTimeRecoverySpecification(point_in_time_recovery_enabled=True)
        self.events = dynamodb.Table(
            self, "Events",
            partition_key=_string("run_id"), sort_key=_string("sk"),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=pitr,
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            deletion_protection=True,  # the events are the only record of every measurement
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.events.add_global_secondary_index(index_name=RUNS_INDEX, partition_key=_string("entity"),
                                               sort_key=_string("at"), projection_type=dynamodb.ProjectionType.ALL)
        self.events.add_global_secondary_index(index_name=SUITES_INDEX, partition_key=_string("suite"),
                                               sort_key=_string("at"), projection_type=dynamodb.ProjectionType.ALL)

        self.idempotency = dynamodb.Table(
            self, "Idempotency",
            partition_key=_string("id"),
            time_to_live_attribute="expiration",
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=pitr,
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            removal_policy=RemovalPolicy.DESTROY,  # records expire within an hour anyway
        )

        self.reports = s3.Bucket(
            self, "Reports",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            enforce_ssl=True,
            versioned=True,
            lifecycle_rules=[s3.LifecycleRule(noncurrent_version_expiration=Duration.days(90),
                                              abort_incomplete_multipart_upload_after=Duration.days(7))],
            server_access_logs_bucket=logs,
            server_access_logs_prefix="s3/reports/",
            removal_policy=RemovalPolicy.RETAIN,
        )

    @property
    def reports_url(self) -> str:
        """BROKERBENCH_REPORTS: where brokerbench.workflow.outputs.S3Reports writes."""
        return f"s3://{self.reports.bucket_name}/{REPORTS_PREFIX}"

    def grant_events(self, grantee: iam.IGrantable, *, write: bool) -> None:
        if write:
            self.events.grant_read_write_data(grantee)
        else:
            self.events.grant_read_data(grantee)
        acknowledge(grantee.grant_principal, f"AwsSolutions-IAM5[Resource::{flatten(self, self.events.table_arn)}/index/*]",
                    "the events table's read grant covers its own two indexes (runs-by-time, runs-by-suite), "
                    "which DynamoDB names table/index/<name>; CDK grants them as table/index/*")

    def grant_reports(self, grantee: iam.IGrantable, *, write: bool) -> None:
        """S3Reports (brokerbench/workflow/outputs.py): get_object / put_object under reports/<run id>/, and
        s3:ListBucket under the same prefix, so a report not published (a failed or cancelled run) is NoSuchKey
        (404), not AccessDenied, and the API builds it from the run's events."""
        allow(grantee, ["s3:GetObject", "s3:PutObject"] if write else ["s3:GetObject"],
              [self.reports.arn_for_objects(f"{REPORTS_PREFIX}/*")],
              wildcard_reason="each run's files live under reports/<run id>/, and run ids are made at run time")
        allow(grantee, ["s3:ListBucket"], [self.reports.bucket_arn],
              conditions={"StringLike": {"s3:prefix": [f"{REPORTS_PREFIX}/*"]}})

    def grant_idempotency(self, grantee: iam.IGrantable) -> None:
        self.idempotency.grant_read_write_data(grantee)
