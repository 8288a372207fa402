"""Amazon MQ for RabbitMQ as RabbitMQ's cloud provider: a broker per run (single-instance or a 3-node cluster),
AMQP over TLS (amqps, port 5671), an admin user whose password is generated per run and kept in Secrets Manager.

Its subnets and security groups come from the environment its declaration names (cloud_access.ENVIRONMENT).

The settings read are `provision.<broker>` (the row's broker name: rabbitmq-quorum, rabbitmq-streams...):
  deployment     "single-instance" (SINGLE_INSTANCE, one node in the first subnet) or "cluster"
                 (CLUSTER_MULTI_AZ: Amazon MQ's RabbitMQ cluster is always 3 nodes, over the subnets given)
  nodes          1 or 3, the same choice by count (both given: they must agree)
  instance_type  a host instance type priced in prices.json (the spend guard; mq.t3.micro is single-instance only)
  version        the RabbitMQ engine version (default DEFAULT_VERSION)
PROVISION_PROPERTIES below is that schema fragment, for the plug-in's settings.PROVISION.

Credentials: the password is made here (secrets.token_urlsafe), stored in a secret named
brokerbench/<broker name> tagged with the run, and passed to CreateBroker; it is never logged, returned or stored in
an event. The endpoint names the secret (`password_secret_arn`, like ElastiCache's `auth_secret_arn`): a driver
fetches it from Secrets Manager. Teardown deletes the broker, then the secret.

Provisioning is idempotent per run: the secret of a retried step is found and reused, CreateBroker carries a
CreatorRequestId (Amazon MQ's idempotency token), and a name conflict takes the broker of that name that is
tagged with this run.

Teardown: Amazon MQ deletes a broker that is RUNNING (or failed to create, or needs an action); one still being
created is "not deletable yet" and the workflow asks again later; one being deleted is "deleting"; one no longer
listed is "gone". The sweeper (workflow/sweep.py) finds bb-* brokers tagged with a run through `leftovers`, and
the brokerbench/bb-* secrets tagged with a run whose broker is no longer listed: a broker's password goes at the
sweep after the broker has gone.

Never run against real AWS: the request shapes are checked with moto and botocore's Stubber
(tests/unit/test_amazon_mq.py).
"""

from __future__ import annotations

import json
import secrets as random_secrets

from botocore.exceptions import ClientError

from ... import settings
from ...targets import (DELETING, GONE, NOT_DELETABLE, RUN_TAG, ProvisioningError, leftover, raise_client_error,
                        run_tags, still_waiting, target, teardown_found, unreadable)
from .cloud_access import SECURITY_GROUPS_ENV, SUBNETS_ENV
from .prices import INSTANCE_TYPES, SINGLE_INSTANCE_ONLY

KIND = "amazonmq"
DEFAULT_VERSION = "3.13"
DEFAULT_INSTANCE = "mq.m5.large"
USERNAME = "brokerbench"
AMQPS_PORT = 5671
DEPLOYMENTS = {"single-instance": ("SINGLE_INSTANCE", 1), "cluster": ("CLUSTER_MULTI_AZ", 3)}
TRANSIENT = {"TooManyRequestsException", "InternalServerErrorException", "ConflictException"}
DELETABLE = {"RUNNING", "CREATION_FAILED", "CRITICAL_ACTION_REQUIRED"}
SECRET_PREFIX = "brokerbench/"

PROVISION_PROPERTIES = {
    "deployment": {"description": "Amazon MQ for RabbitMQ: single-instance (one node) or cluster (CLUSTER_MULTI_AZ, "
                                  "always 3 nodes). Omitted: from nodes, else single-instance.",
                   "enum": sorted(DEPLOYMENTS)},
    "nodes": {"description": "Amazon MQ for RabbitMQ: 1 (single-instance) or 3 (a cluster); nothing else exists there. "
                             "Locally 3 runs the local cluster rabbitmq@3 (a member of each queue or stream per node).",
              "type": "integer", "enum": [1, 3]},
    "instance_type": {"description": "Amazon MQ host instance type: one priced in brokers/rabbitmq/prices.json (a spend "
                                     "guard, also held by the IAM policy); mq.t3.micro runs single-instance only.",
                      "enum": INSTANCE_TYPES, "default": DEFAULT_INSTANCE},
    "version": {"description": f"RabbitMQ engine version on Amazon MQ (default {DEFAULT_VERSION}).", "type": "string"},
}


