"""The AWS cost estimate: hand-calculated from the price tables for measured runs (in AWS, local, EC2 workers,
existing targets) and for a plan; in every report; the `cost` command."""

import copy
import json
import math
from datetime import datetime, timedelta, timezone

import pytest
from synthetic import synthetic_run

from brokerbench import cost, deployment
from brokerbench.brokers.kafka import prices as msk_prices
from brokerbench.brokers.redis_streams import prices as elasticache_prices
from brokerbench.cli import main
from brokerbench.reports import html, markdown
from brokerbench.reports.model import build_report
from brokerbench.spec import validate

P = json.loads(cost.PRICING_FILE.read_text())
MSK = json.loads(msk_prices.PRICES_FILE.read_text())  # beside the Kafka plug-in's cloud provider
ELASTICACHE = json.loads(elasticache_prices.PRICES_FILE.read_text())
MSK_HOUR = MSK["broker_hour"]["kafka.m7g.large"]
MSK_GB_MONTH = MSK["storage_gb_month"]
REDIS_HOUR = ELASTICACHE["node_hour"]["cache.r7g.large"]
LAMBDA_GB_S = P["lambda"]["gb_second"][deployment.WORKER_LAMBDA_ARCHITECTURE]  # as the CDK app deploys it
LAMBDA_REQUEST = P["lambda"]["per_million_requests"] / 1e6
EC2_HOUR = P["ec2"]["instance_hour"][deployment.EC2_WORKER_INSTANCE_TYPE]
TRANSITION = P["stepfunctions"]["standard_per_1000_transitions"] / 1000
WRU = P["dynamodb"]["on_demand_per_million_wru"] / 1e6
RRU = P["dynamodb"]["on_demand_per_million_rru"] / 1e6
GB_MONTH = P["dynamodb"]["storage_gb_month"]
WORKER_GB = deployment.WORKER_LAMBDA_MEMORY_MB / 1024
CROSS_AZ_GB = P["data_transfer"]["cross_az_per_gb_each_direction"]
NAT_HOUR, NAT_GB = P["vpc"]["nat_gateway_hour"], P["vpc"]["nat_gateway_per_gb"]
LOGS_GB = P["cloudwatch"]["logs_ingestion_per_gb"]

