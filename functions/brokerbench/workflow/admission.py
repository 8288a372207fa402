"""Whether a run may start in AWS now: the cap on runs in flight, and the account's quotas against what it needs.

StepFunctionsStarter.start asks `Admission.admit` before StartExecution, so both places where runs start in AWS,
the API's POST /runs and a schedule's trigger, refuse alike, before anything is created or billed:
  - runs in flight: one slot per run the cap allows (-c brokerbench:maxRunsInFlight, default 2), items
    `slot#0` .. `slot#<cap - 1>` of the partition ADMISSION_PARTITION in the events table (every function that starts
    or ends a run already has that table; the slots are mutable state, not events, and no projection reads them). A
    start takes a free slot with a conditional put (attribute_not_exists), so two starts in the same second cannot
    both take the last one: DynamoDB lets exactly one write win, and the other tries the next slot or is refused
    with RunsInFlight, which names the runs holding the slots (the API answers 429). Counting RUNNING executions
    instead would not do: ListExecutions is eventually consistent, so a run started a moment ago may not be counted.
    The slot is released when the run ends (the RunEnded function, for every ending, SUCCEEDED included), or at once
    when the start is refused by a quota or StartExecution fails. A slot whose run ended without releasing it (the
    RunEnded function failed for good) is taken back by the next start that finds every slot held: its holder's
    execution is not RUNNING (DescribeExecution; a run still going is never taken from), or was never started
    START_GRACE_S after the slot was taken (the function that took it has timed out). Taking it back is a
    conditional put too (the holder unchanged), so two starts cannot both take one slot back.
  - EC2 vCPUs: the cells that run on EC2 workers at once (at most max_concurrency), times the worker type's vCPUs,
    against the quota "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances" (Service Quotas
    L-1216C47A, counted in vCPUs) less the vCPUs of the account's pending and running instances of those families.
  - Lambda concurrency: the cells that run on Lambda at once plus the workflow's own step beside them, against
    the account's unreserved concurrency (GetAccountSettings; quota L-B99A9384). What other functions use at this
    moment is not known here.
  - the targets' services: each broker plug-in's cloud declares the quota its provisioned targets count against
    (registry.CloudQuota): Amazon MSK "Number of brokers per account" (kafka L-EDD31C36), ElastiCache "Nodes per
    Region" (found by name), Amazon MQ "Number of brokers per region" (mq L-4D525FD5). What the run creates (its
    provisioned brokers' nodes, summed per quota) plus what the region holds now (ListClustersV2,
    DescribeCacheClusters, ListBrokers) must fit the quota's value. An existing endpoint (targets.<broker>) takes
    nothing.
A quota that does not cover the need refuses the start with QuotaTooLow: the numbers, and the quota to raise.
A quota that cannot be read (no permission, a throttle) does not refuse: the check says so in the log, and a
worker that EC2 then refuses fails with the same explanation (workflow/fleet.py, VcpuQuotaExceeded). Slots that
cannot be read or written do refuse (StarterBusy, 409): the cap guards spending.

A dry run asks `Admission.preview`: the same reads, and nothing taken (a free slot, or one that could be taken
back, counts as room).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from .. import deployment
from ..plan import plan
from ..registry import load, plugins
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
ADMISSION_PARTITION = "admission#runs-in-flight"  # the events table's run_id of the slots (no run id looks like it)
# A slot taken for a run whose execution does not exist this long after is abandoned: beyond the timeouts of the
# functions that take slots (the API's 29 s, the schedules' trigger's 60 s: cdk/constructs/functions.py), and
# beyond the moment DescribeExecution, eventually consistent, shows an execution just started.
START_GRACE_S = 120


class RunsInFlight(StarterBusy):
    """The deployment's cap on runs in flight is reached: the API answers 429 with the runs' ids."""

    def __init__(self, run_ids: list[str], cap: int) -> None:
        super().__init__(f"{len(run_ids)} runs in flight, and this deployment runs at most {cap} at once "
                         f"(-c brokerbench:maxRunsInFlight): {', '.join(run_ids)}; start this one when one of them "
                         "has ended, or cancel one", run_ids[0] if run_ids else None)
        self.run_ids, self.cap = run_ids, cap


class QuotaTooLow(StarterBusy):
    """The account's quota does not cover what the run needs at once: the numbers and the quota to raise."""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class Slots:
    """The cap's slots (the module's docstring): items {run_id: ADMISSION_PARTITION, sk: slot#<n>, holder: a run id,
    taken_at: ISO time, taken_s: epoch seconds} of the events table, read consistently and written conditionally."""

    def __init__(self, client, table: str, *, clock=time.time) -> None:
        self.client, self.table, self.clock = client, table, clock

    @classmethod
    def of(cls, store) -> "Slots":
        """The slots in an event store's table (events.dynamodb.DynamoEventStore)."""
        return cls(store.client, store.table)

    def held(self) -> dict[int, dict]:
        """slot number -> {"run_id", "taken_at", "taken_s"} of every slot held, whatever the cap."""
        held, start = {}, None
        while True:
            page = self.client.query(TableName=self.table, ConsistentRead=True,
                                     KeyConditionExpression="run_id = :p AND begins_with(sk, :s)",
                                     ExpressionAttributeValues={":p": {"S": ADMISSION_PARTITION}, ":s": {"S": "slot#"}},
                                     **({"ExclusiveStartKey": start} if start else {}))
            for item in page["Items"]:
                held[int(item["sk"]["S"].split("#", 1)[1])] = {
                    "run_id": item["holder"]["S"], "taken_at": item["taken_at"]["S"], "taken_s": float(item["taken_s"]["N"])}
            start = page.get("LastEvaluatedKey")
            if not start:
                return held

    def take(self, slot: int, run_id: str, *, from_run: str | None = None) -> bool:
        """Hold `slot` for run_id if it is free (or, with from_run, still held by that run): True when this write won."""
        condition = ({"ConditionExpression": "attribute_not_exists(sk)"} if from_run is None else
                     {"ConditionExpression": "holder = :old", "ExpressionAttributeValues": {":old": {"S": from_run}}})
        item = {"run_id": {"S": ADMISSION_PARTITION}, "sk": {"S": f"slot#{slot}"}, "holder": {"S": run_id},
                "taken_at": {"S": _now()}, "taken_s": {"N": repr(self.clock())}}
        try:
            self.client.put_item(TableName=self.table, Item=item, **condition)
        except self.client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def release(self, run_id: str) -> list[int]:
        """Free the slots run_id holds (one, normally; none when it held none or they were taken back)."""
        freed = []
        for slot, holder in self.held().items():
            if holder["run_id"] != run_id:
                continue
            try:
                self.client.delete_item(TableName=self.table, ConditionExpression="holder = :run",
                                        Key={"run_id": {"S": ADMISSION_PARTITION}, "sk": {"S": f"slot#{slot}"}},
                                        ExpressionAttributeValues={":run": {"S": run_id}})
                freed.append(slot)
            except self.client.exceptions.ConditionalCheckFailedException:
                pass  # taken back by a start meanwhile: it is not this run's any more
        return freed


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


