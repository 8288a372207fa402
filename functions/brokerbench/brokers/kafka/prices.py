"""What an Amazon MSK target costs (brokerbench.cost adds it to a run's estimate): prices.json beside this
module holds the list prices, dated, with their source."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from ...cost import HOURS_PER_MONTH, hours_text, line_item

PRICES_FILE = Path(__file__).with_name("prices.json")
DEFAULT_NODES = 3  # cloud.py: NumberOfBrokerNodes when provision.kafka.nodes is omitted


@cache
def prices() -> dict:
    return json.loads(PRICES_FILE.read_text())


def price(broker: str, settings: dict, life_s: float) -> tuple[list[dict], list[str]]:
    """Broker-hours (billed per second) and storage for `life_s`, with the run's provision.kafka settings."""
    table = prices()
    instance = settings.get("instance_type", "kafka.m7g.large")
    nodes = settings.get("nodes", DEFAULT_NODES)
    volume = settings.get("volume_gb", 100)
    rate = table["broker_hour"].get(instance)
    if rate is None:
        return [], [f"{broker}: no list price for {instance} in brokers/kafka/prices.json: its broker-hours are not "
                    "counted"]
    hours = life_s / 3600
    return [line_item(f"{broker}: Amazon MSK {instance}, {nodes} brokers × {hours_text(life_s)}", nodes * hours,
                      "broker-hour", rate),
            line_item(f"{broker}: Amazon MSK storage, {nodes} × {volume} GB for {hours_text(life_s)}",
                      nodes * volume * hours / HOURS_PER_MONTH, "GB-month", table["storage_gb_month"])], \
        [f"{broker}: Amazon MSK broker-hours are billed per second (brokers/kafka/prices.json, {table['region']}, "
         f"as of {table['as_of']})."]
