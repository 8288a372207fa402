"""The brokerbench CDK app. From the repository root:

    npx cdk synth --no-lookups                          # packages the dependencies layer with pip (needs PyPI)
    npx cdk synth --no-lookups -c brokerbench:bundle=false   # offline: no packaging, same template
    npx cdk deploy -c brokerbench:alertEmails=you@example.com

Context (-c key=value, or cdk.json / cdk.context.json):
    brokerbench:stackName            the stack's name (default Brokerbench)
    brokerbench:bundle               "false": skip packaging the dependencies layer (tests, offline synthesis)
    brokerbench:python               the Lambda Python version (default 3.12; see cdk/constructs/functions.py)
    brokerbench:workerInstanceType   the EC2 workers' instance type (default c7i.2xlarge; one priced in pricing.json)
    brokerbench:workerMemoryMb       the RunCell function's memory in MB (default 3008, a new account's Lambda quota)
    brokerbench:schedules            "on": deploy the schedules of schedules.json as their `enabled` says;
                                     otherwise (the default) every schedule is deployed DISABLED
    brokerbench:budgetEmail          comma-separated addresses told by the monthly AWS Budgets budget
    brokerbench:monthlyBudgetUsd     the budget's monthly amount in USD (default 100)
    brokerbench:availabilityZones    comma-separated AZ names for the VPC (default: the region's first three)
    brokerbench:alertEmails          comma-separated addresses told about every alarm and notification
    brokerbench:recipientEmails      comma-separated addresses told only about runs that name them in notify
    brokerbench:interfaceEndpoints   VPC interface endpoints (default states,secretsmanager; also sns, logs)
Every synthesis is checked by cdk-nag (AwsSolutions); any finding that is not acknowledged fails it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "functions") not in sys.path:  # the app reads the project's own definitions (index names, schedules)
    sys.path.insert(0, str(REPO / "functions"))

from aws_cdk import App, Validations  # noqa: E402
from cdk_nag import AwsSolutionsChecks  # noqa: E402

from brokerbench import deployment  # noqa: E402

from . import nag  # noqa: E402
from .constructs.budget import DEFAULT_MONTHLY_BUDGET_USD  # noqa: E402
from .constructs.functions import DEFAULT_PYTHON  # noqa: E402
from .constructs.network import DEFAULT_INTERFACE_ENDPOINTS  # noqa: E402
from .constructs.workers import DEFAULT_INSTANCE_TYPE  # noqa: E402
from .stack import BrokerbenchStack  # noqa: E402

DEFAULT_STACK_NAME = "Brokerbench"


def feature_flags() -> dict:
    """cdk.json's context (the recommended feature flags), so an in-process App matches `cdk synth`."""
    return json.loads((REPO / "cdk.json").read_text()).get("context", {})


def _flag(app: App, key: str, default: str) -> str:
    value = app.node.try_get_context(key)
    return default if value is None else str(value)


def _switch(app: App, key: str) -> bool:
    """An on/off context value: on (or true) turns it on, off (or false, or nothing) leaves it off."""
    value = _flag(app, key, "off").strip().lower()
    if value not in ("on", "off", "true", "false"):
        raise ValueError(f"{key}={value!r}: on or off")
    return value in ("on", "true")


def _list(app: App, key: str) -> list[str]:
    return [item.strip() for item in _flag(app, key, "").split(",") if item.strip()]


def build(context: dict | None = None, *, nag_checks: bool = True, **app_options) -> tuple[App, BrokerbenchStack]:
    """The app and its one stack. `nag_checks` registers cdk-nag as a validation plugin (synthesis fails on
    any unacknowledged finding); tests that only read the template can leave it off and run the checks with
    AwsSolutionsChecks().validate_scope(app)."""
    nag.ACKNOWLEDGED.clear()
    app = App(context={**feature_flags(), **(context or {})}, **app_options)
    stack = BrokerbenchStack(
        app, _flag(app, "brokerbench:stackName", DEFAULT_STACK_NAME),
        bundle=_flag(app, "brokerbench:bundle", "true").lower() != "false",
        python=_flag(app, "brokerbench:python", DEFAULT_PYTHON),
        worker_instance_type=_flag(app, "brokerbench:workerInstanceType", DEFAULT_INSTANCE_TYPE),
        worker_memory_mb=_flag(app, "brokerbench:workerMemoryMb", str(deployment.DEFAULT_WORKER_LAMBDA_MEMORY_MB)),
        schedules_on=_switch(app, "brokerbench:schedules"),
        budget_emails=_list(app, "brokerbench:budgetEmail"),
        monthly_budget_usd=_flag(app, "brokerbench:monthlyBudgetUsd", str(DEFAULT_MONTHLY_BUDGET_USD)),
        availability_zones=_list(app, "brokerbench:availabilityZones"),
        alert_emails=_list(app, "brokerbench:alertEmails"),
        recipient_emails=_list(app, "brokerbench:recipientEmails"),
        interface_endpoints=tuple(_list(app, "brokerbench:interfaceEndpoints") or DEFAULT_INTERFACE_ENDPOINTS),
    )
    if nag_checks:
        # The acknowledgments also go into the template's metadata (cdk_nag.rules_to_suppress): the audit trail.
        Validations.of(app).add_plugins(AwsSolutionsChecks(app, write_suppressions_to_cloud_formation=True))
    return app, stack


def main() -> None:
    app, _ = build()
    app.synth()


if __name__ == "__main__":
    main()