SPEC = {"brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [1000], "formats": ["json"]}
T0 = datetime(2026, 1, 5, 2, 0, tzinfo=timezone.utc)


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat(timespec="milliseconds")


def timed(events, *, ready_s, durations, end_s):
    """The run requested at 0, targets ready at ready_s, cells one after another from there (each taking
    durations[i] seconds), the run's end at end_s."""
    out = copy.deepcopy(events)
    clock, starts, order = ready_s, {}, []
    for event in out:
        kind, cid = event["type"], event["data"].get("cell_id")
        if kind == "RunRequested":
            event["at"] = at(0)
        elif kind == "TargetsReady":
            event["at"] = at(ready_s)
        elif kind == "CellStarted":
            starts[cid] = clock
            order.append(cid)
            event["at"] = at(clock)
        elif kind == "IntervalMeasured":
            event["at"] = at(starts[cid] + 1)
        elif kind in ("CellCompleted", "CellFailed"):
            clock = starts[cid] + durations[order.index(cid)]
            event["at"] = at(clock)
        elif kind in ("RunCompleted", "RunFailed"):
            event["at"] = at(end_s)
    return out


def item(estimate, what):
    found = [i for i in estimate["items"] if i["what"].startswith(what)]
    assert len(found) == 1, (what, [i["what"] for i in estimate["items"]])
    return found[0]


def dynamodb_costs(events):
    """The stated rule: data as JSON + 200 B per event, 2 WRU per started KB (transactions), the header also
    into 2 indexes; 2 reads at 1 RRU per 4 KB; stored one month."""
    sizes = [len(json.dumps(e["data"])) + 200 for e in events]
    header = sizes[0]
    wru = 2 * sum(math.ceil(s / 1024) for s in sizes) + 2 * math.ceil(header / 1024)
    rru = 2 * math.ceil(sum(sizes) / 4096)
    gb = (sum(sizes) + 2 * header) / 1024**3
    return wru * WRU, rru * RRU, gb * GB_MONTH


def assert_total(estimate):
    assert estimate["total"] == round(sum(i["cost"] for i in estimate["items"]), 2)
    for i in estimate["items"]:
        assert i["cost"] == round(i["quantity"] * i["unit_price"], 4) or abs(
            i["cost"] - i["quantity"] * i["unit_price"]) < 1e-4


@pytest.fixture(scope="module")
def aws_run():
    # 20 min to create the targets, two 40 s cells, the run ends after half an hour.
    return timed(synthetic_run(SPEC, intervals=3), ready_s=1200, durations=[40, 40], end_s=1800)


def test_a_run_in_aws_costs_its_targets_for_the_run_its_workers_workflow_and_events(aws_run):
    estimate = cost.estimate(aws_run)
    assert estimate["where"] == "aws" and estimate["on_aws"] is None and estimate["currency"] == "USD"
    assert estimate["prices"] == {"region": "us-east-1", "as_of": P["as_of"]}
    # RunRequested is written before the targets are created: they live 0.5 h, creation included.
    assert item(estimate, "kafka: Amazon MSK kafka.m7g.large")["cost"] == round(3 * 0.5 * MSK_HOUR, 4)
    assert item(estimate, "kafka: Amazon MSK storage")["cost"] == round(3 * 100 * 0.5 / 730 * MSK_GB_MONTH, 4)
    assert item(estimate, "redis-streams: ElastiCache")["cost"] == round(1 * 1 * REDIS_HOUR, 4)  # 0.5 h billed as 1
    lambdas = item(estimate, "Lambda workers")
    assert lambdas["quantity"] == pytest.approx(2 * 40 * WORKER_GB)
    assert lambdas["cost"] == round(2 * 40 * WORKER_GB * LAMBDA_GB_S, 4)
    assert item(estimate, "Lambda worker requests")["cost"] == round(2 * LAMBDA_REQUEST, 4)
    # 12 main-path states + 4 per target × 2 + 3 per readiness check (20 min / 30 s = 40 per target) + 2 per cell
    transitions = 12 + 4 * 2 + 3 * (2 * 40) + 2 * 2
    assert item(estimate, "Step Functions")["quantity"] == transitions
    assert item(estimate, "Step Functions")["cost"] == round(transitions * TRANSITION, 4)
    writes, reads, storage = dynamodb_costs(aws_run)
    assert item(estimate, "DynamoDB writes")["cost"] == round(writes, 4)
    assert item(estimate, "DynamoDB reads")["cost"] == round(reads, 4)
    assert item(estimate, "DynamoDB storage")["cost"] == round(storage, 4)
    assert_total(estimate)
    assert not any(i["what"].startswith("EC2") for i in estimate["items"])
    assert any("deleting the targets" in a for a in estimate["assumptions"])


def test_a_local_run_costs_nothing_and_says_what_it_would_cost_on_aws(aws_run):
    events = copy.deepcopy(aws_run)
    for event in events:
        if event["type"] == "CellCompleted":  # only a local broker's processes are sampled
            event["data"]["resources"] = {"broker": {"cpu_pct_mean": 5.0, "cpu_pct_max": 9.0, "rss_mb_max": 400.0,
                                                     "samples": 3}}
    estimate = cost.estimate(events)
    assert estimate["where"] == "local" and estimate["total"] == 0 and estimate["items"] == []
    assert "no AWS cost" in estimate["assumptions"][0]
    on_aws = estimate["on_aws"]
    # Nothing was created in AWS: the run's 30 min plus the slowest creation allowance (MSK, 20 min).
    hours = (1800 + 20 * 60) / 3600
    assert item(on_aws, "kafka: Amazon MSK kafka.m7g.large")["cost"] == round(3 * hours * MSK_HOUR, 4)
    assert item(on_aws, "redis-streams: ElastiCache")["cost"] == round(1 * REDIS_HOUR, 4)
    assert item(on_aws, "Lambda workers")["cost"] == round(80 * WORKER_GB * LAMBDA_GB_S, 4)
    assert on_aws["total"] > 0
    assert_total(on_aws)
    report = build_report(events)
    sentence = f"run on the local stack: no AWS cost; on AWS with the default targets: ${on_aws['total']:,.2f}"
    assert sentence in markdown.render(report)
    assert sentence in html.render(report)


def test_a_run_whose_cells_ran_on_the_planning_host_is_local(aws_run):
    events = copy.deepcopy(aws_run)
    events[0]["data"]["environment"]["host"]["hostname"] = "dev-box"
    for event in events:
        if event["type"] == "CellStarted":
            event["data"]["worker"] = {"kind": "lambda", "host": "dev-box"}
    assert cost.estimate(events)["where"] == "local"
    first = next(e for e in events if e["type"] == "CellStarted")
    first["data"]["worker"] = {"kind": "lambda", "host": "169.254.40.2"}  # a cell in a Lambda sandbox
    assert cost.estimate(events)["where"] == "aws"


def test_ec2_workers_are_billed_per_instance_with_a_60_s_minimum():
    spec = {**SPEC, "placement": {"worker": "ec2"}}
    events = timed(synthetic_run(spec, intervals=3), ready_s=1200, durations=[30, 90], end_s=1800)
    estimate = cost.estimate(events)
    ec2 = item(estimate, "EC2 workers")
    assert ec2["quantity"] == pytest.approx((60 + 90) / 3600, abs=1e-6)  # the 30 s cell counts 60 s
    assert ec2["cost"] == round((60 + 90) / 3600 * EC2_HOUR, 4)
    assert not any(i["what"].startswith("Lambda") for i in estimate["items"])
    assert_total(estimate)


def test_a_retried_worker_counts_each_attempt_until_the_next_one_started(aws_run):
    events = copy.deepcopy(aws_run)
    first = next(e for e in events if e["type"] == "CellStarted")
    retry = copy.deepcopy(first)
    retry["data"]["attempt"], retry["at"] = 1, at(1200 + 25)
    events.insert(events.index(first) + 1, retry)
    # attempt 0: 25 s until the retry started; attempt 1: 15 s to the cell's end (40 s after the first start)
    assert item(cost.estimate(events), "Lambda workers")["quantity"] == pytest.approx((25 + 15 + 40) * WORKER_GB)
    assert item(cost.estimate(events), "Lambda worker requests")["quantity"] == 3


def test_existing_targets_cost_nothing_and_on_aws_prices_them_as_provisioned():
    spec = {**SPEC, "targets": {"kafka": {"bootstrap_servers": "kafka.example:9092"}}}
    events = timed(synthetic_run(spec, intervals=3), ready_s=600, durations=[40, 40], end_s=1800)
    estimate = cost.estimate(events)
    assert not any(i["what"].startswith("kafka") for i in estimate["items"])
    assert item(estimate, "redis-streams: ElastiCache")["cost"] == round(REDIS_HOUR, 4)
    assert any("existing endpoint (targets.kafka)" in a for a in estimate["assumptions"])
    # 12 + 4 per target (both go through the map) + 3 per check of the one created (10 min / 30 s) + 2 per cell
    assert item(estimate, "Step Functions")["quantity"] == 12 + 4 * 2 + 3 * 20 + 2 * 2
    on_aws = estimate["on_aws"]
    assert item(on_aws, "kafka: Amazon MSK kafka.m7g.large")["cost"] == round(3 * 0.5 * MSK_HOUR, 4)
    assert on_aws["total"] > estimate["total"]


def test_an_instance_type_without_a_price_is_stated_not_guessed(aws_run):
    events = copy.deepcopy(aws_run)
    events[0]["data"]["spec"]["provision"]["kafka"]["instance_type"] = "kafka.m5.24xlarge"
    estimate = cost.estimate(events)
    assert not any(i["what"].startswith("kafka: Amazon MSK kafka") for i in estimate["items"])
    assert any("no list price for kafka.m5.24xlarge" in a for a in estimate["assumptions"])


def test_a_plan_is_priced_with_the_same_arithmetic():
    spec = validate({"brokers": ["kafka"], "sizes": [1024], "rates": [1000], "formats": ["json"], "duration_s": 5,
                     "warmup_s": 1, "drain_timeout_s": 10})
    estimate = cost.estimate_plan(spec)
    assert estimate["where"] == "plan" and estimate["on_aws"] is None
    cell_s = 1 + 5 + 10 + 15  # plan.estimated_seconds: warm-up + measured + drain + start-up
    hours = (20 * 60 + cell_s) / 3600  # MSK's creation allowance, then the one cell
    assert item(estimate, "kafka: Amazon MSK kafka.m7g.large")["cost"] == round(3 * hours * MSK_HOUR, 4)
    assert item(estimate, "Lambda workers")["cost"] == round(cell_s * WORKER_GB * LAMBDA_GB_S, 4)
    assert item(estimate, "Step Functions")["quantity"] == 12 + 4 + 3 * 40 + 2
    assert_total(estimate)


def test_every_report_has_the_estimate_and_a_failing_estimate_never_breaks_one(aws_run, monkeypatch):
    report = build_report(aws_run)
    assert report["cost"]["total"] == cost.estimate(aws_run)["total"]
    body = markdown.render(report)
    assert "## Estimated AWS cost" in body and f"**${report['cost']['total']:,.2f}**" in body
    assert f"as of {P['as_of']}" in body
    page = html.render(report)
    assert "<h2>Estimated AWS cost</h2>" in page and "Amazon MSK kafka.m7g.large" in page

    def broken(events):
        raise RuntimeError("no <prices>")

    monkeypatch.setattr(cost, "estimate", broken)
    report = build_report(aws_run)
    assert report["cost"] == {"error": "RuntimeError: no <prices>"}
    assert "No estimate: RuntimeError: no <prices>" in markdown.render(report)
    assert "No estimate: RuntimeError: no &lt;prices&gt;" in html.render(report)


def test_cli_cost_of_the_quick_suite(capsys):
    assert main(["cost", "--suite", "quick", "--json"]) == 0
    estimate = json.loads(capsys.readouterr().out)
    assert estimate["total"] > 0 and estimate["prices"]["region"] == "us-east-1"
    assert len([i for i in estimate["items"] if i["what"].startswith("kafka: Amazon MSK kafka")]) == 1
    assert main(["cost", "--suite", "quick"]) == 0
    assert f"${estimate['total']:,.2f}" in capsys.readouterr().out


def test_cli_cost_of_a_study_is_each_runs_estimate_and_their_sum(capsys):
    from brokerbench.spec import scaled, suite_runs

    assert main(["cost", "--suite", "helenius", "--scale", "0.1", "--json"]) == 0
    study = json.loads(capsys.readouterr().out)
    runs = suite_runs("helenius")
    assert [r["name"] for r in study["runs"]] == [r["name"] for r in runs]
    for shown, request in zip(study["runs"], runs):
        alone = cost.estimate_plan(validate(scaled(request, 0.1)))
        assert shown["total"] == alone["total"] and shown["items"] == alone["items"]
    assert study["total"] == round(sum(r["total"] for r in study["runs"]), 2)
    full = cost.estimate_plan(validate(runs[0]))
    assert study["runs"][0]["total"] < full["total"]  # a scaled run costs less than the full one
    assert main(["cost", "--suite", "helenius"]) == 0
    out = capsys.readouterr().out
    assert "run helenius-4p1c3b" in out and "3 runs" in out


def test_cli_cost_of_an_invalid_spec_exits_2(tmp_path, capsys):
    spec = tmp_path / "bad.json"
    spec.write_text(json.dumps({"brokers": ["kafka"], "sizes": [1024], "rates": [1000], "formats": ["nope"]}))
    assert main(["cost", "--spec", str(spec)]) == 2
    assert "invalid run request" in capsys.readouterr().err
    assert main(["cost", "--suite", "no-such-suite"]) == 2


def test_a_large_plan_is_priced_from_its_cellsplanned_chunks():
    # 2 brokers × 2 formats × 3 sizes × 3 rates × 2 modes × 3 repeats = 216 cells: more than RunRequested holds
    spec = {"brokers": ["kafka", "redis-streams"], "formats": ["json", "raw"], "sizes": [1024, 2048, 4096],
            "rates": [100, 200, 300], "modes": ["batch", "single"], "repeats": 3}
    events = synthetic_run(spec, intervals=2)
    assert "cells" not in events[0]["data"] and any(e["type"] == "CellsPlanned" for e in events)
    estimate = cost.estimate(events)
    assert "error" not in estimate and estimate["total"] >= 0
    lambdas = next(i for i in (estimate["on_aws"] or estimate)["items"] if i["what"].startswith("Lambda workers"))
    assert lambdas["what"].startswith("Lambda workers: 216 ×")  # every planned cell, from the chunks


def with_bytes(events, moved: dict[str, tuple[int, int]]):
    """The run's events with each completed cell's measured bytes (sent, received) set, by broker."""
    out = copy.deepcopy(events)
    for event in out:
        if event["type"] == "CellCompleted":
            sent, received = moved[event["data"]["cell_id"].split(".")[0]]
            event["data"]["totals"].update(bytes_sent=sent, bytes_received=received)
    return out


def test_cross_az_nat_and_logs_are_lines_of_their_own_by_hand(aws_run):
    """1 GiB sent and 1 GiB received on Kafka, 0.5 GiB each way on Redis, both provisioned: 3 GiB between
    workers and brokers, 2/3 of which crosses AZs = 2 GiB, at $0.01 out + $0.01 in = $0.04. The NAT gateway's
    0.5 h of the run = $0.0225; no EC2 worker, no NAT data. Logs: 6 run steps + 2 × 2 targets + 80 readiness
    checks + 2 cells = 92 invocations × 2 KiB = 0.000175 GiB at $0.50."""
    gib = 1024**3
    events = with_bytes(aws_run, {"kafka": (gib, gib), "redis-streams": (gib // 2, gib // 2)})
    estimate = cost.estimate(events)
    cross = item(estimate, "Cross-AZ data transfer")
    assert cross["quantity"] == pytest.approx(2.0)
    assert cross["unit_price"] == pytest.approx(2 * CROSS_AZ_GB) and cross["cost"] == pytest.approx(0.04)
    assert item(estimate, "NAT gateway:")["cost"] == round(0.5 * NAT_HOUR, 4) == 0.0225
    assert item(estimate, "NAT gateway data")["quantity"] == 0
    logs = item(estimate, "CloudWatch Logs")
    assert "92 Lambda invocations" in logs["what"]
    assert logs["quantity"] == pytest.approx(92 * 2048 / gib, abs=1e-6) and logs["unit_price"] == LOGS_GB
    assert_total(estimate)
    assert any(a.startswith("Network: 67% of the message bytes") for a in estimate["assumptions"])


def test_an_existing_target_moves_no_priced_cross_az_bytes_and_ec2_workers_pass_the_nat():
    """kafka given as an existing endpoint: only Redis's bytes count. Two EC2 workers: 2 × 120 MiB through the
    NAT gateway = 0.234375 GiB at $0.045."""
    spec = {**SPEC, "targets": {"kafka": {"bootstrap_servers": "kafka.example:9092"}}, "placement": {"worker": "ec2"}}
    events = timed(synthetic_run(spec, intervals=3), ready_s=600, durations=[40, 40], end_s=1800)
    events = with_bytes(events, {"kafka": (3 * 1024**3, 3 * 1024**3), "redis-streams": (3 * 1024**3, 0)})
    estimate = cost.estimate(events)
    assert item(estimate, "Cross-AZ data transfer")["quantity"] == pytest.approx(2.0)  # 2/3 of Redis's 3 GiB
    nat = item(estimate, "NAT gateway data")
    assert nat["quantity"] == pytest.approx(240 / 1024) and nat["cost"] == round(240 / 1024 * NAT_GB, 4)


def test_a_plan_counts_fixed_rate_bytes_and_says_max_rate_bytes_are_unknown():
    """1,000 msgs/s of 1,024 B for 5 measured s, sent and received: 10,240,000 B, 2/3 crossing AZs."""
    spec = validate({"brokers": ["kafka"], "sizes": [1024], "rates": [1000, "max"], "formats": ["json"],
                     "duration_s": 5, "warmup_s": 1, "drain_timeout_s": 10})
    estimate = cost.estimate_plan(spec)
    assert item(estimate, "Cross-AZ data transfer")["quantity"] == pytest.approx(2 * 1000 * 1024 * 5 * 2 / 3 / 1024**3, abs=1e-6)
    assert any("1 cells at max or sustainable rate" in a for a in estimate["assumptions"])


def test_the_worker_memory_and_instance_type_priced_are_the_deployed_ones(aws_run, monkeypatch):
    """The CDK app tells every function what it deployed (BROKERBENCH_WORKER_MEMORY_MB, ..._INSTANCE_TYPE)."""
    monkeypatch.setenv("BROKERBENCH_WORKER_MEMORY_MB", "1769")
    lambdas = item(cost.estimate(aws_run), "Lambda workers")
    assert "1,769 MB" in lambdas["what"] and lambdas["quantity"] == pytest.approx(2 * 40 * 1769 / 1024)
    monkeypatch.setenv("BROKERBENCH_WORKER_MEMORY_MB", "12000")
    with pytest.raises(ValueError, match="BROKERBENCH_WORKER_MEMORY_MB=12000"):
        cost.estimate(aws_run)
    monkeypatch.delenv("BROKERBENCH_WORKER_MEMORY_MB")
    assert deployment.worker_lambda_memory_mb() == 3008
    monkeypatch.setenv("BROKERBENCH_WORKER_INSTANCE_TYPE", "c7g.2xlarge")
    spec = {**SPEC, "placement": {"worker": "ec2"}}
    events = timed(synthetic_run(spec, intervals=3), ready_s=1200, durations=[30, 90], end_s=1800)
    ec2 = item(cost.estimate(events), "EC2 workers")
    assert "c7g.2xlarge" in ec2["what"] and ec2["unit_price"] == P["ec2"]["instance_hour"]["c7g.2xlarge"]


def test_the_memory_a_lambda_cell_recorded_is_the_one_priced(aws_run, monkeypatch):
    """RunCell records its function's memory as Lambda states it (AWS_LAMBDA_FUNCTION_MEMORY_SIZE) in
    CellStarted: a run is priced at what it ran with, even after a redeploy changed the setting."""
    from brokerbench.workflow import steps

    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "2048")
    assert steps.lambda_worker()["memory_mb"] == 2048
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
    assert "memory_mb" not in steps.lambda_worker()
    events = copy.deepcopy(aws_run)
    for event in events:
        if event["type"] == "CellStarted":
            event["data"]["worker"] = {"kind": "lambda", "host": "169.254.1.1", "memory_mb": 2048}
    monkeypatch.setenv("BROKERBENCH_WORKER_MEMORY_MB", "3008")  # deployed now; the run ran with 2,048 MB
    estimate = cost.estimate(events)
    assert item(estimate, "Lambda workers")["quantity"] == pytest.approx(2 * 40 * 2.0)
    assert any("2,048 MB x86_64 (as the run's Lambda cells recorded it)" in a for a in estimate["assumptions"])