def quota_need(broker: str, settings: dict) -> int:
    """Brokers one target of the run takes from the account's quota (Number of brokers per region): one, whether it
    is a single instance or a cluster of three nodes."""
    return 1


def quota_in_use(client) -> int:
    """The region's Amazon MQ brokers, whatever their engine or state."""
    return sum(len(page["BrokerSummaries"]) for page in client.get_paginator("list_brokers").paginate())


def broker_name(run_id: str, broker: str) -> str:
    """bb-<run id>-<broker>: Amazon MQ allows 1 to 50 letters, digits, - and _ (the whole broker name is kept, so two
    RabbitMQ rows of one run get two brokers)."""
    return f"bb-{run_id.lower()}-{broker}"[:50]


def deployment(broker: str, provision: dict) -> tuple[str, int]:
    """(Amazon MQ's DeploymentMode, nodes) from provision.<broker>.deployment and/or .nodes; ProvisioningError names
    the field when they disagree or the instance type cannot serve it."""
    chosen, nodes = provision.get("deployment"), provision.get("nodes")
    if chosen is None:
        chosen = "cluster" if nodes == 3 else "single-instance"
    if chosen not in DEPLOYMENTS:
        raise ProvisioningError(f"provision.{broker}.deployment: {chosen!r} is not one of {', '.join(DEPLOYMENTS)}")
    mode, count = DEPLOYMENTS[chosen]
    if nodes is not None and nodes != count:
        raise ProvisioningError(f"provision.{broker}.nodes: {nodes} disagrees with deployment {chosen} ({count} "
                                "node(s) on Amazon MQ)")
    instance = provision.get("instance_type", DEFAULT_INSTANCE)
    if instance not in INSTANCE_TYPES:
        raise ProvisioningError(f"provision.{broker}.instance_type: {instance} is not priced in "
                                f"brokers/rabbitmq/prices.json ({', '.join(INSTANCE_TYPES)})")
    if count > 1 and instance in SINGLE_INSTANCE_ONLY:
        raise ProvisioningError(f"provision.{broker}.instance_type: {instance} runs single-instance only on Amazon MQ")
    return mode, count


