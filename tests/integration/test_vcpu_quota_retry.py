"""RunCellOnEc2's retry of VcpuQuotaExceeded, executed: the state exactly as statemachines/benchmark_run.asl.json has
it (its Retry and Catch untouched), run by the local ASL interpreter (npm aws-local-stepfunctions, as the local
workflow runs it) with every wait shortened by a time scale, so the definition's own 60/120/240/480 s backoff is
computed by the interpreter and waited for, in milliseconds.

The task is the real StartEc2Worker handler and the real Ec2Fleet.launch; EC2 and SSM are botocore's Stubber:
RunInstances answers VcpuLimitExceeded each time, as EC2 does when the account's vCPU quota is used up.
"""

import json
import time

import boto3
import pytest
from botocore.stub import Stubber

from brokerbench.local import workflow as local_workflow
from brokerbench.local.workflow import LocalWorkflow
from brokerbench.workflow import wiring
from brokerbench.workflow.fleet import Ec2Fleet, TokenParameters, VcpuQuotaExceeded

SCALE = 0.005  # 60 s -> 0.3 s: the four waits take 4.5 s
BACKOFF_MS = [60_000, 120_000, 240_000, 480_000]  # IntervalSeconds 60, BackoffRate 2, MaxAttempts 4
EC2_SAYS = "You have requested more vCPU capacity than your current vCPU limit of 32 allows"


@pytest.fixture
def definition(tmp_path):
    """RunCells' EC2 branch alone: RunCellOnEc2 as deployed, its Catch going to a Pass that keeps the error."""
    states = local_workflow.load_definition()["States"]["RunCells"]["ItemProcessor"]["States"]
    task = states["RunCellOnEc2"]
    (catch,) = task["Catch"]
    path = tmp_path / "run_cell_on_ec2.asl.json"
    path.write_text(json.dumps({"StartAt": "RunCellOnEc2", "States": {
        "RunCellOnEc2": task, catch["Next"]: {"Type": "Pass", "End": True}}}))
    return path, catch["Next"]


def test_vcpu_quota_exceeded_is_retried_after_60_120_240_480_s_then_caught(definition, local_stack,
                                                                              event_store_endpoint, monkeypatch,
                                                                              tmp_path):
    """Five launches (the first and four retries), each refused VcpuLimitExceeded and each cleaning up its token's
    parameter; between them the interpreter asked for exactly 60, 120, 240 and 480 s, and each gap lasted at least
    its share at the scale; then the Catch takes the error to RecordCellFailed with the quota's explanation."""
    path, record_state = definition
    monkeypatch.setenv("BROKERBENCH_WORKER_INSTANCE_TYPE", "c7i.2xlarge")
    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    ssm = boto3.client("ssm", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    launches: list[float] = []
    ec2.meta.events.register("before-call.*.*", lambda model, **_: launches.append(time.monotonic())
                             if model.name == "RunInstances" else None)
    fleet = Ec2Fleet(ec2, launch_template="bb-worker", subnet="subnet-w", environment={},
                     tokens=TokenParameters(ssm, "/bb/task-tokens"))
    monkeypatch.setattr(wiring, "fleet", lambda: fleet)
    cell = {"cell_id": "kafka.json.batch.1024B.100mps.r0", "index": 0, "broker": "kafka"}
    with Stubber(ec2) as ec2_stub, Stubber(ssm) as ssm_stub:
        for _ in range(1 + len(BACKOFF_MS)):
            ssm_stub.add_response("put_parameter", {"Version": 1})
            ec2_stub.add_client_error("run_instances", "VcpuLimitExceeded", http_status_code=400,
                                      service_message=EC2_SAYS)
            ssm_stub.add_response("delete_parameter", {})
        execution = LocalWorkflow(local_stack, tmp_path / "reports", definition=path).execute(
            {}, run_id="20261128T230000Z-vcpu01", time_scale=SCALE,
            execution_input={"run_id": "20261128T230000Z-vcpu01", "cell": cell, "targets": {}})
        ec2_stub.assert_no_pending_responses()
        ssm_stub.assert_no_pending_responses()

    assert execution.status == "SUCCEEDED", execution  # the Catch took the error: the branch ends normally
    assert execution.tasks == [("RunCellOnEc2", VcpuQuotaExceeded.__name__)] * 5
    retry_waits = [ms for ms in execution.waits if ms in BACKOFF_MS]
    assert retry_waits == BACKOFF_MS
    gaps = [later - earlier for earlier, later in zip(launches, launches[1:])]
    assert len(gaps) == 4 and all(gap >= ms / 1000 * SCALE for gap, ms in zip(gaps, BACKOFF_MS)), gaps
    error = execution.output["error"]
    assert error["Error"] == VcpuQuotaExceeded.__name__
    assert "c7i.2xlarge" in error["Cause"] and "current vCPU limit of 32" in error["Cause"]
    assert "L-1216C47A" in error["Cause"]
    assert record_state == "RecordCellFailed"
