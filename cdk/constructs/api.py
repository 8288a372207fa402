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

from aws_cdk import RemovalPolicy
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from ..nag import acknowledge

STAGE = "v1"
RATE_LIMIT = 25  # requests per second, steady: a team's console and scripts, not public traffic
BURST_LIMIT = 50


class Api(Construct):
    def __init__(self, scope: Construct, id: str, *, handler: lambda_.IFunction) -> None:
        super().__init__(scope, id)
        self.access_logs = logs.LogGroup(self, "AccessLogs", retention=logs.RetentionDays.THREE_MONTHS,
                                         removal_policy=RemovalPolicy.DESTROY)
        self.rest_api = apigw.RestApi(
            self, "RestApi",
            description="brokerbench: runs, reports, comparisons, suites, schedules, and the console",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            cloud_watch_role=True,  # API Gateway's account-level role, needed for execution and access logs
            cloud_watch_role_removal_policy=RemovalPolicy.RETAIN,
            deploy_options=apigw.StageOptions(
                stage_name=STAGE,
                access_log_destination=apigw.LogGroupLogDestination(self.access_logs),
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
                    caller=True, http_method=True, ip=True, protocol=True, request_time=True, resource_path=True,
                    response_length=True, status=True, user=True),
                logging_level=apigw.MethodLoggingLevel.ERROR,
                data_trace_enabled=False,  # request bodies (run specs) stay out of the execution logs
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
        acknowledge(self.rest_api, "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                                   "AmazonAPIGatewayPushToCloudWatchLogs]",
                    "RestApi CloudWatchRole: API Gateway's account-wide logging role takes the AWS-managed "
                    "AmazonAPIGatewayPushToCloudWatchLogs policy, as API Gateway documents; it serves every API of "
                    "the account and region, so it cannot be scoped to this one")

    @property
    def url(self) -> str:
        return self.rest_api.url
