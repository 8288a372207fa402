"""What a run costs in AWS: list prices times what the run used.

The prices of the service's own parts (workers, Step Functions, DynamoDB) are in pricing.json; a broker's
provisioned target is priced by its plug-in (registry.Cloud.prices: brokers/<name>/prices.py and the
prices.json beside it), so a broker plug-in adds its prices without touching this module. A plug-in's
Cloud.creation_s says how long its target takes to create, billed all the same: used where the creation is
not in a run's own timeline (a plan, a local run's `on_aws`).

Two sources of usage, one arithmetic (`price`): a run's stored events (`estimate`, what every report
shows) and a run request's plan before it runs (`estimate_plan`, `brokerbench cost`).

A run on the local stack cost nothing in AWS; its estimate says so and adds `on_aws`: what the same
run would cost in AWS with the default provisioned targets, so every report states a figure.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cache

from . import deployment
from .events import planned_cells
from .paths import PACKAGE_DIR
from .plan import CELL_OVERHEAD_S, estimated_seconds, plan, worker_kind
from .registry import plugin, plugins
from .spec import kept_hours, request_schema

PRICING_FILE = PACKAGE_DIR / "pricing.json"

# The workers as the CDK app deploys them (brokerbench/deployment.py): the RunCell Lambda function's
# memory (-c brokerbench:workerMemoryMb, told to every function as BROKERBENCH_WORKER_MEMORY_MB) and
# architecture, and the EC2 worker's instance type (-c brokerbench:workerInstanceType, likewise).
LAMBDA_WORKER_ARCHITECTURE = deployment.WORKER_LAMBDA_ARCHITECTURE

HOURS_PER_MONTH = 730  # AWS's month for prorating GB-month prices
EC2_MINIMUM_S = 60  # EC2 bills Linux instances per second with a 60 s minimum
ITEM_OVERHEAD_BYTES = 200  # key attributes and names beside `data` (as events/dynamodb.py counts an item)
TRANSACTIONAL_WRITE_FACTOR = 2  # the event store writes with TransactWriteItems: 2 WRU per started KB
RUN_INDEXES = 2  # RunRequested is also written to the runs-by-time and runs-by-suite indexes (all attributes)
REPORT_READS = 2  # CheckRegression and Aggregate each read the run's events once (strongly consistent)

# Step Functions transitions of statemachines/benchmark_run.asl.json for a run that succeeds.
MAIN_PATH_STATES = 12  # ValidateRequest … RunSucceeded, Notify included
STATES_PER_TARGET = 4  # ProvisionTarget, TargetReady?, TargetProvisioned, TeardownTarget
STATES_PER_READINESS_CHECK = 3  # WaitForTarget, CheckTarget, TargetReady?
STATES_PER_CELL = 2  # ChooseWorker, RunCellOnLambda or RunCellOnEc2
STATES_PER_FAILED_CELL = 1  # RecordCellFailed
TRANSITIONS_RULE = (f"Step Functions: {MAIN_PATH_STATES} transitions on the main path, {STATES_PER_TARGET} per target, "
                    f"{STATES_PER_READINESS_CHECK} per readiness check of a target being created (one per poll_s), "
                    f"{STATES_PER_CELL} per cell and {STATES_PER_FAILED_CELL} more per failed cell "
                    "(statemachines/benchmark_run.asl.json).")

# The network and the logs (their prices: pricing.json's data_transfer, vpc and cloudwatch).
# Workers and brokers spread over the VPC's three AZs: a partition leader (MSK) or the one node (ElastiCache)
# is in another AZ than its worker two times in three, so 2/3 of the bytes between them cross AZs (billed
# out of one AZ and into the other). MSK's replication between its brokers is not billed.
AZS = 3
CROSS_AZ_SHARE = (AZS - 1) / AZS
CROSS_AZ_SIDES = 2  # out of one AZ, into the other
# An EC2 worker installs its packages from the wheels in its asset (51 MB, from S3 through the VPC's gateway
# endpoint: no NAT charge); Python 3.12 from Amazon Linux's repositories may still pass the NAT gateway. The 120 MB
# counted per worker is an allowance for that, not a measurement.
EC2_BOOT_DOWNLOAD_BYTES = 120 * 1024**2
# CloudWatch Logs written per Lambda invocation: the handler's Powertools lines (390 to 409 B per invocation in
# the functions.log of four local runs, 592 invocations) and Lambda's START, END and REPORT lines (about 0.4 KB,
# not measured here); 2 KB is a generous allowance for both. The workflow logs at ERROR (a run that succeeds:
# nothing).
LOG_BYTES_PER_INVOCATION = 2048
LAMBDA_STEPS_PER_RUN = 6  # ValidateRequest, PlanCells, RecordTargetsReady, CheckRegression, Aggregate, Notify
LAMBDA_STEPS_PER_TARGET = 2  # ProvisionTarget, TeardownTarget (and a CheckTarget per readiness check)
NETWORK_RULE = (f"Network: {CROSS_AZ_SHARE:.0%} of the message bytes between workers and provisioned brokers "
                f"cross AZs ({AZS} AZs; a broker is in the worker's AZ one time in {AZS}), billed out and in; "
                "message payloads as measured (CellCompleted's bytes_sent + bytes_received), without protocol "
                "overhead or warm-up; MSK's own replication is not billed. The NAT gateway bills every hour "
                "whether a run happens or not: the run's hours of it are counted, and "
                f"{EC2_BOOT_DOWNLOAD_BYTES // 1024**2} MB per EC2 worker through it (an allowance for Python 3.12 from Amazon "
                "Linux's repositories at boot; its packages come from S3 through the gateway endpoint).")
LOGS_RULE = (f"CloudWatch Logs: {LOG_BYTES_PER_INVOCATION:,} B per Lambda invocation (an allowance over twice the "
             "expected 0.4 KB of the handlers' own lines, as measured locally, and 0.4 KB of Lambda's START, END and "
             "REPORT lines; "
             f"{LAMBDA_STEPS_PER_RUN} steps per run, {LAMBDA_STEPS_PER_TARGET} per target plus one per readiness check, one per cell and one "
             "more per failed cell); the workflow logs at ERROR; EC2 workers run no log agent.")

# Sizes of stored events (their `data` as JSON) for a plan, which has none yet: what synthetic_run's events
# measure (0.7, 2.4 and 3.9 KB), rounded up for what real cells add (warm-up, verdict, resources, settings).
PLANNED_EVENT_BYTES = {"RunRequested.environment": 1500, "TargetsReady per target": 1200, "CellStarted": 1000,
                       "IntervalMeasured": 2600, "CellCompleted": 5000, "RunCompleted": 100}


@cache
def prices() -> dict:
    return json.loads(PRICING_FILE.read_text())


@dataclass(frozen=True)
class Usage:
    """What a run used (measured from its events, or planned), in the units prices are given in."""

    run_s: float  # RunRequested to the run's end: the targets live through it
    creation_in_run: bool  # run_s includes the targets' creation (they were provisioned in AWS after RunRequested)
    ready_after_s: float | None  # RunRequested to TargetsReady, when measured
    workers: tuple[tuple[str, float], ...]  # (lambda | ec2, seconds) per worker started
    cells: int
    failed_cells: int
    event_bytes: tuple[int, ...]  # each stored event item: data as JSON + ITEM_OVERHEAD_BYTES
    header_bytes: int  # the RunRequested item (also written to the run indexes)
    notes: tuple[str, ...] = ()
    broker_bytes: tuple[tuple[str, float], ...] = ()  # (broker, message bytes sent + received) per cell
    lambda_memory_mb: int | None = None  # as the run's Lambda cells recorded it (None: as deployed now)


# -- the arithmetic ----------------------------------------------------------------------------
def line_item(what: str, quantity: float, unit: str, unit_price: float) -> dict:
    return {"what": what, "quantity": round(quantity, 6), "unit": unit, "unit_price": round(unit_price, 12),
            "cost": round(quantity * unit_price, 4)}


def hours_text(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


def creation_s(broker: str) -> float:
    """About how long `broker`'s provisioned target takes to create (its plug-in's Cloud.creation_s)."""
    return plugin(broker).cloud.creation_s


def target_kinds(spec: dict, *, provision_all: bool = False) -> dict[str, str]:
    """Per broker of the run: provisioned (by its cloud provider), existing (an endpoint in targets), or
    unpriced (no cloud provider, or none priced here). provision_all: as if no endpoint had been given."""
    kinds = {}
    for broker in spec["brokers"]:
        found = plugins().get(broker)
        if broker in spec.get("targets", {}) and not (provision_all and found is not None):
            kinds[broker] = "existing"
        elif found is None or found.cloud is None or found.cloud.prices is None:
            kinds[broker] = "unpriced"
        else:
            kinds[broker] = "provisioned"
    return kinds


def price(spec: dict, usage: Usage, kinds: dict[str, str], where: str) -> dict:
    """The estimate of `usage` at the list prices, with every rule it follows stated."""
    table = prices()
    items: list[dict] = []
    assumptions = [f"Prices: brokerbench/pricing.json, {table['region']}, as of {table['as_of']}. {table['note']}"]
    provisioned = [b for b, kind in kinds.items() if kind == "provisioned"]
    creation = 0 if usage.creation_in_run else max((creation_s(b) for b in provisioned), default=0)
    life_s = usage.run_s + creation
    for broker in provisioned:
        found, notes = plugin(broker).price_target(broker, spec.get("provision", {}).get(broker, {}), life_s)
        items += found
        assumptions += notes
    if provisioned:
        if usage.creation_in_run:
            assumptions.append(f"Targets live from RunRequested (written before they are created) to the run's end: "
                               f"{hours_text(life_s)}, their creation as measured.")
        else:
            allowances = ", ".join(f"{b} {creation_s(b) // 60:.0f} min" for b in provisioned)
            assumptions.append(f"Targets live from their creation to the run's end: {hours_text(usage.run_s)} of run "
                               f"plus the slowest creation allowance ({allowances}; targets are created together "
                               f"and cells start when all are ready) = {hours_text(life_s)}.")
        assumptions.append("Not counted: deleting the targets after the run.")
    for broker, kind in kinds.items():
        if kind == "existing":
            assumptions.append(f"{broker}: an existing endpoint (targets.{broker}): no broker cost counted.")
        elif kind == "unpriced":
            assumptions.append(f"{broker}: no provisioned target to price (no cloud provider, or none in "
                               "prices beside its cloud provider): no broker cost counted.")

    lambdas = [seconds for kind, seconds in usage.workers if kind == "lambda"]
    ec2 = [max(EC2_MINIMUM_S, seconds) for kind, seconds in usage.workers if kind == "ec2"]
    memory_mb = usage.lambda_memory_mb or deployment.worker_lambda_memory_mb()
    instance_type = deployment.worker_instance_type()
    gb = memory_mb / 1024
    if lambdas:
        items.append(line_item(f"Lambda workers: {len(lambdas)} × {memory_mb:,} MB "
                               f"{LAMBDA_WORKER_ARCHITECTURE}, "
                           f"{sum(lambdas):,.0f} s", sum(lambdas) * gb, "GB-second",
                           table["lambda"]["gb_second"][LAMBDA_WORKER_ARCHITECTURE]))
        items.append(line_item("Lambda worker requests", len(lambdas), "request",
                           table["lambda"]["per_million_requests"] / 1e6))
    if ec2:
        items.append(line_item(f"EC2 workers: {len(ec2)} × {instance_type}, {sum(ec2):,.0f} s "
                           f"(at least {EC2_MINIMUM_S} s each)", sum(ec2) / 3600, "instance-hour",
                           table["ec2"]["instance_hour"][instance_type]))
    memory_from = "as the run's Lambda cells recorded it" if usage.lambda_memory_mb else "as the CDK app deploys it"
    assumptions.append(f"Workers: Lambda {memory_mb:,} MB {LAMBDA_WORKER_ARCHITECTURE} ({memory_from}), EC2 "
                       f"{instance_type} (as the CDK app deploys it); each is billed from its cell's "
                       f"start to its end (EC2 at least {EC2_MINIMUM_S} s per instance; an instance's boot before "
                       "its cell starts is not counted).")

    poll_s = max(1, (spec.get("provision") or {}).get("poll_s", 30))
    checks = 0
    for broker in provisioned:
        if usage.creation_in_run:  # measured: until TargetsReady, or the whole run when it never came
            waited = usage.ready_after_s if usage.ready_after_s is not None else usage.run_s
        else:
            waited = creation_s(broker)
        checks += math.ceil(waited / poll_s)
    transitions = (MAIN_PATH_STATES + STATES_PER_TARGET * len(kinds) + STATES_PER_READINESS_CHECK * checks
                   + STATES_PER_CELL * usage.cells + STATES_PER_FAILED_CELL * usage.failed_cells)
    items.append(line_item(f"Step Functions: {transitions:,} state transitions", transitions, "state transition",
                       table["stepfunctions"]["standard_per_1000_transitions"] / 1000))
    assumptions.append(TRANSITIONS_RULE)
    items += network_items(usage, kinds, table)
    assumptions.append(NETWORK_RULE)
    items.append(logs_item(usage, len(kinds), checks, table))
    assumptions.append(LOGS_RULE)

    sizes = (usage.header_bytes, *usage.event_bytes)
    wru = (TRANSACTIONAL_WRITE_FACTOR * sum(math.ceil(size / 1024) for size in sizes)
           + RUN_INDEXES * math.ceil(usage.header_bytes / 1024))
    rru = REPORT_READS * math.ceil(sum(sizes) / 4096)
    stored_gb = (sum(sizes) + RUN_INDEXES * usage.header_bytes) / 1024**3
    table_db = table["dynamodb"]
    items.append(line_item(f"DynamoDB writes: {len(sizes):,} events", wru, "write request unit",
                       table_db["on_demand_per_million_wru"] / 1e6))
    items.append(line_item(f"DynamoDB reads: the run's events, {REPORT_READS} times", rru, "read request unit",
                       table_db["on_demand_per_million_rru"] / 1e6))
    items.append(line_item("DynamoDB storage of the events, one month", stored_gb, "GB-month",
                           table_db["storage_gb_month"]))
    assumptions.append(f"DynamoDB: each event is its data as JSON + {ITEM_OVERHEAD_BYTES} B; written in transactions "
                       f"({TRANSACTIONAL_WRITE_FACTOR} WRU per started KB), the run header also into its "
                       f"{RUN_INDEXES} indexes; read {REPORT_READS} times (CheckRegression, Aggregate) at 1 RRU per "
                       "4 KB; kept one month.")
    assumptions += list(usage.notes)
    assumptions.append("Not counted: the workflow's own Lambda steps, S3 reports, SNS, CloudWatch metrics and alarms, "
                       "VPC flow logs, the interface endpoints, and data transfer out of the region.")
    return {"currency": table.get("currency", "USD"), "where": where,
            "total": round(sum(item["cost"] for item in items), 2), "items": items,
            "prices": {"region": table["region"], "as_of": table["as_of"]}, "assumptions": assumptions}


def network_items(usage: Usage, kinds: dict[str, str], table: dict) -> list[dict]:
    """Cross-AZ data transfer of the messages to and from provisioned brokers, and the NAT gateway's hours and
    GB during the run: their own lines, shown even when they come to nothing."""
    moved = sum(size for broker, size in usage.broker_bytes if kinds.get(broker) == "provisioned")
    crossing_gb = moved * CROSS_AZ_SHARE / 1024**3
    ec2_workers = sum(1 for kind, _ in usage.workers if kind == "ec2")
    nat_gb = ec2_workers * EC2_BOOT_DOWNLOAD_BYTES / 1024**3
    vpc = table["vpc"]
    return [
        line_item(f"Cross-AZ data transfer: {CROSS_AZ_SHARE:.0%} of {moved / 1024**3:,.3f} GB of messages, "
                  "billed out and in", crossing_gb, "GB crossing AZs",
                  CROSS_AZ_SIDES * table["data_transfer"]["cross_az_per_gb_each_direction"]),
        line_item(f"NAT gateway: {hours_text(usage.run_s)} of the run", usage.run_s / 3600, "NAT gateway-hour",
                  vpc["nat_gateway_hour"]),
        line_item(f"NAT gateway data: {ec2_workers} EC2 workers × {EC2_BOOT_DOWNLOAD_BYTES // 1024**2} MB", nat_gb,
                  "GB processed", vpc["nat_gateway_per_gb"]),
    ]


def logs_item(usage: Usage, targets: int, checks: int, table: dict) -> dict:
    invocations = (LAMBDA_STEPS_PER_RUN + LAMBDA_STEPS_PER_TARGET * targets + checks + len(usage.workers)
                   + usage.failed_cells)
    return line_item(f"CloudWatch Logs: {invocations:,} Lambda invocations × {LOG_BYTES_PER_INVOCATION:,} B",
                     invocations * LOG_BYTES_PER_INVOCATION / 1024**3, "GB ingested",
                     table["cloudwatch"]["logs_ingestion_per_gb"])


# -- usage from a run's events -------------------------------------------------------------------
def _at(event: dict) -> datetime:
    return datetime.fromisoformat(event["at"])


@cache
def _placement_defaults() -> dict:
    placement = request_schema()["properties"]["placement"]["properties"]
    return {name: field["default"] for name, field in placement.items() if "default" in field}


def _planned_kind(cell: dict, spec: dict) -> str:
    if cell.get("worker") in ("lambda", "ec2"):
        return cell["worker"]
    return worker_kind(cell, {**_placement_defaults(), **(spec.get("placement") or {})})


def measured_usage(events: list[dict]) -> Usage:
    """What the run's events say it used: the run's wall time, each worker's time, the events stored."""
    by_type: dict[str, list[dict]] = defaultdict(list)
    for event in events:
        by_type[event["type"]].append(event)
    requested = by_type["RunRequested"][0]
    spec = requested["data"]["spec"]
    start = _at(requested)
    run_end = by_type.get("RunCompleted") or by_type.get("RunFailed")
    end = _at(run_end[0]) if run_end else max(_at(e) for e in events)  # still running or stopped: so far
    ready = by_type.get("TargetsReady")
    planned = {cell["cell_id"]: cell for cell in planned_cells(events)}  # a large plan's are in CellsPlanned

    cell_end: dict[str, datetime] = {}
    for event in by_type.get("CellCompleted", []) + by_type.get("CellFailed", []):
        cid = event["data"]["cell_id"]
        cell_end[cid] = min(cell_end.get(cid, _at(event)), _at(event))
    started: dict[str, list[dict]] = defaultdict(list)
    for event in by_type.get("CellStarted", []):
        started[event["data"]["cell_id"]].append(event)
    workers = []
    for cid, attempts in started.items():
        attempts.sort(key=lambda e: (e["data"].get("attempt", 0), e["at"]))
        for i, event in enumerate(attempts):
            begin = _at(event)
            if i + 1 < len(attempts):  # a retried worker: this one ran until the next attempt started
                stop = _at(attempts[i + 1])
            elif cid in cell_end and cell_end[cid] >= begin:
                stop = cell_end[cid]
            else:
                stop = end
            recorded = (event["data"].get("worker") or {}).get("kind")
            kind = (recorded if recorded in ("lambda", "ec2")
                    else _planned_kind(planned.get(cid) or event["data"]["cell"], spec))
            workers.append((kind, max(0.0, (stop - begin).total_seconds())))

    # Reports read the events without the per-interval histograms (stored beside `data`): their size is then
    # taken as that of the cell's cumulative histograms, which hold at least as many values.
    cumulative = {e["data"]["cell_id"]: len(json.dumps(e["data"].get("histograms", {})))
                  for e in by_type.get("CellCompleted", [])}
    sizes, proxied = [], 0
    for event in events:
        if event is requested:
            continue
        size = len(json.dumps(event["data"])) + ITEM_OVERHEAD_BYTES
        if event["type"] == "IntervalMeasured" and "histograms" not in event["data"]:
            size += cumulative.get(event["data"]["cell_id"], 0)
            proxied += 1
        sizes.append(size)
    # A cell whose intervals were not read (reports read a digested cell's start and end only): its digest
    # keeps the size each interval was stored at, without histograms.
    read = {e["data"]["cell_id"] for e in by_type.get("IntervalMeasured", [])}
    for completed in by_type.get("CellCompleted", []):
        cell_id, digest = completed["data"]["cell_id"], completed["data"].get("digest")
        if digest and cell_id not in read:
            sizes += [size + ITEM_OVERHEAD_BYTES + cumulative.get(cell_id, 0) for size in digest["bytes"]]
            proxied += len(digest["bytes"])
    notes = [f"{proxied:,} intervals were read without their histograms: each counts the size of its cell's "
             "cumulative histograms."] if proxied else []
    recorded_memory = next((e["data"]["worker"]["memory_mb"] for e in by_type.get("CellStarted", [])
                            if (e["data"].get("worker") or {}).get("memory_mb")), None)
    moved: dict[str, tuple[str, float]] = {}
    for completed in by_type.get("CellCompleted", []):  # the first completion of each cell
        cid, totals = completed["data"]["cell_id"], completed["data"].get("totals") or {}
        broker = (planned.get(cid) or {}).get("broker")
        if broker and cid not in moved:
            moved[cid] = (broker, float(totals.get("bytes_sent", 0)) + float(totals.get("bytes_received", 0)))
    return Usage(run_s=max(0.0, (end - start).total_seconds()), creation_in_run=True,
                 ready_after_s=(_at(ready[0]) - start).total_seconds() if ready else None,
                 workers=tuple(workers), cells=len(set(started) | set(cell_end)),
                 failed_cells=len({e["data"]["cell_id"] for e in by_type.get("CellFailed", [])}),
                 event_bytes=tuple(sizes), header_bytes=len(json.dumps(requested["data"])) + ITEM_OVERHEAD_BYTES,
                 notes=tuple(notes), broker_bytes=tuple(moved.values()), lambda_memory_mb=recorded_memory)


