"""The AWS CDK app (cdk/), proven offline: `cdk synth` with the pinned CLI, cdk-nag (AwsSolutions), cfn-lint,
and aws_cdk.assertions on the template. No network, no AWS credentials.

Two syntheses run side by side, once per session: the CLI's (`cdk synth --no-lookups`, in a subprocess
started first: the proof that `cdk deploy` would get this far, with cdk-nag and CloudFormation's own
validation as plugins) and an in-process one (Template.from_stack, for the assertions).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CDK_CLI = REPO / "node_modules" / ".bin" / "cdk"
STACK = "Brokerbench"
SYNTH_TIMEOUT_S = 240
# The tests' syntheses: no layer packaging, and nobody told on purpose (a synthesis with no address fails otherwise).
OFFLINE = {"brokerbench:bundle": "false", "brokerbench:notify": "none"}

# Every IAM action that may be granted on Resource "*", and why (the Service Authorization Reference lists
# no resource type for it, or AWS documents "*").
STAR_ACTIONS = {
    "xray:PutTraceSegments": "X-Ray has no resource-level permissions (active tracing of functions and workflow)",
    "xray:PutTelemetryRecords": "X-Ray has no resource-level permissions",
    "xray:GetSamplingRules": "X-Ray has no resource-level permissions (Step Functions tracing)",
    "xray:GetSamplingTargets": "X-Ray has no resource-level permissions (Step Functions tracing)",
    "logs:CreateLogDelivery": "Step Functions log delivery: vended-logs actions take Resource * (AWS documents it)",
    "logs:GetLogDelivery": "Step Functions log delivery (vended logs)",
    "logs:UpdateLogDelivery": "Step Functions log delivery (vended logs)",
    "logs:DeleteLogDelivery": "Step Functions log delivery (vended logs)",
    "logs:ListLogDeliveries": "Step Functions log delivery (vended logs)",
    "logs:PutResourcePolicy": "Step Functions log delivery writes the log group's resource policy",
    "logs:DescribeResourcePolicies": "Step Functions log delivery (vended logs)",
    "logs:DescribeLogGroups": "Step Functions log delivery; a Describe action with no resource-level permissions",
    "ec2:CreateNetworkInterface": "Lambda in a VPC: Lambda creates the function's ENIs (AWSLambdaVPCAccessExecutionRole)",
    "ec2:DescribeNetworkInterfaces": "Lambda in a VPC; Describe actions have no resource-level permissions",
    "ec2:DeleteNetworkInterface": "Lambda in a VPC: Lambda removes the ENIs it created",
    "ec2:AssignPrivateIpAddresses": "Lambda in a VPC (AWSLambdaVPCAccessExecutionRole)",
    "ec2:UnassignPrivateIpAddresses": "Lambda in a VPC (AWSLambdaVPCAccessExecutionRole)",
    "ec2:DescribeSubnets": "MSK CreateClusterV2 checks the client subnets; Describe has no resource-level permissions",
    "ec2:DescribeSecurityGroups": "MSK CreateClusterV2 checks the security groups; Describe has no resource-level permissions",
    "ec2:DescribeVpcs": "MSK CreateClusterV2; Describe has no resource-level permissions",
    "ec2:DescribeVpcAttribute": "MSK CreateClusterV2; Describe has no resource-level permissions",
    "kafka:ListClustersV2": "teardown finds the run's cluster by name; a List action has no resource-level permissions",
    "ec2:DescribeInstances": "the sweeper finds EC2 workers by their run tag; Describe has no resource-level permissions",
    "ec2:CreateNetworkInterfacePermission": "Amazon MQ CreateBroker places the broker's ENIs with the caller's permissions",
    "ec2:DescribeInternetGateways": "Amazon MQ CreateBroker; Describe has no resource-level permissions",
    "ec2:DescribeNetworkInterfacePermissions": "Amazon MQ CreateBroker; Describe has no resource-level permissions",
    "ec2:DescribeRouteTables": "Amazon MQ CreateBroker; Describe has no resource-level permissions",
    "mq:ListBrokers": "teardown and the sweeper find brokers by name; a List action has no resource-level permissions",
    "servicequotas:GetServiceQuota": "the quota check before a run starts (EC2 vCPUs); no resource-level permissions",
    "servicequotas:GetAWSDefaultServiceQuota": "the quota check's fallback to the default; no resource-level permissions",
    "servicequotas:ListServiceQuotas": "a quota found by its name (ElastiCache's nodes); no resource-level permissions",
    "servicequotas:ListAWSDefaultServiceQuotas": "its fallback to the default; no resource-level permissions",
    "lambda:GetAccountSettings": "the Lambda concurrency check before a run starts; an account-level read, Resource *",
    "ec2:DescribeInstanceTypes": "the vCPUs of instance types (the quota check); Describe has no resource-level permissions",
    "secretsmanager:ListSecrets": "the sweeper finds password secrets whose broker has gone; no resource-level permissions",
}

# cfn-lint warnings that are CDK's doing and harmless: W3005, a DependsOn on a role that a GetAtt already
# implies (aws-cdk-lib writes it on every function and state machine for its role).
ALLOWED_LINT_WARNINGS = {"W3005"}

# Variables the package reads that the CDK app does not set on any function, and why.
NOT_SET_BY_THE_APP = {
    "BROKERBENCH_DYNAMODB_ENDPOINT": "local mode: DynamoDB Local",
    "BROKERBENCH_STATE_DIR": "local mode: the local stack's folder",
    "BROKERBENCH_CALLBACK_URL": "local mode: the local workflow's bridge",
    "BROKERBENCH_LOG_DIR": "local mode: where functions.log goes",
    "BROKERBENCH_LOCAL_HEARTBEAT_S": "local mode: the local bridge's heartbeat window",
    "BROKERBENCH_SCHEDULES": "optional: another schedules file (the packaged one is what the app deploys)",
    "BROKERBENCH_SEND_LOOP": "optional: auto (the default) picks the send loop",
    "BROKERBENCH_REALTIME": "optional: 0 keeps every cell at normal priority (Lambda does not permit real-time)",
    "BROKERBENCH_STORE_OUTAGE_S": "optional: how long a call waits for an event store that does not answer (60 s)",
    "BROKERBENCH_FORK_SERVER_MAIN": "internal: set by a worker for its fork server alone, while it starts",
    "BROKERBENCH_CONSOLE_ORIGIN": "optional: the API serves the console itself (same origin, no CORS)",
    "BROKERBENCH_TASK_TOKEN": "set by the EC2 worker's user data for the worker process, per cell",
    "BROKERBENCH_REDIS_PASSWORD": "local mode: a local Redis's password (ElastiCache's token comes from Secrets Manager)",
    "BROKERBENCH_NATS_SYNC": "local mode: the sync_interval the local stack starts NATS with (no managed NATS in AWS)",
}


def offline_environment(tmp: Path) -> dict[str, str]:
    """No AWS credentials and no reason to look for any; jsii and the CDK CLI quiet."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AWS_") or k in ("AWS_CA_BUNDLE",)}
    env.update({
        "CDK_DISABLE_VERSION_CHECK": "1",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        "AWS_CONFIG_FILE": str(tmp / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp / "no-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "CDK_DISABLE_CLI_TELEMETRY": "true",
    })
    return env


def _without_network() -> list[str]:
    """`unshare -n` (a network namespace with no interfaces) where this machine allows it: then the synthesis
    cannot reach anything, rather than merely not trying."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-n", "true"], capture_output=True).returncode == 0:
        return [unshare, "-n"]
    return []


class CliSynth:
    def __init__(self, out: Path, tmp: Path) -> None:
        self.out = out
        self.isolated = bool(_without_network())
        command = [*_without_network(), str(CDK_CLI), "synth", "--no-lookups", "--no-notices", "--quiet",
                   "-c", "brokerbench:bundle=false", "-c", "brokerbench:notify=none", "-o", str(out)]
        self.process = subprocess.Popen(command, cwd=REPO, env=offline_environment(tmp), stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
        self.output: str | None = None

    def wait(self) -> "CliSynth":
        if self.output is None:
            self.output, _ = self.process.communicate(timeout=SYNTH_TIMEOUT_S)
        return self


@pytest.fixture(scope="session")
def cli_synth(tmp_path_factory):
    if not CDK_CLI.exists():
        pytest.fail("node_modules/.bin/cdk is missing: run `make setup` (npm ci installs aws-cdk 2.1148.1)")
    tmp = tmp_path_factory.mktemp("cdk")
    synth = CliSynth(tmp / "cdk.out", tmp)
    yield synth
    if synth.process.poll() is None:
        synth.process.kill()


@pytest.fixture(scope="session")
def assembly(cli_synth, app_and_stack) -> Path:  # the in-process app is built while the CLI synthesizes
    done = cli_synth.wait()
    assert done.process.returncode == 0, f"cdk synth failed:\n{done.output[-6000:]}"
    return done.out


@pytest.fixture(scope="session")
def cli_template(assembly) -> dict:
    return json.loads((assembly / f"{STACK}.template.json").read_text())


@pytest.fixture(scope="session")
def app_and_stack(cli_synth, tmp_path_factory):  # cli_synth first: the CLI's synthesis runs while this one does
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    from cdk.app import build

    # CloudFormation's own validation runs in the CLI's synthesis; here it would only double the time.
    return build(OFFLINE, nag_checks=False, builtin_cloud_formation_validation=False,
                 outdir=str(tmp_path_factory.mktemp("in-process") / "cdk.out"))


@pytest.fixture(scope="session")
def template(app_and_stack):
    from aws_cdk.assertions import Template

    return Template.from_stack(app_and_stack[1])


@pytest.fixture(scope="session")
def resources(template) -> dict:
    return template.to_json()["Resources"]


def of_type(resources: dict, kind: str) -> dict:
    return {k: r for k, r in resources.items() if r["Type"] == kind}


def state_machine(resources: dict, construct: str) -> tuple[str, dict]:
    """(logical id, resource) of the state machine of a construct: Workflow (the run), Teardown (a run's teardown)."""
    (found,) = [(k, r) for k, r in of_type(resources, "AWS::StepFunctions::StateMachine").items()
                if k.startswith(f"{construct}StateMachine")]
    return found


def handler_functions(resources: dict) -> dict[str, tuple[str, dict]]:
    """handler module -> (logical id, properties) of the workflow's and the API's functions."""
    out = {}
    for logical_id, r in of_type(resources, "AWS::Lambda::Function").items():
        match = re.fullmatch(r"handlers\.(\w+)\.lambda_handler", r["Properties"].get("Handler", ""))
        if match:
            out[match.group(1)] = (logical_id, r["Properties"])
    return out


def statements(resources: dict):
    """(logical id, statement) of every IAM policy statement in the template."""
    for logical_id, r in resources.items():
        props = r.get("Properties", {})
        docs = []
        if r["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            docs = [props["PolicyDocument"]]
        elif r["Type"] == "AWS::IAM::Role":
            docs = [p["PolicyDocument"] for p in props.get("Policies", [])]
        for doc in docs:
            for statement in doc["Statement"]:
                yield logical_id, statement


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


# -- the CLI's synthesis: offline, cdk-nag, cfn-lint ---------------------------------------------------


def test_cdk_synth_with_the_pinned_cli_succeeds_offline(assembly, cli_synth):
    version = subprocess.run([str(CDK_CLI), "--version"], capture_output=True, text=True,
                             env=offline_environment(assembly.parent)).stdout
    assert version.startswith("2.1148.1"), version
    manifest = json.loads((assembly / "manifest.json").read_text())
    assert f"{STACK}.assets" in manifest["artifacts"] and STACK in manifest["artifacts"]
    environment = manifest["artifacts"][STACK]["environment"]
    assert environment == "aws://unknown-account/unknown-region", "the stack stays environment-agnostic"
    assert "error" not in cli_synth.output.lower(), cli_synth.output


def test_cdk_nag_finds_nothing_unacknowledged(app_and_stack, assembly):
    """The CLI's synthesis registers AwsSolutionsChecks and fails on any finding (it succeeded: `assembly`);
    here the same checks run on the in-process app, to list any finding by name."""
    from cdk_nag import AwsSolutionsChecks

    report = AwsSolutionsChecks().validate_scope(app_and_stack[0])
    findings = [f"{v.severity} {v.rule_name} at {[r.construct_path for r in v.violating_resources]}"
                for v in report.violations]
    assert findings == []
    validation = json.loads((assembly / "validation-report.json").read_text())
    assert all(not p.get("violations") for p in validation.get("pluginReports", []))


def test_every_acknowledgment_names_its_resource_and_reason(app_and_stack, cli_template):
    from cdk import nag

    assert nag.ACKNOWLEDGED, "the app acknowledges its known exceptions through cdk/nag.py"
    vague = re.compile(r"^(ok|n/?a|not needed|false positive|suppress(ed)?|todo)\b", re.I)
    for ack in nag.ACKNOWLEDGED:
        assert len(ack.reason) >= nag.MIN_REASON and not vague.match(ack.reason), ack
        assert ack.rule.startswith("AwsSolutions-"), ack
    # The same acknowledgments reach the synthesized template as cdk_nag metadata (the audit trail).
    written = {(rule["id"], rule["reason"]) for r in cli_template["Resources"].values()
               for rule in r.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", [])}
    assert written, "the CLI's synthesis writes the acknowledgments into the template's metadata"
    assert all(len(reason) >= nag.MIN_REASON for _, reason in written)


def test_cfn_lint_finds_no_errors_and_only_known_warnings(assembly):
    templates = sorted(assembly.glob("*.template.json"))
    assert templates
    done = subprocess.run([sys.executable, "-m", "cfnlint", "--format", "json", *map(str, templates)],
                          capture_output=True, text=True)
    assert done.returncode in (0, 4, 6, 8, 10, 12, 14) or not done.stdout.strip(), done.stderr  # 2 = errors
    findings = json.loads(done.stdout or "[]")
    errors = [f for f in findings if f["Level"] == "Error"]
    unknown = [f for f in findings if f["Level"] == "Warning" and f["Rule"]["Id"] not in ALLOWED_LINT_WARNINGS]
    assert errors == [], json.dumps(errors, indent=1)[:4000]
    assert unknown == [], json.dumps(unknown, indent=1)[:4000]


# -- the workflow ----------------------------------------------------------------------------------------


def test_state_machine_file_is_the_local_runners_definition(assembly, cli_template):
    from brokerbench.local.workflow import DEFINITION

    from cdk import paths

    assert paths.STATE_MACHINE.resolve() == DEFINITION.resolve()
    text = DEFINITION.read_bytes()
    machine = state_machine(cli_template["Resources"], "Workflow")[1]
    location = machine["Properties"]["DefinitionS3Location"]  # DefinitionBody.from_file: an asset of the file
    assert (assembly / f"asset.{location['Key']}").read_bytes() == text


def test_every_placeholder_resolves_to_a_function_of_the_stack(resources):
    from brokerbench.local.workflow import DEFINITION

    text = DEFINITION.read_text()
    placeholders = set(re.findall(r"\$\{([^}]*)\}", text))
    machine = state_machine(resources, "Workflow")[1]
    substitutions = machine["Properties"]["DefinitionSubstitutions"]
    assert set(substitutions) == placeholders and len(placeholders) == 13
    functions = handler_functions(resources)
    for name, value in substitutions.items():
        module = re.sub(r"(?<!^)(?=[A-Z])", "_", name[: -len("FunctionArn")]).lower()
        assert value == {"Fn::GetAtt": [functions[module][0], "Arn"]}, name
    # After substitution the definition is the same JSON with every FunctionName a function's ARN.
    for name, value in substitutions.items():
        text = text.replace("${" + name + "}", f"<{value['Fn::GetAtt'][0]}>")
    definition = json.loads(text)
    assert "${" not in text and definition["StartAt"] == "ValidateRequest"


def test_workflow_role_invokes_exactly_the_workflow_functions(resources):
    machine = state_machine(resources, "Workflow")[1]
    role = machine["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    invoked = [s for logical_id, s in statements(resources) if "lambda:InvokeFunction" in as_list(s["Action"])
               and resources[logical_id]["Properties"].get("Roles") == [{"Ref": role}]]
    assert len(invoked) == 1
    granted = {r["Fn::GetAtt"][0] for r in as_list(invoked[0]["Resource"])}
    assert granted == {v["Fn::GetAtt"][0] for v in machine["Properties"]["DefinitionSubstitutions"].values()}


def test_workflow_logs_errors_without_execution_data_under_vendedlogs_and_traces(resources):
    """ERROR without execution data: ALL would log StartEc2Worker's task token with every state's data."""
    machine = state_machine(resources, "Workflow")[1]
    props = machine["Properties"]
    assert props["LoggingConfiguration"]["Level"] == "ERROR"
    assert props["LoggingConfiguration"]["IncludeExecutionData"] is False
    assert props["TracingConfiguration"] == {"Enabled": True}
    group = props["LoggingConfiguration"]["Destinations"][0]["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0]
    assert resources[group]["Properties"]["RetentionInDays"] > 0
    assert resources[group]["Properties"]["LogGroupName"] == f"/aws/vendedlogs/states/{STACK}-workflow"


def test_placeholder_without_a_value_fails_the_synthesis(tmp_path, app_and_stack):
    from cdk.constructs.functions import Functions
    from cdk.constructs.workflow import substitutions

    broken = tmp_path / "broken.asl.json"
    broken.write_text('{"StartAt": "A", "States": {"A": {"Type": "Task", "Resource": "${NoSuchFunctionArn}", '
                      '"Parameters": {"Bucket": "${ReportsBucket}"}, "End": true}}}')
    functions = next(c for c in app_and_stack[1].node.children if isinstance(c, Functions))
    with pytest.raises(ValueError, match=r"\$\{NoSuchFunctionArn\}, \$\{ReportsBucket\}"):
        substitutions(functions, broken)


# -- functions ---------------------------------------------------------------------------------------------


def test_one_function_per_handler_sharing_one_code_asset_and_layer(resources):
    from cdk.constructs.functions import handler_modules

    functions = handler_functions(resources)
    assert set(functions) == set(handler_modules()) and len(functions) == 17
    codes = {json.dumps(p["Code"], sort_keys=True) for _, p in functions.values()}
    layers = {json.dumps(p["Layers"], sort_keys=True) for _, p in functions.values()}
    assert len(codes) == 1 and len(layers) == 1
    for module, (_, props) in functions.items():
        assert props["Runtime"].startswith("python3."), module
        assert props["TracingConfig"] == {"Mode": "Active"}, module
    run_cell = functions["run_cell"][1]
    assert run_cell["MemorySize"] >= 3008 and run_cell["Timeout"] == 900 and "VpcConfig" in run_cell


def test_dependencies_are_packaged_for_the_lambda_runtime(resources, assembly, cli_template):
    """With bundling on, pip installs the lock's wheels for the functions' Python and any manylinux up to the
    runtime's glibc; with -c brokerbench:bundle=false (here) the layer is the plain staging folder: the lock and
    the schemas, hashed as layer_hash says."""
    from cdk.bundling import layer_hash, pip_command

    runtimes = {p["Runtime"] for _, p in handler_functions(resources).values()}
    (runtime,) = runtimes
    command = pip_command(Path("requirements-lambda.txt"), Path("out"), runtime.removeprefix("python"))
    assert command[command.index("--python-version") + 1] == runtime.removeprefix("python")
    platforms = {command[i + 1] for i, arg in enumerate(command) if arg == "--platform"}
    assert {"manylinux2014_x86_64", "manylinux_2_28_x86_64"} <= platforms and "--only-binary=:all:" in command
    (layer,) = of_type(cli_template["Resources"], "AWS::Lambda::LayerVersion").values()
    assert layer["Properties"]["CompatibleRuntimes"] == [runtime]
    staged = assembly / layer["Metadata"]["aws:asset:path"]
    assert sorted(p.name for p in staged.iterdir()) == ["requirements-lambda.txt", "schemas"]
    assert (staged / "requirements-lambda.txt").read_text() == (REPO / "requirements-lambda.txt").read_text()
    assert "\npulsar-client==" not in (staged / "requirements-lambda.txt").read_text()
    assert (staged / "schemas" / "events.schema.json").exists()
    # The asset is named by a hash of the custom one: the same folder under bundling would be another asset.
    assert layer_hash(staged, runtime.removeprefix("python"), False) != layer_hash(staged, runtime.removeprefix("python"), True)


def test_functions_get_every_setting_the_code_reads(resources):
    functions = handler_functions(resources)
    env = {m: p["Environment"]["Variables"] for m, (_, p) in functions.items()}
    for module, variables in env.items():
        assert variables["BROKERBENCH_MODE"] == "aws"
        assert variables["POWERTOOLS_SERVICE_NAME"] == variables["POWERTOOLS_METRICS_NAMESPACE"] == "brokerbench"
        for name in ("BROKERBENCH_EVENTS_TABLE", "BROKERBENCH_REPORTS", "BROKERBENCH_NOTIFY", "BROKERBENCH_SCHEMAS"):
            assert name in variables, (module, name)
    assert env["aggregate"]["BROKERBENCH_REPORTS"]["Fn::Join"][1][0] == "s3://"
    for name in ("BROKERBENCH_STATE_MACHINE_ARN", "BROKERBENCH_IDEMPOTENCY_TABLE"):
        assert name in env["api"]
    for name in ("BROKERBENCH_WORKER_LAUNCH_TEMPLATE", "BROKERBENCH_WORKER_SUBNET", "BROKERBENCH_WORKER_ASSET"):
        assert name in env["start_ec2_worker"]
    # The environment each cloud provider declares (CloudAccess.environment), on the functions that make its provider,
    # with its placeholders as the template names them: tests/unit/test_cloud_access.py holds the providers' reads
    # to their declarations.
    subnets = ",".join(f"<{k}>" for k, r in of_type(resources, "AWS::EC2::Subnet").items()
                       if not r["Properties"]["MapPublicIpOnLaunch"])
    (brokers,) = [k for k, r in of_type(resources, "AWS::EC2::SecurityGroup").items()
                  if "run-time brokers" in r["Properties"]["GroupDescription"]]
    names = {**placeholders(resources), "private_subnets": subnets, "brokers_security_group": f"<{brokers}.GroupId>"}
    declared_env = {}
    for access in providers_access().values():
        declared_env.update({name: re.sub(r"\{(\w+)\}", lambda m: names[m.group(1)], value)
                             for name, value in access.environment.items()})
    assert declared_env
    for module in ("provision_target", "check_target", "teardown_target", "sweep_targets", "api"):
        assert {name: flat(env[module][name]) for name in declared_env if name in env[module]} == declared_env, module
    # Every BROKERBENCH_* the package reads is set somewhere, or belongs to the local mode.
    read = set()
    for path in (REPO / "functions" / "brokerbench").rglob("*.py"):
        if "local" in path.relative_to(REPO / "functions" / "brokerbench").parts:
            continue
        read |= set(re.findall(r"[\"'](BROKERBENCH_[A-Z_]+)[\"']", path.read_text()))
    set_anywhere = set().union(*env.values())
    assert read - set(NOT_SET_BY_THE_APP) - set_anywhere == set()


# -- storage ----------------------------------------------------------------------------------------------


class _CreateTableCapture:
    """A DynamoDB client on which every table is missing: create_table's arguments are kept."""

    class exceptions:
        class ResourceNotFoundException(Exception):
            pass

    def __init__(self) -> None:
        self.created: dict = {}

    def describe_table(self, TableName):
        from botocore.exceptions import ClientError

        error = ClientError({"Error": {"Code": "ResourceNotFoundException"}}, "DescribeTable")
        raise self.exceptions.ResourceNotFoundException() if TableName == "idempotency" else error

    def create_table(self, **kwargs):
        self.created = kwargs

    def get_waiter(self, name):
        return type("Waiter", (), {"wait": lambda *a, **k: None})()


def _keys(schema: list) -> list:
    return [(k["AttributeName"], k["KeyType"]) for k in schema]


def test_events_table_is_the_one_the_code_creates(resources):
    from brokerbench.events.dynamodb import DynamoEventStore

    client = _CreateTableCapture()
    DynamoEventStore("events", client=client).ensure_table()
    local = client.created
    tables = [r["Properties"] for r in of_type(resources, "AWS::DynamoDB::Table").values()]
    (events,) = [t for t in tables if _keys(t["KeySchema"]) == _keys(local["KeySchema"])]
    assert sorted(map(json.dumps, events["AttributeDefinitions"])) == sorted(map(json.dumps, local["AttributeDefinitions"]))
    deployed = {g["IndexName"]: (_keys(g["KeySchema"]), g["Projection"]) for g in events["GlobalSecondaryIndexes"]}
    assert deployed == {g["IndexName"]: (_keys(g["KeySchema"]), g["Projection"]) for g in local["GlobalSecondaryIndexes"]}
    assert events["BillingMode"] == local["BillingMode"] == "PAY_PER_REQUEST"


def test_idempotency_table_is_the_one_the_api_expects(resources):
    from brokerbench.api.deps import ensure_idempotency_table

    client = _CreateTableCapture()
    ensure_idempotency_table(client, "idempotency")
    tables = [r["Properties"] for r in of_type(resources, "AWS::DynamoDB::Table").values()]
    (table,) = [t for t in tables if _keys(t["KeySchema"]) == _keys(client.created["KeySchema"])]
    assert table["TimeToLiveSpecification"] == {"AttributeName": "expiration", "Enabled": True}


def test_tables_have_point_in_time_recovery_and_encryption(resources):
    tables = of_type(resources, "AWS::DynamoDB::Table")
    assert len(tables) == 2
    for logical_id, r in tables.items():
        props = r["Properties"]
        assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True, logical_id
        assert props["SSESpecification"]["SSEEnabled"] is True, logical_id


def test_buckets_are_encrypted_private_and_ssl_only(resources):
    buckets = of_type(resources, "AWS::S3::Bucket")
    policies = {p["Properties"]["Bucket"]["Ref"]: p["Properties"]["PolicyDocument"]
                for p in of_type(resources, "AWS::S3::BucketPolicy").values()}
    assert len(buckets) == 2
    for logical_id, r in buckets.items():
        props = r["Properties"]
        assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
        assert props["PublicAccessBlockConfiguration"] == {"BlockPublicAcls": True, "BlockPublicPolicy": True,
                                                           "IgnorePublicAcls": True, "RestrictPublicBuckets": True}
        deny = [s for s in policies[logical_id]["Statement"] if s["Effect"] == "Deny"
                and s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}]
        assert deny, f"{logical_id} must refuse requests without TLS"
    reports = [r["Properties"] for r in buckets.values() if "LoggingConfiguration" in r["Properties"]]
    assert len(reports) == 1
    assert reports[0]["VersioningConfiguration"] == {"Status": "Enabled"}
    rules = reports[0]["LifecycleConfiguration"]["Rules"]
    assert any("NoncurrentVersionExpiration" in rule for rule in rules)
    assert any("AbortIncompleteMultipartUpload" in rule for rule in rules)


# -- IAM ---------------------------------------------------------------------------------------------------


def test_resource_star_only_for_actions_that_require_it(resources):
    offending = []
    for logical_id, statement in statements(resources):
        if statement["Effect"] != "Allow":
            continue
        actions = as_list(statement["Action"])
        assert not any(a == "*" or a.endswith(":*") for a in actions), (logical_id, actions)
        if "*" in as_list(statement.get("Resource")):
            offending += [(logical_id, a) for a in actions if a not in STAR_ACTIONS]
    assert offending == []


def test_broker_resources_are_scoped_by_name_and_run_tag(resources):
    by_action = {}
    for _, statement in statements(resources):
        for action in as_list(statement["Action"]):
            by_action.setdefault(action, []).append(statement)
    for action in ("kafka:CreateClusterV2", "elasticache:CreateReplicationGroup", "mq:CreateBroker",
                   "secretsmanager:CreateSecret"):
        tagged = [s for s in by_action[action] if s.get("Condition", {}).get("Null") ==
                  {"aws:RequestTag/brokerbench:run": "false"}]
        assert tagged, action
    for action in ("kafka:DeleteCluster", "elasticache:DeleteReplicationGroup", "mq:DeleteBroker",
                   "secretsmanager:DeleteSecret"):
        for statement in by_action[action]:
            assert statement["Condition"] == {"Null": {"aws:ResourceTag/brokerbench:run": "false"}}, action
    # Listing every replication group (the sweeper's DescribeReplicationGroups without an id) is the one
    # describe of groups not named bb-*: it reads, and the sweeper keeps only the bb-* ones.
    sweeper_role = handler_functions(resources)["sweep_targets"][1]["Role"]["Fn::GetAtt"][0]
    listing = [s for logical_id, s in statements(resources) if resources[logical_id]["Properties"].get("Roles") ==
               [{"Ref": sweeper_role}] and "elasticache:DescribeReplicationGroups" in as_list(s["Action"])]
    for action in ("kafka:DescribeClusterV2", "kafka:GetBootstrapBrokers", "kafka-cluster:Connect",
                   "kafka-cluster:WriteData", "elasticache:DescribeReplicationGroups", "mq:DescribeBroker",
                   "mq:ListTags", "mq:DeleteBroker"):
        for statement in by_action[action]:
            text = json.dumps(statement["Resource"])
            if statement in listing:
                assert text.endswith(':replicationgroup:*"]]}') and as_list(statement["Action"]) == [action]
                continue
            assert re.search(r"(cluster|topic|replicationgroup|broker)[/:]bb-\*", text), (action, text)


def test_only_the_workers_may_reboot_and_fail_over_and_only_the_runs_tagged_bb_targets(resources):
    """A run's faults in AWS (kind reboot, brokerbench/worker/cloud_faults.py): RunCell's role and the EC2 worker's
    role, and no other, hold kafka:RebootBroker, elasticache:TestFailover and mq:RebootBroker, each in a statement of
    its own on the bb-* resources of its service (never "*") with the brokerbench:run tag required on the resource."""
    run_cell_role = handler_functions(resources)["run_cell"][1]["Role"]["Fn::GetAtt"][0]
    (instance_role,) = [k for k, r in of_type(resources, "AWS::IAM::Role").items()
                        if r["Properties"].get("Description", "").startswith("brokerbench EC2 worker")]
    scoped = {"kafka:RebootBroker": ":cluster/bb-*/*", "elasticache:TestFailover": ":replicationgroup:bb-*",
              "mq:RebootBroker": ":broker:bb-*"}
    holders = {action: [] for action in scoped}
    for logical_id, statement in statements(resources):
        granted = [a for a in as_list(statement["Action"]) if a in scoped]
        for action in granted:
            assert as_list(statement["Action"]) == [action] and statement["Effect"] == "Allow"
            assert statement["Condition"] == {"Null": {"aws:ResourceTag/brokerbench:run": "false"}}, action
            (resource,) = as_list(statement["Resource"])
            assert resource != "*" and json.dumps(resource).endswith(f'{scoped[action]}"]]}}'), (action, resource)
            holders[action] += resources[logical_id]["Properties"]["Roles"]
    for action, roles in holders.items():
        assert sorted(r["Ref"] for r in roles) == sorted([run_cell_role, instance_role]), action


def test_ec2_workers_are_launched_only_from_the_template_with_their_role(resources):
    run = [s for _, s in statements(resources) if "ec2:RunInstances" in as_list(s["Action"])]
    assert run and all("*" not in as_list(s["Resource"]) for s in run)
    new = [s for s in run if "instance/*" in json.dumps(s["Resource"])]
    assert new and all("ec2:LaunchTemplate" in s["Condition"]["ArnLike"] for s in new)
    # The instance only of the deployed type: ec2:InstanceType, on a statement with the instance alone.
    assert all(s["Condition"]["StringEquals"] == {"ec2:InstanceType": ["c7i.2xlarge"]} for s in new)
    assert all(len(as_list(s["Resource"])) == 1 for s in new)
    (pass_role,) = [s for _, s in statements(resources) if "iam:PassRole" in as_list(s["Action"])]
    assert pass_role["Condition"] == {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}
    (template,) = of_type(resources, "AWS::EC2::LaunchTemplate").values()
    data = template["Properties"]["LaunchTemplateData"]
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert all(d["Ebs"]["Encrypted"] for d in data["BlockDeviceMappings"])
    assert data["IamInstanceProfile"]


def test_api_gets_start_describe_stop_on_the_one_state_machine(resources):
    functions = handler_functions(resources)
    api_role = functions["api"][1]["Role"]["Fn::GetAtt"][0]
    granted = []  # (action, resources) of every states: grant of the API's role
    for logical_id, statement in statements(resources):
        if resources[logical_id]["Properties"].get("Roles") == [{"Ref": api_role}]:
            granted += [(a, json.dumps(statement["Resource"])) for a in as_list(statement["Action"])
                        if a.startswith("states:")]
    run, teardown = state_machine(resources, "Workflow")[0], state_machine(resources, "Teardown")[0]
    machines = {}  # action -> the state machines its statements name
    for action, text in granted:
        machines.setdefault(action, set()).update(name for name, id_ in (("run", run), ("teardown", teardown))
                                                  if id_ in text)
    # A cancel hands the run's teardown to the teardown state machine: it may start it, nothing more.
    # The runs in flight are slots in the events table (workflow/admission.py): no ListExecutions.
    assert machines == {"states:StartExecution": {"run", "teardown"}, "states:DescribeExecution": {"run"},
                        "states:StopExecution": {"run"}}


def test_api_reads_reports_and_lists_only_their_prefix(resources):
    """A report not published (a failed or cancelled run) must be NoSuchKey to the API, not AccessDenied: S3 says
    which only to a reader that may list the bucket, so the API may list it, under reports/ alone."""
    functions = handler_functions(resources)
    api_role = functions["api"][1]["Role"]["Fn::GetAtt"][0]
    (bucket,) = [k for k, r in of_type(resources, "AWS::S3::Bucket").items()
                 if "Reports" in k and r["Properties"].get("VersioningConfiguration")]
    granted = {}
    for logical_id, statement in statements(resources):
        if resources[logical_id]["Properties"].get("Roles") == [{"Ref": api_role}]:
            for action in as_list(statement["Action"]):
                if action.startswith("s3:"):
                    granted[action] = statement
    assert set(granted) == {"s3:GetObject", "s3:ListBucket"}
    listing = granted["s3:ListBucket"]
    assert listing["Resource"] == {"Fn::GetAtt": [bucket, "Arn"]}
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["reports/*"]}}
    assert bucket in json.dumps(granted["s3:GetObject"]["Resource"]) and "/reports/*" in json.dumps(
        granted["s3:GetObject"]["Resource"])


# -- the cloud providers' declared access (brokerbench.registry.CloudAccess, each plug-in's cloud_access.py) ------

EC2_WORKER = "the EC2 workers' instance role"
ROLE_HOLDERS = {  # brokerbench.registry.ACCESS_ROLES -> who holds it: handler modules, and the EC2 workers
    "provision": ["provision_target"], "check": ["check_target"], "teardown": ["teardown_target"],
    "sweep": ["sweep_targets"], "clients": ["record_targets_ready", "run_cell", "record_cell_failed", EC2_WORKER],
    "faults": ["run_cell", EC2_WORKER], "admission": ["api", "schedule_trigger"],
}
PROVIDER_SERVICES = ("kafka", "kafka-cluster", "elasticache", "mq")  # IAM services no other grant of the app names


def flat(value):
    """A template value with its intrinsic functions spelled out: Ref -> <Id>, GetAtt -> <Id.Attr>, Sub's ${X} -> <X>,
    Join joined."""
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in ("Ref", "Fn::GetAtt", "Fn::Join",
                                                                               "Fn::Sub"):
        (fn, arg), = value.items()
        if fn == "Fn::Sub" and isinstance(arg, str):
            return re.sub(r"\$\{([^}]*)\}", r"<\1>", arg)
        return (f"<{arg}>" if fn == "Ref" else f"<{arg[0]}.{arg[1]}>" if fn == "Fn::GetAtt"
                else arg[0].join(flat(part) for part in arg[1]))
    if isinstance(value, dict):
        return {k: flat(v) for k, v in value.items()}
    if isinstance(value, list):
        return [flat(v) for v in value]
    return value


def providers_access() -> dict:
    from brokerbench.registry import plugins

    return {p.cloud.service: p.cloud.access for p in plugins().values() if p.cloud and p.cloud.access}


def placeholders(resources: dict) -> dict[str, str]:
    """The pseudo parameters, the VPC and the providers' shared resources as the template names them (the ones
    every declaration may name, and each provider's own: the ElastiCache subnet group, the Redis AUTH token)."""
    (vpc,) = of_type(resources, "AWS::EC2::VPC")
    (subnet_group,) = of_type(resources, "AWS::ElastiCache::SubnetGroup")
    (secret,) = [k for k in of_type(resources, "AWS::SecretsManager::Secret") if "RedisAuthToken" in k]
    return {"partition": "<AWS::Partition>", "region": "<AWS::Region>", "account": "<AWS::AccountId>",
            "vpc": f"<{vpc}>", "subnet_group": f"<{subnet_group}>", "auth_secret": f"<{secret}>"}


def declared(role: str, resources: dict) -> set[tuple[str, str, str]]:
    """(action, resource, condition) of every statement the providers declare for `role`, written out here as IAM
    reads them: placeholders as the template names them, `tagged` as the brokerbench:run tag's Null condition."""
    names = placeholders(resources)
    fill = lambda text: re.sub(r"\{(\w+)\}", lambda m: names[m.group(1)], text)  # noqa: E731
    out = set()
    for access in providers_access().values():
        for grant in access.granted(role):
            condition = json.loads(fill(json.dumps(grant.condition)))
            if grant.tagged:
                tag = {"request": "aws:RequestTag", "resource": "aws:ResourceTag"}[grant.tagged]
                condition = {"Null": {f"{tag}/brokerbench:run": "false"}, **condition}
            for action in grant.actions:
                for name in grant.resources:
                    resource = "*" if name == "*" else fill(access.resources[name])
                    out.add((action, resource, json.dumps(condition or None, sort_keys=True)))
    return out


def granted(resources: dict) -> dict[str, set[tuple[str, str, str]]]:
    """Role logical id -> (action, resource, condition) of every statement its policies hold."""
    out: dict[str, set] = {}
    for logical_id, statement in statements(resources):
        if statement["Effect"] != "Allow":
            continue
        roles = resources[logical_id]["Properties"].get("Roles") or [{"Ref": logical_id}]
        for role in roles:
            out.setdefault(role["Ref"], set()).update(
                (action, flat(resource), json.dumps(flat(statement.get("Condition")), sort_keys=True))
                for action in as_list(statement["Action"]) for resource in as_list(statement["Resource"]))
    return out


def test_each_role_holds_exactly_what_the_providers_declare(resources):
    """Every role's holders hold every statement the cloud providers declare for it, and the providers' services
    (MSK, MSK IAM auth, ElastiCache, Amazon MQ) are granted to no one beyond that: the declaration is the grant."""
    functions = handler_functions(resources)
    (instance_role,) = [k for k, r in of_type(resources, "AWS::IAM::Role").items()
                        if r["Properties"].get("Description", "").startswith("brokerbench EC2 worker")]
    role_of = {m: (instance_role if m == EC2_WORKER else functions[m][1]["Role"]["Fn::GetAtt"][0])
               for holders in ROLE_HOLDERS.values() for m in holders}
    holds = granted(resources)
    for role, holders in ROLE_HOLDERS.items():
        wanted = declared(role, resources)
        assert wanted, role
        for holder in holders:
            missing = wanted - holds[role_of[holder]]
            assert not missing, (role, holder, sorted(missing))
    for principal, held in holds.items():
        allowed = set().union(*(declared(role, resources) for role, holders in ROLE_HOLDERS.items()
                                for m in holders if role_of[m] == principal))
        beyond = {g for g in held if g[0].split(":")[0] in PROVIDER_SERVICES} - allowed
        assert not beyond, (principal, sorted(beyond))


def test_a_declaration_is_what_grants_it(app_and_stack, monkeypatch):
    """A made-up provider's declaration, given to cdk/access.py on a stack of its own: its role gets exactly its
    statement (the tag condition and its own, the placeholders filled), another role nothing, its port is the one
    opened; a placeholder the stack does not provide is refused naming it."""
    from aws_cdk import App, Stack
    from aws_cdk import aws_iam as iam
    from aws_cdk.assertions import Template

    from brokerbench.registry import CloudAccess, Grant, Port
    from cdk import access, nag

    reason = "queues are named per run as bb-<run id>, so bb-* scopes them"
    made_up = CloudAccess(resources={"queues": "arn:{partition}:sqs:{region}:{account}:bb-*",
                                     "in-vpc": "arn:{partition}:ec2:{region}:{account}:vpc/{vpc}"}, grants=(
        Grant("teardown", ("sqs:DeleteQueue",), ("queues",), reason, "resource",
              {"StringEquals": {"aws:RequestedRegion": "{region}"}}),
        Grant("check", ("sqs:GetQueueAttributes",), ("queues",), reason),
        Grant("provision", ("ec2:DescribeVpcAttribute",), ("in-vpc",))), ports=(Port(5672, 5672, "AMQP (SQS)"),))
    monkeypatch.setattr(access, "declared", lambda: {"Amazon SQS": made_up})
    monkeypatch.setattr(nag, "ACKNOWLEDGED", [])  # the app's own acknowledgments stay as the app made them
    stack = Stack(App(), "MadeUp")
    teardown, other = (iam.Role(stack, name, assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
                       for name in ("Teardown", "Other"))
    access.grant_role(teardown, "teardown", {})
    access.grant_role(other, "faults", {})
    policies = Template.from_stack(stack).to_json()["Resources"]
    (statement,) = [s for _, s in statements(policies)]
    assert flat(statement) == {
        "Effect": "Allow", "Action": "sqs:DeleteQueue",
        "Resource": "arn:<AWS::Partition>:sqs:<AWS::Region>:<AWS::AccountId>:bb-*",
        "Condition": {"Null": {"aws:ResourceTag/brokerbench:run": "false"},
                      "StringEquals": {"aws:RequestedRegion": "<AWS::Region>"}}}
    assert [(p.first, p.last, p.description) for p in access.ports()] == [(5672, 5672, "AMQP (SQS)")]
    with pytest.raises(ValueError, match=r"Amazon SQS provision grant .* names \{vpc\}, which the stack does not"):
        access.grant_role(teardown, "provision", {})


def test_a_declarations_shared_resources_and_environment_are_what_the_stack_makes_and_sets(monkeypatch):
    """A made-up provider's subnet group and generated secret, given to cdk/access.py on a stack of its own: each is
    made under its own id with its declared properties (the secret's reason for no rotation acknowledged), its
    environment names them, and a variable two providers declare with different values is refused naming it."""
    from aws_cdk import App, Stack
    from aws_cdk import aws_ec2 as ec2
    from aws_cdk.assertions import Template

    from brokerbench.registry import CloudAccess, GeneratedSecret, SubnetGroup
    from cdk import access, nag

    why = "read only when a run creates its cache, which is deleted when the run ends"
    made_up = CloudAccess(resources={}, grants=(), shared=(
        SubnetGroup("cache_subnets", "CacheSubnets", "caches of benchmark runs"),
        GeneratedSecret("token", "CacheToken", "the caches' token", length=32, exclude_punctuation=False,
                        why_not_rotated=why)),
        environment={"BROKERBENCH_CACHE_SUBNET_GROUP": "{cache_subnets}", "BROKERBENCH_CACHE_TOKEN": "{token}",
                     "BROKERBENCH_CACHE_SUBNETS": "{private_subnets}"})
    monkeypatch.setattr(access, "declared", lambda: {"Cache": made_up})
    monkeypatch.setattr(nag, "ACKNOWLEDGED", [])
    stack = Stack(App(), "MadeUp")
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=0, subnet_configuration=[
        ec2.SubnetConfiguration(name="Private", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)])
    made = {m.placeholder: access.make(stack, m, vpc.isolated_subnets) for m in made_up.shared}
    made["private_subnets"] = ",".join(s.subnet_id for s in vpc.isolated_subnets)
    env = access.environment({"Cache": made})
    resources = Template.from_stack(stack).to_json()["Resources"]
    (group_id, group), = of_type(resources, "AWS::ElastiCache::SubnetGroup").items()
    (secret_id, secret), = of_type(resources, "AWS::SecretsManager::Secret").items()
    assert group_id.startswith("CacheSubnets") and secret_id.startswith("CacheToken")
    subnets = sorted(of_type(resources, "AWS::EC2::Subnet"))
    assert group["Properties"] == {"Description": "caches of benchmark runs",
                                   "SubnetIds": [{"Ref": subnet} for subnet in subnets]}
    assert secret["Properties"] == {"Description": "the caches' token", "GenerateSecretString": {
        "ExcludePunctuation": False, "IncludeSpace": False, "PasswordLength": 32}}
    assert [(a.rule, a.reason) for a in nag.ACKNOWLEDGED] == [("AwsSolutions-SMG4", why)]
    assert flat(Stack.of(stack).resolve(env)) == {
        "BROKERBENCH_CACHE_SUBNET_GROUP": f"<{group_id}>", "BROKERBENCH_CACHE_TOKEN": f"<{secret_id}>",
        "BROKERBENCH_CACHE_SUBNETS": ",".join(f"<{subnet}>" for subnet in subnets)}
    other = CloudAccess(resources={}, grants=(), environment={"BROKERBENCH_CACHE_TOKEN": "{vpc}"})
    monkeypatch.setattr(access, "declared", lambda: {"Cache": made_up, "Other cache": other})
    with pytest.raises(ValueError, match=r"Other cache environment.BROKERBENCH_CACHE_TOKEN: '\{vpc\}', but Cache"):
        access.environment({"Cache": made, "Other cache": {"vpc": "vpc-1"}})


# -- network -----------------------------------------------------------------------------------------------


def test_brokers_accept_only_the_workers_on_broker_ports(resources):
    groups = of_type(resources, "AWS::EC2::SecurityGroup")
    brokers = next(k for k, r in groups.items() if "run-time brokers" in r["Properties"]["GroupDescription"])
    workers = next(k for k, r in groups.items() if "workers" in r["Properties"]["GroupDescription"]
                   and k != brokers)
    assert not groups[brokers]["Properties"].get("SecurityGroupIngress")
    rules = [r["Properties"] for r in of_type(resources, "AWS::EC2::SecurityGroupIngress").values()
             if r["Properties"]["GroupId"] == {"Fn::GetAtt": [brokers, "GroupId"]}]
    assert {(r["FromPort"], r["ToPort"]) for r in rules} == {(9092, 9098), (6379, 6379), (5671, 5671)}
    # ...which are the ports the cloud providers declare, each with its description
    declared_ports = {(p.first, p.last, f"{p.description} from the workers", p.protocol)
                      for access in providers_access().values() for p in access.ports}
    assert {(r["FromPort"], r["ToPort"], r["Description"], r["IpProtocol"]) for r in rules} == declared_ports
    assert all(r["SourceSecurityGroupId"] == {"Fn::GetAtt": [workers, "GroupId"]} for r in rules)


def test_vpc_has_flow_logs_and_the_endpoints(resources):
    assert of_type(resources, "AWS::EC2::FlowLog")
    services = [json.dumps(r["Properties"]["ServiceName"]) for r in of_type(resources, "AWS::EC2::VPCEndpoint").values()]
    for name in ("dynamodb", "s3", "states", "secretsmanager"):
        assert any(f".{name}" in s for s in services), name
    private = [r for r in of_type(resources, "AWS::EC2::Subnet").values()
               if not r["Properties"].get("MapPublicIpOnLaunch")]
    assert len(private) == 3  # MSK's three brokers, one per client subnet


def test_redis_auth_token_is_generated_without_refused_characters(resources):
    (secret,) = of_type(resources, "AWS::SecretsManager::Secret").values()
    generated = secret["Properties"]["GenerateSecretString"]
    assert generated["ExcludePunctuation"] is True and 16 <= generated["PasswordLength"] <= 128


# -- API ---------------------------------------------------------------------------------------------------


def test_every_api_method_requires_iam(resources):
    methods = of_type(resources, "AWS::ApiGateway::Method")
    assert len(methods) >= 2
    for logical_id, r in methods.items():
        if r["Properties"]["HttpMethod"] != "OPTIONS":
            assert r["Properties"]["AuthorizationType"] == "AWS_IAM", logical_id
            assert r["Properties"].get("RequestValidatorId"), logical_id


def test_api_stage_logs_through_firehose_traces_and_throttles(resources):
    (stage,) = of_type(resources, "AWS::ApiGateway::Stage").values()
    props = stage["Properties"]
    assert props["TracingEnabled"] is True
    (stream_id, stream), = of_type(resources, "AWS::KinesisFirehose::DeliveryStream").items()
    assert props["AccessLogSetting"]["DestinationArn"] == {"Fn::GetAtt": [stream_id, "Arn"]}
    assert stream["Properties"]["DeliveryStreamName"].startswith("amazon-apigateway-")
    assert stream["Properties"]["DeliveryStreamEncryptionConfigurationInput"] == {"KeyType": "AWS_OWNED_CMK"}
    (settings,) = props["MethodSettings"]
    assert settings["ThrottlingRateLimit"] > 0 and settings["ThrottlingBurstLimit"] > 0
    assert settings["LoggingLevel"] == "OFF"  # execution logs would need the account-wide role


def test_the_account_wide_api_gateway_role_is_left_alone(resources):
    """cloud_watch_role=False: no AWS::ApiGateway::Account (which would replace the role every API of the account
    and region logs with) and no role for it."""
    assert of_type(resources, "AWS::ApiGateway::Account") == {}
    pushers = [r for r in of_type(resources, "AWS::IAM::Role").values()
               if "AmazonAPIGatewayPushToCloudWatchLogs" in json.dumps(r["Properties"].get("ManagedPolicyArns", []))]
    assert pushers == []


# -- schedules and alerts ----------------------------------------------------------------------------------


@pytest.mark.parametrize("croniter, eventbridge", [
    ("0 2 * * *", "cron(0 2 * * ? *)"),
    ("0 3 * * SUN", "cron(0 3 ? * SUN *)"),
    ("30 6 * * 1-5", "cron(30 6 ? * 2-6 *)"),
    ("0 0 * * 0", "cron(0 0 ? * 1 *)"),
    ("0 0 * * 7", "cron(0 0 ? * 1 *)"),
    ("0 0 * * 5-7", "cron(0 0 ? * 1,6-7 *)"),
    ("*/15 * 1 * *", "cron(*/15 * 1 * ? *)"),
    ("0 12 1,15 jan,jul *", "cron(0 12 1,15 JAN,JUL ? *)"),
    ("0 0 L * *", "cron(0 0 L * ? *)"),
])
def test_cron_becomes_eventbridge_cron(croniter, eventbridge):
    from croniter import croniter as parse

    from cdk.constructs.schedules import eventbridge_cron

    assert parse.is_valid(croniter)
    assert eventbridge_cron(croniter) == eventbridge


@pytest.mark.parametrize("expression", ["0 0 1 * MON", "0 0 * *", "0 0 * * MON#2", "0 0 * * 5L", "@daily", "0 0 1W * *",
                                        "0 0 * * 3-7/2"])
def test_cron_that_eventbridge_cannot_say_is_refused(expression):
    from cdk.constructs.schedules import CronError, eventbridge_cron

    with pytest.raises(CronError):
        eventbridge_cron(expression)


def test_a_schedule_for_every_entry_of_the_schedules_file(resources):
    from brokerbench import schedules

    from cdk.constructs.schedules import eventbridge_cron

    deployed = {r["Properties"]["Name"].split("-", 1)[1]: r["Properties"]
                for r in of_type(resources, "AWS::Scheduler::Schedule").values()}
    entries = schedules.load(REPO / "functions" / "brokerbench" / "schedules.json")
    assert set(deployed) == {e.name for e in entries}
    expected = {"nightly-quick": "cron(0 2 * * ? *)", "weekly-sizes": "cron(0 3 ? * SUN *)"}
    machine = state_machine(resources, "Workflow")[0]
    trigger = handler_functions(resources)["schedule_trigger"][0]
    for entry in entries:
        props = deployed[entry.name]
        assert props["ScheduleExpression"] == eventbridge_cron(entry.cron)
        if entry.name in expected:
            assert props["ScheduleExpression"] == expected[entry.name]
        assert props["ScheduleExpressionTimezone"] == entry.timezone
        assert props["State"] == "DISABLED"  # without -c brokerbench:schedules=on, whatever the entry says
        assert props["Target"]["Arn"] == {"Fn::GetAtt": [trigger, "Arn"]}
        assert json.loads(props["Target"]["Input"]) == {"schedule": entry.name,
                                                        "due_at": "<aws.scheduler.scheduled-time>"}
    # The trigger starts the workflow (StartExecution on the state machine) and stores its claims and outcomes.
    env = resources[trigger]["Properties"]["Environment"]["Variables"]
    assert env["BROKERBENCH_STATE_MACHINE_ARN"] == {"Ref": machine}


def test_alarms_watch_the_workflow_and_every_function(resources):
    alarms = [r["Properties"] for r in of_type(resources, "AWS::CloudWatch::Alarm").values()]
    (topic,) = of_type(resources, "AWS::SNS::Topic")
    assert all(a["AlarmActions"] == [{"Ref": topic}] for a in alarms)
    machine = state_machine(resources, "Workflow")[0]
    assert any(a["MetricName"] == "ExecutionsFailed" and a["Namespace"] == "AWS/States"
               and a["Dimensions"][0]["Value"] == {"Ref": machine} for a in alarms)
    watched = {a["Dimensions"][0]["Value"]["Ref"] for a in alarms if a["MetricName"] == "Errors"}
    assert watched == {logical_id for logical_id, _ in handler_functions(resources).values()}


def test_alerts_topic_is_encrypted_and_ssl_only(resources):
    (topic,) = of_type(resources, "AWS::SNS::Topic").values()
    assert topic["Properties"]["KmsMasterKeyId"]
    (policy,) = of_type(resources, "AWS::SNS::TopicPolicy").values()
    assert any(s["Effect"] == "Deny" and s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
               for s in policy["Properties"]["PolicyDocument"]["Statement"])


# -- spend guards and the smaller deploy fixes ----------------------------------------------------------


def test_no_function_asks_for_more_than_a_new_accounts_lambda_memory(resources):
    from brokerbench import deployment

    functions = handler_functions(resources)
    assert max(props["MemorySize"] for _, props in functions.values()) <= 3008
    assert functions["run_cell"][1]["MemorySize"] == deployment.DEFAULT_WORKER_LAMBDA_MEMORY_MB == 3008
    # Every function tells the cost estimate what was deployed.
    for _, props in functions.values():
        variables = props["Environment"]["Variables"]
        assert variables["BROKERBENCH_WORKER_MEMORY_MB"] == "3008"
        assert variables["BROKERBENCH_WORKER_INSTANCE_TYPE"] == "c7i.2xlarge"


def test_a_monthly_budget_alarms_by_email_and_on_the_alerts_topic(resources):
    (budget,) = of_type(resources, "AWS::Budgets::Budget").values()
    data = budget["Properties"]["Budget"]
    assert (data["BudgetType"], data["TimeUnit"]) == ("COST", "MONTHLY")
    assert data["BudgetLimit"] == {"Amount": 100, "Unit": "USD"}
    notifications = budget["Properties"]["NotificationsWithSubscribers"]
    assert {(n["Notification"]["NotificationType"], n["Notification"]["Threshold"]) for n in notifications} == {
        ("ACTUAL", 80), ("ACTUAL", 100), ("FORECASTED", 100)}
    (topic,) = of_type(resources, "AWS::SNS::Topic")
    assert all({"SubscriptionType": "SNS", "Address": {"Ref": topic}} in n["Subscribers"] for n in notifications)
    (policy,) = of_type(resources, "AWS::SNS::TopicPolicy").values()
    assert any(s.get("Principal") == {"Service": "budgets.amazonaws.com"} and s["Action"] == "sns:Publish"
               for s in policy["Properties"]["PolicyDocument"]["Statement"])


def test_iam_holds_the_instance_and_node_types_where_aws_has_a_condition_key(resources):
    from brokerbench.brokers.redis_streams import settings as redis

    create = [s for _, s in statements(resources) if "elasticache:CreateReplicationGroup" in as_list(s["Action"])
              and "replicationgroup:bb-*" in json.dumps(s["Resource"])]
    assert create and all(s["Condition"]["StringEquals"] == {"elasticache:CacheNodeType": redis.NODE_TYPES}
                          for s in create)
    assert "cache.r7g.large" in redis.NODE_TYPES and "cache.r7g.4xlarge" not in redis.NODE_TYPES
    # MSK has no condition key for the broker type: CreateClusterV2 carries the run tag's condition only.
    msk = [s for _, s in statements(resources) if "kafka:CreateClusterV2" in as_list(s["Action"])]
    assert msk and all(set(s["Condition"]) == {"Null"} for s in msk)


def test_workers_answer_task_tokens_of_the_run_and_of_distributed_map_children(resources):
    (callback,) = [s for _, s in statements(resources) if "states:SendTaskSuccess" in as_list(s["Action"])]
    text = json.dumps(callback["Resource"])
    for form in (":execution:", ":express:"):
        assert form in text
    assert '"/*"' in text and '":*"' in text  # <machine>/<map run>:<id> and <machine>:<execution>


def test_record_cell_failed_runs_in_the_vpc_to_reach_the_brokers(resources):
    functions = handler_functions(resources)
    for module in ("record_cell_failed", "run_cell", "record_targets_ready"):
        assert functions[module][1]["VpcConfig"]["SubnetIds"], module


def test_the_worker_ami_follows_the_instance_types_architecture(template):
    from aws_cdk import aws_ec2 as ec2

    from cdk.constructs.workers import allowed_instance_types, checked_instance_type, cpu_type

    assert cpu_type("c7g.2xlarge") == ec2.AmazonLinuxCpuType.ARM_64  # Graviton: an arm64 AMI
    assert cpu_type("c7i.2xlarge") == ec2.AmazonLinuxCpuType.X86_64
    images = [p["Default"] for p in template.to_json().get("Parameters", {}).values()
              if "ami-amazon-linux-latest" in str(p.get("Default"))]
    assert len(images) == 1 and images[0].startswith("/aws/service/ami-amazon-linux-latest/al2023-ami-")
    assert images[0].endswith("-x86_64")  # c7i.2xlarge by default
    assert "c7g.2xlarge" in allowed_instance_types()
    with pytest.raises(ValueError, match="brokerbench:workerInstanceType='p5.48xlarge'"):
        checked_instance_type("p5.48xlarge")


def _small_stack():
    from aws_cdk import App, Stack
    from aws_cdk import aws_lambda as lambda_

    app = App()
    stack = Stack(app, "Small")
    trigger = lambda_.Function.from_function_arn(stack, "Trigger", "arn:aws:lambda:us-east-1:111122223333:function:t")
    return stack, trigger


@pytest.mark.parametrize("enabled", [False, True])
def test_schedules_are_disabled_unless_the_deploy_turns_them_on(enabled):
    from aws_cdk.assertions import Template

    from brokerbench import schedules

    from cdk.constructs.schedules import Schedules

    stack, trigger = _small_stack()
    Schedules(stack, "Schedules", trigger=trigger, enabled=enabled)
    states = {r["Properties"]["Name"].split("-", 1)[1]: r["Properties"]["State"]
              for r in Template.from_stack(stack).find_resources("AWS::Scheduler::Schedule").values()}
    entries = schedules.load(REPO / "functions" / "brokerbench" / "schedules.json")
    assert states == {e.name: ("ENABLED" if enabled and e.enabled else "DISABLED") for e in entries}
    assert enabled == ("ENABLED" in states.values())


def test_the_app_reads_the_spend_flags_and_refuses_bad_ones():
    from aws_cdk import App

    from cdk.app import _switch
    from cdk.constructs.budget import monthly_amount

    assert _switch(App(context={"brokerbench:schedules": "on"}), "brokerbench:schedules") is True
    assert _switch(App(), "brokerbench:schedules") is False
    with pytest.raises(ValueError, match="brokerbench:schedules='yes'"):
        _switch(App(context={"brokerbench:schedules": "yes"}), "brokerbench:schedules")
    assert monthly_amount("250") == 250.0
    with pytest.raises(ValueError, match="brokerbench:monthlyBudgetUsd"):
        monthly_amount("0")


def test_task_tokens_pass_through_ssm_parameters_of_the_stack(resources):
    functions = handler_functions(resources)
    prefix = functions["start_ec2_worker"][1]["Environment"]["Variables"]["BROKERBENCH_TOKEN_PARAMETERS"]
    assert prefix == f"/{STACK}/task-tokens"
    by_action = {}
    for _, statement in statements(resources):
        for action in as_list(statement["Action"]):
            by_action.setdefault(action, []).append(json.dumps(statement["Resource"]))
    for action in ("ssm:PutParameter", "ssm:GetParameter", "ssm:DeleteParameter"):
        assert by_action[action] and all(f":parameter{prefix}/*" in r for r in by_action[action]), action


def test_the_app_passes_the_memory_and_schedules_flags_to_the_stack(tmp_path):
    """The context values reach the constructs: RunCell's memory (and what every function tells the cost
    estimate), the schedules' state, the budget's amount, and the alerts' address (with which the synthesis needs
    no opt-out). Read from the construct tree, without a second synthesis."""
    from cdk.app import build

    _, stack = build({"brokerbench:bundle": "false", "brokerbench:workerMemoryMb": "1769",
                      "brokerbench:schedules": "on", "brokerbench:monthlyBudgetUsd": "250",
                      "brokerbench:alertEmails": "ops@example.com"},
                     nag_checks=False, outdir=str(tmp_path / "cdk.out"))
    topic = stack.node.find_child("Alerts").node.find_child("Topic")
    assert [c.node.default_child.endpoint for c in topic.node.children if c.node.id.startswith("ops@")] == [
        "ops@example.com"]
    functions = stack.node.find_child("Functions")
    run_cell = functions.node.find_child("RunCell").node.default_child
    assert run_cell.memory_size == 1769
    assert functions.worker_memory_mb == 1769  # what every function's BROKERBENCH_WORKER_MEMORY_MB says
    states = [c.state for c in stack.node.find_child("Schedules").node.children if hasattr(c, "state")]
    assert "ENABLED" in states
    budget = stack.node.find_child("Budget").node.find_child("Monthly")
    assert stack.resolve(budget.budget)["budgetLimit"]["amount"] == 250
    with pytest.raises(ValueError, match="brokerbench:workerMemoryMb=20000"):
        build({**OFFLINE, "brokerbench:workerMemoryMb": "20000"}, nag_checks=False,
              outdir=str(tmp_path / "refused"))

def test_every_function_gets_the_bounds_the_deploy_sets(resources):
    """keep_targets' default and maximum hours and the cap on runs in flight reach every function (validation, the
    expiry tag, the sweeper, the API and the schedules' trigger); the context values become those variables."""
    from aws_cdk import App

    from cdk.app import _bounds

    for _, props in handler_functions(resources).values():
        variables = props["Environment"]["Variables"]
        assert (variables["BROKERBENCH_KEEP_TARGETS_HOURS"], variables["BROKERBENCH_KEEP_TARGETS_MAX_HOURS"],
                variables["BROKERBENCH_MAX_RUNS_IN_FLIGHT"]) == ("4", "24", "2")
    assert _bounds(App(context={"brokerbench:keepTargetsHours": "2", "brokerbench:keepTargetsMaxHours": "12.5",
                                "brokerbench:maxRunsInFlight": "3"})) == {
        "BROKERBENCH_KEEP_TARGETS_HOURS": "2", "BROKERBENCH_KEEP_TARGETS_MAX_HOURS": "12.5",
        "BROKERBENCH_MAX_RUNS_IN_FLIGHT": "3"}


def test_a_synthesis_with_no_address_to_tell_fails_naming_the_context_keys(tmp_path):
    """`cdk synth` (and so `cdk deploy`) with neither brokerbench:alertEmails nor brokerbench:budgetEmail stops
    with a message naming both keys and the opt-out, before any construct is made; brokerbench:notify=none (the
    session's syntheses) passes, and the bounds are checked the same way."""
    from cdk.app import build

    done = subprocess.run([*_without_network(), str(CDK_CLI), "synth", "--no-lookups", "--no-notices", "--quiet", "-c",
                           "brokerbench:bundle=false", "-o", str(tmp_path / "cdk.out")], cwd=REPO, text=True,
                          env=offline_environment(tmp_path), capture_output=True, timeout=SYNTH_TIMEOUT_S)
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "no address to tell" in output and "brokerbench:alertEmails" in output, output[-3000:]
    assert "brokerbench:budgetEmail" in output and "brokerbench:notify=none" in output
    assert "Traceback" not in output  # the deployer's mistake, said as one message
    for refused, named in (({"brokerbench:notify": "nobody"}, "brokerbench:notify='nobody'"),
                           ({**OFFLINE, "brokerbench:keepTargetsHours": "48"}, "brokerbench:keepTargetsHours=48"),
                           ({**OFFLINE, "brokerbench:maxRunsInFlight": "0"}, "brokerbench:maxRunsInFlight=0")):
        with pytest.raises(ValueError, match=re.escape(named)):
            build({"brokerbench:bundle": "false", **refused}, nag_checks=False, outdir=str(tmp_path / "refused"))


# -- teardown that always happens ----------------------------------------------------------------------------


def test_every_ending_of_a_run_invokes_the_ending_handler(resources):
    rules = of_type(resources, "AWS::Events::Rule")
    (rule,) = [r["Properties"] for r in rules.values() if "EventPattern" in r["Properties"]]
    run = state_machine(resources, "Workflow")[0]
    assert rule["EventPattern"] == {
        "source": ["aws.states"], "detail-type": ["Step Functions Execution Status Change"],
        "detail": {"status": ["FAILED", "ABORTED", "TIMED_OUT", "SUCCEEDED"], "stateMachineArn": [{"Ref": run}]}}
    assert rule["State"] == "ENABLED"
    from brokerbench.workflow.stop import ENDINGS, SUCCEEDED  # what the handler does with each ending

    assert set(rule["EventPattern"]["detail"]["status"]) == {*ENDINGS, SUCCEEDED}
    ended = handler_functions(resources)["run_ended"]
    (target,) = rule["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [ended[0], "Arn"]} and target["RetryPolicy"]["MaximumRetryAttempts"] > 0
    permissions = [r["Properties"] for r in of_type(resources, "AWS::Lambda::Permission").values()
                   if r["Properties"]["FunctionName"] == {"Fn::GetAtt": [ended[0], "Arn"]}]
    assert [p["Principal"] for p in permissions] == ["events.amazonaws.com"]
    # It starts the teardown state machine, whose definition is the teardown states alone.
    teardown, machine = state_machine(resources, "Teardown")
    assert ended[1]["Environment"]["Variables"]["BROKERBENCH_TEARDOWN_MACHINE_ARN"] == {"Ref": teardown}
    assert set(machine["Properties"]["DefinitionSubstitutions"]) == {"TeardownTargetFunctionArn",
                                                                     "RecordRunFailedFunctionArn"}


def test_the_teardown_machine_invokes_only_its_two_functions_and_is_watched(resources):
    teardown, machine = state_machine(resources, "Teardown")
    role = machine["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    invoked = [s for logical_id, s in statements(resources) if "lambda:InvokeFunction" in as_list(s["Action"])
               and resources[logical_id]["Properties"].get("Roles") == [{"Ref": role}]]
    functions = handler_functions(resources)
    assert [{r["Fn::GetAtt"][0] for r in as_list(s["Resource"])} for s in invoked] == [
        {functions["teardown_target"][0], functions["record_run_failed"][0]}]
    alarms = [r["Properties"] for r in of_type(resources, "AWS::CloudWatch::Alarm").values()]
    assert any(a["MetricName"] == "ExecutionsFailed" and a["Dimensions"][0]["Value"] == {"Ref": teardown}
               for a in alarms)


def test_the_sweeper_runs_hourly_and_may_delete_only_tagged_bb_resources(resources):
    rules = of_type(resources, "AWS::Events::Rule")
    (rule,) = [r["Properties"] for r in rules.values() if "ScheduleExpression" in r["Properties"]]
    sweeper = handler_functions(resources)["sweep_targets"]
    assert rule["ScheduleExpression"] == "rate(1 hour)" and rule["State"] == "ENABLED"
    assert rule["Targets"][0]["Arn"] == {"Fn::GetAtt": [sweeper[0], "Arn"]}
    role = sweeper[1]["Role"]["Fn::GetAtt"][0]
    granted = {}
    for logical_id, statement in statements(resources):
        if resources[logical_id]["Properties"].get("Roles") == [{"Ref": role}]:
            for action in as_list(statement["Action"]):
                granted.setdefault(action, []).append(statement)
    tagged = {"Null": {"aws:ResourceTag/brokerbench:run": "false"}}
    for action in ("kafka:DeleteCluster", "elasticache:DeleteReplicationGroup", "ec2:TerminateInstances"):
        assert [s.get("Condition") for s in granted[action]] == [tagged], action
    for action in ("kafka:DeleteCluster", "elasticache:DeleteReplicationGroup", "elasticache:ListTagsForResource"):
        assert all(re.search(r"(cluster/|replicationgroup:)bb-\*", json.dumps(s["Resource"])) for s in granted[action])
    assert not any(a.startswith(("kafka:Create", "elasticache:Create", "ec2:RunInstances")) for a in granted)
    # It handles RunEnded's dead letters as RunEnded does: stores the run's end, starts the teardown state machine.
    teardown = state_machine(resources, "Teardown")[0]
    assert [s["Resource"] for s in granted["states:StartExecution"]] == [{"Ref": teardown}]
    assert {a for a in granted if a.startswith("states:")} == {"states:StartExecution"}
    assert "dynamodb:Query" in granted and "dynamodb:PutItem" in granted
    assert sweeper[1]["Timeout"] == 300


def test_run_ended_failures_go_to_a_dead_letter_queue_that_is_alarmed_and_drained(template, resources):
    """aws_cdk.assertions: the RunEnded rule target's dead-letter queue and the RunEnded function's on-failure
    destination are one SQS queue (encrypted, SSL only, kept 14 days); an alarm on the alerts topic fires on one
    message; the sweeper is told its URL and may receive and delete from it."""
    from aws_cdk.assertions import Match

    (queue_id,) = template.find_resources("AWS::SQS::Queue", {"Properties": {
        "SqsManagedSseEnabled": True, "MessageRetentionPeriod": 14 * 24 * 3600}})
    template.has_resource_properties("AWS::Events::Rule", {
        "EventPattern": Match.object_like({"source": ["aws.states"]}),
        "Targets": [Match.object_like({"DeadLetterConfig": {"Arn": {"Fn::GetAtt": [queue_id, "Arn"]}}})]})
    ended, sweeper = handler_functions(resources)["run_ended"], handler_functions(resources)["sweep_targets"]
    template.has_resource_properties("AWS::Lambda::EventInvokeConfig", {
        "FunctionName": {"Ref": ended[0]},
        "DestinationConfig": {"OnFailure": {"Destination": {"Fn::GetAtt": [queue_id, "Arn"]}}}})
    topic = next(iter(template.find_resources("AWS::SNS::Topic")))
    template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": "AWS/SQS", "MetricName": "ApproximateNumberOfMessagesVisible",
        "Dimensions": [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue_id, "QueueName"]}}],
        "Threshold": 1, "ComparisonOperator": "GreaterThanOrEqualToThreshold", "AlarmActions": [{"Ref": topic}]})
    template.has_resource_properties("AWS::CloudWatch::Alarm", {
        "Namespace": "brokerbench", "MetricName": "SweepFailures", "AlarmActions": [{"Ref": topic}]})
    from brokerbench.workflow.sweep import DEAD_LETTERS_ENV

    assert sweeper[1]["Environment"]["Variables"][DEAD_LETTERS_ENV] == {"Ref": queue_id}
    role = sweeper[1]["Role"]["Fn::GetAtt"][0]
    consumed = [s for logical_id, s in statements(resources) if "sqs:DeleteMessage" in as_list(s["Action"])
                and resources[logical_id]["Properties"].get("Roles") == [{"Ref": role}]]
    assert [s["Resource"] for s in consumed] == [{"Fn::GetAtt": [queue_id, "Arn"]}]
    assert "sqs:ReceiveMessage" in consumed[0]["Action"]
    # Only EventBridge, for this rule, and the function's own role may send to it.
    ended_role = ended[1]["Role"]["Fn::GetAtt"][0]
    assert any("sqs:SendMessage" in as_list(s["Action"]) and resources[i]["Properties"].get("Roles") == [{"Ref": ended_role}]
               for i, s in statements(resources))


