"""Spend guards in the run request: what a run may provision in AWS is allow-listed (the types the cost
estimate has a price for) and capped, and a request beyond that is refused naming the field."""

import json

import pytest

from brokerbench import deployment
from brokerbench.brokers.kafka import prices as msk_prices
from brokerbench.brokers.kafka import settings as kafka
from brokerbench.brokers.redis_streams import prices as elasticache_prices
from brokerbench.brokers.redis_streams import settings as redis
from brokerbench.spec import SpecError, validate

BASE = {"brokers": ["kafka", "redis-streams"], "sizes": [1024], "rates": [100], "formats": ["json"]}


def problems(provision: dict) -> dict[str, str]:
    with pytest.raises(SpecError) as caught:
        validate({**BASE, "provision": provision})
    return {p.path: p.message for p in caught.value.problems}


def test_the_allowed_types_are_exactly_the_priced_ones():
    assert kafka.INSTANCE_TYPES == sorted(json.loads(msk_prices.PRICES_FILE.read_text())["broker_hour"])
    assert redis.NODE_TYPES == sorted(json.loads(elasticache_prices.PRICES_FILE.read_text())["node_hour"])


@pytest.mark.parametrize("provision, field, says", [
    ({"kafka": {"instance_type": "kafka.m5.24xlarge"}}, "provision.kafka.instance_type", "'kafka.m5.24xlarge' is not one of"),
    ({"kafka": {"nodes": 7}}, "provision.kafka.nodes", "7 is greater than the maximum of 6"),
    ({"kafka": {"nodes": 30}}, "provision.kafka.nodes", "greater than the maximum of 6"),
    ({"kafka": {"volume_gb": 1001}}, "provision.kafka.volume_gb", "1001 is greater than the maximum of 1000"),
    ({"kafka": {"volume_gb": 16384}}, "provision.kafka.volume_gb", "greater than the maximum of 1000"),
    ({"redis-streams": {"node_type": "cache.r7g.16xlarge"}}, "provision.redis-streams.node_type",
     "'cache.r7g.16xlarge' is not one of"),
])
def test_a_request_beyond_the_guards_is_refused_naming_the_field(provision, field, says):
    found = problems(provision)
    assert field in found and says in found[field], found


def test_the_largest_allowed_request_and_the_defaults_pass():
    largest = validate({**BASE, "provision": {"kafka": {"instance_type": "kafka.m7g.2xlarge", "nodes": 6,
                                                        "volume_gb": 1000},
                                              "redis-streams": {"node_type": "cache.r7g.xlarge"}}})
    assert largest["provision"]["kafka"]["nodes"] == 6
    defaults = validate(BASE)["provision"]
    assert defaults["kafka"]["instance_type"] in kafka.INSTANCE_TYPES
    assert defaults["redis-streams"]["node_type"] in redis.NODE_TYPES


@pytest.mark.parametrize("value, says", [("12000", "Lambda memory is 128 to 10240 MB"), ("64", "128 to 10240"),
                                         ("lots", "a whole number of MB")])
def test_a_worker_memory_outside_lambdas_range_is_refused_naming_the_setting(value, says):
    with pytest.raises(ValueError, match="brokerbench:workerMemoryMb") as caught:
        deployment.lambda_memory_mb(value, "brokerbench:workerMemoryMb")
    assert says in str(caught.value)
    assert deployment.lambda_memory_mb("3,008", "x") == 3008


def test_schedules_deployed_off_are_all_shown_disabled(monkeypatch):
    """In AWS the API says what the deploy did: with schedules off (the default deploy), none is enabled or
    due, whatever schedules.json says; unset (locally), the file's own `enabled`."""
    from datetime import datetime, timezone

    from brokerbench import schedules
    from brokerbench.events.memory import MemoryEventStore

    monkeypatch.delenv(schedules.DEPLOYED_ENV, raising=False)
    as_written = schedules.deployed()
    assert any(s.enabled for s in as_written) and as_written == schedules.load()
    monkeypatch.setenv(schedules.DEPLOYED_ENV, "off")
    off = schedules.deployed()
    assert [s.name for s in off] == [s.name for s in as_written] and not any(s.enabled for s in off)
    described = schedules.describe(off, MemoryEventStore(), datetime(2026, 11, 26, tzinfo=timezone.utc))
    assert all(d["enabled"] is False and d["next_due"] is None for d in described)
    monkeypatch.setenv(schedules.DEPLOYED_ENV, "on")
    assert schedules.deployed() == as_written
