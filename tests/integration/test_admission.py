"""The cap on runs in flight holds under concurrent starts: slots in the events table on DynamoDB Local (the
session's `store`), taken with conditional writes (brokerbench/workflow/admission.py).

Step Functions is moto's (in-process; the runs' executions only wait), Lambda's account limits botocore's Stubber
(moto has no GetAccountSettings), as in tests/unit/test_bounds.py. The starts are real threads, each with its own
API (Powertools' resolver keeps the request on the app), all released at once by a barrier.
"""

import json
import threading

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID

from brokerbench.api import build_app
from brokerbench.api.deps import Deps
from brokerbench.workflow.admission import ADMISSION_PARTITION, START_GRACE_S, Admission, RunsInFlight, Slots
from brokerbench.workflow.starter import StepFunctionsStarter
from brokerbench.workflow.stop import InlineTeardowns, run_ended

REGION = "us-east-1"
# On an existing endpoint: the only quota read is Lambda's (the targets' quotas: tests/unit/test_bounds.py).
REQUEST = {"brokers": ["kafka"], "sizes": [1024], "rates": [100], "formats": ["json"],
           "targets": {"kafka": {"bootstrap_servers": "10.0.0.9:9092"}}}
WAIT = {"StartAt": "W", "States": {"W": {"Type": "Wait", "Seconds": 3600, "End": True}}}
CAP = 3
STARTS = 8  # at once, against a cap of 3


@pytest.fixture
def aws(monkeypatch, store):
    """moto for Step Functions; the slots' partition of the session's events table emptied before and after."""
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION}.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(key, raising=False)
    empty_slots(store)
    with mock_aws():
        yield boto3.client("stepfunctions").create_state_machine(
            name="bb-run", definition=json.dumps(WAIT),
            roleArn=f"arn:aws:iam::{DEFAULT_ACCOUNT_ID}:role/bb-run")["stateMachineArn"]
    empty_slots(store)


def empty_slots(store) -> None:
    for slot in Slots.of(store).held():
        store.client.delete_item(TableName=store.table,
                                 Key={"run_id": {"S": ADMISSION_PARTITION}, "sk": {"S": f"slot#{slot}"}})


def post(app, body: dict) -> tuple[int, dict]:
    event = {"resource": "/runs", "path": "/runs", "httpMethod": "POST", "headers": {"content-type": "application/json"},
             "multiValueHeaders": {}, "queryStringParameters": None, "multiValueQueryStringParameters": None,
             "pathParameters": None, "stageVariables": None, "body": json.dumps(body), "isBase64Encoded": False,
             "requestContext": {"resourcePath": "/runs", "httpMethod": "POST", "path": "/prod/runs", "stage": "prod",
                                "requestId": "r1", "identity": {"sourceIp": "10.0.0.1"}}}
    result = app.resolve(event, None)
    return result["statusCode"], json.loads(result["body"])


