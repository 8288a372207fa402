"""RabbitMQ streams over the stream protocol (spoken by the native send loop and, on one node reached directly, by
the Python loop and the consumer themselves; rstream on a cluster or behind a fault's proxies), on the local RabbitMQ
node that rabbitmq-quorum shares."""

from .. import Capabilities, Plugin, Settings
from ..rabbitmq import settings
from ..rabbitmq.local import SERVICE

PLUGIN = Plugin(
    name="rabbitmq-streams",
    description="RabbitMQ streams (an append-only log) over the stream protocol: publish confirms, stored consumer "
                "offsets",
    family="rabbitmq-stream",  # a named target with "driver": "rabbitmq-stream" is served by streams
    driver="brokerbench.brokers.rabbitmq_streams.driver:RabbitMQStreamsDriver",
    settings=Settings(target=settings.TARGET, provision=settings.PROVISION, client=settings.CLIENT),
    capabilities=Capabilities(
        modes={"batch": "up to rabbitmq_in_flight messages published and not yet confirmed, sent as one publish "
                        "frame per partition per poll",
               "single": "one message in flight: each publish waits for its confirm"},
        partitions="a stream <topic>-<n> each",
        persistence={"replicated-no-fsync": "written to the leader's segment file and a majority of replicas "
                                            "before the confirm, never fsynced (one replica on the local node)"},
    ),
    environment="brokerbench.brokers.rabbitmq_streams.environment:settings_in_force",
    caption="brokerbench.brokers.rabbitmq_streams.environment:caption",
    durability="brokerbench.brokers.rabbitmq_streams.environment:durability",
    local=SERVICE,
    libraries=("rstream",),
    # the cluster's hooks are the quorum queues': a stream's leader as the management API names it. Its Python
    # clients follow a failover (driver module docstring); a cell with faults does not use the native loop
    cluster="brokerbench.brokers.rabbitmq.faults",
)