def _client(service: str):
    import boto3

    return boto3.client(service)


class Admission:
    """The checks before a run starts in AWS (the module's docstring), on the clients it is given."""

    def __init__(self, sfn, state_machine_arn: str, *, slots: Slots, quotas, lambda_client, ec2, max_runs: int,
                 worker_instance_type: str, clients=None) -> None:
        self.sfn, self.state_machine_arn, self.slots = sfn, state_machine_arn, slots
        self.quotas, self.lambda_client, self.ec2 = quotas, lambda_client, ec2
        self.clients = clients  # service name -> boto3 client, for the targets' services (None: boto3.client)
        self.max_runs, self.worker_instance_type = max_runs, worker_instance_type

    @classmethod
    def from_environment(cls, sfn, state_machine_arn: str, store) -> "Admission":
        import boto3

        return cls(sfn, state_machine_arn, slots=Slots.of(store), quotas=boto3.client("service-quotas"),
                   lambda_client=boto3.client("lambda"), ec2=boto3.client("ec2"),
                   max_runs=deployment.max_runs_in_flight(), worker_instance_type=deployment.worker_instance_type())

    def admit(self, request: dict, run_id: str) -> None:
        """Take a slot for run_id, then check the quotas; raise RunsInFlight or QuotaTooLow (the slot given back)
        when the run must not start now. The caller releases the slot if the start then fails."""
        if not self._take(run_id):
            raise RunsInFlight(self._unreadable(self.runs_in_flight), self.max_runs)
        try:
            problems = self.quota_problems(request)
        except BaseException:
            self.slots.release(run_id)
            raise
        if problems:
            self.slots.release(run_id)
            raise QuotaTooLow("this run does not fit the account's quotas: " + " ".join(problems))

    def release(self, run_id: str) -> list[int]:
        return self.slots.release(run_id)

    def preview(self, request: dict) -> dict:
        """Whether the run would be admitted now, and why not: the same reads as admit, nothing taken."""
        try:
            in_flight, reasons = self._unreadable(self.runs_in_flight), []
        except StarterBusy as exc:
            in_flight, reasons = [], [str(exc)]
        if len(in_flight) >= self.max_runs:
            reasons.append(str(RunsInFlight(in_flight, self.max_runs)))
        reasons += self.quota_problems(request)
        return {"admitted": not reasons, "reasons": reasons, "runs_in_flight": in_flight,
                "max_runs_in_flight": self.max_runs}

    def quota_problems(self, request: dict) -> list[str]:
        spec = validate(request)
        need = needs(spec)
        return [p for p in (self.ec2_problem(need), self.lambda_problem(need), *self.target_problems(spec)) if p]

    def runs_in_flight(self) -> list[str]:
        """The runs holding slots whose executions have not ended, oldest slot first."""
        held = sorted(self.slots.held().values(), key=lambda h: h["taken_s"])
        return [h["run_id"] for h in held if not self._ended(h)]

    def _take(self, run_id: str) -> bool:
        """A free slot below the cap, else one taken back from a run that has ended; False when every slot is held
        by a run in flight (or as many runs hold slots as the cap allows: a cap lowered since)."""
        held = self._unreadable(self.slots.held)
        live = {slot: h for slot, h in held.items() if not self._ended(h)}
        if len(live) >= self.max_runs:
            return False
        for slot in range(self.max_runs):
            if slot not in held and self._unreadable(self.slots.take, slot, run_id):
                return True
        for slot in range(self.max_runs):
            if slot in held and slot not in live and self._unreadable(self.slots.take, slot, run_id,
                                                                      from_run=held[slot]["run_id"]):
                log.info("slot %d taken back from run %s, whose execution has ended", slot, held[slot]["run_id"])
                return True
        return False

    def _ended(self, holder: dict) -> bool:
        """Whether the run holding a slot is done with it: its execution is not RUNNING, or it was never started
        START_GRACE_S after the slot was taken. A holder that cannot be looked up is taken as running."""
        prefix, _, name = self.state_machine_arn.rpartition(":stateMachine:")
        try:
            status = self.sfn.describe_execution(executionArn=f"{prefix}:execution:{name}:{holder['run_id']}")["status"]
        except self.sfn.exceptions.ExecutionDoesNotExist:
            return self.slots.clock() - holder["taken_s"] > START_GRACE_S
        except Exception as exc:  # noqa: BLE001 (a slot is never taken from a run that may be going)
            log.warning("run %s's execution could not be described (%s): its slot stays held", holder["run_id"], exc)
            return False
        return status != "RUNNING"

    @staticmethod
    def _unreadable(call, *args, **kwargs):
        """A slot read or write; one that fails refuses the start (StarterBusy): the cap guards spending."""
        try:
            return call(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            raise StarterBusy(f"the runs in flight could not be counted (the slots in the events table: "
                              f"{type(exc).__name__}: {exc}), so no run starts past the cap unseen: try again") from None

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

    # -- the targets' services -------------------------------------------------------------------------------------
    def target_problems(self, spec: dict) -> list[str]:
        """Per quota the run's provisioned targets count against: a problem when they do not fit beside what the
        region holds now."""
        takes: dict = {}
        for broker in spec["brokers"]:
            found = plugins().get(broker)
            if broker in spec.get("targets", {}) or found is None or found.cloud is None or found.cloud.quota is None:
                continue
            quota = found.cloud.quota
            takes.setdefault((found.cloud.service, quota), []).append(
                (broker, load(quota.need)(broker, spec["provision"].get(broker, {}))))
        return [p for (service, quota), brokers in takes.items() if (p := self._target_problem(service, quota, brokers))]

    def _target_problem(self, service: str, quota, brokers: list[tuple[str, int]]) -> str | None:
        value = (self._quota(quota.service_code, quota.code) if quota.code
                 else self._quota_named(quota.service_code, quota.name))
        if value is None:
            return None
        try:
            client = self.clients(quota.client) if self.clients else _client(quota.client)
            used = load(quota.in_use)(client)
        except Exception as exc:  # noqa: BLE001 (what cannot be read does not refuse the run)
            log.warning("%s's %s in use could not be counted (%s): its quota check is skipped", service, quota.unit, exc)
            return None
        need = sum(n for _, n in brokers)
        if used + need <= value:
            return None
        code = quota.code or "found by its name"
        return (f"{service}: the run creates {need} {quota.unit} ({', '.join(f'{b}: {n}' for b, n in brokers)}), and "
                f"the account's quota is {value:g} {quota.unit} with {used} in use in this region: "
                f"{max(0, value - used):g} free. Raise the quota \"{quota.name}\" (Service Quotas, "
                f"{quota.service_code}, {code}) to at least {used + need:g}, or give an existing endpoint "
                f"(targets.{brokers[0][0]}).")

    def _quota_named(self, service: str, name: str) -> float | None:
        """A quota's applied value, else its AWS default, found by its name; None when neither can be read."""
        for operation in ("list_service_quotas", "list_aws_default_service_quotas"):
            try:
                for page in self.quotas.get_paginator(operation).paginate(ServiceCode=service):
                    for quota in page["Quotas"]:
                        if quota["QuotaName"] == name:
                            return float(quota["Value"])
            except Exception as exc:  # noqa: BLE001 (a quota that cannot be read does not refuse the run)
                log.warning("quota %s/%s could not be read (%s): its check is skipped", service, name, exc)
                return None
        log.warning("quota %s/%s is not listed: its check is skipped", service, name)
        return None

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