def local_evidence(events: list[dict]) -> str | None:
    """Why the run counts as one on the local stack, or None. Events do not name the provider; these do:
    a local broker's processes sampled with the cells, a broker that only runs locally, or every cell run
    on the host that planned the run (in AWS, planning and each cell run in different Lambdas or instances)."""
    requested = next(e for e in events if e["type"] == "RunRequested")
    spec = requested["data"]["spec"]
    for event in events:
        if event["type"] in ("CellCompleted", "IntervalMeasured") and "broker" in (event["data"].get("resources") or {}):
            return "a local broker's processes were sampled with the cells"
        if event["type"] == "CellCompleted" and (event["data"].get("digest") or {}).get("broker_sampled"):
            return "a local broker's processes were sampled with the cells"  # in intervals a report left unread
    local_only = [b for b in spec["brokers"] if b not in spec.get("targets", {}) and b in plugins()
                  and plugins()[b].cloud is None]
    if local_only:
        return f"{', '.join(local_only)} runs only on the local stack (no cloud provider)"
    planner = (requested["data"].get("environment") or {}).get("host", {}).get("hostname")
    hosts = {(e["data"].get("worker") or {}).get("host") for e in events if e["type"] == "CellStarted"}
    if planner and hosts == {planner}:
        return "every cell ran on the host that planned the run"
    return None


