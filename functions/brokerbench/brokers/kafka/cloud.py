"""Amazon MSK (provisioned) as Kafka's cloud provider: TLS in transit, IAM client authentication.

Its subnets and security groups come from the environment its declaration names (cloud_access.ENVIRONMENT).

Provisioning is idempotent per run: a CreateClusterV2 that already happened (a retried step) answers
ConflictException, and the cluster of that name tagged with this run is taken as the target.

Teardown: MSK deletes a cluster only when it is ACTIVE or FAILED; one still CREATING (or UPDATING, HEALING,
in MAINTENANCE...) refuses DeleteCluster with BadRequestException. Teardown then answers "not deletable yet"
and the workflow asks again later; a cluster DELETING is "deleting", and one no longer listed is "gone".
"""

from __future__ import annotations

from botocore.exceptions import ClientError

from ... import settings
from ...targets import (DELETING, GONE, NOT_DELETABLE, RUN_TAG, ProvisioningError, leftover, raise_client_error,
                        resource_name, run_tags, still_waiting, target, teardown_found)
from .cloud_access import SECURITY_GROUPS_ENV, SUBNETS_ENV

DEFAULT_VERSION = "3.9.x"
TRANSIENT = {"TooManyRequestsException", "ServiceUnavailableException", "ConflictException"}
DELETABLE = {"ACTIVE", "FAILED"}  # DeleteCluster refuses a cluster in any other state (BadRequestException)
REFUSED = {"BadRequestException", "ConflictException"}  # what a delete of a cluster changing state answers
DEFAULT_NODES = 3


def quota_need(broker: str, settings: dict) -> int:
    """Brokers one cluster of the run takes from the account's quota (Number of brokers per account)."""
    return settings.get("nodes", DEFAULT_NODES)


def quota_in_use(client) -> int:
    """Brokers of the region's provisioned MSK clusters, whatever their state (a cluster being deleted still
    counts until it is gone)."""
    return sum((cluster.get("Provisioned") or {}).get("NumberOfBrokerNodes", 0)
               for page in client.get_paginator("list_clusters_v2").paginate()
               for cluster in page["ClusterInfoList"])


