"""Whether a run may start in AWS now: the cap on runs in flight, and the account's quotas against what it needs.

StepFunctionsStarter.start asks `Admission.check` before StartExecution, so both places where runs start in AWS,
the API's POST /runs and a schedule's trigger, refuse alike, before anything is created or billed:
  - runs in flight: the run state machine's executions that are RUNNING (ListExecutions). A run's execution lasts
    until its own teardown is done, so a run still deleting its brokers counts; a cancelled run, whose teardown the
    teardown state machine does, does not. At the cap (-c brokerbench:maxRunsInFlight, default 2) the start is
    refused with RunsInFlight, which names the runs (the API answers 429). The count is read, then the run
    started: two starts in the same second may both find room for one more, and go one over.
  - EC2 vCPUs: the cells that run on EC2 workers at once (at most max_concurrency), times the worker type's vCPUs,
    against the quota "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances" (Service Quotas
    L-1216C47A, counted in vCPUs) less the vCPUs of the account's pending and running instances of those families.
  - Lambda concurrency: the cells that run on Lambda at once plus the workflow's own step beside them, against
    the account's unreserved concurrency (GetAccountSettings; quota L-B99A9384). What other functions use at this
    moment is not known here.
A quota that does not cover the need refuses the start with QuotaTooLow: the numbers, and the quota to raise.
A quota that cannot be read (no permission, a throttle) does not refuse: the check says so in the log, and a
worker that EC2 then refuses fails with the same explanation (workflow/fleet.py, VcpuQuotaExceeded). Runs in flight
that cannot be counted do refuse (StarterBusy, 409): the cap guards spending.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .. import deployment
from ..plan import plan
from ..spec import validate
from .starter import StarterBusy

log = logging.getLogger(__name__)

EC2_STANDARD_QUOTA = ("ec2", "L-1216C47A")
EC2_STANDARD_QUOTA_NAME = "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"
LAMBDA_CONCURRENCY_QUOTA = ("lambda", "L-B99A9384")
LAMBDA_CONCURRENCY_QUOTA_NAME = "Concurrent executions"
# The families L-1216C47A counts: an instance type's letters before its generation digit, starting with one of these,
# except the families with quotas of their own (Inferentia, Trainium, DL, HPC, Mac).
STANDARD_FAMILY_LETTERS = frozenset("acdhimrtz")
OWN_QUOTA_FAMILIES = ("inf", "trn", "dl", "hpc", "mac")
LIVE_STATES = ["pending", "running"]
WORKFLOW_STEPS_BESIDE_CELLS = 1  # a RecordCellFailed (or a CheckTarget) may run beside the cells


class RunsInFlight(StarterBusy):
    """The deployment's cap on runs in flight is reached: the API answers 429 with the runs' ids."""

    def __init__(self, run_ids: list[str], cap: int) -> None:
        super().__init__(f"{len(run_ids)} runs in flight, and this deployment runs at most {cap} at once "
                         f"(-c brokerbench:maxRunsInFlight): {', '.join(run_ids)}; start this one when one of them "
                         "has ended, or cancel one", run_ids[0] if run_ids else None)
        self.run_ids, self.cap = run_ids, cap


class QuotaTooLow(StarterBusy):
    """The account's quota does not cover what the run needs at once: the numbers and the quota to raise."""


@dataclass(frozen=True)
class Needs:
    """What a run needs at once from the account's quotas."""

    ec2_workers: int  # EC2-kind cells at once: min(max_concurrency, EC2 cells)
    lambda_cells: int  # Lambda-kind cells at once
    max_concurrency: int

    @property
    def lambda_concurrency(self) -> int:
        return self.lambda_cells + WORKFLOW_STEPS_BESIDE_CELLS if self.lambda_cells else 0


def needs(spec: dict) -> Needs:
    """A validated spec's need at once: its plan's cells per worker kind, at most max_concurrency of each."""
    cells = plan(spec)["cells"]
    at_once = spec["max_concurrency"]
    ec2 = sum(1 for cell in cells if cell["worker"] == "ec2")
    return Needs(ec2_workers=min(at_once, ec2), lambda_cells=min(at_once, len(cells) - ec2), max_concurrency=at_once)


def standard_family(instance_type: str) -> bool:
    """Whether L-1216C47A counts this instance type (c7i.2xlarge: yes; inf2.xlarge, p5.48xlarge: no)."""
    name = instance_type.split(".")[0]
    family = name[:next((i for i, ch in enumerate(name) if ch.isdigit()), len(name))]
    return bool(family) and family[0] in STANDARD_FAMILY_LETTERS and not family.startswith(OWN_QUOTA_FAMILIES)