def estimate(events: list[dict]) -> dict:
    """The run's AWS cost from its stored events only; for a local run 0, with `on_aws` what it would cost there."""
    usage = measured_usage(events)
    spec = next(e for e in events if e["type"] == "RunRequested")["data"]["spec"]
    local = local_evidence(events)
    as_if_provisioned = target_kinds(spec, provision_all=True)
    if local:
        table = prices()
        on_aws = price(spec, replace(usage, creation_in_run=False), as_if_provisioned, "aws")
        on_aws["assumptions"].insert(0, "The same run in AWS: its measured run and cell times, every broker on its "
                                        "default provisioned target.")
        return {"currency": table.get("currency", "USD"), "where": "local", "total": 0.0, "items": [],
                "prices": {"region": table["region"], "as_of": table["as_of"]},
                "assumptions": [f"Run on the local stack ({local}): no AWS cost."], "on_aws": on_aws}
    kinds = target_kinds(spec)
    provisioned_here = "provisioned" in kinds.values()
    # Targets were created after RunRequested only when this run provisioned one.
    result = price(spec, replace(usage, creation_in_run=provisioned_here), kinds, "aws")
    result["assumptions"].insert(1, "Run in AWS: no sign of the local stack in its events.")
    result["on_aws"] = None
    if kinds != as_if_provisioned:
        on_aws = price(spec, replace(usage, creation_in_run=provisioned_here), as_if_provisioned, "aws")
        on_aws["assumptions"].insert(0, "The same run with every broker on its default provisioned target.")
        result["on_aws"] = on_aws
    return result


