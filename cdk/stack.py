"""The whole service in one stack: storage, network, run-time broker targets, EC2 workers, the functions,
the workflow, the API, the schedules, the alerts and the budget. Environment-agnostic: the account and
region are the ones `cdk deploy` runs with."""

from __future__ import annotations

from aws_cdk import CfnOutput, Fn, Stack, Tags
from aws_cdk import aws_iam as iam
from constructs import Construct

from brokerbench import deployment

from .constructs.alerts import Alerts
from .constructs.api import STAGE as API_STAGE
from .constructs.api import Api
from .constructs.broker_targets import BrokerTargets
from .constructs.budget import DEFAULT_MONTHLY_BUDGET_USD, Budget
from .constructs.functions import DEFAULT_PYTHON, Functions
from .constructs.network import AZ_COUNT, DEFAULT_INTERFACE_ENDPOINTS, Network
from .constructs.schedules import Schedules
from .constructs.storage import EventStore, LogsBucket
from .constructs.teardown import Teardown
from .constructs.workers import DEFAULT_INSTANCE_TYPE, Ec2Workers
from .constructs.workflow import Workflow

# make the cloud providers: they are told the environment each declares (CloudAccess.environment)
TARGET_FUNCTIONS = ("provision_target", "check_target", "teardown_target", "sweep_targets", "api")


