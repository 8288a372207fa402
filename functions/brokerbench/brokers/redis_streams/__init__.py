"""Redis Streams: the redis-py/hiredis driver, a local redis-server, ElastiCache for Redis in the cloud."""

from .. import Capabilities, Cloud, CloudFault, CloudQuota, Plugin, Settings
from . import cloud_access, settings
from .local import RedisService

PLUGIN = Plugin(
    name="redis-streams",
    description="Redis Streams (XADD, consumer groups) through redis-py with hiredis",
    family="redis",
    driver="brokerbench.brokers.redis_streams.driver:RedisStreamsDriver",
    settings=Settings(target=settings.TARGET, provision=settings.PROVISION, client=settings.CLIENT),
    capabilities=Capabilities(
        modes={"batch": "up to pipeline_depth XADDs in flight (pipelined)",
               "single": "one XADD in flight: each send waits for its reply"},
        partitions="stream keys <topic>-<n>, read by one consumer group",
        persistence={"aof-everysec": "AOF on, appendfsync everysec (the local stack's default)",
                     "no-aof": "in memory only (`--no-aof`)"},
    ),
    environment="brokerbench.brokers.redis_streams.environment:settings_in_force",
    caption="brokerbench.brokers.redis_streams.environment:caption",
    durability="brokerbench.brokers.redis_streams.environment:durability",
    local=RedisService(),
    # prices: brokers/redis_streams/prices.py; creation_s: a one-node replication group about 10 min
    cloud=Cloud(service="ElastiCache for Redis", factory="brokerbench.brokers.redis_streams.cloud:provider",
                prices="brokerbench.brokers.redis_streams.prices:price", creation_s=10 * 60,
                quota=CloudQuota(service_code="elasticache", name="Nodes per Region", code=None, unit="nodes",
                                 client="elasticache", need="brokerbench.brokers.redis_streams.cloud:quota_need",
                                 in_use="brokerbench.brokers.redis_streams.cloud:quota_in_use"),
                access=cloud_access.ACCESS,
                fault=CloudFault(call="elasticache:TestFailover",
                                 does="fails the replication group's primary over to a replica",
                                 hooks="brokerbench.brokers.redis_streams.cloud_faults", targets=("leader",))),
    libraries=("redis", "hiredis"),
    cluster="brokerbench.brokers.redis_streams.faults",
)