# -- usage from a plan ---------------------------------------------------------------------------
def _planned_intervals(cell: dict) -> float:
    """Measured seconds of a cell (one interval each): its estimated time without warm-up, drain and start-up."""
    if cell["rate"] == "sustainable":  # every step of the search measures like a max-rate cell
        step = {**cell, "rate": "max", "messages": None}
        return estimated_seconds(cell) / estimated_seconds(step) * _planned_intervals(step)
    return max(1.0, estimated_seconds(cell) - cell["warmup_s"] - cell["drain_timeout_s"] - CELL_OVERHEAD_S)


def _planned_bytes(cell: dict) -> float:
    """A fixed-rate cell's message bytes to and from its broker: rate × size over its measured seconds, each
    message sent once and received once (0 for max and sustainable rates, which a plan cannot know)."""
    if not isinstance(cell["rate"], (int, float)):
        return 0.0
    return 2.0 * cell["rate"] * cell["size_bytes"] * _planned_intervals(cell)


def planned_usage(spec: dict) -> Usage:
    """What a validated spec's plan will use: estimated cell times (plan.estimated_seconds), no failures."""
    planned = plan(spec)
    cells = planned["cells"]
    sizes = [PLANNED_EVENT_BYTES["TargetsReady per target"] * len(spec["brokers"]) + ITEM_OVERHEAD_BYTES,
             PLANNED_EVENT_BYTES["RunCompleted"] + ITEM_OVERHEAD_BYTES]
    for cell in cells:
        sizes += [PLANNED_EVENT_BYTES["CellStarted"] + ITEM_OVERHEAD_BYTES,
                  PLANNED_EVENT_BYTES["CellCompleted"] + ITEM_OVERHEAD_BYTES]
        sizes += [PLANNED_EVENT_BYTES["IntervalMeasured"] + ITEM_OVERHEAD_BYTES] * math.ceil(_planned_intervals(cell))
    header = (len(json.dumps({"spec": spec, "cells": cells})) + PLANNED_EVENT_BYTES["RunRequested.environment"]
              + ITEM_OVERHEAD_BYTES)
    moved = tuple((cell["broker"], _planned_bytes(cell)) for cell in cells)
    unknown = sum(1 for cell in cells if not isinstance(cell["rate"], (int, float)))
    note = (f"Planned: {len(cells)} cells, {planned['estimated_s']:,} s of cells at max_concurrency "
            f"{planned['max_concurrency']} (plan.estimated_seconds: warm-up + measured + drain + "
            f"{CELL_OVERHEAD_S} s start-up per cell); stored events of typical sizes.")
    notes = (note,) + ((f"{unknown} cells at max or sustainable rate move bytes a plan cannot know: their cross-AZ "
                        "data transfer is not counted.",) if unknown else ())
    return Usage(run_s=float(planned["estimated_s"]), creation_in_run=False, ready_after_s=None,
                 workers=tuple((cell["worker"], estimated_seconds(cell)) for cell in cells), cells=len(cells),
                 failed_cells=0, event_bytes=tuple(sizes), header_bytes=header, notes=notes, broker_bytes=moved)


