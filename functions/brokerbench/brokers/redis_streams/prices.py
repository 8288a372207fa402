"""What an ElastiCache for Redis target costs (brokerbench.cost adds it to a run's estimate): prices.json beside
this module holds the list prices, dated, with their source."""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path

from ...cost import hours_text, line_item

PRICES_FILE = Path(__file__).with_name("prices.json")
DEFAULT_NODES = 1  # cloud.py: NumCacheClusters = provision.redis-streams.nodes (a primary and its replicas)


@cache
def prices() -> dict:
    return json.loads(PRICES_FILE.read_text())


def price(broker: str, settings: dict, life_s: float) -> tuple[list[dict], list[str]]:
    """Node-hours for `life_s` (a partial node-hour billed as a full one), with the run's provision settings."""
    table = prices()
    node_type = settings.get("node_type", "cache.r7g.large")
    rate = table["node_hour"].get(node_type)
    if rate is None:
        return [], [f"{broker}: no list price for {node_type} in brokers/redis_streams/prices.json: its node-hours "
                    "are not counted"]
    billed = math.ceil(life_s / 3600 - 1e-9)  # a partial node-hour is billed as a full one
    nodes = settings.get("nodes", DEFAULT_NODES)
    return [line_item(f"{broker}: ElastiCache {node_type}, {nodes} node{'s' if nodes > 1 else ''} × "
                      f"{hours_text(life_s)} (billed as {billed} h)", nodes * billed, "node-hour", rate)], \
        [f"{broker}: ElastiCache node-hours are billed per started hour (brokers/redis_streams/prices.json, "
         f"{table['region']}, as of {table['as_of']})."]
