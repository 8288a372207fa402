"""What an Amazon MQ for RabbitMQ target costs (brokerbench.cost adds it to a run's estimate): prices.json beside
this module holds the list prices, dated, with their source. Its instance types are also the spend guard: the
provider (cloud.py) and the CDK app's IAM policy (mq:CreateBroker on these host instance types) allow no other."""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path

from ...cost import hours_text, line_item

PRICES_FILE = Path(__file__).with_name("prices.json")
_TABLE = json.loads(PRICES_FILE.read_text())
INSTANCE_TYPES = sorted(_TABLE["instance_hour"])
SINGLE_INSTANCE_ONLY = sorted(_TABLE["single_instance_only"])
CLUSTER_NODES = 3  # Amazon MQ's RabbitMQ cluster deployment is always 3 broker nodes


@cache
def prices() -> dict:
    return json.loads(PRICES_FILE.read_text())


def nodes_of(settings: dict) -> int:
    """The instances the provider creates for these provision settings (cloud.deployment's rule)."""
    return CLUSTER_NODES if settings.get("deployment") == "cluster" or settings.get("nodes") == 3 else 1


def price(broker: str, settings: dict, life_s: float) -> tuple[list[dict], list[str]]:
    """Instance-hours for `life_s` (a partial hour billed as a full one) with the run's provision settings."""
    table = prices()
    instance = settings.get("instance_type", "mq.m5.large")
    rate = table["instance_hour"].get(instance)
    if rate is None:
        return [], [f"{broker}: no list price for {instance} in brokers/rabbitmq/prices.json: its instance-hours "
                    "are not counted"]
    nodes, billed = nodes_of(settings), math.ceil(life_s / 3600 - 1e-9)
    return [line_item(f"{broker}: Amazon MQ {instance}, {nodes} instance{'s' if nodes > 1 else ''} × "
                      f"{hours_text(life_s)} (billed as {billed} h)", nodes * billed, "instance-hour", rate)], \
        [f"{broker}: Amazon MQ instance-hours are billed per started hour (brokers/rabbitmq/prices.json, "
         f"{table['region']}, as of {table['as_of']}; not re-checked from this machine). Storage "
         f"(${table['storage_gb_month']}/GB-month used) is not counted: the run does not measure what the broker "
         "stores."]