class Admission:
    """The checks before a run starts in AWS (the module's docstring), on the clients it is given."""

    def __init__(self, sfn, state_machine_arn: str, *, quotas, lambda_client, ec2, max_runs: int,
                 worker_instance_type: str) -> None:
        self.sfn, self.state_machine_arn = sfn, state_machine_arn
        self.quotas, self.lambda_client, self.ec2 = quotas, lambda_client, ec2
        self.max_runs, self.worker_instance_type = max_runs, worker_instance_type

    @classmethod
    def from_environment(cls, sfn, state_machine_arn: str) -> "Admission":
        import boto3

        return cls(sfn, state_machine_arn, quotas=boto3.client("service-quotas"), lambda_client=boto3.client("lambda"),
                   ec2=boto3.client("ec2"), max_runs=deployment.max_runs_in_flight(),
                   worker_instance_type=deployment.worker_instance_type())

    def check(self, request: dict) -> None:
        """Raise RunsInFlight or QuotaTooLow when the run must not start now."""
        try:
            running = self.runs_in_flight()
        except Exception as exc:  # noqa: BLE001 (the cap is a spending guard: unseen, no run starts past it)
            raise StarterBusy(f"the runs in flight could not be counted (ListExecutions: {type(exc).__name__}: "
                              f"{exc}), so no run starts past the cap unseen: try again") from None
        if len(running) >= self.max_runs:
            raise RunsInFlight(running, self.max_runs)
        need = needs(validate(request))
        problems = [p for p in (self.ec2_problem(need), self.lambda_problem(need)) if p]
        if problems:
            raise QuotaTooLow("this run does not fit the account's quotas: " + " ".join(problems))

    def runs_in_flight(self) -> list[str]:
        """The run ids of the state machine's RUNNING executions (an execution is named by its run id), oldest first."""
        names = []
        for page in self.sfn.get_paginator("list_executions").paginate(stateMachineArn=self.state_machine_arn,
                                                                         statusFilter="RUNNING"):
            names += [(e["startDate"], e["name"]) for e in page["executions"]]
        return [name for _, name in sorted(names)]

    # -- EC2 ------------------------------------------------------------------------------------------------------
    def ec2_problem(self, need: Needs) -> str | None:
        if not need.ec2_workers:
            return None
        quota = self._quota(*EC2_STANDARD_QUOTA)
        if quota is None:
            return None
        try:
            per_worker = self._vcpus([self.worker_instance_type])[self.worker_instance_type]
            used = self._standard_vcpus_in_use()
        except Exception as exc:  # noqa: BLE001 (what cannot be read does not refuse the run)
            log.warning("the EC2 instances or their vCPUs could not be read (%s): the vCPU check is skipped", exc)
            return None
        vcpus, free = need.ec2_workers * per_worker, quota - used
        if vcpus <= free:
            return None
        return (f"EC2: it needs {vcpus} vCPUs at once ({need.ec2_workers} {self.worker_instance_type} "
                f"workers × {per_worker} vCPUs, max_concurrency {need.max_concurrency}), and the account's "
                f"quota is {quota:g} vCPUs with {used} in use by pending and running instances: {max(0, free):g} free. "
                f"Raise the quota \"{EC2_STANDARD_QUOTA_NAME}\" (Service Quotas, Amazon EC2, {EC2_STANDARD_QUOTA[1]}) "
                f"to at least {used + vcpus:g}, or lower max_concurrency.")

    def _standard_vcpus_in_use(self) -> int:
        types: list[str] = []
        pages = self.ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": "instance-state-name", "Values": LIVE_STATES}])
        for page in pages:
            types += [i["InstanceType"] for r in page["Reservations"] for i in r["Instances"]
                      if standard_family(i["InstanceType"])]
        vcpus = self._vcpus(sorted(set(types)))
        return sum(vcpus[t] for t in types)

    def _vcpus(self, instance_types: list[str]) -> dict[str, int]:
        if not instance_types:
            return {}
        described = self.ec2.describe_instance_types(InstanceTypes=instance_types)["InstanceTypes"]
        return {t["InstanceType"]: t["VCpuInfo"]["DefaultVCpus"] for t in described}

    # -- Lambda ---------------------------------------------------------------------------------------------------
    def lambda_problem(self, need: Needs) -> str | None:
        if not need.lambda_concurrency:
            return None
        try:
            limits = self.lambda_client.get_account_settings()["AccountLimit"]
        except Exception as exc:  # noqa: BLE001 (a limit that cannot be read does not refuse the run)
            log.warning("Lambda's account settings could not be read (%s): the concurrency check is skipped", exc)
            return None
        unreserved, total = limits["UnreservedConcurrentExecutions"], limits["ConcurrentExecutions"]
        if need.lambda_concurrency <= unreserved:
            return None
        return (f"Lambda: it needs {need.lambda_concurrency} concurrent executions ({need.lambda_cells} cells at once "
                f"on Lambda, max_concurrency {need.max_concurrency}, and {WORKFLOW_STEPS_BESIDE_CELLS} workflow step "
                f"beside them), and the account's unreserved concurrency is {unreserved} (of {total} in all; what "
                f"other functions use at this moment is not known here). Raise the quota "
                f"\"{LAMBDA_CONCURRENCY_QUOTA_NAME}\" (Service Quotas, AWS Lambda, {LAMBDA_CONCURRENCY_QUOTA[1]}) "
                f"to at least {total - unreserved + need.lambda_concurrency}, or lower max_concurrency.")

    # -- Service Quotas -------------------------------------------------------------------------------------------
    def _quota(self, service: str, code: str) -> float | None:
        """The quota's applied value, else its AWS default (an account that never changed it may have no applied
        value); None when neither can be read."""
        for call in (self.quotas.get_service_quota, self.quotas.get_aws_default_service_quota):
            try:
                return float(call(ServiceCode=service, QuotaCode=code)["Quota"]["Value"])
            except self.quotas.exceptions.NoSuchResourceException:
                continue
            except Exception as exc:  # noqa: BLE001 (a quota that cannot be read does not refuse the run)
                log.warning("quota %s/%s could not be read (%s): its check is skipped", service, code, exc)
                return None
        return None