class AmazonMqTargets:
    kind = KIND  # what the sweeper calls its resources

    def __init__(self, client, secrets, *, subnets: list[str], security_groups: list[str],
                 tags: dict | None = None) -> None:
        self.client = client
        self.secrets = secrets
        self.subnets = subnets
        self.security_groups = security_groups
        self.tags = tags or {}

    # -- provision and check ----------------------------------------------------------------------------
    def provision(self, run_id: str, broker: str, spec: dict) -> dict:
        provision = spec["provision"].get(broker, {})
        mode, nodes = deployment(broker, provision)
        if len(self.subnets) < (2 if nodes > 1 else 1):
            raise ProvisioningError(f"provision.{broker}.deployment: a cluster needs subnets in 2 or more zones; "
                                    f"{SUBNETS_ENV} has {len(self.subnets)}")
        name = broker_name(run_id, broker)
        secret_arn, password = self._secret(name, run_id)
        try:
            response = self.client.create_broker(
                BrokerName=name,
                CreatorRequestId=name,
                EngineType="RABBITMQ",
                EngineVersion=provision.get("version", DEFAULT_VERSION),
                HostInstanceType=provision.get("instance_type", DEFAULT_INSTANCE),
                DeploymentMode=mode,
                PubliclyAccessible=False,
                AutoMinorVersionUpgrade=True,
                SubnetIds=self.subnets[:1] if nodes == 1 else self.subnets,
                SecurityGroups=self.security_groups,
                Users=[{"Username": USERNAME, "Password": password}],
                Tags={**self.tags, **run_tags(run_id, spec)},
            )
            broker_id = response["BrokerId"]
        except ClientError as exc:
            broker_id = self._ours(name, run_id) if exc.response["Error"]["Code"] == "ConflictException" else None
            if broker_id is None:
                raise_client_error(exc, TRANSIENT, f"creating Amazon MQ broker {name}")
        current = target(broker, KIND, ready=False, resource=broker_id, timeout_s=spec["provision"]["timeout_s"])
        return {**current, "secret_arn": secret_arn}

    def _secret(self, name: str, run_id: str) -> tuple[str, str]:
        """The run's broker password: made and stored now, or the one an earlier attempt of this step stored."""
        secret_name = SECRET_PREFIX + name
        password = random_secrets.token_urlsafe(32)  # letters, digits, - and _: none of Amazon MQ's forbidden , : =
        try:
            created = self.secrets.create_secret(
                Name=secret_name, Description=f"brokerbench run {run_id}: Amazon MQ broker {name}",
                SecretString=json.dumps({"username": USERNAME, "password": password}),
                Tags=[{"Key": k, "Value": v} for k, v in {**self.tags, RUN_TAG: run_id}.items()])
            return created["ARN"], password
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ResourceExistsException":
                raise_client_error(exc, {"ThrottlingException", "InternalServiceError"},
                                   f"storing the password of Amazon MQ broker {name}")
        described = self.secrets.describe_secret(SecretId=secret_name)
        if {t["Key"]: t["Value"] for t in described.get("Tags", [])}.get(RUN_TAG) != run_id:
            raise ProvisioningError(f"creating Amazon MQ broker {name}: secret {secret_name} exists and is not this run's")
        value = json.loads(self.secrets.get_secret_value(SecretId=described["ARN"])["SecretString"])
        return described["ARN"], value["password"]

    def _ours(self, name: str, run_id: str) -> str | None:
        """The id of the broker called `name` that this run created (its brokerbench:run tag), if any."""
        for summary in self._summaries():
            if summary["BrokerName"] == name and summary.get("BrokerState") != "DELETION_IN_PROGRESS":
                tags = self.client.list_tags(ResourceArn=summary["BrokerArn"]).get("Tags", {})
                if tags.get(RUN_TAG) == run_id:
                    return summary["BrokerId"]
        return None

    def check(self, current: dict) -> dict:
        try:
            info = self.client.describe_broker(BrokerId=current["resource"])
        except ClientError as exc:
            raise_client_error(exc, TRANSIENT, f"checking Amazon MQ broker {current['resource']}")
        state = info["BrokerState"]
        if state == "CREATION_FAILED":
            raise ProvisioningError(f"Amazon MQ broker {current['resource']} failed to create")
        if state != "RUNNING":
            return still_waiting(current)
        return {**current, "ready": True, "endpoint": self.endpoint(info, current["secret_arn"])}

    @staticmethod
    def endpoint(info: dict, secret_arn: str) -> dict:
        """The amqps endpoint DescribeBroker lists (a cluster's one address, in front of its nodes)."""
        urls = [url for instance in info.get("BrokerInstances", []) for url in instance.get("Endpoints", [])]
        amqps = next((url for url in urls if url.startswith("amqps://")), None)
        if amqps is None:
            raise ProvisioningError(f"Amazon MQ broker {info.get('BrokerId')} lists no amqps endpoint ({urls})")
        host, _, port = amqps.removeprefix("amqps://").rstrip("/").partition(":")
        console = next((i["ConsoleURL"] for i in info.get("BrokerInstances", []) if i.get("ConsoleURL")), None)
        return {"host": host, "amqp_port": int(port or AMQPS_PORT), "tls": True, "vhost": "/", "username": USERNAME,
                "password_secret_arn": secret_arn, "version": info.get("EngineVersion", "unknown"),
                "deployment": info.get("DeploymentMode"), "instance_type": info.get("HostInstanceType"),
                "managed": {"service": "amazonmq", "broker_id": info.get("BrokerId")},  # its faults' target
                **({"management_url": console} if console else {})}

    # -- teardown and the sweeper ---------------------------------------------------------------------
    def teardown(self, run_id: str, broker: str, spec: dict) -> dict:
        name = broker_name(run_id, broker)
        return teardown_found(broker, name, spec, lambda: self._brokers(name), self.delete,
                              gone=lambda: self._delete_secret(name))

    def _brokers(self, name: str) -> list[tuple[str, str]]:
        """The run's brokers of that name, as (broker id, Amazon MQ's state)."""
        try:
            return [(s["BrokerId"], s["BrokerState"]) for s in self._summaries() if s["BrokerName"] == name]
        except ClientError as exc:
            raise_client_error(exc, TRANSIENT, f"looking up Amazon MQ broker {name}")

    def delete(self, resource: str, state: str) -> str:
        """Delete one broker (or, for the sweeper, one leftover secret `secret:<name>`) if Amazon MQ allows it now."""
        if resource.startswith("secret:"):
            self._delete_secret(resource.removeprefix("secret:").removeprefix(SECRET_PREFIX))
            return GONE
        if state == "DELETION_IN_PROGRESS":
            return DELETING
        if state not in DELETABLE:
            return NOT_DELETABLE
        try:
            self.client.delete_broker(BrokerId=resource)
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            if code == "NotFoundException":
                return GONE
            if code in ("BadRequestException", "ConflictException"):  # it changed state since it was listed
                return NOT_DELETABLE
            raise_client_error(exc, TRANSIENT, f"deleting Amazon MQ broker {resource}")
        return DELETING

    def _delete_secret(self, name: str) -> None:
        """The run's password goes with its broker (at once, no recovery window: the broker it opened is gone)."""
        try:
            self.secrets.delete_secret(SecretId=SECRET_PREFIX + name, ForceDeleteWithoutRecovery=True)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ResourceNotFoundException":
                raise_client_error(exc, {"ThrottlingException", "InternalServiceError"},
                                   f"deleting the password secret of Amazon MQ broker {name}")

    def _summaries(self) -> list[dict]:
        found, token = [], None
        while True:
            page = self.client.list_brokers(MaxResults=100, **({"NextToken": token} if token else {}))
            found += page.get("BrokerSummaries", [])
            token = page.get("NextToken")
            if not token:
                return found

    def leftovers(self) -> list[dict]:
        """Every bb-* broker tagged with a run, not already being deleted, and the brokerbench/bb-* secrets whose
        broker is gone: what the sweeper may delete."""
        found, names = [], set()
        for summary in self._summaries():
            name = summary["BrokerName"]
            names.add(name)
            if not name.startswith("bb-") or summary.get("BrokerState") == "DELETION_IN_PROGRESS":
                continue
            try:
                tags = self.client.list_tags(ResourceArn=summary["BrokerArn"]).get("Tags", {})
            except ClientError as exc:  # this broker unread; the others still listed
                found.append(unreadable(KIND, name, summary["BrokerId"], f"reading the tags of {name}", exc))
                continue
            if tags.get(RUN_TAG):
                found.append(leftover(KIND, name, summary["BrokerId"], summary["BrokerState"], tags))
        return found + self._leftover_secrets(names)

    def _leftover_secrets(self, brokers: set[str]) -> list[dict]:
        found = []
        pages = self.secrets.get_paginator("list_secrets").paginate(
            Filters=[{"Key": "name", "Values": [SECRET_PREFIX + "bb-"]}, {"Key": "tag-key", "Values": [RUN_TAG]}])
        for page in pages:
            for secret in page["SecretList"]:
                name = secret["Name"].removeprefix(SECRET_PREFIX)
                run_id = {t["Key"]: t["Value"] for t in secret.get("Tags", [])}.get(RUN_TAG)
                if name.startswith("bb-") and run_id and name not in brokers:
                    found.append({"kind": KIND, "name": secret["Name"], "resource": f"secret:{secret['Name']}",
                                  "state": "broker gone", "run_id": run_id})
        return found


def provider() -> AmazonMqTargets:
    return AmazonMqTargets(settings.boto("mq"), settings.boto("secretsmanager"),
                           subnets=settings.env_list(SUBNETS_ENV),
                           security_groups=settings.env_list(SECURITY_GROUPS_ENV))
