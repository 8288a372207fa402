"""The HTTP API: API Gateway (REST) with IAM (SigV4) authorization on every method, proxying every path to
the API function (functions/handlers/api.py, a Powertools APIGatewayRestResolver).

The console needs no hosting of its own: the API function serves it (brokerbench/api/meta.py: GET / and
GET /console/<name>), behind the same IAM authorization as every other route. A browser cannot sign, so people
open it through `brokerbench console --aws` (brokerbench/api/signing_proxy.py): a server on 127.0.0.1 that serves
the same console files and forwards every API request signed with the user's own AWS credentials.

Request validation is the resolver's (enable_validation: typed routes, 422 with every problem and its
field, which API Gateway's 400 would lose). API Gateway's validator (parameters and body) is attached to
both methods, but a proxy declares no parameters and no models, so it lets every request through to the
resolver; duplicating the API's models here would only let the two drift.
"""

from __future__ import annotations

from aws_cdk import Aws, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kinesisfirehose as firehose
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from constructs import Construct

from ..nag import acknowledge, allow

STAGE = "v1"
ACCESS_LOGS_PREFIX = "api-access-logs/"  # in the logs bucket
RATE_LIMIT = 25  # requests per second, steady: a team's console and scripts, not public traffic
BURST_LIMIT = 50


def access_log_stream(scope: Construct, bucket: s3.IBucket) -> firehose.CfnDeliveryStream:
    """The stage's access logs through Kinesis Data Firehose into the logs bucket. Not CloudWatch Logs: API
    Gateway writes those (and execution logs) with the ONE CloudWatch role of the account and region
    (AWS::ApiGateway::Account), which this stack must not overwrite (other APIs of the account use it, and
    it stays after the stack is gone). Firehose delivery uses API Gateway's service-linked role instead.
    The stream's name must start with amazon-apigateway-."""
    role = iam.Role(scope, "AccessLogRole", assumed_by=iam.ServicePrincipal("firehose.amazonaws.com", conditions={
        "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}}), description="brokerbench API access logs to S3")
    allow(role, ["s3:GetBucketLocation", "s3:ListBucket", "s3:ListBucketMultipartUploads"], [bucket.bucket_arn])
    allow(role, ["s3:PutObject", "s3:AbortMultipartUpload", "s3:GetObject"],
          [bucket.arn_for_objects(f"{ACCESS_LOGS_PREFIX}*")],
          wildcard_reason="Firehose writes one object per delivery under api-access-logs/ in the logs bucket, named "
                          "by the time it delivers")
    return firehose.CfnDeliveryStream(
        scope, "AccessLogStream",
        delivery_stream_name=f"amazon-apigateway-{Stack.of(scope).stack_name}-access"[:64],
        delivery_stream_type="DirectPut",
        delivery_stream_encryption_configuration_input=firehose.CfnDeliveryStream
        .DeliveryStreamEncryptionConfigurationInputProperty(key_type="AWS_OWNED_CMK"),
        extended_s3_destination_configuration=firehose.CfnDeliveryStream.ExtendedS3DestinationConfigurationProperty(
            bucket_arn=bucket.bucket_arn, role_arn=role.role_arn, prefix=ACCESS_LOGS_PREFIX,
            error_output_prefix=f"{ACCESS_LOGS_PREFIX}errors/", compression_format="GZIP",
            buffering_hints=firehose.CfnDeliveryStream.BufferingHintsProperty(interval_in_seconds=300, size_in_m_bs=5)))


class Api(Construct):
    def __init__(self, scope: Construct, id: str, *, handler: lambda_.IFunction, logs: s3.IBucket) -> None:
        super().__init__(scope, id)
        self.access_logs = access_log_stream(self, logs)
        self.rest_api = apigw.RestApi(
            self, "RestApi",
            description="brokerbench: runs, reports, comparisons, suites, schedules, and the console",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            cloud_watch_role=False,  # never replace the account-wide API Gateway CloudWatch role (access_log_stream)
            deploy_options=apigw.StageOptions(
                stage_name=STAGE,
                access_log_destination=apigw.FirehoseLogDestination(self.access_logs),
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
                    caller=True, http_method=True, ip=True, protocol=True, request_time=True, resource_path=True,
                    response_length=True, status=True, user=True),
                # No execution logs: they need the account-wide CloudWatch role. The API function logs each
                # request's errors itself (Powertools), and the access logs have every request's status.
                logging_level=apigw.MethodLoggingLevel.OFF,
                data_trace_enabled=False,
                metrics_enabled=True,
                tracing_enabled=True,
                throttling_rate_limit=RATE_LIMIT,
                throttling_burst_limit=BURST_LIMIT,
            ),
        )
        validator = apigw.RequestValidator(self, "Validator", rest_api=self.rest_api,
                                           validate_request_parameters=True, validate_request_body=True)
        integration = apigw.LambdaIntegration(handler, proxy=True)
        # Every path, every method, to the one function: / (the console) and /{proxy+} (everything else).
        self.rest_api.root.add_method("ANY", integration, authorization_type=apigw.AuthorizationType.IAM,
                                      request_validator=validator)
        self.rest_api.root.add_resource("{proxy+}").add_method("ANY", integration, authorization_type=apigw.AuthorizationType.IAM,
                         request_validator=validator)
        acknowledge(self.rest_api, "AwsSolutions-APIG3",
                    "RestApi: every method requires IAM (SigV4) authorization, so requests without the team's AWS "
                    "credentials are refused before any integration runs, and the stage is throttled; a WAF web "
                    "ACL (from about $5/month plus rules) would add nothing a private, IAM-only API needs")
        acknowledge(self.rest_api, "AwsSolutions-COG4",
                    "RestApi authorizes every method with IAM (SigV4) instead of a Cognito user pool: its callers "
                    "are the team's AWS principals, each with its own credentials: scripts sign their requests, "
                    "and the console is opened through `brokerbench console --aws`, a proxy on the user's machine "
                    "that signs every request with the user's own credentials (brokerbench/api/signing_proxy.py)")
        acknowledge(self.rest_api, "AwsSolutions-APIG6",
                    "RestApi stage: API Gateway execution logging needs the account-wide CloudWatch role "
                    "(AWS::ApiGateway::Account), which this stack does not overwrite; access logs go to the logs "
                    "bucket through Firehose, and the API function logs every request's errors itself")

    @property
    def url(self) -> str:
        return self.rest_api.url
