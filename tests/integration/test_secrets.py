"""Secrets stay out of code, events and logs: a whole run through the CLI against a local Redis that requires an
AUTH password, then every byte it left behind is searched for the password; and an ElastiCache AUTH token is
fetched from Secrets Manager once per process (botocore's Stubber stands in for Secrets Manager, which cannot run
here: it answers exactly once, so a second fetch fails the test)."""

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
import redis
from botocore.stub import Stubber

from brokerbench.brokers.redis_streams import driver as redis_driver
from brokerbench.brokers.redis_streams.local import AUTH_ENV
from brokerbench.drivers import BrokerUnavailable
from brokerbench.events.dynamodb import DynamoEventStore

BROKERBENCH = str(Path(sys.executable).with_name("brokerbench"))


def test_a_run_with_redis_auth_leaves_the_password_nowhere(tmp_path):
    password = f"pw-{secrets.token_hex(12)}"
    env = {**os.environ, AUTH_ENV: password}
    state, out = tmp_path / "state", tmp_path / "out"
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"name": "auth", "brokers": ["redis-streams"], "sizes": [256], "rates": [200],
                                "formats": ["json", "raw"], "duration_s": 2, "warmup_s": 0.5,
                                "warmup_until_steady": False}))
    cli = [BROKERBENCH, "--state-dir", str(state)]
    try:
        result = subprocess.run([*cli, "run", "--spec", str(spec), "--out", str(out), "--keep-stack"], env=env,
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        stack = json.loads((state / "stack.json").read_text())
        endpoint = stack["redis"]["endpoint"]
        assert endpoint["auth_env"] == AUTH_ENV and password not in json.dumps(endpoint)

        # Redis really requires it, and the run really used it.
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=endpoint["port"]).ping()
        assert redis.Redis(port=endpoint["port"], password=password).ping()
        results = json.loads(next(out.glob("*/results.json")).read_text())
        assert [c["status"] for c in results["cells"]] == ["completed", "completed"]
        assert all(c["received"] == c["sent"] > 0 for c in results["cells"])

        # Not on redis-server's command line (ps shows it), and its config file is its owner's alone.
        for pid in stack["redis"]["pids"]:
            assert password.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
        conf = state / "redis" / "auth.conf"
        assert conf.stat().st_mode & 0o777 == 0o600 and password in conf.read_text()

        # Nowhere else: the CLI's output, every file of the stack (logs, state) and of the results, every stored item.
        assert password not in result.stdout + result.stderr
        leaked = [str(p) for root in (state, out) for p in root.rglob("*")
                  if p.is_file() and p != conf and password.encode() in p.read_bytes()]
        assert leaked == []
        db = stack["dynamodb"]["endpoint"]
        store = DynamoEventStore(db["table"], endpoint_url=db["endpoint_url"])
        items = store.client.scan(TableName=store.table)["Items"]
        assert items and results["run_id"] in json.dumps(items) and password not in json.dumps(items)
    finally:
        subprocess.run([*cli, "local", "down"], env=env, capture_output=True, timeout=120)


def test_without_the_password_the_broker_is_reported_unavailable(monkeypatch):
    monkeypatch.delenv(AUTH_ENV, raising=False)
    endpoint = {"host": "127.0.0.1", "port": 6379, "auth_env": AUTH_ENV}
    with pytest.raises(BrokerUnavailable, match=f"requires AUTH: set {AUTH_ENV}"):
        redis_driver.RedisStreamsDriver(endpoint, {}).connect()


def test_an_elasticache_auth_token_is_fetched_once_per_process(monkeypatch):
    arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:brokerbench-redis-auth-AbCdEf"
    client = boto3.client("secretsmanager", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(client)
    stubber.add_response("get_secret_value", {"ARN": arn, "Name": "brokerbench-redis-auth", "SecretString": "tok"},
                         {"SecretId": arn})
    stubber.activate()
    made = []
    monkeypatch.setattr(boto3, "client", lambda service, **kw: made.append(service) or client)
    monkeypatch.setattr(redis_driver, "_SECRETS", {})
    endpoint = {"host": "127.0.0.1", "port": 1, "auth_secret_arn": arn}
    for _ in range(3):  # new drivers, as each producer, consumer and check makes them, and several connects each
        driver = redis_driver.RedisStreamsDriver(endpoint, {})
        assert [driver.connect().connection_pool.connection_kwargs["password"] for _ in range(2)] == ["tok", "tok"]
    stubber.assert_no_pending_responses()
    assert made == ["secretsmanager"]
