"""Amazon MSK (provisioned) as Kafka's cloud provider: TLS in transit, IAM client authentication.

BROKERBENCH_MSK_SUBNETS, BROKERBENCH_MSK_SECURITY_GROUPS   comma-separated; set by the CDK app

Provisioning is idempotent per run: a CreateClusterV2 that already happened (a retried step) answers
ConflictException, and the cluster of that name tagged with this run is taken as the target.
"""

from __future__ import annotations

from botocore.exceptions import ClientError

from ... import settings
from ...targets import ProvisioningError, raise_client_error, resource_name, still_waiting, target

DEFAULT_VERSION = "3.9.x"
TRANSIENT = {"TooManyRequestsException", "ServiceUnavailableException", "ConflictException"}


class MskTargets:
    def __init__(self, client, *, subnets: list[str], security_groups: list[str], tags: dict | None = None) -> None:
        self.client = client
        self.subnets = subnets
        self.security_groups = security_groups
        self.tags = tags or {}

    def provision(self, run_id: str, broker: str, spec: dict) -> dict:
        settings = spec["provision"].get("kafka", {})
        name = resource_name(run_id, broker)
        nodes = settings.get("nodes", 3)
        if self.subnets and nodes % len(self.subnets):
            raise ProvisioningError(f"provision.kafka.nodes={nodes}: Amazon MSK needs a multiple of its "
                                    f"{len(self.subnets)} client subnets (one per AZ): "
                                    f"{', '.join(str(len(self.subnets) * k) for k in (1, 2))}")
        try:
            response = self.client.create_cluster_v2(
                ClusterName=name,
                Tags={**self.tags, "brokerbench:run": run_id},
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
                    "version": info["Provisioned"]["CurrentBrokerSoftwareInfo"]["KafkaVersion"]}
        return {**current, "ready": True, "endpoint": endpoint}

    def teardown(self, run_id: str, broker: str, spec: dict) -> dict:
        name = resource_name(run_id, broker)
        if spec.get("keep_targets"):
            return {"broker": broker, "action": f"kept {name} (keep_targets)"}
        try:
            clusters = self.client.list_clusters_v2(ClusterNameFilter=name)["ClusterInfoList"]
            arns = [c["ClusterArn"] for c in clusters if c["ClusterName"] == name and c["State"] != "DELETING"]
            for arn in arns:
                self.client.delete_cluster(ClusterArn=arn)
        except ClientError as exc:
            raise_client_error(exc, TRANSIENT, f"deleting MSK cluster {name}")
        return {"broker": broker, "action": f"deleting {name}" if arns else "nothing to delete"}


def provider() -> MskTargets:
    return MskTargets(settings.boto("kafka"), subnets=settings.env_list("BROKERBENCH_MSK_SUBNETS"),
                      security_groups=settings.env_list("BROKERBENCH_MSK_SECURITY_GROUPS"))