class MskTargets:
    kind = "msk"  # what the sweeper calls its resources

    def __init__(self, client, *, subnets: list[str], security_groups: list[str], tags: dict | None = None) -> None:
        self.client = client
        self.subnets = subnets
        self.security_groups = security_groups
        self.tags = tags or {}

    def provision(self, run_id: str, broker: str, spec: dict) -> dict:
        settings = spec["provision"].get("kafka", {})
        name = resource_name(run_id, broker)
        nodes = quota_need(broker, settings)
        if self.subnets and nodes % len(self.subnets):
            raise ProvisioningError(f"provision.kafka.nodes={nodes}: Amazon MSK needs a multiple of its "
                                    f"{len(self.subnets)} client subnets (one per AZ): "
                                    f"{', '.join(str(len(self.subnets) * k) for k in (1, 2))}")
        try:
            response = self.client.create_cluster_v2(
                ClusterName=name,
                Tags={**self.tags, **run_tags(run_id, spec)},
                Provisioned={
                    "KafkaVersion": settings.get("version", DEFAULT_VERSION),
                    "NumberOfBrokerNodes": nodes,
                    "BrokerNodeGroupInfo": {
                        "InstanceType": settings.get("instance_type", "kafka.m7g.large"),
                        "ClientSubnets": self.subnets,
                        "SecurityGroups": self.security_groups,
                        "StorageInfo": {"EbsStorageInfo": {"VolumeSize": settings.get("volume_gb", 100)}},
                    },
                    "EncryptionInfo": {"EncryptionInTransit": {"ClientBroker": "TLS", "InCluster": True}},
                    "ClientAuthentication": {"Sasl": {"Iam": {"Enabled": True}}, "Unauthenticated": {"Enabled": False}},
                },
            )
        except ClientError as exc:
            existing = self._ours(name, run_id) if exc.response["Error"]["Code"] == "ConflictException" else None
            if existing is None:  # a name that is not (or no longer) this run's cluster stays a transient conflict
                raise_client_error(exc, TRANSIENT, f"creating MSK cluster {name}")
            response = {"ClusterArn": existing}  # an earlier attempt of this step created it
        return target(broker, "msk", ready=False, resource=response["ClusterArn"], timeout_s=spec["provision"]["timeout_s"])

    def _ours(self, name: str, run_id: str) -> str | None:
        """The ARN of the cluster called `name` that this run created (its brokerbench:run tag), if any: a retried
        ProvisionTarget whose CreateClusterV2 already happened finds it instead of failing on the conflict."""
        try:
            clusters = self.client.list_clusters_v2(ClusterNameFilter=name)["ClusterInfoList"]
        except ClientError as exc:
            raise_client_error(exc, TRANSIENT, f"looking up MSK cluster {name}")
        for cluster in clusters:
            if (cluster["ClusterName"] == name and cluster.get("State") != "DELETING"
                    and cluster.get("Tags", {}).get("brokerbench:run") == run_id):
                return cluster["ClusterArn"]
        return None

    def check(self, current: dict) -> dict:
        try:
            info = self.client.describe_cluster_v2(ClusterArn=current["resource"])["ClusterInfo"]
            state = info["State"]
            if state == "FAILED":
                reason = info.get("StateInfo", {}).get("Message", "no reason given")
                raise ProvisioningError(f"MSK cluster {current['resource']} failed: {reason}")
            if state != "ACTIVE":
                return still_waiting(current)
            brokers = self.client.get_bootstrap_brokers(ClusterArn=current["resource"])
        except ClientError as exc:
            raise_client_error(exc, TRANSIENT, f"checking MSK cluster {current['resource']}")
        endpoint = {"bootstrap_servers": brokers["BootstrapBrokerStringSaslIam"], "auth": "iam", "tls": True,
                    "version": info["Provisioned"]["CurrentBrokerSoftwareInfo"]["KafkaVersion"],
                    "managed": {"service": "msk", "cluster_arn": current["resource"]}}  # its faults' target
        return {**current, "ready": True, "endpoint": endpoint}

    def teardown(self, run_id: str, broker: str, spec: dict) -> dict:
        name = resource_name(run_id, broker)
        return teardown_found(broker, name, spec, lambda: self._clusters(name), self.delete)

    def _clusters(self, name: str) -> list[tuple[str, str]]:
        """The run's cluster (by its name), as (ARN, MSK's state): none, or one."""
        try:
            clusters = self.client.list_clusters_v2(ClusterNameFilter=name)["ClusterInfoList"]
        except ClientError as exc:
            raise_client_error(exc, TRANSIENT, f"looking up MSK cluster {name}")
        return [(c["ClusterArn"], c["State"]) for c in clusters if c["ClusterName"] == name]

    def delete(self, arn: str, state: str) -> str:
        """Delete one cluster if MSK allows it now: DELETING when it is going away, NOT_DELETABLE while it is
        still being created or changed."""
        if state == "DELETING":
            return DELETING
        if state not in DELETABLE:
            return NOT_DELETABLE
        try:
            self.client.delete_cluster(ClusterArn=arn)
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            if code == "NotFoundException":
                return GONE
            if code in REFUSED:  # it changed state since it was listed
                return NOT_DELETABLE
            raise_client_error(exc, TRANSIENT, f"deleting MSK cluster {arn}")
        return DELETING

    def leftovers(self) -> list[dict]:
        """Every bb-* cluster tagged with a run, not already being deleted: what the sweeper may delete."""
        found, token = [], None
        while True:
            page = self.client.list_clusters_v2(ClusterNameFilter="bb-", **({"NextToken": token} if token else {}))
            for cluster in page["ClusterInfoList"]:
                tags = cluster.get("Tags", {})
                if cluster["ClusterName"].startswith("bb-") and tags.get(RUN_TAG) and cluster["State"] != "DELETING":
                    found.append(leftover("msk", cluster["ClusterName"], cluster["ClusterArn"], cluster["State"], tags))
            token = page.get("NextToken")
            if not token:
                return found


def provider() -> MskTargets:
    return MskTargets(settings.boto("kafka"), subnets=settings.env_list(SUBNETS_ENV),
                      security_groups=settings.env_list(SECURITY_GROUPS_ENV))