def hourly(spec: dict, usage: Usage, kinds: dict[str, str]) -> dict:
    """What the run creates, priced per hour while it exists: each provisioned target (one hour of it), and the workers
    that run at once (max_concurrency of each kind, for the hours cells run). A run that fails or is stopped, or one
    that keeps its targets (keep_targets), bills the targets' part for every hour they are left."""
    table = prices()
    target_items: list[dict] = []
    for broker in (b for b, kind in kinds.items() if kind == "provisioned"):
        target_items += plugin(broker).price_target(broker, spec.get("provision", {}).get(broker, {}), 3600)[0]
    worker_items = []
    at_once = {kind: min(spec["max_concurrency"], sum(1 for k, _ in usage.workers if k == kind))
               for kind in ("lambda", "ec2")}
    if at_once["ec2"]:
        instance_type = deployment.worker_instance_type()
        worker_items.append(line_item(f"EC2 workers at once: {at_once['ec2']} × {instance_type}", at_once["ec2"],
                                      "instance-hour", table["ec2"]["instance_hour"][instance_type]))
    if at_once["lambda"]:
        memory_mb = deployment.worker_lambda_memory_mb()
        worker_items.append(line_item(f"Lambda workers at once: {at_once['lambda']} × {memory_mb:,} MB for an hour",
                                      at_once["lambda"] * memory_mb / 1024 * 3600, "GB-second",
                                      table["lambda"]["gb_second"][LAMBDA_WORKER_ARCHITECTURE]))
    items = target_items + worker_items
    return {"total": round(sum(item["cost"] for item in items), 2),
            "targets": round(sum(item["cost"] for item in target_items), 2), "items": items,
            "kept_hours": kept_hours(spec)}


