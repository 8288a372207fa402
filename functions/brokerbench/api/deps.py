"""What the API's routes need, passed in: the event store, the executor, the report files, the schedules."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

from .. import schedules, settings
from ..workflow import wiring
from ..workflow.admission import Admission
from ..workflow.outputs import FolderReports
from ..workflow.starter import LocalStarter, Starter, StepFunctionsStarter


@dataclass
class Deps:
    store: Any  # DynamoEventStore
    starter: Starter
    reports: Any  # FolderReports | S3Reports
    schedules: Callable[[], list]  # loads the schedules file (read on each request: it is data, edited by people)
    mode: str  # local | aws
    idempotency: Any = None  # a Powertools persistence layer; None: Idempotency-Key is refused


def from_environment() -> Deps:
    """In Lambda: everything from the environment the CDK app sets."""
    store = wiring.event_store()
    sfn, machine = boto3.client("stepfunctions"), settings.env("BROKERBENCH_STATE_MACHINE_ARN")
    return Deps(store=store, starter=StepFunctionsStarter(sfn, machine, store,
                                                          admission=Admission.from_environment(sfn, machine, store)),
                reports=wiring.reports(), schedules=schedules.deployed, mode="aws",
                idempotency=DynamoDBPersistenceLayer(table_name=settings.env("BROKERBENCH_IDEMPOTENCY_TABLE")))


IDEMPOTENCY_TABLE = "brokerbench-idempotency"


def ensure_idempotency_table(client, table: str = IDEMPOTENCY_TABLE) -> None:
    """The idempotency records' table (Powertools' layout: key `id`, expiry `expiration`); in AWS the CDK app
    owns it."""
    try:
        client.describe_table(TableName=table)
        return
    except client.exceptions.ResourceNotFoundException:
        pass
    client.create_table(TableName=table, BillingMode="PAY_PER_REQUEST",
                        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
                        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}])
    client.get_waiter("table_exists").wait(TableName=table, WaiterConfig={"Delay": 1, "MaxAttempts": 60})


def local(stack, store, reports_dir, schedules_file=None) -> Deps:
    """`brokerbench serve`: the local stack runs the workflow, DynamoDB Local keeps events and idempotency records."""
    ensure_idempotency_table(store.client)
    return Deps(store=store, starter=LocalStarter(stack, Path(reports_dir), store), reports=FolderReports(reports_dir),
                schedules=lambda: schedules.load(schedules_file), mode="local",
                idempotency=DynamoDBPersistenceLayer(table_name=IDEMPOTENCY_TABLE, boto3_client=store.client))
