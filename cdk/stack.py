"""The whole service in one stack: storage, network, run-time broker targets, EC2 workers, the functions,
the workflow, the API, the schedules and the alerts. Environment-agnostic: the account and region are the
ones `cdk deploy` runs with."""

from __future__ import annotations

from aws_cdk import CfnOutput, Fn, Stack, Tags
from constructs import Construct

from .constructs.alerts import Alerts
from .constructs.api import Api
from .constructs.broker_targets import BrokerTargets
from .constructs.functions import DEFAULT_PYTHON, Functions
from .constructs.network import AZ_COUNT, DEFAULT_INTERFACE_ENDPOINTS, Network
from .constructs.schedules import Schedules
from .constructs.storage import EventStore, LogsBucket
from .constructs.workers import DEFAULT_INSTANCE_TYPE, Ec2Workers
from .constructs.workflow import Workflow

TARGET_FUNCTIONS = ("provision_target", "check_target", "teardown_target", "api")  # read the BROKERBENCH_MSK_*/REDIS_*


class BrokerbenchStack(Stack):
    def __init__(self, scope: Construct, id: str, *, bundle: bool = True, python: str = DEFAULT_PYTHON,
                 worker_instance_type: str = DEFAULT_INSTANCE_TYPE, alert_emails: list[str] = (),
                 recipient_emails: list[str] = (), interface_endpoints: tuple[str, ...] = DEFAULT_INTERFACE_ENDPOINTS,
                 **kwargs) -> None:
        super().__init__(scope, id, description="brokerbench: event-sourced benchmarks of message brokers", **kwargs)
        Tags.of(self).add("project", "brokerbench")

        logs = LogsBucket(self, "Logs")
        store = EventStore(self, "Store", logs=logs.bucket)
        alerts = Alerts(self, "Alerts", alert_emails=alert_emails, recipient_emails=recipient_emails)
        network = Network(self, "Network", flow_logs=logs.bucket, interface_endpoints=tuple(interface_endpoints))
        targets = BrokerTargets(self, "Targets", network=network)
        workers = Ec2Workers(self, "Workers", network=network, store=store, targets=targets,
                             instance_type=worker_instance_type, bundle=bundle)

        functions = Functions(self, "Functions", network=network, python=python, bundle=bundle, environment={
            "BROKERBENCH_MODE": "aws",
            "BROKERBENCH_EVENTS_TABLE": store.events.table_name,
            "BROKERBENCH_REPORTS": store.reports_url,
            "BROKERBENCH_NOTIFY": alerts.topic.topic_arn,
            "POWERTOOLS_SERVICE_NAME": "brokerbench",
            "POWERTOOLS_METRICS_NAMESPACE": "brokerbench",
        })
        functions.add_environment(list(TARGET_FUNCTIONS), targets.environment())
        functions.add_environment(["start_ec2_worker"], workers.environment())
        functions.add_environment(["api"], {"BROKERBENCH_IDEMPOTENCY_TABLE": store.idempotency.table_name})

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
        targets.grant_provision(functions["provision_target"])
        targets.grant_check(functions["check_target"])
        targets.grant_teardown(functions["teardown_target"])
        targets.grant_teardown(functions["api"])  # a cancel tears the run's targets down (workflow/stop.py)
        for module in ("record_targets_ready", "run_cell"):
            targets.grant_clients(functions[module])
        workers.grant_launch(functions["start_ec2_worker"])

        workflow = Workflow(self, "Workflow", functions=functions)
        state_machine = workflow.state_machine
        workers.grant_callbacks(state_machine)
        functions["api"].add_environment("BROKERBENCH_STATE_MACHINE_ARN", state_machine.state_machine_arn)
        workflow.grant_api(functions["api"])
        functions["schedule_trigger"].add_environment("BROKERBENCH_STATE_MACHINE_ARN", state_machine.state_machine_arn)
        workflow.grant_api(functions["schedule_trigger"])  # StepFunctionsStarter: start, and describe a run it started
        store.grant_reports(workflow.role, write=False)  # RunCellsDistributed's ItemReader: the plan's cells

        api = Api(self, "Api", handler=functions["api"])
        Schedules(self, "Schedules", trigger=functions["schedule_trigger"])

        alerts.watch_workflow(state_machine)
        for module, function in functions:
            alerts.watch_function(function.node.id, function)

        CfnOutput(self, "ApiUrl", value=api.url, description="the API and the console (IAM / SigV4 auth)")
        CfnOutput(self, "StateMachineArn", value=state_machine.state_machine_arn)
        CfnOutput(self, "EventsTable", value=store.events.table_name)
        CfnOutput(self, "ReportsBucket", value=store.reports.bucket_name)
        CfnOutput(self, "AlertsTopic", value=alerts.topic.topic_arn)

    @property
    def availability_zones(self) -> list[str]:
        """Three AZs of whatever region the stack is deployed to (an env-agnostic stack would get two)."""
        return [Fn.select(i, Fn.get_azs()) for i in range(AZ_COUNT)]