class Deployment:
    """The API's starter as in AWS (admission on the events table's slots, moto's Step Functions), and a count of
    the Lambda limits read (one per admitted start: the quotas are read only once a slot is held)."""

    def __init__(self, store, machine: str) -> None:
        self.store, self.machine, self.sfn = store, machine, boto3.client("stepfunctions")
        self.lambda_client = boto3.client("lambda", region_name=REGION)
        self.limit_reads: list[str] = []
        self.lambda_client.meta.events.register("before-call.*.*",
                                                lambda model, **_: self.limit_reads.append(model.name))
        self.admission = Admission(self.sfn, machine, slots=Slots.of(store), quotas=None,
                                   lambda_client=self.lambda_client, ec2=None, max_runs=CAP,
                                   worker_instance_type="c7i.2xlarge")
        self.starter = StepFunctionsStarter(self.sfn, machine, store, admission=self.admission)

    def start_at_once(self, count: int) -> list[tuple[int, dict]]:
        """`count` POST /runs from as many threads, released together; each answer (status, body)."""
        barrier, answers = threading.Barrier(count), [None] * count
        apps = [build_app(Deps(store=self.store, starter=self.starter, reports=None, schedules=list, mode="aws"))
                for _ in range(count)]

        def start(i: int) -> None:
            barrier.wait()
            answers[i] = post(apps[i], REQUEST)

        with Stubber(self.lambda_client) as stub:
            for _ in range(count):
                stub.add_response("get_account_settings", {"AccountLimit": {"ConcurrentExecutions": 1000,
                                                                            "UnreservedConcurrentExecutions": 1000}})
            threads = [threading.Thread(target=start, args=(i,)) for i in range(count)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
        return answers

    def running(self) -> list[str]:
        return sorted(e["name"] for e in self.sfn.list_executions(stateMachineArn=self.machine,
                                                                  statusFilter="RUNNING")["executions"])

    def holders(self) -> list[str]:
        return sorted(h["run_id"] for h in self.admission.slots.held().values())


def admitted_and_refused(answers: list[tuple[int, dict]]) -> tuple[list[str], list[dict]]:
    assert sorted({status for status, _ in answers}) == [202, 429], answers
    return (sorted(body["run_id"] for status, body in answers if status == 202),
            [body for status, body in answers if status == 429])


def test_concurrent_starts_admit_exactly_the_cap_and_refuse_the_rest_naming_the_runs(store, aws):
    """8 POST /runs at once against a cap of 3: exactly 3 answer 202 and start an execution, each holding one slot;
    the 5 others answer 429 naming exactly those 3 runs, and none of them read a quota or started anything.
    Then the 3 executions are stopped with nothing releasing their slots (the RunEnded function never ran): 8 more
    at once take those slots back, again exactly 3, and the 429s name the 3 new runs."""
    deployment = Deployment(store, aws)
    admitted, refused = admitted_and_refused(deployment.start_at_once(STARTS))
    assert len(admitted) == CAP and len(refused) == STARTS - CAP
    assert deployment.running() == admitted == deployment.holders()
    assert len(deployment.limit_reads) == CAP  # a refused start reads no quota
    for body in refused:
        assert sorted(body["run_ids"]) == admitted and all(run_id in body["message"] for run_id in admitted)
        assert f"at most {CAP} at once" in body["message"] and "brokerbench:maxRunsInFlight" in body["message"]

    for run_id in admitted:  # stopped from the console, say, and their ends never handled
        deployment.sfn.stop_execution(executionArn=deployment.starter._arn(run_id))
    assert deployment.holders() == admitted
    again, refused = admitted_and_refused(deployment.start_at_once(STARTS))
    assert len(again) == CAP and not set(again) & set(admitted)
    assert deployment.running() == again == deployment.holders()
    assert all(sorted(body["run_ids"]) == again for body in refused)
    assert len(deployment.limit_reads) == 2 * CAP


def test_a_run_that_ends_releases_its_slot_and_a_slot_never_started_is_taken_back_after_the_grace(store, aws):
    """A SUCCEEDED run's end (RunEnded) frees its slot though its execution still reads RUNNING, and the next start
    takes it. A slot taken for a run whose execution never started (the start's function died in between) is not
    taken back within START_GRACE_S of its taking, and is after it."""
    deployment = Deployment(store, aws)
    admitted, _ = admitted_and_refused(deployment.start_at_once(CAP + 1))
    ended = run_ended(store, {"status": "SUCCEEDED", "name": admitted[0], "input": json.dumps({"run_id": admitted[0]}),
                              "stateMachineArn": aws}, InlineTeardowns(), deployment.admission.slots)
    assert ended["status"] is None and ended["teardown"] == [] and len(ended["released_slots"]) == 1
    assert deployment.holders() == admitted[1:]
    (status, body), = deployment.start_at_once(1)
    assert status == 202 and deployment.holders() == sorted([*admitted[1:], body["run_id"]])

    empty_slots(store)
    now = [1_000_000.0]
    slots = Slots(store.client, store.table, clock=lambda: now[0])
    for slot in range(CAP):
        assert slots.take(slot, f"20261128T220000Z-ccc00{slot}")  # none of these executions exists
    assert not slots.take(0, "20261128T220000Z-ddd000")  # a held slot is not taken twice
    deployment.admission.slots = slots
    now[0] += START_GRACE_S
    with pytest.raises(RunsInFlight) as refused:
        deployment.admission.admit(REQUEST, "20261128T220000Z-ddd001")
    assert len(refused.value.run_ids) == CAP
    now[0] += 1
    with Stubber(deployment.lambda_client) as stub:
        stub.add_response("get_account_settings", {"AccountLimit": {"ConcurrentExecutions": 1000,
                                                                    "UnreservedConcurrentExecutions": 1000}})
        deployment.admission.admit(REQUEST, "20261128T220000Z-ddd001")
    assert "20261128T220000Z-ddd001" in deployment.holders()