def hourly_text(hourly_: dict, currency: str = "USD") -> str:
    """The hourly cost in one sentence, for the command line before a run."""
    workers = round(hourly_["total"] - hourly_["targets"], 2)
    text = (f"While it exists, what this run creates bills ${hourly_['total']:,.2f} {currency} an hour: its provisioned "
            f"targets ${hourly_['targets']:,.2f}, its workers at once ${workers:,.2f}.")
    if hourly_["kept_hours"] is not None:
        text += (f" keep_targets keeps the targets {hourly_['kept_hours']:g} h from their creation, then the hourly "
                 f"sweeper deletes them: up to ${hourly_['targets'] * hourly_['kept_hours']:,.2f} for those hours.")
    else:
        text += " Targets left behind by a failed run bill their part every hour until teardown or the sweeper deletes them."
    return text


def estimate_plan(spec: dict) -> dict:
    """A validated spec's cost in AWS before it runs, every broker on its default provisioned target, with what
    it creates priced per hour (`hourly`)."""
    kinds = target_kinds(spec, provision_all=True)
    usage = planned_usage(spec)
    result = price(spec, usage, kinds, "plan")
    result["hourly"] = hourly(spec, usage, kinds)
    given = [b for b in spec["brokers"] if b in spec.get("targets", {}) and kinds[b] == "provisioned"]
    if given:
        result["assumptions"].insert(1, f"{', '.join(given)}: priced as the default provisioned target, not the "
                                        "endpoint given in targets.")
    result["on_aws"] = None
    return result