def test_the_teardown_machine_logs_errors_without_execution_data_under_vendedlogs(template, resources):
    """aws_cdk.assertions: as the run workflow's, under /aws/vendedlogs/states/, ERROR without execution data."""
    teardown, machine = state_machine(resources, "Teardown")
    config = machine["Properties"]["LoggingConfiguration"]
    assert (config["Level"], config["IncludeExecutionData"]) == ("ERROR", False)
    group = config["Destinations"][0]["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0]
    template.has_resource_properties("AWS::Logs::LogGroup", {"LogGroupName": f"/aws/vendedlogs/states/{STACK}-teardown",
                                                             "RetentionInDays": 90})
    assert resources[group]["Properties"]["LogGroupName"] == f"/aws/vendedlogs/states/{STACK}-teardown"


def test_provisioning_may_delete_network_interfaces_of_its_own_vpc_only(resources):
    """Amazon MQ's CreateBroker runs with the caller's EC2 permissions; its DeleteNetworkInterface is held to the
    stack's VPC (ec2:Vpc), not granted on *."""
    provision = handler_functions(resources)["provision_target"]
    role = provision[1]["Role"]["Fn::GetAtt"][0]
    deletes = [s for logical_id, s in statements(resources) if "ec2:DeleteNetworkInterface" in as_list(s["Action"])
               and resources[logical_id]["Properties"].get("Roles") == [{"Ref": role}]]
    assert len(deletes) == 1 and as_list(deletes[0]["Action"]) == ["ec2:DeleteNetworkInterface"]
    assert "network-interface/*" in json.dumps(deletes[0]["Resource"])
    (vpc,) = of_type(resources, "AWS::EC2::VPC")
    assert f'"Ref": "{vpc}"' in json.dumps(deletes[0]["Condition"]["ArnEquals"]["ec2:Vpc"])


def test_the_ending_handler_may_hand_a_baseline_run_to_the_schedule_trigger_alone(resources):
    """A completed run of a schedule still building its baseline: RunEnded invokes the trigger function
    (brokerbench/schedules.py catch_up), and nothing else."""
    functions = handler_functions(resources)
    ended, trigger = functions["run_ended"], functions["schedule_trigger"]
    env = ended[1]["Environment"]["Variables"]
    assert env["BROKERBENCH_SCHEDULE_TRIGGER_FUNCTION"] == {"Ref": trigger[0]}
    assert env["BROKERBENCH_SCHEDULES_DEPLOYED"] == "off"  # as the schedules themselves: DISABLED unless turned on
    role = ended[1]["Role"]["Fn::GetAtt"][0]
    invoked = [s for logical_id, s in statements(resources) if "lambda:InvokeFunction" in as_list(s["Action"])
               and resources[logical_id]["Properties"].get("Roles") == [{"Ref": role}]]
    assert [as_list(s["Resource"]) for s in invoked] == [[{"Fn::GetAtt": [trigger[0], "Arn"]}]]
