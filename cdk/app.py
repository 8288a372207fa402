"""The brokerbench CDK app. From the repository root:

    npx cdk synth --no-lookups -c brokerbench:alertEmails=you@example.com    # packages the dependencies layer (PyPI)
    npx cdk synth --no-lookups -c brokerbench:notify=none -c brokerbench:bundle=false   # offline, nobody told
    npx cdk deploy -c brokerbench:alertEmails=you@example.com

A synthesis with no address to tell (brokerbench:alertEmails or brokerbench:budgetEmail) fails, naming them: the
budget and every alarm would publish to a topic nobody reads. `-c brokerbench:notify=none` says so on purpose.

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
    brokerbench:notify               "none": deploy with no address told (alertEmails and budgetEmail both empty)
    brokerbench:keepTargetsHours     how long keep_targets: true keeps a run's targets from their creation (default 4)
    brokerbench:keepTargetsMaxHours  the most hours a run's keep_targets may ask for (default 24)
    brokerbench:maxRunsInFlight      runs in flight at once; POST /runs answers 429 and schedules skip beyond (default 2)
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


NOTIFY_KEYS = ("brokerbench:alertEmails", "brokerbench:budgetEmail")
NOTIFY_OPT_OUT = ("brokerbench:notify", "none")


def _told(app: App) -> None:
    """Someone hears about alarms and the budget, or the deployer said on purpose that nobody does."""
    key, none = NOTIFY_OPT_OUT
    choice = _flag(app, key, "").strip().lower()
    if choice not in ("", none):
        raise ValueError(f"{key}={choice!r}: only {none!r} (deploy with no address told); addresses go in "
                         f"{' or '.join(NOTIFY_KEYS)}")
    if choice != none and not any(_list(app, k) for k in NOTIFY_KEYS):
        raise ValueError(f"no address to tell: set -c {NOTIFY_KEYS[0]}=you@example.com (every alarm, failed run and "
                         f"the budget) or -c {NOTIFY_KEYS[1]}=... (the budget), or -c {key}={none} to deploy with "
                         "nobody told (the budget and the alarms then publish to a topic with no subscriber)")


def _bounds(app: App) -> dict[str, str]:
    """The deployer's bounds (brokerbench/deployment.py), checked, as the functions' environment."""
    keep = deployment.hours(_flag(app, "brokerbench:keepTargetsHours", str(deployment.DEFAULT_KEEP_TARGETS_HOURS)),
                            "brokerbench:keepTargetsHours")
    most = deployment.hours(_flag(app, "brokerbench:keepTargetsMaxHours",
                                  str(deployment.DEFAULT_KEEP_TARGETS_MAX_HOURS)), "brokerbench:keepTargetsMaxHours")
    if keep > most:
        raise ValueError(f"brokerbench:keepTargetsHours={keep:g} is more than brokerbench:keepTargetsMaxHours={most:g}")
    runs = deployment.runs_in_flight(_flag(app, "brokerbench:maxRunsInFlight", str(deployment.DEFAULT_MAX_RUNS_IN_FLIGHT)),
                                     "brokerbench:maxRunsInFlight")
    return {deployment.KEEP_TARGETS_HOURS_ENV: f"{keep:g}", deployment.KEEP_TARGETS_MAX_HOURS_ENV: f"{most:g}",
            deployment.MAX_RUNS_IN_FLIGHT_ENV: str(runs)}


def build(context: dict | None = None, *, nag_checks: bool = True, **app_options) -> tuple[App, BrokerbenchStack]:
    """The app and its one stack. `nag_checks` registers cdk-nag as a validation plugin (synthesis fails on
    any unacknowledged finding); tests that only read the template can leave it off and run the checks with
    AwsSolutionsChecks().validate_scope(app)."""
    nag.ACKNOWLEDGED.clear()
    app = App(context={**feature_flags(), **(context or {})}, **app_options)
    _told(app)
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
        bounds=_bounds(app),
    )
    if nag_checks:
        # The acknowledgments also go into the template's metadata (cdk_nag.rules_to_suppress): the audit trail.
        Validations.of(app).add_plugins(AwsSolutionsChecks(app, write_suppressions_to_cloud_formation=True))
    return app, stack


def main() -> None:
    try:
        app, _ = build()
    except ValueError as exc:  # a context value the deployer must fix: its message, not a traceback
        sys.exit(f"brokerbench: {exc}")
    app.synth()


if __name__ == "__main__":
    main()
