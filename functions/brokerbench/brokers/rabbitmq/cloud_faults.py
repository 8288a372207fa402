"""Amazon MQ for RabbitMQ's fault (brokerbench.faults kind reboot, AWS mode): RebootBroker of the run's broker.

RebootBroker restarts the whole broker: a single-instance broker is down until it is back, and a cluster deployment's
nodes are restarted by Amazon MQ (it names no node, and a request names none: the fault takes no target). The broker
reads REBOOT_IN_PROGRESS meanwhile and RUNNING again after; a reboot is accepted only while it is RUNNING. Which node
led a queue before and after is not asked (Amazon MQ's management API is not reached from the cell): the records'
leader_before and leader_at_end stay null.

The broker's id comes with the endpoint (`managed.broker_id`, set by cloud.py when the broker runs).
IAM: mq:RebootBroker and mq:DescribeBroker on bb-* brokers carrying the run tag (declared in cloud_access.py,
role faults). Never run against real AWS: the calls' shapes are checked with botocore's Stubber
(tests/unit/test_cloud_faults.py).
"""

from __future__ import annotations

from ... import settings

BROKER = "broker"  # what the records name as the node: the whole broker


def client():
    return settings.boto("mq")


def leader(client, endpoint: dict, topic: str) -> str | None:
    return None


def nodes(client, endpoint: dict) -> list[str]:
    return [BROKER]


def reboot(client, endpoint: dict, node: str) -> tuple[dict, dict]:
    """RebootBroker of the run's broker: the request and Amazon MQ's answer (an empty body)."""
    request = {"BrokerId": endpoint["managed"]["broker_id"]}
    return request, client.reboot_broker(**request)


def whole(client, endpoint: dict) -> bool:
    """The broker is RUNNING again."""
    return client.describe_broker(BrokerId=endpoint["managed"]["broker_id"])["BrokerState"] == "RUNNING"