class BrokerbenchStack(Stack):
    def __init__(self, scope: Construct, id: str, *, bundle: bool = True, python: str = DEFAULT_PYTHON,
                 worker_instance_type: str = DEFAULT_INSTANCE_TYPE, alert_emails: list[str] = (),
                 recipient_emails: list[str] = (), interface_endpoints: tuple[str, ...] = DEFAULT_INTERFACE_ENDPOINTS,
                 worker_memory_mb: int | str = deployment.DEFAULT_WORKER_LAMBDA_MEMORY_MB, schedules_on: bool = False,
                 budget_emails: list[str] = (), monthly_budget_usd: float | str = DEFAULT_MONTHLY_BUDGET_USD,
                 availability_zones: list[str] = (), bounds: dict[str, str] | None = None, **kwargs) -> None:
        super().__init__(scope, id, description="brokerbench: event-sourced benchmarks of message brokers", **kwargs)
        Tags.of(self).add("project", "brokerbench")
        if availability_zones and len(availability_zones) != AZ_COUNT:
            raise ValueError(f"brokerbench:availabilityZones: name exactly {AZ_COUNT} AZs (MSK's brokers are a "
                             f"multiple of its client subnets, one per AZ), not {list(availability_zones)}")
        self._chosen_azs = list(availability_zones)  # read by availability_zones (the Vpc asks for it)

        logs = LogsBucket(self, "Logs")
        store = EventStore(self, "Store", logs=logs.bucket)
        alerts = Alerts(self, "Alerts", alert_emails=alert_emails, recipient_emails=recipient_emails)
        network = Network(self, "Network", flow_logs=logs.bucket, interface_endpoints=tuple(interface_endpoints))
        targets = BrokerTargets(self, "Targets", network=network)
        workers = Ec2Workers(self, "Workers", network=network, store=store, targets=targets,
                             instance_type=worker_instance_type, bundle=bundle)

        functions = Functions(self, "Functions", network=network, python=python, bundle=bundle,
                              worker_memory_mb=worker_memory_mb, environment={
            "BROKERBENCH_MODE": "aws",
            "BROKERBENCH_EVENTS_TABLE": store.events.table_name,
            "BROKERBENCH_REPORTS": store.reports_url,
            "BROKERBENCH_NOTIFY": alerts.topic.topic_arn,
            "POWERTOOLS_SERVICE_NAME": "brokerbench",
            "POWERTOOLS_METRICS_NAMESPACE": "brokerbench",
            deployment.WORKER_INSTANCE_TYPE_ENV: workers.instance_type,  # what the cost estimate prices
            # keep_targets' default and maximum hours (validation, the expiry tag, the sweeper), the cap on runs in
            # flight (the API and the schedules' trigger): cdk/app.py's _bounds
            **(bounds or {}),
        })
        functions.add_environment(list(TARGET_FUNCTIONS), targets.environment())
        functions.add_environment(["start_ec2_worker"], workers.environment())
        functions.add_environment(["api"], {"BROKERBENCH_IDEMPOTENCY_TABLE": store.idempotency.table_name,
                                            # GET /schedules shows them as deployed (off: none enabled)
                                            "BROKERBENCH_SCHEDULES_DEPLOYED": "on" if schedules_on else "off"})

        # Least privilege, per function (what each handler's step touches: brokerbench/workflow/steps.py).
        for module in ("plan_cells", "record_targets_ready", "run_cell", "record_cell_failed", "aggregate",
                       "record_run_failed", "api"):
            store.grant_events(functions[module], write=True)
        store.grant_events(functions["schedule_trigger"], write=True)  # its ScheduleTriggered claims and outcomes
        for module in ("check_regression", "notify"):
            store.grant_events(functions[module], write=False)
        for module in ("check_regression", "aggregate", "plan_cells"):  # regression.json, results.json, the reports
            # and a large plan's cells (reports/<run id>/plan-cells.json, read by the Distributed Map)
            store.grant_reports(functions[module], write=True)
        store.grant_reports(functions["api"], write=False)
        store.grant_idempotency(functions["api"])
        for module in ("notify", "record_run_failed"):
            alerts.grant_publish(functions[module])
        # The cloud providers' calls, as each declares them by role (brokerbench.registry.ACCESS_ROLES)
        targets.grant("provision", functions["provision_target"])
        targets.grant("check", functions["check_target"])
        targets.grant("teardown", functions["teardown_target"])
        for module in ("record_targets_ready", "run_cell", "record_cell_failed"):  # the last deletes a failed
            targets.grant("clients", functions[module])  # cell's topics
        targets.grant("faults", functions["run_cell"])  # a cell's faults in AWS (kind reboot) on its run's own target
        workers.grant_launch(functions["start_ec2_worker"])

        workflow = Workflow(self, "Workflow", functions=functions)
        state_machine = workflow.state_machine
        workers.grant_callbacks(state_machine)
        functions["api"].add_environment("BROKERBENCH_STATE_MACHINE_ARN", state_machine.state_machine_arn)
        workflow.grant_api(functions["api"])
        targets.grant("admission", functions["api"])  # the targets' quotas, before a run starts
        functions["schedule_trigger"].add_environment("BROKERBENCH_STATE_MACHINE_ARN", state_machine.state_machine_arn)
        workflow.grant_api(functions["schedule_trigger"])  # StepFunctionsStarter: start, and describe a run it started
        targets.grant("admission", functions["schedule_trigger"])
        store.grant_reports(workflow.role, write=False)  # RunCellsDistributed's ItemReader: the plan's cells
        # Runs that end early (a failed, stopped or timed-out execution, a cancel) and leftovers: cdk/constructs/teardown.py
        teardown = Teardown(self, "Teardown", functions=functions, run_machine=state_machine, store=store,
                            targets=targets)
        teardown.grant_handover(functions["api"])  # a cancel hands the run's teardown to the teardown state machine

        api = Api(self, "Api", handler=functions["api"], logs=logs.bucket)
        # The notification's links (brokerbench/workflow/steps.notify_text). Built from the RestApi's id, not api.url:
        # the stage's URL depends on the API function, which starts the state machine that calls Notify (a cycle).
        functions["notify"].add_environment("BROKERBENCH_API_URL", Fn.join("", [
            "https://", api.rest_api.rest_api_id, ".execute-api.", self.region, ".", self.url_suffix, f"/{API_STAGE}/"]))
        Schedules(self, "Schedules", trigger=functions["schedule_trigger"], enabled=schedules_on)
        # A schedule still building its baseline gets its next run when one completes: RunEnded hands the due time to
        # the trigger (brokerbench/schedules.py catch_up), with the schedules as deployed (off: none enabled).
        functions.add_environment(["run_ended"], {
            "BROKERBENCH_SCHEDULE_TRIGGER_FUNCTION": functions["schedule_trigger"].function_name,
            "BROKERBENCH_SCHEDULES_DEPLOYED": "on" if schedules_on else "off"})
        # The function itself, unqualified (grant_invoke would add its versions, ARN:*, which nothing here uses)
        functions["run_ended"].add_to_role_policy(iam.PolicyStatement(
            actions=["lambda:InvokeFunction"], resources=[functions["schedule_trigger"].function_arn]))
        Budget(self, "Budget", monthly_usd=monthly_budget_usd, emails=list(budget_emails) or list(alert_emails),
               topic=alerts.topic, key=alerts.key)

        alerts.watch_workflow(state_machine)
        alerts.watch_teardown(teardown.state_machine)
        alerts.watch_leftovers(teardown.dead_letters)
        for module, function in functions:
            alerts.watch_function(function.node.id, function)

        CfnOutput(self, "ApiUrl", value=api.url, description="the API and the console (IAM / SigV4 auth)")
        CfnOutput(self, "StateMachineArn", value=state_machine.state_machine_arn)
        CfnOutput(self, "TeardownStateMachineArn", value=teardown.state_machine.state_machine_arn,
                  description="tears down a run that ended early (input {\"run\": {\"run_id\": ..., \"spec\": ...}})")
        CfnOutput(self, "EventsTable", value=store.events.table_name)
        CfnOutput(self, "ReportsBucket", value=store.reports.bucket_name)
        CfnOutput(self, "AlertsTopic", value=alerts.topic.topic_arn)

    @property
    def availability_zones(self) -> list[str]:
        """The AZs named by -c brokerbench:availabilityZones, else three of whatever region the stack is deployed
        to (an env-agnostic stack would get two). Naming them is how to keep out an AZ MSK does not support
        (docs/deploy.md: use1-az3 in us-east-1, whose name differs per account)."""
        if getattr(self, "_chosen_azs", None):
            return list(self._chosen_azs)
        return [Fn.select(i, Fn.get_azs()) for i in range(AZ_COUNT)]
