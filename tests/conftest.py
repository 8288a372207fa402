"""Fixtures for the real local stack: one Kafka, Redis and DynamoDB Local per test session, stopped at the end."""

import secrets

import pytest

from brokerbench.events.dynamodb import DynamoEventStore
from brokerbench.local.stack import LocalStack


@pytest.fixture(scope="session")
def stack(tmp_path_factory):
    local = LocalStack(tmp_path_factory.mktemp("stack"))
    local.up(log=lambda m: None)
    yield local
    local.down(log=lambda m: None)


@pytest.fixture(scope="session")
def endpoints(stack):
    return stack.endpoints()


@pytest.fixture(scope="session")
def store(endpoints):
    db = endpoints["dynamodb"]
    events = DynamoEventStore(f"bb-test-{secrets.token_hex(4)}", endpoint_url=db["endpoint_url"])
    events.ensure_table()
    yield events
    events.client.delete_table(TableName=events.table)
