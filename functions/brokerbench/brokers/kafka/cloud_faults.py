"""Amazon MSK's fault (brokerbench.faults kind reboot, AWS mode): RebootBroker of one broker of the run's cluster.

The broker is the one the fault names: the leader of the cell's topic (its first partition) or another one, as the
cluster's own Kafka metadata says (the same request the local cluster's hooks make, over TLS with MSK IAM auth), or a
broker id given in the fault. MSK reboots it cleanly (the broker shuts down, hands over what it leads, and starts
again) and brings it back by itself; the cluster reads REBOOTING_BROKER meanwhile and ACTIVE again after. MSK takes
one broker per call, and only while the cluster is ACTIVE: a second reboot before the first is done is refused
(BadRequestException), which the cell records as a failed fault.

The cluster's ARN comes with the endpoint (`managed.cluster_arn`, set by cloud.py when the cluster is ready).
IAM: kafka:RebootBroker and kafka:DescribeClusterV2 on bb-* clusters carrying the run tag (declared in
cloud_access.py, role faults). Never run against real AWS: the calls' shapes are checked with botocore's Stubber
(tests/unit/test_cloud_faults.py).
"""

from __future__ import annotations

from ... import settings
from . import cluster


def client():
    return settings.boto("kafka")


def leader(client, endpoint: dict, topic: str) -> str | None:
    """The broker id leading the topic's first partition, from Kafka's metadata; None during an election."""
    return cluster.leader(endpoint, topic)


def nodes(client, endpoint: dict) -> list[str]:
    """The broker ids the cluster's metadata lists."""
    return cluster.broker_ids(endpoint)


def reboot(client, endpoint: dict, node: str) -> tuple[dict, dict]:
    """RebootBroker of broker `node`: the request and MSK's answer (ClusterArn, ClusterOperationArn)."""
    request = {"ClusterArn": endpoint["managed"]["cluster_arn"], "BrokerIds": [node]}
    return request, client.reboot_broker(**request)


def whole(client, endpoint: dict) -> bool:
    """The cluster is ACTIVE again (no reboot under way)."""
    info = client.describe_cluster_v2(ClusterArn=endpoint["managed"]["cluster_arn"])["ClusterInfo"]
    return info["State"] == "ACTIVE"
